"""GroupNorm + Swish's forward in sympy: the truth opgen.derive proves the TE against, and
the document's printed formulas (aclnnGroupNormSwishGrad.md l.26-53) judged by it.

The forward is out = y * sigmoid(s*y) with y GroupNorm's output. Its sigmoid is a sympy
Function whose derivative is sig * (1 - sig) (checked against sympy's own derivative of
1 / (1 + exp(-u)) on import), so sympy's gradient comes out in the sigmoid's powers, the
form the kernel's TE has once opgen.symbolic translates its sigmoid to 1 / (1 + exp(-u)):
expand() can then cancel them term by term, where exp(-u) / (1 + exp(-u))**2 against
sig - sig**2 would need a common denominator.
"""
from __future__ import annotations

from functools import lru_cache
from operator import itemgetter

import sympy

from opgen.symbolic import EPS, ProofModel, SeedCheck, Truth, equal, grad, grid, make_symbol, sum_by, symbols

DOC = "aclnnGroupNormSwishGrad"
OP = "group_norm_swish_grad"
_channel, _group = itemgetter(slice(1, 3)), itemgetter(slice(0, 2))  # (N,G,D,HW) -> (G,D), (N,G)
SCALE = sympy.Symbol("s", real=True)      # swishScale (the kernel's swish_scale holds it in every element)


class Sigmoid(sympy.Function):
    """sigmoid(u) = 1 / (1 + exp(-u)), differentiated as sig * (1 - sig)."""

    def fdiff(self, argindex=1):
        return self * (1 - self)


def _explicit(expr):
    """``expr`` with every Sigmoid(u) written 1 / (1 + exp(-u)) (what the translator makes of TE's)."""
    return expr.replace(Sigmoid, lambda u: 1 / (1 + sympy.exp(-u)))


def _check_sigmoid_derivative() -> None:
    """The one identity the model adds to sympy: d sigmoid / du = sig * (1 - sig)."""
    u = sympy.Symbol("u", real=True)
    explicit = 1 / (1 + sympy.exp(-u))
    if sympy.simplify(sympy.diff(explicit, u) - _explicit(Sigmoid(u).diff(u))) != 0:
        raise AssertionError("Sigmoid.fdiff is not the derivative of 1 / (1 + exp(-u))")


_check_sigmoid_derivative()


def _scale_bind(n: int, g: int) -> dict:
    """The kernel's swish_scale input (N, G) holds s in every element."""
    return {make_symbol("swish_scale", ng): SCALE for ng in grid(n, g)}


@lru_cache(maxsize=None)
def group_norm_swish_truth(n: int, g: int, d: int, hw: int) -> Truth:
    """out = y * sigmoid(s*y), y = (x - mean) * rstd * gamma + beta, mean/var over the D*HW
    elements of a group; the true gradients of L = sum(dy * out) w.r.t. x, gamma, beta."""
    x, dy = symbols("x", n, g, d, hw), symbols("dy", n, g, d, hw)
    gamma, beta = symbols("gamma", g, d), symbols("beta", g, d)
    members = {ng: [(*ng, c, h) for c, h in grid(d, hw)] for ng in grid(n, g)}
    mean = {ng: sympy.Add(*(x[i] for i in m)) / (d * hw) for ng, m in members.items()}
    base = {ng: sympy.Add(*((x[i] - mean[ng]) ** 2 for i in m)) / (d * hw) + EPS for ng, m in members.items()}
    y = {i: (x[i] - mean[_group(i)]) * base[_group(i)] ** sympy.Rational(-1, 2) * gamma[_channel(i)]
         + beta[_channel(i)] for i in x}
    loss = sympy.Add(*(dy[i] * y[i] * Sigmoid(SCALE * y[i]) for i in x))
    stat = {base[ng]: make_symbol("rstd", ng) ** -2 for ng in members}
    outputs = {name: {i: _explicit(e) for i, e in grad(loss, wrt, stat).items()}
               for name, wrt in (("dx", x), ("dgamma", gamma), ("dbeta", beta))}
    bind = {make_symbol("mean", ng): mean[ng] for ng in members}
    bind.update(_scale_bind(n, g))
    return Truth(outputs, bind)


