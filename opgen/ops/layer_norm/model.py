"""LayerNorm's forward in sympy: the truth opgen.derive proves the forward TE against.

A forward op's truth is its outputs themselves: out, meanOut and rstdOut as aclnnLayerNorm
prints them (E[x] and the biased Var[x] over the normalized elements of a row), with the
kernel's eps input bound to the model's eps.
"""
from __future__ import annotations

from functools import lru_cache

import sympy

from opgen.symbolic import EPS, FORWARD_COVERS, ProofModel, Truth, grid, make_symbol, symbols


@lru_cache(maxsize=None)
def layer_norm_forward_truth(rows: int, cols: int) -> Truth:
    """out = (x - E[x]) / sqrt(Var[x] + eps) * gamma + beta per row; mean = E[x]; rstd = 1/sqrt(Var[x] + eps)."""
    x, gamma, beta = symbols("x", rows, cols), symbols("gamma", cols), symbols("beta", cols)
    mean = {(r,): sympy.Add(*(x[r, c] for c in range(cols))) / cols for r in range(rows)}
    rstd = {(r,): 1 / sympy.sqrt(sympy.Add(*((x[r, c] - mean[r,]) ** 2 for c in range(cols))) / cols + EPS)
            for r in range(rows)}
    y = {(r, c): (x[r, c] - mean[r,]) * rstd[r,] * gamma[c,] + beta[c,] for r, c in grid(rows, cols)}
    return Truth({"y": y, "mean": mean, "rstd": rstd}, {make_symbol("eps", (0,)): EPS})


MODEL = ProofModel(("rows", "cols"), layer_norm_forward_truth, ((2, 3), (1, 4), (2, 1)), covers=FORWARD_COVERS)
