"""aclnnDeepNormGrad: the math in TE and what a kernel sees: tensors, dtype combos, problem sizes.

The formulas and stage names are in the package docstring (opgen.ops.deep_norm_grad).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from opgen.dtypes import BFLOAT16, FLOAT16, FLOAT32, numpy_dtype
from opgen.lazy import te
from opgen.ops.spec import DtypeCombo, TrailingAxesProblem, as_float32

# alpha is an attribute (double in the C API, float32 in CANN's kernel); the kernel is built
# once per dtype combo over symbolic sizes, so alpha reaches it as data: a (1,) float32 input
# that the aclnn layer fills from the attribute (ApiSpec.attribute_inputs). Last, so that
# inputs[0] is the data tensor the tools read the compute dtype from.
INPUTS = ("dy", "x", "gx", "gamma", "mean", "rstd", "alpha")
OUTPUTS = ("dx", "dgx", "dbeta", "dgamma")
STAGE = "deep_norm_grad"
DEFAULT_ALPHA = 0.3     # the op definition's graph-mode default (deep_norm_grad_def.cpp l.78)
EPS = 1e-6              # the eps random_inputs makes rstd with (aclnnDeepNorm's default)


def _combo(io: str) -> DtypeCombo:
    """One row of the document's table: the data in ``io``, statistics and dbeta/dgamma float32."""
    dtypes = {"dy": io, "x": io, "gx": io, "gamma": io, "mean": FLOAT32, "rstd": FLOAT32, "alpha": FLOAT32,
              "dx": io, "dgx": io, "dbeta": FLOAT32, "dgamma": FLOAT32}
    return DtypeCombo(tuple(dtypes.items()), key_tensors=("dy", "mean"))


# The document's table (doc l.129-233 = deep_norm_grad_def.cpp l.22-144), in its order.
F32_F32 = _combo(FLOAT32)
F16_F32 = _combo(FLOAT16)
BF16_F32 = _combo(BFLOAT16)
COMBOS = (F32_F32, F16_F32, BF16_F32)
PRODUCTS = {
    "Ascend950": COMBOS,
    "AtlasA3": COMBOS,
    "AtlasA2": COMBOS,
    "AtlasInference": (F32_F32, F16_F32),    # doc l.258-260: no BFLOAT16 (def l.83-144, config_310p)
}                                            # Atlas training: not supported (doc l.5-24; not in the def)


def _row_sums(rows, cols, tmpone, tmptwo):
    """The two per-row reductions over the normalized axis (dmean's and dvar's sums)."""
    k = te.reduce_axis((0, cols), name="k")
    sum_dyg = te.compute((rows,), lambda r: te.sum(tmpone(r, k), axis=k), name=f"{STAGE}_sum_dyg")
    k2 = te.reduce_axis((0, cols), name="k")
    sum_dygh = te.compute((rows,), lambda r: te.sum(tmpone(r, k2) * tmptwo(r, k2), axis=k2),
                          name=f"{STAGE}_sum_dygh")
    return sum_dyg, sum_dygh


def compute(combo: DtypeCombo) -> list[te.Tensor]:
    """TE of the backward over symbolic (rows, cols); returns the inputs then dx, dgx, dbeta, dgamma."""
    rows = te.var("rows", "int64")
    cols = te.var("cols", "int64")
    dy = te.placeholder((rows, cols), combo["dy"], name="dy")
    x = te.placeholder((rows, cols), combo["x"], name="x")
    gx = te.placeholder((rows, cols), combo["gx"], name="gx")
    gamma = te.placeholder((cols,), combo["gamma"], name="gamma")
    mean = te.placeholder((rows,), combo["mean"], name="mean")
    rstd = te.placeholder((rows,), combo["rstd"], name="rstd")
    alpha = te.placeholder((1,), combo["alpha"], name="alpha")
    f32 = as_float32

    def tmpone(r, c):       # dy * gamma
        return f32(dy[r, c]) * f32(gamma[c])

    def tmptwo(r, c):       # x' - mean = alpha * x + gx - mean
        return f32(alpha[0]) * f32(x[r, c]) + f32(gx[r, c]) - f32(mean[r])

    sum_dyg, sum_dygh = _row_sums(rows, cols, tmpone, tmptwo)
    # a division per row, as RmsNormGrad's coef: 1/D as its own factor would be hoisted into the
    # GPU launch code, which evaluates integer expressions only (targets/gpu_launch.py)
    d = cols.astype("float32")
    dvar = te.compute((rows,), lambda r: -sum_dygh[r] * f32(rstd[r]) * f32(rstd[r]) * f32(rstd[r]) / d,
                      name=f"{STAGE}_dvar")
    dmean = te.compute((rows,), lambda r: -sum_dyg[r] * f32(rstd[r]) / d, name=f"{STAGE}_dmean")

    def dgx_f32(r, c):      # the gradient of x' (float32, before any rounding)
        return tmpone(r, c) * f32(rstd[r]) + dvar[r] * tmptwo(r, c) + dmean[r]

    dgx = te.compute((rows, cols), lambda r, c: dgx_f32(r, c).astype(combo["dgx"]), name=f"{STAGE}_dgx")
    dx = te.compute((rows, cols), lambda r, c: (f32(alpha[0]) * dgx_f32(r, c)).astype(combo["dx"]),
                    name=f"{STAGE}_dx")
    j = te.reduce_axis((0, rows), name="j")
    dbeta = te.compute((cols,), lambda c: te.sum(f32(dy[j, c]), axis=j), name=f"{STAGE}_dbeta")
    j2 = te.reduce_axis((0, rows), name="j")
    dgamma = te.compute((cols,), lambda c: te.sum(f32(dy[j2, c]) * f32(rstd[j2]) * tmptwo(j2, c), axis=j2),
                        name=f"{STAGE}_dgamma")
    return [dy, x, gx, gamma, mean, rstd, alpha, dx, dgx, dbeta, dgamma]


