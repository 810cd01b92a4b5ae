"""opgen in PyTorch: custom ops, and drop-in RMSNorm / GroupNorm modules whose backward is opgen.

    import opgen.torch
    norm = opgen.torch.RMSNorm(4096)              # same parameters and state_dict as torch.nn.RMSNorm
    norm(x).sum().backward()                      # the forward is torch; the backward runs opgen's kernel

* ``torch.ops.opgen.rms_norm_grad(dy, x, rstd, gamma) -> (dx, dgamma)`` and
  ``torch.ops.opgen.group_norm_backward(grad_out, input, mean, rstd, gamma, group,
  output_mask) -> (dx, dgamma, dbeta)`` are ``torch.library`` custom ops with fake (meta)
  implementations, so torch.compile traces through them without a graph break; a
  masked-off output is an empty tensor (a custom op returns tensors, never None).
* The modules compute the forward in torch (float32 statistics), save rstd (and mean), and
  their ``autograd.Function`` backward calls the custom ops.
* Kernels run where the tensors are: CPU tensors on the configured host target (llvm unless
  ``opgen.set_target`` chose another host target), CUDA tensors on the ``cuda`` target.

torch stays optional for opgen's core: only this module imports it (``import torch`` here
is the real torch: absolute imports never resolve to this file).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Optional

import torch
from torch import Tensor, nn

import opgen
from opgen import config

__all__ = ["RMSNorm", "GroupNorm", "rms_norm_grad", "group_norm_backward"]



_DLPACK_DEVICE = {"cpu": 1, "cuda": 2}    # torch device type -> DLPack's (kDLCPU, kDLCUDA)


def _target_for(device: torch.device) -> str:
    """The opgen target for tensors on ``device``: the current target when it serves that
    DLPack device type, else the default target when it does, else the first registered
    target that does (one that can run here first: opgen.targets.serving)."""
    from opgen import targets

    kind = _DLPACK_DEVICE.get(device.type)
    current = targets.get_target(config.get_target())
    if kind is None:
        raise RuntimeError(f"opgen has no target for tensors on {device.type} devices")
    for candidate in (current, targets.default_target()):
        if kind in candidate.dlpack_device_types():
            return candidate.name
    serving = targets.serving(kind)
    if not serving:
        raise RuntimeError(f"no registered opgen target serves {device.type} tensors")
    return serving[0].name


@contextmanager
def _on(device: torch.device):
    """Run one call on the target for ``device``. The common case (CPU tensors, a host
    target selected) changes nothing; otherwise this thread uses that target for the call
    (config.using_target: the process-wide setting is not touched)."""
    wanted = _target_for(device)
    if wanted == config.get_target():
        yield
        return
    with config.using_target(wanted):
        yield


@torch.library.custom_op("opgen::rms_norm_grad", mutates_args=())
def rms_norm_grad(dy: Tensor, x: Tensor, rstd: Tensor, gamma: Tensor) -> tuple[Tensor, Tensor]:
    """opgen's aclnnRmsNormGrad: dx (dy's dtype) and dgamma (float32, gamma's shape)."""
    with _on(dy.device):
        dx, dgamma = opgen.rms_norm_grad(dy.contiguous(), x.contiguous(), rstd.contiguous(), gamma.contiguous())
    return dx, dgamma


@rms_norm_grad.register_fake
def _(dy, x, rstd, gamma):
    return torch.empty_like(dy), gamma.new_empty(gamma.shape, dtype=torch.float32)


@torch.library.custom_op("opgen::group_norm_backward", mutates_args=())
def group_norm_backward(grad_out: Tensor, input: Tensor, mean: Tensor, rstd: Tensor, gamma: Optional[Tensor],
                        group: int, output_mask: list[bool]) -> tuple[Tensor, Tensor, Tensor]:
    """opgen's aclnnGroupNormBackward over input (N, C, *): dx, dgamma, dbeta (mean's dtype)."""
    with _on(grad_out.device):
        outs = opgen.group_norm_backward(grad_out.contiguous(), input.contiguous(), mean.contiguous(),
                                         rstd.contiguous(), None if gamma is None else gamma.contiguous(),
                                         group, tuple(output_mask))
    return tuple(o if o is not None else grad_out.new_empty((0,)) for o in outs)


@group_norm_backward.register_fake
def _(grad_out, input, mean, rstd, gamma, group, output_mask):
    c = input.shape[1]
    dx = torch.empty_like(grad_out) if output_mask[0] else grad_out.new_empty((0,))
    dgamma = mean.new_empty((c,)) if output_mask[1] else grad_out.new_empty((0,))
    dbeta = mean.new_empty((c,)) if output_mask[2] else grad_out.new_empty((0,))
    return dx, dgamma, dbeta


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
    from opgen.ops import get_op

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
