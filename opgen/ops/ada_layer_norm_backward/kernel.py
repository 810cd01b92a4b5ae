"""aclnnAdaLayerNormBackward: the math in TE and what a kernel sees: tensors, dtype combos, problem sizes.

The formulas and stage names are in the package docstring (opgen.ops.ada_layer_norm_backward).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from opgen.dtypes import BFLOAT16, FLOAT16, FLOAT32, numpy_dtype
from opgen.lazy import te
from opgen.ops.spec import DtypeCombo, ProblemBase, as_float32

INPUTS = ("dy", "x", "mean", "rstd", "scale", "gamma", "beta")   # shift: validated only (api.py), never read
OUTPUTS = ("dx", "dscale", "dshift", "dgamma", "dbeta")
STAGE = "ada_layer_norm_backward"
EPS = 1e-5      # the eps random_inputs computes rstd with (aclnnAdaLayerNormV2's default)


def _combo(io: str, weight: str) -> DtypeCombo:
    """One row of the document's mixed-precision table (constraints, digest 5a): Group A
    (gradOut, input, rstd, mean, scale, shift, gradInputOut, gradScaleOut, gradShiftOut) in
    ``io``, Group B (weightOptional, biasOptional, gradWeightOut, gradBiasOut) in ``weight``.
    The tag is the data's dtype, then the weight's (``f16-f32``: half data, float32 weight)."""
    group_b = ("gamma", "beta", "dgamma", "dbeta")
    dtypes = tuple((n, weight if n in group_b else io) for n in INPUTS + OUTPUTS)
    return DtypeCombo(dtypes, key_tensors=("dy", "gamma"))


# The document's table (constraints): Group A -> Group B, in its order.
F32 = _combo(FLOAT32, FLOAT32)
F16 = _combo(FLOAT16, FLOAT16)
F16_F32 = _combo(FLOAT16, FLOAT32)
BF16 = _combo(BFLOAT16, BFLOAT16)
BF16_F32 = _combo(BFLOAT16, FLOAT32)
COMBOS = (F32, F16, F16_F32, BF16, BF16_F32)
PRODUCTS = {            # doc "产品支持情况": Atlas A3 and A2 only (not Ascend 950, Atlas inference/training, 310B)
    "AtlasA3": COMBOS,
    "AtlasA2": COMBOS,
}


def _rounded(acc: te.Tensor, dtype: str, name: str) -> te.Tensor:
    """``acc`` (a float32 sum) as an output of ``dtype``, rounded once: the sum itself when
    float32, else a rounding stage over it (``acc`` is then ``<name>_acc``)."""
    if dtype == FLOAT32:
        return acc
    return te.compute(acc.shape, lambda *i: acc(*i).astype(dtype), name=name)


def compute(combo: DtypeCombo) -> list[te.Tensor]:
    """TE over symbolic (batch, seq, hidden); returns the inputs then dx, dscale, dshift,
    dgamma, dbeta (the order of INPUTS and OUTPUTS)."""
    batch = te.var("batch", "int64")
    seq = te.var("seq", "int64")
    hidden = te.var("hidden", "int64")
    f32 = as_float32
    dy = te.placeholder((batch, seq, hidden), combo["dy"], name="dy")
    x = te.placeholder((batch, seq, hidden), combo["x"], name="x")
    mean = te.placeholder((batch, seq), combo["mean"], name="mean")
    rstd = te.placeholder((batch, seq), combo["rstd"], name="rstd")
    scale = te.placeholder((batch, hidden), combo["scale"], name="scale")
    gamma = te.placeholder((hidden,), combo["gamma"], name="gamma")
    beta = te.placeholder((hidden,), combo["beta"], name="beta")

    def gain(b, h):         # 1 + scale: the adaptive factor on the normalized, affine output
        return 1.0 + f32(scale[b, h])

    def g(b, s, h):         # gradOut * weight * (1 + scale): the gradient reaching LayerNorm's x_hat
        return f32(dy[b, s, h]) * f32(gamma[h]) * gain(b, h)

    def centred(b, s, h):   # input - mean, kept explicit: no cancellation for |mean| >> std
        return f32(x[b, s, h]) - f32(mean[b, s])

    k = te.reduce_axis((0, hidden), name="k")
    sum_g = te.compute((batch, seq), lambda b, s: te.sum(g(b, s, k), axis=k), name=f"{STAGE}_sum_g")
    k2 = te.reduce_axis((0, hidden), name="k")
    sum_gxc = te.compute((batch, seq), lambda b, s: te.sum(g(b, s, k2) * centred(b, s, k2), axis=k2),
                         name=f"{STAGE}_sum_gxc")
    inv_h = 1.0 / hidden.astype("float32")     # once per kernel, not a division per row
    c1 = te.compute((batch, seq), lambda b, s: f32(rstd[b, s]) * sum_g[b, s] * inv_h, name=f"{STAGE}_c1")
    c2 = te.compute((batch, seq), lambda b, s: f32(rstd[b, s]) * f32(rstd[b, s]) * f32(rstd[b, s])
                    * sum_gxc[b, s] * inv_h, name=f"{STAGE}_c2")
    dx = te.compute((batch, seq, hidden),
                    lambda b, s, h: (f32(rstd[b, s]) * g(b, s, h) - c1[b, s] - centred(b, s, h) * c2[b, s])
                    .astype(combo["dx"]), name=f"{STAGE}_dx")
    j = te.reduce_axis((0, seq), name="j")
    sum_dy_xhat = te.compute((batch, hidden), lambda b, h: te.sum(
        f32(dy[b, j, h]) * centred(b, j, h) * f32(rstd[b, j]), axis=j), name=f"{STAGE}_sum_dy_xhat")
    j2 = te.reduce_axis((0, seq), name="j")
    sum_dy = te.compute((batch, hidden), lambda b, h: te.sum(f32(dy[b, j2, h]), axis=j2), name=f"{STAGE}_sum_dy")
    dscale = te.compute((batch, hidden), lambda b, h: (f32(gamma[h]) * sum_dy_xhat[b, h]
                                                       + f32(beta[h]) * sum_dy[b, h]).astype(combo["dscale"]),
                        name=f"{STAGE}_dscale")
    dshift = te.compute((batch, hidden), lambda b, h: sum_dy[b, h].astype(combo["dshift"]), name=f"{STAGE}_dshift")
    i = te.reduce_axis((0, batch), name="i")
    dgamma_name = f"{STAGE}_dgamma" if combo["dgamma"] == FLOAT32 else f"{STAGE}_dgamma_acc"
    dgamma_acc = te.compute((hidden,), lambda h: te.sum(gain(i, h) * sum_dy_xhat[i, h], axis=i), name=dgamma_name)
    i2 = te.reduce_axis((0, batch), name="i")
    dbeta_name = f"{STAGE}_dbeta" if combo["dbeta"] == FLOAT32 else f"{STAGE}_dbeta_acc"
    dbeta_acc = te.compute((hidden,), lambda h: te.sum(gain(i2, h) * sum_dy[i2, h], axis=i2), name=dbeta_name)
    dgamma = _rounded(dgamma_acc, combo["dgamma"], f"{STAGE}_dgamma")
    dbeta = _rounded(dbeta_acc, combo["dbeta"], f"{STAGE}_dbeta")
    return [dy, x, mean, rstd, scale, gamma, beta, dx, dscale, dshift, dgamma, dbeta]


@dataclass(frozen=True)
class Problem(ProblemBase):
    """One call's sizes: input's shape [B..., S, H] and scale's (and shift's) layout,
    ``scale_keepdim`` 1 for [B..., 1, H], 0 for [B..., H].

    ``4x1024x1152`` is input (4, 1024, 1152) with scale (4, 1, 1152); ``4x1024x1152,0`` the
    same with scale (4, 1152); ``77x64`` a 2-d input (no B axes: one sample)."""

    input_shape: tuple[int, ...]
    scale_keepdim: int = 1

    @property
    def batch_dims(self) -> tuple[int, ...]:
        """B...: input's axes before S and H (none for a 2-d input)."""
        return tuple(self.input_shape[:-2])

    @property
    def batch(self) -> int:
        return math.prod(self.batch_dims)

    @property
    def seq(self) -> int:
        return self.input_shape[-2]

    @property
    def hidden(self) -> int:
        return self.input_shape[-1]

    @property
    def normalizedShape(self) -> tuple[int, ...]:   # noqa: N802 (the aclnn attribute's name)
        """The aclnn attribute: [H], always one value (doc: fixed to [H])."""
        return (self.hidden,)

    @property
    def scale_shape(self) -> tuple[int, ...]:
        return self.batch_dims + ((1, self.hidden) if self.scale_keepdim else (self.hidden,))

    def __str__(self) -> str:
        return f"input{list(self.input_shape)} scale{list(self.scale_shape)}"


