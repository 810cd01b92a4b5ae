"""opgen.torch's GemmaRMSNorm: transformers' GemmaRMSNorm (Gemma, Gemma 2, Gemma 3),
y = x * rstd * (1 + weight), whose forward is opgen's aclnnGemmaRmsNorm kernel and whose
backward is aclnnRmsNormGrad's kernel (opgen.ops.rms_norm_grad).

Why the backward needs no op of its own: the offset form is RmsNorm with gamma' = 1 + weight.
aclnnRmsNormGrad's dx, rstd * (dy * gamma' - x_hat * mean(dy * gamma' * x_hat)), reads gamma'
only, and its dgamma, sum over rows of dy * x_hat, is d(loss)/d(gamma') = d(loss)/d(weight),
since d(gamma')/d(weight) = 1. So the backward hands aclnnRmsNormGrad the forward's rstd as it
is and gamma' = 1 + weight, formed in float32 (aclnnRmsNormGrad's f16-f32, bf16-f32 and f32-f32
rows take a float32 gamma with any data dtype): the sum keeps a small weight's bits, as
transformers' ``1.0 + self.weight.float()`` and CANN's kernel do.

Imported by opgen.torch (it needs ``torch.ops.opgen.gemma_rms_norm`` / ``rms_norm`` /
``rms_norm_grad``, which opgen.torch registers first); ``MODULES`` lists what it exports.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from opgen import torch as opgen_torch


def _offset_gamma(weight: Tensor) -> Tensor:
    """gamma' = 1 + weight in float32, the scale aclnnRmsNorm and aclnnRmsNormGrad take."""
    return weight.float() + 1.0


class _GemmaRMSNormFunction(torch.autograd.Function):
    """y = x * rstd * (1 + weight) over weight's dims. The forward is aclnnGemmaRmsNorm where
    the weight has x's dtype (the document's three rows); a weight in another dtype (a
    float32 weight with half data, as under autocast) has no row there, so the forward runs
    aclnnRmsNorm's mixed row on gamma' = 1 + weight in float32: the same float32 products,
    rounded once, as the Gemma kernel, which also forms 1 + gamma in float32. Either way rstd
    (float32, keepdim) reaches aclnnRmsNormGrad as it is."""

    @staticmethod
    def forward(ctx, x, weight, eps: float):
        if weight.dtype == x.dtype:
            y, rstd = opgen_torch.calls.gemma_rms_norm(x, weight, eps)
        else:
            y, rstd = opgen_torch.calls.rms_norm(x, _offset_gamma(weight), eps)
        ctx.save_for_backward(x, rstd, weight)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, rstd, weight = ctx.saved_tensors
        dx, dgamma = opgen_torch.calls.rms_norm_grad(opgen_torch.as_dtype(dy, x.dtype), x, rstd,
                                                     _offset_gamma(weight))
        dweight = opgen_torch.as_dtype(dgamma, weight.dtype) if ctx.needs_input_grad[1] else None
        return dx, dweight, None


class GemmaRMSNorm(nn.Module):
    """transformers' GemmaRMSNorm: ``GemmaRMSNorm(dim, eps=1e-6)``, one parameter ``weight`` of
    shape ``dim`` (an int or a tuple of trailing dims) initialized to zeros, so that a
    state_dict moves between the two; y = x / sqrt(mean(x^2) + eps) * (1 + weight), computed
    in float32 and returned in x's dtype, forward and backward on opgen's kernels. Inputs
    opgen cannot take raise what torch.nn.RMSNorm raises (a wrong trailing shape, another
    device) or torch's refusal of a dtype (float64)."""

    def __init__(self, dim, eps: float = 1e-6, device=None, dtype=None):
        super().__init__()
        self.normalized_shape = (dim,) if isinstance(dim, int) else tuple(dim)
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(self.normalized_shape, device=device, dtype=dtype))

    def forward(self, x: Tensor) -> Tensor:
        opgen_torch.refuse_dtype(x, "opgen gemma_rms_norm")
        opgen_torch.refuse_normalized_shape(x, self.normalized_shape, "*", least=ValueError)
        opgen_torch.refuse_other_devices(x, self.weight)
        return _GemmaRMSNormFunction.apply(x, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.eps}"


MODULES = {"GemmaRMSNorm": GemmaRMSNorm}
