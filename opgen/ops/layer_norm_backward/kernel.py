"""aclnnLayerNormBackward: the math in TE and what a kernel sees: tensors, dtype combos, problem sizes.

The formulas and stage names are in the package docstring (opgen.ops.layer_norm_backward).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from opgen.dtypes import BFLOAT16, FLOAT16, FLOAT32, numpy_dtype
from opgen.lazy import te
from opgen.ops.spec import DtypeCombo, ProblemBase, as_float32

INPUTS = ("dy", "x", "mean", "rstd", "gamma")       # biasOptional: validated only (api.py), no kernel tensor
OUTPUTS = ("dx", "dgamma", "dbeta")
STAGE = "layer_norm_backward"
EPS = 1e-5      # the eps random_inputs computes rstd with (aclnnLayerNorm's and torch's default)


def _combo(io: str, stat: str, weight: str) -> DtypeCombo:
    """One row of the document's dtype table (digest 5a): gradOut = input = gradInputOut (io),
    mean = rstd (stat), weight = gradWeightOut = gradBiasOut (weight). The bias is no kernel
    tensor (it is validated only), so no combo names it; its dtype is a Rule of api.py.

    The tag names data-stats, plus the weight's dtype where it is not the data's (float32
    weight under half data): ``f16-f32`` is f16 data, f32 statistics, f16 weight;
    ``f16-f32-f32`` the same with a float32 weight.
    """
    dtypes = {"dy": io, "x": io, "mean": stat, "rstd": stat, "gamma": weight,
              "dx": io, "dgamma": weight, "dbeta": weight}
    keys = ("dy", "mean") if weight == io else ("dy", "mean", "gamma")
    return DtypeCombo(tuple(dtypes.items()), key_tensors=keys)


# The document's table for Ascend 950 / Atlas A3 / Atlas A2, in its order (13 rows):
# statistics at least as wide as the data (bf16 counts as wide as f16), weight = data or f32.
F32_F32 = _combo(FLOAT32, FLOAT32, FLOAT32)
F16_F16 = _combo(FLOAT16, FLOAT16, FLOAT16)
F16_F16_F32 = _combo(FLOAT16, FLOAT16, FLOAT32)
F16_BF16 = _combo(FLOAT16, BFLOAT16, FLOAT16)
F16_BF16_F32 = _combo(FLOAT16, BFLOAT16, FLOAT32)
F16_F32 = _combo(FLOAT16, FLOAT32, FLOAT16)
F16_F32_F32 = _combo(FLOAT16, FLOAT32, FLOAT32)
BF16_BF16 = _combo(BFLOAT16, BFLOAT16, BFLOAT16)
BF16_BF16_F32 = _combo(BFLOAT16, BFLOAT16, FLOAT32)
BF16_F16 = _combo(BFLOAT16, FLOAT16, BFLOAT16)
BF16_F16_F32 = _combo(BFLOAT16, FLOAT16, FLOAT32)
BF16_F32 = _combo(BFLOAT16, FLOAT32, BFLOAT16)
BF16_F32_F32 = _combo(BFLOAT16, FLOAT32, FLOAT32)
COMBOS = (F32_F32, F16_F16, F16_F16_F32, F16_BF16, F16_BF16_F32, F16_F32, F16_F32_F32,
          BF16_BF16, BF16_BF16_F32, BF16_F16, BF16_F16_F32, BF16_F32, BF16_F32_F32)
NO_BF16 = tuple(c for c in COMBOS if BFLOAT16 not in dict(c.dtypes).values())
PRODUCTS = {
    "Ascend950": COMBOS,
    "AtlasA3": COMBOS,
    "AtlasA2": COMBOS,
    "AtlasInference": NO_BF16,     # doc l.249-253: no BFLOAT16 on Atlas inference and training
    "AtlasTraining": NO_BF16,
}


def _column_sum(name: str, rows, cols, body, dtype: str) -> te.Tensor:
    """sum over rows of ``body(j, c)`` in float32, rounded once into ``dtype``.

    A float32 output is the sum itself (the row pattern's column sum); a half output gets a
    float32 accumulator ``<name>_acc`` and a rounding stage ``<name>``.
    """
    j = te.reduce_axis((0, rows), name="j")
    acc_name = name if dtype == FLOAT32 else f"{name}_acc"
    acc = te.compute((cols,), lambda c: te.sum(body(j, c), axis=j), name=acc_name)
    if dtype == FLOAT32:
        return acc
    return te.compute((cols,), lambda c: acc[c].astype(dtype), name=name)


def compute(combo: DtypeCombo) -> list[te.Tensor]:
    """TE over symbolic (rows, cols); returns dy, x, mean, rstd, gamma, dx, dgamma, dbeta.

    The bias takes part in no output (CANN only validates it), so it has no placeholder: its
    aclnn parameter is ``Param.validated_only`` (api.py).
    """
    rows = te.var("rows", "int64")
    cols = te.var("cols", "int64")
    f32 = as_float32
    dy = te.placeholder((rows, cols), combo["dy"], name="dy")
    x = te.placeholder((rows, cols), combo["x"], name="x")
    mean = te.placeholder((rows,), combo["mean"], name="mean")
    rstd = te.placeholder((rows,), combo["rstd"], name="rstd")
    gamma = te.placeholder((cols,), combo["gamma"], name="gamma")

    def g(r, c):            # gradOut * weight
        return f32(dy[r, c]) * f32(gamma[c])

    def centred(r, c):      # input - mean (x_hat / rstd), kept explicit: no cancellation of large means
        return f32(x[r, c]) - f32(mean[r])

    k = te.reduce_axis((0, cols), name="k")
    sum_g = te.compute((rows,), lambda r: te.sum(g(r, k), axis=k), name=f"{STAGE}_sum_g")
    k2 = te.reduce_axis((0, cols), name="k")
    sum_gxc = te.compute((rows,), lambda r: te.sum(g(r, k2) * centred(r, k2), axis=k2), name=f"{STAGE}_sum_gxc")
    # 1/N once per kernel, as the other ops' inv_m: a per-row "/ N" is a vector division
    # wherever a rule vectorizes the per-row stages over rows (the fallback does).
    inv_n = 1.0 / cols.astype("float32")
    c1 = te.compute((rows,), lambda r: f32(rstd[r]) * sum_g[r] * inv_n, name=f"{STAGE}_c1")
    c2 = te.compute((rows,), lambda r: f32(rstd[r]) * f32(rstd[r]) * f32(rstd[r]) * sum_gxc[r] * inv_n,
                    name=f"{STAGE}_c2")
    dx = te.compute(
        (rows, cols),
        lambda r, c: (f32(rstd[r]) * g(r, c) - c1[r] - centred(r, c) * c2[r]).astype(combo["dx"]),
        name=f"{STAGE}_dx",
    )
    dgamma = _column_sum(f"{STAGE}_dgamma", rows, cols, lambda j, c: f32(dy[j, c]) * centred(j, c) * f32(rstd[j]),
                         combo["dgamma"])
    dbeta = _column_sum(f"{STAGE}_dbeta", rows, cols, lambda j, c: f32(dy[j, c]), combo["dbeta"])
    return [dy, x, mean, rstd, gamma, dx, dgamma, dbeta]


@dataclass(frozen=True)
class Problem(ProblemBase):
    """One call's sizes: input's shape and how many trailing axes normalizedShape covers.

    Spelled like RmsNormGrad's: ``4096x4096`` is input (4096, 4096) normalized over the last
    axis, ``2x3x8,2`` input (2, 3, 8) with normalizedShape (3, 8).
    """

    input_shape: tuple[int, ...]
    norm_ndim: int

    @property
    def begin_axis(self) -> int:
        return len(self.input_shape) - self.norm_ndim

    @property
    def normalizedShape(self) -> tuple[int, ...]:   # noqa: N802 (the aclnn attribute's name)
        """The aclnn attribute: input's trailing ``norm_ndim`` dimensions."""
        return tuple(self.input_shape[self.begin_axis:])

    @property
    def rows(self) -> int:
        """M: the product of the axes before normalizedShape."""
        return math.prod(self.input_shape[: self.begin_axis])

    @property
    def cols(self) -> int:
        """N: the product of the normalized axes."""
        return math.prod(self.normalizedShape)

    def __str__(self) -> str:
        return f"input{list(self.input_shape)} normalizedShape={list(self.normalizedShape)}"


def stat_shape(problem: Problem) -> tuple[int, ...]:
    """mean/rstd as aclnnLayerNorm returns them: input's leading axes, then a 1 per normalized axis."""
    return tuple(problem.input_shape[: problem.begin_axis]) + (1,) * problem.norm_ndim


def random_inputs(problem: Problem, combo: DtypeCombo, rng: np.random.Generator) -> dict:
    """Inputs in the user's shapes; mean and rstd are the true statistics of x (eps 1e-5),
    rounded to their dtype, as the forward would save them. x is offset from 0 so that
    x - mean matters. No bias: the kernel has no tensor for it (the aclnn tests pass one)."""
    x = (rng.standard_normal(problem.input_shape) * 2.0 + 0.5).astype(numpy_dtype(combo["x"]))
    dy = rng.standard_normal(problem.input_shape).astype(numpy_dtype(combo["dy"]))
    gamma = rng.uniform(0.5, 1.5, problem.normalizedShape).astype(numpy_dtype(combo["gamma"]))
    rows = x.astype(np.float64).reshape(problem.rows, problem.cols)
    if rows.size:
        mean, rstd = rows.mean(axis=1), 1.0 / np.sqrt(rows.var(axis=1) + EPS)
    else:
        mean, rstd = np.zeros(problem.rows), np.ones(problem.rows)
    stat = numpy_dtype(combo["mean"])
    shape = stat_shape(problem)
    return {"dy": dy, "x": x, "mean": mean.reshape(shape).astype(stat), "rstd": rstd.reshape(shape).astype(stat),
            "gamma": gamma}


def kernel_shapes(problem: Problem) -> dict:
    """The kernel's (rows, cols) / (rows,) / (cols,) shape of each tensor."""
    rc, r, c = (problem.rows, problem.cols), (problem.rows,), (problem.cols,)
    return {"dy": rc, "x": rc, "mean": r, "rstd": r, "gamma": c, "dx": rc, "dgamma": c, "dbeta": c}


def output_shapes(problem: Problem) -> dict:
    """The outputs a caller allocates: dx like input, dgamma and dbeta like normalizedShape."""
    return {"dx": problem.input_shape, "dgamma": problem.normalizedShape, "dbeta": problem.normalizedShape}


def kernel_args(problem: Problem, arrays: dict) -> dict:
    """View user-shaped arrays in the kernel's shapes."""
    shapes = kernel_shapes(problem)
    return {name: np.reshape(a, shapes[name]) for name, a in arrays.items()}
