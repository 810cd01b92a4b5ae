"""aclnnBatchNorm (opgen.ops.batch_norm), the forward the torch BatchNorm2d runs, against
independent truths:

* the kernel, built through opgen.kernels on every target that runs here (llvm, opencl,
  iree-cpu), against the float64 reference in training and eval over channels of 1, 7,
  33, 941 and 12290 elements, channel-last, far-from-zero means and an empty call; every
  combo on the default target, the float32 and a 16-bit combo elsewhere (opgen generate
  verifies every combo everywhere); build-only targets (cuda, iree-cuda, ascend-mlir) build it;
* the saved statistics are what aclnnBatchNormBackward takes: its gradients from them
  equal those from the float64 statistics;
* the aclnn API: a literal call in training and in eval (saveMean/saveInvstd not written
  in eval), refused running statistics in training, refused dtypes and shapes, an empty
  input;
* the sympy proof in both modes, and a flipped sign in the TE fails it.
"""
from __future__ import annotations

import numpy as np
import pytest

import opgen
from opgen import aclnn, derive, kernels
from opgen.ops import get_op
from opgen.ops.batch_norm import Problem
from opgen.targets import get_target

from op_checks import assert_kernel_matches_reference

OP = get_op("batch_norm")
TAGS = [c.tag for c in OP.combos]
SHAPES = [Problem((2, 3, 4, 5)), Problem((1, 1)), Problem((3, 7, 1)), Problem((3, 2, 33), False, 1e-3),
          Problem((2, 5, 941)), Problem((1, 2, 12290)), Problem((7, 6, 5, 3), channel_last=True),
          Problem((4, 3, 2, 2), False), Problem((0, 0)), Problem((0, 3, 4)), Problem((2, 3, 0)),
          Problem((5, 4, 3, 2, 7))]
EVERYWHERE = ("f32-f32", "f16-f16", "bf16-f32-f32")


@pytest.mark.parametrize("tag", TAGS)
def test_kernel_matches_the_float64_reference(target, tag, rng):
    assert_kernel_matches_reference(OP, tag, target, SHAPES, rng, everywhere=EVERYWHERE)


def test_build_only_targets_build_it(build_target):
    """cuda, iree-cuda and ascend-mlir build it (ascend-mlir: the guarded shift
    if_then_else(N * HW > 0, x[0, c, 0], 0) is a window sum of one element or none; every
    combo's kernels reaching HIVM is test_mlir.test_bishengir_takes_every_kernel_to_hivm)."""
    if build_target.can_run() or build_target.own_suite:
        pytest.skip(f"{build_target.name} runs the kernel here (tested above) or has its own suite")
    assert kernels.get_kernel(OP, "f32-f32", build_target) is not None


def test_rules_on_the_cpu_and_the_gpu():
    """llvm: the channel pass (one parallel pass over channels, the shift inlined); GPUs:
    the fallback (GpuChannelPass merges stages as siblings; these chain)."""
    assert type(kernels.matching_rule(OP, OP.combo("f32-f32"), get_target("llvm"))).__name__ == "ChannelPass"
    assert type(kernels.matching_rule(OP, OP.combo("f32-f32"), get_target("opencl"))).__name__ == "GpuFallback"


def test_far_from_zero_mean_keeps_float32_accuracy(rng):
    """The shifted sums: |mean| = 1e4 with std 1 keeps the variance to float32 accuracy
    (E[x^2] - E[x]^2 in float32 would lose it all)."""
    x = (rng.standard_normal((8, 3, 64)) + 1e4).astype(np.float32)
    _, mean, invstd = opgen.batch_norm(x)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(invstd, 1.0 / np.sqrt(x64.var(axis=(0, 2)) + 1e-5), rtol=1e-4)
    np.testing.assert_allclose(mean, x64.mean(axis=(0, 2)), rtol=1e-7)


