"""aclnnBatchNorm: the math in TE and what a kernel sees: tensors, dtype combos, problem sizes.

The formulas and stage names are in the package docstring (opgen.ops.batch_norm). The
canonical form is aclnnBatchNormBackward's: the data as (N, C, HW), every axis before the
channel folded into N, every axis after it into HW (a channel-last tensor is
(N*H*W, C, 1)): reshapes of the caller's memory, never a transpose.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from opgen.dtypes import BFLOAT16, FLOAT16, FLOAT32, numpy_dtype
from opgen.lazy import te
from opgen.ops.batch_norm_backward.kernel import Problem as _CallSizes
from opgen.ops.spec import DtypeCombo, as_float32

STAGE = "batch_norm"
INPUTS = ("x", "weight", "bias", "running_mean", "running_var", "eps", "training")
OUTPUTS = ("y", "save_mean", "save_invstd")
STATS = ("running_mean", "running_var", "save_mean", "save_invstd")


def _combo(io: str, weight: str, stat: str) -> DtypeCombo:
    """input/output ``io``; weight and bias ``weight``; runningMean/runningVar and
    saveMean/saveInvstd ``stat``. Tag: data-statistics when all three agree (``f32-f32``,
    the rows every tool names, as aclnnBatchNormBackward's), else data-weight-statistics."""
    dtypes = {"x": io, "weight": weight, "bias": weight, "running_mean": stat, "running_var": stat,
              "eps": FLOAT32, "training": FLOAT32, "y": io, "save_mean": stat, "save_invstd": stat}
    keys = ("x", "save_mean") if io == weight == stat else ("x", "weight", "save_mean")
    return DtypeCombo(tuple(dtypes.items()), key_tensors=keys)


def _rows(io: str) -> tuple:
    return tuple(_combo(io, w, s) for w in (io, FLOAT32) for s in (io, FLOAT32))


F32 = _combo(FLOAT32, FLOAT32, FLOAT32)
F16_ROWS, BF16_ROWS = _rows(FLOAT16), _rows(BFLOAT16)
COMBOS = (F32,) + F16_ROWS + BF16_ROWS
# The document lists FLOAT32/FLOAT16/BFLOAT16 for every tensor with no relation between the
# per-channel tensors and the data; opgen's kernels take these rows: weight/bias in the
# data's dtype or float32, the four statistics in one dtype, the data's or float32 (the
# float32 save pair is what aclnnBatchNormBackward takes with half data on every product).
# Atlas training and inference: no BFLOAT16. Atlas 200I/500 A2 (not an opgen product): not supported.
NO_BF16 = (F32,) + F16_ROWS
PRODUCTS = {
    "Ascend950": COMBOS,
    "AtlasA3": COMBOS,
    "AtlasA2": COMBOS,
    "AtlasTraining": NO_BF16,
    "AtlasInference": NO_BF16,
}


@dataclass(frozen=True)
class Problem(_CallSizes):
    """aclnnBatchNormBackward's Problem (input's shape, ``training``, ``eps``,
    ``channel_last``; the same spelling) plus the aclnn attribute ``momentum``, which the
    kernel does not read (api.py: opgen updates no running statistics in place). 0.0: the
    update that leaves them as they are."""

    momentum: float = 0.0


def _channel_sum(name: str, n, c, hw, body):
    """A per-channel reduction over the batch and spatial axes (fixed order: n, then hw)."""
    rn = te.reduce_axis((0, n), name="rn")
    rh = te.reduce_axis((0, hw), name="rh")
    return te.compute((c,), lambda ci: te.sum(body(rn, ci, rh), axis=[rn, rh]), name=name)


def compute(combo: DtypeCombo) -> list[te.Tensor]:
    """TE over symbolic (N, C, HW); returns the inputs (INPUTS order) then y, save_mean, save_invstd."""
    n, c, hw = (te.var(v, "int64") for v in ("N", "C", "HW"))
    f32 = as_float32
    x = te.placeholder((n, c, hw), combo["x"], name="x")
    per = {name: te.placeholder((c,), combo[name], name=name)
           for name in ("weight", "bias", "running_mean", "running_var")}
    eps = te.placeholder((1,), combo["eps"], name="eps")
    training = te.placeholder((1,), combo["training"], name="training")
    t = training[0]
    m = (n * hw).astype("float32")

    # The shift: the channel's first element, read only where a channel has elements (a
    # lazy if_then_else: an empty channel reads nothing, its sums are 0 over 0 elements).
    shift = te.compute((c,), lambda ci: te.if_then_else(n * hw > 0, f32(x[0, ci, 0]), te.const(0.0, "float32")),
                       name=f"{STAGE}_shift")

    def centred(a, ci, i):
        return f32(x[a, ci, i]) - shift[ci]
    # The mean from the plain sum, the variance from the shifted ones: shift + sum(x - shift)/M
    # would round sum(x - shift) ~ M (mean - shift) to float32 before adding the shift back,
    # an error of u x |mean - shift| (the channel's spread) on a mean that may be 1/100 of
    # it; sum(x)/M rounds the sum once (the CPU accumulates it in float64:
    # schedules/llvm.py, _widen_sum). One more sum in the same pass: no more bytes read.
    plain = _channel_sum(f"{STAGE}_sumx", n, c, hw, lambda a, ci, i: f32(x[a, ci, i]))
    total = _channel_sum(f"{STAGE}_sum", n, c, hw, centred)
    squares = _channel_sum(f"{STAGE}_sumsq", n, c, hw, lambda a, ci, i: centred(a, ci, i) * centred(a, ci, i))
    mean = te.compute((c,), lambda ci: t * (plain[ci] / m) + (1.0 - t) * f32(per["running_mean"][ci]),
                      name=f"{STAGE}_mean32")
    var = te.compute((c,), lambda ci: t * (squares[ci] / m - (total[ci] / m) * (total[ci] / m))
                     + (1.0 - t) * f32(per["running_var"][ci]), name=f"{STAGE}_var32")
    invstd = te.compute((c,), lambda ci: te.rsqrt(var[ci] + eps[0]), name=f"{STAGE}_invstd32")
    scale = te.compute((c,), lambda ci: invstd[ci] * f32(per["weight"][ci]), name=f"{STAGE}_scale")
    offset = te.compute((c,), lambda ci: f32(per["bias"][ci]) - mean[ci] * scale[ci], name=f"{STAGE}_offset")
    y = te.compute((n, c, hw), lambda a, ci, i: (f32(x[a, ci, i]) * scale[ci] + offset[ci]).astype(combo["y"]),
                   name=f"{STAGE}_y")
    save_mean = te.compute((c,), lambda ci: mean[ci].astype(combo["save_mean"]), name=f"{STAGE}_save_mean")
    save_invstd = te.compute((c,), lambda ci: invstd[ci].astype(combo["save_invstd"]), name=f"{STAGE}_save_invstd")
    return [x, *(per[k] for k in ("weight", "bias", "running_mean", "running_var")), eps, training,
            y, save_mean, save_invstd]


def kernel_shapes(problem: Problem) -> dict:
    """The kernel's (N, C, HW) / (C,) / (1,) shape of each tensor."""
    big, chan = (problem.N, problem.C, problem.HW), (problem.C,)
    shapes = {"x": big, "y": big, "eps": (1,), "training": (1,)}
    shapes.update({name: chan for name in ("weight", "bias") + STATS})
    return shapes


def output_shapes(problem: Problem) -> dict:
    """The outputs a caller allocates: output like input, saveMean and saveInvstd (C,)."""
    return {"y": problem.x_shape, "save_mean": (problem.C,), "save_invstd": (problem.C,)}


def random_inputs(problem: Problem, combo: DtypeCombo, rng: np.random.Generator) -> dict:
    """Inputs in the user's shapes: x off-centre (mean 0.5, std 2) so that the mean matters;
    running statistics near the batch's (a few steps of momentum)."""
    x = (rng.standard_normal(problem.x_shape) * 2.0 + 0.5).astype(numpy_dtype(combo["x"]))
    weight = rng.uniform(0.5, 1.5, problem.C).astype(numpy_dtype(combo["weight"]))
    bias = rng.standard_normal(problem.C).astype(numpy_dtype(combo["bias"]))
    running_mean = 0.5 + 0.1 * rng.standard_normal(problem.C)
    running_var = 4.0 * rng.uniform(0.8, 1.25, problem.C)
    return {"x": x, "weight": weight, "bias": bias,
            "running_mean": running_mean.astype(numpy_dtype(combo["running_mean"])),
            "running_var": running_var.astype(numpy_dtype(combo["running_var"])),
            "eps": np.full((1,), problem.eps, np.float32),
            "training": np.full((1,), 1.0 if problem.training else 0.0, np.float32)}


def kernel_args(problem: Problem, arrays: dict) -> dict:
    """View user-shaped arrays in the kernel's (N, C, HW) / (C,) / (1,) shapes."""
    shapes = kernel_shapes(problem)
    return {name: np.reshape(a, shapes[name]) for name, a in arrays.items()}
