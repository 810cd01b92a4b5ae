"""aclnnBatchNormGatherStatsWithCounts: the math in TE and what a kernel sees: tensors, dtype combos, problem sizes.

The formulas and stage names are in the package docstring (opgen.ops.batch_norm_gather_stats_with_counts).

Canonical form: every rank's statistics, mean and invstd (W, C), are seen as (N, C, HW) with
N = W ranks and HW = 1 (a reshape, never a copy), counts (W,) as (N,): the gather is then a
per-channel sum over N, the channel pattern's reduce half (schedules/patterns.py,
``channel_reduction``) with a one-element spatial axis.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from opgen.dtypes import BFLOAT16, FLOAT16, FLOAT32, numpy_dtype
from opgen.lazy import te
from opgen.ops.batch_norm_backward.kernel import _per_channel_sum
from opgen.ops.spec import DtypeCombo, ProblemBase, as_float32

STAGE = "batch_norm_gather_stats_with_counts"
INPUTS = ("mean", "invstd", "counts", "eps")
OUTPUTS = ("mean_all", "invstd_all")


def _combo(stats: str, out: str) -> DtypeCombo:
    """mean, invstd and counts share ``stats`` (torch's SyncBatchNorm passes counts in mean's
    dtype); meanAll and invstdAll share ``out``, the statistics' dtype or float32. Tag:
    statistics-outputs (``f16-f32``)."""
    dtypes = {"mean": stats, "invstd": stats, "counts": stats, "eps": FLOAT32, "mean_all": out, "invstd_all": out}
    return DtypeCombo(tuple(dtypes.items()), key_tensors=("mean", "mean_all"))


F32 = _combo(FLOAT32, FLOAT32)
F16, F16_F32 = _combo(FLOAT16, FLOAT16), _combo(FLOAT16, FLOAT32)
BF16, BF16_F32 = _combo(BFLOAT16, BFLOAT16), _combo(BFLOAT16, FLOAT32)
COMBOS = (F32, F16, F16_F32, BF16, BF16_F32)
# The document: every tensor FLOAT32/FLOAT16/BFLOAT16 on the Ascend 950 and Atlas A2/A3, no
# BFLOAT16 on Atlas training (doc l.228; op_api DTYPE_SUPPORT_910_LIST l.62); Atlas inference
# and 200I/500 A2 do not offer it. The op_api casts every tensor to float32 on its own, so any
# mix passes CANN; opgen's kernels take these rows (docs/validation-vs-cann.md, G3).
PRODUCTS = {
    "Ascend950": COMBOS,
    "AtlasA3": COMBOS,
    "AtlasA2": COMBOS,
    "AtlasTraining": (F32, F16, F16_F32),
}


def gather_compute(stage: str, n, c, hw, count_of, sum_of, sumsq_of, shift_of, eps, no_rank_zero: bool = True):
    """The per-channel gather shared with aclnnSyncBatchNormGatherStats: from each rank's count
    (``count_of(a)``), its sum and square sum about a shift (``sum_of(a, ci, i)``,
    ``sumsq_of(a, ci, i)``, each already weighted by the count) and the shift itself
    (``shift_of(ci)``, a per-channel statistic reading no sum), the global mean and
    1/sqrt(var + eps), in float32. Returns (mean32, invstd32).

    The shifted sums are what keep the variance's digits when |mean| >> std (the
    cancellation of E[(x-K)^2] - E[x-K]^2 costs little, of E[x^2] - E[x]^2 everything): a
    shift of 0 is the plain form, which is all a caller holding plain sums can do.
    ``no_rank_zero``: the mean of no rank (N = 0) is 0, a size-guarded select; an op whose
    rules refuse N = 0 goes without it."""
    count = _per_channel_sum(f"{stage}_count", n, c, hw, lambda a, ci, i: count_of(a))
    total = _per_channel_sum(f"{stage}_sum", n, c, hw, sum_of)
    squares = _per_channel_sum(f"{stage}_sumsq", n, c, hw, sumsq_of)
    # No rank at all (N = 0, what CANN's op_api answers with a mean of 0, l.438-446): the
    # mean is 0, not 0/0; a zero total count over ranks that exist stays 0/0 (NaN), as CANN.
    def mean_of(ci):
        value = shift_of(ci) + total[ci] / count[ci]
        return te.if_then_else(n > 0, value, te.const(0.0, "float32")) if no_rank_zero else value
    mean = te.compute((c,), mean_of, name=f"{stage}_mean32")
    var = te.compute((c,), lambda ci: squares[ci] / count[ci] - (total[ci] / count[ci]) * (total[ci] / count[ci]),
                     name=f"{stage}_var32")
    invstd = te.compute((c,), lambda ci: te.rsqrt(var[ci] + eps[0]), name=f"{stage}_invstd32")
    return mean, invstd


def compute(combo: DtypeCombo) -> list[te.Tensor]:
    """TE over symbolic (N, C, HW); returns the inputs (INPUTS order) then meanAll, invstdAll.

    Each rank's variance is 1/invstd^2 - eps (its forward's eps: the same attribute), its
    contribution counts * (var + (mean - shift)^2); the shift is rank 0's mean."""
    n, c, hw = (te.var(v, "int64") for v in ("N", "C", "HW"))
    f32 = as_float32
    mean = te.placeholder((n, c, hw), combo["mean"], name="mean")
    invstd = te.placeholder((n, c, hw), combo["invstd"], name="invstd")
    counts = te.placeholder((n,), combo["counts"], name="counts")
    eps = te.placeholder((1,), combo["eps"], name="eps")
    shift = te.compute((c,), lambda ci: te.if_then_else(n * hw > 0, f32(mean[0, ci, 0]), te.const(0.0, "float32")),
                       name=f"{STAGE}_shift")

    def dev(a, ci, i):
        return f32(mean[a, ci, i]) - shift[ci]

    def var_of(a, ci, i):
        r = f32(invstd[a, ci, i])
        return te.const(1.0, "float32") / (r * r) - eps[0]

    mean32, invstd32 = gather_compute(
        STAGE, n, c, hw, lambda a: f32(counts[a]),
        lambda a, ci, i: f32(counts[a]) * dev(a, ci, i),
        lambda a, ci, i: f32(counts[a]) * (var_of(a, ci, i) + dev(a, ci, i) * dev(a, ci, i)),
        lambda ci: shift[ci], eps)
    mean_all = te.compute((c,), lambda ci: mean32[ci].astype(combo["mean_all"]), name=f"{STAGE}_mean_all")
    invstd_all = te.compute((c,), lambda ci: invstd32[ci].astype(combo["invstd_all"]), name=f"{STAGE}_invstd_all")
    return [mean, invstd, counts, eps, mean_all, invstd_all]


