"""GroupNorm's forward in sympy: the truth opgen.derive proves the forward TE against.

A forward op's truth is its outputs themselves: y, mean and rstd as aclnnGroupNorm prints
them (the variance about the mean, divided by the group's D * HW elements), with the
kernel's eps input bound to the model's eps.
"""
from __future__ import annotations

from functools import lru_cache

import sympy

from opgen.symbolic import EPS, FORWARD_COVERS, ProofModel, Truth, grid, make_symbol, symbols


@lru_cache(maxsize=None)
def group_norm_forward_truth(n: int, g: int, d: int, hw: int) -> Truth:
    """y = (x - E[x]) / sqrt(Var[x] + eps) * gamma + beta per group of D * HW elements."""
    x, gamma, beta = symbols("x", n, g, d, hw), symbols("gamma", g, d), symbols("beta", g, d)
    members = {ng: [(*ng, c, h) for c, h in grid(d, hw)] for ng in grid(n, g)}
    mean = {ng: sympy.Add(*(x[i] for i in m)) / (d * hw) for ng, m in members.items()}
    rstd = {ng: 1 / sympy.sqrt(sympy.Add(*((x[i] - mean[ng]) ** 2 for i in m)) / (d * hw) + EPS)
            for ng, m in members.items()}
    y = {i: (x[i] - mean[i[:2]]) * rstd[i[:2]] * gamma[i[1:3]] + beta[i[1:3]] for i in x}
    return Truth({"y": y, "mean": mean, "rstd": rstd}, {make_symbol("eps", (0,)): EPS})


MODEL = ProofModel(("N", "G", "D", "HW"), group_norm_forward_truth, ((2, 2, 2, 2), (1, 1, 2, 3)),
                   covers=FORWARD_COVERS)
