"""ascend-emu end to end: emitted AscendC, built with g++ -Wall -Werror against the emulation,
run on emulated cores, compared with the float64 reference (tests/test_ascend_emu.py tests the
emulation itself).

Cost: each distinct kernel is one g++ run (~6-10 s on the shared 2-core machine, then cached
on disk under the kernel cache directory); this module builds 18 kernels (5 + 5 combos, 2
atomic, AtlasA2, two products without DataCopyPad, two test-only ops, an injected fault):
~1-3 min cold (g++ took 3-10 s per kernel depending on the machine's load), ~20 s warm
(noisy measurements on a shared 2-core machine).
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import te

from opgen import kernels, verify
from opgen.ops import get_op
from opgen.schedules import ascend as ascend_rules
from opgen.schedules import default_knobs, schedule_with_rule
from opgen.schedules.ascend_tiling import UbBudgetError
from opgen.targets import get_target
from opgen.targets.ascend import build as emu_build

from toy_ops import row_softmax

EMU = get_target("ascend-emu")
pytestmark = pytest.mark.skipif(not EMU.can_build(), reason="g++ or the AscendC emulation header is missing")
RMS = get_op("rms_norm_grad")
Problem = type(RMS.problems[0])
# split-N, ragged 941, small-D (+ ragged 7 over many rows), one row, fewer rows than cores,
# split-D (12290 ragged, 16384 whole), small rows of 640, empty (no rows; no columns).
SHAPES = ((7, 33), (4, 941), (941, 7), (1, 16), (5, 64), (3, 12290), (2, 16384), (49, 640), (0, 16), (3, 0))


def _worst(kernel, shape, rng) -> float:
    comparisons, outputs = verify.run_and_compare(kernel, Problem(shape, 1), rng)
    return max((c.ratio for c in comparisons), default=0.0)


@pytest.mark.parametrize("combo", [c.tag for c in RMS.combos])
def test_rms_norm_grad_every_combo_matches_the_reference(combo, rng):
    kernel = kernels.get_kernel(RMS, combo, EMU)
    for shape in SHAPES:
        assert _worst(kernel, shape, rng) <= 1.0, (combo, shape)


GN = get_op("group_norm_backward")
GnProblem = type(GN.problems[0])
# (N, C, HxW, G): group, ragged group, hw1, channels, channel, hw-chunk, fewer tasks than
# cores, more tasks than cores, empty batch, empty HxW.
GN_SHAPES = ((2, 4, 5, 2), (3, 6, 49, 3), (1, 8, 1, 4), (1, 60, 2000, 2), (2, 4, 5000, 2), (2, 4, 20000, 2),
             (33, 6, 7, 3), (0, 4, 5, 2), (2, 4, 0, 2))


def _gn_worst(kernel, shape, rng) -> float:
    comparisons, _ = verify.run_and_compare(kernel, GnProblem(*shape), rng)
    return max((c.ratio for c in comparisons), default=0.0)


def test_group_shapes_cover_every_group_mode():
    func = te.create_prim_func(GN.compute(GN.combo("f32-f32")))
    rule, _ = schedule_with_rule(func, EMU)
    modes = {rule.tiling(func, EMU, default_knobs(rule, EMU), [(n, g, c // g, hw)]).mode for n, c, hw, g in GN_SHAPES}
    assert modes == {"group", "hw1", "channels", "channel", "hw-chunk", "empty"}


@pytest.mark.parametrize("combo", [c.tag for c in GN.combos])
def test_group_norm_backward_every_combo_matches_the_reference(combo, rng):
    kernel = kernels.get_kernel(GN, combo, EMU)
    for shape in GN_SHAPES:
        assert _gn_worst(kernel, shape, rng) <= 1.0, (combo, shape)


def test_chunked_group_modes_overlap_copy_in_with_compute(rng):
    """hw-chunk (and channel, channels) visits issue the next chunk's copy-in before the
    current chunk's compute, across the task's passes and into the next task: with two
    buffers the pipes overlap (busy fractions add to well over the time), with one they take
    turns; the same bytes either way, the modelled time lower with two, results right."""
    a2 = EMU.for_product("AtlasA2")
    timings = {}
    for buffers in (1, 2):
        kernel = kernels.get_kernel(GN, "f32-f32", a2, knobs={"buffer_num": buffers})
        assert _gn_worst(kernel, (8, 8, 20000, 4), rng) <= 1.0
        timings[buffers] = kernel.module.kernel.last_timing
        func = te.create_prim_func(GN.compute(GN.combo("f32-f32")))
        rule, _ = schedule_with_rule(func, a2)
        knobs = {**default_knobs(rule, a2), "buffer_num": buffers}
        assert rule.tiling(func, a2, knobs, [(8, 4, 2, 20000)]).mode == "hw-chunk"
    assert timings[2].gm_bytes == timings[1].gm_bytes
    overlap = {b: sum(t.busy[p] for p in ("MTE2", "V", "MTE3")) for b, t in timings.items()}
    assert overlap[1] <= 1.01 and overlap[2] > 1.3, overlap
    assert timings[2].seconds < 0.9 * timings[1].seconds, (timings[1].seconds, timings[2].seconds)


def test_group_norm_atomic_sums_and_group_tiling_in_cpp(rng):
    kernel = kernels.get_kernel(GN, "f16-f16", EMU, knobs={"sums": "atomic"})
    for shape in ((33, 6, 7, 3), (2, 4, 20000, 2), (0, 4, 5, 2)):
        assert _gn_worst(kernel, shape, rng) <= 1.0, shape
    func = te.create_prim_func(GN.compute(GN.combo("f16-f16")))
    rule, _ = schedule_with_rule(func, EMU)
    for n, c, hw, g in GN_SHAPES + ((12, 64, 16384, 32), (1, 2130, 1664, 71), (32, 64, 1, 64), (2, 9000, 3, 1)):
        mine = rule.tiling(func, EMU, {**default_knobs(rule, EMU), "sums": "atomic"}, [(n, g, c // g, hw)])
        got = kernel.module.kernel.tiling(n, g, c // g, hw).as_dict()
        assert (got["block_dim"], got["block_factor"], got["ub_rows"], got["ub_cols"], got["pitch"]) == \
            (mine.block_dim, mine.block_factor, mine.ub_rows, mine.ub_cols, mine.pitch), (n, c, hw, g)


def test_atomic_column_sums_and_another_product(rng):
    atomic = kernels.get_kernel(RMS, "f32-f32", EMU, knobs={"sums": "atomic"})
    a2 = kernels.get_kernel(RMS, "bf16-bf16", EMU.for_product("AtlasA2"))
    for shape in ((941, 7), (3, 12290), (5, 64), (0, 16)):
        assert _worst(atomic, shape, rng) <= 1.0, shape
    for shape in ((16, 16), (16, 12288), (130, 16), (16, 12290)):      # CANN's tiling-test shapes
        assert _worst(a2, shape, rng) <= 1.0, shape
    assert "SetAtomicAdd<float>()" in atomic.module.files["op_kernel/rms_norm_grad_f32_f32.cpp"]


def test_deterministic_sums_give_the_same_bits_every_run(rng):
    kernel = kernels.get_kernel(RMS, "f16-f32", EMU)
    inputs = RMS.random_inputs(Problem((941, 96), 1), RMS.combo("f16-f32"), rng)
    runs = [verify.run_and_compare(kernel, Problem((941, 96), 1), rng, inputs)[1]["dgamma"] for _ in range(3)]
    assert all(np.array_equal(r.view(np.uint32), runs[0].view(np.uint32)) for r in runs)
    gn = kernels.get_kernel(GN, "f32-f32", EMU)
    problem = GnProblem(37, 6, 7, 3)
    inputs = GN.random_inputs(problem, GN.combo("f32-f32"), rng)
    runs = [verify.run_and_compare(gn, problem, rng, inputs)[1] for _ in range(3)]
    for name in ("dgamma", "dbeta"):
        assert all(np.array_equal(r[name].view(np.uint32), runs[0][name].view(np.uint32)) for r in runs)


def test_host_tiling_in_cpp_equals_the_schedule_tiling():
    """The emitted op_host tiling function and schedules/ascend_tiling compute the same tiling."""
    for combo in ("f16-f32", "f32-f32"):
        kernel = kernels.get_kernel(RMS, combo, EMU)
        func = te.create_prim_func(RMS.compute(RMS.combo(combo)))
        rule, _ = schedule_with_rule(func, EMU)
        for rows, cols in ((1, 1), (7, 33), (941, 7), (16, 12290), (4, 6080), (4, 6200), (100000, 64), (0, 16)):
            mine = rule.tiling(func, EMU, default_knobs(rule, EMU), [(rows, cols)])
            got = kernel.module.kernel.tiling(rows, cols).as_dict()
            want = {"block_dim": mine.block_dim, "block_factor": mine.block_factor, "ub_rows": mine.ub_rows,
                    "ub_cols": mine.ub_cols, "pitch": mine.pitch}
            assert {k: got[k] for k in want} == want, (combo, rows, cols)
            ub = {b.name: b.total() for b in mine.buffers}
            if mine.buffers:
                assert ub["reduce_work"] == got["work"] * 4 + (-(got["work"] * 4) % 32), (rows, cols)


def test_emitted_project_layout_and_patterns(tmp_path):
    kernel = kernels.get_kernel(RMS, "bf16-bf16", EMU)
    files = kernel.module.files
    stem = "rms_norm_grad_bf16_bf16"
    assert set(files) == {f"op_kernel/{stem}.cpp", f"op_kernel/{stem}_tiling_data.h", f"op_host/{stem}_tiling.h",
                          f"op_host/{stem}_tiling.cpp", f"op_host/{stem}_def.cpp"}
    src = files[f"op_kernel/{stem}.cpp"]
    for pattern in ("DataCopyPad(", "EnQue(", "DeQue<", "FreeTensor(", "Cast(o, ", "RoundMode::CAST_RINT",
                    "WholeReduceSum<float>", "ReduceSum<float>", "SyncAll()", "GetBlockIdx()", "TBuf<TPosition::VECCALC>"):
        assert pattern in src, pattern
    assert "ge::DT_BF16" in files[f"op_host/{stem}_def.cpp"]
    # -Wall -Werror: the build flags; compiling the written project from scratch succeeds.
    assert {"-Wall", "-Werror"} <= set(emu_build.CXXFLAGS)


def test_no_op_names_in_the_ascend_schedule_and_target_code():
    roots = [Path(emu_build.__file__).parent, Path(ascend_rules.__file__).parent]
    sources = [p for p in roots[0].glob("*.py")] + [p for p in roots[1].glob("ascend*.py")]
    # The tiling report is the one exception: it sets opgen's tiling beside CANN's
    # hand-written per-op formulas (a comparison with per-op code, not a generator path).
    sources = [p for p in sources if p.name != "tiling_report.py"]
    for path in sources:
        code = re.sub(r'""".*?"""|#[^\n]*', "", path.read_text(), flags=re.S)
        assert not re.search(r"rms_norm|group_norm", code), path


def _rms_norm_forward():
    """A third op, defined only here: y = x * rsqrt(mean(x^2) + eps) * gamma (float16 io)."""
    rows, cols = te.var("rows", "int64"), te.var("cols", "int64")
    x = te.placeholder((rows, cols), "float16", name="x")
    gamma = te.placeholder((cols,), "float16", name="gamma")
    k = te.reduce_axis((0, cols), name="k")
    ss = te.compute((rows,), lambda r: te.sum(x[r, k].astype("float32") * x[r, k].astype("float32"), axis=k),
                    name="fwd_ss")
    inv = te.compute((rows,), lambda r: te.rsqrt(ss[r] / cols.astype("float32") + 1e-6), name="fwd_rstd")
    y = te.compute((rows, cols), lambda r, c: (x[r, c].astype("float32") * inv[r] * gamma[c].astype("float32"))
                   .astype("float16"), name="fwd_y")
    return te.create_prim_func([x, gamma, y]).with_attr("global_symbol", "test_rms_norm_forward")


def test_a_third_op_defined_here_is_emitted_and_emulated_correctly(rng):
    func = _rms_norm_forward()
    _, sch = schedule_with_rule(func, EMU)
    module = EMU.build(tvm.IRModule({"test_rms_norm_forward": kernels.hoist_pass_buffers(sch)}))
    for rows, cols in ((7, 33), (941, 7), (3, 12290), (1, 16)):
        x = rng.standard_normal((rows, cols)).astype(np.float16)
        gamma = rng.uniform(0.5, 1.5, cols).astype(np.float16)
        y = np.full((rows, cols), np.nan, np.float16)
        args = [tvm.runtime.tensor(a) for a in (x, gamma, y)]
        module["test_rms_norm_forward"](*args)
        x64 = x.astype(np.float64)
        want = x64 / np.sqrt(np.mean(x64 * x64, axis=1, keepdims=True) + 1e-6) * gamma.astype(np.float64)
        got = args[2].numpy().astype(np.float64)
        assert np.all(np.abs(got - want) <= 1e-3 + 1e-3 * np.abs(want) + np.spacing(np.float16(np.abs(want))) / 2), \
            (rows, cols)


def test_over_budget_tiling_is_refused_by_the_host_tiling_with_the_buffers(rng):
    func = te.create_prim_func(RMS.compute(RMS.combo("f32-f32")))
    rule, _ = schedule_with_rule(func, EMU, {"rows_per_pass": 255})
    with pytest.raises(UbBudgetError, match=r"in_dy .*out_rms_norm_grad_dx"):
        rule.tiling(func, EMU, {**default_knobs(rule, EMU), "rows_per_pass": 255}, [(64 * 300, 2000)])


def test_an_injected_misaligned_copy_is_caught_by_the_emulation(tmp_path, rng):
    """Shift one DataCopyPad destination by one element (not 32-byte aligned): the emulation
    must stop the launch with an alignment message instead of computing anything."""
    kernel = kernels.get_kernel(RMS, "f32-f32", EMU)
    files = dict(kernel.module.files)
    src = files["op_kernel/rms_norm_grad_f32_f32.cpp"]
    faulty = src.replace("DataCopyPad(a, g_x_[", "DataCopyPad(a[1], g_x_[", 1)
    assert faulty != src
    files["op_kernel/rms_norm_grad_f32_f32.cpp"] = faulty
    lib = emu_build.compile_project(files, "rms_norm_grad_f32_f32", EMU.hardware)
    bad = emu_build.EmuKernel(lib, kernel.module.kernel.k, EMU.hardware)
    dy, x, out = (np.ones((4, 64), np.float32) for _ in range(3))
    rstd, gamma, dgamma = np.ones(4, np.float32), np.ones(64, np.float32), np.zeros(64, np.float32)
    args = [tvm.runtime.tensor(a) for a in (dy, x, rstd, gamma, out, dgamma)]
    with pytest.raises(RuntimeError, match=r"(?i)align"):
        bad(*args)


def test_the_aclnn_api_runs_on_ascend_emu(rng, monkeypatch):
    """OPGEN_TARGET=ascend-emu: the two-phase aclnn calls run the emitted kernels."""
    import opgen
    from opgen import acl, aclnn, config
    from opgen.ops.rms_norm_grad import reference as rms_ref
    from opgen.ops.group_norm_backward import reference as gn_ref

    launched = []
    real_call = emu_build.EmuKernel.__call__
    monkeypatch.setattr(emu_build.EmuKernel, "__call__",
                        lambda self, *a: (launched.append(self.k.symbol), real_call(self, *a))[1])
    config.set_target("ascend-emu")
    try:
        x = rng.standard_normal((2, 3, 941)).astype(np.float16)
        dy = rng.standard_normal((2, 3, 941)).astype(np.float16)
        gamma = rng.uniform(0.5, 1.5, 941).astype(np.float16)
        rstd = (1 / np.sqrt(np.mean(x.astype(np.float64) ** 2, axis=-1) + 1e-6)).astype(np.float32)
        dx, dgamma = np.empty_like(x), np.empty(941, np.float32)
        status, size, executor = aclnn.aclnnRmsNormGradGetWorkspaceSize(dy, x, rstd, gamma, dx, dgamma)
        assert status == aclnn.ACLNN_SUCCESS, acl.aclGetRecentErrMsg()
        workspace = acl.aclrtMalloc(size, acl.ACL_MEM_MALLOC_HUGE_FIRST)[1] if size else None
        # The workspace is AscendC's GM workspace, sized by the host tiling (no hidden allocation).
        (slot,) = [p for p in executor.plan.placements if p.kind == "scratch"]
        from opgen.ops.rms_norm_grad import Problem

        tiled = executor.plan.kernel.module.kernel.workspace_shape(RMS.api.kernel_shapes(Problem((2, 3, 941), 1)))
        assert slot.kernel == "workspace" and slot.shape == tiled
        assert aclnn.aclnnRmsNormGrad(np.zeros(size - 68, np.uint8), size, executor, None) != aclnn.ACLNN_SUCCESS
        assert aclnn.aclnnRmsNormGrad(workspace, size, executor, None) == aclnn.ACLNN_SUCCESS
        want_dx, want_dgamma = rms_ref.rms_norm_grad(dy, x, rstd, gamma)
        assert np.allclose(dx, want_dx, rtol=1e-3, atol=2e-3) and np.allclose(dgamma, want_dgamma, rtol=1e-4, atol=1e-3)
        g_out, inp = (rng.standard_normal((3, 6, 7, 5)).astype(np.float32) for _ in range(2))
        mean = inp.reshape(3, 2, -1).mean(-1)
        inv = 1 / np.sqrt(inp.reshape(3, 2, -1).var(-1) + 1e-5)
        gam = rng.uniform(0.5, 1.5, 6).astype(np.float32)
        got = opgen.group_norm_backward(g_out, inp, mean, inv, gam, group=2)
        want = gn_ref.group_norm_backward(g_out, inp, mean, inv, gam, 2)
        for a, b in zip(got, want):
            assert np.allclose(a, b, rtol=1e-4, atol=1e-4)
        assert launched == ["rms_norm_grad_f16_f16", "group_norm_backward_f32_f32"], launched
    finally:
        config.reset()


def test_products_without_data_copy_pad_copy_whole_blocks(rng):
    """Atlas inference / training: no DataCopyPad, so the kernels copy whole 32-byte blocks
    with DataCopy (the emulation, built for that product, refuses DataCopyPad), per-row and
    per-task values are scalar GM reads, and ragged rows are refused by the host tiling."""
    rms = kernels.get_kernel(RMS, "f16-f16", EMU.for_product("AtlasInference"))
    assert "DataCopyPad(" not in rms.module.files["op_kernel/rms_norm_grad_f16_f16.cpp"]
    for shape in ((7, 64), (3, 12288), (100, 16), (0, 16)):
        assert _worst(rms, shape, rng) <= 1.0, shape
    with pytest.raises(RuntimeError, match="whole 32-byte blocks"):
        _worst(rms, (5, 33), rng)
    gn = kernels.get_kernel(GN, "f32-f32", EMU.for_product("AtlasTraining"))
    for shape in ((2, 32, 16, 2), (3, 32, 64, 2), (2, 16, 16384, 2), (0, 32, 16, 2)):
        assert _gn_worst(gn, shape, rng) <= 1.0, shape
    with pytest.raises(RuntimeError, match="whole 32-byte blocks"):
        _gn_worst(gn, (2, 4, 5, 2), rng)


def test_a_row_softmax_defined_here_needs_no_emitter_or_schedule_change(rng):
    """A fourth op: softmax over rows (a max reduction, exp, a sum reduction, a division)."""
    func = row_softmax()
    _, sch = schedule_with_rule(func, EMU)
    module = EMU.build(tvm.IRModule({"test_row_softmax": kernels.hoist_pass_buffers(sch)}))
    assert "ReduceMax<float>" in module.files["op_kernel/test_row_softmax.cpp"]
    for shape in ((7, 33), (941, 7), (2, 16384), (1, 1)):
        xs = (rng.standard_normal(shape) * 3).astype(np.float16)
        out = tvm.runtime.tensor(np.full(shape, np.nan, np.float16))
        module["test_row_softmax"](tvm.runtime.tensor(xs), out)
        x64 = xs.astype(np.float64)
        e = np.exp(x64 - x64.max(axis=1, keepdims=True))
        want = e / e.sum(axis=1, keepdims=True)
        got = out.numpy().astype(np.float64)
        assert np.all(np.abs(got - want) <= 1e-3 + 1e-3 * want + np.spacing(np.float16(want)) / 2), shape


def test_a_dtype_the_product_lacks_is_not_emitted():
    with pytest.raises(NotImplementedError, match="bfloat16"):
        kernels.get_kernel(RMS, "bf16-bf16", EMU.for_product("AtlasTraining"))


def test_runs_report_the_emulations_modelled_time(rng):
    """Each launch leaves the timing model's result on the kernel; the target's run summary
    (opgen generate's row) quotes the largest; a product's parameters change it."""
    kernel = kernels.get_kernel(RMS, "f32-f32", EMU.for_product("AtlasA2"))
    emu = kernel.module.kernel
    emu.timings.clear()         # the kernel is cached: other tests' launches are not this test's
    _worst(kernel, (64, 1024), rng)
    small = emu.last_timing
    _worst(kernel, (7, 33), rng)
    assert emu.largest_timing() is small and emu.last_timing.gm_bytes < small.gm_bytes
    assert small.seconds > 0 and 0 < small.of_bound < 1 and 1 < small.cores <= 48
    assert small.gm_bytes >= 3 * 64 * 1024 * 4          # dy and x read, dx written at least once
    assert 0 < small.busy["MTE2"] <= 1 and 0 < small.busy["V"] <= 1
    line = EMU.for_product("AtlasA2").run_summary(kernel.module)
    assert line.startswith("modelled ") and "% of the GM bound" in line and "MTE2" in line


@pytest.mark.parametrize("sums", ["deterministic", "atomic"])
def test_split_d_gm_traffic_measured_by_the_emulation_is_the_reports(sums, rng):
    """RmsNormGrad (16, 12288) f16 on A2, split-D: the GM bytes the emulation counts are the
    bytes `opgen tiling` models (4.37 MB deterministic, 3.59 MB atomic; CANN's plan: 3.54 MB)."""
    from opgen.targets.ascend import tiling_report

    a2 = EMU.for_product("AtlasA2")
    kernel = kernels.get_kernel(RMS, "f16-f16", a2, knobs={"sums": sums})
    _worst(kernel, (16, 12288), rng)
    measured = kernel.module.kernel.last_timing
    line = tiling_report.opgen_line(RMS, "f16-f16", RMS.parse_problem("16x12288"), a2, {"sums": sums})
    assert line.mode == "split-D" and measured.gm_bytes == line.gm_bytes
    assert measured.gm_bytes == {"deterministic": 4_374_592, "atomic": 3_588_160}[sums]


def test_split_d_with_two_row_sums_reads_each_row_twice(rng):
    """LayerNormBackward (16, 12288) f32 on A2, split-D: its two row sums share one pass, so
    the emulation counts the bytes the tiling models for two passes and the output pass."""
    from opgen.ops import get_op
    from opgen.targets.ascend import tiling_report

    op, a2 = get_op("layer_norm_backward"), EMU.for_product("AtlasA2")
    kernel = kernels.get_kernel(op, "f32-f32", a2)
    comparisons, _ = verify.run_and_compare(kernel, op.parse_problem("16x12288"), rng)
    assert comparisons and all(c.ratio <= 1.0 for c in comparisons)
    line = tiling_report.opgen_line(op, "f32-f32", op.parse_problem("16x12288"), a2, {})
    assert line.mode == "split-D" and kernel.module.kernel.last_timing.gm_bytes == line.gm_bytes


def test_split_d_double_buffering_overlaps_copy_in_with_compute(rng):
    """Split-D issues each column-chunk visit's tile copy-in before the previous visit's
    compute (across passes and rows): with two buffers the pipes overlap (their busy
    fractions add to more than the time) and the modelled time is lower than with one, whose
    pipes take turns (two buffers also mean smaller chunks: more copies, so the time gains
    less than the overlap); the results are right either way (_worst checks them). Two rows
    per core, so a visit also issues the next row's first chunk."""
    from opgen.targets.ascend import tiling_report

    a2 = EMU.for_product("AtlasA2")
    timings = {}
    for buffers in (1, 2):
        kernel = kernels.get_kernel(RMS, "f32-f32", a2, knobs={"buffer_num": buffers})
        _worst(kernel, (96, 12288), rng)
        timings[buffers] = kernel.module.kernel.last_timing
        line = tiling_report.opgen_line(RMS, "f32-f32", RMS.parse_problem("96x12288"), a2, {"buffer_num": buffers})
        assert line.mode == "split-D"
    assert timings[2].gm_bytes == timings[1].gm_bytes
    overlap = {b: sum(t.busy[p] for p in ("MTE2", "V", "MTE3")) for b, t in timings.items()}
    assert overlap[1] <= 1.01 and overlap[2] > 1.08, overlap
    assert timings[2].seconds < timings[1].seconds, (timings[1].seconds, timings[2].seconds)
