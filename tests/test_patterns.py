"""Stage patterns every target schedules, shown on toy ops defined only in the tests, so a
real op that needs a pattern lands with its package alone.

* A row pass with two elementwise outputs and two column sums (DeepNorm's shape) is
  matched by the row rule of every target (not the fallback) and is correct everywhere.
* A row pass whose column sums are float32 accumulators rounded to float16 and bfloat16
  outputs in cast stages of their own (LayerNormBackward's half-weight shape): the row rule
  of every target, each sum rounded once after its fixed-order sum (ascend-emu: both
  products, deterministic and atomic sums, split-D).
* The GPU row rule's defaults keep nvcc from spilling registers as accumulators (row sums,
  column sums) add up (LayerNormBackward's float32 shape among them).
* Per-channel sums over N and HW with per-channel scalars (BatchNorm's shape): the channel
  rule of every target (ascend-emu: ChannelTiles, tested in depth in
  tests/test_ascend_channels.py); the statistics are told by what they read, not by where
  TE put them (BatchNormBackward's order), and a sum that needs another sum first is no
  channel pattern. Without an elementwise output (SyncBatchNorm's reduce half) it is a
  channel reduction: ChannelTiles on ascend-emu in one pass, the fallback elsewhere.
  Without a sum over the data, an elementwise output reading per-channel coefficients and a
  one-element sum of a short input (SyncBatchNorm's elemt half) is a channel map: ChannelMap
  on the CPU, the fallback on GPUs, ChannelTiles on ascend-emu (one pass per channel).
* A row pass over (segments, rows, cols) whose column sums restart at every segment, with
  per-segment stages and sums over the segments (AdaLayerNorm's shape): the segmented rule
  of the CPU and GPU targets and ascend-emu's SegmentTiles, correct across chunk, task and
  segment edges; an output reading a segment sum is no such pass.
* The group pattern behind an elementwise prologue (GroupNormSwish's shape: a sigmoid
  over the whole data): the prologue is inlined and the group rules take the rest.
"""
from __future__ import annotations

import numpy as np
import pytest
from tvm import te

from opgen import schedules, verify
from opgen.schedules import patterns
from opgen.targets import get_target

from tiers import tiered
from toy_ops import (build_toy, channel_map, channel_map_reference, channel_pass, channel_pass_blended,
                     channel_pass_reference, channel_reduction, channel_reduction_reference,
                     channel_two_sums_in_sequence, channel_two_sums_in_sequence_reference, check_blended,
                     group_pass_with_prologue, group_pass_with_prologue_reference, row_pass_rounded_column_sums,
                     row_pass_rounded_column_sums_reference, row_pass_with_sums, run_toy, segmented_row_pass,
                     segmented_row_pass_reference, two_output_row_pass, two_output_row_pass_reference)

ROW_RULES = {"llvm": "RowPassWithColumnSums", "cuda": "GpuRowPass", "opencl": "GpuRowPass", "ascend-emu": "RowTiles"}


@pytest.mark.parametrize("target_name", sorted(ROW_RULES))
def test_two_elementwise_outputs_are_the_row_pattern_on_every_target(target_name):
    target = get_target(target_name)
    assert type(schedules.match(two_output_row_pass(), target)).__name__ == ROW_RULES[target_name]


@pytest.mark.parametrize("target_name", ["llvm", "opencl", "ascend-emu"])
def test_two_elementwise_outputs_run_correctly(target_name, rng):
    target = get_target(target_name)
    if not target.can_run():
        pytest.skip(f"{target_name} cannot run here: {target.missing()}")
    if target_name == "ascend-emu":
        target = target.for_product("AtlasA2")
    built = build_toy(two_output_row_pass(), target)
    for rows, cols in ((1, 1), (7, 33), (97, 941), (3, 12290), (0, 8)):
        dy, x = (rng.standard_normal((rows, cols)).astype(np.float32) for _ in range(2))
        g = rng.uniform(0.5, 1.5, cols).astype(np.float32)
        got = run_toy(target, built, [dy, x, g], ["float32"] * 4)
        for out, want in zip(got, two_output_row_pass_reference(dy, x, g)):
            assert out.shape == want.shape
            assert np.all(np.abs(out - want) <= 1e-4 * (1 + np.abs(want)) * max(1, rows) ** 0.5), (rows, cols)


