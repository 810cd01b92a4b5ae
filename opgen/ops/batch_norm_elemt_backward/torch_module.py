"""opgen.torch's SyncBatchNorm: torch.nn.SyncBatchNorm on opgen's kernels, synchronized across
processes through torch.distributed (gloo on CPU tensors, which torch's own module refuses).

It is built from opgen's ops the way torch's SyncBatchNorm autograd Function
(torch/nn/modules/_functions.py) is built from ATen's:

* forward: aclnnBatchNormReduce (this rank's per-channel sum and squareSum) -> all_gather of
  (sum, squareSum, count) from every rank -> aclnnSyncBatchNormGatherStats (the global mean and
  invstd; the running statistics updated) -> aclnnBatchNormElemt (the normalization);
* backward: aclnnBatchNormReduceBackward (sumDy, sumDyXmu, gradWeight, gradBias on this rank's
  batch) -> all_reduce(sumDy, sumDyXmu) -> aclnnBatchNormElemtBackward (gradInput, with every
  rank's count).

Every step runs an opgen kernel (aclnnBatchNormReduce, aclnnSyncBatchNormGatherStats,
aclnnBatchNormElemt forward; the two above backward); torch does the collectives and the
running statistics' update (C elements, as opgen's BatchNorm2d). Imported by opgen.torch (it
needs ``torch.ops.opgen.*``, which opgen.torch registers first); ``MODULES`` lists what it exports.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor, nn

from opgen import torch as opgen_torch
from opgen.ops.batch_norm_backward import torch_module as batch_norm_module


def _local_sums(x: Tensor) -> tuple[Tensor, Tensor]:
    """This rank's per-channel sum and sum of squares (float32, C elements each): opgen's
    aclnnBatchNormReduce kernel."""
    return opgen_torch.calls.batch_norm_reduce(x)


def _global_stats(sums: Tensor, squares: Tensor, counts: Tensor, running_mean: Tensor | None,
                  running_var: Tensor | None, momentum: float, eps: float) -> tuple[Tensor, Tensor]:
    """The global batch's mean and invstd (float32, C elements) from every rank's sums (W, C),
    squares (W, C) and counts (W,): opgen's aclnnSyncBatchNormGatherStats kernel (a rank with an
    empty batch adds zeros). Then the running statistics, updated in place here as torch's
    batch_norm_gather_stats_with_counts does (``momentum``; the unbiased variance, total /
    (total - 1), recovered from invstd): opgen's op takes no in-out tensors, so it runs with
    momentum 0 and placeholders for them, and the module updates its C-element buffers itself,
    as opgen's BatchNorm2d does."""
    channels = sums.shape[1]
    mean, invstd = opgen_torch.calls.sync_batch_norm_gather_stats(
        sums, squares, counts, sums.new_zeros(channels), sums.new_ones(channels), 0.0, eps)
    if running_mean is not None or running_var is not None:
        batch_norm_module.update_running_stats(running_mean, running_var, float(counts.double().sum()), mean,
                                               invstd, eps, momentum)
    return mean, invstd


def _normalize(x: Tensor, weight: Tensor | None, bias: Tensor | None, mean: Tensor, invstd: Tensor,
               eps: float) -> Tensor:
    """y = (x - mean) * invstd * weight + bias: opgen's aclnnBatchNormElemt kernel, whose four
    per-channel tensors share a dtype (the statistics' float32: a half weight and bias are cast,
    C elements, as torch's Function casts the weight for its backward)."""
    weight = None if weight is None else opgen_torch.as_dtype(weight, mean.dtype)
    bias = None if bias is None else opgen_torch.as_dtype(bias, mean.dtype)
    (y,) = opgen_torch.calls.batch_norm_elemt(x, weight, bias, mean, invstd, eps)
    return y


def _collective(what: str, group, run) -> None:
    """Run one collective; a failure (a rank that died or hangs: gloo reports a closed
    connection or the process group's timeout) is re-raised naming the step, this rank and the
    group's size, so the survivors of a dead rank fail with a clear error rather than hang."""
    try:
        run()
    except RuntimeError as err:     # DistBackendError and gloo's errors are RuntimeErrors
        rank, size = dist.get_rank(group), dist.get_world_size(group)
        raise RuntimeError(f"opgen SyncBatchNorm: {what} failed on rank {rank} of {size} (another rank died, "
                           f"or did not reach this step within the process group's timeout): {err}") from err


def _sum_over_ranks(sums: Tensor, group) -> None:
    """The backward's all_reduce of (sumDy, sumDyXmu), in place."""
    _collective("all_reduce of the gradient sums", group, lambda: dist.all_reduce(sums, group=group))