def _doc_terms(n, g, d, hw) -> dict:
    """The document's symbols over x's (N, G, D, HW) grid: x_hat, y, sig, its dSwish and dYNew."""
    big = grid(n, g, d, hw)
    t = {name: {i: make_symbol(name, key(i)) for i in big}
         for name, key in (("dy", tuple), ("x", tuple), ("mean", _group), ("rstd", _group),
                           ("gamma", _channel), ("beta", _channel))}
    s = SCALE
    t["xhat"] = {i: (t["x"][i] - t["mean"][i]) * t["rstd"][i] for i in big}
    y = {i: t["xhat"][i] * t["gamma"][i] + t["beta"][i] for i in big}
    sig = {i: 1 / (1 + sympy.exp(-s * y[i])) for i in big}
    d_swish = {i: s * y[i] - s * y[i] * sig[i] + 1 for i in big}           # doc l.36
    t["dynew"] = {i: d_swish[i] * sig[i] * t["dy"][i] for i in big}          # doc l.40
    return t


def _dx_readings(n, g, d, hw) -> list[tuple[str, dict, str]]:
    """The printed dx (l.52) in three readings of its sums: the batch-summed outputs, the
    per-(n, group) partial sums without 1/M, and with it (the kernel's and ST's form)."""
    t = _doc_terms(n, g, d, hw)
    dyn, xhat, rstd, gam = t["dynew"], t["xhat"], t["rstd"], t["gamma"]
    dbeta_out = {gd: sympy.Add(*(dyn[(a, *gd, h)] for a, h in grid(n, hw))) for gd in grid(g, d)}
    dgamma_out = {gd: sympy.Add(*(dyn[(a, *gd, h)] * xhat[(a, *gd, h)] for a, h in grid(n, hw))) for gd in grid(g, d)}
    gb = {b: sympy.Add(*(make_symbol("gamma", (b, c)) * dbeta_out[b, c] for c in range(d))) for b in range(g)}
    gg = {b: sympy.Add(*(make_symbol("gamma", (b, c)) * dgamma_out[b, c] for c in range(d))) for b in range(g)}
    c1 = sum_by({i: gam[i] * dyn[i] for i in dyn}, _group)
    c2 = sum_by({i: gam[i] * dyn[i] * xhat[i] for i in dyn}, _group)
    m = d * hw
    return [
        ("dx = rstd*(dYNew*gamma - x_hat*sum_i gamma_i*dGamma_i - sum_i gamma_i*dBeta_i)  (as printed, dGamma and "
         "dBeta the outputs)",
         {i: rstd[i] * (dyn[i] * gam[i] - xhat[i] * gg[i[1]] - gb[i[1]]) for i in dyn},
         "dGamma/dBeta read as the batch-summed outputs, and no 1/M"),
        ("as printed, with dGamma/dBeta the per-(n, group) partial sums over the group's channels",
         {i: rstd[i] * (dyn[i] * gam[i] - xhat[i] * c2[i] - c1[i]) for i in dyn},
         "the right sums, but no 1/M"),
        ("rstd*(dYNew*gamma - x_hat*c2 - c1), c1 = sum_grp gamma*dYNew / M, c2 = sum_grp gamma*dYNew*x_hat / M",
         {i: rstd[i] * (dyn[i] * gam[i] - xhat[i] * c2[i] / m - c1[i] / m) for i in dyn},
         "the kernel's form (group_norm_swish_grad.h l.296-300, l.1022-1031) and ST's golden (l.140-153)"),
    ]


def seed_checks(n: int = 2, g: int = 1, d: int = 2, hw: int = 1) -> list[SeedCheck]:
    """The document's dSwish/dYNew (through dbeta and dgamma as printed) and dx's readings."""
    truth = group_norm_swish_truth(n, g, d, hw)
    t = _doc_terms(n, g, d, hw)
    dyn, xhat = t["dynew"], t["xhat"]
    per_channel = {name: {_channel(i): v for i, v in sum_by(vals, _channel).items()}
                   for name, vals in (("dbeta", dyn), ("dgamma", {i: dyn[i] * xhat[i] for i in dyn}))}
    checks = [
        SeedCheck(DOC, OP, "dbeta", "dBeta = sum dYNew, dYNew = dSwish*sig*dy, dSwish = s*y - s*y*sig + 1",
                  equal(per_channel["dbeta"], truth, "dbeta"), "l.36-44, summed over batch and HxW per channel"),
        SeedCheck(DOC, OP, "dgamma", "dGamma = sum dYNew * x_hat", equal(per_channel["dgamma"], truth, "dgamma"),
                  "l.48, summed over batch and HxW per channel"),
    ]
    for formula, candidate, note in _dx_readings(n, g, d, hw):
        checks.append(SeedCheck(DOC, OP, "dx", formula, equal(candidate, truth, "dx"), note))
    return checks


MODEL = ProofModel(("N", "G", "D", "HW"), group_norm_swish_truth, ((2, 2, 2, 2), (2, 1, 1, 2)), seed_checks)
