"""aclnnLayerNorm (opgen.ops.layer_norm), the forward the torch LayerNorm runs, against
independent truths:

* the kernel, built through opgen.kernels on every target that runs here (llvm, opencl,
  iree-cpu), against the float64 reference over shapes of 1, 7, 33, 941 and 12290
  columns, ranks 1-4, several eps, empty tensors; every combo on the default target, the
  float32 and a 16-bit combo elsewhere (opgen generate verifies every combo everywhere);
* build-only targets (cuda, iree-cuda, ascend-mlir) build it;
* the mean and rstd it returns are what aclnnLayerNormBackward takes: the backward fed them
  equals the backward fed the float64 statistics;
* the aclnn API: a literal call with null weight and bias, the statistics' shape rule,
  refused dtypes and the null statistics opgen requires;
* the sympy proof, and a flipped sign in the TE fails it;
* ascend-emu schedules it as row tiles whose mean and rstd are per-row outputs.
"""
from __future__ import annotations

import numpy as np
import pytest

import opgen
from opgen import aclnn, derive, kernels
from opgen.ops import get_op
from opgen.ops.layer_norm import Problem
from opgen.targets import get_target

from op_checks import ascend_roles, assert_kernel_matches_reference

OP = get_op("layer_norm")
TAGS = [c.tag for c in OP.combos]
SHAPES = [Problem((3, 1)), Problem((5, 7)), Problem((2, 33), 1, 1e-3), Problem((4, 941)), Problem((3, 12290)),
          Problem((16,)), Problem((2, 3, 4, 5), 2), Problem((0, 8)), Problem((4, 0)), Problem((6, 64), 1, 0.5)]
EVERYWHERE = ("f32-f32", "f16-f16", "bf16-f32-f32")   # float32; half statistics (GpuRowReduce stores them
# from the float32 register); the module's bfloat16 combo


@pytest.mark.parametrize("tag", TAGS)
def test_kernel_matches_the_float64_reference(target, tag, rng):
    assert_kernel_matches_reference(OP, tag, target, SHAPES, rng, everywhere=EVERYWHERE)


def test_build_only_targets_build_it(build_target):
    if build_target.can_run() or build_target.own_suite:
        pytest.skip(f"{build_target.name} runs the kernel here (tested above) or has its own suite")
    assert kernels.get_kernel(OP, "f32-f32", build_target) is not None


