"""LayerNorm's forward in sympy: the truth opgen.derive proves the TE against, and the CANN
document's printed formulas (aclnnLayerNormBackward.md l.29-59) judged by it."""
from __future__ import annotations

from functools import lru_cache

import sympy

from opgen.symbolic import EPS, ProofModel, SeedCheck, Truth, equal, grad, grid, make_symbol, symbols

DOC = "aclnnLayerNormBackward"   # hicann/ops-nn norm/layer_norm_grad_v3/docs/aclnnLayerNormBackward.md


@lru_cache(maxsize=None)
def layer_norm_truth(rows: int, cols: int) -> Truth:
    """y = (x - mean) * rstd(x) * gamma + beta per row, mean and the biased variance over cols."""
    x, dy = symbols("x", rows, cols), symbols("dy", rows, cols)
    gamma, beta = symbols("gamma", cols), symbols("beta", cols)
    mean = {r: sympy.Add(*(x[r, c] for c in range(cols))) / cols for r in range(rows)}
    base = {r: sympy.Add(*((x[r, c] - mean[r]) ** 2 for c in range(cols))) / cols + EPS for r in range(rows)}
    loss = sympy.Add(*(dy[r, c] * ((x[r, c] - mean[r]) * base[r] ** sympy.Rational(-1, 2) * gamma[c,] + beta[c,])
                       for r, c in grid(rows, cols)))
    stat = {base[r]: make_symbol("rstd", (r,)) ** -2 for r in range(rows)}
    outputs = {"dx": grad(loss, x, stat), "dgamma": grad(loss, gamma, stat), "dbeta": grad(loss, beta, stat)}
    return Truth(outputs, {make_symbol("mean", (r,)): mean[r] for r in range(rows)})


def _doc_dx(rows: int, cols: int, n) -> dict:
    """The document's gradInputOut with the divisor ``n``: (dy*w - (temp_1 + temp_2)) * rstd,
    temp_1 = 1/N sum(dy*w), temp_2 = 1/N (x-mean)*rstd * sum(dy*w*(x-mean)*rstd)."""
    x, dy, w = symbols("x", rows, cols), symbols("dy", rows, cols), symbols("gamma", cols)
    mean, rstd = symbols("mean", rows), symbols("rstd", rows)
    xhat = {(r, c): (x[r, c] - mean[r,]) * rstd[r,] for r, c in x}
    temp1 = {r: sympy.Add(*(dy[r, c] * w[c,] for c in range(cols))) / n for r in range(rows)}
    dot = {r: sympy.Add(*(dy[r, c] * w[c,] * xhat[r, c] for c in range(cols))) for r in range(rows)}
    return {(r, c): (dy[r, c] * w[c,] - (temp1[r] + xhat[r, c] * dot[r] / n)) * rstd[r,] for r, c in x}


def seed_checks(rows: int = 2, cols: int = 4) -> list[SeedCheck]:
    """The document's formulas. N, "the dimension of the normalized axes, i.e. the size of
    the normalized-axis dimensions" (l.59), is the product of the normalized dims (the
    op_api and kernel say so); the literal reading "the number of normalized axes" is tried
    on normalizedShape = (2, 2), i.e. cols = 4 elements over j = 2 axes."""
    truth = layer_norm_truth(rows, cols)
    x, dy = symbols("x", rows, cols), symbols("dy", rows, cols)
    mean, rstd = symbols("mean", rows), symbols("rstd", rows)
    dw = {(c,): sympy.Add(*(dy[r, c] * (x[r, c] - mean[r,]) * rstd[r,] for r in range(rows))) for c in range(cols)}
    db = {(c,): sympy.Add(*(dy[r, c] for r in range(rows))) for c in range(cols)}
    printed = "gradInputOut = (gradOut*weight - (temp_1 + temp_2)) * rstd"
    return [
        SeedCheck(DOC, "layer_norm_backward", "dx", f"{printed}, N = product of the normalized dims",
                  equal(_doc_dx(rows, cols, cols), truth, "dx"),
                  "l.39-49 with N read as op_api l.288-290 and the kernel's coff = 1/col compute it"),
        SeedCheck(DOC, "layer_norm_backward", "dx", f"{printed}, N = number of normalized axes (j = 2)",
                  equal(_doc_dx(rows, cols, 2), truth, "dx"),
                  "the literal reading of l.59 ('N is the dimension of the normalized axes'): wrong whenever "
                  "normalizedShape is not one axis of all its elements"),
        SeedCheck(DOC, "layer_norm_backward", "dgamma", "gradWeightOut = sum_{reduce_axis_0} gradOut*(input-mean)*rstd",
                  equal(dw, truth, "dgamma"), "l.51-53: summed over the non-normalized axes"),
        SeedCheck(DOC, "layer_norm_backward", "dbeta", "gradBiasOut = sum_{reduce_axis_0} gradOut",
                  equal(db, truth, "dbeta"), "l.55-57"),
    ]


# (rows, cols): two small cases and a degenerate one (one element per row: x_hat = 0, dx = 0).
MODEL = ProofModel(("rows", "cols"), layer_norm_truth, ((2, 3), (1, 4), (2, 1)), seed_checks)
