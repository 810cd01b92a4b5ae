"""aclnnRmsNormGrad: the float64 numpy reference every kernel is compared with.

Written independently of the TE (plain numpy, the textbook formulas) and checked against
central finite differences of the float64 forward in tests/test_reference.py.
"""
from __future__ import annotations

import numpy as np


def _f64(a) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def rms_norm(x, gamma, eps: float = 1e-6):
    """Forward RmsNorm over gamma's trailing axes: returns (y, rstd) with rstd of shape x.shape[:n]."""
    x, gamma = _f64(x), _f64(gamma)
    n = x.ndim - gamma.ndim
    axes = tuple(range(n, x.ndim))
    rstd = 1.0 / np.sqrt(np.mean(x * x, axis=axes, keepdims=True) + eps)
    return x * rstd * gamma, rstd.reshape(x.shape[:n])


def rms_norm_grad(dy, x, rstd, gamma):
    """Backward of RmsNorm: (dx, dgamma), with rstd taken as the forward's 1/rms of x."""
    dy, x, gamma = _f64(dy), _f64(x), _f64(gamma)
    n = x.ndim - gamma.ndim
    rows = int(np.prod(x.shape[:n], dtype=np.int64))
    cols = int(np.prod(x.shape[n:], dtype=np.int64))
    dy2, x2 = dy.reshape(rows, cols), x.reshape(rows, cols)
    g = gamma.reshape(cols)
    r = _f64(rstd).reshape(rows, 1)
    x_hat = x2 * r
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_term = np.mean(dy2 * g * x_hat, axis=1, keepdims=True) if cols else np.zeros((rows, 1))
    dx = r * (dy2 * g - x_hat * mean_term)
    dgamma = np.sum(dy2 * x_hat, axis=0)
    return dx.reshape(x.shape), dgamma.reshape(gamma.shape)


def of_problem(problem, arrays: dict) -> dict:
    """The reference outputs of one problem, by kernel name, in the user's shapes."""
    dx, dgamma = rms_norm_grad(arrays["dy"], arrays["x"], arrays["rstd"], arrays["gamma"])
    return {"dx": dx, "dgamma": dgamma}
