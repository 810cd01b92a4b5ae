"""The streamed row variant on the CPU target (schedules/llvm.py, knob ``aligned_stream``).

Chosen per call by the outputs' addresses (ALIGNED_STREAM: 64-byte aligned -> ymm/zmm
non-temporal stores, 16-byte aligned -> xmm ones, anything else -> the generic kernel), its
stores whole vectors (the library's disassembly, built through the llvm target's own path),
its results the float64 reference's over edge shapes, aligned and not.
"""
from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

from opgen import aclnn, kernels, selection
from opgen.ops import get_op
from opgen.ops import rms_norm_grad
from opgen.ops.rms_norm_grad import Problem as RmsProblem
from opgen.targets import get_target
from opgen.targets.llvm_stream import mark_nontemporal
from aclnn_helpers import assert_matches, base_args, run_both
from test_kernels import _placed
from tiers import FULL

LLVM = get_target("llvm")
RMS = get_op("rms_norm_grad")
MILLION = 1 << 20


def _disassembly(kernel) -> str:
    if kernel.library_path is None:
        pytest.skip("the kernel was not stored (disk cache off): nothing to disassemble")
    done = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(kernel.library_path)],
                          capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"objdump: {done.stderr.strip()}")
    return done.stdout


def _non_temporal(asm: str) -> list[str]:
    """Each non-temporal store of the library as 'mnemonic register'."""
    return re.findall(r"\t(v?movnt\w*)\s+(%\w+)", asm)


IR = """\
define internal fastcc i32 @compute_(ptr noalias %dx, ptr noalias %acc, i64 %n) {
entry:
  %row = getelementptr inbounds nuw float, ptr %dx, i64 %n
  store <16 x float> %v, ptr %row, align 4, !tbaa !3
  store <8 x float> %w, ptr %row, align 4
  store <16 x i16> %h, ptr %row, align 2
  store <3 x float> %t, ptr %row, align 4
  store float 1.0, ptr %row, align 4
  store <16 x float> %v, ptr %acc, align 4
  ret i32 0
}

!3 = !{}
"""


def test_vector_stores_into_an_aligned_buffer_get_its_alignment_up_to_their_size():
    out, count = mark_nontemporal(IR, frozenset({"dx", "acc"}), {"dx": 64})
    stores = [line.strip() for line in out.splitlines() if line.lstrip().startswith("store")]
    assert count == 6
    assert stores[0].startswith("store <16 x float> %v, ptr %row, align 64, !nontemporal")
    assert stores[1].startswith("store <8 x float> %w, ptr %row, align 32, !nontemporal")
    assert stores[2].startswith("store <16 x i16> %h, ptr %row, align 32, !nontemporal")
    assert stores[3].startswith("store <3 x float> %t, ptr %row, align 4, !nontemporal")    # not a power of two
    assert stores[4].startswith("store float 1.0, ptr %row, align 4, !nontemporal")          # scalar
    assert stores[5].startswith("store <16 x float> %v, ptr %acc, align 4, !nontemporal")    # not declared aligned
    assert mark_nontemporal(IR, frozenset({"dx", "acc"}))[0].count("align 64") == 0


VARIANT_KERNELS = [
    pytest.param("rms_norm_grad", "f32-f32", 64, id="rms_norm_grad-f32-f32-64"),
    pytest.param("rms_norm_grad", "bf16-bf16", 64, id="rms_norm_grad-bf16-bf16-64"),
    pytest.param("rms_norm_grad", "f32-f32", 16, id="rms_norm_grad-f32-f32-16"),
    pytest.param("rms_norm_grad", "bf16-f32", 64, id="rms_norm_grad-bf16-f32-64", marks=FULL),
    pytest.param("layer_norm_backward", "f32-f32", 64, id="layer_norm_backward-f32-f32-64", marks=FULL),
    pytest.param("deep_norm_grad", "f32-f32", 64, id="deep_norm_grad-f32-f32-64", marks=FULL),
    pytest.param("rms_norm", "f32-f32", 64, id="rms_norm-f32-f32-64", marks=FULL),
]


