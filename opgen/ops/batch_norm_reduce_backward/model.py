"""BatchNormReduceBackward's truth in sympy: what opgen.derive proves the TE against, and the
document's printed formulas (aclnnBatchNormReduceBackward.md l.36-54) judged by it.

mean and invstd are inputs (the all-reduced statistics of a SyncBatchNorm), constants of the
forward y = (x - mean) * invstd * weight + bias. With L = sum(dy * y):
  * grad_weight = dL/dweight, grad_bias = dL/dbias (per channel, over N and HW);
  * sum_dy = dL/dbias as well; sum_dy_xmu = dL'/ds of the centred forward y' = (x - mean) * s,
    the sum the elemt half needs before any scaling.
"""
from __future__ import annotations

from functools import lru_cache

import sympy

from opgen.symbolic import ProofModel, SeedCheck, Truth, equal, grad, grid, make_symbol, symbols

OP = "batch_norm_reduce_backward"
DOC = "aclnnBatchNormReduceBackward.md"


def _channel_sums(values: dict, n: int, c: int, hw: int) -> dict:
    """Per channel, keyed (c,): the sum of ``values`` (indexed (n, c, hw)) over n and hw."""
    return {(ci,): sympy.Add(*(values[a, ci, i] for a, i in grid(n, hw))) for ci in range(c)}


@lru_cache(maxsize=None)
def reduce_truth(n: int, c: int, hw: int) -> Truth:
    """sympy's derivatives of the forward's loss, per output element."""
    x, dy = symbols("x", n, c, hw), symbols("dy", n, c, hw)
    mean, invstd = symbols("mean", c), symbols("invstd", c)
    weight, bias, s = symbols("weight", c), symbols("bias", c), symbols("s", c)
    loss = sympy.Add(*(dy[i] * ((x[i] - mean[i[1],]) * invstd[i[1],] * weight[i[1],] + bias[i[1],]) for i in x))
    centred = sympy.Add(*(dy[i] * (x[i] - mean[i[1],]) * s[i[1],] for i in x))
    outputs = {"grad_weight": grad(loss, weight, {}), "grad_bias": grad(loss, bias, {}),
               "sum_dy": grad(loss, bias, {}), "sum_dy_xmu": grad(centred, s, {})}
    return Truth(outputs, {})


def seed_checks(n: int = 2, c: int = 2, hw: int = 2) -> list[SeedCheck]:
    """The document's four formulas, gradWeight in both its printed forms."""
    truth = reduce_truth(n, c, hw)
    g, x = symbols("dy", n, c, hw), symbols("x", n, c, hw)
    mean = {ci: make_symbol("mean", (ci,)) for ci in range(c)}
    invstd = {ci: make_symbol("invstd", (ci,)) for ci in range(c)}
    sum_g = _channel_sums(g, n, c, hw)
    sum_g_xmu = _channel_sums({i: g[i] * (x[i] - mean[i[1]]) for i in g}, n, c, hw)
    sum_g_xhat = _channel_sums({i: g[i] * (x[i] - mean[i[1]]) * invstd[i[1]] for i in g}, n, c, hw)

    def check(output, formula, candidate, detail):
        return SeedCheck(DOC, OP, output, formula, equal(candidate, truth, output), detail)
    return [
        check("grad_weight", "gradWeight = sum dl/dy_i * x_hat_i", sum_g_xhat, "x_hat = (x - mean) * invstd"),
        check("grad_weight", "gradWeight = 1/sqrt(var + eps) * sum dl/dy_i * (x_i - mean)",
              {k: invstd[k[0]] * v for k, v in sum_g_xmu.items()}, "1/sqrt(var + eps) is the invstd input"),
        check("grad_bias", "gradBias = sum dl/dy_i", sum_g, "summed per channel over N and HxW"),
        check("sum_dy", "sumDy = sum dl/dy_i", sum_g, "summed per channel over N and HxW"),
        check("sum_dy_xmu", "sumDyXmu = sum dl/dy_i * (x_i - mean)", sum_g_xmu, "no invstd: the elemt half scales it"),
    ]


MODEL = ProofModel(("N", "C", "HW"), reduce_truth, ((2, 2, 2), (1, 2, 3), (1, 1, 1)), seed_checks,
                   covers="dy, x, mean, invstd symbolic; sizes concrete; casts = identity (rounding not proven)")
