"""aclnnBatchNorm: the float64 numpy reference every kernel is compared with.

The forward that tests/test_op_batch_norm_backward.py already checks BatchNormBackward's
reference against by finite differences (opgen.ops.batch_norm_backward.reference.batch_norm):
one float64 forward for both directions.
"""
from __future__ import annotations

import warnings

import numpy as np

from opgen.ops.batch_norm_backward.reference import batch_norm

NULL_FILL = {"weight": 1.0, "bias": 0.0, "running_mean": 0.0, "running_var": 1.0}


def of_problem(problem, arrays: dict) -> dict:
    """The reference outputs of one problem, by kernel name, in the user's shapes; a null
    weight/bias/runningMean/runningVar is CANN's fill; eps as the kernel reads it (float32).
    saveMean/saveInvstd: the batch's mean and 1/sqrt(var + eps) in training, the running
    ones in eval (what the kernel computes; the aclnn face writes them only in training)."""
    c = problem.C
    filled = {k: np.full(c, v) if arrays.get(k) is None else arrays[k] for k, v in NULL_FILL.items()}
    eps = float(np.float32(problem.eps))
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # a channel of no elements: nan statistics
        y, mean, invstd = batch_norm(arrays["x"], filled["weight"], filled["bias"], filled["running_mean"],
                                     filled["running_var"], problem.training, eps, problem.channel_axis)
    return {"y": y, "save_mean": mean, "save_invstd": invstd}
