"""opgen.torch's GroupNormSwish: GroupNorm followed by Swish (y * sigmoid(swish_scale * y)),
whose backward is this op's kernel.

Imported by opgen.torch (it needs torch and ``torch.ops.opgen.group_norm_swish_grad``,
which opgen.torch registers first); ``MODULES`` lists what it exports.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn


class _GroupNormSwishFunction(torch.autograd.Function):
    """GroupNorm + Swish of x (N, C, *): the forward in torch (float32 statistics, saved in
    x's dtype, as aclnnGroupNormSwish saves them: one dtype for every tensor of the
    backward), the backward is opgen's aclnnGroupNormSwishGrad."""

    @staticmethod
    def forward(ctx, x, weight, bias, groups: int, eps: float, scale: float):
        n, c = x.shape[0], x.shape[1]
        xf = x.float().reshape(n, groups, -1)
        mean = xf.mean(dim=-1)
        rstd = torch.rsqrt(xf.var(dim=-1, unbiased=False) + eps)
        gamma = weight if weight is not None else x.new_ones(c)
        beta = bias if bias is not None else x.new_zeros(c)
        shape = (1, c) + (1,) * (x.dim() - 2)
        y = ((xf - mean[..., None]) * rstd[..., None]).reshape(x.shape) * gamma.float().reshape(shape) \
            + beta.float().reshape(shape)
        out = y * torch.sigmoid(scale * y)
        ctx.save_for_backward(x, mean.to(x.dtype), rstd.to(x.dtype), gamma.to(x.dtype), beta.to(x.dtype))
        ctx.groups, ctx.scale = groups, scale
        ctx.affine = (weight is not None, bias is not None)
        ctx.param_dtypes = (gamma.dtype, beta.dtype)
        return out.to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        x, mean, rstd, gamma, beta = ctx.saved_tensors
        need = ctx.needs_input_grad
        want_gamma, want_beta = ctx.affine[0] and need[1], ctx.affine[1] and need[2]
        dx, dgamma, dbeta = torch.ops.opgen.group_norm_swish_grad(
            dy.to(x.dtype), mean, rstd, x, gamma, beta, ctx.groups, None, ctx.scale, want_gamma, want_beta)
        return (dx if need[0] else None, dgamma.to(ctx.param_dtypes[0]) if want_gamma else None,
                dbeta.to(ctx.param_dtypes[1]) if want_beta else None, None, None, None)


class GroupNormSwish(nn.GroupNorm):
    """torch.nn.GroupNorm (same parameters and state_dict: num_groups, num_channels, eps,
    affine) followed by Swish, ``y * sigmoid(swish_scale * y)``, whose backward is opgen's
    aclnnGroupNormSwishGrad kernel."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 swish_scale: float = 1.0, device=None, dtype=None):
        super().__init__(num_groups, num_channels, eps=eps, affine=affine, device=device, dtype=dtype)
        self.swish_scale = float(swish_scale)

    def forward(self, x: Tensor) -> Tensor:
        return _GroupNormSwishFunction.apply(x, self.weight, self.bias, self.num_groups, self.eps, self.swish_scale)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, swish_scale={self.swish_scale}"


MODULES = {"GroupNormSwish": GroupNormSwish}
