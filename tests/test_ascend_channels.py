"""ascend-emu, the channel pattern (BatchNorm-like): ChannelTiles and its AscendC emitter.

Toy ops defined only in the tests (tests/toy_ops.py: ``channel_pass``, per-channel sums
that are outputs and a statistic the sums read; ``channel_pass_blended``, BatchNorm's own
order with a mode flag and eps as (1,) data and per-channel outputs rounded to f16/bf16)
are scheduled by the target's own rules, emitted, built with g++ against the emulation and
run on emulated cores, then compared with float64 references through opgen.verify's
tolerances. Covered: every product (with and without DataCopyPad), every mode (channel,
rows, hw-chunk, empty), ragged sizes, N = 0, HxW = 0, C = 0, the knobs (several passes per
channel, buffer_num 1 and 2) and their refusals, the host tiling in C++ against its Python
mirror, the UB the kernel allocates and the GM bytes it moves against the plan, and a
positive control (a wrong GM stride makes the comparison fail).

Cost: 11 distinct kernels, one g++ run each (~12 s on the shared 2-core machine, then
cached on disk under OPGEN_CACHE_DIR): ~2-3 min cold, ~30 s warm.
"""
from __future__ import annotations

import ctypes
import functools

import ml_dtypes
import numpy as np
import pytest

from opgen import schedules, verify
from opgen.schedules import InvalidKnobs, default_knobs
from opgen.schedules.ascend import ChannelTiles
from opgen.schedules.ascend_tiling import CopyAlignmentError, UbBudgetError
from opgen.schedules.ascend_tiling_channels import CHANNELS_PER_COPY
from opgen.targets import get_target
from opgen.targets.ascend import build as emu_build
from opgen.targets.ascend.emit_channels import CHANNEL_MODES
from opgen.targets.ascend.hardware import DESCRIPTIONS

from tiers import tiered
from toy_ops import (build_toy, channel_batch_weights, channel_batch_weights_reference, channel_pass,
                     channel_pass_blended, channel_pass_reference, check_blended, run_toy)

EMU = get_target("ascend-emu")
pytestmark = pytest.mark.skipif(not EMU.can_build(), reason="g++ or the AscendC emulation header is missing")
A2 = EMU.for_product("AtlasA2")
# (N, C, HxW): one element; fewer channels than cores; ragged HxW; a long row (hw-chunk);
# more channels than cores (ragged split); many short rows; empty batch, no channels, empty HxW.
SHAPES = ((1, 1, 1), (2, 3, 7), (3, 2, 941), (1, 1, 12290), (5, 50, 33), (4, 97, 13), (0, 3, 5), (2, 0, 4),
          (2, 3, 0))
# The same roles in whole 32-byte blocks, for products without DataCopyPad (C and HxW in 8s).
BLOCK_SHAPES = ((2, 16, 16), (3, 8, 64), (1, 24, 12288), (5, 56, 8), (0, 16, 8), (2, 0, 8), (2, 16, 0))


@functools.lru_cache(maxsize=None)
def built(product: str, knobs: tuple = (), toy: str = "channel_pass", dtype: str = "float32"):
    target = EMU.for_product(product)
    func = channel_pass() if toy == "channel_pass" else channel_pass_blended(dtype)
    return target, build_toy(func, target, dict(knobs))


def toy_inputs(rng, shape) -> list:
    dy, x = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    return [dy, x, rng.standard_normal(shape[1]).astype(np.float32)]


def worst_ratio(target, kernel, inputs) -> float:
    """Run the channel_pass toy; the worst ratio to opgen.verify's float32 tolerance (<= 1 passes)."""
    got = run_toy(target, kernel, inputs, ["float32"] * 3)
    worst = 0.0
    for name, out, want in zip(("y", "s1", "s2"), got, channel_pass_reference(*inputs)):
        assert out.shape == want.shape, name
        worst = max(worst, verify.compare(name, out, want, "float32", "float32").ratio)
    return worst


def plan(target, shape, **knobs):
    rule = ChannelTiles()
    return rule.tiling(channel_pass(), target, {**default_knobs(rule, target), **knobs},
                       [shape, shape, (shape[1],)])


def last_stats(kernel) -> list:
    stats = (ctypes.c_uint64 * 4)()
    kernel[0].kernel.lib.opgen_emu_last_stats(stats)
    return list(stats)   # GM bytes read, GM bytes written, peak UB bytes, vector element operations


# ---- the rule, through the target's own path ------------------------------------------------