@dataclass(frozen=True)
class Problem(TrailingAxesProblem):
    """One call's sizes and its attribute: x's shape, how many trailing axes gamma covers,
    and ``alpha`` (the aclnn attribute, under its aclnn name).

    Spelling (every ``--shape``): ``X[,GAMMA_NDIM[,ALPHA]]``, e.g. ``8192x4096`` (gamma over
    the last axis, alpha 0.3), ``4x8x64,2`` or ``4x8x64,2,0.87``."""

    x_shape: tuple[int, ...]
    gamma_ndim: int = 1
    alpha: float = DEFAULT_ALPHA


def alpha_array(problem: Problem) -> np.ndarray:
    """alpha as the kernel reads it: float32, as CANN's kernel attribute (def l.78, t22 l.561-567)."""
    with np.errstate(over="ignore"):
        return np.array([problem.alpha], np.float32)


def statistics(x, gx, alpha32: float, gamma_ndim: int, eps: float = EPS):
    """(mean, rstd) of x' = alpha * x + gx over the trailing ``gamma_ndim`` axes, in float64,
    keepdim (the forward's saved form); ones/zeros where a row has no elements."""
    with np.errstate(invalid="ignore", over="ignore"):     # a non-finite alpha: nan statistics
        h = float(alpha32) * np.asarray(x, np.float64) + np.asarray(gx, np.float64)
        axes = tuple(range(h.ndim - gamma_ndim, h.ndim))
        keep = h.shape[: h.ndim - gamma_ndim] + (1,) * gamma_ndim
        if h.size == 0:
            return np.zeros(keep), np.ones(keep)
        mean = h.mean(axis=axes, keepdims=True)
        return mean, 1.0 / np.sqrt(((h - mean) ** 2).mean(axis=axes, keepdims=True) + eps)


def random_inputs(problem: Problem, combo: DtypeCombo, rng: np.random.Generator) -> dict:
    """Inputs in the user's shapes; mean/rstd are the true statistics of x' (from the rounded
    x and gx, with float32 alpha), as the forward saves them."""
    data = numpy_dtype(combo["x"])
    x = rng.standard_normal(problem.x_shape).astype(data)
    gx = (rng.standard_normal(problem.x_shape) * 0.5 + 0.25).astype(data)
    dy = rng.standard_normal(problem.x_shape).astype(numpy_dtype(combo["dy"]))
    gamma = rng.uniform(0.5, 1.5, problem.gamma_shape).astype(numpy_dtype(combo["gamma"]))
    alpha = alpha_array(problem)
    mean, rstd = statistics(x, gx, alpha[0], problem.gamma_ndim)
    return {"dy": dy, "x": x, "gx": gx, "gamma": gamma, "mean": mean.astype(np.float32),
            "rstd": rstd.astype(np.float32), "alpha": alpha}


def kernel_shapes(problem: Problem) -> dict:
    """The kernel's (rows, cols) / (cols,) / (rows,) / (1,) shape of each tensor."""
    big, col, row = (problem.rows, problem.cols), (problem.cols,), (problem.rows,)
    return {"dy": big, "x": big, "gx": big, "gamma": col, "mean": row, "rstd": row, "alpha": (1,),
            "dx": big, "dgx": big, "dbeta": col, "dgamma": col}


def output_shapes(problem: Problem) -> dict:
    """The outputs a caller allocates: dx and dgx like x, dbeta and dgamma like gamma."""
    return {"dx": problem.x_shape, "dgx": problem.x_shape, "dbeta": problem.gamma_shape,
            "dgamma": problem.gamma_shape}


def kernel_args(problem: Problem, arrays: dict) -> dict:
    """View user-shaped arrays in the kernel's shapes; alpha comes from the problem when the
    arrays do not carry it (a golden dump, a caller's own inputs)."""
    shapes = kernel_shapes(problem)
    arrays = {"alpha": alpha_array(problem), **arrays}
    return {name: np.reshape(a, shapes[name]) for name, a in arrays.items()}


def with_alpha(problem: Problem, alpha: float) -> Problem:
    """The same sizes with another alpha."""
    return dataclasses.replace(problem, alpha=float(alpha))
