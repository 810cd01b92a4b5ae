"""aclnnGroupNormSwish (opgen.ops.group_norm_swish), the forward opgen.torch.GroupNormSwish
runs, against independent truths:

* the kernel, built through opgen.kernels on every target that runs here, against the
  float64 reference over every dtype combo, groups of 1, 7, 33, 941 and 12290 elements,
  empty groups and batches, activateSwish off, negative and fractional swishScale;
* activateSwish=false is GroupNorm itself (aclnnGroupNorm's kernel, same inputs);
* the statistics are what aclnnGroupNormSwishGrad takes back;
* the document's C example, literally, and what it refuses (empty x, C not divisible);
* the sympy proof, and a flipped sign in the swish fails it.
"""
from __future__ import annotations

import numpy as np
import pytest

import opgen
from opgen import aclnn, derive
from opgen.ops import get_op
from opgen.ops.group_norm_swish import Problem

from op_checks import assert_kernel_matches_reference

OP = get_op("group_norm_swish")
TAGS = [c.tag for c in OP.combos]
SHAPES = [Problem(3, 1, 1, 1), Problem(2, 7, 1, 7), Problem(2, 6, 33, 3, 1e-5, 0.5), Problem(1, 64, 941, 64),
          Problem(2, 4, 12290, 2, 1e-3, -2.0), Problem(3, 2130, 7, 71, 1e-5, 1.0, False), Problem(0, 4, 5, 2),
          Problem(2, 4, 0, 2)]


@pytest.mark.parametrize("tag", TAGS)
def test_kernel_matches_the_float64_reference(target, tag, rng):
    assert_kernel_matches_reference(OP, tag, target, SHAPES, rng)


def test_without_the_swish_it_is_group_norm(rng):
    x = (rng.standard_normal((2, 8, 5, 3)) * 2 + 0.5).astype(np.float32)
    gamma, beta = rng.uniform(0.5, 1.5, 8).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    plain = opgen.group_norm(x, gamma, beta, 4)
    swish_off = opgen.group_norm_swish(x, gamma, beta, 4, activate_swish=False)
    for a, b in zip(swish_off, plain):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    y, _, _ = opgen.group_norm_swish(x, gamma, beta, 4, swish_scale=0.5)
    np.testing.assert_allclose(y, plain[0] / (1 + np.exp(-0.5 * plain[0].astype(np.float64))), rtol=1e-5, atol=1e-6)


def test_statistics_feed_the_backward(rng):
    x = (rng.standard_normal((3, 8, 20)) * 2 + 0.5).astype(np.float32)
    gamma, beta = rng.uniform(0.5, 1.5, 8).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    _, mean, rstd = opgen.group_norm_swish(x, gamma, beta, 4, swish_scale=0.5)
    xg = x.astype(np.float64).reshape(3, 4, -1)
    exact = [s.astype(np.float32) for s in (xg.mean(axis=2), 1 / np.sqrt(xg.var(axis=2) + 1e-5))]
    got = opgen.group_norm_swish_grad(dy, mean, rstd, x, gamma, beta, 4, swish_scale=0.5)
    want = opgen.group_norm_swish_grad(dy, *exact, x, gamma, beta, 4, swish_scale=0.5)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_the_documents_example_literally():
    """aclnnGroupNormSwish.md's example: x = 1..24 as (2, 3, 4) float32, gamma = beta = 2,
    numGroups 1, eps 1e-5, activateSwish true, swishScale 1, dataFormat "NCHW"."""
    x = np.arange(1, 25, dtype=np.float32).reshape(2, 3, 4)
    gamma, beta = np.full(3, 2.0, np.float32), np.full(3, 2.0, np.float32)
    out, mean, rstd = np.zeros_like(x), np.zeros((2, 1), np.float32), np.zeros((2, 1), np.float32)
    status, size, executor = aclnn.aclnnGroupNormSwishGetWorkspaceSize(x, gamma, beta, 1, "NCHW", 1e-5, True, 1.0,
                                                                       out, mean, rstd)
    assert status == 0 and aclnn.aclnnGroupNormSwish(None if not size else bytearray(size), size, executor, None) == 0
    xg = x.astype(np.float64).reshape(2, -1)
    z = ((xg - xg.mean(axis=1, keepdims=True)) / np.sqrt(xg.var(axis=1, keepdims=True) + 1e-5)) * 2 + 2
    np.testing.assert_allclose(out, (z / (1 + np.exp(-z))).reshape(x.shape), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(mean[:, 0], xg.mean(axis=1), rtol=1e-6)
    np.testing.assert_allclose(rstd[:, 0], 1 / np.sqrt(xg.var(axis=1) + 1e-5), rtol=1e-5)


@pytest.mark.parametrize("change,status", [
    (dict(numGroups=4), 161002),                     # C = 6 not divisible
    (dict(x=np.zeros((0, 6, 9), np.float32), yOut=np.zeros((0, 6, 9), np.float32),
          meanOut=np.zeros((0, 3), np.float32), rstdOut=np.zeros((0, 3), np.float32)), 161002),   # empty x
    (dict(gamma=np.ones(6, np.float16)), 161002),    # gamma and beta differ
    (dict(meanOut=np.zeros((2, 3), np.float16)), 161002),
    (dict(beta=None), 161001),
])
def test_aclnn_refuses_what_the_document_refuses(change, status, rng):
    x = rng.standard_normal((2, 6, 9)).astype(np.float32)
    args = dict(x=x, gamma=np.ones(6, np.float32), beta=np.zeros(6, np.float32), numGroups=3,
                dataFormatOptional=None, eps=1e-5, activateSwish=True, swishScale=1.0, yOut=np.zeros_like(x),
                meanOut=np.zeros((2, 3), np.float32), rstdOut=np.zeros((2, 3), np.float32))
    args.update(change)
    got, _, _ = aclnn.aclnnGroupNormSwishGetWorkspaceSize(**args)
    assert got == status


def test_half_data_with_float32_parameters_gives_float32_statistics(rng):
    x = rng.standard_normal((2, 4, 5)).astype(np.float16)
    y, mean, rstd = opgen.group_norm_swish(x, np.ones(4, np.float32), np.zeros(4, np.float32), 2)
    assert y.dtype == np.float16 and mean.dtype == rstd.dtype == np.float32


def test_proof_holds_and_a_flipped_sign_fails_it(flip_stage):
    assert derive.prove("group_norm_swish").ok
    hits = flip_stage("group_norm_swish_y")
    report = derive.prove("group_norm_swish", cases=[(1, 2, 2, 2)])
    assert hits and not report.ok
    assert {m.split("[")[0] for m in report.cases[0].mismatches} == {"group_norm_swish_y"}
