"""Non-temporal stores on the CPU target (targets/llvm_stream.py, knob ``stream_stores``).

The IR edit on hand-written LLVM IR (what it marks, what it leaves, the fence), the kernels
it produces (bit-identical to plain stores, against the float64 reference, at every byte
offset a caller's memory may have), the schedule's annotation and the per-size default.
"""
from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

from opgen import aclnn, kernels, selection
from opgen.ops import get_op
from opgen.ops import group_norm_backward, rms_norm_grad
from opgen.ops.group_norm_backward import Problem as GroupProblem
from opgen.ops.rms_norm_grad import Problem as RmsProblem
from opgen.tune import lookup
from opgen.schedules import STREAMED_OUTPUT
from opgen.targets import get_target
from opgen.targets.llvm_stream import mark_nontemporal, streamed_buffers
from opgen.verify import run_and_compare
from aclnn_helpers import assert_matches, base_args, run_both
from op_checks import assert_all_pass
from test_kernels import GN_EMPTY, GN_PROBLEMS, RMS_EMPTY, RMS_PROBLEMS, _placed

LLVM = get_target("llvm")
RMS = get_op("rms_norm_grad")
GN = get_op("group_norm_backward")
STREAM = {"stream_stores": True}

IR = """\
define internal fastcc i32 @compute_(ptr noalias %dx, ptr noalias %acc, i64 %n) {
entry:
  %row = getelementptr inbounds nuw float, ptr %dx, i64 %n
  %other = getelementptr float, ptr %acc, i64 %n
  %either = select i1 true, ptr %row, ptr %other
  store float 1.0, ptr %acc, align 4, !tbaa !3
  store <8 x float> zeroinitializer, ptr %row, align 4, !dbg !2
  br label %loop
loop:
  %p = phi ptr [ %row, %entry ], [ %next, %loop ]
  %next = getelementptr inbounds i8, ptr %p, i64 32
  store <8 x float> %v, ptr %p, align 4, !tbaa !3
  store i64 %n, ptr %dx_elem_offset_slot, align 8
  br i1 %c, label %loop, label %done
done:
  store float 2.0, ptr %either, align 4
  ret i32 0
}

define private i32 @__tvm_parallel_lambda(i32 %task_id, ptr %0, ptr %1) {
closure:
  %slot = getelementptr inbounds nuw i8, ptr %1, i64 8
  %dx1 = load ptr, ptr %slot, align 8
  store float 0.0, ptr %1, align 4
  ret i32 0
}

!2 = !{}
!3 = !{!"0x5", !2, i64 0}
"""


def _marked(ir: str) -> list[str]:
    return [line.strip() for line in ir.splitlines() if "!nontemporal" in line and line.lstrip().startswith("store")]


# ------------------------------------------------------------------ the IR edit

def test_stores_reached_from_the_buffer_through_gep_phi_and_select_are_marked():
    out, count = mark_nontemporal(IR, frozenset({"dx"}))
    assert count == 3
    assert _marked(out) == [
        "store <8 x float> zeroinitializer, ptr %row, align 4, !nontemporal !4, !dbg !2",
        "store <8 x float> %v, ptr %p, align 4, !nontemporal !4, !tbaa !3",   # phi of row and row + 32
        "store float 2.0, ptr %either, align 4, !nontemporal !4",             # one arm of the select is dx
    ]


def test_the_edit_leaves_other_buffers_and_same_prefix_names_alone():
    out, _ = mark_nontemporal(IR, frozenset({"dx"}))
    assert "store float 1.0, ptr %acc, align 4, !tbaa !3" in out              # another buffer
    assert "store i64 %n, ptr %dx_elem_offset_slot, align 8\n" in out          # a name that starts with dx
    assert "store float 0.0, ptr %1, align 4\n" in out                         # the closure


def test_each_function_with_a_marked_store_fences_before_it_returns():
    out, _ = mark_nontemporal(IR, frozenset({"dx"}))
    compute, lambda_ = out.split("define private")
    assert "call void @llvm.x86.sse.sfence()\n  ret i32 0" in compute
    assert "sfence" not in lambda_.split("declare")[0]     # nothing marked there: no fence
    assert out.count("declare void @llvm.x86.sse.sfence()") == 1
    assert out.rstrip().splitlines()[-2] == "!4 = !{i32 1}"   # a fresh metadata number


