"""aclnnGroupNorm (opgen.ops.group_norm), the forward the torch GroupNorm runs, against
independent truths:

* the kernel, built through opgen.kernels on every target that runs here, against the
  float64 reference over every dtype combo and group sizes of 1, 7, 33, 941 and 12290
  elements, single and many groups, empty tensors, eps, an off-centre input;
* mean and rstd are what aclnnGroupNormBackward takes: the backward fed them equals the
  backward fed the float64 statistics;
* the aclnn API: a literal call with null gamma/beta, the documented errors, the
  statistics' dtype by product;
* the sympy proof, and a flipped sign in the TE fails it;
* the CPU schedule is one parallel grouped pass; ascend-emu schedules it with the group rule.
"""
from __future__ import annotations

import numpy as np
import pytest

import opgen
from opgen import aclnn, derive, kernels
from opgen.ops import get_op
from opgen.ops.group_norm import Problem
from opgen.targets import get_target
from opgen.verify import run_and_compare

from aclnn_helpers import product
from op_checks import ascend_roles, assert_all_pass, assert_kernel_matches_reference

OP = get_op("group_norm")
TAGS = [c.tag for c in OP.combos]
SHAPES = [Problem(3, 1, 1, 1), Problem(2, 7, 1, 7), Problem(2, 6, 33, 3), Problem(1, 64, 941, 64),
          Problem(2, 4, 12290, 2, 1e-3), Problem(3, 2130, 7, 71), Problem(0, 4, 5, 2), Problem(2, 4, 0, 2),
          Problem(2, 8, 16, 1, 0.5)]


@pytest.mark.parametrize("tag", TAGS)
def test_kernel_matches_the_float64_reference(target, tag, rng):
    assert_kernel_matches_reference(OP, tag, target, SHAPES, rng)


def test_far_from_zero_mean_keeps_float32_accuracy(rng):
    """The variance is taken about the mean: an input at 1000 +- 1 keeps rstd to f32 accuracy
    (E[x^2] - E[x]^2 in float32 would lose every digit of it)."""
    kernel = kernels.get_kernel(OP, "f32-f32", "llvm")
    problem = Problem(2, 4, 300, 2)
    arrays = OP.random_inputs(problem, OP.combo("f32-f32"), rng)
    arrays["x"] = (rng.standard_normal(problem.x_shape) + 1000.0).astype(np.float32)
    comparisons, _ = run_and_compare(kernel, problem, rng, arrays)
    assert_all_pass([c for c in comparisons if c.name in ("mean", "rstd")], "off-centre input")


def test_llvm_runs_one_fused_grouped_pass():
    kernel = kernels.get_kernel(OP, "f32-f32", "llvm")
    assert type(kernels.matching_rule(OP, OP.combo("f32-f32"), get_target("llvm"))).__name__ == "GroupedRowPass"
    assert kernel.tir.count("T.parallel") == 1 and not kernel.scratch


def test_statistics_feed_the_backward_as_the_float64_ones_do(rng):
    x = (rng.standard_normal((3, 8, 20)) * 2 + 0.5).astype(np.float32)
    gamma, beta = rng.uniform(0.5, 1.5, 8).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    y, mean, rstd = opgen.group_norm(x, gamma, beta, 4)
    xg = x.astype(np.float64).reshape(3, 4, -1)
    exact = (xg.mean(axis=2), 1 / np.sqrt(xg.var(axis=2) + 1e-5))
    got = opgen.group_norm_backward(dy, x, mean, rstd, gamma, 4)
    want = opgen.group_norm_backward(dy, x, *(s.astype(np.float32) for s in exact), gamma, 4)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_aclnn_literal_call_with_null_gamma_and_beta(rng):
    x = rng.standard_normal((2, 6, 3, 3)).astype(np.float32)
    out, mean, rstd = np.zeros_like(x), np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float32)
    status, size, executor = aclnn.aclnnGroupNormGetWorkspaceSize(x, None, None, 2, 6, 9, 3, 1e-5, out, mean, rstd)
    assert status == 0 and aclnn.aclnnGroupNorm(None if not size else bytearray(size), size, executor, None) == 0
    xg = x.astype(np.float64).reshape(2, 3, -1)
    np.testing.assert_allclose(mean, xg.mean(axis=2), rtol=1e-5, atol=1e-6)
    want = (xg - xg.mean(axis=2, keepdims=True)) / np.sqrt(xg.var(axis=2, keepdims=True) + 1e-5)
    np.testing.assert_allclose(out, want.reshape(x.shape), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("change,status", [
    (dict(group=4), 161002),            # C = 6 not divisible
    (dict(eps=0.0), 161002),
    (dict(N=3), 161002),
    (dict(self=None), 161001),
])
def test_aclnn_refuses_what_the_document_refuses(change, status, rng):
    x = rng.standard_normal((2, 6, 9)).astype(np.float32)
    args = dict(self=x, gamma=None, beta=None, N=2, C=6, HxW=9, group=3, eps=1e-5, out=np.zeros_like(x),
                meanOut=np.zeros((2, 3), np.float32), rstdOut=np.zeros((2, 3), np.float32))
    args.update(change)
    got, _, _ = aclnn.aclnnGroupNormGetWorkspaceSize(**args)
    assert got == status


@pytest.mark.parametrize("name,stat", [("Ascend950", np.float32), ("AtlasA2", np.float16)])
def test_statistics_are_float32_where_the_product_offers_them(name, stat, rng):
    x = rng.standard_normal((2, 4, 5)).astype(np.float16)
    with product(name):
        y, mean, rstd = opgen.group_norm(x, None, None, 2)
    assert y.dtype == np.float16 and mean.dtype == rstd.dtype == stat


def test_proof_holds_and_a_flipped_sign_fails_it(flip_stage):
    assert derive.prove("group_norm").ok
    hits = flip_stage("group_norm_shift")
    report = derive.prove("group_norm", cases=[(1, 2, 2, 2)])
    assert hits and not report.ok
    assert {m.split("[")[0] for m in report.cases[0].mismatches} == {"group_norm_y"}


def test_ascend_emu_schedules_the_forward_as_group_tiles_storing_mean_and_rstd():
    """The group rule takes the forward: mean and rstd per-task outputs, the centred sum a
    channel sum of a second phase, scale and shift inlined into y (tests/test_ascend_forward.py
    builds and runs it on the emulation)."""
    roles = ascend_roles(OP, "f32-f32")
    assert roles["group_norm_mean"] == roles["group_norm_rstd"] == "task_output"
    assert roles["group_norm_sq"] == roles["group_norm_sum"] == "channel_sum"
    assert "group_norm_scale" not in roles and "group_norm_shift" not in roles
