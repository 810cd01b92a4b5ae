"""GemmaRmsNorm's forward in sympy: the truth opgen.derive proves the forward TE against.

A forward op's truth is its outputs themselves (no gradient): y and rstd as the document
prints them (aclnnGemmaRmsNorm.md l.30-32: x_i / Rms(x) * (1 + gamma_i), Rms(x) =
sqrt(mean(x^2) + epsilon)), with the kernel's eps input bound to the model's eps.
"""
from __future__ import annotations

from functools import lru_cache

import sympy

from opgen.symbolic import EPS, FORWARD_COVERS, ProofModel, Truth, grid, make_symbol, symbols


@lru_cache(maxsize=None)
def gemma_rms_norm_forward_truth(rows: int, cols: int) -> Truth:
    """y = x / Rms(x) * (1 + gamma), Rms(x) = sqrt(mean_c(x^2) + eps) per row; rstd = 1 / Rms(x)."""
    x, gamma = symbols("x", rows, cols), symbols("gamma", cols)
    rstd = {(r,): 1 / sympy.sqrt(sympy.Add(*(x[r, c] ** 2 for c in range(cols))) / cols + EPS) for r in range(rows)}
    y = {(r, c): x[r, c] * rstd[r,] * (1 + gamma[c,]) for r, c in grid(rows, cols)}
    return Truth({"y": y, "rstd": rstd}, {make_symbol("eps", (0,)): EPS})


MODEL = ProofModel(("rows", "cols"), gemma_rms_norm_forward_truth, ((2, 3), (1, 4)),
                   covers=FORWARD_COVERS)
