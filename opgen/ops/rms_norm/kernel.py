"""aclnnRmsNorm: the math in TE and what a kernel sees: tensors, dtype combos, problem sizes.

The formulas and stage names are in the package docstring (opgen.ops.rms_norm).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from opgen.dtypes import BFLOAT16, FLOAT16, FLOAT32, numpy_dtype
from opgen.lazy import te
from opgen.ops.spec import DtypeCombo, TrailingAxesProblem, as_float32, attribute_array

STAGE = "rms_norm"
DEFAULT_EPS = 1e-6      # aclnnRmsNorm's documented default
INPUTS = ("x", "gamma", "eps")
OUTPUTS = ("y", "rstd")
# eps is an attribute (double in the C API); the kernel is built once per dtype combo over
# symbolic sizes, so eps reaches it as data: a (1,) float32 input filled from the attribute.


def _combo(io: str, gamma: str) -> DtypeCombo:
    dtypes = {"x": io, "gamma": gamma, "eps": FLOAT32, "y": io, "rstd": FLOAT32}
    return DtypeCombo(tuple(dtypes.items()), key_tensors=("x", "gamma"))


# aclnnRmsNorm's table for Atlas A2/A3 and Ascend 950, in its order (the backward's rows too,
# so every forward a module runs feeds an aclnnRmsNormGrad combo with no cast).
F16_F32 = _combo(FLOAT16, FLOAT32)
BF16_F32 = _combo(BFLOAT16, FLOAT32)
F16_F16 = _combo(FLOAT16, FLOAT16)
BF16_BF16 = _combo(BFLOAT16, BFLOAT16)
F32_F32 = _combo(FLOAT32, FLOAT32)
COMBOS = (F16_F32, BF16_F32, F16_F16, BF16_BF16, F32_F32)
PRODUCTS = {
    "Ascend950": COMBOS,
    "AtlasA3": COMBOS,
    "AtlasA2": COMBOS,
    "AtlasInference": (F16_F16, F32_F32),
}


def compute(combo: DtypeCombo) -> list[te.Tensor]:
    """TE of the forward over symbolic (rows, cols); returns x, gamma, eps, y, rstd."""
    rows = te.var("rows", "int64")
    cols = te.var("cols", "int64")
    x = te.placeholder((rows, cols), combo["x"], name="x")
    gamma = te.placeholder((cols,), combo["gamma"], name="gamma")
    eps = te.placeholder((1,), combo["eps"], name="eps")
    k = te.reduce_axis((0, cols), name="k")
    sumsq = te.compute((rows,), lambda r: te.sum(as_float32(x[r, k]) * as_float32(x[r, k]), axis=k),
                       name=f"{STAGE}_sumsq")
    rstd = te.compute((rows,), lambda r: te.rsqrt(sumsq[r] / cols.astype("float32") + eps[0]), name=f"{STAGE}_rstd")
    y = te.compute((rows, cols), lambda r, c: (as_float32(x[r, c]) * rstd[r] * as_float32(gamma[c])).astype(combo["y"]),
                   name=f"{STAGE}_y")
    return [x, gamma, eps, y, rstd]


@dataclass(frozen=True)
class Problem(TrailingAxesProblem):
    """One call's sizes and its attribute: x's shape, how many trailing axes gamma covers,
    and ``epsilon`` (the aclnn attribute, under its aclnn name).

    Spelling (every ``--shape``): ``X[,GAMMA_NDIM[,EPSILON]]``, e.g. ``4096x4096`` (gamma over
    the last axis, epsilon 1e-6), ``4x8x64,2`` or ``4x8x64,2,1e-5``."""

    x_shape: tuple[int, ...]
    gamma_ndim: int = 1
    epsilon: float = DEFAULT_EPS

    @property
    def rstd_shape(self) -> tuple[int, ...]:
        """rstdOut's shape: x's leading dims, then 1s (aclnnRmsNorm's keepdim form)."""
        return self.stat_shape



def random_inputs(problem: Problem, combo: DtypeCombo, rng: np.random.Generator) -> dict:
    """Inputs in the user's shapes (eps as the kernel's (1,) float32 input)."""
    x = rng.standard_normal(problem.x_shape).astype(numpy_dtype(combo["x"]))
    gamma = rng.uniform(0.5, 1.5, problem.gamma_shape).astype(numpy_dtype(combo["gamma"]))
    return {"x": x, "gamma": gamma, "eps": attribute_array(problem.epsilon)}


def kernel_shapes(problem: Problem) -> dict:
    """The kernel's (rows, cols) / (cols,) / (rows,) / (1,) shape of each tensor."""
    big = (problem.rows, problem.cols)
    return {"x": big, "gamma": (problem.cols,), "eps": (1,), "y": big, "rstd": (problem.rows,)}


def output_shapes(problem: Problem) -> dict:
    """The outputs a caller allocates: y like x, rstd keepdim (x's leading dims, then 1s)."""
    return {"y": problem.x_shape, "rstd": problem.rstd_shape}


def kernel_args(problem: Problem, arrays: dict) -> dict:
    """View user-shaped arrays in the kernel's canonical shapes."""
    shapes = kernel_shapes(problem)
    return {name: np.reshape(a, shapes[name]) for name, a in arrays.items()}
