"""opgen.torch's BatchNorm1d, BatchNorm2d and BatchNorm3d: torch.nn's classes whose forward is
opgen's aclnnBatchNorm kernel (opgen.ops.batch_norm) and whose backward is this op's kernel.
aclnnBatchNorm and aclnnBatchNormBackward take 2 to 8 dimensions with the channel at axis 1, so
the three classes share one forward (``_OpgenBatchNorm``) and differ only in torch.nn's rank
check; its steps are module-level functions that SyncBatchNorm calls too.

Imported by opgen.torch (it needs torch and ``torch.ops.opgen.batch_norm`` /
``torch.ops.opgen.batch_norm_backward``, which opgen.torch registers first); ``MODULES``
lists what it exports.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from opgen import torch as opgen_torch


def _per_channel(t: Tensor | None, x: Tensor, like: Tensor | None = None) -> Tensor | None:
    """A per-channel tensor as aclnnBatchNorm takes it: x's dtype or float32 (as it is when
    it already is, else float32; C elements), in ``like``'s dtype when one is given (weight
    and bias share a dtype, as do the statistics)."""
    if t is None:
        return None
    if like is not None:
        return opgen_torch.as_dtype(t, like.dtype)
    return t if t.dtype in (x.dtype, torch.float32) else t.float()


class _BatchNormFunction(torch.autograd.Function):
    """BatchNorm of x (N, C, ...): the forward is opgen's aclnnBatchNorm kernel (batch
    statistics in training, the running ones in eval), which returns the batch's mean and
    1/sqrt(var + eps) (float32) in exactly the form aclnnBatchNormBackward takes: saved as
    they are and handed back with no copy or cast. They are also returned (not
    differentiable) for the module's running-statistics update."""

    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, training: bool, eps: float):
        w = _per_channel(weight, x)
        b = _per_channel(bias, x, w)
        rm = _per_channel(running_mean, x)
        rv = _per_channel(running_var, x, rm)
        y, save_mean, save_invstd = opgen_torch.calls.batch_norm(x, w, b, rm, rv, training, 0.0, eps)
        # Only what the mode reads is kept: training reads the saved statistics, eval the running
        # ones (not updated in eval, so the saved references stay valid until backward).
        stats = (save_mean, save_invstd) if training else (running_mean, running_var)
        ctx.save_for_backward(x, weight, *stats)
        ctx.training, ctx.eps, ctx.has_bias = training, eps, bias is not None
        ctx.mark_non_differentiable(save_mean, save_invstd)
        return y, save_mean, save_invstd

    @staticmethod
    def backward(ctx, dy, _mean_grad, _invstd_grad):
        x, weight, first, second = ctx.saved_tensors
        need = ctx.needs_input_grad
        mask = [need[0], weight is not None and need[1], ctx.has_bias and need[2]]
        running, saved = ((None, None), (first, second)) if ctx.training else ((first, second), (None, None))
        dx, dweight, dbias = opgen_torch.calls.batch_norm_backward(
            opgen_torch.as_dtype(dy, x.dtype).contiguous(), x, weight, *running, *saved, ctx.training, ctx.eps, mask)
        return (dx if mask[0] else None, dweight.to(weight.dtype) if mask[1] else None,
                dbias.to(weight.dtype if weight is not None else dy.dtype) if mask[2] else None,
                None, None, None, None)


def running_factor(module: nn.modules.batchnorm._BatchNorm) -> float:
    """torch's ``exponential_average_factor`` for this call, counting the batch as torch's
    _BatchNorm.forward does (num_batches_tracked += 1 in training): the momentum, or 1/count
    for momentum=None (the cumulative average). Shared by every opgen BatchNorm module, so
    BatchNorm2d and SyncBatchNorm update their statistics as torch's own modules do."""
    factor = 0.0 if module.momentum is None else module.momentum
    if module.training and module.track_running_stats and module.num_batches_tracked is not None:
        module.num_batches_tracked.add_(1)
        factor = 1.0 / float(module.num_batches_tracked) if module.momentum is None else module.momentum
    return factor


def refuse_like_torch(module: nn.modules.batchnorm._BatchNorm, x: Tensor) -> None:
    """torch.nn's BatchNorm RuntimeError for a channel count that is not the module's
    (its wording: the running mean's, else the weight's), then the dtype and device
    refusals: what opgen's aclnnBatchNorm would refuse with an aclnn status code."""
    held = module._buffers.get("running_mean"), module._parameters.get("weight")   # no nn.Module __getattr__
    channels = x.shape[1]
    for name, tensor in zip(("running_mean", "weight"), held):
        if tensor is not None and tensor.shape[0] != channels:
            raise RuntimeError(f"{name} should contain {channels} elements not {tensor.numel()}")
    opgen_torch.refuse_dtype(x, "opgen batch_norm")
    opgen_torch.refuse_other_devices(x, *held, module._parameters.get("bias"), module._buffers.get("running_var"))


