"""BatchNormReduce's truth in sympy: what opgen.derive proves the TE against, and the
document's printed formulas (aclnnBatchNormReduce.md, 功能说明) judged by it.

A forward op's truth is its outputs themselves: per channel c, over the batch and spatial
axes (the kernel's N and HW), sum_c = sum x and squareSum_c = sum x^2. The seed checks hold
the document's two formulas against it, and a misreading the name invites (the square of the
sum) against it too, so that a check that cannot fail would show.
"""
from __future__ import annotations

from functools import lru_cache

import sympy

from opgen.symbolic import ProofModel, SeedCheck, Truth, equal, grid, symbols

OP = "batch_norm_reduce"
DOC = "aclnnBatchNormReduce.md"


def _channel_sums(values: dict, n: int, c: int, hw: int) -> dict:
    """Per channel, keyed (c,): the sum of ``values`` (indexed (n, c, hw)) over n and hw."""
    return {(ci,): sympy.Add(*(values[a, ci, i] for a, i in grid(n, hw))) for ci in range(c)}


@lru_cache(maxsize=None)
def reduce_truth(n: int, c: int, hw: int) -> Truth:
    """The two outputs, per channel."""
    x = symbols("x", n, c, hw)
    return Truth({"sum": _channel_sums(x, n, c, hw), "square_sum": _channel_sums({i: v ** 2 for i, v in x.items()},
                                                                                n, c, hw)}, {})


def seed_checks(n: int = 2, c: int = 2, hw: int = 2) -> list[SeedCheck]:
    """The document's sum and squareSum formulas, and squareSum misread as the sum squared."""
    truth = reduce_truth(n, c, hw)
    x = symbols("x", n, c, hw)
    sums = _channel_sums(x, n, c, hw)
    squares = _channel_sums({i: v * v for i, v in x.items()}, n, c, hw)

    def check(output, formula, candidate, detail):
        return SeedCheck(DOC, OP, output, formula, equal(candidate, truth, output), detail)
    return [
        check("sum", "sum_i = sum_n sum_h sum_w x_(n,i,h,w)", sums, "every axis but C"),
        check("square_sum", "squareSum_i = sum_n sum_h sum_w x_(n,i,h,w)^2", squares, "every axis but C"),
        check("square_sum", "squareSum_i = (sum_n sum_h sum_w x_(n,i,h,w))^2", {k: v ** 2 for k, v in sums.items()},
              "a misreading: the square of the sum"),
    ]


MODEL = ProofModel(("N", "C", "HW"), reduce_truth, ((2, 2, 2), (1, 2, 3), (1, 1, 1)), seed_checks,
                   covers="x symbolic; both outputs equal to the document's formulas; sizes concrete; "
                          "casts = identity (rounding not proven)")
