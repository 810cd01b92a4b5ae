"""aclnnRmsNormGrad: the math in TE and what a kernel sees: tensors, dtype combos, problem sizes.

The formulas and stage names are in the package docstring (opgen.ops.rms_norm_grad).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from opgen.dtypes import BFLOAT16, FLOAT16, FLOAT32, numpy_dtype
from opgen.lazy import te
from opgen.ops.spec import DtypeCombo, ProblemBase, as_float32

INPUTS = ("dy", "x", "rstd", "gamma")
OUTPUTS = ("dx", "dgamma")


def _combo(io: str, gamma: str) -> DtypeCombo:
    dtypes = {"dy": io, "x": io, "rstd": FLOAT32, "gamma": gamma, "dx": io, "dgamma": FLOAT32}
    return DtypeCombo(tuple(dtypes.items()), key_tensors=("dy", "gamma"))


# The seed's table for Atlas A2/A3 and Ascend 950, in its order.
F16_F32 = _combo(FLOAT16, FLOAT32)
BF16_F32 = _combo(BFLOAT16, FLOAT32)
F16_F16 = _combo(FLOAT16, FLOAT16)
F32_F32 = _combo(FLOAT32, FLOAT32)
BF16_BF16 = _combo(BFLOAT16, BFLOAT16)
COMBOS = (F16_F32, BF16_F32, F16_F16, F32_F32, BF16_BF16)
PRODUCTS = {
    "Ascend950": COMBOS,
    "AtlasA3": COMBOS,
    "AtlasA2": COMBOS,
    "AtlasInference": (F16_F16, F32_F32),
}


def compute(combo: DtypeCombo) -> list[te.Tensor]:
    """TE of the backward over symbolic (rows, cols); returns dy, x, rstd, gamma, dx, dgamma."""
    dy, x, rstd, gamma = placeholders(combo)
    dx_value, dgamma = grad_stages(dy, x, rstd, gamma)
    dx = te.compute(dy.shape, lambda r, c: dx_value(r, c).astype(combo["dx"]), name="rms_norm_grad_dx")
    return [dy, x, rstd, gamma, dx, dgamma]


def placeholders(combo: DtypeCombo) -> tuple:
    """dy, x (rows, cols), rstd (rows,) and gamma (cols,) in the combo's dtypes, over symbolic
    (rows, cols): the inputs every op built on this backward reads (RmsNormGradQuant too)."""
    rows = te.var("rows", "int64")
    cols = te.var("cols", "int64")
    dy = te.placeholder((rows, cols), combo["dy"], name="dy")
    x = te.placeholder((rows, cols), combo["x"], name="x")
    rstd = te.placeholder((rows,), combo["rstd"], name="rstd")
    gamma = te.placeholder((cols,), combo["gamma"], name="gamma")
    return dy, x, rstd, gamma


def grad_stages(dy, x, rstd, gamma) -> tuple:
    """The backward's stages (the package docstring's): returns ``dx_value(r, c)``, dx's
    float32 expression before any rounding into an output dtype (the caller's stage stores it:
    a cast here, a quantization in RmsNormGradQuant), and the dgamma tensor."""
    cols = dy.shape[1]

    def dy_gamma(r, c):
        return as_float32(dy[r, c]) * as_float32(gamma[c])

    k = te.reduce_axis((0, cols), name="k")
    dot = te.compute(
        (dy.shape[0],),
        lambda r: te.sum(dy_gamma(r, k) * as_float32(x[r, k]), axis=k),
        name="rms_norm_grad_dot",
    )
    coef = te.compute(
        (dy.shape[0],),
        lambda r: dot[r] * rstd[r] * rstd[r] * rstd[r] / cols.astype("float32"),
        name="rms_norm_grad_coef",
    )

    def dx_value(r, c):
        return rstd[r] * dy_gamma(r, c) - as_float32(x[r, c]) * coef[r]

    j = te.reduce_axis((0, dy.shape[0]), name="j")
    dgamma = te.compute(
        (cols,),
        lambda c: te.sum(as_float32(dy[j, c]) * as_float32(x[j, c]) * rstd[j], axis=j),
        name="rms_norm_grad_dgamma",
    )
    return dx_value, dgamma


@dataclass(frozen=True)
class Problem(ProblemBase):
    """One call's sizes: x's shape and how many trailing axes gamma covers."""

    x_shape: tuple[int, ...]
    gamma_ndim: int

    @property
    def rows(self) -> int:
        return math.prod(self.x_shape[: len(self.x_shape) - self.gamma_ndim])

    @property
    def cols(self) -> int:
        return math.prod(self.x_shape[len(self.x_shape) - self.gamma_ndim:])

    def __str__(self) -> str:
        return f"x{list(self.x_shape)} gamma_ndim={self.gamma_ndim}"


def random_inputs(problem: Problem, combo: DtypeCombo, rng: np.random.Generator) -> dict:
    """Inputs in the user's shapes; rstd is the true 1/rms of x so values are realistic."""
    n = len(problem.x_shape) - problem.gamma_ndim
    x = rng.standard_normal(problem.x_shape).astype(numpy_dtype(combo["x"]))
    dy = rng.standard_normal(problem.x_shape).astype(numpy_dtype(combo["dy"]))
    gamma = rng.uniform(0.5, 1.5, problem.x_shape[n:]).astype(numpy_dtype(combo["gamma"]))
    x64 = x.astype(np.float64).reshape(problem.rows, problem.cols)
    with np.errstate(divide="ignore", invalid="ignore"):
        rstd = 1.0 / np.sqrt(np.mean(x64 * x64, axis=1) + 1e-6) if problem.cols else np.ones(problem.rows)
    return {"dy": dy, "x": x, "rstd": rstd.reshape(problem.x_shape[:n]).astype(np.float32), "gamma": gamma}


def kernel_shapes(problem: Problem) -> dict:
    """The kernel's (rows, cols) / (rows,) / (cols,) shape of each tensor."""
    return {
        "dy": (problem.rows, problem.cols), "x": (problem.rows, problem.cols),
        "rstd": (problem.rows,), "gamma": (problem.cols,),
        "dx": (problem.rows, problem.cols), "dgamma": (problem.cols,),
    }


def output_shapes(problem: Problem) -> dict:
    """The outputs a caller allocates: dx like x, dgamma like gamma (x's trailing axes)."""
    n = len(problem.x_shape) - problem.gamma_ndim
    return {"dx": problem.x_shape, "dgamma": problem.x_shape[n:]}


def kernel_args(problem: Problem, arrays: dict) -> dict:
    """View user-shaped arrays in the kernel's (rows, cols) / (rows,) / (cols,) shapes."""
    shapes = kernel_shapes(problem)
    return {name: np.reshape(a, shapes[name]) for name, a in arrays.items()}
