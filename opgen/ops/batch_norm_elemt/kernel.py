"""aclnnBatchNormElemt: the math in TE and what a kernel sees: tensors, dtype combos, problem sizes.

The formulas and stage names are in the package docstring (opgen.ops.batch_norm_elemt).

Canonical form: the kernel sees input and output as (N, C, HW): the channel is axis 1 (the
document: 2-D NC to 5-D NCDHW, and 6-8-D ND "with the channel on the second axis"), every
axis after it folded into HW, a reshape of the caller's memory, never a transpose.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from opgen.dtypes import BFLOAT16, FLOAT16, FLOAT32, numpy_dtype
from opgen.lazy import te
from opgen.ops.spec import ChannelProblem, DtypeCombo, as_float32

STAGE = "batch_norm_elemt"
STATS = ("weight", "bias", "mean", "invstd")
INPUTS = ("x",) + STATS
OUTPUTS = ("y",)
DEFAULT_EPS = 1e-5


def _combo(io: str, stats: str) -> DtypeCombo:
    """input/output share ``io``; weight, bias, mean and invstd share ``stats`` (ATen's
    batch_norm_elemt: the output in input's dtype, the per-channel tensors input's or
    float32). Tag: data-statistics (``f16-f32``)."""
    dtypes = {"x": io}
    dtypes.update({name: stats for name in STATS})
    dtypes["y"] = io
    return DtypeCombo(tuple(dtypes.items()), key_tensors=("x", "mean"))


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
    """TE over symbolic (N, C, HW); returns the inputs (INPUTS order) then y.

    The per-channel scale invstd * weight is computed once per channel; the elementwise stage
    centres x, scales and shifts in float32 and rounds once to output's dtype."""
    n, c, hw = (te.var(v, "int64") for v in ("N", "C", "HW"))
    x = te.placeholder((n, c, hw), combo["x"], name="x")
    stats = {name: te.placeholder((c,), combo[name], name=name) for name in STATS}
    f32 = as_float32
    scale = te.compute((c,), lambda ci: f32(stats["invstd"][ci]) * f32(stats["weight"][ci]), name=f"{STAGE}_scale")
    y = te.compute(
        (n, c, hw),
        lambda a, ci, i: ((f32(x[a, ci, i]) - f32(stats["mean"][ci])) * scale[ci]
                          + f32(stats["bias"][ci])).astype(combo["y"]),
        name=f"{STAGE}_y")
    return [x] + [stats[name] for name in STATS] + [y]


@dataclass(frozen=True)
class Problem(ChannelProblem):
    """One call: input's shape (the channel on axis 1).

    Spelling (every tool's ``--shape``): input's shape joined by ``x``, e.g. ``32x64x56x56``.
    """

    x_shape: tuple[int, ...]

    # The aclnn attribute eps: CANN turns invstd back into a variance (1/invstd^2 - eps) and
    # BNInfer adds eps again, so it cancels; the kernel reads invstd as given and never eps
    # (docs/validation-vs-cann.md EL3), so it is no part of the problem's sizes.
    eps = DEFAULT_EPS

    def __str__(self) -> str:
        return f"input{list(self.x_shape)}"


def kernel_shapes(problem: Problem) -> dict:
    """The kernel's (N, C, HW) / (C,) shape of each tensor."""
    big = (problem.N, problem.C, problem.HW)
    shapes = {"x": big, "y": big}
    shapes.update({name: (problem.C,) for name in STATS})
    return shapes


def output_shapes(problem: Problem) -> dict:
    """The output a caller allocates: input's shape."""
    return {"y": problem.x_shape}


def random_inputs(problem: Problem, combo: DtypeCombo, rng: np.random.Generator) -> dict:
    """Inputs as a SyncBatchNorm's forward sees them on one device: mean and invstd of this
    batch, slightly offset (the all-reduced statistics of every device), weight near 1, bias
    near 0."""
    x = (rng.standard_normal(problem.x_shape) * 2.0 + 0.5).astype(numpy_dtype(combo["x"]))
    x3 = x.astype(np.float64).reshape(problem.N, problem.C, problem.HW)
    if problem.N * problem.HW:
        mean, var = x3.mean(axis=(0, 2)), x3.var(axis=(0, 2))
    else:
        mean, var = np.zeros(problem.C), np.ones(problem.C)
    mean = mean + 0.05 * rng.standard_normal(problem.C)
    var = np.maximum(var, 0.1)    # one element per channel has none: invstd 316
    stat = numpy_dtype(combo["mean"])
    return {"x": x, "mean": mean.astype(stat), "invstd": (1.0 / np.sqrt(var + DEFAULT_EPS)).astype(stat),
            "weight": rng.uniform(0.5, 1.5, problem.C).astype(stat),
            "bias": (0.5 * rng.standard_normal(problem.C)).astype(stat)}


def kernel_args(problem: Problem, arrays: dict) -> dict:
    """View user-shaped arrays in the kernel's (N, C, HW) / (C,) shapes."""
    shapes = kernel_shapes(problem)
    return {name: np.reshape(a, shapes[name]) for name, a in arrays.items() if name in shapes}
