"""opgen.torch's GroupNorm: torch.nn.GroupNorm whose forward is opgen's aclnnGroupNorm kernel
(opgen.ops.group_norm) and whose backward is this op's kernel.

Imported by opgen.torch (it needs torch and ``torch.ops.opgen.group_norm`` /
``torch.ops.opgen.group_norm_backward``, which opgen.torch registers first); ``MODULES``
lists what it exports.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from opgen import torch as opgen_torch


def _like_x(param: Tensor | None, x: Tensor) -> Tensor | None:
    """A per-channel parameter in x's dtype, as aclnnGroupNorm takes it (a cast of C
    elements only when the module's dtype is not the input's)."""
    return None if param is None else opgen_torch.as_dtype(param, x.dtype)


class _GroupNormFunction(torch.autograd.Function):
    """GroupNorm of x (N, C, *): the forward is opgen's aclnnGroupNorm kernel, which returns
    the statistics (float32 where the product offers them with half data) in exactly the
    form aclnnGroupNormBackward takes: saved as they are and handed back with no cast."""

    @staticmethod
    def forward(ctx, x, weight, bias, groups: int, eps: float):
        y, mean, rstd = opgen_torch.calls.group_norm(x, _like_x(weight, x), _like_x(bias, x), groups, eps)
        ctx.save_for_backward(x, mean, rstd, weight)
        ctx.groups, ctx.has_bias = groups, bias is not None
        return y

    @staticmethod
    def backward(ctx, dy):
        x, mean, rstd, weight = ctx.saved_tensors
        need = ctx.needs_input_grad
        mask = [need[0], weight is not None and need[1], ctx.has_bias and need[2]]
        as_dtype = opgen_torch.as_dtype
        gamma = None if weight is None else as_dtype(weight, mean.dtype)
        dx, dgamma, dbeta = opgen_torch.calls.group_norm_backward(as_dtype(dy, x.dtype), x, mean, rstd, gamma,
                                                                  ctx.groups, mask)
        return (dx if mask[0] else None, as_dtype(dgamma, weight.dtype) if mask[1] else None,
                as_dtype(dbeta, weight.dtype if weight is not None else dy.dtype) if mask[2] else None,
                None, None)


class GroupNorm(nn.GroupNorm):
    """torch.nn.GroupNorm (same parameters and state_dict) whose forward and backward are
    opgen's aclnnGroupNorm and aclnnGroupNormBackward kernels. The statistics' dtype is the
    forward kernel's (float32 with half data where the product offers that row), so the
    backward always gets a combo it has."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 device=None, dtype=None):
        super().__init__(num_groups, num_channels, eps=eps, affine=affine, device=device, dtype=dtype)

    def forward(self, x: Tensor) -> Tensor:
        return _GroupNormFunction.apply(x, self.weight, self.bias, self.num_groups, self.eps)


MODULES = {"GroupNorm": GroupNorm}
