"""LayerNormChannels and its backward (opgen.ops.layer_norm_channels*: LayerNorm over axis 1
of NCHW data, no permute) and opgen.torch.LayerNorm2d, against independent truths:

* both kernels on llvm against the float64 references over the edge shapes: C = 1, 7, 33,
  96; HW = 1, 7x7, 33x1, 941, 12290; ranks 2-4; empty tensors; a float32 and a bfloat16 combo
  (opgen generate verifies every combo);
* llvm schedules both with ColumnPass (one parallel nest over position blocks; the
  backward's channel sums in a second one), not the Fallback;
* LayerNorm2d's forward and backward against torch's channels-first path (permute,
  F.layer_norm, permute back) in float32 and bfloat16.
"""
from __future__ import annotations

import pytest

from opgen import kernels
from opgen.ops import get_op
from opgen.ops.layer_norm_channels import Problem
from opgen.ops.layer_norm_channels_backward import Problem as BackwardProblem
from opgen.targets import get_target

from op_checks import assert_kernel_matches_reference

FORWARD, BACKWARD = get_op("layer_norm_channels"), get_op("layer_norm_channels_backward")
SHAPES = [(2, 1, 4, 4), (2, 7, 7, 7), (3, 33, 33, 1), (1, 7, 1, 1), (2, 96, 941), (1, 5, 12290), (4, 7),
          (0, 3, 4, 4), (2, 3, 0)]
TAGS = ("f32-f32", "bf16-f32")


@pytest.mark.parametrize("tag", TAGS)
def test_forward_matches_the_float64_reference_on_llvm(tag, rng):
    problems = [Problem(s) for s in SHAPES] + [Problem((2, 7, 33), 1e-3)]
    assert_kernel_matches_reference(FORWARD, tag, get_target("llvm"), problems, rng)


@pytest.mark.parametrize("tag", TAGS)
def test_backward_matches_the_float64_reference_on_llvm(tag, rng):
    assert_kernel_matches_reference(BACKWARD, tag, get_target("llvm"), [BackwardProblem(s) for s in SHAPES], rng)


@pytest.mark.parametrize("op", [FORWARD, BACKWARD], ids=lambda op: op.name)
def test_llvm_runs_the_column_pass(op):
    """The position blocks in one parallel loop (the backward: its channel sums in a second)."""
    llvm = get_target("llvm")
    assert type(kernels.matching_rule(op, op.combo("f32-f32"), llvm)).__name__ == "ColumnPass"
    kernel = kernels.get_kernel(op, "f32-f32", llvm)
    assert kernel.tir.count("T.parallel") == (2 if op is BACKWARD else 1)


@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
@pytest.mark.parametrize("shape", [(2, 1, 4, 4), (2, 7, 7, 7), (3, 33, 33, 1), (2, 7, 1, 1), (2, 96, 14, 14)])
def test_layer_norm_2d_matches_torch_channels_first(shape, dtype_name):
    torch = pytest.importorskip("torch")
    import opgen.torch as ot

    dtype = getattr(torch, dtype_name)
    torch.manual_seed(0)
    c = shape[1]
    ours = ot.LayerNorm2d(c).to(dtype)
    with torch.no_grad():
        ours.weight.uniform_(0.5, 1.5)
        ours.bias.normal_()
    x = (torch.randn(shape) * 2 + 0.5).to(dtype)
    dy = torch.randn(shape).to(dtype)
    xo = x.clone().requires_grad_(True)
    ours(xo).backward(dy)
    y_ours = ours(x)
    # torch's channels-first path in float32 from the same (rounded) values: the truth
    xt = x.float().requires_grad_(True)
    w, b = (p.detach().float().requires_grad_(True) for p in (ours.weight, ours.bias))
    yt = torch.nn.functional.layer_norm(xt.movedim(1, -1), (c,), w, b, 1e-6).movedim(-1, 1)
    yt.backward(dy.float())
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    # dx's and dgamma's rounding is rstd times that of x - mean: with C = 1 (rstd = 1/sqrt(eps)
    # = 1e3, true dx and dgamma 0) both sides are rounding noise of that size (torch's; opgen's
    # x - mean is exactly 0 there); compared relative to rstd
    scale = float((xt.detach().var(1, unbiased=False) + 1e-6).rsqrt().max().clamp(min=1.0))
    torch.testing.assert_close(y_ours.float(), yt.detach(), **tol)
    torch.testing.assert_close(xo.grad.float() / scale, xt.grad / scale, **tol)
    torch.testing.assert_close(ours.weight.grad.float() / scale, w.grad / scale, **tol)
    torch.testing.assert_close(ours.bias.grad.float(), b.grad, **tol)
    assert y_ours.dtype == xo.grad.dtype == ours.weight.grad.dtype == dtype


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
def test_layer_norm_2d_keeps_torchs_memory_format(channels_last):
    """y is channels_last for 4-D input, as torch's permute path returns it (the convolutions
    after it keep their format); a channels_last x runs aclnnLayerNorm's row kernels on the
    channels-last view. Values and gradients as torch's either way."""
    torch = pytest.importorskip("torch")
    import opgen.torch as ot

    torch.manual_seed(1)
    ours = ot.LayerNorm2d(24)
    x = torch.randn(2, 24, 5, 6) * 2 + 0.5
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    dy = torch.randn(2, 24, 5, 6)
    xo, xt = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    y = ours(xo)
    yt = torch.nn.functional.layer_norm(xt.permute(0, 2, 3, 1), (24,), ours.weight, ours.bias, 1e-6).permute(0, 3, 1, 2)
    assert y.is_contiguous(memory_format=torch.channels_last) and yt.is_contiguous(memory_format=torch.channels_last)
    y.backward(dy)
    grads = [p.grad.clone() for p in ours.parameters()]
    ours.zero_grad()
    yt.backward(dy)
    torch.testing.assert_close(y, yt, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(xo.grad, xt.grad, rtol=1e-4, atol=1e-4)
    for a, b in zip(grads, ours.parameters()):
        torch.testing.assert_close(a, b.grad, rtol=1e-4, atol=1e-4)
