"""aclnnRmsNormGradQuant: the math in TE and what a kernel sees: tensors, dtype combos, problem sizes.

RmsNormGrad's stages (opgen.ops.rms_norm_grad.kernel.grad_stages, imported, not copied) with
dx quantized in its own stage instead of cast:

    q[r, c]  = dx[r, c] / scales_x + offset_x     (divMode true)
             = dx[r, c] * scales_x + offset_x     (divMode false)
    dxOut    = int8(clip(round_half_even(q), -128, 127))

all in float32, as ops-nn's arch35 kernel (rms_norm_grad_quant_dx_full_load.h) does: Div or
Mul by the float32 scale, Add of the int32 offset cast to float32, then Cast float -> int32
with CAST_RINT (round half to even), int32 -> float -> half -> int8 (exact in range). Out of
range opgen saturates (see docs/validation-vs-cann.md for CANN's NO_SAT casts).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from opgen.dtypes import BFLOAT16, FLOAT16, FLOAT32, INT8, INT32, int_range, numpy_dtype
from opgen.lazy import te
from opgen.ops.rms_norm_grad import kernel as grad_kernel
from opgen.ops.spec import DtypeCombo, TrailingAxesProblem, as_float32, attribute_array

INPUTS = ("dy", "x", "rstd", "gamma", "scales_x", "offset_x", "div_mode")
OUTPUTS = ("dx", "dgamma")
STAGE = "rms_norm_grad_quant"


def _combo(io: str, gamma: str, scales: str, dx: str = INT8) -> DtypeCombo:
    dtypes = {"dy": io, "x": io, "rstd": FLOAT32, "gamma": gamma, "scales_x": scales, "offset_x": INT32,
              "div_mode": FLOAT32, "dx": dx, "dgamma": FLOAT32}
    return DtypeCombo(tuple(dtypes.items()), key_tensors=("dy", "gamma", "scales_x", "dx"))


# The document's Ascend 950 table, its INT8 rows in its order (dy, gamma, scalesX); its
# HIFLOAT8 rows are the same nine with dxOut HIFLOAT8 (not offered yet: see the spec digest).
INT8_ROWS = ((FLOAT16, FLOAT32, FLOAT32), (BFLOAT16, FLOAT32, FLOAT32), (FLOAT16, FLOAT16, FLOAT32),
             (FLOAT32, FLOAT32, FLOAT32), (BFLOAT16, BFLOAT16, FLOAT32), (FLOAT16, FLOAT16, FLOAT16),
             (BFLOAT16, BFLOAT16, BFLOAT16), (FLOAT16, FLOAT32, FLOAT16), (BFLOAT16, FLOAT32, BFLOAT16))
COMBOS = tuple(_combo(*row) for row in INT8_ROWS)
PRODUCTS = {"Ascend950": COMBOS}


def compute(combo: DtypeCombo) -> list[te.Tensor]:
    """TE over symbolic (rows, cols); returns dy, x, rstd, gamma, scales_x, offset_x, div_mode,
    dx, dgamma."""
    dy, x, rstd, gamma = grad_kernel.placeholders(combo)
    scales_x = te.placeholder((1,), combo["scales_x"], name="scales_x")
    offset_x = te.placeholder((1,), combo["offset_x"], name="offset_x")
    div_mode = te.placeholder((1,), combo["div_mode"], name="div_mode")
    dx_value, dgamma = grad_kernel.grad_stages(dy, x, rstd, gamma)
    low, high = int_range(combo["dx"])

    def quantized(r, c):
        # divMode divides by scalesX: as a multiplication by its reciprocal, one division
        # per call instead of one per element (Ascend's vector Div is no correctly rounded
        # division either; the int8 comparison allows a half step, see opgen.verify).
        scale = as_float32(scales_x[0])
        scaled = dx_value(r, c) * te.if_then_else(div_mode[0] != 0.0, 1.0 / scale, scale)
        q = te.nearbyint(scaled + offset_x[0].astype("float32"))
        return te.min(te.max(q, te.const(float(low), "float32")), te.const(float(high), "float32"))

    dx = te.compute(dy.shape, lambda r, c: quantized(r, c).astype(combo["dx"]), name=f"{STAGE}_dx")
    return [dy, x, rstd, gamma, scales_x, offset_x, div_mode, dx, dgamma]


@dataclass(frozen=True)
class Problem(TrailingAxesProblem):
    """One call's sizes and its attribute: x's shape, how many trailing axes gamma covers,
    and ``divMode`` (the aclnn attribute, under its aclnn name). Spelling ``X[,GAMMA_NDIM[,DIV_MODE]]``: ``4096x4096``
    (divMode true), ``4x8x64,2,0`` (multiply by scalesX)."""

    x_shape: tuple[int, ...]
    gamma_ndim: int = 1
    divMode: bool = True

    @property
    def quantMode(self) -> str:
        """aclnn's quantMode: "static", the only mode the op has (a call's other value is refused)."""
        return "static"


def random_inputs(problem: Problem, combo: DtypeCombo, rng: np.random.Generator) -> dict:
    """RmsNormGrad's inputs (rstd the true 1/rms of x), a scale that spreads dx over int8's
    range with some saturation (|dx| reaches ~4-6 over a few thousand elements, times 30-60),
    and an offset in [-10, 10]."""
    arrays = grad_kernel.random_inputs(problem, combo, rng)
    factor = rng.uniform(30.0, 60.0)
    scale = 1.0 / factor if problem.divMode else factor
    arrays["scales_x"] = np.array([scale]).astype(numpy_dtype(combo["scales_x"]))
    arrays["offset_x"] = np.array([rng.integers(-10, 11)], numpy_dtype(combo["offset_x"]))
    arrays["div_mode"] = attribute_array(1.0 if problem.divMode else 0.0)
    return arrays


def kernel_shapes(problem: Problem) -> dict:
    """The kernel's (rows, cols) / (rows,) / (cols,) / (1,) shape of each tensor."""
    return {**grad_kernel.kernel_shapes(problem), "scales_x": (1,), "offset_x": (1,), "div_mode": (1,)}


def output_shapes(problem: Problem) -> dict:
    """The outputs a caller allocates: dx like x, dgamma like gamma (x's trailing axes)."""
    return grad_kernel.output_shapes(problem)


def kernel_args(problem: Problem, arrays: dict) -> dict:
    """View user-shaped arrays in the kernel's canonical shapes."""
    shapes = kernel_shapes(problem)
    return {name: np.reshape(a, shapes[name]) for name, a in arrays.items()}
