"""aclnnGroupNormBackward: the math in TE and what a kernel sees: tensors, dtype combos, problem sizes.

The formulas and stage names are in the package docstring (opgen.ops.group_norm_backward).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from opgen.dtypes import BFLOAT16, FLOAT16, FLOAT32, numpy_dtype
from opgen.lazy import te
from opgen.ops.spec import DtypeCombo, ProblemBase, as_float32

INPUTS = ("dy", "x", "mean", "rstd", "gamma")
OUTPUTS = ("dx", "dgamma", "dbeta")
STAGE = "group_norm_backward"


def _combo(io: str, stat: str) -> DtypeCombo:
    dtypes = {"dy": io, "x": io, "mean": stat, "rstd": stat, "gamma": stat,
              "dx": io, "dgamma": stat, "dbeta": stat}
    return DtypeCombo(tuple(dtypes.items()), key_tensors=("dy", "mean"))


F32_F32 = _combo(FLOAT32, FLOAT32)
F16_F16 = _combo(FLOAT16, FLOAT16)
F16_F32 = _combo(FLOAT16, FLOAT32)
BF16_BF16 = _combo(BFLOAT16, BFLOAT16)
BF16_F32 = _combo(BFLOAT16, FLOAT32)
COMBOS = (F32_F32, F16_F16, F16_F32, BF16_BF16, BF16_F32)
PRODUCTS = {
    "Ascend950": COMBOS,                          # the mixed combos are 950-only
    "AtlasA3": (F32_F32, F16_F16, BF16_BF16),     # mean has gradOut's dtype
    "AtlasA2": (F32_F32, F16_F16, BF16_BF16),
    "AtlasTraining": (F32_F32, F16_F16),          # no bfloat16
}


def _channel_sum(name: str, n, g, d, body):
    """Reduction over the leading (batch) axis: one deterministic column sum per channel."""
    j = te.reduce_axis((0, n), name="j")
    return te.compute((g, d), lambda gi, di: te.sum(body(j, gi, di), axis=j), name=name)


def _rounded(acc: te.Tensor, dtype: str, name: str) -> te.Tensor:
    if dtype == FLOAT32:
        return acc
    return te.compute(acc.shape, lambda *i: acc(*i).astype(dtype), name=name)


def compute(combo: DtypeCombo) -> list[te.Tensor]:
    """TE over symbolic (N, G, D, HW); returns dy, x, mean, rstd, gamma, dx, dgamma, dbeta."""
    n, g, d, hw = (te.var(v, "int64") for v in ("N", "G", "D", "HW"))
    dy = te.placeholder((n, g, d, hw), combo["dy"], name="dy")
    x = te.placeholder((n, g, d, hw), combo["x"], name="x")
    mean = te.placeholder((n, g), combo["mean"], name="mean")
    rstd = te.placeholder((n, g), combo["rstd"], name="rstd")
    gamma = te.placeholder((g, d), combo["gamma"], name="gamma")
    f32 = as_float32

    k = te.reduce_axis((0, hw), name="k")
    ds = te.compute((n, g, d), lambda a, b, c: te.sum(f32(dy[a, b, c, k]) * f32(x[a, b, c, k]), axis=k),
                    name=f"{STAGE}_ds")
    k2 = te.reduce_axis((0, hw), name="k")
    db = te.compute((n, g, d), lambda a, b, c: te.sum(f32(dy[a, b, c, k2]), axis=k2), name=f"{STAGE}_db")
    e = te.reduce_axis((0, d), name="e")
    sum_ds = te.compute((n, g), lambda a, b: te.sum(ds[a, b, e] * f32(gamma[b, e]), axis=e),
                        name=f"{STAGE}_sum_ds")
    e2 = te.reduce_axis((0, d), name="e")
    sum_db = te.compute((n, g), lambda a, b: te.sum(db[a, b, e2] * f32(gamma[b, e2]), axis=e2),
                        name=f"{STAGE}_sum_db")
    inv_m = 1.0 / (d * hw).astype("float32")
    c2 = te.compute(
        (n, g),
        lambda a, b: (sum_db[a, b] * f32(mean[a, b]) - sum_ds[a, b]) * f32(rstd[a, b])
        * f32(rstd[a, b]) * f32(rstd[a, b]) * inv_m,
        name=f"{STAGE}_c2",
    )
    c3 = te.compute(
        (n, g),
        lambda a, b: -c2[a, b] * f32(mean[a, b]) - sum_db[a, b] * f32(rstd[a, b]) * inv_m,
        name=f"{STAGE}_c3",
    )
    dx = te.compute(
        (n, g, d, hw),
        lambda a, b, c, i: (f32(rstd[a, b]) * f32(gamma[b, c]) * f32(dy[a, b, c, i])
                            + c2[a, b] * f32(x[a, b, c, i]) + c3[a, b]).astype(combo["dx"]),
        name=f"{STAGE}_dx",
    )
    dgamma_acc = _channel_sum(f"{STAGE}_dgamma_acc", n, g, d,
                              lambda j, b, c: (ds[j, b, c] - db[j, b, c] * f32(mean[j, b])) * f32(rstd[j, b]))
    dbeta_acc = _channel_sum(f"{STAGE}_dbeta_acc", n, g, d, lambda j, b, c: db[j, b, c])
    dgamma = _rounded(dgamma_acc, combo["dgamma"], f"{STAGE}_dgamma")
    dbeta = _rounded(dbeta_acc, combo["dbeta"], f"{STAGE}_dbeta")
    return [dy, x, mean, rstd, gamma, dx, dgamma, dbeta]


@dataclass(frozen=True)
class Problem(ProblemBase):
    """One call's sizes, as the aclnn API passes them: N, C, HxW and group."""

    N: int
    C: int
    HxW: int
    group: int

    @property
    def x_shape(self) -> tuple[int, int, int]:
        return (self.N, self.C, self.HxW)

    def __str__(self) -> str:
        return f"N={self.N} C={self.C} HxW={self.HxW} G={self.group}"

    def label(self) -> str:
        """``(2,320,64x64,32)``: HxW as a square where it is one (ProblemBase.parse reads it)."""
        side = math.isqrt(self.HxW)
        hw = f"{side}x{side}" if side * side == self.HxW else str(self.HxW)
        return f"({self.N},{self.C},{hw},{self.group})"