def test_the_channel_rule_matches_and_the_target_builds_it():
    """get_target("ascend-emu") as opgen resolves it, its own build: ChannelTiles, the
    channel printer, the CANN project files, and no NOT EMITTED refusal."""
    rule, sch = schedules.schedule_with_rule(channel_pass(), EMU)
    assert isinstance(rule, ChannelTiles)
    script = sch.mod.script()
    assert '"ascend.pattern": "channels"' in script and '"ascend.role": "statistic"' in script
    assert '"ascend.role": "channel_sum"' in script and '"ascend.role": "channel_stage"' in script
    module, symbol, _ = build_toy(channel_pass(), EMU)
    assert module.kernel.k.pattern == "channels" and module.kernel.k.workspace_floats(None) == 0
    files = module.files
    assert set(files) == {f"op_kernel/{symbol}.cpp", f"op_kernel/{symbol}_tiling_data.h", f"op_host/{symbol}_tiling.h",
                          f"op_host/{symbol}_tiling.cpp", f"op_host/{symbol}_def.cpp"}
    src = files[f"op_kernel/{symbol}.cpp"]
    assert "(channel pattern)" in src and "SyncAll" not in src and "SetAtomicAdd" not in src
    for pattern in ("DataCopyPad(", "EnQue(", "DeQue<", "FreeTensor(", "ReduceSum<float>", "WholeReduceSum<float>",
                    "GetBlockIdx()", "Sum_chan_s1(n, len);", "Sum_chan_s2(n, len);"):
        assert pattern in src, pattern
    assert 'this->Output("chan_s1")' in files[f"op_host/{symbol}_def.cpp"]
    blended = channel_pass_blended("float16")
    assert isinstance(schedules.match(blended, EMU), ChannelTiles)
    ops = ChannelTiles().operands(blended)
    assert ops.scalars_in == (("eps", "float32"), ("t", "float32")) and ops.sums == ("bl_s_dy", "bl_s_xmu")
    assert ops.statistics == ("bl_mean", "bl_inv") and ops.chan_outs == (("bl_dw", "float16"), ("bl_db", "float16"))


# ---- correctness ------------------------------------------------------------------------------

def test_every_shape_on_atlas_a2_matches_the_reference(rng):
    target, kernel = built("AtlasA2")
    modes = set()
    for shape in SHAPES:
        assert worst_ratio(target, kernel, toy_inputs(rng, shape)) <= 1.0, shape
        modes.add(plan(target, shape).mode)
    assert modes == {"channel", "hw-chunk", "empty"}


# One product of each set of rules in the default tier (Ascend950: its UB and casts; AtlasInference:
# no DataCopyPad, the tree ReduceSum; AtlasA2 is the tests' default); AtlasA3 (A2's rules and sizes)
# and AtlasTraining (Inference's rules, more cores) in the extended tier.
@pytest.mark.parametrize("product", tiered([p for p in DESCRIPTIONS if p != "AtlasA2"], ["Ascend950", "AtlasInference"]))
def test_every_product_matches_the_reference(product, rng):
    target, kernel = built(product)
    shapes = SHAPES if target.hardware.data_copy_pad else BLOCK_SHAPES
    for shape in shapes:
        assert worst_ratio(target, kernel, toy_inputs(rng, shape)) <= 1.0, (product, shape)
    if not target.hardware.data_copy_pad:
        src = kernel[0].files["op_kernel/test_channel_pass.cpp"]
        assert "DataCopyPad(" not in src and "OpgenCopy(" in src
        for ragged in ((3, 7, 8), (3, 8, 5)):        # C or HxW not in whole 32-byte blocks
            with pytest.raises(RuntimeError, match="whole 32-byte blocks"):
                worst_ratio(target, kernel, toy_inputs(rng, ragged))
            with pytest.raises(CopyAlignmentError):
                plan(target, ragged)


@pytest.mark.parametrize("knobs, shape, mode, loops", [
    ((("rows_per_pass", 2), ("buffer_num", 1)), (5, 50, 33), "rows", 3),      # 3 passes of batch rows
    ((("rows_per_pass", 2), ("buffer_num", 1)), (3, 2, 941), "rows", 2),
    ((("hw_per_pass", 256), ("buffer_num", 2)), (3, 2, 941), "hw-chunk", 12),  # 3 rows x 4 chunks
    ((("hw_per_pass", 256), ("buffer_num", 2)), (2, 3, 7), "channel", 1),      # HxW below 256: whole rows
])
def test_knob_points_split_a_channel_into_several_passes(knobs, shape, mode, loops, rng):
    target, kernel = built("AtlasA2", knobs)
    t = plan(target, shape, **dict(knobs))
    assert (t.mode, t.fields["ub_loops"]) == (mode, loops)
    assert kernel[0].kernel.tiling(*shape).mode == CHANNEL_MODES[mode]
    assert worst_ratio(target, kernel, toy_inputs(rng, shape)) <= 1.0


