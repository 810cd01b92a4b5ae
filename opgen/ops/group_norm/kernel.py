"""aclnnGroupNorm: the math in TE and what a kernel sees: tensors, dtype combos, problem sizes.

The formulas and stage names are in the package docstring (opgen.ops.group_norm).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from opgen.dtypes import BFLOAT16, FLOAT16, FLOAT32, numpy_dtype
from opgen.lazy import te
from opgen.ops.spec import DtypeCombo, ProblemBase, as_float32, attribute_array

STAGE = "group_norm"
DEFAULT_EPS = 1e-5
INPUTS = ("x", "gamma", "beta", "eps")
OUTPUTS = ("y", "mean", "rstd")


def _combo(io: str, stat: str) -> DtypeCombo:
    dtypes = {"x": io, "gamma": io, "beta": io, "eps": FLOAT32, "y": io, "mean": stat, "rstd": stat}
    return DtypeCombo(tuple(dtypes.items()), key_tensors=("x", "mean"))


F32_F32 = _combo(FLOAT32, FLOAT32)
F16_F16 = _combo(FLOAT16, FLOAT16)
F16_F32 = _combo(FLOAT16, FLOAT32)
BF16_BF16 = _combo(BFLOAT16, BFLOAT16)
BF16_F32 = _combo(BFLOAT16, FLOAT32)
COMBOS = (F32_F32, F16_F16, F16_F32, BF16_BF16, BF16_F32)
# aclnnGroupNorm documents every tensor in self's dtype (no bfloat16 on Atlas training and
# inference). The float32-statistics rows are opgen's, offered where aclnnGroupNormBackward
# takes float32 statistics with half data (the Ascend 950): the forward then hands its
# statistics to that backward as they are (api.py says so where it checks dtypes).
PRODUCTS = {
    "Ascend950": COMBOS,
    "AtlasA3": (F32_F32, F16_F16, BF16_BF16),
    "AtlasA2": (F32_F32, F16_F16, BF16_BF16),
    "AtlasTraining": (F32_F32, F16_F16),
    "AtlasInference": (F32_F32, F16_F16),
}


def normalization(x: te.Tensor, gamma: te.Tensor, beta: te.Tensor, eps: te.Tensor, stage: str) -> tuple:
    """The float32 stages of GroupNorm over x (N, G, D, HW), named ``{stage}_*`` (see the
    package docstring): returns (mean32, rstd32, scale, shift), so that y = x * scale +
    shift. aclnnGroupNormSwish builds on the same stages."""
    n, g, d, hw = x.shape
    f32 = as_float32
    m = (d * hw).astype("float32")   # divided by per group, not multiplied by 1 / M: a GPU's host
    # code would compute a hoisted 1 / M, which is 1 / 0 for an empty group

    k = te.reduce_axis((0, hw), name="k")
    part = te.compute((n, g, d), lambda a, b, c: te.sum(f32(x[a, b, c, k]), axis=k), name=f"{stage}_sum")
    e = te.reduce_axis((0, d), name="e")
    total = te.compute((n, g), lambda a, b: te.sum(part[a, b, e], axis=e), name=f"{stage}_total")
    mean = te.compute((n, g), lambda a, b: total[a, b] / m, name=f"{stage}_mean32")

    def centered(a, b, c, i):
        return f32(x[a, b, c, i]) - mean[a, b]
    k2 = te.reduce_axis((0, hw), name="k")
    sq = te.compute((n, g, d), lambda a, b, c: te.sum(centered(a, b, c, k2) * centered(a, b, c, k2), axis=k2),
                    name=f"{stage}_sq")
    e2 = te.reduce_axis((0, d), name="e")
    sq_total = te.compute((n, g), lambda a, b: te.sum(sq[a, b, e2], axis=e2), name=f"{stage}_sq_total")
    rstd = te.compute((n, g), lambda a, b: te.rsqrt(sq_total[a, b] / m + eps[0]), name=f"{stage}_rstd32")
    scale = te.compute((n, g, d), lambda a, b, c: rstd[a, b] * f32(gamma[b, c]), name=f"{stage}_scale")
    shift = te.compute((n, g, d), lambda a, b, c: f32(beta[b, c]) - mean[a, b] * scale[a, b, c],
                       name=f"{stage}_shift")
    return mean, rstd, scale, shift


def placeholders(combo: DtypeCombo) -> tuple:
    """x (N, G, D, HW), gamma and beta (G, D) and eps (1,) over symbolic sizes."""
    n, g, d, hw = (te.var(v, "int64") for v in ("N", "G", "D", "HW"))
    return (te.placeholder((n, g, d, hw), combo["x"], name="x"), te.placeholder((g, d), combo["gamma"], name="gamma"),
            te.placeholder((g, d), combo["beta"], name="beta"), te.placeholder((1,), combo["eps"], name="eps"))


def statistics_out(mean: te.Tensor, rstd: te.Tensor, combo: DtypeCombo, stage: str) -> tuple:
    """mean32 and rstd32 rounded once to the statistics' dtype: the outputs mean and rstd."""
    def rounded(t: te.Tensor, name: str) -> te.Tensor:
        return te.compute(t.shape, lambda a, b: t[a, b].astype(combo[name]), name=f"{stage}_{name}")
    return rounded(mean, "mean"), rounded(rstd, "rstd")


