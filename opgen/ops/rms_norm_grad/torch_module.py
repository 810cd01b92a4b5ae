"""opgen.torch's RMSNorm: torch.nn.RMSNorm whose forward is opgen's aclnnRmsNorm kernel
(opgen.ops.rms_norm) and whose backward is this op's kernel.

Imported by opgen.torch (it needs torch and ``torch.ops.opgen.rms_norm`` /
``torch.ops.opgen.rms_norm_grad``, which opgen.torch registers first); ``MODULES`` lists
what it exports.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from opgen import torch as opgen_torch


def _gamma(x: Tensor, weight: Tensor | None, ndim: int) -> Tensor:
    """The kernels' gamma: the weight where it is in a dtype of opgen's combos (x's or
    float32, as the module's parameters usually are), else widened to float32; ones
    without a weight (aclnnRmsNorm and aclnnRmsNormGrad both require a gamma)."""
    if weight is None:
        return torch.ones(x.shape[x.dim() - ndim:], dtype=x.dtype, device=x.device)
    return weight if weight.dtype in (x.dtype, torch.float32) else weight.float()


class _RMSNormFunction(torch.autograd.Function):
    """y = x * rstd * weight over the last ``ndim`` dims: the forward is opgen's aclnnRmsNorm
    kernel, which also returns rstd (float32, keepdim) in exactly the form its backward,
    aclnnRmsNormGrad, takes: saved as it is and handed back with no copy or cast."""

    @staticmethod
    def forward(ctx, x, weight, ndim: int, eps: float):
        gamma = _gamma(x, weight, ndim)
        y, rstd = opgen_torch.calls.rms_norm(x, gamma, eps)
        ctx.save_for_backward(x, rstd, gamma)
        ctx.weight_dtype = None if weight is None else weight.dtype
        return y

    @staticmethod
    def backward(ctx, dy):
        x, rstd, gamma = ctx.saved_tensors
        dx, dgamma = opgen_torch.calls.rms_norm_grad(opgen_torch.as_dtype(dy, x.dtype), x, rstd, gamma)
        wanted = ctx.weight_dtype is not None and ctx.needs_input_grad[1]
        return dx, opgen_torch.as_dtype(dgamma, ctx.weight_dtype) if wanted else None, None, None


_DEFAULT_EPS = torch.finfo(torch.float32).eps
"""eps=None's value: torch.nn.RMSNorm's documentation says the input dtype's machine epsilon,
but ATen's rms_norm takes the epsilon of the dtype it computes in (at::opmath_type: float32
for float32, float16 and bfloat16 inputs, the only ones opgen's kernels take); measured
equal to torch's output for bfloat16 (tests/test_torch_modules.py), where bfloat16's own
epsilon (2**-7) would differ."""


class RMSNorm(nn.RMSNorm):
    """torch.nn.RMSNorm (same parameters, state_dict, extra_repr and defaults: eps=None is
    the machine epsilon torch computes with, float32's: _DEFAULT_EPS) whose forward and backward are opgen's
    aclnnRmsNorm and aclnnRmsNormGrad kernels; the output has x's dtype (CANN's combos),
    computed in float32. Inputs opgen cannot take raise what torch.nn.RMSNorm raises (a
    wrong trailing shape, another device) or torch's refusal of a dtype (float64)."""

    def forward(self, x: Tensor) -> Tensor:
        opgen_torch.refuse_dtype(x, "opgen rms_norm")
        opgen_torch.refuse_normalized_shape(x, self.normalized_shape, "*", least=ValueError)
        opgen_torch.refuse_other_devices(x, self.weight)
        eps = self.eps if self.eps is not None else _DEFAULT_EPS
        return _RMSNormFunction.apply(x, self.weight, len(self.normalized_shape), eps)


MODULES = {"RMSNorm": RMSNorm}
