"""aclnnBatchNormElemtBackward: the float64 numpy reference every kernel is compared with.

Written independently of the TE (plain numpy, the document's formula and ATen's
batch_norm_backward_elemt): the channel is axis 1; the counter, of any shape, is summed whole.
"""
from __future__ import annotations

import numpy as np


def batch_norm_elemt_backward(grad_out, x, mean, invstd, weight, sum_dy, sum_dy_xmu, counter):
    """gradInput = ((g - sumDy / n) - (x - mean) * invstd^2 * sumDyXmu / n) * invstd * weight,
    n = sum(counter), every per-channel value broadcast along axis 1."""
    g, x = np.asarray(grad_out, np.float64), np.asarray(x, np.float64)
    shape = [1] * x.ndim
    shape[1] = x.shape[1]
    per = lambda v: np.asarray(v, np.float64).reshape(shape)  # noqa: E731
    total = np.asarray(counter, np.float64).sum()
    with np.errstate(divide="ignore", invalid="ignore"):     # an empty counter divides by 0, as CANN's RealDiv
        mean_dy, mean_dy_xmu = per(sum_dy) / total, per(sum_dy_xmu) / total
    return ((g - mean_dy) - (x - per(mean)) * per(invstd) ** 2 * mean_dy_xmu) * per(invstd) * per(weight)


def of_problem(problem, arrays: dict) -> dict:
    """The reference output of one problem, by kernel name, in the user's shape."""
    names = ("dy", "x", "mean", "invstd", "weight", "sum_dy", "sum_dy_xmu", "counter")
    return {"dx": batch_norm_elemt_backward(*(arrays[n] for n in names))}
