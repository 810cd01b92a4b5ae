"""LayerNormChannelsBackward: the float64 numpy reference every kernel is compared with:
aclnnLayerNormBackward's reference (itself checked by finite differences in
tests/test_op_layer_norm_backward.py) with the channels moved last, in float64."""
from __future__ import annotations

import numpy as np

from opgen.ops.layer_norm_backward.reference import layer_norm_backward


def layer_norm_channels_backward(dy, x, mean, rstd, weight=None):
    """(dx, dgamma, dbeta) of a LayerNorm over axis 1 of x, mean and rstd as given (x's shape
    with C = 1)."""
    last = [np.moveaxis(np.asarray(a).astype(np.float64), 1, -1) for a in (dy, x, mean, rstd)]
    dx, dgamma, dbeta = layer_norm_backward(last[0], last[1], last[1].shape[-1:], last[2], last[3], weight)
    return np.moveaxis(dx, -1, 1), dgamma, dbeta


def of_problem(problem, arrays: dict) -> dict:
    """The reference outputs by kernel name, in the user's shapes."""
    a = arrays
    dx, dgamma, dbeta = layer_norm_channels_backward(np.reshape(a["dy"], problem.x_shape),
                                                     np.reshape(a["x"], problem.x_shape),
                                                     np.reshape(a["mean"], problem.stat_shape),
                                                     np.reshape(a["rstd"], problem.stat_shape), a.get("gamma"))
    return {"dx": dx, "dgamma": dgamma, "dbeta": dbeta}
