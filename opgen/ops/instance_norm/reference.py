"""aclnnInstanceNorm: the float64 numpy reference every kernel is compared with.

Written from the document's formula over x's own (N, C, H, W) axes: the mean and the
biased variance (divided by H * W, as torch.nn.InstanceNorm normalizes) over H and W of
each (n, c). tests/test_op_instance_norm.py checks it against GroupNorm's float64 forward
with one channel per group (opgen.ops.group_norm_backward.reference.group_norm), an
independent formula, and against torch.nn.functional.instance_norm in float64.
"""
from __future__ import annotations

import warnings

import numpy as np


def instance_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> tuple:
    """(y, mean, variance) in float64; mean and variance (N, C, 1, 1)."""
    x = np.asarray(x, np.float64)
    mean = x.mean(axis=(2, 3), keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=(2, 3), keepdims=True)
    per_channel = (1, -1, 1, 1)
    y = ((x - mean) / np.sqrt(variance + eps) * np.reshape(np.asarray(gamma, np.float64), per_channel)
         + np.reshape(np.asarray(beta, np.float64), per_channel))
    return y, mean, variance


def of_problem(problem, arrays: dict) -> dict:
    """The reference outputs of one problem, by kernel name, in the user's shapes (NCHW or
    NHWC); eps is the float32 value the kernel reads."""
    eps = float(np.asarray(arrays["eps"]).reshape(-1)[0])
    x = np.reshape(arrays["x"], problem.x_shape)
    nhwc = problem.dataFormat == "NHWC"
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # empty H*W: the mean of nothing is nan
        y, mean, variance = instance_norm(np.transpose(x, (0, 3, 1, 2)) if nhwc else x, arrays["gamma"],
                                          arrays["beta"], eps)
    if nhwc:    # y back to (N, H, W, C), the statistics (N, 1, 1, C)
        y = np.transpose(y, (0, 2, 3, 1))
        mean, variance = (np.reshape(s, problem.stat_shape) for s in (mean, variance))
    return {"y": y, "mean": mean, "variance": variance}
