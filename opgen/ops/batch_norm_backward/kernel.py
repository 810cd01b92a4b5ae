"""aclnnBatchNormBackward: the math in TE and what a kernel sees: tensors, dtype combos, problem sizes.

The formulas and stage names are in the package docstring (opgen.ops.batch_norm_backward).

Canonical form: the kernel sees the data as (N, C, HW): every axis before the channel axis
folded into N, every axis after it into HW. With the channel on axis 1 (NC, NCL, NCHW,
NCDHW, 6-8-D ND) that is (d0, d1, d2*...); with the channel last (NHWC, NDHWC on the
Ascend 950) it is (d0*...*d[-2], C, 1). Both are reshapes of the caller's memory, never a
transpose: the per-channel sums run over N and HW either way, so one kernel serves both.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from opgen.dtypes import BFLOAT16, FLOAT16, FLOAT32, numpy_dtype
from opgen.lazy import te
from opgen.ops.spec import ChannelProblem, DtypeCombo, as_float32

STAGE = "batch_norm_backward"
STATS = ("running_mean", "running_var", "save_mean", "save_invstd")
INPUTS = ("dy", "x", "weight") + STATS + ("eps", "training")
OUTPUTS = ("dx", "dweight", "dbias")
DEFAULT_EPS = 1e-5


def _combo(io: str, weight: str, running: str, save: str, grad: str) -> DtypeCombo:
    """gradOut/input/gradInput share ``io``; runningMean/runningVar share ``running``,
    saveMean/saveInvstd ``save``, gradWeight/gradBias ``grad``; eps and the training flag
    reach the kernel as float32 data (ApiSpec.attribute_inputs).

    Tag: data-statistics (``f16-f32``) when weight, both statistics pairs and the gradients
    share one dtype (the five rows every tool names, like GroupNorm's), else all five groups:
    data-weight-running-save-gradients (``f16-f16-f16-f32-f16``)."""
    dtypes = {"dy": io, "x": io, "weight": weight, "running_mean": running, "running_var": running,
              "save_mean": save, "save_invstd": save, "eps": FLOAT32, "training": FLOAT32,
              "dx": io, "dweight": grad, "dbias": grad}
    uniform = weight == running == save == grad
    keys = ("dy", "weight") if uniform else ("dy", "weight", "running_mean", "save_mean", "dweight")
    return DtypeCombo(tuple(dtypes.items()), key_tensors=keys)


def _half_rows(io: str) -> tuple:
    """The Ascend 950's rows for a 16-bit gradOut (doc l.283-292): weight, the running pair
    and the save pair each in gradOut's dtype or float32; gradWeight/gradBias in weight's
    dtype or float32. 12 rows, in the digest's order (weight, running, save, grad)."""
    rows = []
    for weight in (io, FLOAT32):
        for running in (io, FLOAT32):
            for save in (io, FLOAT32):
                for grad in ((io, FLOAT32) if weight == io else (FLOAT32,)):
                    rows.append(_combo(io, weight, running, save, grad))
    return tuple(rows)


F32 = _combo(FLOAT32, FLOAT32, FLOAT32, FLOAT32, FLOAT32)
F16 = _combo(FLOAT16, FLOAT16, FLOAT16, FLOAT16, FLOAT16)
BF16 = _combo(BFLOAT16, BFLOAT16, BFLOAT16, BFLOAT16, BFLOAT16)
F16_ROWS, BF16_ROWS = _half_rows(FLOAT16), _half_rows(BFLOAT16)
COMBOS = (F32,) + F16_ROWS + BF16_ROWS
# Every product that offers the op takes the 950's 25 rows: the doc's own rows on the 950,
# and on Atlas A2/A3/training the op_api's (reconciliation B6: it checks each small tensor
# against the support list only and casts them to float32; opgen offers the mixed rows it
# has kernels for). Atlas training has no bfloat16. Atlas inference does not offer the op.
PRODUCTS = {
    "Ascend950": COMBOS,
    "AtlasA3": COMBOS,
    "AtlasA2": COMBOS,
    "AtlasTraining": (F32,) + F16_ROWS,
}


def _per_channel_sum(name: str, n, c, hw, body):
    """A per-channel reduction over the batch and spatial axes (fixed order: n, then hw)."""
    rn = te.reduce_axis((0, n), name="rn")
    rh = te.reduce_axis((0, hw), name="rh")
    return te.compute((c,), lambda ci: te.sum(body(rn, ci, rh), axis=[rn, rh]), name=name)


def _statistics(t, weight, running_mean, running_var, save_mean, save_invstd, eps, c, stage):
    """mean, invstd and weight*invstd per channel; the mode blends in arithmetically (t is
    1.0 in training, 0.0 in eval), since the proofs translate rsqrt but not Select."""
    f32 = as_float32
    mean = te.compute((c,), lambda ci: t * f32(save_mean[ci]) + (1.0 - t) * f32(running_mean[ci]),
                      name=f"{stage}_mean")
    invstd = te.compute(
        (c,), lambda ci: t * f32(save_invstd[ci]) + (1.0 - t) * te.rsqrt(f32(running_var[ci]) + eps[0]),
        name=f"{stage}_invstd")
    scale = te.compute((c,), lambda ci: f32(weight[ci]) * invstd[ci], name=f"{stage}_scale")
    return mean, invstd, scale


def compute(combo: DtypeCombo, stage: str = STAGE) -> list[te.Tensor]:
    """TE over symbolic (N, C, HW); returns the inputs (INPUTS order) then dx, dweight, dbias.

    ``stage``: the prefix of the stage names, the op's name (``<op>_<stage>``): another op
    with this math (aclnnFastBatchNormBackward) builds the same TE under its own names."""
    n, c, hw = (te.var(v, "int64") for v in ("N", "C", "HW"))
    dy = te.placeholder((n, c, hw), combo["dy"], name="dy")
    x = te.placeholder((n, c, hw), combo["x"], name="x")
    per_channel = {name: te.placeholder((c,), combo[name], name=name) for name in ("weight",) + STATS}
    eps = te.placeholder((1,), combo["eps"], name="eps")
    training = te.placeholder((1,), combo["training"], name="training")
    f32 = as_float32
    t = training[0]
    mean, invstd, scale = _statistics(t, *(per_channel[k] for k in ("weight",) + STATS), eps, c, stage)
    sum_dy = _per_channel_sum(f"{stage}_sum_dy", n, c, hw, lambda a, ci, i: f32(dy[a, ci, i]))
    sum_dy_xmu = _per_channel_sum(f"{stage}_sum_dy_xmu", n, c, hw,
                                  lambda a, ci, i: (f32(x[a, ci, i]) - mean[ci]) * f32(dy[a, ci, i]))
    inv_m = 1.0 / (n * hw).astype("float32")
    mean_dy = te.compute((c,), lambda ci: t * sum_dy[ci] * inv_m, name=f"{stage}_mean_dy")
    proj = te.compute((c,), lambda ci: t * sum_dy_xmu[ci] * invstd[ci] * invstd[ci] * inv_m, name=f"{stage}_proj")
    dx = te.compute(
        (n, c, hw),
        lambda a, ci, i: ((f32(dy[a, ci, i]) - mean_dy[ci] - (f32(x[a, ci, i]) - mean[ci]) * proj[ci]) * scale[ci]
                          ).astype(combo["dx"]),
        name=f"{stage}_dx")
    dweight = te.compute((c,), lambda ci: (sum_dy_xmu[ci] * invstd[ci]).astype(combo["dweight"]),
                         name=f"{stage}_dweight")
    dbias = te.compute((c,), lambda ci: sum_dy[ci].astype(combo["dbias"]), name=f"{stage}_dbias")
    return [dy, x, *(per_channel[k] for k in ("weight",) + STATS), eps, training, dx, dweight, dbias]


@dataclass(frozen=True)
class Problem(ChannelProblem):
    """One call: input's shape, the two attributes under their aclnn names, and whether the
    channel is the last axis (an NHWC/NDHWC tensor on the Ascend 950).

    Spelling (every tool's ``--shape``): input's shape joined by ``x``, then any of
    ``eval`` (training false), ``eps=<value>``, ``nhwc`` (channel last), e.g.
    ``32x64x56x56``, ``8x16x7x7,eval,eps=0.001``, ``4x5x6x16,nhwc``.
    """

    x_shape: tuple[int, ...]
    training: bool = True
    eps: float = DEFAULT_EPS
    channel_last: bool = False

    @classmethod
    def parse(cls, text: str) -> "Problem":
        parts = [p.strip() for p in str(text).strip().strip("()").split(",") if p.strip()]
        if not parts:
            raise ValueError(f"cannot read {text!r} as {cls.__name__}: expected input's shape, e.g. 32x64x56x56")
        try:
            shape = tuple(int(d) for d in parts[0].lower().split("x"))
        except ValueError:
            raise ValueError(f"cannot read {parts[0]!r} as {cls.__name__}.x_shape: expected integers joined by "
                             f"'x' (input's shape, e.g. 32x64x56x56)") from None
        values = {"x_shape": shape}
        for part in parts[1:]:
            values.update(cls._option(part, text))
        if len(shape) < 2:
            raise ValueError(f"cannot read {text!r} as {cls.__name__}: input needs at least 2 dimensions (N, C)")
        return cls(**values)

    @classmethod
    def _option(cls, part: str, text: str) -> dict:
        word = part.lower()
        if word in ("eval", "train"):
            return {"training": word == "train"}
        if word in ("nhwc", "channel_last"):
            return {"channel_last": True}
        if word.startswith("eps="):
            try:
                return {"eps": float(word[4:])}
            except ValueError:
                pass
        raise ValueError(f"cannot read {part!r} in {text!r} as a {cls.__name__} option: expected eval, train, "
                         f"eps=<number> or nhwc")

    def label(self) -> str:
        words = ["x".join(map(str, self.x_shape))]
        if not self.training:
            words.append("eval")
        if self.eps != DEFAULT_EPS:
            words.append(f"eps={self.eps!r}")
        if self.channel_last:
            words.append("nhwc")
        return ",".join(words)

    def __str__(self) -> str:
        return f"input{list(self.x_shape)} {'training' if self.training else 'eval'} eps={self.eps!r}" + (
            " channel-last" if self.channel_last else "")


def kernel_shapes(problem: Problem) -> dict:
    """The kernel's (N, C, HW) / (C,) / (1,) shape of each tensor."""
    big, chan = (problem.N, problem.C, problem.HW), (problem.C,)
    shapes = {"dy": big, "x": big, "dx": big, "eps": (1,), "training": (1,)}
    shapes.update({name: chan for name in ("weight", "dweight", "dbias") + STATS})
    return shapes


def output_shapes(problem: Problem) -> dict:
    """The outputs a caller allocates: gradInput like input, gradWeight and gradBias (C,)."""
    return {"dx": problem.x_shape, "dweight": (problem.C,), "dbias": (problem.C,)}


def _batch_statistics(x: np.ndarray, problem: Problem) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and biased variance of x in float64, as the forward computes them."""
    x3 = x.astype(np.float64).reshape(problem.N, problem.C, problem.HW)
    if problem.N * problem.HW == 0:
        return np.zeros(problem.C), np.ones(problem.C)
    return x3.mean(axis=(0, 2)), x3.var(axis=(0, 2))


def random_inputs(problem: Problem, combo: DtypeCombo, rng: np.random.Generator) -> dict:
    """Inputs in the user's shapes with realistic statistics: saveMean/saveInvstd are the
    batch's mean and 1/sqrt(var + eps) as the training forward saves them, runningMean/
    runningVar what a few steps of momentum would hold (near the batch's, not equal)."""
    x = (rng.standard_normal(problem.x_shape) * 2.0 + 0.5).astype(numpy_dtype(combo["x"]))
    dy = rng.standard_normal(problem.x_shape).astype(numpy_dtype(combo["dy"]))
    weight = rng.uniform(0.5, 1.5, problem.C).astype(numpy_dtype(combo["weight"]))
    mean, var = _batch_statistics(x, problem)
    running_mean = mean + 0.1 * rng.standard_normal(problem.C)
    running_var = var * rng.uniform(0.8, 1.25, problem.C)
    arrays = {
        "dy": dy, "x": x, "weight": weight,
        "running_mean": running_mean.astype(numpy_dtype(combo["running_mean"])),
        "running_var": running_var.astype(numpy_dtype(combo["running_var"])),
        "save_mean": mean.astype(numpy_dtype(combo["save_mean"])),
        "save_invstd": (1.0 / np.sqrt(var + problem.eps)).astype(numpy_dtype(combo["save_invstd"])),
        "eps": np.full((1,), problem.eps, np.float32),
        "training": np.full((1,), 1.0 if problem.training else 0.0, np.float32),
    }
    return arrays


def kernel_args(problem: Problem, arrays: dict) -> dict:
    """View user-shaped arrays in the kernel's (N, C, HW) / (C,) / (1,) shapes."""
    shapes = kernel_shapes(problem)
    return {name: np.reshape(a, shapes[name]) for name, a in arrays.items()}


