"""ascend-emu: forward kernels whose statistics are outputs (per row: a forward RmsNorm's
rstd, a LayerNorm-like toy's mean and rstd; per (n, group): a forward GroupNorm's mean and
rstd), emitted by pattern, built with g++ -Wall -Werror against the emulation (which checks
event-level hazards), run on emulated cores against the float64 reference, and their CANN
op projects.

Each kernel is built on the product whose rules change the code: DataCopyPad of a pass's
per-row values (Atlas A2, Ascend 950), a narrower statistic Cast first (float16 outputs),
scalar GM writes on a product without DataCopyPad (Atlas inference: whole-block shapes).

BatchNorm's forward (per channel: saveMean and saveInvstd, a shift by the channel's first
element) runs on A2, the 950 and Atlas inference, and its BatchNormV3 project is built.

Cost: 13 kernels + 3 op projects, one g++ run each (~10-30 s cold on the shared 2-core
machine, then cached on disk), ~45 s warm.
"""
from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
import tvm
from tvm import te

from opgen import kernels, verify
from opgen.ops import get_op
from opgen.schedules import default_knobs, schedule_with_rule
from opgen.targets import get_target
from opgen.targets.ascend import build as emu_build
from opgen.targets.ascend.op_project import op_file_name, op_project

from tiers import tiered
from toy_ops import (build_toy, column_vectors_with_constants, column_vectors_with_constants_reference,
                     row_statistics_forward, row_statistics_forward_reference, run_toy)

EMU = get_target("ascend-emu")
pytestmark = pytest.mark.skipif(not EMU.can_build(), reason="g++ or the AscendC emulation header is missing")
RMS, GN = get_op("rms_norm"), get_op("group_norm")
RmsProblem, GnProblem = type(RMS.problems[0]), type(GN.problems[0])
# 1x1, small-D ragged, split-N ragged, split-D (float32) ragged, rank 3, no rows, no columns.
RMS_SHAPES = ((1, 1), (7, 33), (3, 941), (2, 12290), (2, 3, 40), (0, 16), (4, 0))
# (N, C, HxW, G): one element, group, ragged group, more than TASKS_PER_STORE tasks per core,
# channels, hw-chunk, empty batch, empty groups (HxW 0; C 0): their statistics are NaN.
GN_SHAPES = ((1, 1, 1, 1), (2, 4, 5, 2), (3, 6, 49, 3), (200, 64, 3, 32), (1, 60, 2000, 2), (2, 4, 20000, 2),
             (0, 4, 5, 2), (2, 4, 0, 2), (2, 0, 5, 2))


def _worst(kernel, problem, rng) -> float:
    comparisons, _ = verify.run_and_compare(kernel, problem, rng)
    return max((c.ratio for c in comparisons), default=0.0)


def _modes(op, combo, target, sizes) -> set:
    func = te.create_prim_func(op.compute(op.combo(combo)))
    rule, _ = schedule_with_rule(func, target)
    return {rule.tiling(func, target, default_knobs(rule, target), [s]).mode for s in sizes}


@pytest.mark.parametrize("op_name,product,combo,shapes", [
    ("layer_norm", "AtlasA2", "f32-f32", ("1x1", "7x33", "3x941", "2x12290", "2x3x40,2", "0x16", "4x0")),
    ("layer_norm", "Ascend950", "bf16-f32-f32", ("7x33", "3x941", "0x16")),
    ("group_norm_swish", "AtlasA2", "bf16-f32", ("1,1,1,1", "3,6,49,3,1e-5,0.5", "2,4,20000,2,1e-5,-2.0,1",
                                                 "200,64,3,32,1e-5,1.0,0", "0,4,5,2")),
])
def test_other_forward_ops_run_on_the_emulation(op_name, product, combo, shapes, rng):
    """The mechanism is the pattern's, not the two ops above: LayerNorm's forward (mean and
    rstd per row) and GroupNormSwish's (a sigmoid in the output stage, activateSwish off in
    one case) take it unchanged."""
    op = get_op(op_name)
    kernel = kernels.get_kernel(op, combo, EMU.for_product(product))
    for text in shapes:
        problem = op.parse_problem(text)
        assert _worst(kernel, problem, rng) <= 1.0, (op_name, product, combo, text)