@pytest.mark.parametrize("op_name,tag,align", VARIANT_KERNELS)
def test_the_variant_writes_whole_non_temporal_vectors(op_name, tag, align):
    """Every non-temporal store of the built library is a full vector register: ymm or zmm
    where the outputs are 64-byte aligned, xmm where 16; no scalar one (movnti, movntss,
    movntsd: what LLVM splits a vector store into when it cannot prove the alignment)."""
    op = get_op(op_name)
    kernel = kernels.get_kernel(op, op.combo(tag), LLVM, knobs={"aligned_stream": align})
    stores = _non_temporal(_disassembly(kernel))
    assert stores, f"{kernel.symbol}: no non-temporal store"
    registers = {register[:4] for _, register in stores}
    wide = {"%ymm", "%zmm"} if align == 64 else {"%xmm"}
    assert registers <= wide, f"{kernel.symbol}: non-temporal stores through {sorted(registers)}: {stores}"
    assert all(m.startswith(("vmovntps", "vmovntpd", "vmovntdq", "movntps", "movntdq")) for m, _ in stores), stores
    assert kernel.aligned, f"{kernel.symbol}: the variant declares no aligned parameter"


def test_a_misaligned_output_is_refused_by_the_variant_kernel(rng):
    """TVM checks the offset and strides it was promised, not the address; the kernel's
    Python entry does, instead of letting an aligned store fault."""
    combo = RMS.combo("f32-f32")
    kernel = kernels.get_kernel(RMS, combo, LLVM, knobs={"aligned_stream": 64})
    problem = RmsProblem((4, 64), 1)
    arrays = {n: _placed(a, 0) for n, a in RMS.random_inputs(problem, combo, rng).items()}
    arrays.update(dx=_placed(np.zeros((4, 64), np.float32), 16), dgamma=np.zeros(64, np.float32))
    with pytest.raises(ValueError, match="must be 64-byte aligned"):
        kernel(arrays)
    arrays["dx"] = _placed(arrays["dx"], 0)
    kernel(arrays)
    np.testing.assert_allclose(arrays["dx"], RMS.reference(problem, arrays)["dx"], rtol=1e-4, atol=1e-5)


# -------------------------------------------------------------- the choice, per call

def _choice(shape, dx_align, **alignments) -> int:
    problem = RmsProblem(shape, 1)
    shapes = rms_norm_grad.kernel_shapes(problem)
    given = {name: alignments.get(name, 64) for name in shapes}
    given["dx"] = dx_align
    resolution = selection.resolve(RMS, RMS.combo("f32-f32"), LLVM, shapes, given)[0]
    assert resolution.sources["aligned_stream"] in ("default", "shape default")
    return resolution.knobs["aligned_stream"]


def test_the_call_chooses_the_widest_variant_its_output_admits(monkeypatch):
    monkeypatch.delenv("OPGEN_STREAM_VARIANT", raising=False)
    assert _choice((1024, 1024), 64) == 64
    assert _choice((1024, 1024), 16) == 16          # numpy's large arrays: a page + 16 bytes
    assert _choice((1024, 1024), 32) == 16
    assert _choice((1024, 1024), 8) == 0            # the generic kernel
    assert _choice((1024, 1024), 4) == 0
    assert _choice((1024, 1024), 64, x=4, dy=4, gamma=4) == 64   # only the outputs' addresses count
    assert _choice((1023, 1024), 64) == 0           # under 1M elements: the output stays cached
    assert _choice((1024, 1032), 64) == 0           # a row of 4128 bytes: rows would not stay aligned
    assert _choice((0, 1024), 64) == 0
    monkeypatch.setenv("OPGEN_STREAM_VARIANT", "0")
    assert _choice((1024, 1024), 64) == 0


def test_alignment_unknown_or_tuned_never_chooses_it(monkeypatch):
    """Without the call's addresses (alignments None) nothing aligned is chosen, and a
    tuned record cannot set the knob (it is the call's)."""
    shapes = rms_norm_grad.kernel_shapes(RmsProblem((1024, 1024), 1))
    combo = RMS.combo("f32-f32")
    assert selection.resolve(RMS, combo, LLVM, shapes)[0].knobs["aligned_stream"] == 0
    from opgen.tune import lookup
    tuned = {"status": "ok", "median_ms": 1.0, "_source": "db.jsonl:3", "knobs": {"aligned_stream": 64}}
    monkeypatch.setattr(lookup, "records_for", lambda *args: (tuned,))
    assert selection.resolve(RMS, combo, LLVM, shapes, {n: 4 for n in shapes})[0].knobs["aligned_stream"] == 0


# ---------------------------------------------------- correctness through the public API

# Over 1M elements each (the variant's threshold), rows a multiple of 64 bytes for f32 and
# bf16: one row, a ragged last chunk of rows (1031 = 16 x 64 + 7), few long rows; and an
# empty one (the generic kernel).
SHAPES = [(1, 1 << 20), (1031, 1024), (33, 32768)]
EDGE_IDS = ["1x1048576", "1031x1024", "33x32768"]
PLACEMENTS = {0: 64, 16: 16, 4: 0}    # the outputs' byte offset past a 64-byte line -> the variant


