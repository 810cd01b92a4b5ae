"""BatchNormGatherStatsWithCounts's truth in sympy: what opgen.derive proves the TE against, and
the document's printed formulas (aclnnBatchNormGatherStatsWithCounts.md l.34-48) judged by it.

A forward op's truth is its outputs themselves, here the statistics of every rank's data
taken together. Rank w holds k_w = w + 1 symbolic values per channel (its counts element is
bound to that number); its mean input is bound to their mean and its invstd input to
1/sqrt(var_w + eps) (the biased variance, as aclnnBatchNormStats saves it). meanAll is then
the mean of all sum(k_w) values, invstdAll 1/sqrt(their biased variance + eps): the gather
must recover what one device holding the whole batch would compute.
"""
from __future__ import annotations

from functools import lru_cache

import sympy

from opgen.symbolic import EPS, FORWARD_COVERS, ProofModel, SeedCheck, Truth, equal, make_symbol

OP = "batch_norm_gather_stats_with_counts"
DOC = "aclnnBatchNormGatherStatsWithCounts.md"


def _ranks(w: int, c: int) -> dict:
    """(rank, channel) -> that rank's values of the channel: k_w = w + 1 symbols."""
    return {(r, ci): [make_symbol("x", (r, ci, j)) for j in range(r + 1)] for r in range(w) for ci in range(c)}


def _moments(values: list) -> tuple:
    m = sympy.Add(*values) / len(values)
    return m, sympy.Add(*((v - m) ** 2 for v in values)) / len(values)


@lru_cache(maxsize=None)
def gather_truth(n: int, c: int, hw: int) -> Truth:
    """The global mean and invstd of n ranks' data, and the inputs bound to the ranks' statistics."""
    data = _ranks(n, c)
    bind = {make_symbol("eps", (0,)): EPS}
    outputs = {"mean_all": {}, "invstd_all": {}}
    for ci in range(c):
        everything = [v for r in range(n) for v in data[r, ci]]
        m, var = _moments(everything)
        outputs["mean_all"][(ci,)] = m
        outputs["invstd_all"][(ci,)] = 1 / sympy.sqrt(var + EPS)
        for r in range(n):
            rm, rv = _moments(data[r, ci])
            bind[make_symbol("mean", (r, ci, 0))] = rm
            bind[make_symbol("invstd", (r, ci, 0))] = 1 / sympy.sqrt(rv + EPS)
    bind.update({make_symbol("counts", (r,)): sympy.Integer(r + 1) for r in range(n)})
    return Truth(outputs, bind)


def seed_checks(w: int = 2, c: int = 1) -> list[SeedCheck]:
    """The document prints BatchNorm's forward and the running update, not the gather: its
    E[x] and Var(x) read as the count-weighted mean of the ranks' means and the count-weighted
    mean of their variances plus the spread of their means (the law of total variance)."""
    truth = gather_truth(w, c, 1)
    k = [make_symbol("counts", (r,)) for r in range(w)]
    total = sympy.Add(*k)
    mean = {ci: [make_symbol("mean", (r, ci, 0)) for r in range(w)] for ci in range(c)}
    var = {ci: [make_symbol("invstd", (r, ci, 0)) ** -2 - EPS for r in range(w)] for ci in range(c)}
    ex = {ci: sympy.Add(*(k[r] * mean[ci][r] for r in range(w))) / total for ci in range(c)}
    within = {ci: sympy.Add(*(k[r] * var[ci][r] for r in range(w))) / total for ci in range(c)}
    between = {ci: sympy.Add(*(k[r] * (mean[ci][r] - ex[ci]) ** 2 for r in range(w))) / total for ci in range(c)}

    def check(output, formula, candidate, detail):
        return SeedCheck(DOC, OP, output, formula, equal(candidate, truth, output), detail)
    return [
        check("mean_all", "E[x] = sum counts * mean / sum counts", {(ci,): ex[ci] for ci in range(c)},
              "the ranks' means weighted by their counts"),
        check("invstd_all", "1/sqrt(Var(x) + eps), Var(x) = E[var] + Var[mean] over the ranks",
              {(ci,): 1 / sympy.sqrt(within[ci] + between[ci] + EPS) for ci in range(c)},
              "each rank's var = 1/invstd^2 - eps"),
    ]


MODEL = ProofModel(("N", "C", "HW"), gather_truth, ((2, 2, 1), (3, 1, 1), (1, 2, 1)), seed_checks,
                   covers="each rank's data symbolic (rank w: w + 1 values), eps symbolic; " + FORWARD_COVERS.split(
                       "; ", 1)[1])
