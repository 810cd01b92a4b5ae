"""aclnnRmsNormGradQuant: the float64 numpy reference every kernel is compared with.

RmsNormGrad's reference (opgen.ops.rms_norm_grad.reference, checked there against finite
differences) followed by the document's quantization, in float64. dx is returned *before*
its final rounding, saturated to int8's range: opgen.verify compares an integer output with
that value within half a step (the rounding) plus the float tolerance; ``quantize`` gives
the rounded int8 values themselves (round half to even, as CANN's CAST_RINT).
"""
from __future__ import annotations

import numpy as np

from opgen.dtypes import INT8, int_range, round_to
from opgen.ops.rms_norm_grad.reference import rms_norm_grad


def scaled(dx, scales_x, offset_x, div_mode: bool) -> np.ndarray:
    """dx / scales_x + offset_x (divMode) or dx * scales_x + offset_x, saturated to int8's
    range, not rounded. A null offsetXOptional is offset 0."""
    dx = np.asarray(dx, np.float64)
    scale = float(np.asarray(scales_x).astype(np.float64).reshape(-1)[0])
    offset = 0.0 if offset_x is None else float(np.asarray(offset_x).reshape(-1)[0])
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        q = (dx / scale if div_mode else dx * scale) + offset
    return np.clip(q, *int_range(INT8))


def quantize(dx, scales_x, offset_x, div_mode: bool) -> np.ndarray:
    """The int8 values themselves: ``scaled`` rounded half to even."""
    return round_to(scaled(dx, scales_x, offset_x, div_mode), INT8).astype(np.int8)


def of_problem(problem, arrays: dict) -> dict:
    """The reference outputs of one problem, by kernel name, in the user's shapes (dx unrounded)."""
    dx, dgamma = rms_norm_grad(arrays["dy"], arrays["x"], arrays["rstd"], arrays["gamma"])
    div_mode = bool(np.asarray(arrays["div_mode"]).reshape(-1)[0])
    return {"dx": scaled(dx, arrays["scales_x"], arrays.get("offset_x"), div_mode), "dgamma": dgamma}