def batch_norm(module: nn.modules.batchnorm._BatchNorm, x: Tensor, factor: float) -> Tensor:
    """What F.batch_norm computes for ``module`` on this process's batch alone, on opgen's
    kernels: batch statistics in training (or without running statistics), the running ones
    in eval; in training the running statistics updated with ``factor`` (running_factor's).
    BatchNorm2d's whole forward, and SyncBatchNorm's wherever nothing is synchronized
    (eval, one process, no process group), as torch's SyncBatchNorm falls back to F.batch_norm."""
    use_batch = module.training or (module.running_mean is None and module.running_var is None)
    if use_batch:
        F._verify_batch_size(x.size())
    y, save_mean, save_invstd = _BatchNormFunction.apply(
        x, module.weight, module.bias, None if use_batch else module.running_mean,
        None if use_batch else module.running_var, use_batch, module.eps)
    if module.training and module.running_mean is not None and x.numel():
        update_running(module, x.numel() // x.size(1), save_mean, save_invstd, factor)
    return y


def update_running(module: nn.modules.batchnorm._BatchNorm, m: int, mean: Tensor, invstd: Tensor,
                   factor: float) -> None:
    """The module's running statistics from a batch of ``m`` values a channel (update_running_stats)."""
    update_running_stats(module.running_mean, module.running_var, m, mean, invstd, module.eps, factor)


@torch.no_grad()
def update_running_stats(running_mean: Tensor | None, running_var: Tensor | None, m: float, mean: Tensor,
                         invstd: Tensor, eps: float, factor: float) -> None:
    """r = (1 - factor) * r + factor * batch statistic over ``m`` values a channel, the variance
    unbiased (M / (M - 1), when M > 1) and recovered from invstd = 1 / sqrt(var + eps) in float64
    (C elements); a None buffer is left. Shared with SyncBatchNorm, whose batch is every rank's."""
    if running_mean is not None:
        running_mean.mul_(1 - factor).add_(opgen_torch.as_dtype(mean, running_mean.dtype), alpha=factor)
    if running_var is not None:
        # Seven small ops, in place where they can be (the unbiasing folded into alpha): each
        # costs a dispatch, and a model pays them once per BatchNorm layer and step.
        var = invstd.to(torch.float64, copy=True).pow_(-2).sub_(eps).clamp_min_(0)   # a copy: never the caller's
        unbiased = factor * m / (m - 1) if m > 1 else factor
        running_var.mul_(1 - factor).add_(var.to(running_var.dtype), alpha=unbiased)


class _OpgenBatchNorm:
    """torch.nn's BatchNorm (same parameters, buffers, state_dict, training and eval
    behaviour, running statistics) whose forward and backward are opgen's aclnnBatchNorm and
    aclnnBatchNormBackward kernels. In training the running statistics are updated here as
    torch does (momentum, or the cumulative average with momentum=None; the unbiased batch
    variance), from the kernel's saved mean and 1/sqrt(var + eps): C elements each; an empty
    batch leaves them as they are (aclnnBatchNorm writes no statistics for it). Mixed in before
    torch.nn's class, which gives the constructor, the buffers and ``_check_input_dim``."""

    def forward(self, x: Tensor) -> Tensor:
        self._check_input_dim(x)
        refuse_like_torch(self, x)
        return batch_norm(self, x, running_factor(self))


class BatchNorm1d(_OpgenBatchNorm, nn.BatchNorm1d):
    """torch.nn.BatchNorm1d, (N, C) or (N, C, L), on opgen's kernels (see ``_OpgenBatchNorm``)."""


class BatchNorm2d(_OpgenBatchNorm, nn.BatchNorm2d):
    """torch.nn.BatchNorm2d, (N, C, H, W), on opgen's kernels (see ``_OpgenBatchNorm``)."""


class BatchNorm3d(_OpgenBatchNorm, nn.BatchNorm3d):
    """torch.nn.BatchNorm3d, (N, C, D, H, W), on opgen's kernels (see ``_OpgenBatchNorm``)."""


MODULES = {"BatchNorm1d": BatchNorm1d, "BatchNorm2d": BatchNorm2d, "BatchNorm3d": BatchNorm3d}