def test_float16_and_bfloat16_data_round_once_and_match(rng):
    """Per-channel inputs and outputs in 16-bit, data cast to float32 in UB, mode flag and
    eps as data: both modes, BatchNorm's stage order."""
    for dtype, np_dtype in (("float16", np.float16), ("bfloat16", ml_dtypes.bfloat16)):
        target, kernel = built("AtlasA2", (), "blended", dtype)
        src = kernel[0].files[f"op_kernel/test_channel_blended_{dtype}.cpp"]
        assert "Cast(o, co_bl_dw_t_, RoundMode::CAST_RINT, nc);" in src               # dw rounded once
        assert "Cast(o, tmp0_t_, RoundMode::CAST_RINT, n * P);" in src                # dx rounded once
        for shape in ((1, 1, 1), (2, 3, 7), (3, 5, 941), (2, 50, 16), (0, 3, 5), (2, 3, 0)):
            for training in (True, False):
                assert check_blended(target, kernel, rng, shape, np_dtype, training) <= 1.0
    with pytest.raises(NotImplementedError, match="bfloat16"):
        built("AtlasTraining", (), "blended", "bfloat16")


def check_batch_weights(target, kernel, rng, shape) -> float:
    """Run the channel_batch_weights toy on ``shape`` (integer weights, one of them 0 from 3
    batch rows on); the worst ratio to opgen.verify's float32 tolerance."""
    x = (rng.standard_normal(shape) + 3.0).astype(np.float32)
    w = rng.integers(1, 50, shape[0]).astype(np.float32)
    if shape[0] >= 3:
        w[shape[0] // 2] = 0.0
    got = run_toy(target, kernel, [x, w], ["float32"] * 3)
    worst = 0.0
    for name, out, want in zip(("sw", "s1", "m"), got, channel_batch_weights_reference(x, w)):
        assert out.shape == want.shape, name
        worst = max(worst, verify.compare(name, out, want, "float32", "float32").ratio)
    return worst


def test_a_per_batch_row_input_is_read_by_the_sums_row_by_row(rng):
    """An (N,) input (a gather's per-rank counts) has no UB home: each sum reads batch row
    b0 + i's value with the scalar unit (a per-row Muls, or value x HxW for the input alone),
    and a sum reading the channel's first element gets it by a scalar GM read at ``ch``.
    Every mode (rows: passes from b0 > 0), N = 0 (the guarded output is 0), HxW = 0, C = 0."""
    ops = ChannelTiles().operands(channel_batch_weights())
    assert ops.batch_in == (("w", "float32"),) and ops.calls_in == () and ops.sums == ("wt_sw", "wt_s1")
    target, kernel = A2, build_toy(channel_batch_weights(), A2)
    src = kernel[0].files["op_kernel/test_channel_batch_weights.cpp"]
    for pattern in ("Sum_wt_sw(ch, b0, n, len);", "Sum_wt_s1(ch, b0, n, len);",
                    "static_cast<float>(g_w_.GetValue(b0 + i)) * static_cast<float>(len);",
                    "static_cast<float>(g_x_.GetValue(((0 * t_.C + ch) * t_.HW + 0)))", "if (t_.N > 0) g_w_."):
        assert pattern in src, pattern
    assert "in_w_" not in src                                   # no UB buffer for it
    modes = set()
    for shape in SHAPES + ((64, 3, 941),):
        assert check_batch_weights(target, kernel, rng, shape) <= 1.0, shape
        modes.add(ChannelTiles().tiling(channel_batch_weights(), target, default_knobs(ChannelTiles(), target),
                                        [shape, (shape[0],)]).mode)
    assert modes == {"channel", "rows", "hw-chunk", "empty"}


@pytest.mark.full
def test_a_per_batch_row_input_without_data_copy_pad(rng):
    target = EMU.for_product("AtlasInference")
    kernel = build_toy(channel_batch_weights(), target)
    for shape in BLOCK_SHAPES + ((64, 8, 944),):
        assert check_batch_weights(target, kernel, rng, shape) <= 1.0, shape


def test_the_sums_are_deterministic_and_empty_cases_write_what_they_must(rng):
    target, kernel = built("AtlasA2")
    inputs = toy_inputs(rng, (7, 50, 129))
    runs = [run_toy(target, kernel, inputs, ["float32"] * 3) for _ in range(3)]
    for out in range(3):
        assert all(np.array_equal(r[out].view(np.uint32), runs[0][out].view(np.uint32)) for r in runs)
    y, s1, s2 = run_toy(target, kernel, toy_inputs(rng, (0, 5, 3)), ["float32"] * 3)   # N = 0: zero sums
    assert y.shape == (0, 5, 3) and np.array_equal(s1, np.zeros(5)) and np.array_equal(s2, np.zeros(5))
    assert kernel[0].kernel.tiling(4, 0, 9).block_dim == 0                          # C = 0: no launch


def test_a_wrong_gm_stride_is_caught_by_the_comparison(rng):
    """Positive control: the same kernel with the batch rows read C x HW - 1 elements apart
    instead of C x HW must fail the comparison (the checks above can fail)."""
    target, kernel = built("AtlasA2")
    files = dict(kernel[0].files)
    name = "op_kernel/test_channel_pass.cpp"
    wrong = files[name].replace("(t_.C * t_.HW - len) * sizeof(float) : 0), (P", "(t_.C * t_.HW - len - 1) * "
                                "sizeof(float) : 0), (P", 1)
    assert wrong != files[name]
    files[name] = wrong
    lib = emu_build.compile_project(files, "test_channel_pass", target.hardware)
    bad = (emu_build.EmuModule("test_channel_pass", emu_build.EmuKernel(lib, kernel[0].kernel.k, target.hardware),
                               files), *kernel[1:])
    inputs = toy_inputs(rng, (4, 6, 40))
    assert worst_ratio(target, kernel, inputs) <= 1.0
    assert worst_ratio(target, bad, inputs) > 1.0


# ---- the host tiling: C++ against its Python mirror, the budget against the kernel ---------------

MIRROR_SHAPES = ((1, 1, 1), (2, 3, 7), (3, 2, 941), (1, 1, 12290), (5, 50, 33), (4, 97, 13), (0, 3, 5), (2, 3, 0),
                 (2, 0, 4), (64, 3000, 49), (2, 20000, 1), (1000, 7, 6000), (4096, 2, 8), (2, 600, 3000000),
                 (1, 48 * 300, 16), (64, 300000, 3000), (64, 400000, 3000), (8, 4096, 256))   # GM gaps near the limits


@pytest.mark.parametrize("product, knobs", [
    ("AtlasA2", ()), ("AtlasA2", (("rows_per_pass", 2), ("buffer_num", 1))),
    ("AtlasA2", (("hw_per_pass", 256), ("buffer_num", 2))), ("Ascend950", ()), ("AtlasTraining", ()),
])
def test_host_tiling_in_cpp_equals_the_python_plan(product, knobs):
    target, kernel = built(product, knobs)
    cpp = kernel[0].kernel
    shapes = MIRROR_SHAPES + BLOCK_SHAPES + ((8, 4096, 4096), (3, 16, 20000), (8, 64, 1024))
    compared, refused = 0, 0
    for shape in shapes:
        try:
            mine = plan(target, shape, **dict(knobs))
        except (UbBudgetError, CopyAlignmentError) as err:
            why = "whole 32-byte blocks" if isinstance(err, CopyAlignmentError) else "do not fit the UB"
            with pytest.raises(RuntimeError, match=why):
                cpp.tiling(*shape)
            refused += 1
            continue
        got = cpp.tiling(*shape).as_dict()
        want = {"block_dim": mine.block_dim, "block_factor": mine.block_factor, "ub_rows": mine.ub_rows,
                "ub_cols": mine.ub_cols, "pitch": mine.pitch, "mode": CHANNEL_MODES[mine.mode],
                "ub_chans": mine.fields.get("ub_chans", 0)}
        assert {k: got[k] for k in want} == want, (product, knobs, shape)
        if mine.buffers:
            ub = {b.name: b.total() for b in mine.buffers}
            assert ub["reduce_work"] == -(-got["work"] * 4 // 32) * 32, shape
        compared += 1
    assert compared >= 6 and compared + refused == len(shapes)


def test_the_kernel_allocates_the_planned_ub_and_moves_the_planned_gm_bytes(rng):
    """The emulation's launch statistics: peak UB bytes of a core's TPipe equal the plan's
    exact budget, and GM bytes read + written equal the plan's traffic (two reads of the
    data in rows / hw-chunk mode, one in channel mode)."""
    for product, knobs, shape in (("AtlasA2", (), (3, 2, 941)), ("AtlasA2", (), (1, 1, 12290)),
                                  ("AtlasA2", (("rows_per_pass", 2), ("buffer_num", 1)), (5, 50, 33)),
                                  ("AtlasTraining", (), (3, 8, 64)), ("AtlasA2", (), (0, 3, 5))):
        target, kernel = built(product, knobs)
        assert worst_ratio(target, kernel, toy_inputs(rng, shape)) <= 1.0
        gm_read, gm_written, ub_peak, _ = last_stats(kernel)
        t = plan(target, shape, **dict(knobs))
        assert ub_peak == t.ub_bytes(target.hardware.block_bytes), (product, shape)
        assert gm_read + gm_written == t.gm_bytes, (product, shape, t.mode)


def test_the_budget_is_exact_to_the_byte():
    # f32 dy, x (2 buffers), y (2), two temporaries; shift, the two sums' staging; 3 rows of
    # 41 elements (pitch 48), 2 channels per core.
    t = plan(A2, (3, 96, 41), rows_per_pass=4)
    tile = 3 * 48 * 4
    assert (t.mode, t.ub_rows, t.pitch, t.block_factor, t.fields["ub_chans"]) == ("channel", 3, 48, 2, 2)
    expected = {"in_dy": 2 * tile, "in_x": 2 * tile, "out_chan_y": 2 * tile, "tmp0": tile, "tmp1": tile,
                "in_shift": 32, "co_chan_s1": 32, "co_chan_s2": 32, "reduce_work": 32 + 32}
    assert {b.name: b.total() for b in t.buffers} == expected
    assert plan(A2, (1, 48 * 1000, 1)).fields["ub_chans"] == min(1000, CHANNELS_PER_COPY)


def test_products_without_data_copy_pad_split_channels_in_whole_blocks():
    training = EMU.for_product("AtlasTraining")                  # 32 cores, 8 floats per block
    t = plan(training, (2, 40, 8))
    assert (t.block_factor, t.block_dim) == (8, 5)               # not ceil(40 / 32) = 2 per core
    assert plan(A2, (2, 100, 8)).block_factor == 3               # CANN's split where DataCopyPad exists
    assert plan(training, (2, 16, 20000), hw_per_pass=256).ub_cols == 256


def test_a_gm_gap_beyond_the_copy_stride_keeps_one_batch_row_per_pass():
    # (C - 1) x HW x 4 B beyond DataCopyPad's uint32 stride: one batch row per copy.
    assert (plan(A2, (64, 400000, 3000)).mode, plan(A2, (64, 400000, 3000)).ub_rows) == ("rows", 1)
    assert plan(A2, (64, 300000, 3000)).ub_rows > 1 and plan(A2, (64, 3, 3000)).ub_rows > 1
    no_pad = EMU.for_product("AtlasInference")                   # DataCopy's stride: uint16 blocks (2 MiB)
    assert plan(no_pad, (8, 4096, 256)).ub_rows == 1 and plan(no_pad, (8, 8, 256)).ub_rows == 8


# ---- knobs -------------------------------------------------------------------------------------

def test_knobs_are_declared_and_refused_with_reasons():
    rule, func = ChannelTiles(), channel_pass()
    assert [k.name for k in rule.knobs(A2)] == ["rows_per_pass", "hw_per_pass", "buffer_num"]
    with pytest.raises(InvalidKnobs, match="no knob"):
        schedules.schedule_with_rule(func, A2, {"sums": "atomic"})
    with pytest.raises(InvalidKnobs, match="outside its domain"):
        schedules.schedule_with_rule(func, A2, {"buffer_num": 3})
    with pytest.raises(InvalidKnobs, match="set one of them"):
        schedules.schedule_with_rule(func, A2, {"rows_per_pass": 4, "hw_per_pass": 1024})
    shapes = {"dy": (3, 40, 941), "x": (3, 40, 941), "shift": (40,)}
    check = lambda **knobs: schedules.check_knobs(rule, knobs, A2, shapes, func)  # noqa: E731
    assert "same tiling as hw_per_pass=0" in check(hw_per_pass=1024)
    assert check(hw_per_pass=256) is None
    assert "only 3 batch rows" in check(rows_per_pass=8)
    assert check(rows_per_pass=4) is None and check(rows_per_pass=2) is None
    big = {"dy": (64, 4, 40000), "x": (64, 4, 40000), "shift": (4,)}
    why = schedules.check_knobs(rule, {"rows_per_pass": 16}, A2, big, func)
    assert why.startswith("infeasible on AtlasA2") and "in_dy" in why and "UB" in why
    why = schedules.check_knobs(rule, {}, EMU.for_product("AtlasTraining"), shapes, func)
    assert why.startswith("infeasible on AtlasTraining") and "DataCopyPad" in why
    single, double = plan(A2, (4096, 2, 2000), buffer_num=1), plan(A2, (4096, 2, 2000), buffer_num=2)
    assert single.ub_rows > double.ub_rows >= 1


def test_the_points_check_knobs_admits_fit_the_ub():
    rule, func = ChannelTiles(), channel_pass()
    shapes = {"dy": (32, 64, 3136), "x": (32, 64, 3136), "shift": (64,)}
    points = [{"rows_per_pass": r, "hw_per_pass": h, "buffer_num": b} for r in (0, 1, 4, 32, 256)
              for h in (0, 256, 8192) for b in (1, 2)]
    valid = [p for p in points if schedules.check_knobs(rule, p, A2, shapes, func) is None]
    assert valid and len(valid) < len(points)
    for point in valid:
        t = rule.tiling(func, A2, point, list(shapes.values()))
        assert t.ub_bytes(A2.hardware.block_bytes) <= A2.hardware.usable_ub_bytes, point


# ---- the cost model and opgen tiling --------------------------------------------------------

def test_the_cost_model_charges_a_second_read_and_single_buffering():
    model = A2.cost_model()
    shape = (8, 64, 256)
    whole, rows = plan(A2, shape), plan(A2, shape, rows_per_pass=4)
    assert (whole.mode, rows.mode) == ("channel", "rows") and rows.gm_bytes > whole.gm_bytes
    assert rows.fields["passes"] == 2 * 2 * whole.fields["passes"]        # 2 passes of 4 rows, read twice
    assert model.time(whole, A2.hardware, {"buffer_num": 2}) < model.time(rows, A2.hardware, {"buffer_num": 2})
    big = plan(A2, (32, 64, 56 * 56))                                     # two reads: hw-chunk or rows
    assert model.time(big, A2.hardware, {"buffer_num": 2}) < model.time(big, A2.hardware, {"buffer_num": 1})
    t = model.time(big, A2.hardware, {"buffer_num": 2})
    assert big.gm_bytes / t < 1.6e12                                       # never faster than the assumed HBM
    assert model.time(plan(A2, (4, 0, 9)), A2.hardware, {}) == pytest.approx(5e-6)   # no launch


def test_opgen_tiling_shows_the_channel_pattern_of_batch_norm_backward(capsys):
    """BatchNormBackward's package lists its cases and why CANN's line is missing."""
    from opgen import cli
    from opgen.targets.ascend import tiling_report

    cases = tiling_report.report_lines("AtlasA2")
    channel = [c for c in cases if c.label.startswith("BatchNormGrad ")]
    assert [c.label.split()[-1] for c in channel] == ["f32", "f16", "f32"]
    assert all(c.cann is None and "TBE kernels" in c.note for c in channel)
    resnet, deep, ragged = (c.opgen for c in channel)
    # 64 channels on 48 cores: 2 per core; one f32 batch row of 3136 per pass (two do not fit).
    assert (resnet.mode, resnet.cores, resnet.per_core, resnet.per_pass) == ("rows", 32, 2, "1 x 3136")
    assert (resnet.sums, resnet.workspace) == ("none", 0) and resnet.ub_bytes <= A2.hardware.usable_ub_bytes
    assert (deep.mode, deep.cores, deep.per_core, deep.per_pass) == ("rows", 48, 43, "108 x 49")
    assert (ragged.mode, ragged.cores, ragged.per_core, ragged.per_pass) == ("channel", 33, 1, "2 x 941")
    assert cli.main(["tiling", "--product", "AtlasA2"]) == 0
    out = capsys.readouterr().out
    assert "BatchNormGrad input[256, 2048, 7, 7] training eps=1e-05 f16" in out and "TBE kernels" in out
    assert out.count("CANN ") == sum(c.cann is not None for c in cases)   # a CANN row only where transcribed
