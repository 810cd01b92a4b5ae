"""aclnnBatchNormElemtBackward: the math in TE and what a kernel sees: tensors, dtype combos, problem sizes.

The formulas and stage names are in the package docstring (opgen.ops.batch_norm_elemt_backward).

Canonical form: the kernel sees gradOut, input and gradInput as (N, C, HW): the channel is
axis 1 (the document: "the second dimension is the channel axis"), every axis before it
folded into N, every axis after it into HW, a reshape of the caller's memory, never a
transpose. The counter (any shape of up to 8 dimensions: the op_api sums all of it) is seen
flat, (K,).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from opgen.dtypes import BFLOAT16, FLOAT16, FLOAT32, INT32, numpy_dtype
from opgen.lazy import te
from opgen.ops.spec import ChannelProblem, DtypeCombo, as_float32

STAGE = "batch_norm_elemt_backward"
STATS = ("mean", "invstd", "weight", "sum_dy", "sum_dy_xmu")
INPUTS = ("dy", "x") + STATS + ("counter",)
OUTPUTS = ("dx",)


def _combo(io: str, stats: str, counter: str) -> DtypeCombo:
    """gradOut/input/gradInput share ``io`` (ATen's batch_norm_backward_elemt returns
    gradInput in input's dtype); mean, invstd, weight, sumDy and sumDyXmu share ``stats``;
    the counter has its own. Tag: data-statistics (``f16-f32``) with a float32 counter, else
    data-statistics-counter (``f16-f32-i32``)."""
    dtypes = {"dy": io, "x": io}
    dtypes.update({name: stats for name in STATS})
    dtypes.update({"counter": counter, "dx": io})
    keys = ("dy", "mean") if counter == FLOAT32 else ("dy", "mean", "counter")
    return DtypeCombo(tuple(dtypes.items()), key_tensors=keys)


_ROWS = ((FLOAT32, FLOAT32), (FLOAT16, FLOAT16), (FLOAT16, FLOAT32), (BFLOAT16, BFLOAT16), (BFLOAT16, FLOAT32))
# The counter's INT32, FLOAT16 and FLOAT32 (doc l.163): INT32 is what torch's SyncBatchNorm
# passes (its per-rank counts); the kernel widens each count to float32 as CANN's Cast does.
_COUNTERS = (FLOAT32, FLOAT16, INT32)
COMBOS = tuple(_combo(io, stats, counter) for io, stats in _ROWS for counter in _COUNTERS)
F32 = COMBOS[0]
# The document's table: every float tensor FLOAT32/FLOAT16/BFLOAT16 on the Ascend 950, Atlas
# A2/A3 and Atlas training (no BFLOAT16 there, doc l.202); Atlas inference and
# 200I/500 A2 do not offer it.
PRODUCTS = {
    "Ascend950": COMBOS,
    "AtlasA3": COMBOS,
    "AtlasA2": COMBOS,
    "AtlasTraining": tuple(c for c in COMBOS if BFLOAT16 not in (c["dy"], c["mean"])),
}


def _per_channel(name: str, c, body):
    return te.compute((c,), body, name=f"{STAGE}_{name}")


def compute(combo: DtypeCombo) -> list[te.Tensor]:
    """TE over symbolic (N, C, HW) and the counter's K; returns the inputs (INPUTS order) then dx.

    The counter's total is a one-element sum (CANN's ReduceSum of the whole counter in
    float32), its reciprocal one division per call (CANN's RealDiv divides per channel: an
    ulp apart, BE2); the per-channel coefficients multiply by it; the elementwise stage reads
    them."""
    n, c, hw, k = (te.var(v, "int64") for v in ("N", "C", "HW", "K"))
    dy = te.placeholder((n, c, hw), combo["dy"], name="dy")
    x = te.placeholder((n, c, hw), combo["x"], name="x")
    stats = {name: te.placeholder((c,), combo[name], name=name) for name in STATS}
    counter = te.placeholder((k,), combo["counter"], name="counter")
    f32 = as_float32
    rk = te.reduce_axis((0, k), name="rk")
    total = te.compute((1,), lambda _: te.sum(f32(counter[rk]), axis=rk), name=f"{STAGE}_total")
    inv_total = te.compute((1,), lambda _: te.const(1.0, "float32") / total[0], name=f"{STAGE}_inv_total")
    mean_dy = _per_channel("mean_dy", c, lambda ci: f32(stats["sum_dy"][ci]) * inv_total[0])
    invstd = lambda ci: f32(stats["invstd"][ci])  # noqa: E731
    factor = _per_channel("factor", c,
                          lambda ci: invstd(ci) * invstd(ci) * (f32(stats["sum_dy_xmu"][ci]) * inv_total[0]))
    scale = _per_channel("scale", c, lambda ci: invstd(ci) * f32(stats["weight"][ci]))
    dx = te.compute(
        (n, c, hw),
        lambda a, ci, i: (((f32(dy[a, ci, i]) - mean_dy[ci]) - (f32(x[a, ci, i]) - f32(stats["mean"][ci]))
                           * factor[ci]) * scale[ci]).astype(combo["dx"]),
        name=f"{STAGE}_dx")
    return [dy, x] + [stats[name] for name in STATS] + [counter, dx]


@dataclass(frozen=True)
class Problem(ChannelProblem):
    """One call: input's shape (the channel on axis 1) and the counter's shape.

    Spelling (every tool's ``--shape``): input's shape joined by ``x``, then, after a comma,
    the counter's (default ``1``: one rank), e.g. ``32x64x56x56,8``.
    """

    x_shape: tuple[int, ...]
    counter_shape: tuple[int, ...] = (1,)

    @property
    def K(self) -> int:
        return math.prod(self.counter_shape)

    def __str__(self) -> str:
        return f"input{list(self.x_shape)} counter{list(self.counter_shape)}"


def kernel_shapes(problem: Problem) -> dict:
    """The kernel's (N, C, HW) / (C,) / (K,) shape of each tensor."""
    big = (problem.N, problem.C, problem.HW)
    shapes = {"dy": big, "x": big, "dx": big, "counter": (problem.K,)}
    shapes.update({name: (problem.C,) for name in STATS})
    return shapes


def output_shapes(problem: Problem) -> dict:
    """The output a caller allocates: gradInput, input's shape."""
    return {"dx": problem.x_shape}


def random_inputs(problem: Problem, combo: DtypeCombo, rng: np.random.Generator) -> dict:
    """Inputs as a SyncBatchNorm's backward sees them on one of K ranks: mean and invstd of
    this batch (slightly offset: the all-reduced ones), each rank's count N x HW, and sumDy,
    sumDyXmu this batch's sums times K plus noise (the other ranks' share)."""
    x = (rng.standard_normal(problem.x_shape) * 2.0 + 0.5).astype(numpy_dtype(combo["x"]))
    dy = rng.standard_normal(problem.x_shape).astype(numpy_dtype(combo["dy"]))
    x3 = x.astype(np.float64).reshape(problem.N, problem.C, problem.HW)
    g3 = dy.astype(np.float64).reshape(x3.shape)
    ranks = max(problem.K, 1)
    if problem.N * problem.HW:
        mean, var = x3.mean(axis=(0, 2)), x3.var(axis=(0, 2))
    else:
        mean, var = np.zeros(problem.C), np.ones(problem.C)
    mean = mean + 0.05 * rng.standard_normal(problem.C)
    var = np.maximum(var, 0.1)    # one element per channel has none: invstd 316, invstd^3 past float16
    sum_dy = g3.sum(axis=(0, 2)) * ranks + rng.standard_normal(problem.C)
    sum_dy_xmu = (g3 * (x3 - mean[None, :, None])).sum(axis=(0, 2)) * ranks + rng.standard_normal(problem.C)
    stat = numpy_dtype(combo["mean"])
    return {"dy": dy, "x": x, "mean": mean.astype(stat), "invstd": (1.0 / np.sqrt(var + 1e-5)).astype(stat),
            "weight": rng.uniform(0.5, 1.5, problem.C).astype(stat), "sum_dy": sum_dy.astype(stat),
            "sum_dy_xmu": sum_dy_xmu.astype(stat),
            "counter": np.full(problem.counter_shape, max(problem.N * problem.HW, 1),
                               np.float64).astype(numpy_dtype(combo["counter"]))}


def kernel_args(problem: Problem, arrays: dict) -> dict:
    """View user-shaped arrays in the kernel's (N, C, HW) / (C,) / (K,) shapes."""
    shapes = kernel_shapes(problem)
    return {name: np.reshape(a, shapes[name]) for name, a in arrays.items() if name in shapes}
