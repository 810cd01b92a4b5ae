"""opgen.torch's LayerNorm: torch.nn.LayerNorm whose backward is this op's kernel.

Imported by opgen.torch (it needs torch and ``torch.ops.opgen.layer_norm_backward``, which
opgen.torch registers first); ``MODULES`` lists what it exports.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn


class _LayerNormFunction(torch.autograd.Function):
    """LayerNorm of x over its last ``len(shape)`` dims with float32 statistics (saved as
    aclnnLayerNorm saves them: x's leading dims, then 1s); the backward is opgen's.

    The forward is ATen's ``native_layer_norm`` until opgen generates LayerNorm's forward
    (it returns the statistics the backward takes, in float32 when the affine parameters
    are float32, so they are passed as float32). The composite of eager ops it replaces
    took 36.9 ms against ATen's 3.5 at (8,512,1024) f32 (opgen bench --training)."""

    @staticmethod
    def forward(ctx, x, weight, bias, shape: tuple, eps: float):
        float_weight = weight.float() if weight is not None else (
            None if x.dtype == torch.float32 else torch.ones(shape, dtype=torch.float32, device=x.device))
        y, mean, rstd = torch.native_layer_norm(x, list(shape), float_weight,
                                                None if bias is None else bias.float(), eps)
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
