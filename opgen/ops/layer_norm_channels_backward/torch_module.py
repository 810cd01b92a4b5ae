"""opgen.torch's LayerNorm2d: a LayerNorm over the channels of NCHW data (ConvNeXt's
``data_format="channels_first"`` LayerNorm, timm's LayerNorm2d) whose forward is opgen's
LayerNormChannels kernel (opgen.ops.layer_norm_channels) and whose backward is this op's.

Neither direction makes a permute copy: both kernels read the NCHW memory as (N, C, HW). A
channels_last input (NHWC in memory) is aclnnLayerNorm's row form already: it runs opgen's
LayerNorm kernels on the channels-last view, with no copy either.
Imported by opgen.torch (it needs ``torch.ops.opgen.layer_norm_channels`` and
``..._backward``, which opgen.torch registers first); ``MODULES`` lists what it exports.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from opgen import torch as opgen_torch
from opgen.ops.layer_norm_backward.torch_module import _affine, _LayerNormFunction


class _LayerNormChannelsFunction(torch.autograd.Function):
    """LayerNorm of x over axis 1: the forward returns mean and rstd (float32, x's shape with
    C = 1) in exactly the form the backward takes, saved as they are."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps: float):
        gamma, beta = _affine(x, weight, bias)
        y, mean, rstd = opgen_torch.calls.layer_norm_channels(x, gamma, beta, eps)
        ctx.save_for_backward(x, mean, rstd, weight)
        ctx.bias_dtype = None if bias is None else bias.dtype
        return y

    @staticmethod
    def backward(ctx, dy):
        x, mean, rstd, weight = ctx.saved_tensors
        need = ctx.needs_input_grad
        mask = [need[0], weight is not None and need[1], ctx.bias_dtype is not None and need[2]]
        as_dtype = opgen_torch.as_dtype
        gamma = None if weight is None else as_dtype(weight, torch.float32)
        dx, dgamma, dbeta = opgen_torch.calls.layer_norm_channels_backward(as_dtype(dy, x.dtype), x, mean, rstd,
                                                                         gamma, mask)
        return (dx if mask[0] else None, as_dtype(dgamma, weight.dtype) if mask[1] else None,
                as_dtype(dbeta, ctx.bias_dtype) if mask[2] else None, None)


class LayerNorm2d(nn.LayerNorm):
    """A LayerNorm over axis 1 of an (N, C, spatial...) input: torch.nn.LayerNorm's
    parameters (``normalized_shape = (C,)``, weight and bias of C, eps; timm's LayerNorm2d
    is this class's twin), computed as ``F.layer_norm`` of the channels-last permute would
    be, by opgen's LayerNormChannels kernels, without the permute. eps defaults to 1e-6
    (ConvNeXt's). The output has x's dtype, computed in float32 and rounded once."""

    def __init__(self, num_channels: int, eps: float = 1e-6, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None):
        super().__init__(num_channels, eps=eps, elementwise_affine=elementwise_affine, bias=bias, device=device,
                         dtype=dtype)

    def forward(self, x: Tensor) -> Tensor:
        """y in the memory format torch's permute path gives (ConvNeXt's and timm's): for a
        4-D x, channels_last. The kernel writes NCHW, and a 4-D y is then copied once into
        channels_last (torch's path copies x once instead, inside F.layer_norm): the
        convolutions that follow in those models run several times slower on NCHW data on
        the CPU (measured: docs/torch.md), so the format is kept, not the copy saved."""
        opgen_torch.refuse_dtype(x, "opgen layer_norm_channels")
        if x.dim() < 2 or x.shape[1] != self.normalized_shape[0]:
            raise RuntimeError(f"LayerNorm2d({self.normalized_shape[0]}) expected input with shape [N, "
                               f"{self.normalized_shape[0]}, *], but got input of size{list(x.shape)}")
        opgen_torch.refuse_other_devices(x, self.weight, self.bias)
        if _channels_last(x):
            # NHWC in memory: the channels are the contiguous last axis of x.movedim(1, -1),
            # a view, so aclnnLayerNorm's row kernels take it as it lies, and the output is
            # that view moved back: channels_last, as torch's permute path returns it (the
            # convolutions after it keep their memory format)
            y = _LayerNormFunction.apply(x.movedim(1, -1), self.weight, self.bias, tuple(self.normalized_shape),
                                         self.eps)
            return y.movedim(-1, 1)
        y = _LayerNormChannelsFunction.apply(x, self.weight, self.bias, self.eps)
        return y.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else y


def _channels_last(x: Tensor) -> bool:
    """Whether x's channels are its innermost axis in memory (and NCHW is not also dense in
    order: a tensor with H = W = 1 is both, and reads the same either way)."""
    return x.dim() >= 3 and not x.is_contiguous() and x.movedim(1, -1).is_contiguous()


MODULES = {"LayerNorm2d": LayerNorm2d}
