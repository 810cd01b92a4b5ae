"""aclnnSyncBatchNormGatherStats: the math in TE and what a kernel sees: tensors, dtype combos, problem sizes.

The formulas and stage names are in the package docstring (opgen.ops.sync_batch_norm_gather_stats).

Canonical form: every rank's per-channel sums, totalSum and totalSquareSum (W, C), are seen
as (N, C, HW) with N = W ranks and HW = 1 (a reshape, never a copy), sampleCount (W,) as
(N,): aclnnBatchNormGatherStatsWithCounts's channel reduction (its ``gather_compute``, with
plain sums: a caller holding sums of x and x^2 has no shift to offer).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from opgen.dtypes import BFLOAT16, FLOAT16, FLOAT32, INT32, numpy_dtype
from opgen.lazy import te
from opgen.ops.batch_norm_gather_stats_with_counts.kernel import Problem as _RanksAndChannels
from opgen.ops.batch_norm_gather_stats_with_counts.kernel import gather_compute, random_counts
from opgen.ops.spec import DtypeCombo, as_float32

STAGE = "sync_batch_norm_gather_stats"
INPUTS = ("total_sum", "total_square_sum", "sample_count", "eps")
OUTPUTS = ("batch_mean", "batch_invstd")


def _combo(sums: str, out: str, count: str) -> DtypeCombo:
    """totalSum and totalSquareSum (and the running mean/variance, checked only) in ``sums``;
    batchMean and batchInvstd in ``out`` (the doc: alike, any float); sampleCount in
    ``count``. Tag: sums-outputs (``f16-f32``) with a FLOAT32 count, else sums-outputs-count
    (``f16-f32-i32``: an INT32 count, the document's example and what CANN's kernel reads), as
    aclnnBatchNormElemtBackward's counter."""
    dtypes = {"total_sum": sums, "total_square_sum": sums, "sample_count": count, "eps": FLOAT32,
              "batch_mean": out, "batch_invstd": out}
    keys = ("total_sum", "batch_mean") if count == FLOAT32 else ("total_sum", "batch_mean", "sample_count")
    return DtypeCombo(tuple(dtypes.items()), key_tensors=keys)


_ROWS = ((FLOAT32, FLOAT32), (FLOAT16, FLOAT16), (FLOAT16, FLOAT32), (BFLOAT16, BFLOAT16), (BFLOAT16, FLOAT32))
# sampleCount: FLOAT32 (a count held as a float) and INT32 (what the op_api casts every
# count to, l.209); the op_api's FLOAT16/BFLOAT16 counts are not opgen rows (validation-vs-cann S3).
_COUNTS = (FLOAT32, INT32)
COMBOS = tuple(_combo(s, o, k) for s, o in _ROWS for k in _COUNTS)
F32 = COMBOS[0]
# The document: Ascend 950, Atlas A3 and A2 (doc l.5-24); BFLOAT16 sums and outputs on the
# Ascend 950 only (doc l.221; op_api l.40-50, IsRegbase l.71).
PRODUCTS = {
    "Ascend950": COMBOS,
    "AtlasA3": tuple(c for c in COMBOS if BFLOAT16 not in (c["total_sum"], c["batch_mean"])),
    "AtlasA2": tuple(c for c in COMBOS if BFLOAT16 not in (c["total_sum"], c["batch_mean"])),
}


def compute(combo: DtypeCombo) -> list[te.Tensor]:
    """TE over symbolic (N, C, HW); returns the inputs (INPUTS order) then batchMean, batchInvstd.

    The count is summed in float32 (exact below 2^24 elements), as CANN sums the int32
    counts in int64 and converts the total once."""
    n, c, hw = (te.var(v, "int64") for v in ("N", "C", "HW"))
    f32 = as_float32
    total_sum = te.placeholder((n, c, hw), combo["total_sum"], name="total_sum")
    total_square_sum = te.placeholder((n, c, hw), combo["total_square_sum"], name="total_square_sum")
    sample_count = te.placeholder((n,), combo["sample_count"], name="sample_count")
    eps = te.placeholder((1,), combo["eps"], name="eps")
    mean32, invstd32 = gather_compute(
        STAGE, n, c, hw, lambda a: f32(sample_count[a]),
        lambda a, ci, i: f32(total_sum[a, ci, i]), lambda a, ci, i: f32(total_square_sum[a, ci, i]),
        lambda ci: te.const(0.0, "float32"), eps)
    batch_mean = te.compute((c,), lambda ci: mean32[ci].astype(combo["batch_mean"]), name=f"{STAGE}_batch_mean")
    batch_invstd = te.compute((c,), lambda ci: invstd32[ci].astype(combo["batch_invstd"]),
                              name=f"{STAGE}_batch_invstd")
    return [total_sum, total_square_sum, sample_count, eps, batch_mean, batch_invstd]


@dataclass(frozen=True)
class Problem(_RanksAndChannels):
    """One call: W ranks' sums over C channels, and the attribute eps (``WxC[,EPS]``, as
    aclnnBatchNormGatherStatsWithCounts's). momentum is 0: opgen updates no running
    statistics (api.py)."""


def kernel_shapes(problem) -> dict:
    """The kernel's (N, C, 1) / (N,) / (C,) / (1,) shape of each tensor (N = W ranks)."""
    sums, chan = (problem.W, problem.C, 1), (problem.C,)
    return {"total_sum": sums, "total_square_sum": sums, "sample_count": (problem.W,), "eps": (1,),
            "batch_mean": chan, "batch_invstd": chan}


def output_shapes(problem) -> dict:
    """The outputs a caller allocates: batchMean and batchInvstd, (C,)."""
    return {"batch_mean": (problem.C,), "batch_invstd": (problem.C,)}


def random_inputs(problem: Problem, combo: DtypeCombo, rng: np.random.Generator) -> dict:
    """Inputs in the user's shapes: each rank's sums of k values of a channel with mean in
    [-1, 1] and std near 1 (|mean| ~ std: the plain sums the document prescribes keep their
    digits there), counts that differ (one 0 from 3 ranks on); the running mean and variance
    (checked, not read) near them."""
    w, c = problem.W, problem.C
    sums = numpy_dtype(combo["total_sum"])
    counts = random_counts(w, rng)
    if not counts.any():
        counts[0] = 1.0
    mean = rng.uniform(-1, 1, c) + 0.1 * rng.standard_normal((w, c))
    var = rng.uniform(0.5, 2.0, (w, c))
    k = counts[:, None]
    return {"total_sum": (k * mean).astype(sums), "total_square_sum": (k * (var + mean * mean)).astype(sums),
            "sample_count": counts.astype(numpy_dtype(combo["sample_count"])),
            "mean": rng.uniform(-1, 1, c).astype(sums), "variance": rng.uniform(0.5, 2, c).astype(sums),
            "eps": np.full((1,), problem.eps, np.float32)}


def kernel_args(problem: Problem, arrays: dict) -> dict:
    """View user-shaped arrays in the kernel's shapes (mean and variance, never read, are left out)."""
    shapes = kernel_shapes(problem)
    return {name: np.reshape(a, shapes[name]) for name, a in arrays.items() if name in shapes}
