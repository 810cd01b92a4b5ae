"""opgen.torch's LayerNorm: torch.nn.LayerNorm whose forward is opgen's aclnnLayerNorm kernel
(opgen.ops.layer_norm) and whose backward is this op's kernel.

Imported by opgen.torch (it needs torch and ``torch.ops.opgen.layer_norm`` /
``torch.ops.opgen.layer_norm_backward``, which opgen.torch registers first); ``MODULES`` lists what it exports.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from opgen import torch as opgen_torch


def _affine(x: Tensor, weight: Tensor | None, bias: Tensor | None) -> tuple:
    """weight and bias as aclnnLayerNorm takes them: x's dtype or float32, the same for both
    (the module's parameters as they are when they already are; else both widened to
    float32, C elements each)."""
    given = [t for t in (weight, bias) if t is not None]
    dtypes = {t.dtype for t in given}
    if len(dtypes) <= 1 and dtypes <= {x.dtype, torch.float32}:
        return weight, bias
    return tuple(None if t is None else t.float() for t in (weight, bias))


class _LayerNormFunction(torch.autograd.Function):
    """LayerNorm of x over its last ``len(shape)`` dims: the forward is opgen's aclnnLayerNorm
    kernel, which returns mean and rstd (float32, aclnnLayerNorm's keepdim shape) in exactly
    the form its backward, aclnnLayerNormBackward, takes: saved as they are and handed back
    with no copy or cast."""

    @staticmethod
    def forward(ctx, x, weight, bias, shape: tuple, eps: float):
        gamma, beta = _affine(x, weight, bias)
        y, mean, rstd = opgen_torch.calls.layer_norm(x, list(shape), gamma, beta, eps)
        ctx.save_for_backward(x, mean, rstd, weight)
        ctx.shape, ctx.bias_dtype = shape, None if bias is None else bias.dtype
        return y

    @staticmethod
    def backward(ctx, dy):
        x, mean, rstd, weight = ctx.saved_tensors
        need = ctx.needs_input_grad
        mask = [need[0], weight is not None and need[1], ctx.bias_dtype is not None and need[2]]
        # A float32 weight for half data (a combo every product offers): dgamma/dbeta come out
        # in float32 and are rounded once into the parameters' dtype below. The bias is only
        # validated by the op, never read: it is not passed.
        as_dtype = opgen_torch.as_dtype
        gamma = None if weight is None else as_dtype(weight, torch.float32)
        dx, dgamma, dbeta = opgen_torch.calls.layer_norm_backward(as_dtype(dy, x.dtype), x, list(ctx.shape), mean,
                                                                rstd, gamma, None, mask)
        return (dx if mask[0] else None, as_dtype(dgamma, weight.dtype) if mask[1] else None,
                as_dtype(dbeta, ctx.bias_dtype) if mask[2] else None, None, None)


class LayerNorm(nn.LayerNorm):
    """torch.nn.LayerNorm (same parameters, state_dict and extra_repr) whose forward and
    backward are opgen's aclnnLayerNorm and aclnnLayerNormBackward kernels; the output has
    x's dtype, computed in float32 and rounded once. Inputs opgen cannot take raise what
    torch.nn.LayerNorm raises (a wrong trailing shape, another device) or torch's refusal
    of a dtype (float64)."""

    def forward(self, x: Tensor) -> Tensor:
        opgen_torch.refuse_dtype(x, "opgen layer_norm")
        opgen_torch.refuse_normalized_shape(x, self.normalized_shape, "*, ")
        opgen_torch.refuse_other_devices(x, self.weight, self.bias)
        return _LayerNormFunction.apply(x, self.weight, self.bias, tuple(self.normalized_shape), self.eps)


MODULES = {"LayerNorm": LayerNorm}
