"""aclnnDeepNormGrad: the float64 numpy reference every kernel is compared with.

Written independently of the TE: the textbook LayerNorm backward applied to h = alpha*x + gx
(with mean and rstd used as given, as CANN does), dgx = dh and dx = alpha * dh. Checked
against central finite differences of the float64 forward (``deep_norm``) in
tests/test_op_deep_norm_grad.py, and against ATen's native_layer_norm_backward.
"""
from __future__ import annotations

import numpy as np


def _f64(a) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def kernel_alpha(alpha) -> float:
    """alpha as CANN's kernel uses it: the double attribute rounded to float32 (def l.78; beyond
    float32's range, inf)."""
    with np.errstate(over="ignore"):
        return float(np.float32(alpha))


def deep_norm(x, gx, gamma, beta, alpha: float, eps: float = 1e-6):
    """aclnnDeepNorm's forward (fwd doc l.30-37) over gamma's trailing axes, in float64 with
    alpha exactly as given: returns (y, mean, rstd), mean/rstd keepdim (x's leading dims, then 1s)."""
    x, gx, gamma, beta = _f64(x), _f64(gx), _f64(gamma), _f64(beta)
    h = alpha * x + gx
    axes = tuple(range(x.ndim - gamma.ndim, x.ndim))
    mean = h.mean(axis=axes, keepdims=True)
    rstd = 1.0 / np.sqrt(((h - mean) ** 2).mean(axis=axes, keepdims=True) + eps)
    return (h - mean) * rstd * gamma + beta, mean, rstd


def deep_norm_grad(dy, x, gx, gamma, mean, rstd, alpha: float):
    """(dx, dgx, dbeta, dgamma) of DeepNorm, with mean and rstd taken as given (one value per
    row: any shape holding x's leading dims' count) and alpha used exactly as given.

    With h = alpha*x + gx, h_hat = (h - mean) * rstd and D the size of a row:
        dh     = rstd * (g*dy - mean_row(g*dy) - h_hat * mean_row(g*dy*h_hat))
        dgx    = dh,   dx = alpha * dh
        dbeta  = sum_rows dy,   dgamma = sum_rows dy * h_hat
    """
    dy, x, gx, gamma = _f64(dy), _f64(x), _f64(gx), _f64(gamma)
    n = x.ndim - gamma.ndim
    rows = int(np.prod(x.shape[:n], dtype=np.int64))
    cols = int(np.prod(x.shape[n:], dtype=np.int64))
    with np.errstate(invalid="ignore", over="ignore"):     # inf and nan inputs propagate, quietly
        dy2, h = dy.reshape(rows, cols), (alpha * x + gx).reshape(rows, cols)
        g = gamma.reshape(cols)
        mu, rs = _f64(mean).reshape(rows, 1), _f64(rstd).reshape(rows, 1)
        h_hat = (h - mu) * rs
        gdy = dy2 * g
        m1 = gdy.mean(axis=1, keepdims=True) if cols else np.zeros((rows, 1))
        m2 = (gdy * h_hat).mean(axis=1, keepdims=True) if cols else np.zeros((rows, 1))
        dh = rs * (gdy - m1 - h_hat * m2)
        dbeta = dy2.sum(axis=0)
        dgamma = (dy2 * h_hat).sum(axis=0)
    return (alpha * dh).reshape(x.shape), dh.reshape(x.shape), dbeta.reshape(gamma.shape), dgamma.reshape(gamma.shape)


def of_problem(problem, arrays: dict) -> dict:
    """The reference outputs of one problem, by kernel name, in the user's shapes; alpha is the
    problem's, rounded to float32 as the kernel (and CANN's) reads it."""
    a = arrays
    dx, dgx, dbeta, dgamma = deep_norm_grad(a["dy"], a["x"], a["gx"], a["gamma"], a["mean"], a["rstd"],
                                            kernel_alpha(problem.alpha))
    return {"dx": dx, "dgx": dgx, "dbeta": dbeta, "dgamma": dgamma}
