"""aclnnGemmaRmsNorm: the float64 numpy reference every kernel is compared with.

RmsNorm's float64 forward (opgen.ops.rms_norm_grad.reference.rms_norm, which
tests/test_reference.py checks) with gamma' = 1 + gamma formed in float64: the document's
formula is RmsNorm's with that one change, and in float64 the sum keeps every bit of a
float32 gamma that matters against the kernels' float32 tolerance.
"""
from __future__ import annotations

import warnings

import numpy as np

from opgen.ops.rms_norm_grad.reference import rms_norm


def gemma_rms_norm(x, gamma, eps: float = 1e-6):
    """(y, rstd) in float64, rstd of shape x.shape[:n] (n = x.ndim - gamma.ndim)."""
    return rms_norm(x, 1.0 + np.asarray(gamma, dtype=np.float64), eps)


def of_problem(problem, arrays: dict) -> dict:
    """The reference outputs of one problem, by kernel name, in the user's shapes; eps is
    the float32 value the kernel reads (``arrays['eps']``), as CANN's kernel rounds it."""
    eps = float(np.asarray(arrays["eps"]).reshape(-1)[0])
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # no columns: the mean of nothing is nan
        y, rstd = gemma_rms_norm(arrays["x"], arrays["gamma"], eps)
    return {"y": y, "rstd": rstd.reshape(problem.rstd_shape)}
