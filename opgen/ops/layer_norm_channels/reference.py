"""LayerNormChannels: the float64 numpy reference every kernel is compared with.

Written independently of the TE: the channels moved last (a float64 copy, the reference
may permute), then aclnnLayerNorm's reference over that last axis, and moved back."""
from __future__ import annotations

import warnings

import numpy as np

from opgen.ops.layer_norm_backward.reference import layer_norm


def layer_norm_channels(x, weight=None, bias=None, eps: float = 1e-6):
    """(y, mean, rstd) of a LayerNorm over axis 1 of ``x``; mean and rstd keep x's shape
    with axis 1 of size 1."""
    last = np.moveaxis(np.asarray(x).astype(np.float64), 1, -1)
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # no channels: the mean of nothing is nan
        y, mean, rstd = layer_norm(last, last.shape[-1:], weight, bias, eps)
    return tuple(np.moveaxis(a, -1, 1) for a in (y, mean, rstd))


def of_problem(problem, arrays: dict) -> dict:
    """The reference outputs by kernel name, in the user's shapes; eps is the float32 value
    the kernel reads."""
    eps = float(np.asarray(arrays["eps"]).reshape(-1)[0])
    y, mean, rstd = layer_norm_channels(np.reshape(arrays["x"], problem.x_shape), arrays.get("gamma"),
                                        arrays.get("beta"), eps)
    return {"y": y, "mean": mean.reshape(problem.stat_shape), "rstd": rstd.reshape(problem.stat_shape)}
