"""opgen.torch's InstanceNorm1d, InstanceNorm2d and InstanceNorm3d: torch.nn's classes whose
forward is opgen's aclnnInstanceNorm kernel (this op) and whose backward is opgen's
aclnnGroupNormBackward kernel with num_groups = C.

Instance norm IS group norm with one channel per group: each (n, c) is normalized over its
own spatial elements, which is GroupNorm's group of D = C / G = 1 channel. So the backward
of y = (x - mean) * rstd * gamma + beta per (n, c) is aclnnGroupNormBackward's with G = C,
fed the two statistics it takes: the mean (N, C), and rstd = 1 / sqrt(variance + eps) (N, C),
which aclnnInstanceNorm does not return (it returns the biased variance): computed here from
its variance in float32 (N * C elements). aclnnInstanceNorm takes a 4-D (N, C, H, W) x: a 1-d
input (N, C, L) is viewed as (N, C, L, 1) and a 3-d one (N, C, D, H, W) as (N, C, D, H * W),
views of the caller's memory, no copy.

With ``track_running_stats=True`` the modules do what torch.nn's do: in training they
normalize with the input's statistics and update the running ones (the batch's average of
each (n, c)'s mean and unbiased variance, with momentum; momentum=None passes 0.0 to
torch's functional call and so leaves them unchanged: the same here); in eval they normalize
with the running statistics, which is BatchNorm in eval: opgen's aclnnBatchNorm and
aclnnBatchNormBackward kernels (opgen.ops.batch_norm_backward.torch_module's function).

Imported by opgen.torch (it needs ``torch.ops.opgen.instance_norm`` and
``torch.ops.opgen.group_norm_backward``, which opgen.torch registers first); ``MODULES``
lists what it exports.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from opgen import config
from opgen import torch as opgen_torch
from opgen.ops import get_op
from opgen.ops.batch_norm_backward.torch_module import _BatchNormFunction

_KERNEL_DTYPES = (torch.float32, torch.float16)
"""aclnnInstanceNorm's dtypes (FLOAT32, FLOAT16: no bfloat16 on its one product). A bfloat16
input runs the float32 kernel on a float32 copy of x (its mean and variance then float32) and
y is rounded to bfloat16 once; the backward takes the bfloat16 x itself (aclnnGroupNormBackward
has bfloat16 rows)."""


def _float32_statistics_rows() -> dict:
    """product -> the data dtypes aclnnGroupNormBackward takes with float32 statistics there
    (the Ascend 950's mixed rows), read once: a plain dict, which torch.compile traces."""
    op = get_op("group_norm_backward")
    return {product: frozenset(c["x"] for c in combos if c["mean"] == "float32")
            for product, combos in op.products.items()}


_FLOAT32_STATISTICS = _float32_statistics_rows()
_DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def _rstd_dtype(product: str, dtype: torch.dtype) -> torch.dtype:
    """float32 where aclnnGroupNormBackward, on the product it runs on (``product``, else the
    first offering it: config.product_for), takes float32 statistics with data of ``dtype``
    (no rounding of rstd to half), else ``dtype`` (its same-dtype rows)."""
    rows = _FLOAT32_STATISTICS.get(product)
    if rows is None:
        rows = next(iter(_FLOAT32_STATISTICS.values()))
    return torch.float32 if _DTYPE_NAMES.get(dtype) in rows else dtype


def _per_channel(t: Tensor | None, x: Tensor, fill: float) -> Tensor:
    """gamma or beta as aclnnInstanceNorm takes it: C elements in x's dtype (``fill`` where
    the module has no such parameter: the kernel requires both)."""
    if t is None:
        return x.new_full((x.shape[1],), fill)
    return opgen_torch.as_dtype(t, x.dtype)


class _InstanceNormFunction(torch.autograd.Function):
    """InstanceNorm of x (N, C, H, W): the forward is opgen's aclnnInstanceNorm kernel, the
    backward opgen's aclnnGroupNormBackward with num_groups = C, fed the forward's mean and
    rstd = 1 / sqrt(variance + eps). Also returns each (n, c)'s mean and biased variance (not
    differentiable) for the running-statistics update."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps: float):
        data = x if x.dtype in _KERNEL_DTYPES else x.float()      # bfloat16: no such row (see _KERNEL_DTYPES)
        y, mean, variance = opgen_torch.calls.instance_norm(data, _per_channel(weight, data, 1.0),
                                                            _per_channel(bias, data, 0.0), "NCHW", eps)
        y = opgen_torch.as_dtype(y, x.dtype)
        n, c = x.shape[0], x.shape[1]
        stat = _rstd_dtype(config.get_product(), x.dtype)
        rstd = torch.rsqrt(variance.view(n, c).float() + eps).to(stat)
        ctx.save_for_backward(x, mean.view(n, c).to(stat), rstd, weight)
        ctx.has_bias = bias is not None
        ctx.mark_non_differentiable(mean, variance)
        return y, mean, variance

    @staticmethod
    def backward(ctx, dy, _mean_grad, _variance_grad):
        x, mean, rstd, weight = ctx.saved_tensors
        need = ctx.needs_input_grad
        mask = [need[0], weight is not None and need[1], ctx.has_bias and need[2]]
        gamma = None if weight is None else opgen_torch.as_dtype(weight, mean.dtype)
        dx, dgamma, dbeta = opgen_torch.calls.group_norm_backward(
            opgen_torch.as_dtype(dy, x.dtype).contiguous(), x, mean, rstd, gamma, x.shape[1], mask)
        return (dx if mask[0] else None, dgamma.to(weight.dtype) if mask[1] else None,
                dbeta.to(weight.dtype if weight is not None else dy.dtype) if mask[2] else None, None)


def _as_4d(x: Tensor) -> Tensor:
    """x (N, C, *spatial) as aclnnInstanceNorm's (N, C, H, W): (N, C, L) -> (N, C, L, 1),
    (N, C, D, H, W) -> (N, C, D, H * W); views of a contiguous x."""
    if x.dim() == 3:
        return x.unsqueeze(-1)
    if x.dim() == 5:
        return x.flatten(3)
    return x


class _OpgenInstanceNorm:
    """torch.nn's InstanceNorm (same constructor, parameters, buffers and state_dict; torch's
    forward checks its rank, num_features and the unbatched form, then calls
    ``_apply_instance_norm``, which this replaces) on opgen's kernels. Mixed in before
    torch.nn's class."""

    def _apply_instance_norm(self, x: Tensor) -> Tensor:
        self._refuse_like_torch(x)
        if not (self.training or not self.track_running_stats):     # eval with running stats
            y, _, _ = _BatchNormFunction.apply(x, self.weight, self.bias, self.running_mean, self.running_var,
                                               False, self.eps)
            return y
        F._verify_spatial_size(x.size())
        x4 = _as_4d(x)
        y, mean, variance = _InstanceNormFunction.apply(x4, self.weight, self.bias, self.eps)
        if self.running_mean is not None and x.numel():
            self._update_running(x4, mean, variance, 0.0 if self.momentum is None else self.momentum)
        return y.view(x.shape)

    def _refuse_like_torch(self, x: Tensor) -> None:
        """torch's RuntimeErrors for running statistics of another size (F.instance_norm's
        batch_norm check over the statistics repeated N times), then the dtype and device
        refusals: what opgen's kernels would refuse with an aclnn status code."""
        n, channels = x.shape[0], x.shape[1]
        running = self._buffers.get("running_mean")
        if running is not None and running.shape[0] != channels:
            raise RuntimeError(f"running_mean should contain {n * channels} elements not {n * running.numel()}")
        opgen_torch.refuse_dtype(x, "opgen instance_norm")
        opgen_torch.refuse_other_devices(x, self._parameters.get("weight"), self._parameters.get("bias"), running,
                                         self._buffers.get("running_var"))

    @torch.no_grad()
    def _update_running(self, x4: Tensor, mean: Tensor, variance: Tensor, factor: float) -> None:
        """r = (1 - factor) * r + factor * the batch's average of the per-(n, c) statistics, the
        variance unbiased (M / (M - 1), M = H * W), as ATen's instance_norm updates them."""
        m = x4.shape[2] * x4.shape[3]
        n, c = x4.shape[0], x4.shape[1]
        batch_mean = mean.view(n, c).double().mean(0)
        batch_var = (variance.view(n, c).double() * (m / (m - 1))).mean(0)
        self.running_mean.mul_(1 - factor).add_(batch_mean.to(self.running_mean.dtype), alpha=factor)
        self.running_var.mul_(1 - factor).add_(batch_var.to(self.running_var.dtype), alpha=factor)


class InstanceNorm1d(_OpgenInstanceNorm, nn.InstanceNorm1d):
    """torch.nn.InstanceNorm1d, (N, C, L) or (C, L), on opgen's kernels (see the module docstring)."""


class InstanceNorm2d(_OpgenInstanceNorm, nn.InstanceNorm2d):
    """torch.nn.InstanceNorm2d, (N, C, H, W) or (C, H, W), on opgen's kernels (see the module docstring)."""


class InstanceNorm3d(_OpgenInstanceNorm, nn.InstanceNorm3d):
    """torch.nn.InstanceNorm3d, (N, C, D, H, W) or (C, D, H, W), on opgen's kernels (see the module
    docstring)."""


MODULES = {"InstanceNorm1d": InstanceNorm1d, "InstanceNorm2d": InstanceNorm2d, "InstanceNorm3d": InstanceNorm3d}