@dataclass(frozen=True)
class Problem(ProblemBase):
    """One call: W ranks' statistics of C channels, and the attribute eps.

    Spelling (every tool's ``--shape``): ``WxC`` (``8x1024``), optionally ``,EPS``. input,
    whose shape the op reads only for C (its channel axis, axis 1), is (2, C) in the tools'
    calls. momentum is 0: opgen updates no running statistics (api.py)."""

    W: int
    C: int
    eps: float = 1e-5

    momentum = 0.0

    @property
    def x_shape(self) -> tuple:
        """The input tensor's shape in the tools' calls (its channel axis is all the op reads)."""
        return (2, self.C)

    @classmethod
    def parse(cls, text: str) -> "Problem":
        parts = [p.strip() for p in str(text).strip().strip("()").split(",")]
        try:
            w, c = (int(d) for d in parts[0].lower().split("x"))
            eps = float(parts[1]) if len(parts) > 1 else 1e-5
        except ValueError:
            raise ValueError(f"cannot read {text!r} as {cls.__name__}: expected WxC (ranks x channels, e.g. "
                             f"8x1024), optionally ,EPS") from None
        return cls(w, c, eps)

    def label(self) -> str:
        return f"{self.W}x{self.C}" + ("" if self.eps == 1e-5 else f",{self.eps:g}")

    def __str__(self) -> str:
        return f"W={self.W}, C={self.C}, eps={self.eps:g}"


def kernel_shapes(problem) -> dict:
    """The kernel's (N, C, 1) / (N,) / (C,) / (1,) shape of each tensor (N = W ranks)."""
    stats, chan = (problem.W, problem.C, 1), (problem.C,)
    return {"mean": stats, "invstd": stats, "counts": (problem.W,), "eps": (1,), "mean_all": chan,
            "invstd_all": chan}


def output_shapes(problem) -> dict:
    """The outputs a caller allocates: meanAll and invstdAll, (C,)."""
    return {"mean_all": (problem.C,), "invstd_all": (problem.C,)}


def random_counts(w: int, rng: np.random.Generator) -> np.ndarray:
    """Per-rank element counts that differ (a SyncBatchNorm's last, smaller batch), one of
    them 0 where there are 3 ranks or more (a rank with an empty batch)."""
    counts = rng.integers(1, 200, w).astype(np.float64)
    if w >= 3:
        counts[w // 2] = 0
    return counts


def random_inputs(problem: Problem, combo: DtypeCombo, rng: np.random.Generator) -> dict:
    """Inputs in the user's shapes: each rank's mean off-centre (|mean| about 3 x std, where
    the plain E[x^2] - E[x]^2 form starts to lose digits) and invstd of a std near 1."""
    stats = numpy_dtype(combo["mean"])
    w, c = problem.W, problem.C
    centre = rng.uniform(-3, 3, c)
    mean = centre + 0.3 * rng.standard_normal((w, c))
    invstd = 1.0 / np.sqrt(rng.uniform(0.5, 2.0, (w, c)) + problem.eps)
    return {"input": np.ones(problem.x_shape, stats), "mean": mean.astype(stats), "invstd": invstd.astype(stats),
            "counts": random_counts(w, rng).astype(stats), "eps": np.full((1,), problem.eps, np.float32)}


def kernel_args(problem: Problem, arrays: dict) -> dict:
    """View user-shaped arrays in the kernel's shapes (input, never read, is left out)."""
    shapes = kernel_shapes(problem)
    return {name: np.reshape(a, shapes[name]) for name, a in arrays.items() if name in shapes}
