"""aclnnGroupNorm: the float64 numpy reference every kernel is compared with.

The forward that tests/test_reference.py already checks GroupNormBackward's reference
against (opgen.ops.group_norm_backward.reference.group_norm): one float64 forward for both.
"""
from __future__ import annotations

import warnings

import numpy as np

from opgen.ops.group_norm_backward.reference import group_norm


def of_problem(problem, arrays: dict) -> dict:
    """The reference outputs of one problem, by kernel name, in the user's shapes; eps is the
    float32 value the kernel reads; a missing gamma/beta is ones/zeros (as aclnnGroupNorm)."""
    eps = float(np.asarray(arrays["eps"]).reshape(-1)[0])
    gamma = arrays.get("gamma")
    beta = arrays.get("beta")
    gamma = np.ones(problem.C) if gamma is None else gamma
    beta = np.zeros(problem.C) if beta is None else beta
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # empty groups: the mean of nothing is nan
        y, mean, rstd = group_norm(np.reshape(arrays["x"], problem.x_shape), gamma, beta, problem.group, eps)
    return {"y": y, "mean": mean, "rstd": rstd}
