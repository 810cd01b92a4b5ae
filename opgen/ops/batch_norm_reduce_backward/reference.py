"""aclnnBatchNormReduceBackward: the float64 numpy reference every kernel is compared with.

Written independently of the TE (plain numpy, the document's formulas and ATen's
batch_norm_backward_reduce): the channel is axis 1, every other axis is reduced.
"""
from __future__ import annotations

import numpy as np


def batch_norm_reduce_backward(grad_out, x, mean, invstd):
    """(sum_dy, sum_dy_xmu, grad_weight, grad_bias) per channel:
        sum_dy = sum g,  sum_dy_xmu = sum g * (x - mean),
        grad_weight = sum_dy_xmu * invstd,  grad_bias = sum_dy."""
    g, x = np.asarray(grad_out, np.float64), np.asarray(x, np.float64)
    shape = [1] * x.ndim
    shape[1] = x.shape[1]
    axes = tuple(i for i in range(x.ndim) if i != 1)
    mean = np.asarray(mean, np.float64).reshape(shape)
    sum_dy = g.sum(axis=axes)
    sum_dy_xmu = (g * (x - mean)).sum(axis=axes)
    return sum_dy, sum_dy_xmu, sum_dy_xmu * np.asarray(invstd, np.float64).reshape(-1), sum_dy.copy()


def of_problem(problem, arrays: dict) -> dict:
    """The reference outputs of one problem, by kernel name, in the user's shapes."""
    values = batch_norm_reduce_backward(arrays["dy"], arrays["x"], arrays["mean"], arrays["invstd"])
    return dict(zip(("sum_dy", "sum_dy_xmu", "grad_weight", "grad_bias"), values))
