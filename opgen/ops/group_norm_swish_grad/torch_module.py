"""opgen.torch's GroupNormSwish: GroupNorm followed by Swish (y * sigmoid(swish_scale * y)),
whose forward is opgen's aclnnGroupNormSwish kernel and whose backward is this op's.

Imported by opgen.torch (it needs torch and ``torch.ops.opgen.group_norm_swish`` /
``torch.ops.opgen.group_norm_swish_grad``, which opgen.torch registers first); ``MODULES``
lists what it exports.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from opgen import torch as opgen_torch
from opgen.ops.group_norm_backward.torch_module import refuse_group_norm_input


class _GroupNormSwishFunction(torch.autograd.Function):
    """GroupNorm + Swish of x (N, C, *): the forward is opgen's aclnnGroupNormSwish kernel
    (opgen.ops.group_norm_swish), the backward opgen's aclnnGroupNormSwishGrad, which takes
    every tensor in x's dtype: the statistics and parameters (C and N x G elements) are
    cast to it when the module's parameters are float32 and x is half; x and y never are."""

    @staticmethod
    def forward(ctx, x, weight, bias, groups: int, eps: float, scale: float):
        c = x.shape[1]
        gamma = weight if weight is not None else x.new_ones(c)
        beta = bias if bias is not None else x.new_zeros(c)
        param = gamma.dtype if gamma.dtype in (x.dtype, torch.float32) and beta.dtype == gamma.dtype else x.dtype
        as_dtype = opgen_torch.as_dtype
        out, mean, rstd = opgen_torch.calls.group_norm_swish(x, as_dtype(gamma, param), as_dtype(beta, param), groups,
                                                             None, eps, True, scale)
        ctx.save_for_backward(x, *(as_dtype(t, x.dtype) for t in (mean, rstd, gamma, beta)))
        ctx.groups, ctx.scale = groups, scale
        ctx.affine = (weight is not None, bias is not None)
        ctx.param_dtypes = (gamma.dtype, beta.dtype)
        return out

    @staticmethod
    def backward(ctx, dy):
        x, mean, rstd, gamma, beta = ctx.saved_tensors
        need = ctx.needs_input_grad
        want_gamma, want_beta = ctx.affine[0] and need[1], ctx.affine[1] and need[2]
        as_dtype = opgen_torch.as_dtype
        dx, dgamma, dbeta = opgen_torch.calls.group_norm_swish_grad(
            as_dtype(dy, x.dtype), mean, rstd, x, gamma, beta, ctx.groups, None, ctx.scale, want_gamma, want_beta)
        return (dx if need[0] else None, as_dtype(dgamma, ctx.param_dtypes[0]) if want_gamma else None,
                as_dtype(dbeta, ctx.param_dtypes[1]) if want_beta else None, None, None, None)


class GroupNormSwish(nn.GroupNorm):
    """torch.nn.GroupNorm (same parameters and state_dict: num_groups, num_channels, eps,
    affine) followed by Swish, ``y * sigmoid(swish_scale * y)``, whose backward is opgen's
    aclnnGroupNormSwishGrad kernel. Inputs opgen cannot take raise what torch.nn.GroupNorm
    raises (refuse_group_norm_input)."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 swish_scale: float = 1.0, device=None, dtype=None, *, bias: bool = True):
        super().__init__(num_groups, num_channels, eps=eps, affine=affine, device=device, dtype=dtype, bias=bias)
        self.swish_scale = float(swish_scale)

    def forward(self, x: Tensor) -> Tensor:
        refuse_group_norm_input(x, self.num_groups, self.weight, self.bias, "opgen group_norm_swish")
        return _GroupNormSwishFunction.apply(x, self.weight, self.bias, self.num_groups, self.eps, self.swish_scale)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, swish_scale={self.swish_scale}"


MODULES = {"GroupNormSwish": GroupNormSwish}
