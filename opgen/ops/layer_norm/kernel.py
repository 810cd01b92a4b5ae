"""aclnnLayerNorm: the math in TE and what a kernel sees: tensors, dtype combos, problem sizes.

The formulas and stage names are in the package docstring (opgen.ops.layer_norm).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from opgen.dtypes import BFLOAT16, FLOAT16, FLOAT32, numpy_dtype
from opgen.lazy import te
from opgen.ops.spec import DtypeCombo, TrailingAxesProblem, as_float32, attribute_array

STAGE = "layer_norm"
DEFAULT_EPS = 1e-5      # torch.nn.LayerNorm's default (the document names none)
INPUTS = ("x", "gamma", "beta", "eps")
OUTPUTS = ("y", "mean", "rstd")


def _combo(io: str, stat: str, weight: str) -> DtypeCombo:
    """data-stats[-weight], as aclnnLayerNormBackward's tags: the weight (and bias, which has
    the weight's dtype) is named only where it is not the data's (a float32 weight)."""
    dtypes = {"x": io, "gamma": weight, "beta": weight, "eps": FLOAT32, "y": io, "mean": stat, "rstd": stat}
    keys = ("x", "mean") if weight == io else ("x", "mean", "gamma")
    return DtypeCombo(tuple(dtypes.items()), key_tensors=keys)


# The document's rows: meanOut/rstdOut in input's dtype, weight/bias input's or FLOAT32.
# Plus opgen's float32-statistics rows for half data (f16-f32, bf16-f32, with either
# weight): the statistics aclnnLayerNormBackward takes on every product with half data,
# so a module's forward hands them to the backward as they are (api.py says so).
F32_F32 = _combo(FLOAT32, FLOAT32, FLOAT32)
F16_F16 = _combo(FLOAT16, FLOAT16, FLOAT16)
F16_F16_F32 = _combo(FLOAT16, FLOAT16, FLOAT32)
F16_F32 = _combo(FLOAT16, FLOAT32, FLOAT16)
F16_F32_F32 = _combo(FLOAT16, FLOAT32, FLOAT32)
BF16_BF16 = _combo(BFLOAT16, BFLOAT16, BFLOAT16)
BF16_BF16_F32 = _combo(BFLOAT16, BFLOAT16, FLOAT32)
BF16_F32 = _combo(BFLOAT16, FLOAT32, BFLOAT16)
BF16_F32_F32 = _combo(BFLOAT16, FLOAT32, FLOAT32)
COMBOS = (F32_F32, F16_F16, F16_F16_F32, F16_F32, F16_F32_F32, BF16_BF16, BF16_BF16_F32, BF16_F32, BF16_F32_F32)
NO_BF16 = tuple(c for c in COMBOS if BFLOAT16 not in dict(c.dtypes).values())
# Atlas inference: not supported (the document's product list); Atlas training: no BFLOAT16.
PRODUCTS = {
    "Ascend950": COMBOS,
    "AtlasA3": COMBOS,
    "AtlasA2": COMBOS,
    "AtlasTraining": NO_BF16,
}


def compute(combo: DtypeCombo) -> list[te.Tensor]:
    """TE of the forward over symbolic (rows, cols); returns x, gamma, beta, eps, y, mean, rstd."""
    rows = te.var("rows", "int64")
    cols = te.var("cols", "int64")
    f32 = as_float32
    x = te.placeholder((rows, cols), combo["x"], name="x")
    gamma = te.placeholder((cols,), combo["gamma"], name="gamma")
    beta = te.placeholder((cols,), combo["beta"], name="beta")
    eps = te.placeholder((1,), combo["eps"], name="eps")
    n = cols.astype("float32")
    k = te.reduce_axis((0, cols), name="k")
    total = te.compute((rows,), lambda r: te.sum(f32(x[r, k]), axis=k), name=f"{STAGE}_sum")
    mean = te.compute((rows,), lambda r: total[r] / n, name=f"{STAGE}_mean32")

    def centred(r, c):
        return f32(x[r, c]) - mean[r]
    k2 = te.reduce_axis((0, cols), name="k")
    sq = te.compute((rows,), lambda r: te.sum(centred(r, k2) * centred(r, k2), axis=k2), name=f"{STAGE}_sq")
    rstd = te.compute((rows,), lambda r: te.rsqrt(sq[r] / n + eps[0]), name=f"{STAGE}_rstd32")
    y = te.compute((rows, cols), lambda r, c: (centred(r, c) * rstd[r] * f32(gamma[c]) + f32(beta[c]))
                   .astype(combo["y"]), name=f"{STAGE}_y")
    mean_out = te.compute((rows,), lambda r: mean[r].astype(combo["mean"]), name=f"{STAGE}_mean")
    rstd_out = te.compute((rows,), lambda r: rstd[r].astype(combo["rstd"]), name=f"{STAGE}_rstd")
    return [x, gamma, beta, eps, y, mean_out, rstd_out]


@dataclass(frozen=True)
class Problem(TrailingAxesProblem):
    """One call's sizes and its attribute: input's shape, how many trailing axes
    normalizedShape covers, and ``eps``.

    Spelling (every ``--shape``): ``X[,NORM_NDIM[,EPS]]``, e.g. ``8x512x1024`` (normalized
    over the last axis, eps 1e-5), ``2x3x8,2`` or ``2x3x8,2,1e-3``."""

    x_shape: tuple[int, ...]
    gamma_ndim: int = 1
    eps: float = DEFAULT_EPS

    @property
    def normalizedShape(self) -> tuple[int, ...]:   # noqa: N802 (the aclnn attribute's name)
        return self.gamma_shape



def random_inputs(problem: Problem, combo: DtypeCombo, rng: np.random.Generator) -> dict:
    """Inputs in the user's shapes: x off-centre (mean 0.5, std 2) so that the mean matters."""
    x = (rng.standard_normal(problem.x_shape) * 2.0 + 0.5).astype(numpy_dtype(combo["x"]))
    gamma = rng.uniform(0.5, 1.5, problem.gamma_shape).astype(numpy_dtype(combo["gamma"]))
    beta = rng.standard_normal(problem.gamma_shape).astype(numpy_dtype(combo["beta"]))
    return {"x": x, "gamma": gamma, "beta": beta, "eps": attribute_array(problem.eps)}


def kernel_shapes(problem: Problem) -> dict:
    """The kernel's (rows, cols) / (cols,) / (rows,) / (1,) shape of each tensor."""
    big, col, row = (problem.rows, problem.cols), (problem.cols,), (problem.rows,)
    return {"x": big, "gamma": col, "beta": col, "eps": (1,), "y": big, "mean": row, "rstd": row}


def output_shapes(problem: Problem) -> dict:
    """The outputs a caller allocates: y like x, mean and rstd keepdim (x's leading dims, then 1s)."""
    return {"y": problem.x_shape, "mean": problem.stat_shape, "rstd": problem.stat_shape}


def kernel_args(problem: Problem, arrays: dict) -> dict:
    """View user-shaped arrays in the kernel's canonical shapes."""
    shapes = kernel_shapes(problem)
    return {name: np.reshape(a, shapes[name]) for name, a in arrays.items()}