def test_two_elementwise_outputs_compile_with_nvcc():
    cuda = get_target("cuda")
    if not cuda.can_build():
        pytest.skip(f"cuda cannot build here: {cuda.missing()}")
    module, _, _ = build_toy(two_output_row_pass(), cuda)
    reports = cuda.compile_check(module)
    assert all(r.ok for r in reports), [r.error for r in reports]



# ---- column sums rounded to half outputs by cast stages (LayerNorm's half weights) ----------

@pytest.mark.parametrize("target_name", sorted(ROW_RULES))
def test_column_sums_rounded_by_casts_are_the_row_pattern_on_every_target(target_name):
    """The float32 accumulators are column sums, the stages that round them casts (not row
    stages, not a reason to refuse the pattern): before, no row rule matched and the CPU and
    GPU fallbacks summed each column sequentially, ascend-emu emitted nothing."""
    func = row_pass_rounded_column_sums("float16")
    outs, sums, row_stages, casts = patterns.row_pass(schedules.blocks(schedules.pattern_schedule(func)))
    assert [b.name for b in sums] == ["rnd_s16_acc", "rnd_sbf_acc"] and not any(b.writes_output for b in sums)
    assert sorted(b.name for b in casts) == ["rnd_s16", "rnd_sbf"] and [b.name for b in row_stages] == ["rnd_dot"]
    target = get_target(target_name)
    assert type(schedules.match(func, target)).__name__ == ROW_RULES[target_name]


def test_an_accumulator_nothing_rounds_or_a_stage_reading_a_sum_is_not_the_row_pattern():
    """A column sum that is scratch must be rounded into an output by a cast (a stage of
    that sum alone); an output that reads a column sum needs every row first (another pass)."""
    rows, cols = te.var("rows", "int64"), te.var("cols", "int64")
    x = te.placeholder((rows, cols), "float32", name="x")
    g = te.placeholder((cols,), "float32", name="g")
    y = te.compute((rows, cols), lambda r, c: x[r, c] * g[c], name="y")
    j = te.reduce_axis((0, rows), name="j")
    acc = te.compute((cols,), lambda c: te.sum(x[j, c], axis=j), name="acc")
    scaled = te.compute((cols,), lambda c: acc[c] * g[c], name="scaled")
    j2 = te.reduce_axis((0, rows), name="j2")
    s = te.compute((cols,), lambda c: te.sum(x[j2, c], axis=j2), name="s")
    centred = te.compute((rows, cols), lambda r, c: x[r, c] - s[c] / rows.astype("float32"), name="centred")
    for func in (te.create_prim_func([x, g, y, scaled]), te.create_prim_func([x, centred, s])):
        assert patterns.row_pass(schedules.blocks(schedules.pattern_schedule(func))) is None


ROUNDED_SIZES = ((1, 1), (7, 33), (33, 7), (941, 7), (12290, 3), (3, 12290), (0, 8), (5, 0))


def check_rounded_sums(target, built, rng, dtype: str) -> None:
    """Run a built ``row_pass_rounded_column_sums`` over ROUNDED_SIZES (1 to 12290 rows and
    columns, empty) and compare every output with the float64 reference (opgen.verify's
    tolerance for ``dtype`` data; each half output within half an ulp of its own on top)."""
    import ml_dtypes

    for rows, cols in ROUNDED_SIZES:
        dy, x = (rng.standard_normal((rows, cols)).astype(dtype) for _ in range(2))
        got = run_toy(target, built, [dy, x], [dtype, "float16", ml_dtypes.bfloat16])
        for name, out_dtype, out, want in zip(("y", "s16", "sbf"), (dtype, "float16", "bfloat16"), got,
                                              row_pass_rounded_column_sums_reference(dy, x)):
            assert out.shape == want.shape and str(out.dtype) == out_dtype, (name, rows, cols)
            result = verify.compare(name, out, want, dtype, out_dtype)
            assert result.passed, (rows, cols, result)


