"""opgen.torch's GroupNorm: torch.nn.GroupNorm whose backward is this op's kernel.

Imported by opgen.torch (it needs torch and ``torch.ops.opgen.group_norm_backward``, which
opgen.torch registers first); ``MODULES`` lists what it exports.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from opgen import config
from opgen.ops import get_op


class _GroupNormFunction(torch.autograd.Function):
    """GroupNorm of x (N, C, *) with float32 statistics; the backward is opgen's."""

    @staticmethod
    def forward(ctx, x, weight, bias, groups: int, eps: float, stat_dtype):
        n, c = x.shape[0], x.shape[1]
        xf = x.float().reshape(n, groups, -1)
        mean = xf.mean(dim=-1)
        rstd = torch.rsqrt(xf.var(dim=-1, unbiased=False) + eps)
        y = ((xf - mean[..., None]) * rstd[..., None]).reshape(x.shape)
        shape = (1, c) + (1,) * (x.dim() - 2)
        if weight is not None:
            y = y * weight.float().reshape(shape)
        if bias is not None:
            y = y + bias.float().reshape(shape)
        ctx.save_for_backward(x, mean.to(stat_dtype), rstd.to(stat_dtype), weight)
        ctx.groups, ctx.has_bias = groups, bias is not None
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        x, mean, rstd, weight = ctx.saved_tensors
        need = ctx.needs_input_grad
        mask = [need[0], weight is not None and need[1], ctx.has_bias and need[2]]
        gamma = None if weight is None else weight.to(mean.dtype)
        dx, dgamma, dbeta = torch.ops.opgen.group_norm_backward(dy.to(x.dtype), x, mean, rstd, gamma, ctx.groups, mask)
        return (dx if mask[0] else None, dgamma.to(weight.dtype) if mask[1] else None,
                dbeta.to(dtype=weight.dtype if weight is not None else dy.dtype) if mask[2] else None,
                None, None, None)


def _stat_dtypes() -> dict:
    """Per data dtype, the statistics dtype: float32 where the current product offers that
    combo (more precise dgamma/dbeta), else the data's own dtype."""
    offered = {c.tag for c in get_op("group_norm_backward").products.get(config.get_product(), ())}
    half = {torch.float16: "f16", torch.bfloat16: "bf16"}
    table = {torch.float32: torch.float32}
    for dtype, short in half.items():
        table[dtype] = torch.float32 if f"{short}-f32" in offered else dtype
    return table


class GroupNorm(nn.GroupNorm):
    """torch.nn.GroupNorm (same parameters and state_dict) whose backward is opgen's
    aclnnGroupNormBackward kernel. The statistics dtype is decided when the module is made
    (from the product then selected), so tracing never reads process settings."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 device=None, dtype=None):
        super().__init__(num_groups, num_channels, eps=eps, affine=affine, device=device, dtype=dtype)
        self._stat = _stat_dtypes()

    def forward(self, x: Tensor) -> Tensor:
        return _GroupNormFunction.apply(x, self.weight, self.bias, self.num_groups, self.eps, self._stat[x.dtype])


MODULES = {"GroupNorm": GroupNorm}
