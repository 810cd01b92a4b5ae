"""aclnnLayerNormBackward: the float64 numpy reference every kernel is compared with.

Written independently of the TE (plain numpy, the textbook formulas) and checked against
central finite differences of the float64 forward in tests/test_op_layer_norm_backward.py.
"""
from __future__ import annotations

import numpy as np


def _f64(a) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def layer_norm(x, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    """Forward LayerNorm over the trailing ``normalized_shape`` axes of x.

    Returns (y, mean, rstd), mean and rstd keeping x's leading axes and a 1 per normalized
    axis (aclnnLayerNorm's and torch's shape); the variance is the biased one (1/N).
    """
    x = _f64(x)
    axes = tuple(range(x.ndim - len(tuple(normalized_shape)), x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True) + eps)
    y = (x - mean) * rstd
    if weight is not None:
        y = y * _f64(weight)
    if bias is not None:
        y = y + _f64(bias)
    return y, mean, rstd


def layer_norm_backward(dy, x, normalized_shape, mean, rstd, weight=None):
    """Backward of LayerNorm (CANN's and PyTorch's native_layer_norm_backward): (dx, dgamma, dbeta).

    mean and rstd are inputs used as given (M values in any shape); weight None means ones.
    With x_hat = (x - mean) * rstd, g = dy * weight, N the normalized elements per row:
        dx     = rstd * (g - mean_N(g) - x_hat * mean_N(g * x_hat))
        dgamma = sum over rows of dy * x_hat,    dbeta = sum over rows of dy
    """
    dy, x = _f64(dy), _f64(x)
    norm = tuple(int(d) for d in normalized_shape)
    n = int(np.prod(norm, dtype=np.int64))
    lead = x.shape[: x.ndim - len(norm)]
    m = int(np.prod(lead, dtype=np.int64))
    dy2, x2 = dy.reshape(m, n), x.reshape(m, n)
    w = np.ones(n) if weight is None else _f64(weight).reshape(n)
    x_hat = (x2 - _f64(mean).reshape(m, 1)) * _f64(rstd).reshape(m, 1)
    g = dy2 * w
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_g = g.mean(axis=1, keepdims=True) if n else np.zeros((m, 1))
        mean_gx = (g * x_hat).mean(axis=1, keepdims=True) if n else np.zeros((m, 1))
    dx = _f64(rstd).reshape(m, 1) * (g - mean_g - x_hat * mean_gx)
    dgamma = (dy2 * x_hat).sum(axis=0)
    dbeta = dy2.sum(axis=0)
    return dx.reshape(x.shape), dgamma.reshape(norm), dbeta.reshape(norm)


def of_problem(problem, arrays: dict) -> dict:
    """The reference outputs of one problem, by kernel name, in the user's shapes (the bias
    takes no part: it is no kernel tensor)."""
    a = arrays
    dx, dgamma, dbeta = layer_norm_backward(a["dy"], a["x"], problem.normalizedShape, a["mean"], a["rstd"],
                                            a.get("gamma"))
    return {"dx": dx, "dgamma": dgamma, "dbeta": dbeta}
