"""The emulation's pipe-level timing model (targets/ascend/emu/emu_timing.h), validated on
hand-computable AscendC kernels (tests/ascend_emu_cases/timing.cpp).

Every expected time below is computed here, by hand or by a few lines of recurrence that
restate the model's rules for that one kernel; the emulation must agree exactly. Positive
controls: the same recurrences with the events ignored give other numbers, so a model that
ignored the code's synchronisation would fail. These check that the C++ follows the model's
stated rules, on round parameters; they say nothing about the hardware. Where the product's
parameters come from (a public measurement or an assumed range, one table) is checked by
tests/test_ascend_timing_constants.py, and what the ranges do to the headline ratios is in
docs/ascend-timing.md.

Cost: one g++ run (~6 s of CPU), then a dozen tiny launches.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, astuple

import numpy as np
import pytest

from test_ascend_emu import CASES, CXX, EmuLib, build_libs

pytestmark = pytest.mark.skipif(CXX is None, reason="g++ not found: the AscendC emulation needs a C++17 compiler")


@dataclass
class Params:
    """emu_timing.h's TimingParams, in field order (round numbers: the arithmetic stays exact)."""
    clock_hz: float = 1e9
    mte2_bytes_per_cycle: float = 32
    mte3_bytes_per_cycle: float = 64
    dma_latency: float = 100
    gm_bytes_per_cycle: float = 1e6
    vec_head: float = 2
    vec_simple_elems: float = 256
    vec_slow_elems: float = 32
    vec_cast_elems: float = 64
    vec_reduce_cycles: float = 7
    scalar_cycles: float = 1
    gm_scalar_cycles: float = 50
    event_cycles: float = 1
    barrier_cycles: float = 3
    sync_all_cycles: float = 500


P = Params()


@pytest.fixture(scope="module")
def libs(tmp_path_factory) -> dict:
    """The model, and (a positive control) the model with its ordering ablated."""
    out = tmp_path_factory.mktemp("ascend_timing")
    builds = {"model": [], "blind": ["-DOPGEN_EMU_TIMING_IGNORE_SYNC"]}
    return build_libs(CASES / "timing.cpp", builds, out)


@pytest.fixture(scope="module")
def lib(libs) -> EmuLib:
    return libs["model"]


def run(lib: EmuLib, kernel: str, cores: int, n: int, tiles: int = 1, bufs: int = 1, pipe_all: int = 0,
        params: Params = P) -> dict:
    """Launch ``kernel`` and return the model's result (opgen_emu_last_timing)."""
    values = astuple(params)
    lib.lib.opgen_emu_set_timing((ctypes.c_double * len(values))(*values), len(values))
    x = np.arange(cores * tiles * n, dtype=np.float32)
    y = np.zeros_like(x)
    tiling = np.array([n, tiles, bufs, pipe_all], np.uint32)
    status, msg = lib.launch(kernel, cores, [x, y, None, tiling])
    assert status == 0, msg
    out = (ctypes.c_double * 10)()
    lib.lib.opgen_emu_last_timing(out)
    keys = ("cycles", "seconds", "mte2", "v", "mte3", "s", "gm_bytes", "bound_s", "bound_fraction", "cores")
    return dict(zip(keys, out))


def copy_cycles(nbytes: int, bytes_per_cycle: float, p: Params = P) -> float:
    return p.dma_latency + nbytes / bytes_per_cycle


def test_copy_kernel_is_bytes_over_bandwidth_plus_fixed_costs(lib):
    n = 2048
    t = run(lib, "timing_copy", 1, n)
    # MTE2: 100 + 8192/32 = 356; SetFlag 1 on MTE2, WaitFlag 1 on MTE3; MTE3: 100 + 8192/64 = 228.
    assert t["cycles"] == 356 + 1 + 1 + 228 == 586
    assert t["seconds"] == pytest.approx(586e-9)
    assert t["mte2"] == pytest.approx(357 / 586) and t["mte3"] == pytest.approx(229 / 586)
    assert t["v"] == 0 and t["s"] == 0
    assert t["gm_bytes"] == 2 * 8192
    assert t["bound_s"] == pytest.approx(16384 / (1e6 * 1e9))
    assert t["bound_fraction"] == pytest.approx(t["bound_s"] / t["seconds"])


