"""DeepNorm's forward in sympy: the truth opgen.derive proves the TE against, and the
document's printed formulas (aclnnDeepNormGrad.md l.30-68) judged by it."""
from __future__ import annotations

from functools import lru_cache

import sympy

from opgen.symbolic import EPS, ProofModel, SeedCheck, Truth, equal, grad, grid, make_symbol, symbols

DOC = "aclnnDeepNormGrad"


def _alpha() -> sympy.Symbol:
    """The kernel's alpha input (a (1,) tensor): the same Symbol the translator makes of alpha[0]."""
    return make_symbol("alpha", (0,))


@lru_cache(maxsize=None)
def deep_norm_truth(rows: int, cols: int) -> Truth:
    """y = (x' - mean(x')) * rstd(x') * gamma + beta, x' = alpha * x + gx, per row of ``cols``."""
    x, gx, dy = symbols("x", rows, cols), symbols("gx", rows, cols), symbols("dy", rows, cols)
    gamma, beta, alpha = symbols("gamma", cols), symbols("beta", cols), _alpha()
    h = {i: alpha * x[i] + gx[i] for i in x}
    mean = {r: sympy.Add(*(h[r, c] for c in range(cols))) / cols for r in range(rows)}
    base = {r: sympy.Add(*((h[r, c] - mean[r]) ** 2 for c in range(cols))) / cols + EPS for r in range(rows)}
    loss = sympy.Add(*(dy[r, c] * ((h[r, c] - mean[r]) * base[r] ** sympy.Rational(-1, 2) * gamma[c,] + beta[c,])
                       for r, c in grid(rows, cols)))
    stat = {base[r]: make_symbol("rstd", (r,)) ** -2 for r in range(rows)}
    outputs = {"dx": grad(loss, x, stat), "dgx": grad(loss, gx, stat), "dbeta": grad(loss, beta, stat),
               "dgamma": grad(loss, gamma, stat)}
    return Truth(outputs, {make_symbol("mean", (r,)): mean[r] for r in range(rows)})


def _doc_terms(rows: int, cols: int) -> dict:
    """The document's symbols over (rows, cols): tmpone, tmptwo and the kernel's inputs."""
    x, gx, dy = symbols("x", rows, cols), symbols("gx", rows, cols), symbols("dy", rows, cols)
    gamma, mean, rstd = symbols("gamma", cols), symbols("mean", rows), symbols("rstd", rows)
    alpha = _alpha()
    return {"dy": dy, "rstd": rstd, "alpha": alpha,
            "tmpone": {(r, c): dy[r, c] * gamma[c,] for r, c in dy},
            "tmptwo": {(r, c): alpha * x[r, c] + gx[r, c] - mean[r,] for r, c in dy}}


def _dgx(t: dict, rows: int, cols: int, one_div, per_row: bool) -> dict:
    """dgx_i = tmpone_i*rstd + dvar*tmptwo_i + dmean, the sums of dvar/dmean over the row's
    normalized elements (``per_row``) or over the N rows, as dbeta/dgamma's are."""
    one, two, rstd = t["tmpone"], t["tmptwo"], t["rstd"]

    def members(r, c):
        return [(r, k) for k in range(cols)] if per_row else [(k, c) for k in range(rows)]
    out = {}
    for r, c in one:
        dvar = one_div * sympy.Add(*(one[i] * two[i] * rstd[i[0],] ** 3 for i in members(r, c)))
        dmean = one_div * sympy.Add(*(one[i] * rstd[i[0],] for i in members(r, c)))
        out[r, c] = one[r, c] * rstd[r,] + dvar * two[r, c] + dmean
    return out


def seed_checks(rows: int = 2, cols: int = 3) -> list[SeedCheck]:
    """The document's formulas; its one symbol sum_{i=1}^{N} is read both ways, and
    SizeOf(gamma) as gamma's element count and as its rank."""
    truth = deep_norm_truth(rows, cols)
    t = _doc_terms(rows, cols)
    d = sympy.Rational(-1, cols)
    dgx = _dgx(t, rows, cols, d, per_row=True)
    dbeta = {(c,): sympy.Add(*(t["dy"][r, c] for r in range(rows))) for c in range(cols)}
    dgamma = {(c,): sympy.Add(*(t["dy"][r, c] * t["rstd"][r,] * t["tmptwo"][r, c] for r in range(rows)))
              for c in range(cols)}
    per_row = "the sum of dvar/dmean over one row's D = SizeOf(gamma) normalized elements"
    return [
        SeedCheck(DOC, "deep_norm_grad", "dgx", "dgx_i = tmpone_i*rstd + dvar*tmptwo_i + dmean, oneDiv = "
                  "-1/SizeOf(gamma), dvar/dmean summed over the row", equal(dgx, truth, "dgx"),
                  f"{per_row} (what oneDiv's 1/SizeOf(gamma) implies, and the golden's axis 1)"),
        SeedCheck(DOC, "deep_norm_grad", "dgx", "dvar/dmean's sum_{i=1}^{N} over the N rows (dbeta's N)",
                  equal(_dgx(t, rows, cols, d, per_row=False), truth, "dgx"),
                  "the document prints the same sum_{i=1}^{N} for dvar/dmean and for dbeta/dgamma; read as "
                  "dbeta's sum over rows it is wrong: dvar/dmean are per-row sums"),
        SeedCheck(DOC, "deep_norm_grad", "dgx", "oneDiv = -1/SizeOf(gamma) read as gamma's rank",
                  equal(_dgx(t, rows, cols, sympy.Integer(-1), per_row=True), truth, "dgx"),
                  "SizeOf(gamma) is gamma's element count D (the tiling's dDimNum), not its number of dims"),
        SeedCheck(DOC, "deep_norm_grad", "dx", "dx_i = alpha * dgx_i",
                  equal({i: t["alpha"] * v for i, v in dgx.items()}, truth, "dx"),
                  "alpha is the kernel's float32 alpha"),
        SeedCheck(DOC, "deep_norm_grad", "dbeta", "dbeta = sum_{i=1}^{N} dy_i", equal(dbeta, truth, "dbeta"),
                  "summed over the N rows per normalized element"),
        SeedCheck(DOC, "deep_norm_grad", "dgamma", "dgamma = sum_{i=1}^{N} dy_i * rstd * tmptwo_i",
                  equal(dgamma, truth, "dgamma"), "summed over the N rows per normalized element"),
    ]


MODEL = ProofModel(("rows", "cols"), deep_norm_truth, ((2, 3), (1, 4), (2, 1)), seed_checks)
