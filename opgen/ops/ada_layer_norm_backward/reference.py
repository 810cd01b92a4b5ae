"""aclnnAdaLayerNormBackward: the float64 numpy reference every kernel is compared with.

Written independently of the TE (plain numpy, the textbook formulas) and checked against
central finite differences of the float64 forward in tests/test_op_ada_layer_norm_backward.py.
"""
from __future__ import annotations

import numpy as np


def _f64(a) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def _per_sample(a, batch: int, hidden: int) -> np.ndarray:
    """scale/shift ([B..., H] or [B..., 1, H]) as (B, 1, H): one row per sample, broadcast over S."""
    return _f64(a).reshape(batch, 1, hidden)


def ada_layer_norm(x, scale, shift, weight=None, bias=None, eps: float = 1e-5):
    """Forward AdaLayerNorm over the last axis of x [B..., S, H]:
    (LayerNorm(x) * (1 + scale) + shift, mean, rstd), mean/rstd shaped [B..., S, 1]."""
    x = _f64(x)
    hidden = x.shape[-1]
    batch = int(np.prod(x.shape[:-2], dtype=np.int64))
    mean = x.mean(axis=-1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + eps)
    y = (x - mean) * rstd
    y = y * (1.0 if weight is None else _f64(weight)) + (0.0 if bias is None else _f64(bias))
    y3 = y.reshape(batch, -1, hidden) * (1.0 + _per_sample(scale, batch, hidden)) + _per_sample(shift, batch, hidden)
    return y3.reshape(x.shape), mean, rstd


def ada_layer_norm_backward(dy, x, mean, rstd, scale, weight=None, bias=None):
    """(dx, dscale, dshift, dweight, dbias) of AdaLayerNorm; dscale/dshift come back as
    (B, H), the others in x's and [H]'s shapes. mean and rstd are used as given;
    weight None means ones, bias None zeros."""
    dy, x = _f64(dy), _f64(x)
    hidden = x.shape[-1]
    batch = int(np.prod(x.shape[:-2], dtype=np.int64))
    dy3, x3 = dy.reshape(batch, -1, hidden), x.reshape(batch, -1, hidden)
    seq = x3.shape[1]
    w = np.ones(hidden) if weight is None else _f64(weight).reshape(hidden)
    b = np.zeros(hidden) if bias is None else _f64(bias).reshape(hidden)
    gain = 1.0 + _per_sample(scale, batch, hidden)
    x_hat = (x3 - _f64(mean).reshape(batch, seq, 1)) * _f64(rstd).reshape(batch, seq, 1)
    g = dy3 * w * gain
    dx = _f64(rstd).reshape(batch, seq, 1) * (g - g.mean(axis=2, keepdims=True)
                                              - x_hat * (g * x_hat).mean(axis=2, keepdims=True))
    dscale = (dy3 * (x_hat * w + b)).sum(axis=1)
    dshift = dy3.sum(axis=1)
    dweight = (dy3 * gain * x_hat).sum(axis=(0, 1))
    dbias = (dy3 * gain).sum(axis=(0, 1))
    return dx.reshape(x.shape), dscale, dshift, dweight, dbias


def of_problem(problem, arrays: dict) -> dict:
    """The reference outputs of one problem, by kernel name, in the user's shapes (dscale
    and dshift shaped like scale)."""
    a = arrays
    dx, dscale, dshift, dgamma, dbeta = ada_layer_norm_backward(a["dy"], a["x"], a["mean"], a["rstd"], a["scale"],
                                                                a.get("gamma"), a.get("beta"))
    shape = problem.scale_shape
    return {"dx": dx, "dscale": dscale.reshape(shape), "dshift": dshift.reshape(shape), "dgamma": dgamma,
            "dbeta": dbeta}