@pytest.mark.parametrize("product,combo", [("AtlasA2", "f32-f32"), ("Ascend950", "bf16-f32")])
def test_rms_norm_forward_writes_rstd_per_pass(product, combo, rng):
    target = EMU.for_product(product)
    sizes = [(int(np.prod(s[:-1])), s[-1]) for s in RMS_SHAPES]
    assert {"small-D", "split-N", "empty"} <= _modes(RMS, combo, target, sizes)
    if combo == "f32-f32":
        assert "split-D" in _modes(RMS, combo, target, sizes)
    kernel = kernels.get_kernel(RMS, combo, target)
    src = kernel.module.files[f"op_kernel/{kernel.module.kernel.k.symbol}.cpp"]
    assert "StoreRows(r0, n);" in src and "PIPE_ALL" not in src
    _same_tiling_in_cpp(RMS, combo, target, kernel, sizes + [(100000, 64), (4, 6200)])
    for shape in RMS_SHAPES:
        assert _worst(kernel, RmsProblem(shape), rng) <= 1.0, (product, combo, shape)
    rstd = _run(RMS, combo, kernel, RmsProblem((4, 0)), rng, fill=0.0)[1]   # written, not left as it was
    assert rstd.shape == (4,) and np.isnan(rstd).all()


@pytest.mark.parametrize("product,combo", [("AtlasA2", "f16-f16"), ("Ascend950", "f32-f32")])
def test_group_norm_forward_writes_mean_and_rstd_per_tasks(product, combo, rng):
    target = EMU.for_product(product)
    sizes = [(n, g, c // g, hw) for n, c, hw, g in GN_SHAPES]
    assert {"group", "hw1", "channels", "hw-chunk", "empty"} <= _modes(GN, combo, target, sizes)
    kernel = kernels.get_kernel(GN, combo, target)
    _same_tiling_in_cpp(GN, combo, target, kernel, sizes + [(12, 32, 2, 16384), (1, 71, 30, 1664)])
    for shape in GN_SHAPES:
        assert _worst(kernel, GnProblem(*shape), rng) <= 1.0, (product, combo, shape)
    for shape in ((2, 4, 0, 2), (2, 0, 5, 2)):   # written, not left as they were (verify fills NaN first)
        mean, rstd = _run(GN, combo, kernel, GnProblem(*shape), rng, fill=0.0)[1:]
        assert mean.shape == (2, 2) and np.isnan(mean).all() and np.isnan(rstd).all(), shape


def _run(spec, combo, kernel, problem, rng, fill):
    """The kernel's outputs for ``problem`` with outputs filled with ``fill`` beforehand."""
    from opgen.dtypes import numpy_dtype
    arrays = spec.kernel_args(problem, spec.random_inputs(problem, spec.combo(combo), rng))
    outs = [np.full(_kernel_shape(spec, problem, name), fill, numpy_dtype(spec.combo(combo)[name]))
            for name in spec.outputs]
    args = [tvm.runtime.tensor(arrays[name]) for name in spec.inputs] + [tvm.runtime.tensor(a) for a in outs]
    kernel.module.kernel(*args)
    return [a.numpy() for a in args[len(spec.inputs):]]


def _same_tiling_in_cpp(op, combo, target, kernel, sizes) -> None:
    """The emitted host tiling (its UB budget counts the statistics' buffers) and
    schedules/ascend_tiling give the same tiling."""
    func = te.create_prim_func(op.compute(op.combo(combo)))
    rule, _ = schedule_with_rule(func, target)
    for size in sizes:
        mine = rule.tiling(func, target, default_knobs(rule, target), [size])
        got = kernel.module.kernel.tiling(*size).as_dict()
        want = {"block_dim": mine.block_dim, "block_factor": mine.block_factor, "ub_rows": mine.ub_rows,
                "ub_cols": mine.ub_cols, "pitch": mine.pitch}
        assert {k: got[k] for k in want} == want, (combo, size)


def test_products_without_data_copy_pad_write_statistics_as_scalars(rng):
    """Atlas inference (no DataCopyPad): rows and groups of whole 32-byte blocks; the
    statistics are scalar GM writes, flushed from the data cache once per core."""
    target = EMU.for_product("AtlasInference")
    rms = kernels.get_kernel(RMS, "f16-f16", target)
    assert "DataCacheCleanAndInvalid" in rms.module.files[f"op_kernel/{rms.module.kernel.k.symbol}.cpp"]
    for shape in ((1, 16), (7, 32), (3, 960), (2, 12288), (0, 16)):
        assert _worst(rms, RmsProblem(shape), rng) <= 1.0, shape
    gn = kernels.get_kernel(GN, "f16-f16", target)
    for shape in ((1, 16, 16, 1), (2, 32, 32, 2), (100, 512, 16, 32), (2, 32, 20480, 2), (0, 32, 16, 2)):
        assert _worst(gn, GnProblem(*shape), rng) <= 1.0, shape


def test_two_row_statistics_of_a_toy_are_stored_whatever_the_rows_per_pass(rng):
    """A LayerNorm-like op defined in the tests: two per-row outputs (mean float32, rstd
    float16 rounded from the float32 rstd y reads), several passes per core (rows_per_pass=2:
    the next pass's copy-in overlaps this pass's stores), split-D, and rows of no columns."""
    target = EMU.for_product("AtlasA2")
    cases = (({}, ((1, 1), (7, 33), (3, 941), (2, 12290), (0, 16))),
             ({"rows_per_pass": 2}, ((7, 33), (200, 64), (3, 941))))
    for knobs, shapes in cases:
        built = build_toy(row_statistics_forward(), target, knobs)
        for rows, cols in shapes:
            x = (rng.standard_normal((rows, cols)) * 2 + 0.5).astype(np.float16)
            gamma = rng.uniform(0.5, 1.5, cols).astype(np.float16)
            got = run_toy(target, built, [x, gamma], [np.float16, np.float32, np.float16])
            for name, g, want, tol in zip(("y", "mean", "rstd"), got, row_statistics_forward_reference(x, gamma),
                                          (2e-3, 1e-5, 2e-3)):
                g = g.astype(np.float64)
                assert np.all(np.abs(g - want) <= tol + tol * np.abs(want)), (name, knobs, rows, cols)
    # Rows of no columns: mean and rstd of nothing are NaN, written (the outputs start at 0).
    _, mean, rstd = run_toy(target, built, [np.zeros((3, 0), np.float16), np.zeros(0, np.float16)],
                            [np.float16, np.float32, np.float16], fill=0.0)
    assert np.isnan(mean).all() and np.isnan(rstd).all()


def test_column_vectors_combined_with_constants_run_on_the_emulation(rng):
    """A per-column vector with a constant, another column or a per-row value, before the
    tile reads it (x * (1 + g)): a column vector in a scratch tile, and the tile computed
    over that scratch tile row by row, last row first. Several rows per pass (200 rows on
    48 cores), rows_per_pass=2 (the next pass's copy-in overlapping), split-D, no rows."""
    target = EMU.for_product("AtlasA2")
    cases = (({}, ((1, 1), (7, 33), (200, 64), (97, 941), (3, 12290), (0, 8))),
             ({"rows_per_pass": 2}, ((200, 64),)))
    for knobs, shapes in cases:
        built = build_toy(column_vectors_with_constants(), target, knobs)
        for rows, cols in shapes:
            x = rng.standard_normal((rows, cols)).astype(np.float32)
            g, h = (rng.uniform(-1.5, 1.5, cols).astype(np.float32) for _ in range(2))
            got = run_toy(target, built, [x, g, h], [np.float32, np.float16])
            for name, out, want, tol in zip(("y1", "y2"), got, column_vectors_with_constants_reference(x, g, h),
                                            (1e-6, 1e-3)):
                err = np.abs(out.astype(np.float64) - want)
                assert np.all(err <= tol * (1 + np.abs(want)) * max(1, cols) ** 0.5), (name, knobs, rows, cols)


FORWARD_PROJECTS = [
    ("rms_norm", ("RmsNorm", ["x", "gamma"], ["y", "rstd"], ["epsilon"])),
    ("group_norm", ("GroupNormV2", ["x", "gamma", "beta"], ["y", "mean", "rstd"],
                    ["num_groups", "data_format", "eps", "is_training"])),
    ("batch_norm", ("BatchNormV3", ["x", "weight", "bias", "running_mean", "running_var"],
                    ["y", "save_mean", "save_rstd"], ["epsilon", "momentum", "is_training"]))]


# The project machinery is one for every op (tests/test_ascend_project.py); one forward
# builds and runs here, the others in the extended tier.
@pytest.mark.parametrize("op,names", tiered(FORWARD_PROJECTS, FORWARD_PROJECTS[:1], [op for op, _ in FORWARD_PROJECTS]))
def test_op_project_of_a_forward_compiles_and_runs_like_its_kernel(op, names, tmp_path, rng):
    """The CANN project of each forward op (its CANN name, inputs, outputs and attributes
    from its spec) compiles with -Wall -Werror against the emulation, and its one entry,
    dispatched by the tiling key, writes what the per-combo kernel writes."""
    spec = get_op(op)
    target = EMU.for_product("AtlasA2")
    module = kernels.get_kernel(spec, "f32-f32", target).module
    files = op_project(op, [("f32-f32", module)], target.hardware)
    op_type, ins, outs, attrs = names
    proto = json.loads(files[f"{op_type}.json"])[0]
    assert proto["op"] == op_type
    assert [d["name"] for d in proto["input_desc"]] == ins
    assert [d["name"] for d in proto["output_desc"]] == outs
    assert [a["name"] for a in proto.get("attr", [])] == attrs
    stem = op_file_name(op_type)          # CANN's file and entry name: GroupNormV2 -> group_norm_v2
    emu_build.write_project(files, tmp_path)
    sources = [tmp_path / f"op_kernel/{stem}.cpp", tmp_path / f"op_host/{stem}_tiling.cpp", tmp_path / f"op_host/{stem}_def.cpp"]
    lib_path = tmp_path / "op.so"
    cmd = ["g++", *emu_build.CXXFLAGS, *emu_build.emu_flags(target.hardware), *emu_build.include_flags(tmp_path),
           *map(str, sources), "-o", str(lib_path)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    import ctypes
    per_combo = module.kernel
    op_level = emu_build.EmuKernel.__new__(emu_build.EmuKernel)
    op_level.__dict__.update(per_combo.__dict__)
    op_level.lib = ctypes.CDLL(str(lib_path))
    op_level.lib.opgen_emu_host_last_error.restype = ctypes.c_char_p
    op_level.launch = getattr(op_level.lib, f"opgen_emu_launch_{stem}")
    op_level.launch.restype = ctypes.c_int
    problem = {"rms_norm": RmsProblem((5, 40)), "group_norm": GnProblem(2, 6, 10, 3),
               "batch_norm": BN.parse_problem("2x6x10")}[op]
    arrays = spec.kernel_args(problem, spec.random_inputs(problem, spec.combo("f32-f32"), rng))
    results = []
    for launcher in (per_combo, op_level):
        outs_np = [np.zeros(_kernel_shape(spec, problem, name), np.float32) for name in spec.outputs]
        args = [tvm.runtime.tensor(arrays[name]) for name in spec.inputs] + [tvm.runtime.tensor(a) for a in outs_np]
        launcher(*args)
        results.append([a.numpy() for a in args[len(spec.inputs):]])
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


def _kernel_shape(spec, problem, name):
    from importlib import import_module
    return import_module(f"{spec.package}.kernel").kernel_shapes(problem)[name]


BN = get_op("batch_norm")
# (N, C, HxW) with C=1, ragged HxW (7, 33, 941), a channel of several UB passes (rows), a
# batch row longer than a pass (hw-chunk), training and eval, an empty batch and an empty HxW
# (training only: the TE's eval blend t * (0 / 0) + (1 - t) * running is NaN there on every
# target, llvm included: a gap of opgen/ops/batch_norm/kernel.py, not of the channel rule).
BN_SHAPES = ("3x1x7", "2x3x7,eval", "3x4x33", "2x5x941,eval,eps=0.001", "60x2x3000", "60x2x3000,eval",
             "1x2x70000", "0x3x5", "2x3x0")


@pytest.mark.parametrize("product,combo", [("AtlasA2", "f32-f32"), ("Ascend950", "f16-f32-f32")])
def test_batch_norm_forward_writes_mean_and_invstd_per_channel(product, combo, rng):
    """BatchNorm's forward on the channel pattern: saveMean and saveInvstd are per-channel
    outputs staged in UB and stored per chunk of channels; the sums are relative to the
    channel's first element, a scalar GM read guarded by N x HxW > 0; y in a second pass
    when the channel does not fit one."""
    target = EMU.for_product(product)
    problems = [BN.parse_problem(text) for text in BN_SHAPES]
    assert {"channel", "rows", "hw-chunk", "empty"} <= _modes(BN, combo, target, [(p.N, p.C, p.HW) for p in problems])
    kernel = kernels.get_kernel(BN, combo, target)
    src = kernel.module.files[f"op_kernel/{kernel.module.kernel.k.symbol}.cpp"]
    assert "StoreChans(c0, nc);" in src and "PIPE_ALL" not in src and "g_x_.GetValue(" in src
    for problem in problems:
        assert _worst(kernel, problem, rng) <= 1.0, (product, combo, problem)
    for text in ("0x3x5", "2x3x0"):   # written, not left as they were (training: 0 / 0 is NaN)
        _, mean, invstd = _run(BN, combo, kernel, BN.parse_problem(text), rng, fill=0.0)
        assert mean.shape == (3,) and np.isnan(mean).all() and np.isnan(invstd).all(), text


def test_batch_norm_forward_without_data_copy_pad(rng):
    """Atlas inference (no DataCopyPad): whole 32-byte blocks (HxW and a core's channels
    multiples of 16 halves); the shift is the same scalar GM read, the statistics are
    stored per chunk of channels with DataCopy."""
    kernel = kernels.get_kernel(BN, "f16-f16", EMU.for_product("AtlasInference"))
    for text in ("2x16x16", "3x32x32,eval", "40x16x4096", "0x16x16"):
        assert _worst(kernel, BN.parse_problem(text), rng) <= 1.0, text
