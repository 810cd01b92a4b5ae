"""aclnnGroupNormSwishGrad: the float64 numpy reference every kernel is compared with.

Written independently of the TE (plain numpy, the textbook formulas: the forward GroupNorm
and Swish, the chain rule through the swish, GroupNorm's backward) and checked against
central finite differences of the float64 forward in tests/test_op_group_norm_swish_grad.py.
"""
from __future__ import annotations

import numpy as np


def _f64(a) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def sigmoid(z) -> np.ndarray:
    """1 / (1 + exp(-z)) without overflow warnings: exp of a non-positive number only."""
    z = _f64(z)
    with np.errstate(invalid="ignore"):
        e = np.exp(-np.abs(z))
        return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _channel_shape(x) -> tuple:
    return (1, x.shape[1]) + (1,) * (x.ndim - 2)


def group_norm_swish(x, gamma, beta, groups: int, swish_scale: float, eps: float = 1e-5):
    """The forward (aclnnGroupNormSwish with activateSwish): (out, mean, rstd), mean and rstd
    of shape (N, groups), out = y * sigmoid(s * y), y = GroupNorm(x) * gamma + beta."""
    x = _f64(x)
    n = x.shape[0]
    xg = x.reshape(n, groups, -1)
    mean = xg.mean(axis=2)
    rstd = 1.0 / np.sqrt(xg.var(axis=2) + eps)
    x_hat = ((xg - mean[..., None]) * rstd[..., None]).reshape(x.shape)
    y = x_hat * _f64(gamma).reshape(_channel_shape(x)) + _f64(beta).reshape(_channel_shape(x))
    return y * sigmoid(swish_scale * y), mean, rstd


def _groups_view(a, n: int, groups: int, d: int, hw: int) -> np.ndarray:
    return _f64(a).reshape(n, groups, d, hw)


def group_norm_swish_grad(dy, mean, rstd, x, gamma, beta, groups: int, swish_scale: float):
    """(dx, dgamma, dbeta) of out = y * sigmoid(s*y), y = x_hat * gamma + beta, at the given
    statistics. x and dy are (N, C, ...); mean and rstd hold N * groups values; gamma and
    beta C values. With M = (C / groups) * HxW elements per group:
        x_hat = (x - mean) * rstd,  y = x_hat * gamma + beta,  sig = sigmoid(s * y)
        g     = dy * (sig + s * y * sig * (1 - sig))          (d out / d y, times dy)
        dx    = rstd * (gamma*g - mean_grp(gamma*g) - x_hat * mean_grp(gamma*g*x_hat))
        dgamma[c] = sum_{n,hw} g * x_hat,    dbeta[c] = sum_{n,hw} g
    """
    x = _f64(x)
    n, c = x.shape[0], x.shape[1]
    hw = int(np.prod(x.shape[2:], dtype=np.int64))
    d = c // groups
    mu = _f64(mean).reshape(n, groups, 1, 1)
    rs = _f64(rstd).reshape(n, groups, 1, 1)
    gam = _f64(gamma).reshape(1, groups, d, 1)
    bet = _f64(beta).reshape(1, groups, d, 1)
    with np.errstate(invalid="ignore", over="ignore"):
        x_hat = (_groups_view(x, n, groups, d, hw) - mu) * rs
        y = x_hat * gam + bet
        sig = sigmoid(swish_scale * y)
        g = _groups_view(dy, n, groups, d, hw) * (sig + swish_scale * y * sig * (1.0 - sig))
        m1 = (gam * g).mean(axis=(2, 3), keepdims=True) if d * hw else np.zeros_like(mu)
        m2 = (gam * g * x_hat).mean(axis=(2, 3), keepdims=True) if d * hw else np.zeros_like(mu)
        dx = rs * (gam * g - m1 - x_hat * m2)
        dgamma = (g * x_hat).sum(axis=(0, 3)).reshape(c)
    dbeta = g.sum(axis=(0, 3)).reshape(c)
    return dx.reshape(x.shape), dgamma, dbeta


def of_problem(problem, arrays: dict) -> dict:
    """The reference outputs of one problem, by kernel name, in the user's shapes
    (swishScale rounded to float32, as the kernel reads it)."""
    a = arrays
    with np.errstate(over="ignore"):
        scale = float(np.float32(problem.swishScale))
    dx, dgamma, dbeta = group_norm_swish_grad(a["dy"], a["mean"], a["rstd"], a["x"], a["gamma"], a["beta"],
                                              problem.numGroups, scale)
    return {"dx": dx, "dgamma": dgamma, "dbeta": dbeta}
