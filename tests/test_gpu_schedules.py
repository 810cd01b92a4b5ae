"""The GPU schedules' structure (no GPU needed) and the pieces the GPU targets are made of.

* Structure, read from the scheduled TIR and the emitted CUDA: blocks and threads bound,
  per-row/per-group scalars in "local" scope, cross-thread reductions in shared memory,
  no atomics (the deterministic path), the expected number of kernels.
* Pattern matching: the toy ops of tests/test_schedules.py get GPU schedules with no code
  of their own and compute the right answer on PoCL, at default and non-default knobs.
* Knobs: declared, constrained by the target's threads per block, part of the kernel.
* The OpenCL source rewrites and launch-expression compiler, on small inputs.
"""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
import tvm
from tvm import te
from tvm.sym.analyzer import Analyzer

from opgen import kernels, schedules
from opgen.schedules import patterns
from opgen.ops import all_ops, get_op
from opgen.ops.rms_norm_grad import Problem as RMSProblem
from opgen.targets import get_target
from opgen.targets.gpu_launch import LaunchPlan, _Names, python_expr
from opgen.targets.opencl_source import (HalfRewriteError, fence_thread0_stores, hoist_local_declarations,
                                         needs_half_rewrite, rewrite_half)
from opgen.verify import run_and_compare

from test_schedules import toy_grouped_pass, toy_row_pass
from tiers import covering, tiered

CUDA, OPENCL = get_target("cuda"), get_target("opencl")
KERNELS = [(op, combo) for op in all_ops() for combo in op.combos]
IDS = [f"{op.name}-{combo.tag}" for op, combo in KERNELS]
needs_opencl = pytest.mark.skipif(not OPENCL.can_run(), reason=f"opencl cannot run here: {OPENCL.missing()}")


# ---- structure ----------------------------------------------------------------------------

# What each pattern rule builds: its kernels (the row pass: one, then a final kernel per column
# sum), and whether the scalars it keeps per row/group live in registers ("local");
# BatchNorm-like stages go through global memory (see GpuChannelPass).
PATTERN_KERNELS = {"GpuRowPass": (lambda infos: 1 + len(patterns.row_pass(infos)[1]), True),
                   "GpuRowReduce": (lambda infos: 1, True),
                   "GpuGroupedRowPass": (lambda infos: 3, True),
                   # a channel_reduction has no outputs kernel
                   "GpuChannelPass": (lambda infos: 3 if patterns.channel_pass(infos) else 2, False),
                   "GpuSegmentedRowPass": (lambda infos: _segmented_kernels(*patterns.segmented_row_pass(infos)),
                                           True)}


def _segmented_kernels(outs, segment_sums, row_stages, segment_stages, batch_sums, casts) -> int:
    """The row pass, then a kernel per segment sum, per-segment stage and sum over the
    segments (casts run in their sum's kernel)."""
    return 1 + len(segment_sums) + len(segment_stages) + len(batch_sums)


@pytest.mark.parametrize("op,combo", tiered(KERNELS, covering(KERNELS, "cuda"), IDS))
def test_gpu_schedule_structure(op, combo):
    """Every kernel of every op through the cuda target's own path: threads bound within the
    limit; a pattern rule's kernels reduce through shared memory, without atomics, in the
    number of kernels the rule builds; the fallback binds every nest to blocks and threads."""
    rule = type(kernels.matching_rule(op, combo, CUDA)).__name__
    mod, symbol = kernels.scheduled_module(op, combo, CUDA)
    tir = mod.script()
    assert 'thread="blockIdx.x"' in tir and 'thread="threadIdx.x"' in tir
    extents = [int(e) for e in re.findall(r'T\.thread_binding\(T\.int64\((\d+)\), thread="threadIdx\.x"\)', tir)]
    assert extents and max(extents) <= 1024
    if rule == "GpuFallback":
        return
    kernel_count, local = PATTERN_KERNELS[rule]
    expected = kernel_count(schedules.blocks(schedules.pattern_schedule(kernels.prim_func(op, combo))))
    assert not local or 'scope="local"' in tir, "per-row / per-group scalars must be per-thread"
    with tvm.transform.PassContext(config={"tirx.disable_storage_rewrite": True}):
        source = tvm.compile(mod, target=CUDA.tvm_target()).mod.imports[0].inspect_source()
    assert "__shared__" in source, "the cross-thread reductions go through shared memory"
    assert "atomic" not in source.lower() and "atomic" not in tir.lower(), "no atomics on the deterministic path"
    assert len(set(re.findall(r'__global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(', source))) == expected


