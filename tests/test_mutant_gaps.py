"""Tests for gaps the mutation harness found (scripts/mutants.py, docs/testing.md): mutants
no default-tier test killed before these existed. Each is cheap (no kernel is built).
"""
from __future__ import annotations

import numpy as np
import pytest

from opgen.dtypes import FLOAT32
from opgen.verify import compare


def test_float32_tolerance_rule_fails_errors_past_the_table():
    """Float32 outputs: an element passes within 1e-4 + 1e-4 * |ref| (plus half a float32
    ulp) and fails past it. The numbers are written out, not read from
    opgen.verify.TOLERANCES: a looser table (x100, what float16 gets x10) must fail here.
    The bf16 rule has its own tests (test_kernels.py); nothing else pinned float32's."""
    ref = np.array([1.0, -2.0, 1000.0, 0.0])
    allowed = 1e-4 + 1e-4 * np.abs(ref)
    inside = (ref + 0.9 * allowed).astype(np.float32)
    assert compare("dx", inside, ref, FLOAT32, FLOAT32).passed
    for i in range(ref.size):
        out = inside.copy()
        out[i] = np.float32(ref[i] + 1.5 * allowed[i])
        result = compare("dx", out, ref, FLOAT32, FLOAT32)
        assert not result.passed and result.worst_index == (i,), (i, result)
        assert 1.4 < result.ratio < 1.6, (i, result)


# A cross-thread reduction's last steps and its thread-0 store, as TVM 0.27 prints them for
# OpenCL (GroupNormBackward's row sums; the buffer casts shortened), then the next statement.
_LID = "(convert_long(get_local_id(0)))"
REDUCTION_TAIL = "".join([
    "  barrier(CLK_LOCAL_MEM_FENCE);\n",
    f"  if ({_LID} < (long)1) {{\n",
    f"    red_buf0_ptr[{_LID}] = (red_buf0_ptr[{_LID}] + red_buf0_ptr[({_LID} + (long)1)]);\n",
    "  }\n",
    "  barrier(CLK_LOCAL_MEM_FENCE);\n",
    f"  if ({_LID} == (long)0) {{\n",
    "    ds_ptr[((convert_long(get_group_id(0))) + ds_elem_offset)] = red_buf0_ptr[(long)0];\n",
    "  }\n",
    "  in_thread_db_ptr[0] = 0.000000e+00f;\n",
])
_STORE = "  if ((convert_long(get_local_id(0))) == (long)0) {"


def _fenced_thread0_stores(source: str) -> tuple[int, int]:
    """(thread-0 stores right after a barrier, how many of them a barrier follows)."""
    lines = [line.rstrip() for line in source.splitlines()]
    after_barrier = fenced = 0
    for i, line in enumerate(lines):
        if line.strip() == _STORE.strip() and lines[i - 1].strip() == "barrier(CLK_LOCAL_MEM_FENCE);":
            after_barrier += 1
            indent = line[:len(line) - len(line.lstrip())]
            close = next(j for j in range(i + 1, len(lines)) if lines[j] == indent + "}")
            fenced += lines[close + 1].strip() == "barrier(CLK_LOCAL_MEM_FENCE);"
    return after_barrier, fenced


def test_opencl_source_fences_a_thread0_store_after_a_reduction():
    """targets/opencl_source.fence_thread0_stores: the barrier PoCL 3.0 needs after a
    reduction's thread-0 store (without it PoCL dropped GroupNorm's row sums). PoCL builds
    that lack the bug compute right without it, so no kernel test notices it missing."""
    from opgen.targets.opencl_source import fence_thread0_stores

    assert _fenced_thread0_stores(REDUCTION_TAIL) == (1, 0)
    fenced = fence_thread0_stores(REDUCTION_TAIL)
    assert _fenced_thread0_stores(fenced) == (1, 1)
    assert fenced.count("barrier(CLK_LOCAL_MEM_FENCE);") == 3
    unrelated = REDUCTION_TAIL.replace("  barrier(CLK_LOCAL_MEM_FENCE);\n" + _STORE, "  x = 1;\n" + _STORE)
    assert fence_thread0_stores(unrelated).count("barrier(CLK_LOCAL_MEM_FENCE);") == 1   # no reduction before it


def test_group_norm_backward_opencl_kernel_fences_its_thread0_stores():
    """The same on the source the opencl target builds (its row sums: ds and db)."""
    from opgen import kernels
    from opgen.ops import get_op
    from opgen.targets import get_target

    target = get_target("opencl")
    if not target.can_run():
        pytest.skip(f"opencl cannot run here: {target.missing()}")
    op = get_op("group_norm_backward")
    source = kernels.get_kernel(op, op.combo("f32-f32"), target).module.source
    stores, fenced = _fenced_thread0_stores(source)
    assert stores >= 2 and fenced == stores, (stores, fenced)


def test_a_te_wrong_at_some_elements_only_fails_the_proof_there(monkeypatch):
    """opgen.derive must compare every element: RmsNormGrad's dx computed from column 0 for
    every column (an indexing bug) is right at [r, 0] and wrong elsewhere. The sign flips
    of test_derive.py change every element, so a proof that compared only the first one
    passed them all."""
    from tvm import te

    from opgen import derive

    original = te.compute

    def compute(shape, fcompute, name="compute", *args, **kwargs):
        if name == "rms_norm_grad_dx":
            body = fcompute

            def fcompute(r, c):
                return body(r, c - c)
        return original(shape, fcompute, name, *args, **kwargs)

    monkeypatch.setattr(te, "compute", compute)
    report = derive.prove("rms_norm_grad", cases=[(2, 3)])
    assert not report.ok, report.summary()
    assert sorted(report.cases[0].mismatches) == [f"rms_norm_grad_dx[{r}, {c}]" for r in range(2) for c in (1, 2)]
