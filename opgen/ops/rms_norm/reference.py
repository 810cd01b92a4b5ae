"""aclnnRmsNorm: the float64 numpy reference every kernel is compared with.

The forward that tests/test_reference.py already checks RmsNormGrad's reference against
(opgen.ops.rms_norm_grad.reference.rms_norm): one float64 forward for both directions.
"""
from __future__ import annotations

import warnings

import numpy as np

from opgen.ops.rms_norm_grad.reference import rms_norm


def of_problem(problem, arrays: dict) -> dict:
    """The reference outputs of one problem, by kernel name, in the user's shapes; eps is
    the float32 value the kernel reads (``arrays['eps']``), as CANN's kernel rounds it."""
    eps = float(np.asarray(arrays["eps"]).reshape(-1)[0])
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # no columns: the mean of nothing is nan
        y, rstd = rms_norm(arrays["x"], arrays["gamma"], eps)
    return {"y": y, "rstd": rstd.reshape(problem.rstd_shape)}
