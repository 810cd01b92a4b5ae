"""aclnnInstanceNorm: the math in TE and what a kernel sees: tensors, dtype combos, problem sizes.

The formulas and stage names are in the package docstring (opgen.ops.instance_norm). The
kernel's form is GroupNorm's (N, G, D, HW) with one channel per group: x (N, C, D, HW) with
D = 1 for every call (D stays a symbolic extent, so that the stages are exactly the grouped
pattern GroupNorm lands on, whose rules also take C == G), gamma and beta (C, D), mean and
variance (N, C). An NCHW tensor is that form by a reshape of the caller's memory; an NHWC x or
y by a transpose, which the aclnn layer stages (``kernel_axes``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from opgen.dtypes import FLOAT16, FLOAT32
from opgen.lazy import te
from opgen.ops.group_norm.kernel import random_inputs  # noqa: F401  (the same inputs: x, gamma, beta, eps)
from opgen.ops.spec import DtypeCombo, ProblemBase, as_float32

STAGE = "instance_norm"
DEFAULT_EPS = 1e-5
INPUTS = ("x", "gamma", "beta", "eps")
OUTPUTS = ("y", "mean", "variance")
NHWC_TO_NCHW = (0, 3, 1, 2)


def _combo(io: str) -> DtypeCombo:
    """Every tensor in x's dtype (the op_api's CheckDtypeValid); eps the kernel's float32."""
    dtypes = {"x": io, "gamma": io, "beta": io, "eps": FLOAT32, "y": io, "mean": io, "variance": io}
    return DtypeCombo(tuple(dtypes.items()), key_tensors=("x",))


F32 = _combo(FLOAT32)
F16 = _combo(FLOAT16)
COMBOS = (F32, F16)
# The document offers the op on the Atlas inference products alone (310P: "Atlas 推理系列产品"),
# FLOAT32 and FLOAT16 (its variance row also lists BFLOAT16, which its constraints section
# and the op_api's ASCEND310P_DTYPE_SUPPORT_LIST do not: not offered). Every other product
# refuses the op (the op_api's CheckPlatform: 161002).
PRODUCTS = {"AtlasInference": COMBOS}


def compute(combo: DtypeCombo) -> list[te.Tensor]:
    """TE of the forward over symbolic (N, C, D, HW), D = 1 in every call; returns x, gamma,
    beta, eps, y, mean, variance (stages as the package docstring names them)."""
    n, c, d, hw = (te.var(v, "int64") for v in ("N", "C", "D", "HW"))
    x = te.placeholder((n, c, d, hw), combo["x"], name="x")
    gamma = te.placeholder((c, d), combo["gamma"], name="gamma")
    beta = te.placeholder((c, d), combo["beta"], name="beta")
    eps = te.placeholder((1,), combo["eps"], name="eps")
    f32 = as_float32
    m = (d * hw).astype("float32")   # divided by, not multiplied by 1 / M: 1 / 0 for an empty channel

    k = te.reduce_axis((0, hw), name="k")
    part = te.compute((n, c, d), lambda a, b, e: te.sum(f32(x[a, b, e, k]), axis=k), name=f"{STAGE}_sum")
    j = te.reduce_axis((0, d), name="j")
    total = te.compute((n, c), lambda a, b: te.sum(part[a, b, j], axis=j), name=f"{STAGE}_total")
    mean = te.compute((n, c), lambda a, b: total[a, b] / m, name=f"{STAGE}_mean32")

    def centred(a, b, e, i):
        return f32(x[a, b, e, i]) - mean[a, b]
    k2 = te.reduce_axis((0, hw), name="k")
    sq = te.compute((n, c, d), lambda a, b, e: te.sum(centred(a, b, e, k2) * centred(a, b, e, k2), axis=k2),
                    name=f"{STAGE}_sq")
    j2 = te.reduce_axis((0, d), name="j")
    sq_total = te.compute((n, c), lambda a, b: te.sum(sq[a, b, j2], axis=j2), name=f"{STAGE}_sq_total")
    var = te.compute((n, c), lambda a, b: sq_total[a, b] / m, name=f"{STAGE}_var32")
    rstd = te.compute((n, c), lambda a, b: te.rsqrt(var[a, b] + eps[0]), name=f"{STAGE}_rstd32")
    scale = te.compute((n, c, d), lambda a, b, e: rstd[a, b] * f32(gamma[b, e]), name=f"{STAGE}_scale")
    shift = te.compute((n, c, d), lambda a, b, e: f32(beta[b, e]) - mean[a, b] * scale[a, b, e],
                       name=f"{STAGE}_shift")
    y = te.compute(x.shape, lambda a, b, e, i: (f32(x[a, b, e, i]) * scale[a, b, e] + shift[a, b, e])
                   .astype(combo["y"]), name=f"{STAGE}_y")
    mean_out = te.compute((n, c), lambda a, b: mean[a, b].astype(combo["mean"]), name=f"{STAGE}_mean")
    var_out = te.compute((n, c), lambda a, b: var[a, b].astype(combo["variance"]), name=f"{STAGE}_variance")
    return [x, gamma, beta, eps, y, mean_out, var_out]


