"""aclnnGroupNormSwish: the float64 numpy reference every kernel is compared with.

GroupNorm's float64 forward (the one GroupNormBackward's reference and tests/test_reference.py
share), then the swish in float64: out = z / (1 + exp(-scale * z)) when activateSwish.
"""
from __future__ import annotations

import numpy as np

from opgen.ops.group_norm.reference import of_problem as group_norm_of_problem


def swish(z: np.ndarray, scale: float) -> np.ndarray:
    """z * sigmoid(scale * z) in float64, without overflow warnings for large |z|."""
    with np.errstate(over="ignore", invalid="ignore"):
        return z / (1.0 + np.exp(-scale * z))


def of_problem(problem, arrays: dict) -> dict:
    """The reference outputs of one problem, by kernel name, in the user's shapes; eps and
    swishScale are the float32 values the kernel reads."""
    out = group_norm_of_problem(problem, arrays)
    if problem.activateSwish:
        scale = float(np.asarray(arrays["swish_scale"]).reshape(-1)[0])
        out["y"] = swish(out["y"], scale)
    return out