@pytest.fixture
def chosen(monkeypatch):
    """The aligned_stream each call's selection made."""
    made = []
    real = selection.select

    def spy(op, combo, target, shapes, alignments=None):
        result = real(op, combo, target, shapes, alignments)
        made.append(result.knobs.get("aligned_stream"))
        return result
    monkeypatch.setattr(selection, "select", spy)
    monkeypatch.delenv("OPGEN_STREAM_VARIANT", raising=False)
    aclnn.clear_plan_cache()
    yield made
    aclnn.clear_plan_cache()


@pytest.mark.parametrize("tag", ["f32-f32", "bf16-bf16"])
@pytest.mark.parametrize("shape", SHAPES, ids=EDGE_IDS)
def test_calls_match_the_reference_through_whichever_kernel_their_address_chose(shape, tag, chosen, rng):
    combo = RMS.combo(tag)
    problem = RmsProblem(shape, 1)
    for offset, expected in PLACEMENTS.items():
        args, arrays = base_args(RMS, problem, combo, rng)
        for param in RMS.api.tensors("output"):
            if np.size(args[param.name]) >= MILLION:
                args[param.name] = _placed(args[param.name], offset)
        chosen.clear()
        assert run_both(RMS, args) == (0, "")
        assert chosen == [expected], f"offset {offset}: chose {chosen}"
        assert_matches(RMS, combo, problem, arrays, args)


def test_empty_calls_take_the_generic_kernel(chosen, rng):
    combo = RMS.combo("f32-f32")
    problem = RmsProblem((0, 1 << 20), 1)
    args, arrays = base_args(RMS, problem, combo, rng)
    assert run_both(RMS, args) == (0, "")
    assert chosen == [0]
    assert_matches(RMS, combo, problem, arrays, args)


def test_only_shapes_the_variant_admits_key_their_plans_on_addresses(monkeypatch):
    """A call too small for the variant (or with rows it cannot take) does not depend on its
    addresses: its plan is not keyed on them and opgen.api may still bind it."""
    monkeypatch.delenv("OPGEN_STREAM_VARIANT", raising=False)
    combo = RMS.combo("f32-f32")

    def by_alignment(shape):
        shapes = rms_norm_grad.kernel_shapes(RmsProblem(shape, 1))
        return selection.resolve(RMS, combo, LLVM, shapes, {n: 64 for n in shapes})[0].by_alignment
    assert by_alignment((1024, 1024))
    assert not by_alignment((4, 64))
    assert not by_alignment((1024, 1032))
    monkeypatch.setenv("OPGEN_STREAM_VARIANT", "0")
    assert not by_alignment((1024, 1024))


def _variant_problems():
    from opgen.ops.deep_norm_grad import Problem as DeepProblem
    from opgen.ops.layer_norm_backward import Problem as LnProblem
    from opgen.ops.rms_norm import Problem as RmsForward
    return [("rms_norm_grad", "f32-f32", RmsProblem((65, 128), 1)),
            ("rms_norm", "f32-f32", RmsForward((7, 64))),
            ("layer_norm_backward", "f32-f32", LnProblem((65, 128), 1)),
            ("deep_norm_grad", "bf16-f32", DeepProblem((3, 7, 64), 1, 0.87)),
            ("rms_norm_grad", "bf16-bf16", RmsProblem((2, 33, 64), 1))]


@pytest.mark.parametrize("case", range(5), ids=["rms_norm_grad", "rms_norm", "layer_norm_backward",
                                                "deep_norm_grad-bf16", "rms_norm_grad-bf16"])
def test_each_row_rule_variant_matches_the_reference(case, rng):
    """The variant kernel itself (any size: the call takes it from 1M elements) of each row
    rule, on 64-byte-aligned arrays, ragged row counts, against the float64 reference."""
    from opgen.dtypes import numpy_dtype
    from opgen.verify import compare_outputs
    op_name, tag, problem = _variant_problems()[case]
    op = get_op(op_name)
    combo = op.combo(tag)
    kernel = kernels.get_kernel(op, combo, LLVM, knobs={"aligned_stream": 64})
    inputs = {n: _placed(a, 0) for n, a in op.random_inputs(problem, combo, rng).items()}
    ref = op.reference(problem, inputs)
    outputs = {n: _placed(np.zeros(np.shape(ref[n]), numpy_dtype(combo[n])), 0) for n in op.outputs}
    kernel(op.kernel_args(problem, {**inputs, **outputs}))    # views: the same (aligned) memory
    outs = outputs
    for c in compare_outputs(op, combo, outs, ref):
        assert c.passed, f"{op_name} {tag} {c.name}: ratio {c.ratio} at {c.worst_index}"
