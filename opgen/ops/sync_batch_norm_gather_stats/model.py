"""SyncBatchNormGatherStats's truth in sympy: what opgen.derive proves the TE against, and the
document's printed formulas (aclnnSyncBatchNormGatherStats.md l.31-51) judged by it.

A forward op's truth is its outputs themselves, here the statistics of every rank's data
taken together. Rank w holds k_w = w + 1 symbolic values per channel (its sampleCount element
is bound to that number); its totalSum input is bound to their sum, its totalSquareSum to
the sum of their squares. batchMean is then the mean of all sum(k_w) values, batchInvstd
1/sqrt(their biased variance + eps).
"""
from __future__ import annotations

from functools import lru_cache

import sympy

from opgen.ops.batch_norm_gather_stats_with_counts.model import _moments, _ranks
from opgen.symbolic import EPS, FORWARD_COVERS, ProofModel, SeedCheck, Truth, equal, make_symbol

OP = "sync_batch_norm_gather_stats"
DOC = "aclnnSyncBatchNormGatherStats.md"


@lru_cache(maxsize=None)
def gather_truth(n: int, c: int, hw: int) -> Truth:
    """The global mean and invstd of n ranks' data, and the inputs bound to the ranks' sums."""
    data = _ranks(n, c)
    bind = {make_symbol("eps", (0,)): EPS}
    outputs = {"batch_mean": {}, "batch_invstd": {}}
    for ci in range(c):
        m, var = _moments([v for r in range(n) for v in data[r, ci]])
        outputs["batch_mean"][(ci,)] = m
        outputs["batch_invstd"][(ci,)] = 1 / sympy.sqrt(var + EPS)
        for r in range(n):
            bind[make_symbol("total_sum", (r, ci, 0))] = sympy.Add(*data[r, ci])
            bind[make_symbol("total_square_sum", (r, ci, 0))] = sympy.Add(*(v * v for v in data[r, ci]))
    bind.update({make_symbol("sample_count", (r,)): sympy.Integer(r + 1) for r in range(n)})
    return Truth(outputs, bind)


def seed_checks(w: int = 2, c: int = 1) -> list[SeedCheck]:
    """The document's batchMean, batchVar and batchInvstd (l.34-42), read literally."""
    truth = gather_truth(w, c, 1)
    k = sympy.Add(*(make_symbol("sample_count", (r,)) for r in range(w)))
    s = {ci: sympy.Add(*(make_symbol("total_sum", (r, ci, 0)) for r in range(w))) for ci in range(c)}
    q = {ci: sympy.Add(*(make_symbol("total_square_sum", (r, ci, 0)) for r in range(w))) for ci in range(c)}
    mean = {ci: s[ci] / k for ci in range(c)}
    var = {ci: q[ci] / k - mean[ci] ** 2 for ci in range(c)}

    def check(output, formula, candidate, detail):
        return SeedCheck(DOC, OP, output, formula, equal(candidate, truth, output), detail)
    return [
        check("batch_mean", "batchMean = sum totalSum / sum sampleCount", {(ci,): mean[ci] for ci in range(c)},
              "summed over the ranks"),
        check("batch_invstd", "batchInvstd = 1/sqrt(sum totalSquareSum / sum sampleCount - batchMean^2 + eps)",
              {(ci,): 1 / sympy.sqrt(var[ci] + EPS) for ci in range(c)}, "batchVar the biased variance"),
    ]


MODEL = ProofModel(("N", "C", "HW"), gather_truth, ((2, 2, 1), (3, 1, 1), (1, 2, 1)), seed_checks,
                   covers="each rank's data symbolic (rank w: w + 1 values), eps symbolic; " + FORWARD_COVERS.split(
                       "; ", 1)[1])