def test_far_from_zero_mean_keeps_float32_accuracy(rng):
    """The variance about the mean: |mean| = 1e4 with std 1 keeps rstd to float32 accuracy."""
    x = (rng.standard_normal((4, 256)) + 1e4).astype(np.float32)
    _, mean, rstd = opgen.layer_norm(x, [256])
    x64 = x.astype(np.float64)
    want = 1.0 / np.sqrt(x64.var(axis=1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(rstd, want, rtol=1e-4)


def test_llvm_runs_the_fused_row_pass():
    """One parallel loop over rows holding both sums, the statistics and y."""
    kernel = kernels.get_kernel(OP, "f32-f32", "llvm")
    assert type(kernels.matching_rule(OP, OP.combo("f32-f32"), get_target("llvm"))).__name__ == "RowPass"
    assert type(kernels.matching_rule(OP, OP.combo("f32-f32"), get_target("opencl"))).__name__ == "GpuRowReduce"
    assert kernel.tir.count("T.parallel") == 1 and not kernel.scratch


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_statistics_feed_the_backward_as_the_float64_ones_do(dtype, rng):
    """The forward's mean and rstd (float32, keepdim) are aclnnLayerNormBackward's inputs as
    they are: its gradients from them are within float32 rounding of those from float64
    statistics."""
    x = (rng.standard_normal((6, 3, 40)) * 2 + 0.5).astype(dtype)
    w = rng.uniform(0.5, 1.5, (3, 40)).astype(np.float32)
    dy = rng.standard_normal((6, 3, 40)).astype(dtype)
    _, mean, rstd = opgen.layer_norm(x, [3, 40], w, np.zeros_like(w), 1e-5)
    assert mean.shape == rstd.shape == (6, 1, 1) and mean.dtype == rstd.dtype == np.float32
    x64 = x.astype(np.float64)
    m = x64.mean(axis=(1, 2), keepdims=True)
    r = 1.0 / np.sqrt(x64.var(axis=(1, 2), keepdims=True) + 1e-5)
    np.testing.assert_allclose(mean, m, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rstd, r, rtol=1e-5)
    got = opgen.layer_norm_backward(dy, x, [3, 40], mean, rstd, w)
    want = opgen.layer_norm_backward(dy, x, [3, 40], m.astype(np.float32), r.astype(np.float32), w)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=1e-3, atol=1e-3)


def test_aclnn_literal_call_with_null_weight_and_bias(rng):
    x = (rng.standard_normal((2, 3, 8)) + 0.5).astype(np.float32)
    out, mean, rstd = np.zeros_like(x), np.zeros((2, 1, 1), np.float32), np.zeros((2, 1, 1), np.float32)
    status, size, executor = aclnn.aclnnLayerNormGetWorkspaceSize(x, [3, 8], None, None, 0.25, out, mean, rstd)
    assert status == 0
    assert aclnn.aclnnLayerNorm(None, size, executor, None) == 0
    x64 = x.astype(np.float64)
    m, r = x64.mean(axis=(1, 2), keepdims=True), 1.0 / np.sqrt(x64.var(axis=(1, 2), keepdims=True) + 0.25)
    np.testing.assert_allclose(mean, m, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rstd, r, rtol=1e-5)
    np.testing.assert_allclose(out, (x64 - m) * r, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("change,status", [
    (dict(mean=np.zeros((2, 1), np.float32)), 161002),                   # not [A1..Ai, 1, 1]
    (dict(mean=None), 161001),                                           # opgen requires the statistics
    (dict(out=np.zeros((2, 3, 8), np.float16)), 161002),                 # out not in input's dtype
    (dict(weight=np.ones(8, np.float32)), 161002),                       # weight not normalizedShape
    (dict(norm=[4, 8]), 161002),                                         # trailing dims differ
    (dict(norm=[]), 161002),
    (dict(out=None), 161001),
])
def test_aclnn_refuses_what_the_document_refuses(change, status):
    args = dict(x=np.ones((2, 3, 8), np.float32), norm=[3, 8], weight=None, bias=None,
                out=np.zeros((2, 3, 8), np.float32), mean=np.zeros((2, 1, 1), np.float32),
                rstd=np.zeros((2, 1, 1), np.float32))
    args.update(change)
    got, _, _ = aclnn.aclnnLayerNormGetWorkspaceSize(args["x"], args["norm"], args["weight"], args["bias"], 1e-5,
                                                     args["out"], args["mean"], args["rstd"])
    assert got == status


def test_no_bfloat16_on_atlas_training():
    import ml_dtypes

    x = np.ones((2, 8), ml_dtypes.bfloat16)
    with _product("AtlasTraining"):
        got, _, _ = aclnn.aclnnLayerNormGetWorkspaceSize(x, [8], None, None, 1e-5, np.zeros_like(x),
                                                         np.zeros((2, 1), np.float32), np.zeros((2, 1), np.float32))
    assert got == 161002


class _product:
    def __init__(self, name):
        self.name = name

    def __enter__(self):
        self.old = opgen.config.get_product()
        opgen.set_product(self.name)

    def __exit__(self, *exc):
        opgen.set_product(self.old)


def test_proof_holds_and_a_flipped_sign_fails_it(flip_stage):
    assert derive.prove("layer_norm").ok
    hits = flip_stage("layer_norm_y")
    report = derive.prove("layer_norm", cases=[(2, 3)])
    assert hits and not report.ok
    assert any(m.startswith("layer_norm_y") for m in report.cases[0].mismatches)


def test_ascend_emu_schedules_the_forward_as_row_tiles_storing_mean_and_rstd():
    """The row rule takes the forward, mean and rstd per-row outputs (tests/test_ascend_forward.py
    runs it on the emulation)."""
    roles = ascend_roles(OP, "f32-f32")
    assert roles["layer_norm_mean"] == roles["layer_norm_rstd"] == "row_output" and roles["layer_norm_y"] == "tile"


def test_outputs_have_the_documented_dtypes():
    for combo in OP.combos:
        assert combo["y"] == combo["x"] and combo["mean"] == combo["rstd"] in (combo["x"], "float32")
        assert combo["gamma"] == combo["beta"] in (combo["x"], "float32")
