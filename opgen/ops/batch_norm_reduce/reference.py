"""aclnnBatchNormReduce: the float64 numpy reference every kernel is compared with.

Written independently of the TE (plain numpy, the document's two formulas): every axis but
the channel axis is reduced.
"""
from __future__ import annotations

import numpy as np


def batch_norm_reduce(x, channel_axis: int = 1):
    """(sum, square_sum) per channel: sum_i = sum x[.., i, ..], squareSum_i = sum x[.., i, ..]^2."""
    x = np.asarray(x, np.float64)
    axes = tuple(i for i in range(x.ndim) if i != channel_axis)
    return x.sum(axis=axes), (x * x).sum(axis=axes)


def of_problem(problem, arrays: dict) -> dict:
    """The reference outputs of one problem, by kernel name, in the user's shapes."""
    total, squares = batch_norm_reduce(arrays["x"], problem.channel_axis)
    return {"sum": total, "square_sum": squares}
