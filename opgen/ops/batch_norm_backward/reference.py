"""aclnnBatchNormBackward: the float64 numpy reference every kernel is compared with.

Written independently of the TE (plain numpy, the textbook formulas of the document and
PyTorch) and checked against central finite differences of the float64 forwards in
tests/test_op_batch_norm_backward.py. The channel is axis 1, or the last axis for a
channel-last (NHWC/NDHWC) tensor; every other axis is reduced.
"""
from __future__ import annotations

import numpy as np

# What a null optional input stands for (the op_api fills it, ops-nn aclnn_batch_norm_backward.cpp
# l.731-750 / norm_tensor_util.cpp FillScalar): the same constants as ApiSpec.fill.
NULL_FILL = {"weight": 1.0, "running_mean": 0.0, "running_var": 1.0, "save_mean": 0.0, "save_invstd": 1.0}


def _f64(a) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def _axes(x: np.ndarray, channel_axis: int) -> tuple:
    return tuple(i for i in range(x.ndim) if i != channel_axis)


def _per_channel(v, x: np.ndarray, channel_axis: int) -> np.ndarray:
    """A (C,) vector shaped to broadcast against x along its channel axis."""
    shape = [1] * x.ndim
    shape[channel_axis] = x.shape[channel_axis]
    return _f64(v).reshape(shape)


def batch_norm(x, weight, bias, running_mean, running_var, training: bool, eps: float = 1e-5,
               channel_axis: int = 1):
    """Forward BatchNorm (aclnnBatchNorm, torch.nn.functional.batch_norm) in float64.

    Returns (y, save_mean, save_invstd): training normalises with the batch's mean and
    biased variance (and returns them as 1/sqrt(var + eps)); eval with the running ones.
    """
    x = _f64(x)
    axes = _axes(x, channel_axis)
    if training:
        mean, var = x.mean(axis=axes), x.var(axis=axes)
    else:
        mean, var = _f64(running_mean), _f64(running_var)
    invstd = 1.0 / np.sqrt(var + eps)
    x_hat = (x - _per_channel(mean, x, channel_axis)) * _per_channel(invstd, x, channel_axis)
    y = x_hat * _per_channel(weight, x, channel_axis) + _per_channel(bias, x, channel_axis)
    return y, mean, invstd


def _filled(value, name: str, c: int) -> np.ndarray:
    return np.full(c, NULL_FILL[name]) if value is None else _f64(value).reshape(-1)


def batch_norm_backward(grad_out, x, weight, running_mean, running_var, save_mean, save_invstd,
                        training: bool, eps: float, channel_axis: int = 1):
    """Backward of BatchNorm (aclnnBatchNormBackward, ATen native_batch_norm_backward):
    (grad_input, grad_weight, grad_bias). Null optional inputs are CANN's fills.

    training: with mean = saveMean, invstd = saveInvstd and M elements per channel,
        grad_bias = sum g,  grad_weight = sum g * (x - mean) * invstd,
        grad_input = weight * invstd * (g - (grad_bias + x_hat * grad_weight) / M)
    eval (the statistics are constants): invstd = 1 / sqrt(runningVar + eps),
        grad_input = g * weight * invstd,  grad_weight = sum g * (x - runningMean) * invstd,
        grad_bias = sum g.
    """
    g, x = _f64(grad_out), _f64(x)
    c = x.shape[channel_axis]
    axes = _axes(x, channel_axis)
    w = _filled(weight, "weight", c)
    if training:
        mean, invstd = _filled(save_mean, "save_mean", c), _filled(save_invstd, "save_invstd", c)
    else:
        mean = _filled(running_mean, "running_mean", c)
        with np.errstate(divide="ignore", invalid="ignore"):
            invstd = 1.0 / np.sqrt(_filled(running_var, "running_var", c) + eps)
    per = lambda v: _per_channel(v, x, channel_axis)  # noqa: E731
    x_hat = (x - per(mean)) * per(invstd)
    grad_bias = g.sum(axis=axes)
    grad_weight = (g * x_hat).sum(axis=axes)
    if not training:
        return g * per(w * invstd), grad_weight, grad_bias
    m = x.size // c if c else 0
    with np.errstate(divide="ignore", invalid="ignore"):
        grad_input = per(w * invstd) * (g - (per(grad_bias) + x_hat * per(grad_weight)) / m)
    return grad_input, grad_weight, grad_bias


def of_problem(problem, arrays: dict) -> dict:
    """The reference outputs of one problem, by kernel name, in the user's shapes. eps is
    taken as float32, as CANN's callees take it (their ``float eps``)."""
    a = arrays
    eps = float(np.float32(problem.eps))
    dx, dweight, dbias = batch_norm_backward(
        a["dy"], a["x"], a.get("weight"), a.get("running_mean"), a.get("running_var"), a.get("save_mean"),
        a.get("save_invstd"), problem.training, eps, problem.channel_axis)
    return {"dx": dx, "dweight": dweight, "dbias": dbias}
