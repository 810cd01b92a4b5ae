"""opgen.torch's RMSNorm: torch.nn.RMSNorm whose backward is this op's kernel.

Imported by opgen.torch (it needs torch and ``torch.ops.opgen.rms_norm_grad``, which
opgen.torch registers first); ``MODULES`` lists what it exports.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn


class _RMSNormFunction(torch.autograd.Function):
    """y = x * rstd * weight over the last ``ndim`` dims; the backward is opgen's."""

    @staticmethod
    def forward(ctx, x, weight, ndim: int, eps: float):
        dims = tuple(range(x.dim() - ndim, x.dim()))
        xf = x.float()
        rstd = torch.rsqrt(xf.pow(2).mean(dim=dims) + eps)
        y = xf * rstd.reshape(rstd.shape + (1,) * ndim)
        if weight is not None:
            y = y * weight.float()
        ctx.save_for_backward(x, rstd, weight)
        ctx.ndim = ndim
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        x, rstd, weight = ctx.saved_tensors
        if weight is None:
            gamma = torch.ones(x.shape[x.dim() - ctx.ndim:], dtype=x.dtype, device=x.device)
        else:  # opgen's combos: gamma in x's dtype or float32
            gamma = weight if weight.dtype in (x.dtype, torch.float32) else weight.float()
        dx, dgamma = torch.ops.opgen.rms_norm_grad(dy.to(x.dtype), x, rstd, gamma)
        dweight = dgamma.to(weight.dtype) if weight is not None and ctx.needs_input_grad[1] else None
        return dx, dweight, None, None


class RMSNorm(nn.RMSNorm):
    """torch.nn.RMSNorm (same parameters, state_dict, extra_repr) whose backward is opgen's
    aclnnRmsNormGrad kernel. eps defaults to 1e-6 (opgen's and CANN's)."""

    def __init__(self, normalized_shape, eps: float | None = 1e-6, elementwise_affine: bool = True,
                 device=None, dtype=None):
        super().__init__(normalized_shape, eps=eps, elementwise_affine=elementwise_affine, device=device, dtype=dtype)

    def forward(self, x: Tensor) -> Tensor:
        eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
        return _RMSNormFunction.apply(x, self.weight, len(self.normalized_shape), eps)


MODULES = {"RMSNorm": RMSNorm}