@dataclass(frozen=True)
class Problem(ProblemBase):
    """One call's sizes and attributes: N, C, H, W, eps and dataFormat (x is (N, C, H, W) in
    NCHW, (N, H, W, C) in NHWC).

    Spelling: ``N,C,HxW[,EPS[,FORMAT]]``, e.g. ``8,64,56x56``, ``2,7,33,1e-3`` (a lone number
    is H, with W = 1) or ``2,8,4x5,1e-5,NHWC``."""

    N: int
    C: int
    H: int
    W: int
    eps: float = DEFAULT_EPS
    dataFormat: str = "NCHW"

    @property
    def HW(self) -> int:
        return self.H * self.W

    @property
    def x_shape(self) -> tuple[int, int, int, int]:
        if self.dataFormat == "NHWC":
            return (self.N, self.H, self.W, self.C)
        return (self.N, self.C, self.H, self.W)

    @property
    def stat_shape(self) -> tuple[int, int, int, int]:
        """mean's and variance's shape: x's with H and W 1 (the op_api's (N, 1, 1, C) for NHWC)."""
        return (self.N, 1, 1, self.C) if self.dataFormat == "NHWC" else (self.N, self.C, 1, 1)

    @classmethod
    def parse(cls, text: str) -> "Problem":
        """``8,64,56x56`` or ``2,7,33,1e-3`` (ValueError: what is wrong)."""
        parts = [p.strip() for p in str(text).strip().strip("()").split(",") if p.strip()]
        if len(parts) not in (3, 4, 5):
            raise ValueError(f"cannot read {text!r} as Problem: expected N,C,HxW[,EPS[,FORMAT]], e.g. 8,64,56x56")
        try:
            n, c = int(parts[0]), int(parts[1])
            sides = [int(v) for v in parts[2].lower().split("x")]
            eps = float(parts[3]) if len(parts) >= 4 else DEFAULT_EPS
        except ValueError:
            raise ValueError(f"cannot read {text!r} as Problem: N and C are integers, HxW one or two integers "
                             f"joined by 'x', EPS a number") from None
        if len(sides) not in (1, 2):
            raise ValueError(f"cannot read {text!r} as Problem: HxW is H or HxW (x is 4-D)")
        h, w = sides if len(sides) == 2 else (sides[0], 1)
        fmt = parts[4].upper() if len(parts) == 5 else "NCHW"
        if fmt not in ("NCHW", "NHWC"):
            raise ValueError(f"cannot read {text!r} as Problem: FORMAT is NCHW or NHWC")
        return cls(n, c, h, w, eps, fmt)

    def label(self) -> str:
        hw = f"{self.H}x{self.W}" if self.W != 1 else str(self.H)
        tail = "" if self.eps == DEFAULT_EPS and self.dataFormat == "NCHW" else f",{self.eps!r}"
        tail += "" if self.dataFormat == "NCHW" else f",{self.dataFormat}"
        return f"({self.N},{self.C},{hw}{tail})"

    def __str__(self) -> str:
        return f"N={self.N} C={self.C} H={self.H} W={self.W} eps={self.eps} {self.dataFormat}"


def kernel_shapes(problem: Problem) -> dict:
    """The kernel's (N, C, 1, HW) / (C, 1) / (N, C) / (1,) shape of each tensor."""
    big, chan, stat = (problem.N, problem.C, 1, problem.HW), (problem.C, 1), (problem.N, problem.C)
    return {"x": big, "gamma": chan, "beta": chan, "eps": (1,), "y": big, "mean": stat, "variance": stat}


def kernel_axes(problem: Problem) -> dict:
    """The tensors whose kernel form is a transpose of the caller's, not a reshape: NHWC x and
    y, (N, H, W, C) read in (N, C, H, W) order (ApiSpec.kernel_axes: the plan stages them)."""
    return {"x": NHWC_TO_NCHW, "y": NHWC_TO_NCHW} if problem.dataFormat == "NHWC" else {}


def output_shapes(problem: Problem) -> dict:
    """The outputs a caller allocates: y like x, mean and variance x's first two dims and ones
    (the document's C example; (N, 1, 1, C) for NHWC, the op_api's reshape)."""
    return {"y": problem.x_shape, "mean": problem.stat_shape, "variance": problem.stat_shape}


def kernel_args(problem: Problem, arrays: dict) -> dict:
    """View user-shaped arrays in the kernel's canonical shapes (NCHW: reshapes of the same
    memory, so outputs are written in place; NHWC needs a transpose, which the aclnn layer
    stages: refused here, where an output's copy would be written instead of the array)."""
    if kernel_axes(problem):
        raise ValueError(f"{problem}: NHWC tensors reach the kernel transposed, through the aclnn layer's staging")
    shapes = kernel_shapes(problem)
    return {name: np.reshape(a, shapes[name]) for name, a in arrays.items()}