def output_shapes(problem: Problem) -> dict:
    """The outputs a caller allocates: dx like x (N, C, HxW), dgamma and dbeta per channel."""
    return {"dx": problem.x_shape, "dgamma": (problem.C,), "dbeta": (problem.C,)}


def random_inputs(problem: Problem, combo: DtypeCombo, rng: np.random.Generator) -> dict:
    """Inputs in the user's shapes with mean/rstd the true statistics of x (per group)."""
    x = (rng.standard_normal(problem.x_shape) * 2.0 + 0.5).astype(numpy_dtype(combo["x"]))
    dy = rng.standard_normal(problem.x_shape).astype(numpy_dtype(combo["dy"]))
    gamma = rng.uniform(0.5, 1.5, problem.C).astype(numpy_dtype(combo["gamma"]))
    xg = x.astype(np.float64).reshape(problem.N, problem.group, (problem.C // problem.group) * problem.HxW)
    if xg.size:
        mean, rstd = xg.mean(axis=2), 1.0 / np.sqrt(xg.var(axis=2) + 1e-5)
    else:
        mean, rstd = np.zeros((problem.N, problem.group)), np.ones((problem.N, problem.group))
    stat = numpy_dtype(combo["mean"])
    return {"dy": dy, "x": x, "mean": mean.astype(stat), "rstd": rstd.astype(stat), "gamma": gamma}


def kernel_shapes(problem: Problem) -> dict:
    """The kernel's (N, G, D, HW) / (N, G) / (G, D) shape of each tensor."""
    g = problem.group
    d = problem.C // g
    big, stat, chan = (problem.N, g, d, problem.HxW), (problem.N, g), (g, d)
    return {"dy": big, "x": big, "mean": stat, "rstd": stat, "gamma": chan,
            "dx": big, "dgamma": chan, "dbeta": chan}


def kernel_args(problem: Problem, arrays: dict) -> dict:
    """View user-shaped arrays in the kernel's (N, G, D, HW) / (N, G) / (G, D) shapes."""
    shapes = kernel_shapes(problem)
    return {name: np.reshape(a, shapes[name]) for name, a in arrays.items()}
