"""The emulation's device numerics (targets/ascend/emu/emu_reduce_cast.h, emu_vector_core.h).

Sums follow AscendC's documented order (ReduceSum / WholeReduceSum docs): a binary tree of
adjacent lanes per repeat, every add rounded to the operand type; across repeats ReduceSum's
count form sums the partials in sequence on Atlas A2/A3 ("method 2"), its mask form by a
tree ("method 1"). Inputs are chosen so that tree order, sequential float32 and exact
(double) summation give three different bit patterns; the same kernels built with
OPGEN_EMU_EXACT (the old mode, kept for debugging) give the exact sums: a positive control
that these tests can tell the modes apart.

Cost: two g++ runs (~12 s of CPU, concurrent), then a few tiny launches.
"""
from __future__ import annotations


import numpy as np
import pytest

from test_ascend_emu import CASES, CXX, EmuLib, build_libs

pytestmark = pytest.mark.skipif(CXX is None, reason="g++ not found: the AscendC emulation needs a C++17 compiler")

TWO24 = 2.0 ** 24


@pytest.fixture(scope="module")
def libs(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("ascend_numerics")
    builds = {"device": [], "exact": ["-DOPGEN_EMU_EXACT"]}
    return build_libs(CASES / "numerics.cpp", builds, out)


def launch(lib: EmuLib, kernel: str, x: np.ndarray, n: int, mode: int, out_len: int, out_dtype) -> np.ndarray:
    y = np.zeros(out_len, out_dtype)
    status, msg = lib.launch(kernel, 1, [x, y, None, np.array([n, mode], np.uint32)])
    assert status == 0, msg
    return y


def reduce_f32(lib, x: np.ndarray, mode: int) -> np.ndarray:
    return launch(lib, "num_reduce_float", x.astype(np.float32), len(x), mode, 256, np.float32)


def sequential_f32(values) -> np.float32:
    acc = np.float32(0)
    for v in values:
        acc = np.float32(acc + np.float32(v))
    return acc


def test_reduce_sum_within_a_repeat_is_an_f32_binary_tree(libs):
    # Tree: (1 + 2^24) -> 2^24 (tie to even), (1 - 2^24) = -16777215, sum 1.
    # Sequential float32: 1 + 2^24 -> 2^24, + 1 -> 2^24, - 2^24 -> 0. Exact: 2.
    x = np.zeros(64, np.float32)
    x[:4] = [1, TWO24, 1, -TWO24]
    assert sequential_f32(x) == 0 and x.astype(np.float64).sum() == 2
    for mode in (0, 1, 2):                         # ReduceSum count form, WholeReduceSum, mask form
        assert reduce_f32(libs["device"], x, mode)[0] == 1.0, mode
        assert reduce_f32(libs["exact"], x, mode)[0] == 2.0, mode


def test_reduce_sum_across_repeats_in_the_documented_order(libs):
    """Four repeats, one non-zero lane each: the count form (A2: sequential partials) gives 0,
    the mask form (tree over the partials) 1, exact summation 2."""
    x = np.zeros(256, np.float32)
    x[[0, 64, 128, 192]] = [1, TWO24, 1, -TWO24]
    dev = libs["device"]
    np.testing.assert_array_equal(reduce_f32(dev, x, 1)[:4], [1, TWO24, 1, -TWO24])   # per-repeat sums
    assert reduce_f32(dev, x, 0)[0] == 0.0
    assert reduce_f32(dev, x, 2)[0] == 1.0
    assert reduce_f32(libs["exact"], x, 0)[0] == 2.0 and reduce_f32(libs["exact"], x, 2)[0] == 2.0


def test_reduce_sum_rounds_every_add_on_random_data(libs, rng):
    """On ordinary data the tree's float32 result differs from the double sum by rounding only,
    and matches a numpy restatement of the tree bit for bit."""
    x = rng.standard_normal(1024).astype(np.float32) * np.float32(1000)

    def tree(v):
        v = list(v)
        while len(v) > 1:
            v = [np.float32(v[i] + v[i + 1]) for i in range(0, len(v), 2)]
        return v[0]
    partials = [tree(x[r * 64:(r + 1) * 64]) for r in range(16)]
    expected = sequential_f32(partials)                                  # A2's count form
    got = reduce_f32(libs["device"], x, 0)[0]
    assert got.view(np.uint32) == expected.view(np.uint32)
    assert abs(float(got) - x.astype(np.float64).sum()) <= 16 * 7 * 2.0 ** -24 * np.abs(x).sum()


def test_half_reduce_saturates_as_documented(libs):
    """The docs' example: [60000, 60000, -30000, 100] gives 65504 - 29900 = 35604 (the first
    add saturates at 65504), in real arithmetic; in half each add rounds: -29900 -> -29904,
    65504 - 29904 = 35600 -> 35584 (a tie, to even). The exact sum, 90100, overflows half."""
    x = np.zeros(128, np.float16)
    x[:4] = [60000, 60000, -30000, 100]
    y = launch(libs["device"], "num_reduce_half", x, 128, 0, 256, np.float16)
    assert np.float16(-30000) + np.float16(100) == -29904
    assert y[0] == np.float16(65504) + np.float16(-29904) == 35584
    assert np.isinf(launch(libs["exact"], "num_reduce_half", x, 128, 0, 256, np.float16)[0])


def test_half_add_rounds_to_nearest_even_in_half(libs):
    a = np.array([2048, 2048, 1, 1, 65504, -2048] + [0] * 122, np.float16)
    b = np.array([1, 3, 2.0 ** -11, 3 * 2.0 ** -11, 16, -1] + [0] * 122, np.float16)
    y = launch(libs["device"], "num_add_half", np.concatenate([a, b]), 128, 0, 128, np.float16)
    # Ties to even: 2049 -> 2048, 2051 -> 2052, 1 + 2^-11 -> 1, 1 + 3*2^-11 -> 1 + 2^-9; 65520 -> inf.
    np.testing.assert_array_equal(y[:6], np.array([2048, 2052, 1, 1 + 2.0 ** -9, np.inf, -2048], np.float16))
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(y.view(np.uint16), (a + b).view(np.uint16))   # numpy's half add


CAST_TABLE = {      # x: CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND (half away from zero), CAST_TRUNC
    0.5: (0, 0, 1, 1, 0), 1.5: (2, 1, 2, 2, 1), 2.5: (2, 2, 3, 3, 2), -0.5: (0, -1, 0, -1, 0),
    -1.5: (-2, -2, -1, -2, -1), -2.5: (-2, -3, -2, -3, -2), 1.25: (1, 1, 2, 1, 1), -1.75: (-2, -2, -1, -2, -1),
    3e9: (2147483647,) * 5, -3e9: (-2147483648,) * 5, 7.0: (7,) * 5,
}


CAST_INT8_TABLE = {  # half x: CAST_NONE (= RINT), CAST_RINT, FLOOR, CEIL, ROUND (half away from zero), TRUNC
    0.5: (0, 0, 0, 1, 1, 0), 1.5: (2, 2, 1, 2, 2, 1), 2.5: (2, 2, 2, 3, 3, 2), -0.5: (0, 0, -1, 0, -1, 0),
    -2.5: (-2, -2, -3, -2, -3, -2), -1.75: (-2, -2, -2, -1, -2, -1), 126.5: (126, 126, 126, 127, 127, 126),
    127.5: (127,) * 6, -128.5: (-128,) * 6, 300.0: (127,) * 6, -65504.0: (-128,) * 6,
    np.inf: (127,) * 6, 7.0: (7,) * 6,      # saturating: Cast.md's 2^7 - 0.5 -> 2^7 - 1 under CAST_RINT
}


def test_cast_half_to_int8_rounds_by_mode_and_saturates(libs):
    """The half -> int8_t Cast a float32 int8 store goes through (targets/ascend/emitter.py
    via_half): rounded in its mode, saturated to [-128, 127], CAST_NONE meaning CAST_RINT."""
    keys = list(CAST_INT8_TABLE)
    x = np.resize(np.array(keys, np.float16), 64)
    y = launch(libs["device"], "num_cast_int8", x, 64, 0, 6 * 64, np.int8).reshape(6, 64)
    for col, key in enumerate(keys):
        assert tuple(y[:, col]) == CAST_INT8_TABLE[key], key


def test_cast_float_to_int32_mode_table(libs):
    keys = list(CAST_TABLE)
    x = np.resize(np.array(keys, np.float32), 64)
    y = launch(libs["device"], "num_cast_int", x, 64, 0, 5 * 64, np.int32).reshape(5, 64)
    for col, key in enumerate(keys):
        assert tuple(y[:, col]) == CAST_TABLE[key], key