def test_cores_share_the_aggregate_gm_bandwidth(lib):
    """4 cores under an aggregate of 64 B/cycle: 16 B/cycle each, below MTE2's 32 and MTE3's 64."""
    n = 2048
    t = run(lib, "timing_copy", 4, n, params=Params(gm_bytes_per_cycle=64))
    assert t["cycles"] == copy_cycles(8192, 16) + 2 + copy_cycles(8192, 16)
    assert t["bound_fraction"] == pytest.approx((4 * 16384 / 64) / t["cycles"])
    assert run(lib, "timing_copy", 1, n, params=Params(gm_bytes_per_cycle=64))["cycles"] == 586


def test_vector_chain_is_repeats_times_cycles(lib):
    n = 2048                      # 32 repeats of 64 floats
    reps = n * 4 // 256
    simple, slow, cast = 2 + reps * 1, 2 + reps * (64 / 32), 2 + reps * (64 / 64)
    reduce = (2 + reps * 7) + (2 + 1 * 7)           # the per-repeat partials, then their sum
    barriers = 4 * P.barrier_cycles                 # PIPE_V before Add, Mul, Exp, Cast
    expected = 3 * simple + slow + cast + reduce + barriers  # Duplicate, Add, Mul; Exp; Cast; ReduceSum
    t = run(lib, "timing_chain", 1, n)
    assert t["cycles"] == expected == 3 * 34 + 66 + 34 + (226 + 9) + 4 * 3
    assert t["v"] == 1.0 and t["mte2"] == 0


def pipeline_prediction(tiles: int, bufs: int, pipe_all: bool, n: int, p: Params = P, events: bool = True) -> float:
    """The model's rules restated for timing_pipeline (one core). With ``events`` False: the
    same costs with every flag ignored, the model a pipe-blind emulation would have."""
    e = p.event_cycles
    c_in, c_out = copy_cycles(4 * n, p.mte2_bytes_per_cycle), copy_cycles(4 * n, p.mte3_bytes_per_cycle)
    c_v = p.vec_head + 4 * n / 256
    t2 = tv = t3 = ts = 0.0
    free_in, free_out = [0.0] * bufs, [0.0] * bufs
    for i in range(tiles):
        k = i % bufs
        w = (lambda mine, at: max(mine, ts, at)) if events else (lambda mine, at: max(mine, ts))
        t2 = w(t2, free_in[k]) + e                 # inQ.AllocTensor: wait V -> MTE2
        t2 = max(t2, ts) + c_in + e                # DataCopy in; inQ.EnQue: set MTE2 -> V
        enq = t2
        tv = w(tv, enq) + e                        # inQ.DeQue: wait MTE2 -> V
        tv = w(tv, free_out[k]) + e                # outQ.AllocTensor: wait MTE3 -> V
        tv += c_v + e                              # Muls; outQ.EnQue: set V -> MTE3
        enq_out = tv
        tv += e                                    # inQ.FreeTensor: set V -> MTE2
        free_in[k] = tv
        t3 = w(t3, enq_out) + e                    # outQ.DeQue: wait V -> MTE3
        t3 += c_out + e                            # DataCopy out; outQ.FreeTensor: set MTE3 -> V
        free_out[k] = t3
        if pipe_all:
            t2 = tv = t3 = ts = max(t2, tv, t3, ts) + p.barrier_cycles
    return max(t2, tv, t3, ts)


@pytest.mark.parametrize("bufs,pipe_all", [(2, 0), (1, 0), (2, 1), (1, 1)])
def test_pipeline_matches_the_predicted_schedule(lib, bufs, pipe_all):
    tiles, n = 6, 1024
    t = run(lib, "timing_pipeline", 1, n, tiles, bufs, pipe_all)
    assert t["cycles"] == pytest.approx(pipeline_prediction(tiles, bufs, bool(pipe_all), n), abs=1e-9)


