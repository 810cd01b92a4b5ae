"""Add + LayerNorm's forward in sympy: the truth opgen.derive proves the TE against, and the CANN
document's printed formulas (aclnnAddLayerNormGrad.md l.52-108) judged by it.

dsum is the gradient reaching the Add's output x = x1 + x2 from elsewhere (the residual
branch), so the loss is L = sum(dy * LayerNorm(x)) + sum(dsum * x) and dxOut = dL/dx1 =
dL/dx2. The variant without dsum (DtypeCombo.absent) is proven against this truth with dsum
zero (opgen.derive)."""
from __future__ import annotations

from functools import lru_cache

import sympy

from opgen.symbolic import EPS, ProofModel, SeedCheck, Truth, equal, grad, grid, make_symbol, symbols

DOC = "aclnnAddLayerNormGrad"   # hicann/ops-nn norm/add_layer_norm_grad/docs/aclnnAddLayerNormGrad.md


@lru_cache(maxsize=None)
def add_layer_norm_truth(rows: int, cols: int) -> Truth:
    """y = (x - mean) * rstd(x) * gamma + beta per row with x = x1 + x2; dsum joins at x."""
    x1, x2, dy, dsum = (symbols(n, rows, cols) for n in ("x1", "x2", "dy", "dsum"))
    gamma, beta = symbols("gamma", cols), symbols("beta", cols)
    x = {i: x1[i] + x2[i] for i in x1}
    mean = {r: sympy.Add(*(x[r, c] for c in range(cols))) / cols for r in range(rows)}
    base = {r: sympy.Add(*((x[r, c] - mean[r]) ** 2 for c in range(cols))) / cols + EPS for r in range(rows)}
    loss = sympy.Add(*(dy[r, c] * ((x[r, c] - mean[r]) * base[r] ** sympy.Rational(-1, 2) * gamma[c,] + beta[c,])
                       + dsum[r, c] * x[r, c] for r, c in grid(rows, cols)))
    stat = {base[r]: make_symbol("rstd", (r,)) ** -2 for r in range(rows)}
    outputs = {"dx": grad(loss, x1, stat), "dgamma": grad(loss, gamma, stat), "dbeta": grad(loss, beta, stat)}
    return Truth(outputs, {make_symbol("mean", (r,)): mean[r] for r in range(rows)})


def seed_checks(rows: int = 2, cols: int = 3) -> list[SeedCheck]:
    """The document's simplified dxOut (l.106-108), dgammaOut (l.60-62) and dbetaOut (l.64-66),
    and dxOut's gradient for x2 (one output serves both addends)."""
    truth = add_layer_norm_truth(rows, cols)
    x1, x2, dy, dsum = (symbols(n, rows, cols) for n in ("x1", "x2", "dy", "dsum"))
    gamma, mean, rstd = symbols("gamma", cols), symbols("mean", rows), symbols("rstd", rows)
    xhat = {(r, c): (x1[r, c] + x2[r, c] - mean[r,]) * rstd[r,] for r, c in x1}
    s1 = {r: sympy.Add(*(dy[r, c] * gamma[c,] for c in range(cols))) for r in range(rows)}
    s2 = {r: sympy.Add(*(dy[r, c] * gamma[c,] * xhat[r, c] for c in range(cols))) for r in range(rows)}
    dx = {(r, c): rstd[r,] * (dy[r, c] * gamma[c,] - sympy.Rational(1, cols) * (s1[r] + xhat[r, c] * s2[r]))
          + dsum[r, c] for r, c in x1}
    dgamma = {(c,): sympy.Add(*(dy[r, c] * xhat[r, c] for r in range(rows))) for c in range(cols)}
    dbeta = {(c,): sympy.Add(*(dy[r, c] for r in range(rows))) for c in range(cols)}
    return [
        SeedCheck(DOC, "add_layer_norm_grad", "dx", "dxOut = rstd * (dy*gamma - 1/D * (sum(dy*gamma) + x_hat * "
                  "sum(dy*gamma*x_hat))) + dsumOptional", equal(dx, truth, "dx"), "l.106-108 (the simplified form)"),
        SeedCheck(DOC, "add_layer_norm_grad", "dgamma", "dgammaOut = sum_rows dy * x_hat", equal(dgamma, truth, "dgamma"),
                  "l.60-62: x_hat = (x1 + x2 - mean) * rstd, summed over the non-normalized axes"),
        SeedCheck(DOC, "add_layer_norm_grad", "dbeta", "dbetaOut = sum_rows dy", equal(dbeta, truth, "dbeta"),
                  "l.64-66"),
    ]


# (rows, cols): two small cases and a degenerate one (one element per row: x_hat = 0, dx = dsum).
MODEL = ProofModel(("rows", "cols"), add_layer_norm_truth, ((2, 3), (1, 4), (2, 1)), seed_checks)
