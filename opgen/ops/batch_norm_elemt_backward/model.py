"""BatchNormElemtBackward's truth in sympy: what opgen.derive proves the TE against, and the
document's printed formula (aclnnBatchNormElemtBackward.md l.29-33) judged by it.

The forward is BatchNorm's in training, y = (x - mean) * rstd * weight + bias, mean and the
biased variance over a channel's N x HW elements, rstd = (var + eps)^(-1/2); L = sum(dy * y).
The elemt half gets the reduce half's results as inputs, bound to the forward here: mean to the
batch mean, invstd to a positive rstd symbol standing for the (var + eps) subtree, sumDy to
sum dy, sumDyXmu to sum dy * (x - mean), and the counter's K elements to counts summing to
N x HW (K ranks' shares of the batch: the op sums the counter whole). gradInput is then
dL/dx with mean and var functions of x.
"""
from __future__ import annotations

from functools import lru_cache

import sympy

from opgen.symbolic import EPS, ProofModel, SeedCheck, Truth, equal, grad, grid, make_symbol, symbols

OP = "batch_norm_elemt_backward"
DOC = "aclnnBatchNormElemtBackward.md"


def _rstd(c: int) -> sympy.Symbol:
    return sympy.Symbol(f"invstd_{c}", positive=True)


def _channel_sums(values: dict, n: int, c: int, hw: int) -> dict:
    return {ci: sympy.Add(*(values[a, ci, i] for a, i in grid(n, hw))) for ci in range(c)}


@lru_cache(maxsize=None)
def elemt_truth(n: int, c: int, hw: int, k: int) -> Truth:
    """sympy's dL/dx of the training forward, and the bindings of the kernel's inputs."""
    x, dy = symbols("x", n, c, hw), symbols("dy", n, c, hw)
    weight, bias = symbols("weight", c), symbols("bias", c)
    m = n * hw
    mean = {ci: s / m for ci, s in _channel_sums(x, n, c, hw).items()}
    base = {ci: s / m + EPS for ci, s in _channel_sums({i: (x[i] - mean[i[1]]) ** 2 for i in x}, n, c, hw).items()}
    stat = {base[ci]: _rstd(ci) ** -2 for ci in range(c)}
    loss = sympy.Add(*(dy[i] * ((x[i] - mean[i[1]]) * base[i[1]] ** sympy.Rational(-1, 2) * weight[i[1],]
                                + bias[i[1],]) for i in x))
    bind = {make_symbol("mean", (ci,)): mean[ci] for ci in range(c)}
    bind.update({make_symbol("invstd", (ci,)): _rstd(ci) for ci in range(c)})
    bind.update({make_symbol("sum_dy", (ci,)): s for ci, s in _channel_sums(dy, n, c, hw).items()})
    bind.update({make_symbol("sum_dy_xmu", (ci,)): s for ci, s in _channel_sums(
        {i: dy[i] * (x[i] - mean[i[1]]) for i in x}, n, c, hw).items()})
    bind.update({make_symbol("counter", (j,)): sympy.Rational(m, k) for j in range(k)})
    return Truth({"dx": grad(loss, x, stat)}, bind)


def seed_checks(n: int = 2, c: int = 2, hw: int = 2, k: int = 2) -> list[SeedCheck]:
    """The document's formula, its counter read two ways: the sum of the counter (the
    op_api's ReduceSum) and one element of it (one rank's count)."""
    truth = elemt_truth(n, c, hw, k)
    g, x = symbols("dy", n, c, hw), symbols("x", n, c, hw)
    per = {name: {ci: make_symbol(name, (ci,)) for ci in range(c)}
           for name in ("mean", "invstd", "weight", "sum_dy", "sum_dy_xmu")}
    counters = [make_symbol("counter", (j,)) for j in range(k)]

    def formula(count):
        return {i: ((g[i] - per["sum_dy"][i[1]] / count) - (x[i] - per["mean"][i[1]])
                    * (per["invstd"][i[1]] ** 2 * (per["sum_dy_xmu"][i[1]] / count)))
                * per["invstd"][i[1]] * per["weight"][i[1]] for i in g}
    text = "gradInput = ((gradOut - sumDy/counter) - (input - mean) * (invstd^2 * (sumDyXmu/counter))) * invstd * weight"
    return [
        SeedCheck(DOC, OP, "dx", f"{text}, counter = the sum of the counter tensor",
                  equal(formula(sympy.Add(*counters)), truth, "dx"),
                  "the op_api ReduceSums the whole counter (l.246-283): every rank's count"),
        SeedCheck(DOC, OP, "dx", f"{text}, counter = one element of it (one rank's count)",
                  equal(formula(counters[0]), truth, "dx"),
                  "wrong with more than one rank: the mean needs the total count"),
    ]


MODEL = ProofModel(("N", "C", "HW", "K"), elemt_truth, ((2, 2, 2, 1), (1, 2, 3, 2), (1, 1, 1, 1)), seed_checks,
                   covers="dy, x, weight, invstd symbolic; mean, sumDy, sumDyXmu, counter bound to the forward; "
                          "sizes concrete; casts = identity (rounding not proven)")