def test_double_buffering_and_pipe_all_cost_what_the_model_predicts(lib):
    tiles, n = 6, 1024
    got = {(b, a): run(lib, "timing_pipeline", 1, n, tiles, b, a)["cycles"] for b in (1, 2) for a in (0, 1)}
    want = {k: pipeline_prediction(tiles, k[0], bool(k[1]), n) for k in got}
    # Removing the double buffering, or adding a needless PIPE_ALL, raises the time by exactly
    # the predicted amount (and by something: the tiles overlapped before).
    assert got[(1, 0)] - got[(2, 0)] == pytest.approx(want[(1, 0)] - want[(2, 0)]) and got[(1, 0)] > got[(2, 0)]
    assert got[(2, 1)] - got[(2, 0)] == pytest.approx(want[(2, 1)] - want[(2, 0)]) and got[(2, 1)] > got[(2, 0)]
    # With a PIPE_ALL per tile nothing overlaps: one tile's stages in sequence, tiles times
    # (MTE2: alloc wait, copy, EnQue; V: DeQue, alloc wait, Muls, EnQue; MTE3: DeQue, copy, free;
    # V's FreeTensor flag runs beside MTE3's copy).
    e = P.event_cycles
    serial = (e + copy_cycles(4 * n, 32) + e) + (e + e + 2 + 4 * n / 256 + e) + (e + copy_cycles(4 * n, 64) + e)
    assert got[(2, 1)] == pytest.approx(tiles * (serial + P.barrier_cycles))
    # Positive control: a model that ignored the events would predict other times.
    for key in ((2, 0), (1, 0)):
        assert pipeline_prediction(tiles, key[0], bool(key[1]), n, events=False) != pytest.approx(got[key])


def test_syncall_joins_the_cores(lib):
    n, extra = 1024, 5
    t = run(lib, "timing_syncall", 3, n, extra)
    vec = 2 + 4 * n / 256
    barrier = P.barrier_cycles
    before = vec + extra * (barrier + vec) + barrier   # core 0's work (a PIPE_V before each Muls), SyncAll's PIPE_ALL
    assert t["cycles"] == pytest.approx(before + P.sync_all_cycles + copy_cycles(4 * n, 64))
    # Busy V over 3 cores: core 0 ran 1 + extra vector instructions and extra barriers, the others one each.
    assert t["v"] == pytest.approx(((3 + extra) * vec + extra * barrier) / (3 * t["cycles"]))


def test_reads_and_writes_share_the_cores_gm_bandwidth(lib):
    """A double-buffered pipeline whose copy-in and copy-out overlap still moves no more than
    the aggregate GM bandwidth allows: at a share of 40 B/cycle per core (under MTE2's 32 +
    MTE3's 64 together), 12 tiles of 4 KB in and out take at least their bytes / 40. (Without
    latency, so that only bandwidth counts: capping each pipe at the share alone would let the
    overlapped copies finish in ~12 x 4096 / 32 cycles and fail this.)"""
    tiles, n = 12, 1024
    free = run(lib, "timing_pipeline", 1, n, tiles, 2, 0, params=Params(dma_latency=0))
    shared = run(lib, "timing_pipeline", 1, n, tiles, 2, 0, params=Params(dma_latency=0, gm_bytes_per_cycle=40))
    assert free["bound_fraction"] < 1e-3
    assert shared["cycles"] >= 2 * tiles * 4 * n / 40 and shared["bound_fraction"] <= 1.0
    assert shared["cycles"] > free["cycles"]


def test_a_model_ignoring_the_synchronisation_fails_these_tests(libs):
    """The same kernels on the model built with OPGEN_EMU_TIMING_IGNORE_SYNC (waits, PIPE_ALL
    and SyncAll joins ignored): the copy kernel's MTE3 no longer waits for MTE2, the pipeline
    misses its predicted schedule, and a needless PIPE_ALL no longer costs what it should."""
    blind, tiles, n = libs["blind"], 6, 1024
    assert run(blind, "timing_copy", 1, 2048)["cycles"] != 586
    for bufs, pipe_all in ((2, 0), (1, 0), (2, 1)):
        got = run(blind, "timing_pipeline", 1, n, tiles, bufs, pipe_all)["cycles"]
        assert got != pytest.approx(pipeline_prediction(tiles, bufs, bool(pipe_all), n)), (bufs, pipe_all)
    cost = run(blind, "timing_pipeline", 1, n, tiles, 2, 1)["cycles"] - run(blind, "timing_pipeline", 1, n, tiles, 2, 0)["cycles"]
    assert cost != pytest.approx(pipeline_prediction(tiles, 2, True, n) - pipeline_prediction(tiles, 2, False, n))