def test_llvm_uniqued_copies_of_the_buffer_name_count():
    ir = IR.replace("store float 0.0, ptr %1", "store float 0.0, ptr %dx1")
    out, count = mark_nontemporal(ir, frozenset({"dx"}))
    assert count == 4 and out.count("call void @llvm.x86.sse.sfence()") == 2


def test_nothing_to_mark_returns_the_ir_unchanged():
    assert mark_nontemporal(IR, frozenset({"dgamma"})) == (IR, 0)


# --------------------------------------------------------------- the kernels it makes

KERNELS = [(op, combo) for op in (RMS, GN) for combo in op.combos]
KERNEL_IDS = [f"{op.name}-{combo.tag}" for op, combo in KERNELS]


@pytest.mark.parametrize("op,combo", KERNELS, ids=KERNEL_IDS)
def test_streamed_kernels_store_the_elementwise_output_around_the_caches(op, combo):
    mod, symbol = kernels.scheduled_module(op, combo, LLVM, knobs=STREAM)
    assert STREAMED_OUTPUT in mod.script()
    assert streamed_buffers(mod) == {f"{op.name}_dx"}
    module = LLVM.build(mod)
    llvm_ir, asm = module.inspect_source("ll"), module.inspect_source("asm")
    stores = re.findall(r"^\s*store .*$", llvm_ir, re.MULTILINE)
    marked = [s for s in stores if "!nontemporal" in s]
    assert marked and len(marked) < len(stores), f"{symbol}: {len(marked)} of {len(stores)} stores marked"
    assert re.search(r"\tv?movnt", asm), f"{symbol}: no non-temporal store instruction"
    assert "sfence" in asm
    plain_mod, _ = kernels.scheduled_module(op, combo, LLVM)
    assert STREAMED_OUTPUT not in plain_mod.script()
    assert "!nontemporal" not in LLVM.build(plain_mod).inspect_source("ll")


def _same_inputs_both_ways(op, combo, problem, rng):
    inputs = op.random_inputs(problem, combo, rng)
    results = []
    for knobs in (None, STREAM):
        comparisons, outputs = run_and_compare(kernels.get_kernel(op, combo, LLVM, knobs=knobs), problem, rng,
                                               inputs=inputs)
        assert_all_pass(comparisons, f"{combo.tag} {problem} knobs={knobs}")
        results.append(outputs)
    for name in op.outputs:
        np.testing.assert_array_equal(results[1][name].view(np.uint8), results[0][name].view(np.uint8),
                                      err_msg=f"{combo.tag} {problem}: {name} differs with non-temporal stores")


@pytest.mark.parametrize("problem", RMS_PROBLEMS + RMS_EMPTY, ids=str)
def test_rms_norm_grad_streamed_matches_reference_and_plain_bit_for_bit(problem, rng):
    for combo in RMS.combos:
        _same_inputs_both_ways(RMS, combo, problem, rng)


@pytest.mark.parametrize("problem", GN_PROBLEMS + GN_EMPTY, ids=str)
def test_group_norm_backward_streamed_matches_reference_and_plain_bit_for_bit(problem, rng):
    for combo in GN.combos:
        _same_inputs_both_ways(GN, combo, problem, rng)


# ------------------------------------------- the default, through the API, any address

KERNEL_SHAPES = {RMS.name: rms_norm_grad.kernel_shapes, GN.name: group_norm_backward.kernel_shapes}
LARGE = [(RMS, RmsProblem((1031, 1021), 1)), (GN, GroupProblem(1, 6, 174763, 3))]   # just over 1M elements


