"""aclnnAddLayerNormGrad: the math in TE and what a kernel sees: tensors, dtype combos, problem sizes.

The formulas and stage names are in the package docstring (opgen.ops.add_layer_norm_grad).
LayerNormBackward's stages (opgen.ops.layer_norm_backward) with x = x1 + x2 and dsum added
to dx; without dsum (a null dsumOptional) the combo's variant ``-nodsum`` has no dsum
parameter and no term for it (OpSpec.optional_terms).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from opgen.dtypes import BFLOAT16, FLOAT16, FLOAT32, numpy_dtype
from opgen.lazy import te
from opgen.ops.layer_norm_backward.kernel import _column_sum
from opgen.ops.spec import DtypeCombo, TrailingAxesProblem, as_float32

INPUTS = ("dy", "x1", "x2", "rstd", "mean", "gamma", "dsum")     # CANN's order (def l.21-64)
OUTPUTS = ("dx", "dgamma", "dbeta")
OPTIONAL_TERMS = ("dsum",)      # dsumOptional: a null one selects the variant without it
STAGE = "add_layer_norm_grad"
EPS = 1e-5      # the eps random_inputs computes rstd with (aclnnAddLayerNorm's default)


def _combo(io: str) -> DtypeCombo:
    """One column of the op definition: dy, x1, x2, gamma, dsum and dx in ``io``; rstd, mean,
    dgamma and dbeta float32 (def l.21-82; doc l.165-262)."""
    dtypes = {"dy": io, "x1": io, "x2": io, "rstd": FLOAT32, "mean": FLOAT32, "gamma": io, "dsum": io,
              "dx": io, "dgamma": FLOAT32, "dbeta": FLOAT32}
    return DtypeCombo(tuple(dtypes.items()), key_tensors=("dy", "mean"))


F32_F32 = _combo(FLOAT32)
F16_F32 = _combo(FLOAT16)
BF16_F32 = _combo(BFLOAT16)
COMBOS = (F32_F32, F16_F32, BF16_F32)
PRODUCTS = {
    "Ascend950": COMBOS,
    "AtlasA3": COMBOS,
    "AtlasA2": COMBOS,
    "AtlasInference": (F32_F32, F16_F32),    # doc l.287-289, l.370-372: no BFLOAT16 (def config_310p)
}                                            # Atlas training: not supported (doc l.22-24)


def compute(combo: DtypeCombo) -> list[te.Tensor]:
    """TE over symbolic (rows, cols); returns dy, x1, x2, rstd, mean, gamma[, dsum], dx, dgamma,
    dbeta (dsum only when the combo has it: a combo without it adds no term)."""
    rows = te.var("rows", "int64")
    cols = te.var("cols", "int64")
    f32 = as_float32
    dy = te.placeholder((rows, cols), combo["dy"], name="dy")
    x1 = te.placeholder((rows, cols), combo["x1"], name="x1")
    x2 = te.placeholder((rows, cols), combo["x2"], name="x2")
    rstd = te.placeholder((rows,), combo["rstd"], name="rstd")
    mean = te.placeholder((rows,), combo["mean"], name="mean")
    gamma = te.placeholder((cols,), combo["gamma"], name="gamma")
    dsum = te.placeholder((rows, cols), combo["dsum"], name="dsum") if combo.has("dsum") else None

    def g(r, c):            # dy * gamma
        return f32(dy[r, c]) * f32(gamma[c])

    def centred(r, c):      # x1 + x2 - mean (x_hat / rstd), the sum formed in float32 as CANN's kernel
        return f32(x1[r, c]) + f32(x2[r, c]) - f32(mean[r])

    k = te.reduce_axis((0, cols), name="k")
    sum_g = te.compute((rows,), lambda r: te.sum(g(r, k), axis=k), name=f"{STAGE}_sum_g")
    k2 = te.reduce_axis((0, cols), name="k")
    sum_gxc = te.compute((rows,), lambda r: te.sum(g(r, k2) * centred(r, k2), axis=k2), name=f"{STAGE}_sum_gxc")
    inv_n = 1.0 / cols.astype("float32")
    c1 = te.compute((rows,), lambda r: f32(rstd[r]) * sum_g[r] * inv_n, name=f"{STAGE}_c1")
    c2 = te.compute((rows,), lambda r: f32(rstd[r]) * f32(rstd[r]) * f32(rstd[r]) * sum_gxc[r] * inv_n,
                    name=f"{STAGE}_c2")

    def dx_f32(r, c):
        grad = f32(rstd[r]) * g(r, c) - c1[r] - centred(r, c) * c2[r]
        return grad if dsum is None else grad + f32(dsum[r, c])

    dx = te.compute((rows, cols), lambda r, c: dx_f32(r, c).astype(combo["dx"]), name=f"{STAGE}_dx")
    dgamma = _column_sum(f"{STAGE}_dgamma", rows, cols, lambda j, c: f32(dy[j, c]) * centred(j, c) * f32(rstd[j]),
                         combo["dgamma"])
    dbeta = _column_sum(f"{STAGE}_dbeta", rows, cols, lambda j, c: f32(dy[j, c]), combo["dbeta"])
    inputs = [dy, x1, x2, rstd, mean, gamma] + ([] if dsum is None else [dsum])
    return inputs + [dx, dgamma, dbeta]


@dataclass(frozen=True)
class Problem(TrailingAxesProblem):
    """One call's sizes: dy's shape and how many trailing axes gamma covers.

    Spelling (every ``--shape``): ``X[,GAMMA_NDIM]``, e.g. ``2048x8192`` (gamma over the last
    axis) or ``4x8x64,2``."""

    x_shape: tuple[int, ...]
    gamma_ndim: int = 1


def statistics(x1, x2, gamma_ndim: int, eps: float = EPS):
    """(mean, rstd) of x = x1 + x2 over the trailing ``gamma_ndim`` axes, float64, keepdim (the
    forward's saved form); zeros/ones where a row has no elements."""
    x = np.asarray(x1, np.float64) + np.asarray(x2, np.float64)
    axes = tuple(range(x.ndim - gamma_ndim, x.ndim))
    keep = x.shape[: x.ndim - gamma_ndim] + (1,) * gamma_ndim
    if x.size == 0:
        return np.zeros(keep), np.ones(keep)
    mean = x.mean(axis=axes, keepdims=True)
    return mean, 1.0 / np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True) + eps)