def compute(combo: DtypeCombo) -> list[te.Tensor]:
    """TE of the forward over symbolic (N, G, D, HW); returns x, gamma, beta, eps, y, mean, rstd."""
    x, gamma, beta, eps = placeholders(combo)
    mean, rstd, scale, shift = normalization(x, gamma, beta, eps, STAGE)
    y = te.compute(x.shape, lambda a, b, c, i: (as_float32(x[a, b, c, i]) * scale[a, b, c] + shift[a, b, c])
                   .astype(combo["y"]), name=f"{STAGE}_y")
    return [x, gamma, beta, eps, y, *statistics_out(mean, rstd, combo, STAGE)]


@dataclass(frozen=True)
class Problem(ProblemBase):
    """One call's sizes and attributes, as the aclnn API passes them: N, C, HxW, group, eps.

    Spelling: ``N,C,HxW,GROUP[,EPS]``, e.g. ``32,32,64x64,8`` or ``2,6,33,3,1e-3``."""

    N: int
    C: int
    HxW: int
    group: int
    eps: float = DEFAULT_EPS

    @property
    def x_shape(self) -> tuple[int, int, int]:
        return (self.N, self.C, self.HxW)

    @classmethod
    def parse(cls, text: str) -> "Problem":
        """``32,32,64x64,8`` or ``2,6,33,3,1e-3`` (ValueError: what is wrong)."""
        parts = [p.strip() for p in str(text).strip().strip("()").split(",") if p.strip()]
        if len(parts) not in (4, 5):
            raise ValueError(f"cannot read {text!r} as Problem: expected N,C,HxW,GROUP[,EPS], e.g. 32,32,64x64,8")
        try:
            n, c, group = int(parts[0]), int(parts[1]), int(parts[3])
            hw = math.prod(int(v) for v in parts[2].lower().split("x"))
            eps = float(parts[4]) if len(parts) == 5 else DEFAULT_EPS
        except ValueError:
            raise ValueError(f"cannot read {text!r} as Problem: N, C and GROUP are integers, HxW integers joined "
                             f"by 'x', EPS a number") from None
        return cls(n, c, hw, group, eps)

    def label(self) -> str:
        side = math.isqrt(self.HxW)
        hw = f"{side}x{side}" if side * side == self.HxW else str(self.HxW)
        tail = "" if self.eps == DEFAULT_EPS else f",{self.eps!r}"
        return f"({self.N},{self.C},{hw},{self.group}{tail})"

    def __str__(self) -> str:
        return f"N={self.N} C={self.C} HxW={self.HxW} G={self.group} eps={self.eps}"



def random_inputs(problem: Problem, combo: DtypeCombo, rng: np.random.Generator) -> dict:
    """Inputs in the user's shapes: x off-centre (mean 0.5, std 2) so the mean matters."""
    x = (rng.standard_normal(problem.x_shape) * 2.0 + 0.5).astype(numpy_dtype(combo["x"]))
    gamma = rng.uniform(0.5, 1.5, problem.C).astype(numpy_dtype(combo["gamma"]))
    beta = rng.standard_normal(problem.C).astype(numpy_dtype(combo["beta"]))
    return {"x": x, "gamma": gamma, "beta": beta, "eps": attribute_array(problem.eps)}


def kernel_shapes(problem: Problem) -> dict:
    """The kernel's (N, G, D, HW) / (G, D) / (N, G) / (1,) shape of each tensor."""
    g = problem.group
    d = problem.C // g if g else 0
    big, chan, stat = (problem.N, g, d, problem.HxW), (g, d), (problem.N, g)
    return {"x": big, "gamma": chan, "beta": chan, "eps": (1,), "y": big, "mean": stat, "rstd": stat}


def output_shapes(problem: Problem) -> dict:
    """The outputs a caller allocates: y like x, mean and rstd (N, group)."""
    stat = (problem.N, problem.group)
    return {"y": problem.x_shape, "mean": stat, "rstd": stat}


def kernel_args(problem: Problem, arrays: dict) -> dict:
    """View user-shaped arrays in the kernel's canonical shapes."""
    shapes = kernel_shapes(problem)
    return {name: np.reshape(a, shapes[name]) for name, a in arrays.items()}
