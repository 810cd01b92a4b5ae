"""RmsNorm's forward in sympy: the truth opgen.derive proves the TE against, and seed 000's
printed formulas judged by it."""
from __future__ import annotations

from functools import lru_cache

import sympy

from opgen.symbolic import EPS, ProofModel, SeedCheck, Truth, equal, grad, grid, make_symbol, symbols


@lru_cache(maxsize=None)
def rms_norm_truth(rows: int, cols: int) -> Truth:
    """y = x * rstd(x) * gamma, rstd(x) = 1/sqrt(mean_c(x^2) + eps), per row."""
    x, dy, gamma = symbols("x", rows, cols), symbols("dy", rows, cols), symbols("gamma", cols)
    base = {r: sympy.Add(*(x[r, c] ** 2 for c in range(cols))) / cols + EPS for r in range(rows)}
    loss = sympy.Add(*(dy[r, c] * x[r, c] * base[r] ** sympy.Rational(-1, 2) * gamma[c,]
                       for r, c in grid(rows, cols)))
    stat = {base[r]: make_symbol("rstd", (r,)) ** -2 for r in range(rows)}
    return Truth({"dx": grad(loss, x, stat), "dgamma": grad(loss, gamma, stat)}, {})


def seed_checks(rows: int = 2, cols: int = 3) -> list[SeedCheck]:
    """Seed 000 (aclnnRmsNormGrad), with 1/Rms(x) read as the kernel's rstd input."""
    truth = rms_norm_truth(rows, cols)
    x, dy, g = symbols("x", rows, cols), symbols("dy", rows, cols), symbols("gamma", cols)
    inv_rms = symbols("rstd", rows)
    mean_y = {r: sympy.Add(*(dy[r, c] * g[c,] * x[r, c] * inv_rms[r,] for c in range(cols))) / cols
              for r in range(rows)}
    dx = {(r, c): (dy[r, c] * g[c,] - inv_rms[r,] * x[r, c] * mean_y[r]) * inv_rms[r,] for r, c in x}
    dg = {(c,): sympy.Add(*(inv_rms[r,] * x[r, c] * dy[r, c] for r in range(rows))) for c in range(cols)}
    note = "the rstd tensor is 1/Rms(x) (its table says 'corresponds to Rms(x)': the reciprocal is meant)"
    return [
        SeedCheck("000", "rms_norm_grad", "dx",
                  "dx_i = (dy_i*g_i - x_i/Rms * Mean(y)) / Rms, Mean(y) = mean(dy*g*x/Rms)",
                  equal(dx, truth, "dx"), note),
        SeedCheck("000", "rms_norm_grad", "dgamma", "dg_i = x_i/Rms * dy_i, summed over rows",
                  equal(dg, truth, "dgamma"), "the printed per-row term; dgamma sums it over rows"),
    ]


MODEL = ProofModel(("rows", "cols"), rms_norm_truth, ((2, 3), (1, 4)), seed_checks)