def test_saved_statistics_feed_the_backward_as_the_float64_ones_do(rng):
    x = (rng.standard_normal((4, 3, 5, 6)) * 2 + 0.5).astype(np.float32)
    w = rng.uniform(0.5, 1.5, 3).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    _, mean, invstd = opgen.batch_norm(x, w, np.zeros(3, np.float32))
    assert mean.dtype == invstd.dtype == np.float32 and mean.shape == (3,)
    x64 = x.astype(np.float64)
    m, s = x64.mean(axis=(0, 2, 3)), 1.0 / np.sqrt(x64.var(axis=(0, 2, 3)) + 1e-5)
    got = opgen.batch_norm_backward(dy, x, w, save_mean=mean, save_invstd=invstd)
    want = opgen.batch_norm_backward(dy, x, w, save_mean=m.astype(np.float32), save_invstd=s.astype(np.float32))
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def _call(x, training, running=(None, None), save=None, **kw):
    c = x.shape[1]
    out = np.zeros_like(x)
    save = save if save is not None else (np.full(c, 7.0, np.float32), np.full(c, 7.0, np.float32))
    args = [x, kw.get("weight"), kw.get("bias"), *running, training, 0.1, 1e-5, out, *save]
    status, size, executor = aclnn.aclnnBatchNormGetWorkspaceSize(*args)
    if status == 0:
        assert aclnn.aclnnBatchNorm(None, size, executor, None) == 0
    return status, out, save


def test_aclnn_training_and_eval(rng):
    x = (rng.standard_normal((3, 4, 5)) * 2 + 0.5).astype(np.float32)
    status, out, (mean, invstd) = _call(x, True)
    x64 = x.astype(np.float64)
    m, s = x64.mean(axis=(0, 2)), 1.0 / np.sqrt(x64.var(axis=(0, 2)) + 1e-5)
    assert status == 0
    np.testing.assert_allclose(mean, m, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(invstd, s, rtol=1e-5)
    np.testing.assert_allclose(out, (x64 - m[:, None]) * s[:, None], rtol=1e-5, atol=1e-5)
    rm, rv = np.full(4, 0.25, np.float32), np.full(4, 2.0, np.float32)
    status, out, (mean, invstd) = _call(x, False, (rm, rv))
    assert status == 0 and (mean == 7.0).all() and (invstd == 7.0).all()      # not written in eval
    np.testing.assert_allclose(out, (x64 - 0.25) / np.sqrt(2.0 + 1e-5), rtol=1e-5, atol=1e-5)
    assert (rm == 0.25).all() and (rv == 2.0).all()


def test_aclnn_eval_takes_null_saved_statistics(rng):
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    status, out, _ = _call(x, False, (np.zeros(3, np.float32), np.ones(3, np.float32)), save=(None, None))
    assert status == 0
    np.testing.assert_allclose(out, x / np.sqrt(1 + 1e-5), rtol=1e-6)


@pytest.mark.parametrize("edit,status", [
    (dict(running=(np.zeros(4, np.float32), None)), 161002),          # opgen: no in-place update (api.py)
    (dict(save=(None, np.zeros(4, np.float32))), 161001),             # an output in training
    (dict(weight=np.ones(5, np.float32)), 161002),                    # not the channel axis' length
    (dict(weight=np.ones(4, np.float16)), 161002),                    # float16 weight with float32 data
    (dict(x=np.ones((6,), np.float32)), 161002),                      # fewer than 2 dims
])
def test_aclnn_refuses(edit, status):
    x = edit.pop("x", np.ones((2, 4, 3), np.float32))
    if x.ndim < 2:
        out = np.zeros_like(x)
        got, _, _ = aclnn.aclnnBatchNormGetWorkspaceSize(x, None, None, None, None, True, 0.1, 1e-5, out,
                                                         np.zeros(1, np.float32), np.zeros(1, np.float32))
    else:
        got, _, _ = _call(x, True, **edit)
    assert got == status


def test_aclnn_empty_input_writes_nothing():
    x = np.zeros((0, 3, 4), np.float32)
    status, out, (mean, invstd) = _call(x, True)
    assert status == 0 and (mean == 7.0).all() and (invstd == 7.0).all()


def test_proof_holds_in_both_modes_and_a_flipped_sign_fails_it(flip_stage):
    assert derive.prove("batch_norm").ok
    hits = flip_stage("batch_norm_offset")
    report = derive.prove("batch_norm", cases=[(2, 2, 2, 1)])
    assert hits and not report.ok


def test_outputs_have_the_documented_dtypes():
    for combo in OP.combos:
        assert combo["y"] == combo["x"] and combo["weight"] == combo["bias"]
        assert combo["running_mean"] == combo["running_var"] == combo["save_mean"] == combo["save_invstd"]
