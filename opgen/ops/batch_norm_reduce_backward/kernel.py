"""aclnnBatchNormReduceBackward: the math in TE and what a kernel sees: tensors, dtype combos, problem sizes.

The formulas and stage names are in the package docstring (opgen.ops.batch_norm_reduce_backward).

Canonical form: the kernel sees gradOut and input as (N, C, HW): the channel is axis 1
(the document: "the second dimension is the channel axis"), every axis before it folded
into N, every axis after it into HW, a reshape of the caller's memory, never a transpose.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from opgen.dtypes import BFLOAT16, FLOAT16, FLOAT32, numpy_dtype
from opgen.lazy import te
from opgen.ops.batch_norm_backward.kernel import _per_channel_sum
from opgen.ops.spec import ChannelProblem, DtypeCombo, as_float32

STAGE = "batch_norm_reduce_backward"
INPUTS = ("dy", "x", "mean", "invstd")
OUTPUTS = ("sum_dy", "sum_dy_xmu", "grad_weight", "grad_bias")


def _combo(io: str, stats: str) -> DtypeCombo:
    """gradOut/input share ``io``; mean, invstd and the four outputs share ``stats`` (ATen's
    batch_norm_backward_reduce returns its sums in the statistics' dtype). Tag:
    data-statistics (``f16-f32``)."""
    dtypes = {"dy": io, "x": io, "mean": stats, "invstd": stats}
    dtypes.update({name: stats for name in OUTPUTS})
    return DtypeCombo(tuple(dtypes.items()), key_tensors=("dy", "mean"))


F32 = _combo(FLOAT32, FLOAT32)
F16, F16_F32 = _combo(FLOAT16, FLOAT16), _combo(FLOAT16, FLOAT32)
BF16, BF16_F32 = _combo(BFLOAT16, BFLOAT16), _combo(BFLOAT16, FLOAT32)
COMBOS = (F32, F16, F16_F32, BF16, BF16_F32)
# The document's table: every tensor FLOAT32/FLOAT16/BFLOAT16 on the Ascend 950, Atlas A2/A3
# and Atlas training (no BFLOAT16 there); Atlas inference and 200I/500 A2 do not offer it.
PRODUCTS = {
    "Ascend950": COMBOS,
    "AtlasA3": COMBOS,
    "AtlasA2": COMBOS,
    "AtlasTraining": (F32, F16, F16_F32),
}


def compute(combo: DtypeCombo) -> list[te.Tensor]:
    """TE over symbolic (N, C, HW); returns the inputs (INPUTS order) then the four outputs."""
    n, c, hw = (te.var(v, "int64") for v in ("N", "C", "HW"))
    dy = te.placeholder((n, c, hw), combo["dy"], name="dy")
    x = te.placeholder((n, c, hw), combo["x"], name="x")
    mean = te.placeholder((c,), combo["mean"], name="mean")
    invstd = te.placeholder((c,), combo["invstd"], name="invstd")
    f32 = as_float32
    sum_dy = _per_channel_sum(f"{STAGE}_sum_dy", n, c, hw, lambda a, ci, i: f32(dy[a, ci, i]))
    sum_dy_xmu = _per_channel_sum(f"{STAGE}_sum_dy_xmu", n, c, hw,
                                  lambda a, ci, i: (f32(x[a, ci, i]) - f32(mean[ci])) * f32(dy[a, ci, i]))
    out_sum_dy = te.compute((c,), lambda ci: sum_dy[ci].astype(combo["sum_dy"]), name=f"{STAGE}_out_sum_dy")
    out_sum_dy_xmu = te.compute((c,), lambda ci: sum_dy_xmu[ci].astype(combo["sum_dy_xmu"]),
                                name=f"{STAGE}_out_sum_dy_xmu")
    grad_weight = te.compute((c,), lambda ci: (sum_dy_xmu[ci] * f32(invstd[ci])).astype(combo["grad_weight"]),
                             name=f"{STAGE}_grad_weight")
    grad_bias = te.compute((c,), lambda ci: sum_dy[ci].astype(combo["grad_bias"]), name=f"{STAGE}_grad_bias")
    return [dy, x, mean, invstd, out_sum_dy, out_sum_dy_xmu, grad_weight, grad_bias]


@dataclass(frozen=True)
class Problem(ChannelProblem):
    """One call: input's shape (the channel on axis 1).

    Spelling (every tool's ``--shape``): input's shape joined by ``x``, e.g. ``32x64x56x56``.
    """

    x_shape: tuple[int, ...]

    # The flags ask for every output: the kernel computes all four whatever they say (the
    # aclnn layer writes those asked for), so they are no part of the problem's sizes.
    inputG = weightG = biasG = True

    def __str__(self) -> str:
        return f"input{list(self.x_shape)}"


def kernel_shapes(problem: Problem) -> dict:
    """The kernel's (N, C, HW) / (C,) shape of each tensor."""
    big, chan = (problem.N, problem.C, problem.HW), (problem.C,)
    shapes = {"dy": big, "x": big}
    shapes.update({name: chan for name in ("mean", "invstd") + OUTPUTS})
    return shapes


def output_shapes(problem: Problem) -> dict:
    """The outputs a caller allocates: four (C,) vectors."""
    return {name: (problem.C,) for name in OUTPUTS}


def random_inputs(problem: Problem, combo: DtypeCombo, rng: np.random.Generator) -> dict:
    """Inputs in the user's shapes with realistic statistics: mean and invstd are the batch's
    mean and 1/sqrt(var + 1e-5), as the forward saves them (on one device of a SyncBatchNorm
    they are the all-reduced ones, near but not equal to this batch's: a small offset)."""
    x = (rng.standard_normal(problem.x_shape) * 2.0 + 0.5).astype(numpy_dtype(combo["x"]))
    dy = rng.standard_normal(problem.x_shape).astype(numpy_dtype(combo["dy"]))
    x3 = x.astype(np.float64).reshape(problem.N, problem.C, problem.HW)
    if problem.N * problem.HW:
        mean, var = x3.mean(axis=(0, 2)), x3.var(axis=(0, 2))
    else:
        mean, var = np.zeros(problem.C), np.ones(problem.C)
    mean = mean + 0.05 * rng.standard_normal(problem.C)
    return {"dy": dy, "x": x, "mean": mean.astype(numpy_dtype(combo["mean"])),
            "weight": rng.uniform(0.5, 1.5, problem.C).astype(numpy_dtype(combo["mean"])),
            "invstd": (1.0 / np.sqrt(var + 1e-5)).astype(numpy_dtype(combo["invstd"]))}


def kernel_args(problem: Problem, arrays: dict) -> dict:
    """View user-shaped arrays in the kernel's (N, C, HW) / (C,) shapes (weight, never read,
    is left out)."""
    shapes = kernel_shapes(problem)
    return {name: np.reshape(a, shapes[name]) for name, a in arrays.items() if name in shapes}