# Ops that land on the fallback, each with the reason; an entry is a known gap, not a
# default. GroupNorm's forward: its group stages include a second pass over the group's
# data (the centred variance) and outputs (mean, rstd), which GpuGroupedRowPass, built for
# small per-group scalars recomputed by every thread, does not take (issue 21: a GPU rule
# for grouped forwards).
GPU_FALLBACK_GAPS = {"group_norm": "no GPU rule for a grouped forward yet (issue 21)",
                     "instance_norm": "GroupNorm's grouped forward with one channel per group: the same gap",
                     "group_norm_swish": "no GPU rule for a grouped forward yet (issue 21)",
                     "batch_norm": "GpuChannelPass merges its per-channel stages as siblings; BatchNorm's forward "
                                   "chains them (mean -> var -> invstd -> scale) (issue 21)",
                     "batch_norm_elemt_backward": "an elementwise channel map (patterns.channel_map): dlight's fallback "
                                                  "builds what a rule would, a kernel per nest (issue 37)",
                     "batch_norm_elemt": "an elementwise channel map (patterns.channel_map): dlight's fallback "
                                         "inlines the per-channel scale into one elementwise kernel (issue 38)",
                     "layer_norm_channels": "sums over the middle axis of (N, C, HW) (patterns.column_pass): no GPU "
                                            "rule for the column pattern yet (issue 39)",
                     "layer_norm_channels_backward": "the column pattern, as layer_norm_channels (issue 39)"}


def test_every_registered_op_has_a_pattern_rule_on_gpus_for_its_first_combo():
    """The fallback is a safety net, not where an op lands: each op's main combo matches a
    pattern (half-weight LayerNorm combos may still take the fallback), except the listed
    gaps, which must still be gaps (an entry that a rule now covers is removed)."""
    for op in all_ops():
        rule = type(kernels.matching_rule(op, op.combos[0], CUDA)).__name__
        if op.name in GPU_FALLBACK_GAPS:
            assert rule == "GpuFallback", (op.name, rule, "now has a rule: drop it from GPU_FALLBACK_GAPS")
        else:
            assert rule in PATTERN_KERNELS, (op.name, rule)


def test_partial_sums_are_workspace_parameters_sized_by_the_knob():
    kernel = kernels.get_kernel("rms_norm_grad", "f32-f32", CUDA)
    assert [b.name for b in kernel.scratch] == ["rms_norm_grad_dgamma.rf"]
    shapes = {"dy": (5, 7), "x": (5, 7), "rstd": (5,), "gamma": (7,), "dx": (5, 7), "dgamma": (7,)}
    assert kernel.scratch_shapes(shapes) == {"rms_norm_grad_dgamma.rf": (512, 7)}
    by_rows = kernels.get_kernel("rms_norm_grad", "f32-f32", CUDA, knobs={"rows_per_block": 4})
    assert by_rows.scratch_shapes(shapes) == {"rms_norm_grad_dgamma.rf": (2, 7)}


def test_gpu_rules_declare_and_check_their_knobs():
    row_rule, group_rule = schedules.rules_of(CUDA)[:2]
    assert schedules.default_knobs(row_rule, CUDA) == {"threads": 256, "partials": 512, "rows_per_block": 0,
                                                       "column_threads": 256, "vector": False}
    assert "unused" in schedules.check_knobs(row_rule, {"rows_per_block": 4, "partials": 16}, CUDA)
    assert schedules.default_knobs(group_rule, CUDA) == {"threads": 256, "block_per": "row", "column_threads": 256}
    small = dataclasses.replace(OPENCL, max_threads=256)
    assert schedules.check_knobs(row_rule, {"threads": 256}, small) is None
    assert "exceeds the 256 threads" in schedules.check_knobs(row_rule, {"threads": 512}, small)
    assert "outside its domain" in schedules.check_knobs(row_rule, {"threads": 100}, CUDA)


# ---- toy ops on PoCL ----------------------------------------------------------------------

