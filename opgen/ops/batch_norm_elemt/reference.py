"""aclnnBatchNormElemt: the float64 numpy reference every kernel is compared with.

Written independently of the TE (plain numpy, the document's formula with 1/sqrt(Var + eps)
the invstd input, ATen's batch_norm_elemt): the channel is axis 1.
"""
from __future__ import annotations

import numpy as np


def batch_norm_elemt(x, weight, bias, mean, invstd):
    """y = (x - mean) * invstd * weight + bias, every per-channel value broadcast along axis 1."""
    x = np.asarray(x, np.float64)
    shape = [1] * x.ndim
    shape[1] = x.shape[1]
    per = lambda v: np.asarray(v, np.float64).reshape(shape)  # noqa: E731
    return (x - per(mean)) * per(invstd) * per(weight) + per(bias)


def of_problem(problem, arrays: dict) -> dict:
    """The reference output of one problem, by kernel name, in the user's shape."""
    return {"y": batch_norm_elemt(*(arrays[n] for n in ("x", "weight", "bias", "mean", "invstd")))}
