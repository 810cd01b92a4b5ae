"""opgen.torch's LayerNorm: torch.nn.LayerNorm whose backward is this op's kernel.

Imported by opgen.torch (it needs torch and ``torch.ops.opgen.layer_norm_backward``, which
opgen.torch registers first); ``MODULES`` lists what it exports.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn


class _LayerNormFunction(torch.autograd.Function):
    """LayerNorm of x over its last ``len(shape)`` dims with float32 statistics (saved as
    aclnnLayerNorm saves them: x's leading dims, then 1s); the backward is opgen's."""

    @staticmethod
    def forward(ctx, x, weight, bias, shape: tuple, eps: float):
        dims = tuple(range(x.dim() - len(shape), x.dim()))
        xf = x.float()
        mean = xf.mean(dim=dims, keepdim=True)
        rstd = torch.rsqrt(xf.var(dim=dims, unbiased=False, keepdim=True) + eps)
        y = (xf - mean) * rstd
        if weight is not None:
            y = y * weight.float()
        if bias is not None:
            y = y + bias.float()
        ctx.save_for_backward(x, mean, rstd, weight)
        ctx.shape, ctx.bias_dtype = shape, None if bias is None else bias.dtype
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        x, mean, rstd, weight = ctx.saved_tensors
        need = ctx.needs_input_grad
        mask = [need[0], weight is not None and need[1], ctx.bias_dtype is not None and need[2]]
        # A float32 weight for half data (a combo every product offers): dgamma/dbeta come out
        # in float32 and are rounded once into the parameters' dtype below. The bias is only
        # validated by the op, never read: it is not passed.
        gamma = None if weight is None else weight.float()
        dx, dgamma, dbeta = torch.ops.opgen.layer_norm_backward(dy.to(x.dtype), x, list(ctx.shape), mean, rstd,
                                                                gamma, None, mask)
        return (dx if mask[0] else None, dgamma.to(weight.dtype) if mask[1] else None,
                dbeta.to(ctx.bias_dtype) if mask[2] else None, None, None)


class LayerNorm(nn.LayerNorm):
    """torch.nn.LayerNorm (same parameters, state_dict and extra_repr) whose backward is
    opgen's aclnnLayerNormBackward kernel."""

    def forward(self, x: Tensor) -> Tensor:
        return _LayerNormFunction.apply(x, self.weight, self.bias, tuple(self.normalized_shape), self.eps)


MODULES = {"LayerNorm": LayerNorm}