def _run_toy(tensors, arrays: list, knobs=None) -> list:
    """Schedule a toy TE with the GPU rules, build it for opencl, run it on ``arrays``."""
    func = te.create_prim_func(tensors).with_attr("global_symbol", "toy")
    func = kernels.hoist_pass_buffers(schedules.schedule(func, OPENCL, knobs))
    module = OPENCL.build(tvm.IRModule({"toy": func}))
    analyzer = Analyzer()
    for buf, array in zip(func.params, arrays):
        for extent, size in zip(buf.shape, array.shape):
            if isinstance(extent, tvm.tirx.Var):
                analyzer.bind(extent, size)
    scratch = [np.full([int(analyzer.simplify(e)) for e in buf.shape], np.nan, np.float32)
               for buf in func.params[len(arrays):]]
    host = [tvm.runtime.tensor(np.ascontiguousarray(a)) for a in arrays + scratch]
    module["toy"](*host)
    return [t.numpy() for t in host[:len(arrays)]]


@needs_opencl
@pytest.mark.parametrize("knobs", [None, {"threads": 32, "partials": 16, "column_threads": 64},
                                   {"rows_per_block": 4}], ids=["default", "small-blocks", "4-rows-per-block"])
@pytest.mark.parametrize("shape", [(1, 1), (7, 33), (130, 5), (0, 4), (3, 0)], ids=str)
def test_row_pass_rule_schedules_a_new_op_on_opencl(shape, knobs):
    a = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    _, out, col = _run_toy(toy_row_pass(), [a, np.zeros(shape, np.float32), np.full(shape[1], np.nan, np.float32)],
                           knobs)
    np.testing.assert_allclose(out, a - a.sum(axis=1, keepdims=True) / max(shape[1], 1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(col, (a.astype(np.float64) ** 2).sum(axis=0), rtol=1e-5, atol=1e-5)


@needs_opencl
@pytest.mark.parametrize("knobs", [None, {"threads": 64, "column_threads": 32, "block_per": "group"}],
                         ids=["default", "block-per-group"])
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 1, 1, 1), (3, 2, 5, 300), (0, 2, 2, 2)], ids=str)
def test_grouped_rule_schedules_a_new_op_on_opencl(shape, knobs):
    a = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    n, g, d, hw = shape
    _, out, col = _run_toy(toy_grouped_pass(), [a, np.zeros(shape, np.float32), np.full((g, d), np.nan, np.float32)],
                           knobs)
    group_mean = a.astype(np.float64).sum(axis=(2, 3), keepdims=True) / max(d * hw, 1)
    np.testing.assert_allclose(out, a - group_mean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(col, a.astype(np.float64).sum(axis=(0, 3)), rtol=1e-5, atol=1e-5)


@needs_opencl
@pytest.mark.parametrize("knobs", [{"threads": 1024, "partials": 1}, {"threads": 32, "partials": 2048},
                                   {"rows_per_block": 8}],
                         ids=["one-block-all-rows", "more-blocks-than-rows", "8-rows-per-block"])
def test_rms_norm_grad_at_other_knobs_on_opencl(knobs, rng):
    kernel = kernels.get_kernel("rms_norm_grad", "bf16-f32", OPENCL, knobs=knobs)
    for problem in (RMSProblem((1100, 33), 1), RMSProblem((3, 941), 1)):
        comparisons, _ = run_and_compare(kernel, problem, rng)
        assert all(c.passed for c in comparisons), (problem, comparisons)


@needs_opencl
@pytest.mark.parametrize("block_per", ["row", "group"])
def test_group_norm_backward_block_per_row_or_group_on_opencl(block_per, rng):
    op = get_op("group_norm_backward")
    kernel = kernels.get_kernel(op, "f16-f32", OPENCL, knobs={"block_per": block_per})
    for problem in op.problems:
        comparisons, _ = run_and_compare(kernel, problem, rng)
        assert all(c.passed for c in comparisons), (problem, comparisons)


@needs_opencl
def test_opencl_results_are_bit_identical_run_to_run(rng):
    op = get_op("group_norm_backward")
    kernel = kernels.get_kernel(op, "f32-f32", OPENCL)
    problem = op.problems[-1]
    inputs = op.random_inputs(problem, op.combo("f32-f32"), rng)
    first = run_and_compare(kernel, problem, rng, inputs=inputs)[1]
    second = run_and_compare(kernel, problem, rng, inputs=inputs)[1]
    for name in op.outputs:
        assert first[name].tobytes() == second[name].tobytes(), name


# ---- OpenCL source rewrites and launch expressions ---------------------------------------

HALF_SOURCE = """#ifdef cl_khr_fp16
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#endif
__kernel void k(__global half* restrict a_ptr, __global float* restrict b_ptr, __global half* restrict o_ptr, long n) {
  o_ptr[(b_ptr[0] > 0 ? 1 : 0)] = (convert_half((convert_float(a_ptr[(long)2]) * b_ptr[a_ptr[0] > 0])));
}
"""


def test_half_rewrite_carries_float16_as_storage():
    assert needs_half_rewrite(HALF_SOURCE, "cl_khr_fp64 cl_khr_byte_addressable_store")
    assert not needs_half_rewrite(HALF_SOURCE, "cl_khr_fp16 cl_khr_fp64")
    text = rewrite_half(HALF_SOURCE)
    assert "cl_khr_fp16" not in text and "convert_half" not in text
    assert ("vstore_half((convert_float((convert_float(vload_half((long)2, a_ptr)) * "
            "b_ptr[vload_half(0, a_ptr) > 0]))), (b_ptr[0] > 0 ? 1 : 0), o_ptr);") in text


def test_half_rewrite_refuses_half_arithmetic_it_cannot_carry():
    with pytest.raises(HalfRewriteError, match="beyond loads and stores"):
        rewrite_half(HALF_SOURCE.replace("long n) {", "long n) {\n  half t = 0;"))


def test_local_declarations_move_to_the_kernel_scope_and_thread0_stores_are_fenced():
    source = ("__kernel void k(__global float* restrict o) {\n  for (long i = 0; i < 4; ++i) {\n"
              "    __local float red[64];\n    barrier(CLK_LOCAL_MEM_FENCE);\n"
              "    long cse_v1 = i;\n    if ((convert_long(get_local_id(0))) == (long)0) {\n      o[i] = red[0];\n"
              "    }\n  }\n}\n")
    hoisted = hoist_local_declarations(source).splitlines()
    assert hoisted[1].strip() == "__local float red[64];" and hoisted.count("    __local float red[64];") == 0
    fenced = fence_thread0_stores(source).splitlines()
    assert fenced[fenced.index("      o[i] = red[0];") + 2].strip() == "barrier(CLK_LOCAL_MEM_FENCE);"


def test_launch_expressions_compile_to_python():
    rows, cols = tvm.tirx.Var("rows", "int64"), tvm.tirx.Var("cols", "int64")
    names = _Names()
    plan = LaunchPlan((), ((names.add(rows), 0, 0), (names.add(cols), 0, 1)), ())
    code = python_expr(tvm.tirx.floordiv(cols + 255, 256) * tvm.tirx.max(rows, 1), names)
    env = plan.environment([(3, 1000)])
    assert plan.evaluate(code, env) == 4 * 3
    assert plan.evaluate(code, plan.environment([(0, 0)])) == 0


def test_a_float_scalar_the_host_hoisted_is_computed_in_float32():
    """``1.0 / cols`` hoisted out of a kernel (TVM's host code passes it as an argument):
    float32 arithmetic, as TVM's own host code would do it, and truncation back to int."""
    rows, cols = tvm.tirx.Var("rows", "int64"), tvm.tirx.Var("cols", "int64")
    names = _Names()
    plan = LaunchPlan((), ((names.add(rows), 0, 0), (names.add(cols), 0, 1)), ())
    inverse = tvm.tirx.Div(tvm.tirx.const(1.0, "float32"), cols.astype("float32"))
    env = plan.environment([(3, 7)])
    value = plan.evaluate(python_expr(inverse, names), env)
    assert isinstance(value, float) and value == float(np.float32(1) / np.float32(7)) and value != 1 / 7
    third = tvm.tirx.Mul(inverse, tvm.tirx.const(3.0, "float32")).astype("int32")
    assert plan.evaluate(python_expr(third, names), env) == 0
    wide = tvm.tirx.Div(tvm.tirx.const(1.0, "float64"), cols.astype("float64"))
    assert plan.evaluate(python_expr(wide, names), env) == 1 / 7
