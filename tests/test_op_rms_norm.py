"""aclnnRmsNorm (opgen.ops.rms_norm), the forward the torch RMSNorm runs, against
independent truths:

* the kernel, built through opgen.kernels on every target that runs here, against the
  float64 reference over every dtype combo and shapes of 1, 7, 33, 941 and 12290 columns,
  ranks 1-4, several eps, empty tensors;
* the rstd it returns is what aclnnRmsNormGrad takes: the backward fed the forward's rstd
  equals the backward fed the float64 statistics;
* the aclnn API: a literal call, the rstdOut shape rule, epsilon per call, a refused dtype;
* the sympy proof, and a flipped sign in the TE fails it;
* ascend-emu schedules it with the row rule, rstd a per-row output (built and run in
  tests/test_ascend_forward.py).
"""
from __future__ import annotations

import numpy as np
import pytest

import opgen
from opgen import aclnn, derive, kernels
from opgen.dtypes import numpy_dtype
from opgen.ops import get_op
from opgen.ops.rms_norm import Problem
from opgen.targets import get_target

from op_checks import ascend_roles, assert_kernel_matches_reference

OP = get_op("rms_norm")
TAGS = [c.tag for c in OP.combos]
SHAPES = [Problem((3, 1)), Problem((5, 7)), Problem((2, 33), 1, 1e-5), Problem((4, 941)), Problem((3, 12290)),
          Problem((16,)), Problem((2, 3, 4, 5), 2), Problem((0, 8)), Problem((4, 0)), Problem((6, 64), 1, 0.5)]


@pytest.mark.parametrize("tag", TAGS)
def test_kernel_matches_the_float64_reference(target, tag, rng):
    assert_kernel_matches_reference(OP, tag, target, SHAPES, rng)


def test_llvm_runs_the_fused_row_pass():
    """One parallel loop over rows holding the sum, rstd and y: no second pass over x."""
    kernel = kernels.get_kernel(OP, "f32-f32", "llvm")
    assert type(kernels.matching_rule(OP, OP.combo("f32-f32"), get_target("llvm"))).__name__ == "RowPass"
    assert kernel.tir.count("T.parallel") == 1 and not kernel.scratch


def test_rstd_feeds_the_backward_as_the_float64_statistics_do(rng):
    """The forward's rstd (float32, keepdim) is aclnnRmsNormGrad's input as it is: dx from it
    is within the f32 tolerance of dx from float64 statistics."""
    x = rng.standard_normal((6, 40)).astype(np.float32)
    gamma = rng.uniform(0.5, 1.5, 40).astype(np.float32)
    dy = rng.standard_normal((6, 40)).astype(np.float32)
    y, rstd = opgen.rms_norm(x, gamma, 1e-6)
    assert rstd.shape == (6, 1) and rstd.dtype == np.float32
    exact = 1.0 / np.sqrt(np.mean(x.astype(np.float64) ** 2, axis=1, keepdims=True) + 1e-6)
    dx, dgamma = opgen.rms_norm_grad(dy, x, rstd, gamma)
    dx_exact, dgamma_exact = opgen.rms_norm_grad(dy, x, exact.astype(np.float32), gamma)
    np.testing.assert_allclose(dx, dx_exact, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dgamma, dgamma_exact, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(2, 16), (7,), (3, 5, 33)], ids=str)
def test_gamma_of_xs_full_rank_normalizes_all_of_x(shape, rng):
    """n = 0 (gamma's shape is x's; any 1-d x): the document's n < x.dims() allows it and
    CANN's tiling refuses only gamma of more dimensions than x (N1 in docs/specs/aclnnRmsNorm.md,
    GemmaRmsNorm's G1): one row of every element, rstdOut all ones in its shape."""
    x = rng.standard_normal(shape).astype(np.float32)
    gamma = rng.uniform(0.5, 1.5, shape).astype(np.float32)
    y, rstd = np.zeros_like(x), np.zeros((1,) * len(shape), np.float32)
    status, size, executor = aclnn.aclnnRmsNormGetWorkspaceSize(x, gamma, 1e-6, y, rstd)
    assert status == 0 and aclnn.aclnnRmsNorm(None, size, executor, None) == 0
    want = 1.0 / np.sqrt(np.mean(x.astype(np.float64) ** 2) + 1e-6)
    np.testing.assert_allclose(rstd.ravel(), [want], rtol=1e-6)
    np.testing.assert_allclose(y, x.astype(np.float64) * want * gamma, rtol=1e-5, atol=1e-6)


def test_aclnn_literal_call_and_epsilon_per_call(rng):
    x = rng.standard_normal((2, 3, 8)).astype(np.float32)
    gamma = rng.uniform(0.5, 1.5, (3, 8)).astype(np.float32)
    for eps in (1e-6, 0.25):
        y, rstd = np.zeros_like(x), np.zeros((2, 1, 1), np.float32)
        status, size, executor = aclnn.aclnnRmsNormGetWorkspaceSize(x, gamma, eps, y, rstd)
        assert status == 0
        assert aclnn.aclnnRmsNorm(None, size, executor, None) == 0
        want = 1.0 / np.sqrt(np.mean(x.astype(np.float64) ** 2, axis=(1, 2), keepdims=True) + eps)
        np.testing.assert_allclose(rstd, want, rtol=1e-6)
        np.testing.assert_allclose(y, x * want * gamma, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("rstd_shape,x_dtype,status", [((2, 3), np.float32, 561002), ((2, 3, 1), np.float16, 161002)])
def test_aclnn_refuses_what_the_document_refuses(rstd_shape, x_dtype, status):
    """rstdOut keeps x's rank (the normalized dims 1); x's dtype must be a row of the table."""
    x = np.ones((2, 3, 8), x_dtype)
    gamma = np.ones(8, np.float32 if x_dtype == np.float32 else np.float64)
    got, _, _ = aclnn.aclnnRmsNormGetWorkspaceSize(x, gamma, 1e-6, np.zeros_like(x), np.zeros(rstd_shape, np.float32))
    assert got == status


def test_proof_holds_and_a_flipped_sign_fails_it(flip_stage):
    assert derive.prove("rms_norm").ok
    hits = flip_stage("rms_norm_rstd")
    report = derive.prove("rms_norm", cases=[(2, 3)])
    assert hits and not report.ok
    assert any(m.startswith("rms_norm_rstd") for m in report.cases[0].mismatches)


def test_ascend_emu_schedules_the_forward_as_row_tiles_storing_rstd():
    """The row rule takes the forward, rstd a per-row output (tests/test_ascend_forward.py
    builds and runs it on the emulation)."""
    roles = ascend_roles(OP, "f32-f32")
    assert roles["rms_norm_rstd"] == "row_output" and roles["rms_norm_y"] == "tile"


def test_outputs_have_the_documented_dtypes():
    for combo in OP.combos:
        assert numpy_dtype(combo["rstd"]) == np.float32 and combo["y"] == combo["x"]
