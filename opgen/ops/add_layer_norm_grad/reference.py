"""aclnnAddLayerNormGrad: the float64 numpy reference every kernel is compared with.

LayerNormBackward's reference (opgen.ops.layer_norm_backward.reference, itself checked
against finite differences) on x = x1 + x2, plus dsum; checked against central finite
differences of the float64 forward of Add + LayerNorm in tests/test_op_add_layer_norm_grad.py.
"""
from __future__ import annotations

import numpy as np

from opgen.ops.layer_norm_backward.reference import layer_norm_backward


def add_layer_norm_grad(dy, x1, x2, rstd, mean, gamma, dsum=None):
    """(dx, dgamma, dbeta) of y = LayerNorm(x1 + x2) * gamma + beta over gamma's trailing axes.

    mean and rstd are used as given; dx is the gradient of both x1 and x2 (one tensor, the
    document's dxOut), plus dsum when given (a null dsumOptional adds nothing)."""
    x = np.asarray(x1, np.float64) + np.asarray(x2, np.float64)
    dx, dgamma, dbeta = layer_norm_backward(dy, x, np.shape(gamma), mean, rstd, gamma)
    if dsum is not None:
        dx = dx + np.asarray(dsum, np.float64)
    return dx, dgamma, dbeta


def of_problem(problem, arrays: dict) -> dict:
    """The reference outputs of one problem, by kernel name, in the user's shapes."""
    a = arrays
    dx, dgamma, dbeta = add_layer_norm_grad(a["dy"], a["x1"], a["x2"], a["rstd"], a["mean"], a["gamma"], a.get("dsum"))
    return {"dx": dx, "dgamma": dgamma, "dbeta": dbeta}
