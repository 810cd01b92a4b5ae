"""LayerNormChannels: the math in TE and what a kernel sees: tensors, dtype combos, problem sizes.

The formulas and stage names are in the package docstring (opgen.ops.layer_norm_channels).
The kernel's form is (N, C, HW): x's elements before its channel axis (axis 1), the channels,
and the elements after it; an NCHW tensor (any rank from 2) is that form by a reshape of the
caller's memory, so no permute is ever made. mean and rstd are (N, HW): one value per pixel.
The dtype rows are aclnnLayerNorm's (opgen.ops.layer_norm.kernel): the same tensors.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from opgen.dtypes import numpy_dtype
from opgen.lazy import te
from opgen.ops.layer_norm.kernel import COMBOS, PRODUCTS  # noqa: F401  (the same rows: re-exported)
from opgen.ops.spec import ChannelProblem, DtypeCombo, as_float32, attribute_array

STAGE = "layer_norm_channels"
DEFAULT_EPS = 1e-6      # ConvNeXt's (transformers' ConvNextLayerNorm, timm's LayerNorm2d)
INPUTS = ("x", "gamma", "beta", "eps")
OUTPUTS = ("y", "mean", "rstd")


def compute(combo: DtypeCombo) -> list[te.Tensor]:
    """TE of the forward over symbolic (N, C, HW); returns x, gamma, beta, eps, y, mean, rstd.
    Every reduction runs over the middle (channel) axis, whose stride is HW."""
    n, c, hw = (te.var(v, "int64") for v in ("N", "C", "HW"))
    f32 = as_float32
    x = te.placeholder((n, c, hw), combo["x"], name="x")
    gamma = te.placeholder((c,), combo["gamma"], name="gamma")
    beta = te.placeholder((c,), combo["beta"], name="beta")
    eps = te.placeholder((1,), combo["eps"], name="eps")
    count = c.astype("float32")     # divided by, not multiplied by 1 / C: 1 / 0 for no channels
    k = te.reduce_axis((0, c), name="k")
    total = te.compute((n, hw), lambda a, p: te.sum(f32(x[a, k, p]), axis=k), name=f"{STAGE}_sum")
    mean = te.compute((n, hw), lambda a, p: total[a, p] / count, name=f"{STAGE}_mean32")

    def centred(a, ch, p):
        return f32(x[a, ch, p]) - mean[a, p]
    k2 = te.reduce_axis((0, c), name="k")
    sq = te.compute((n, hw), lambda a, p: te.sum(centred(a, k2, p) * centred(a, k2, p), axis=k2),
                    name=f"{STAGE}_sq")
    rstd = te.compute((n, hw), lambda a, p: te.rsqrt(sq[a, p] / count + eps[0]), name=f"{STAGE}_rstd32")
    y = te.compute((n, c, hw), lambda a, ch, p: (centred(a, ch, p) * rstd[a, p] * f32(gamma[ch]) + f32(beta[ch]))
                   .astype(combo["y"]), name=f"{STAGE}_y")
    mean_out = te.compute((n, hw), lambda a, p: mean[a, p].astype(combo["mean"]), name=f"{STAGE}_mean")
    rstd_out = te.compute((n, hw), lambda a, p: rstd[a, p].astype(combo["rstd"]), name=f"{STAGE}_rstd")
    return [x, gamma, beta, eps, y, mean_out, rstd_out]


@dataclass(frozen=True)
class Problem(ChannelProblem):
    """One call's sizes and its attribute: input's shape (N, C, spatial...) and ``eps``.

    Spelling: ``X[,EPS]``, e.g. ``8x96x56x56`` (eps 1e-6) or ``2x7x33,1e-3``."""

    x_shape: tuple[int, ...]
    eps: float = DEFAULT_EPS

    @classmethod
    def parse(cls, text: str) -> "Problem":
        parts = [p.strip() for p in str(text).strip().strip("()").split(",") if p.strip()]
        if len(parts) not in (1, 2):
            raise ValueError(f"cannot read {text!r} as Problem: expected X[,EPS], e.g. 8x96x56x56 or 2x7x33,1e-3")
        try:
            shape = tuple(int(d) for d in parts[0].lower().split("x"))
            eps = float(parts[1]) if len(parts) == 2 else DEFAULT_EPS
        except ValueError:
            raise ValueError(f"cannot read {text!r} as Problem: X is integers joined by 'x', EPS a number") from None
        if len(shape) < 2:
            raise ValueError(f"cannot read {text!r} as Problem: input needs at least 2 dimensions (N, C)")
        return cls(shape, eps)

    def label(self) -> str:
        shape = "x".join(map(str, self.x_shape))
        return shape if self.eps == DEFAULT_EPS else f"{shape},{self.eps!r}"

    @property
    def stat_shape(self) -> tuple[int, ...]:
        """mean's and rstd's shape: x's with the channel axis 1 (torch's keepdim mean over dim 1)."""
        return self.x_shape[:1] + (1,) + self.x_shape[2:]


def random_inputs(problem: Problem, combo: DtypeCombo, rng: np.random.Generator) -> dict:
    """Inputs in the user's shapes: x off-centre (mean 0.5, std 2) so that the mean matters."""
    x = (rng.standard_normal(problem.x_shape) * 2.0 + 0.5).astype(numpy_dtype(combo["x"]))
    gamma = rng.uniform(0.5, 1.5, (problem.C,)).astype(numpy_dtype(combo["gamma"]))
    beta = rng.standard_normal((problem.C,)).astype(numpy_dtype(combo["beta"]))
    return {"x": x, "gamma": gamma, "beta": beta, "eps": attribute_array(problem.eps)}


def kernel_shapes(problem: Problem) -> dict:
    """The kernel's (N, C, HW) / (C,) / (N, HW) / (1,) shape of each tensor."""
    big, chan, stat = (problem.N, problem.C, problem.HW), (problem.C,), (problem.N, problem.HW)
    return {"x": big, "gamma": chan, "beta": chan, "eps": (1,), "y": big, "mean": stat, "rstd": stat}


def output_shapes(problem: Problem) -> dict:
    """The outputs a caller allocates: y like x, mean and rstd x's shape with C = 1."""
    return {"y": problem.x_shape, "mean": problem.stat_shape, "rstd": problem.stat_shape}


def kernel_args(problem: Problem, arrays: dict) -> dict:
    """View user-shaped arrays in the kernel's shapes (reshapes of the same memory)."""
    shapes = kernel_shapes(problem)
    return {name: np.reshape(a, shapes[name]) for name, a in arrays.items()}