@pytest.mark.parametrize("op,problem", LARGE, ids=["rms_norm_grad", "group_norm_backward"])
def test_no_problem_size_streams_by_default(op, problem):
    """The kernels' non-temporal stores are scalar (no vector alignment is promised), and
    their speed depends on where the caller's arrays lie (schedules/llvm.py, STREAM_STORES:
    DeepNormGrad 8192x4096 f32 on numpy's arrays 4x slower than on torch's): a call
    streams only where a tuned record asks for it."""
    combo = op.combos[0]
    shapes = KERNEL_SHAPES[op.name](problem)
    huge = {name: tuple(4096 if d > 1 else d for d in shape) for name, shape in shapes.items()}
    for case in (shapes, huge):
        resolution = selection.resolve(op, combo, LLVM, case)[0]
        assert resolution.knobs["stream_stores"] is False and resolution.sources["stream_stores"] == "default"


def _tuned(monkeypatch, knobs: dict) -> dict:
    """A tuned record with ``knobs`` for every bucket; the record as the resolver sees it."""
    tuned = {"status": "ok", "median_ms": 1.0, "_source": "db.jsonl:7", "knobs": knobs}
    monkeypatch.setattr(lookup, "records_for", lambda *args: (tuned,))
    return tuned


def test_tuned_knobs_override_the_defaults_and_keep_the_others(monkeypatch):
    """A tuned ``stream_stores`` wins over the default; a record that does not name it
    leaves it at the default."""
    op, problem = LARGE[1]
    combo = op.combos[0]
    shapes = KERNEL_SHAPES[op.name](problem)
    _tuned(monkeypatch, {"parallel": False})
    resolution = selection.resolve(op, combo, LLVM, shapes)[0]
    assert (resolution.knobs["parallel"], resolution.knobs["stream_stores"]) == (False, False)
    assert resolution.sources["parallel"] == "tuned db.jsonl:7"
    assert resolution.sources["stream_stores"] == "default"
    _tuned(monkeypatch, {"stream_stores": True})
    resolution = selection.resolve(op, combo, LLVM, shapes)[0]
    assert resolution.knobs["stream_stores"] is True and resolution.knobs["parallel"] is True
    assert resolution.sources["stream_stores"] == "tuned db.jsonl:7"


@pytest.mark.parametrize("offset", [0, 4, 20, 36], ids=lambda o: f"offset{o}")
@pytest.mark.parametrize("op,problem", LARGE, ids=["rms_norm_grad", "group_norm_backward"])
def test_streamed_calls_write_outputs_at_any_byte_offset(op, problem, offset, rng, monkeypatch):
    """Non-temporal vector stores need aligned addresses; the kernel's are split into
    64-bit ones that take any address. Outputs at 4, 20, 36 bytes past a cache line
    (streamed where a tuned record asks for it, as it is by default nowhere)."""
    _tuned(monkeypatch, {"stream_stores": True})
    aclnn.clear_plan_cache()          # plans made before hold the default kernels
    try:
        for combo in op.combos:
            args, arrays = base_args(op, problem, combo, rng)
            for param in op.api.tensors("output"):
                args[param.name] = _placed(args[param.name], offset)
            assert run_both(op, args) == (0, "")
            assert_matches(op, combo, problem, arrays, args)
    finally:
        aclnn.clear_plan_cache()      # and those made here the streamed ones


def test_streamed_kernels_round_trip_through_the_disk_cache(tmp_path, monkeypatch, rng):
    """The module TVM loads from the edited IR exports like any other; the cached library
    keeps the non-temporal stores (its symbols show the fence) and computes the same."""
    monkeypatch.setenv("OPGEN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("OPGEN_DISK_CACHE", raising=False)
    combo = GN.combo("bf16-bf16")
    built = kernels.build(GN, combo, LLVM, knobs=STREAM)
    loaded = kernels.build(GN, combo, LLVM, knobs=STREAM)
    assert not built.from_disk and loaded.from_disk
    disassembly = subprocess.run(["objdump", "-d", str(loaded.library_path)], capture_output=True, text=True)
    if disassembly.returncode == 0:
        assert "movnti" in disassembly.stdout and "sfence" in disassembly.stdout
    problem = GroupProblem(2, 6, 941, 3)
    inputs = GN.random_inputs(problem, combo, rng)
    outputs = [run_and_compare(kernel, problem, rng, inputs=inputs)[1] for kernel in (built, loaded)]
    for name in GN.outputs:
        np.testing.assert_array_equal(outputs[0][name].view(np.uint8), outputs[1][name].view(np.uint8))