@pytest.mark.parametrize("target_name", ["llvm", "opencl"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_column_sums_rounded_by_casts_run_correctly(target_name, dtype, rng):
    target = get_target(target_name)
    if not target.can_run():
        pytest.skip(f"{target_name} cannot run here: {target.missing()}")
    check_rounded_sums(target, build_toy(row_pass_rounded_column_sums(dtype), target), rng, dtype)


def assert_infer_shape_sizes_column_sums(kernel, rows: int = 5, cols: int = 7) -> None:
    """The emitted InferShape gives each output its extents, axis by axis from the inputs
    where no input has its shape (the column sums here: (cols,) from a (rows, cols) input)."""
    import ctypes

    sizes = {"rows": rows, "cols": cols}
    shapes = {b.name: [sizes.get(str(e), e) for e in b.shape] for b in kernel.k.buffers}
    face = kernel.k.face
    ins = face.inputs + face.extra
    dims = [int(v) for p in ins for v in shapes[p.tensor]]
    n_out = len(face.outputs)
    out_ranks, out_dims = (ctypes.c_uint32 * n_out)(), (ctypes.c_int64 * (8 * n_out))()
    out_dt = (ctypes.c_int32 * n_out)()
    status = kernel.lib.opgen_emu_infer(face.op_type.encode(), len(ins),
                                        (ctypes.c_uint32 * len(ins))(*[len(shapes[p.tensor]) for p in ins]),
                                        (ctypes.c_int64 * len(dims))(*dims), (ctypes.c_int32 * len(ins))(),
                                        n_out, None, out_ranks, out_dims, out_dt)
    assert status == 0
    for j, out in enumerate(face.outputs):
        want = [int(v) for v in shapes[out.tensor]]
        assert list(out_dims[8 * j:8 * j + out_ranks[j]]) == want, out.name


@pytest.mark.parametrize("product, dtype, knobs", [
    ("AtlasA2", "float32", {}),
    ("Ascend950", "float16", {}),
    ("AtlasA2", "float16", {"sums": "atomic", "cols_per_pass": 1024}),   # workspace rows, split-D
])
def test_column_sums_rounded_by_casts_are_emitted_for_ascend(product, dtype, knobs, rng):
    """The emitter sums each accumulator like any column sum (UB accumulator or workspace
    partials; atomic: one workspace row per accumulator) and only its final pass writes GM,
    rounding the float32 sum into each cast's output."""
    target = get_target("ascend-emu")
    if not target.can_run():
        pytest.skip(f"ascend-emu cannot run here: {target.missing()}")
    target = target.for_product(product)
    func = row_pass_rounded_column_sums(dtype)
    built = build_toy(func, target, knobs)
    check_rounded_sums(target, built, rng, dtype)
    assert_infer_shape_sizes_column_sums(built[0].kernel)
    rule = schedules.match(func, target)   # the host tiling (C++, with the casts' buffers) is the plan's
    for rows, cols in ROUNDED_SIZES:
        plan = rule.tiling(func, target, {**schedules.default_knobs(rule, target), **knobs}, [(rows, cols)])
        got = built[0].kernel.tiling(rows, cols).as_dict()
        assert {k: got[k] for k in ("block_dim", "ub_rows", "ub_cols", "pitch")} == {
            "block_dim": plan.block_dim, "ub_rows": plan.ub_rows, "ub_cols": plan.ub_cols, "pitch": plan.pitch}


def test_column_sums_rounded_by_casts_compile_with_nvcc():
    cuda = get_target("cuda")
    if not cuda.can_build():
        pytest.skip(f"cuda cannot build here: {cuda.missing()}")
    module, _, params = build_toy(row_pass_rounded_column_sums("float16"), cuda)
    # The accumulators stay in the final sum's registers: only the partials reach the workspace.
    assert not {"rnd_s16_acc", "rnd_sbf_acc"} & {p.name for p in params}
    reports = cuda.compile_check(module)
    assert all(r.ok for r in reports), [r.error for r in reports]


# ---- GpuRowPass register pressure: no spill at the default knobs ---------------------------

ACCUMULATOR_MIXES = [
    (1, 1), (2, 1), (4, 1), (2, 2), (4, 4),
    (3, 4),   # spilled 20 B on sm_90 until the final sums were split over partials (schedules/gpu.py)
]


# The mixes that spilled once, in the default tier; (1, 1) is every row op's own (nvcc compiles
# one of each GPU pattern in tests/test_gpu_cuda.py), (2, 2) and (4, 4) lie between the kept ones.
@pytest.mark.parametrize("row_sums, column_sums", tiered(ACCUMULATOR_MIXES, [(2, 1), (4, 1), (3, 4)],
                                                         [f"{r}-{c}" for r, c in ACCUMULATOR_MIXES]))
def test_the_gpu_row_pass_spills_nothing_at_its_defaults(row_sums, column_sums):
    """More than PERSISTENT_ACCUMULATORS accumulators take fixed rows per block instead of the
    persistent grid, where 2 row sums + 1 column sum spilled 32 B and 4 + 1 16-32 B."""
    cuda = get_target("cuda")
    if not cuda.can_build():
        pytest.skip(f"cuda cannot build here: {cuda.missing()}")
    module, _, _ = build_toy(row_pass_with_sums(row_sums, column_sums), cuda)
    reports = cuda.compile_check(module)
    assert all(r.ok for r in reports), [r.error for r in reports]
    assert {r.arch: r.spill_bytes for r in reports} == dict.fromkeys(cuda.archs, 0), [r.kernels for r in reports]

# ---- per-channel sums over N and HW (BatchNorm's shape) ------------------------------------

CHANNEL_RULES = {"llvm": "ChannelPass", "cuda": "GpuChannelPass", "opencl": "GpuChannelPass",
                 "ascend-emu": "ChannelTiles"}


@pytest.mark.parametrize("target_name", sorted(CHANNEL_RULES))
def test_per_channel_sums_are_the_channel_pattern(target_name):
    target = get_target(target_name)
    assert type(schedules.match(channel_pass(), target)).__name__ == CHANNEL_RULES[target_name]


@pytest.mark.parametrize("target_name", ["llvm", "opencl", "ascend-emu"])
def test_per_channel_sums_run_correctly(target_name, rng):
    target = get_target(target_name)
    if not target.can_run():
        pytest.skip(f"{target_name} cannot run here: {target.missing()}")
    if target_name == "ascend-emu":
        target = target.for_product("AtlasA2")
    built = build_toy(channel_pass(), target)
    for shape in ((1, 1, 1), (2, 3, 7), (3, 5, 941), (1, 2, 12290), (4, 33, 49), (0, 3, 5), (2, 0, 4), (2, 3, 0)):
        dy, x = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
        shift = rng.standard_normal(shape[1]).astype(np.float32)
        got = run_toy(target, built, [dy, x, shift], ["float32"] * 3)
        for out, want in zip(got, channel_pass_reference(dy, x, shift)):
            assert out.shape == want.shape
            scale = max(1, shape[0] * shape[2]) ** 0.5
            assert np.all(np.abs(out - want) <= 1e-5 * scale * (1 + np.abs(want))), shape


def test_per_channel_sums_compile_with_nvcc():
    cuda = get_target("cuda")
    if not cuda.can_build():
        pytest.skip(f"cuda cannot build here: {cuda.missing()}")
    module, _, _ = build_toy(channel_pass(), cuda)
    reports = cuda.compile_check(module)
    assert all(r.ok for r in reports), [r.error for r in reports]


# ---- BatchNorm's own order: statistics after a sum, a mode flag and eps as data -------------

def test_statistics_are_told_by_what_they_read_not_by_program_order():
    infos = schedules.blocks(schedules.pattern_schedule(channel_pass_blended()))
    order = {b.name: b.order for b in infos}
    # TE walks from dx: the first sum comes before the statistics (BatchNormBackward's order too).
    assert order["bl_s_dy"] < order["bl_mean"] < order["bl_s_xmu"] and order["bl_s_dy"] < order["bl_inv"]
    _, sums, stages = patterns.channel_pass(infos)
    statistics, later = patterns.split_stages(stages, sums)
    assert [b.name for b in statistics] == ["bl_mean", "bl_inv"]
    assert [b.name for b in later] == ["bl_mdy", "bl_proj", "bl_dw", "bl_db"]


@pytest.mark.parametrize("target_name", ["llvm", "opencl", "ascend-emu"])
def test_statistics_after_a_sum_run_correctly(target_name, rng):
    """Every channel's stages once per channel (a stage of inputs alone under the CPU's
    channel loop was computed for all C channels in every iteration, dx with it), and the
    per-channel outputs (dw, db) written by one thread each on GPUs (their own kernel)."""
    target = get_target(target_name)
    if not target.can_run():
        pytest.skip(f"{target_name} cannot run here: {target.missing()}")
    if target_name == "ascend-emu":
        target = target.for_product("AtlasA2")
    for dtype in (np.float32, np.float16):
        built = build_toy(channel_pass_blended(np.dtype(dtype).name), target)
        for shape in ((1, 1, 1), (2, 3, 7), (3, 5, 941), (0, 3, 5), (2, 0, 4), (2, 3, 0)):
            for training in (True, False):
                check_blended(target, built, rng, shape, dtype, training)


def test_statistics_after_a_sum_compile_with_nvcc():
    cuda = get_target("cuda")
    if not cuda.can_build():
        pytest.skip(f"cuda cannot build here: {cuda.missing()}")
    assert type(schedules.match(channel_pass_blended(), cuda)).__name__ == "GpuChannelPass"
    module, _, _ = build_toy(channel_pass_blended(), cuda)
    reports = cuda.compile_check(module)
    assert all(r.ok for r in reports), [r.error for r in reports]


@pytest.mark.parametrize("target_name", ["llvm", "opencl", "ascend-emu"])
def test_a_sum_of_values_that_need_another_sum_is_not_the_channel_pattern(target_name, rng):
    """seq_s2 reads seq_mu, which reads seq_s1: two passes over the data before the output,
    which no channel rule schedules; the CPU and GPU fallbacks run it (correctly, on llvm)."""
    func = channel_two_sums_in_sequence()
    assert patterns.channel_pass(schedules.blocks(schedules.pattern_schedule(func))) is None
    target = get_target(target_name)
    if target_name == "ascend-emu":
        with pytest.raises(NotImplementedError, match="no Ascend pattern .*test_channel_two_sums"):
            schedules.match(func, target).apply(func, target, {})
        return
    assert "Fallback" in type(schedules.match(func, target)).__name__
    if target_name == "llvm":
        built = build_toy(func, target)
        x = rng.standard_normal((3, 4, 33)).astype(np.float32)
        (got,), (want,) = run_toy(target, built, [x], ["float32"]), channel_two_sums_in_sequence_reference(x)
        assert np.allclose(got, want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("target_name", ["llvm", "opencl", "ascend-emu"])
def test_per_channel_sums_without_an_elementwise_output_are_a_channel_reduction(target_name, rng):
    """Every target's channel rule takes it without its elementwise step (ChannelPass,
    GpuChannelPass, ChannelTiles: one pass over each channel, no tile written). Correct on
    each, empty batches and spatial axes included (zeros)."""
    func = channel_reduction()
    infos = schedules.blocks(schedules.pattern_schedule(func))
    assert patterns.channel_pass(infos) is None
    outs, sums, stages = patterns.channel_reduction(infos)
    assert outs == [] and [b.name for b in sums] == ["red_s1", "red_s2"] and [b.name for b in stages] == ["red_w"]
    assert patterns.channel_reduction(schedules.blocks(schedules.pattern_schedule(channel_pass()))) is None
    target = get_target(target_name)
    want_rule = {"ascend-emu": "ChannelTiles", "llvm": "ChannelPass"}.get(target_name, "GpuChannelPass")
    assert type(schedules.match(func, target)).__name__ == want_rule
    if not target.can_run():
        pytest.skip(f"{target_name} cannot run here: {target.missing()}")
    if target_name == "ascend-emu":
        target = target.for_product("AtlasA2")
    built = build_toy(func, target)
    for shape in ((1, 1, 1), (2, 3, 7), (3, 5, 941), (0, 3, 5), (2, 3, 0)):
        dy, x = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
        shift, scale = (rng.standard_normal(shape[1]).astype(np.float32) for _ in range(2))
        got = run_toy(target, built, [dy, x, shift, scale], ["float32"] * 3)
        for out, want in zip(got, channel_reduction_reference(dy, x, shift, scale)):
            scale_ = max(1, shape[0] * shape[2]) ** 0.5
            assert out.shape == want.shape and np.all(np.abs(out - want) <= 1e-5 * scale_ * (1 + np.abs(want))), shape


@pytest.mark.parametrize("target_name", ["llvm", "opencl", "ascend-emu"])
def test_per_channel_coefficients_from_a_call_sum_are_a_channel_map(target_name, rng):
    """No sum over N and HW, so no channel pass; the call sum (a counter's total) and the
    per-channel stages come first, the output reads them. Correct on the CPU rule, the GPU
    fallback and ascend-emu's ChannelTiles (the call sum a scalar loop once per core, one
    pass per channel), empty axes and counters of 1 to 8 elements included."""
    func = channel_map()
    infos = schedules.blocks(schedules.pattern_schedule(func))
    assert patterns.channel_pass(infos) is None and patterns.channel_reduction(infos) is None
    outs, call_sums, stages = patterns.channel_map(infos)
    assert [b.name for b in outs] == ["map_y"] and [b.name for b in call_sums] == ["map_total", "map_inv"]
    assert sorted(b.name for b in stages) == ["map_a", "map_b"]
    assert patterns.channel_map(schedules.blocks(schedules.pattern_schedule(channel_pass()))) is None
    target = get_target(target_name)
    want_rule = {"llvm": "ChannelMap", "opencl": "GpuFallback", "ascend-emu": "ChannelTiles"}[target_name]
    assert type(schedules.match(func, target)).__name__ == want_rule
    if not target.can_run():
        pytest.skip(f"{target_name} cannot run here: {target.missing()}")
    if target_name == "ascend-emu":
        target = target.for_product("AtlasA2")
    built = build_toy(func, target)
    for shape, k in (((1, 1, 1), 1), ((2, 3, 7), 3), ((3, 5, 941), 2), ((1, 2, 12290), 8), ((0, 3, 5), 2),
                     ((2, 3, 0), 1)):
        dy, x = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
        shift, scale = (rng.standard_normal(shape[1]).astype(np.float32) for _ in range(2))
        counts = rng.uniform(1, 9, k).astype(np.float32)
        (got,) = run_toy(target, built, [dy, x, shift, scale, counts], ["float32"])
        (want,) = channel_map_reference(dy, x, shift, scale, counts)
        assert got.shape == want.shape and np.all(np.abs(got - want) <= 1e-5 * (1 + np.abs(want))), shape


# ---- the group pattern behind an elementwise prologue (GroupNormSwish's shape) -------------

GROUP_RULES = {"llvm": "GroupedRowPass", "cuda": "GpuGroupedRowPass", "opencl": "GpuGroupedRowPass",
               "ascend-emu": "GroupTiles"}


@pytest.mark.parametrize("target_name", sorted(GROUP_RULES))
def test_a_prologue_before_the_group_pattern_is_inlined_and_matched(target_name):
    target = get_target(target_name)
    assert type(schedules.match(group_pass_with_prologue(), target)).__name__ == GROUP_RULES[target_name]
    names = [b.name for b in schedules.blocks(schedules.pattern_schedule(group_pass_with_prologue()))]
    assert "pro_p" not in names and {"pro_ds", "pro_db", "pro_y"} <= set(names)


@pytest.mark.parametrize("target_name", ["llvm", "opencl", "ascend-emu"])
def test_a_prologue_before_the_group_pattern_runs_correctly(target_name, rng):
    target = get_target(target_name)
    if not target.can_run():
        pytest.skip(f"{target_name} cannot run here: {target.missing()}")
    if target_name == "ascend-emu":
        target = target.for_product("AtlasA2")
    built = build_toy(group_pass_with_prologue(), target)
    for shape in ((1, 1, 1, 1), (2, 3, 4, 7), (2, 2, 3, 941), (0, 2, 2, 3), (2, 2, 2, 0)):
        dy, x = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
        got = run_toy(target, built, [dy, x], ["float32"] * 2)
        for out, want in zip(got, group_pass_with_prologue_reference(dy, x)):
            assert out.shape == want.shape
            assert np.all(np.abs(out - want) <= 1e-5 * max(1, shape[3]) ** 0.5 * (1 + np.abs(want))), shape


# ---- column sums restarting at every segment (AdaLayerNorm's per-sample sums) -----------------

SEGMENTED_RULES = {"llvm": "SegmentedRowPass", "cuda": "GpuSegmentedRowPass", "opencl": "GpuSegmentedRowPass",
                   "ascend-emu": "SegmentTiles"}


@pytest.mark.parametrize("target_name", sorted(SEGMENTED_RULES))
def test_column_sums_per_segment_are_the_segmented_pattern(target_name):
    """Sums over each segment's rows (SSR over (segments, cols, rows)) are no row_pass
    column sums (those run over all rows): without the segmented pattern every target ran
    its fallback."""
    func = segmented_row_pass()
    outs, sums, row_stages, stages, batch_sums, casts = patterns.segmented_row_pass(
        schedules.blocks(schedules.pattern_schedule(func)))
    names = lambda part: sorted(b.name for b in part)  # noqa: E731
    assert (names(outs), names(sums), names(row_stages)) == (["seg_y"], ["seg_s1", "seg_s2"], ["seg_dot"])
    assert (names(stages), names(batch_sums), names(casts)) == (["seg_p"], ["seg_t", "seg_u_acc"], ["seg_u"])
    assert type(schedules.match(func, get_target(target_name))).__name__ == SEGMENTED_RULES[target_name]


def test_an_output_reading_a_segment_sum_is_not_the_segmented_pattern():
    """The elementwise output must not read a segment's sum: that needs every row of the
    segment first (another pass)."""
    segs, rows, cols = (te.var(n, "int64") for n in ("segs", "rows", "cols"))
    x = te.placeholder((segs, rows, cols), "float32", name="x")
    j = te.reduce_axis((0, rows), name="j")
    s = te.compute((segs, cols), lambda b, c: te.sum(x[b, j, c], axis=j), name="s")
    centred = te.compute((segs, rows, cols), lambda b, r, c: x[b, r, c] - s[b, c], name="centred")
    func = te.create_prim_func([x, centred, s])
    assert patterns.segmented_row_pass(schedules.blocks(schedules.pattern_schedule(func))) is None


@pytest.mark.parametrize("target_name", ["llvm", "opencl", "ascend-emu"])
def test_column_sums_per_segment_run_correctly(target_name, rng):
    """Chunks of rows (8 here; ascend-emu: a task's rows, 8 per UB pass) never cross a
    segment: 1 to 130 rows a segment, partial last chunks, empty axes; every output against
    the float64 reference."""
    target = get_target(target_name)
    if not target.can_run():
        pytest.skip(f"{target_name} cannot run here: {target.missing()}")
    knobs = {"llvm": {"rows_per_chunk": 8}, "ascend-emu": {"rows_per_pass": 8}}.get(target_name, {"rows_per_block": 8})
    if target_name == "ascend-emu":
        target = target.for_product("AtlasA2")
    built = build_toy(segmented_row_pass(), target, knobs)
    for shape in ((1, 1, 1), (2, 3, 7), (3, 130, 33), (5, 9, 300), (0, 3, 4), (2, 0, 5), (2, 3, 0)):
        dy, x = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
        w = rng.uniform(0.5, 1.5, (shape[0], shape[2])).astype(np.float32)
        got = run_toy(target, built, [dy, x, w], ["float32", "float32", "float32", "float16"])
        for out, want in zip(got, segmented_row_pass_reference(dy, x, w)):
            assert out.shape == want.shape, shape
            tol = (1e-4 if out.dtype == np.float32 else 1e-3) * (1 + np.abs(want)) * max(1, shape[0] * shape[1]) ** 0.5
            assert np.all(np.abs(out - want) <= tol), (shape, out.dtype)