class _SyncBatchNormFunction(torch.autograd.Function):
    """torch's SyncBatchNorm Function on opgen's kernels (the steps: the module's docstring).
    A rank with an empty batch still joins every collective with zeros, so its peers do not
    wait on it; its gradients are None (zeros), as torch's."""

    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum, group, world_size):
        x = x.contiguous()
        channels = x.shape[1]
        if x.numel():
            sums, squares = _local_sums(x)
            count = sums.new_full((1,), x.numel() // channels)
            combined = torch.cat([sums, squares, count])
        else:
            combined = x.new_zeros(2 * channels + 1, dtype=torch.float32)
        gathered = [torch.empty_like(combined) for _ in range(world_size)]
        _collective("all_gather of the batch statistics", group,
                    lambda: dist.all_gather(gathered, combined, group))
        stacked = torch.stack(gathered)
        sums_all, squares_all, counts_all = stacked.split(channels, dim=1)
        mean, invstd = _global_stats(sums_all, squares_all, counts_all.view(-1), running_mean, running_var,
                                     momentum, eps)
        ctx.save_for_backward(x, weight, mean, invstd, counts_all.view(-1).to(torch.int32))
        ctx.group = group
        if not x.numel():
            return torch.empty_like(x)
        return _normalize(x, weight, bias, mean, invstd, eps)

    @staticmethod
    def backward(ctx, dy):
        x, weight, mean, invstd, counts = ctx.saved_tensors
        need_input, need_weight, need_bias = ctx.needs_input_grad[:3]
        dx = dweight = dbias = None
        channels = x.shape[1]
        if not x.numel():
            if need_input:      # join the all_reduce the peers wait on
                zeros = x.new_zeros(2 * channels, dtype=torch.float32)
                _sum_over_ranks(zeros, ctx.group)
            return None, None, None, None, None, None, None, None, None
        dy = opgen_torch.as_dtype(dy, x.dtype).contiguous()
        sum_dy, sum_dy_xmu, grad_weight, grad_bias = opgen_torch.calls.batch_norm_reduce_backward(
            dy, x, mean, invstd, None, need_input, weight is not None and need_weight,
            weight is not None and need_bias)
        if need_input:
            combined = torch.cat([sum_dy.float(), sum_dy_xmu.float()])
            _sum_over_ranks(combined, ctx.group)
            sum_dy, sum_dy_xmu = combined.split(channels)
            w = None if weight is None else opgen_torch.as_dtype(weight, mean.dtype)
            (dx,) = opgen_torch.calls.batch_norm_elemt_backward(dy, x, mean, invstd, w, sum_dy, sum_dy_xmu, counts)
        if weight is not None:
            dweight = grad_weight.to(weight.dtype) if need_weight else None
            dbias = grad_bias.to(weight.dtype) if need_bias else None
        return dx, dweight, dbias, None, None, None, None, None, None


class SyncBatchNorm(nn.modules.batchnorm._BatchNorm):
    """torch.nn.SyncBatchNorm (same constructor, parameters, buffers, state_dict, running
    statistics, ``process_group``) on opgen's kernels, and on CPU tensors too (gloo): in
    training with torch.distributed initialized and more than one process in the group, the
    batch statistics are those of every rank's batch together; otherwise (eval, one process, no
    process group) it is opgen's BatchNorm on this rank's batch, as torch's module falls back to
    F.batch_norm. Parameter gradients are this rank's, as torch's (DDP all-reduces them).

    A _BatchNorm like torch's SyncBatchNorm, not a subclass of it: DistributedDataParallel
    refuses a CPU model holding a torch.nn.SyncBatchNorm ("SyncBatchNorm layers only work with
    GPU modules"), which this module exists to run."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, process_group=None, device=None, dtype=None, *,
                 bias: bool = True) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device=device, dtype=dtype,
                         bias=bias)
        self.process_group = process_group

    _check_input_dim = nn.SyncBatchNorm._check_input_dim                        # 2-d and more
    _check_non_zero_input_channels = nn.SyncBatchNorm._check_non_zero_input_channels

    def forward(self, x: Tensor) -> Tensor:
        self._check_input_dim(x)
        self._check_non_zero_input_channels(x)
        batch_norm_module.refuse_like_torch(self, x)
        factor = batch_norm_module.running_factor(self)
        bn_training = self.training or (self.running_mean is None and self.running_var is None)
        group = self._synchronized_group() if bn_training and self.training else None
        if group is None:
            return batch_norm_module.batch_norm(self, x, factor)
        running = self.track_running_stats
        return _SyncBatchNormFunction.apply(x, self.weight, self.bias, self.running_mean if running else None,
                                            self.running_var if running else None, self.eps, factor, group,
                                            dist.get_world_size(group))

    def _synchronized_group(self):
        """The process group to synchronize over (``process_group``, else the default one), or
        None where there is nothing to synchronize with: torch.distributed not initialized, or
        a group of one process (torch's world-size-1 shortcut)."""
        if not (dist.is_available() and dist.is_initialized()):
            return None
        group = self.process_group if self.process_group else dist.group.WORLD
        return group if dist.get_world_size(group) > 1 else None

    @classmethod
    def convert_sync_batchnorm(cls, module: nn.Module, process_group=None) -> nn.Module:
        """torch.nn.SyncBatchNorm.convert_sync_batchnorm, to opgen's SyncBatchNorm: every
        _BatchNorm layer of ``module`` (BatchNorm1d/2d/3d, torch's or opgen's SyncBatchNorm and
        BatchNorm2d) becomes one that keeps the layer's own Parameter and buffer objects (an
        optimizer made before keeps working), eps, momentum, affine and training flags."""
        converted = module
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            converted = cls(module.num_features, module.eps, module.momentum, module.affine,
                            module.track_running_stats, process_group, bias=module.bias is not None)
            if module.affine:
                with torch.no_grad():
                    converted.weight = module.weight
                    converted.bias = module.bias
            converted.running_mean = module.running_mean
            converted.running_var = module.running_var
            converted.num_batches_tracked = module.num_batches_tracked
            converted.training = module.training
            if hasattr(module, "qconfig"):
                converted.qconfig = module.qconfig
        for name, child in module.named_children():
            converted.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        return converted


MODULES = {"SyncBatchNorm": SyncBatchNorm}