def stat_shape(problem: Problem) -> tuple[int, ...]:
    """mean/rstd as the forward saves them: [B..., S, 1]."""
    return tuple(problem.input_shape[:-1]) + (1,)


def _statistics(x: np.ndarray, problem: Problem) -> tuple[np.ndarray, np.ndarray]:
    rows = x.astype(np.float64).reshape(-1, problem.hidden)
    mean, rstd = rows.mean(axis=1), 1.0 / np.sqrt(rows.var(axis=1) + EPS)
    return mean.reshape(stat_shape(problem)), rstd.reshape(stat_shape(problem))


def random_inputs(problem: Problem, combo: DtypeCombo, rng: np.random.Generator) -> dict:
    """Inputs in the user's shapes; mean and rstd are x's true statistics (eps 1e-5) rounded
    to their dtype, as the forward saves them; x is offset from 0 so that x - mean matters;
    scale is small around 0 (1 + scale near 1), as a DiT's adaLN modulation is. shift, never
    read, is given by its aclnn name (the aclnn tests pass it; kernel_args leaves it out)."""
    io, wt = numpy_dtype(combo["x"]), numpy_dtype(combo["gamma"])
    x = (rng.standard_normal(problem.input_shape) * 2.0 + 0.5).astype(io)
    dy = rng.standard_normal(problem.input_shape).astype(io)
    mean, rstd = _statistics(x, problem)
    return {"dy": dy, "x": x, "mean": mean.astype(io), "rstd": rstd.astype(io),
            "scale": rng.uniform(-0.5, 0.5, problem.scale_shape).astype(io),
            "shift": rng.uniform(-0.5, 0.5, problem.scale_shape).astype(io),
            "gamma": rng.uniform(0.5, 1.5, problem.normalizedShape).astype(wt),
            "beta": rng.uniform(-0.5, 0.5, problem.normalizedShape).astype(wt)}


def kernel_shapes(problem: Problem) -> dict:
    """The kernel's (B, S, H) / (B, S) / (B, H) / (H,) shape of each tensor."""
    bsh, bs = (problem.batch, problem.seq, problem.hidden), (problem.batch, problem.seq)
    bh, h = (problem.batch, problem.hidden), (problem.hidden,)
    return {"dy": bsh, "x": bsh, "mean": bs, "rstd": bs, "scale": bh, "gamma": h, "beta": h,
            "dx": bsh, "dscale": bh, "dshift": bh, "dgamma": h, "dbeta": h}


def output_shapes(problem: Problem) -> dict:
    """The outputs a caller allocates: dx like input, dscale/dshift like scale, dgamma/dbeta [H]."""
    return {"dx": problem.input_shape, "dscale": problem.scale_shape, "dshift": problem.scale_shape,
            "dgamma": problem.normalizedShape, "dbeta": problem.normalizedShape}


def kernel_args(problem: Problem, arrays: dict) -> dict:
    """View user-shaped arrays in the kernel's shapes (shift, never read, is left out)."""
    shapes = kernel_shapes(problem)
    return {name: np.reshape(a, shapes[name]) for name, a in arrays.items() if name in shapes}
