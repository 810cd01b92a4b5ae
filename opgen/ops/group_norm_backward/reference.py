"""aclnnGroupNormBackward: the float64 numpy reference every kernel is compared with.

Written independently of the TE (plain numpy, the textbook formulas) and checked against
central finite differences of the float64 forward in tests/test_reference.py.
"""
from __future__ import annotations

import numpy as np


def _f64(a) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def group_norm(x, gamma, beta, group: int, eps: float = 1e-5):
    """Forward GroupNorm of x (N, C, *): returns (y, mean, rstd) with mean/rstd of shape (N, group)."""
    x = _f64(x)
    n, c = x.shape[0], x.shape[1]
    xg = x.reshape(n, group, (c // group) * int(np.prod(x.shape[2:], dtype=np.int64)))
    mean = xg.mean(axis=2)
    rstd = 1.0 / np.sqrt(xg.var(axis=2) + eps)
    x_hat = ((xg - mean[..., None]) * rstd[..., None]).reshape(x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    return x_hat * _f64(gamma).reshape(shape) + _f64(beta).reshape(shape), mean, rstd


def group_norm_backward(dy, x, mean, rstd, gamma, group: int):
    """Backward of GroupNorm (PyTorch native_group_norm_backward): (dx, dgamma, dbeta).

    dy and x are (N, C, ...); mean and rstd hold N * group values; gamma holds C values or is
    None (ones). With x_hat = (x - mean) * rstd and M = (C / group) * HxW elements per group:
        dx = rstd * (gamma*dy - mean_g(gamma*dy) - x_hat * mean_g(gamma*dy*x_hat))
        dgamma[c] = sum_{n,hw} dy * x_hat,   dbeta[c] = sum_{n,hw} dy
    """
    dy, x = _f64(dy), _f64(x)
    n, c = x.shape[0], x.shape[1]
    hw = int(np.prod(x.shape[2:], dtype=np.int64))
    g = np.ones(c) if gamma is None else _f64(gamma).reshape(c)
    dy3, x3 = dy.reshape(n, c, hw), x.reshape(n, c, hw)
    mu = _f64(mean).reshape(n, group, 1, 1)
    rs = _f64(rstd).reshape(n, group, 1, 1)
    d = c // group if group else 0
    x_hat = (x3.reshape(n, group, d, hw) - mu) * rs
    gdy = (dy3 * g[None, :, None]).reshape(n, group, d, hw)
    with np.errstate(invalid="ignore", divide="ignore"):
        m1 = gdy.mean(axis=(2, 3), keepdims=True) if d * hw else np.zeros_like(mu)
        m2 = (gdy * x_hat).mean(axis=(2, 3), keepdims=True) if d * hw else np.zeros_like(mu)
    dx = rs * (gdy - m1 - x_hat * m2)
    dgamma = (dy3.reshape(n, group, d, hw) * x_hat).sum(axis=(0, 3)).reshape(c)
    dbeta = dy3.sum(axis=(0, 2))
    return dx.reshape(x.shape), dgamma, dbeta


def of_problem(problem, arrays: dict) -> dict:
    """The reference outputs of one problem, by kernel name, in the user's shapes."""
    a = arrays
    dx, dgamma, dbeta = group_norm_backward(a["dy"], a["x"], a["mean"], a["rstd"], a.get("gamma"), problem.group)
    return {"dx": dx, "dgamma": dgamma, "dbeta": dbeta}
