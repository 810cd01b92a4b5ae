"""LayerNormChannels's forward in sympy: the truth opgen.derive proves the backward TE
against (sympy's derivative of it, the forward's (var + eps) replaced by rstd^-2 and its mean
by the mean input)."""
from __future__ import annotations

from functools import lru_cache

import sympy

from opgen.symbolic import EPS, ProofModel, Truth, grad, grid, make_symbol, symbols


@lru_cache(maxsize=None)
def layer_norm_channels_truth(n: int, c: int, hw: int) -> Truth:
    """loss = sum dy * ((x - mean) * rstd(x) * gamma[c] + beta[c]), mean and the biased
    variance over c per (n, p)."""
    x, dy = symbols("x", n, c, hw), symbols("dy", n, c, hw)
    gamma, beta = symbols("gamma", c), symbols("beta", c)
    mean = {(a, p): sympy.Add(*(x[(a, k, p)] for k in range(c))) / c for a, p in grid(n, hw)}
    base = {(a, p): sympy.Add(*((x[(a, k, p)] - mean[(a, p)]) ** 2 for k in range(c))) / c + EPS
            for a, p in grid(n, hw)}
    loss = sympy.Add(*(dy[(a, k, p)] * ((x[(a, k, p)] - mean[(a, p)]) * base[(a, p)] ** sympy.Rational(-1, 2)
                                        * gamma[(k,)] + beta[(k,)]) for a, k, p in grid(n, c, hw)))
    stat = {base[i]: make_symbol("rstd", i) ** -2 for i in base}
    outputs = {"dx": grad(loss, x, stat), "dgamma": grad(loss, gamma, stat), "dbeta": grad(loss, beta, stat)}
    return Truth(outputs, {make_symbol("mean", i): mean[i] for i in mean})


MODEL = ProofModel(("N", "C", "HW"), layer_norm_channels_truth, ((1, 3, 2), (2, 2, 1), (1, 1, 2)))