def random_inputs(problem: Problem, combo: DtypeCombo, rng: np.random.Generator) -> dict:
    """Inputs in the user's shapes (dsum only when the combo has it); mean and rstd are the true
    statistics of x1 + x2 (from the rounded x1 and x2), as the forward saves them."""
    data = numpy_dtype(combo["dy"])
    x1 = rng.standard_normal(problem.x_shape).astype(data)
    x2 = (rng.standard_normal(problem.x_shape) * 0.5 + 0.25).astype(data)
    dy = rng.standard_normal(problem.x_shape).astype(data)
    gamma = rng.uniform(0.5, 1.5, problem.gamma_shape).astype(data)
    mean, rstd = statistics(x1, x2, problem.gamma_ndim)
    arrays = {"dy": dy, "x1": x1, "x2": x2, "rstd": rstd.astype(np.float32), "mean": mean.astype(np.float32),
              "gamma": gamma}
    if combo.has("dsum"):
        arrays["dsum"] = rng.standard_normal(problem.x_shape).astype(data)
    return arrays


def kernel_shapes(problem: Problem) -> dict:
    """The kernel's (rows, cols) / (rows,) / (cols,) shape of each tensor."""
    big, row, col = (problem.rows, problem.cols), (problem.rows,), (problem.cols,)
    return {"dy": big, "x1": big, "x2": big, "rstd": row, "mean": row, "gamma": col, "dsum": big,
            "dx": big, "dgamma": col, "dbeta": col}


def output_shapes(problem: Problem) -> dict:
    """The outputs a caller allocates: dx like dy, dgamma and dbeta like gamma."""
    return {"dx": problem.x_shape, "dgamma": problem.gamma_shape, "dbeta": problem.gamma_shape}


def kernel_args(problem: Problem, arrays: dict) -> dict:
    """View user-shaped arrays in the kernel's shapes."""
    shapes = kernel_shapes(problem)
    return {name: np.reshape(a, shapes[name]) for name, a in arrays.items()}
