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


def refuse_group_norm_input(x: Tensor, groups: int, weight: Tensor | None, bias: Tensor | None, kernel: str) -> None:
    """torch.nn.GroupNorm's RuntimeErrors, in its order and words (F.group_norm's rank check,
    then ATen's group_norm checks), for what opgen's aclnnGroupNorm would refuse with an
    aclnn status code instead; then the dtype and device refusals. Shared with
    GroupNormSwish (a GroupNorm too)."""
    shape = x.shape     # read once: each read is a call into torch
    if len(shape) < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received {len(shape)}")
    channels = shape[1]
    if channels % groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by num_groups, but got input of "
                           f"shape {list(shape)} and num_groups={groups}")
    if weight is not None and weight.shape != (channels,):
        raise RuntimeError(f"Expected weight to be a vector of size equal to the number of channels in input, but "
                           f"got weight of shape {list(weight.shape)} and input of shape {list(x.shape)}")
    opgen_torch.refuse_dtype(x, kernel)
    opgen_torch.refuse_other_devices(x, weight, bias)


class GroupNorm(nn.GroupNorm):
    """torch.nn.GroupNorm (same parameters and state_dict) whose forward and backward are
    opgen's aclnnGroupNorm and aclnnGroupNormBackward kernels. The statistics' dtype is the
    forward kernel's (float32 with half data where the product offers that row), so the
    backward always gets a combo it has. Inputs opgen cannot take raise what
    torch.nn.GroupNorm raises (too few dims, channels not divisible by the groups or not
    the weight's, another device) or torch's refusal of a dtype (float64)."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 device=None, dtype=None, *, bias: bool = True):
        super().__init__(num_groups, num_channels, eps=eps, affine=affine, device=device, dtype=dtype, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        refuse_group_norm_input(x, self.num_groups, self.weight, self.bias, "opgen group_norm")
        return _GroupNormFunction.apply(x, self.weight, self.bias, self.num_groups, self.eps)


MODULES = {"GroupNorm": GroupNorm}
