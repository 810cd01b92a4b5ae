"""LayerNormChannelsBackward: the math in TE and what a kernel sees: tensors, dtype combos,
problem sizes.

The formulas and stage names are in the package docstring
(opgen.ops.layer_norm_channels_backward). The kernel's form is LayerNormChannels's (N, C,
HW), a reshape of the caller's NCHW memory; mean and rstd are (N, HW). The dtype rows are
aclnnLayerNormBackward's (opgen.ops.layer_norm_backward.kernel): the same tensors.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from opgen.dtypes import FLOAT32, numpy_dtype
from opgen.lazy import te
from opgen.ops.layer_norm_backward.kernel import COMBOS, PRODUCTS  # noqa: F401  (the same rows: re-exported)
from opgen.ops.layer_norm_channels.reference import layer_norm_channels
from opgen.ops.spec import ChannelProblem, DtypeCombo, as_float32

INPUTS = ("dy", "x", "mean", "rstd", "gamma")
OUTPUTS = ("dx", "dgamma", "dbeta")
STAGE = "layer_norm_channels_backward"
# The eps random_inputs computes rstd with: torch's LayerNorm default, not ConvNeXt's 1e-6.
# The statistics are used as given: with C = 1, x - mean is the rounding error of a
# bfloat16 mean of float16 data, times rstd^3 in dx; at 1e-6 that overflowed float16.
EPS = 1e-5


def _channel_sum(name: str, n, c, hw, body, dtype: str) -> te.Tensor:
    """sum over (N, HW) of ``body(a, ch, p)`` in float32 for every channel, rounded once into
    ``dtype`` (a half output: a float32 accumulator ``<name>_acc`` and a rounding stage)."""
    a = te.reduce_axis((0, n), name="a")
    p = te.reduce_axis((0, hw), name="p")
    acc_name = name if dtype == FLOAT32 else f"{name}_acc"
    acc = te.compute((c,), lambda ch: te.sum(body(a, ch, p), axis=[a, p]), name=acc_name)
    if dtype == FLOAT32:
        return acc
    return te.compute((c,), lambda ch: acc[ch].astype(dtype), name=name)


def compute(combo: DtypeCombo) -> list[te.Tensor]:
    """TE over symbolic (N, C, HW); returns dy, x, mean, rstd, gamma, dx, dgamma, dbeta."""
    n, c, hw = (te.var(v, "int64") for v in ("N", "C", "HW"))
    f32 = as_float32
    dy = te.placeholder((n, c, hw), combo["dy"], name="dy")
    x = te.placeholder((n, c, hw), combo["x"], name="x")
    mean = te.placeholder((n, hw), combo["mean"], name="mean")
    rstd = te.placeholder((n, hw), combo["rstd"], name="rstd")
    gamma = te.placeholder((c,), combo["gamma"], name="gamma")

    def g(a, ch, p):            # gradOut * weight
        return f32(dy[a, ch, p]) * f32(gamma[ch])

    def centred(a, ch, p):      # input - mean, kept explicit: no cancellation of large means
        return f32(x[a, ch, p]) - f32(mean[a, p])

    k = te.reduce_axis((0, c), name="k")
    sum_g = te.compute((n, hw), lambda a, p: te.sum(g(a, k, p), axis=k), name=f"{STAGE}_sum_g")
    k2 = te.reduce_axis((0, c), name="k")
    sum_gxc = te.compute((n, hw), lambda a, p: te.sum(g(a, k2, p) * centred(a, k2, p), axis=k2),
                         name=f"{STAGE}_sum_gxc")
    inv_c = 1.0 / c.astype("float32")
    c1 = te.compute((n, hw), lambda a, p: f32(rstd[a, p]) * sum_g[a, p] * inv_c, name=f"{STAGE}_c1")
    c2 = te.compute((n, hw), lambda a, p: f32(rstd[a, p]) * f32(rstd[a, p]) * f32(rstd[a, p]) * sum_gxc[a, p]
                    * inv_c, name=f"{STAGE}_c2")
    dx = te.compute((n, c, hw), lambda a, ch, p: (f32(rstd[a, p]) * g(a, ch, p) - c1[a, p]
                                                  - centred(a, ch, p) * c2[a, p]).astype(combo["dx"]),
                    name=f"{STAGE}_dx")
    dgamma = _channel_sum(f"{STAGE}_dgamma", n, c, hw,
                          lambda a, ch, p: f32(dy[a, ch, p]) * centred(a, ch, p) * f32(rstd[a, p]), combo["dgamma"])
    dbeta = _channel_sum(f"{STAGE}_dbeta", n, c, hw, lambda a, ch, p: f32(dy[a, ch, p]), combo["dbeta"])
    return [dy, x, mean, rstd, gamma, dx, dgamma, dbeta]


@dataclass(frozen=True)
class Problem(ChannelProblem):
    """One call's sizes: input's shape [N, C, spatial...]. Spelling: ``8x96x56x56``."""

    x_shape: tuple[int, ...]

    @property
    def stat_shape(self) -> tuple[int, ...]:
        return self.x_shape[:1] + (1,) + self.x_shape[2:]


def random_inputs(problem: Problem, combo: DtypeCombo, rng: np.random.Generator) -> dict:
    """dy, x (off-centre), gamma, and mean and rstd of x as the forward computes them."""
    x = (rng.standard_normal(problem.x_shape) * 2.0 + 0.5).astype(numpy_dtype(combo["x"]))
    dy = rng.standard_normal(problem.x_shape).astype(numpy_dtype(combo["dy"]))
    gamma = rng.uniform(0.5, 1.5, (problem.C,)).astype(numpy_dtype(combo["gamma"]))
    if problem.C:
        _, mean, rstd = layer_norm_channels(x, eps=EPS)
    else:
        mean, rstd = np.zeros(problem.stat_shape), np.ones(problem.stat_shape)
    stat = numpy_dtype(combo["mean"])
    return {"dy": dy, "x": x, "mean": mean.reshape(problem.stat_shape).astype(stat),
            "rstd": rstd.reshape(problem.stat_shape).astype(stat), "gamma": gamma}


def kernel_shapes(problem: Problem) -> dict:
    """The kernel's (N, C, HW) / (N, HW) / (C,) shape of each tensor."""
    big, stat, chan = (problem.N, problem.C, problem.HW), (problem.N, problem.HW), (problem.C,)
    return {"dy": big, "x": big, "mean": stat, "rstd": stat, "gamma": chan, "dx": big, "dgamma": chan,
            "dbeta": chan}


def output_shapes(problem: Problem) -> dict:
    """The outputs a caller allocates: dx like input, dgamma and dbeta [C]."""
    return {"dx": problem.x_shape, "dgamma": (problem.C,), "dbeta": (problem.C,)}


def kernel_args(problem: Problem, arrays: dict) -> dict:
    """View user-shaped arrays in the kernel's shapes (reshapes of the same memory)."""
    shapes = kernel_shapes(problem)
    return {name: np.reshape(a, shapes[name]) for name, a in arrays.items()}
