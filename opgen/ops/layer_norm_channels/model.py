"""LayerNormChannels's forward in sympy: the truth opgen.derive proves the forward TE against.

A forward op's truth is its outputs themselves: y, mean and rstd written over x's (N, C, HW)
indices, E[x] and the biased Var[x] over the C values of each (n, p), with the kernel's eps
input bound to the model's eps.
"""
from __future__ import annotations

from functools import lru_cache

import sympy

from opgen.symbolic import EPS, FORWARD_COVERS, ProofModel, Truth, grid, make_symbol, symbols


@lru_cache(maxsize=None)
def layer_norm_channels_forward_truth(n: int, c: int, hw: int) -> Truth:
    """y = (x - E[x]) / sqrt(Var[x] + eps) * gamma[c] + beta[c], E and Var over c per (n, p)."""
    x, gamma, beta = symbols("x", n, c, hw), symbols("gamma", c), symbols("beta", c)
    mean, rstd, y = {}, {}, {}
    for a, p in grid(n, hw):
        values = [x[(a, k, p)] for k in range(c)]
        mean[(a, p)] = sympy.Add(*values) / c
        rstd[(a, p)] = 1 / sympy.sqrt(sympy.Add(*((v - mean[(a, p)]) ** 2 for v in values)) / c + EPS)
        for k in range(c):
            y[(a, k, p)] = (x[(a, k, p)] - mean[(a, p)]) * rstd[(a, p)] * gamma[(k,)] + beta[(k,)]
    return Truth({"y": y, "mean": mean, "rstd": rstd}, {make_symbol("eps", (0,)): EPS})


MODEL = ProofModel(("N", "C", "HW"), layer_norm_channels_forward_truth, ((1, 3, 2), (2, 2, 1), (1, 1, 2)),
                   covers=FORWARD_COVERS)
