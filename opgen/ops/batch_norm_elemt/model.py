"""BatchNormElemt's truth in sympy: what opgen.derive proves the TE against, and the
document's printed formula (aclnnBatchNormElemt.md, 功能说明) judged by it.

A forward op's truth is its output itself: y = (x - mean) * invstd * weight + bias per channel,
mean and invstd inputs (the all-reduced statistics of a SyncBatchNorm). The document prints
y = (x - E[x]) / sqrt(Var(x) + eps) * weight + bias with 1/S = 1/sqrt(Var(x) + eps) the invstd
input; the seed checks hold that reading, CANN's own route through a variance (the op_api's
var = 1/invstd^2 - eps, then BatchNorm's 1/sqrt(var + eps)), and a misreading (invstd taken as
the standard deviation S and divided by) against the truth.
"""
from __future__ import annotations

from functools import lru_cache

import sympy

from opgen.symbolic import EPS, ProofModel, SeedCheck, Truth, equal, make_symbol, symbols

OP = "batch_norm_elemt"
DOC = "aclnnBatchNormElemt.md"


def _invstd(c: int) -> sympy.Symbol:
    """invstd_c, positive (the doc: every element greater than 0), so that
    (invstd^-2)^(-1/2) folds back to invstd."""
    return sympy.Symbol(f"invstd_{c}", positive=True)


@lru_cache(maxsize=None)
def elemt_truth(n: int, c: int, hw: int) -> Truth:
    """y per element; invstd bound to a positive symbol."""
    x, weight, bias, mean = symbols("x", n, c, hw), symbols("weight", c), symbols("bias", c), symbols("mean", c)
    y = {i: (x[i] - mean[i[1],]) * _invstd(i[1]) * weight[i[1],] + bias[i[1],] for i in x}
    bind = {make_symbol("invstd", (ci,)): _invstd(ci) for ci in range(c)}
    return Truth({"y": y}, bind)


def seed_checks(n: int = 2, c: int = 2, hw: int = 2) -> list[SeedCheck]:
    """The document's formula with 1/sqrt(Var + eps) = invstd, CANN's variance round trip, and a
    misreading."""
    truth = elemt_truth(n, c, hw)
    x, weight, bias, mean = symbols("x", n, c, hw), symbols("weight", c), symbols("bias", c), symbols("mean", c)
    inv = {ci: make_symbol("invstd", (ci,)) for ci in range(c)}

    def formula(scale):
        return {i: (x[i] - mean[i[1],]) * scale(i[1]) * weight[i[1],] + bias[i[1],] for i in x}

    def check(text, candidate, detail):
        return SeedCheck(DOC, OP, "y", text, equal(candidate, truth, "y"), detail)
    round_trip = formula(lambda ci: 1 / sympy.sqrt((1 / _invstd(ci) ** 2 - EPS) + EPS))
    return [
        check("y = (x - E[x]) / sqrt(Var(x) + eps) * weight + bias, 1/sqrt(Var(x) + eps) = invstd",
              formula(lambda ci: inv[ci]), "the invstd input is 1/S"),
        check("y = (x - mean) / sqrt(var + eps) * weight + bias, var = 1/invstd^2 - eps (the op_api, l.174-201)",
              round_trip, "eps cancels: the kernel need not read it"),
        check("y = (x - mean) / invstd * weight + bias", formula(lambda ci: 1 / inv[ci]),
              "a misreading: invstd taken as the standard deviation S"),
    ]


MODEL = ProofModel(("N", "C", "HW"), elemt_truth, ((2, 2, 2), (1, 2, 3), (1, 1, 1)), seed_checks,
                   covers="x, weight, bias, mean, invstd (positive) symbolic; sizes concrete; "
                          "casts = identity (rounding not proven)")
