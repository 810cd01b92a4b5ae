"""opgen.torch's BatchNorm2d: torch.nn.BatchNorm2d whose backward is this op's kernel.

Imported by opgen.torch (it needs torch and ``torch.ops.opgen.batch_norm_backward``, which
opgen.torch registers first); ``MODULES`` lists what it exports.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn


class _BatchNormFunction(torch.autograd.Function):
    """BatchNorm of x (N, C, ...): the forward is torch's own (``native_batch_norm``: the same
    output, saved statistics and running-statistics update as torch.nn's), the backward opgen's."""

    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, training: bool, momentum: float, eps: float):
        y, save_mean, save_invstd = torch.native_batch_norm(x, weight, bias, running_mean, running_var, training,
                                                            momentum, eps)
        # Only what the mode reads is kept: training reads the saved statistics, eval the running
        # ones (not updated in eval, so the saved references stay valid until backward).
        stats = (save_mean, save_invstd) if training else (running_mean, running_var)
        ctx.save_for_backward(x, weight, *stats)
        ctx.training, ctx.eps, ctx.has_bias = training, eps, bias is not None
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, first, second = ctx.saved_tensors
        need = ctx.needs_input_grad
        mask = [need[0], weight is not None and need[1], ctx.has_bias and need[2]]
        running, saved = ((None, None), (first, second)) if ctx.training else ((first, second), (None, None))
        dx, dweight, dbias = torch.ops.opgen.batch_norm_backward(
            dy.to(x.dtype).contiguous(), x, weight, *running, *saved, ctx.training, ctx.eps, mask)
        return (dx if mask[0] else None, dweight.to(weight.dtype) if mask[1] else None,
                dbias.to(weight.dtype if weight is not None else dy.dtype) if mask[2] else None,
                None, None, None, None, None)


class BatchNorm2d(nn.BatchNorm2d):
    """torch.nn.BatchNorm2d (same parameters, buffers, state_dict, training and eval
    behaviour, running statistics) whose backward is opgen's aclnnBatchNormBackward kernel."""

    def forward(self, x: Tensor) -> Tensor:
        self._check_input_dim(x)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        use_batch = self.training or (self.running_mean is None and self.running_var is None)
        track = not self.training or self.track_running_stats
        return _BatchNormFunction.apply(x, self.weight, self.bias, self.running_mean if track else None,
                                        self.running_var if track else None, use_batch, factor, self.eps)


MODULES = {"BatchNorm2d": BatchNorm2d}
