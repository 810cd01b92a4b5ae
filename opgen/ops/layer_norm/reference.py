"""aclnnLayerNorm: the float64 numpy reference every kernel is compared with.

The forward that tests/test_op_layer_norm_backward.py already checks LayerNormBackward's
reference against by finite differences (opgen.ops.layer_norm_backward.reference.layer_norm):
one float64 forward for both directions.
"""
from __future__ import annotations

import warnings

import numpy as np

from opgen.ops.layer_norm_backward.reference import layer_norm


def of_problem(problem, arrays: dict) -> dict:
    """The reference outputs of one problem, by kernel name, in the user's shapes; eps is the
    float32 value the kernel reads; a missing weight/bias is ones/zeros (as aclnnLayerNorm)."""
    eps = float(np.asarray(arrays["eps"]).reshape(-1)[0])
    gamma = arrays.get("gamma")
    beta = arrays.get("beta")
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # no columns: the mean of nothing is nan
        y, mean, rstd = layer_norm(np.reshape(arrays["x"], problem.x_shape), problem.normalizedShape,
                                   gamma, beta, eps)
    return {"y": y, "mean": mean.reshape(problem.stat_shape), "rstd": rstd.reshape(problem.stat_shape)}
