"""aclnnGroupNormSwish: the math in TE and what a kernel sees: tensors, dtype combos, problem sizes.

The formulas and stage names are in the package docstring (opgen.ops.group_norm_swish).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from opgen.dtypes import BFLOAT16, FLOAT16, FLOAT32
from opgen.lazy import te
from opgen.ops.group_norm import kernel as group_norm_kernel
from opgen.ops.group_norm.kernel import (DEFAULT_EPS, normalization, output_shapes,  # noqa: F401 (re-exported)
                                         placeholders, statistics_out)
from opgen.ops.group_norm.kernel import Problem as GroupNormProblem
from opgen.ops.spec import DtypeCombo, as_float32, attribute_array

STAGE = "group_norm_swish"
INPUTS = ("x", "gamma", "beta", "eps", "swish_on", "swish_scale")
OUTPUTS = ("y", "mean", "rstd")


def _combo(io: str, param: str) -> DtypeCombo:
    """x and y in ``io``; gamma, beta and the statistics in ``param`` (the document: meanOut
    and rstdOut take gamma's dtype, which is x's or FLOAT)."""
    dtypes = {"x": io, "gamma": param, "beta": param, "eps": FLOAT32, "swish_on": FLOAT32, "swish_scale": FLOAT32,
              "y": io, "mean": param, "rstd": param}
    return DtypeCombo(tuple(dtypes.items()), key_tensors=("x", "gamma"))


F32_F32 = _combo(FLOAT32, FLOAT32)
F16_F16 = _combo(FLOAT16, FLOAT16)
BF16_BF16 = _combo(BFLOAT16, BFLOAT16)
F16_F32 = _combo(FLOAT16, FLOAT32)
BF16_F32 = _combo(BFLOAT16, FLOAT32)
COMBOS = (F32_F32, F16_F16, BF16_BF16, F16_F32, BF16_F32)
# The document's product list: the Ascend 950, Atlas A3 and A2 support the op, Atlas
# inference and training do not; each supported product takes every row (x in FLOAT16,
# FLOAT or BFLOAT16; gamma/beta in x's dtype or FLOAT).
PRODUCTS = {"Ascend950": COMBOS, "AtlasA3": COMBOS, "AtlasA2": COMBOS}


def compute(combo: DtypeCombo) -> list[te.Tensor]:
    """TE over symbolic (N, G, D, HW); returns x, gamma, beta, eps, swish_on, swish_scale,
    y, mean, rstd. z = x * scale + shift (GroupNorm's stages); y = z * (on * sigmoid(s * z)
    + (1 - on)), which is z * sigmoid(s * z) for on = 1 and exactly z for on = 0: one kernel
    serves both values of activateSwish with no branch a target must lower."""
    x, gamma, beta, eps = placeholders(combo)
    on = te.placeholder((1,), combo["swish_on"], name="swish_on")
    s = te.placeholder((1,), combo["swish_scale"], name="swish_scale")
    mean, rstd, scale, shift = normalization(x, gamma, beta, eps, STAGE)

    def swish(a, b, c, i):
        z = as_float32(x[a, b, c, i]) * scale[a, b, c] + shift[a, b, c]
        return (z * (on[0] * te.sigmoid(s[0] * z) + (1.0 - on[0]))).astype(combo["y"])
    y = te.compute(x.shape, swish, name=f"{STAGE}_y")
    return [x, gamma, beta, eps, on, s, y, *statistics_out(mean, rstd, combo, STAGE)]


@dataclass(frozen=True)
class Problem(GroupNormProblem):
    """GroupNorm's sizes and eps, plus the swish's attributes under their aclnn names
    (``numGroups`` and ``dataFormatOptional`` read GroupNorm's group and the default).

    Spelling: ``N,C,HxW,GROUP[,EPS[,SCALE[,ACTIVATE]]]``, e.g. ``32,32,64x64,8`` or
    ``2,6,33,3,1e-5,0.5,0`` (ACTIVATE 1/0 or true/false)."""

    swishScale: float = 1.0
    activateSwish: bool = True

    @property
    def numGroups(self) -> int:
        return self.group

    @property
    def dataFormatOptional(self) -> None:
        return None

    @classmethod
    def parse(cls, text: str) -> "Problem":
        parts = [p.strip() for p in str(text).strip().strip("()").split(",") if p.strip()]
        if len(parts) > 7:
            raise ValueError(f"cannot read {text!r} as Problem: expected N,C,HxW,GROUP[,EPS[,SCALE[,ACTIVATE]]]")
        base = GroupNormProblem.parse(",".join(parts[:5]))
        flags = {"1": True, "true": True, "0": False, "false": False}
        try:
            scale = float(parts[5]) if len(parts) > 5 else 1.0
            activate = flags[parts[6].lower()] if len(parts) > 6 else True
        except (ValueError, KeyError):
            raise ValueError(f"cannot read {text!r} as Problem: SCALE is a number, ACTIVATE 1/0/true/false") from None
        return cls(base.N, base.C, base.HxW, base.group, base.eps, scale, activate)

    def label(self) -> str:
        """The spelling ``parse`` reads back, without the defaults at the end."""
        if (self.swishScale, self.activateSwish) == (1.0, True):
            return super().label()
        head = super().label()[:-1] + ("" if self.eps != DEFAULT_EPS else f",{self.eps!r}")
        return f"{head},{self.swishScale!r},{int(self.activateSwish)})"

    def __str__(self) -> str:
        return f"{super().__str__()} swishScale={self.swishScale} activateSwish={self.activateSwish}"


def swish_arrays(problem: Problem) -> dict:
    """activateSwish and swishScale as the kernel reads them: (1,) float32 each."""
    return {"swish_on": attribute_array(1.0 if problem.activateSwish else 0.0),
            "swish_scale": attribute_array(problem.swishScale)}


def random_inputs(problem: Problem, combo: DtypeCombo, rng: np.random.Generator) -> dict:
    """GroupNorm's inputs (x off-centre so the mean matters) and the swish attributes."""
    return {**group_norm_kernel.random_inputs(problem, combo, rng), **swish_arrays(problem)}


def kernel_shapes(problem: Problem) -> dict:
    """GroupNorm's kernel shapes, and (1,) for each swish attribute."""
    return {**group_norm_kernel.kernel_shapes(problem), "swish_on": (1,), "swish_scale": (1,)}


def kernel_args(problem: Problem, arrays: dict) -> dict:
    """View user-shaped arrays in the kernel's canonical shapes."""
    shapes = kernel_shapes(problem)
    return {name: np.reshape(a, shapes[name]) for name, a in arrays.items()}
