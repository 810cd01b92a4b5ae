"""GroupNorm's forward in sympy: the truth opgen.derive proves the TE against, and seed
002's printed formulas (gradInput in several readings) judged by it."""
from __future__ import annotations

from functools import lru_cache
from operator import itemgetter

import sympy

from opgen.symbolic import EPS, ProofModel, SeedCheck, Truth, equal, grad, grid, make_symbol, sum_by, symbols

_channel, _group = itemgetter(slice(1, 3)), itemgetter(slice(0, 2))  # (N,G,D,HW) -> (G,D), (N,G)


@lru_cache(maxsize=None)
def group_norm_truth(n: int, g: int, d: int, hw: int) -> Truth:
    """y = (x - mean) * rstd * gamma + beta with mean/var over the D*HW elements of a group."""
    x, dy = symbols("x", n, g, d, hw), symbols("dy", n, g, d, hw)
    gamma, beta = symbols("gamma", g, d), symbols("beta", g, d)
    members = {ng: [(*ng, c, h) for c, h in grid(d, hw)] for ng in grid(n, g)}
    mean = {ng: sympy.Add(*(x[i] for i in m)) / (d * hw) for ng, m in members.items()}
    base = {ng: sympy.Add(*((x[i] - mean[ng]) ** 2 for i in m)) / (d * hw) + EPS
            for ng, m in members.items()}
    loss = sympy.Add(*(dy[i] * ((x[i] - mean[_group(i)]) * base[_group(i)] ** sympy.Rational(-1, 2)
                                * gamma[_channel(i)] + beta[_channel(i)]) for i in x))
    stat = {base[ng]: make_symbol("rstd", ng) ** -2 for ng in members}
    outputs = {"dx": grad(loss, x, stat), "dgamma": grad(loss, gamma, stat),
               "dbeta": grad(loss, beta, stat)}
    return Truth(outputs, {make_symbol("mean", ng): mean[ng] for ng in members})


def _gn_seed_terms(n, g, d, hw) -> dict:
    """The seed's symbols over x's (N, G, D, HW) grid; per-channel sums are its gradBeta/GammaOut."""
    big = grid(n, g, d, hw)
    t = {name: {i: make_symbol(name, key(i)) for i in big}
         for name, key in (("dy", tuple), ("x", tuple), ("mean", _group), ("rstd", _group),
                           ("gamma", _channel))}
    t["xhat"] = {i: (t["x"][i] - t["mean"][i]) * t["rstd"][i] for i in big}
    t["dbeta"] = sum_by(t["dy"], _channel)
    t["dgamma"] = sum_by({i: t["dy"][i] * t["xhat"][i] for i in big}, _channel)
    return t


def _gn_grad_input_readings(n, g, d, hw) -> list[tuple[str, dict, str]]:
    """The printed gradInput, then readings of it with one more correction each."""
    t = _gn_seed_terms(n, g, d, hw)
    dy, xhat, mean, rstd, gam = t["dy"], t["xhat"], t["mean"], t["rstd"], t["gamma"]
    bracket_n = {i: dy[i] - (t["dbeta"][i] + xhat[i] * t["dgamma"][i]) / n for i in dy}
    s1 = sum_by(dy, _group)
    s2 = sum_by({i: dy[i] * xhat[i] for i in dy}, _group)
    w1 = sum_by({i: gam[i] * dy[i] for i in dy}, _group)
    w2 = sum_by({i: gam[i] * dy[i] * xhat[i] for i in dy}, _group)
    m = d * hw
    return [
        ("gradInput = mean*rstd*gamma*[gradOut - (gradBetaOut + x_hat*gradGammaOut)/N]  (as printed)",
         {i: mean[i] * rstd[i] * gam[i] * bracket_n[i] for i in dy},
         "as printed, with a stray factor 'mean'"),
        ("rstd*gamma*[gradOut - (gradBetaOut + x_hat*gradGammaOut)/N]  (without 'mean')",
         {i: rstd[i] * gam[i] * bracket_n[i] for i in dy},
         "gradBetaOut/gradGammaOut are per-channel sums over the batch and N is the batch size; "
         "the gradient needs per-(n, group) sums over M = D*HW elements"),
        ("rstd*gamma*[gradOut - (sum_grp gradOut + x_hat*sum_grp gradOut*x_hat)/M]",
         {i: rstd[i] * gam[i] * (dy[i] - (s1[i] + xhat[i] * s2[i]) / m) for i in dy},
         "per-group sums over M, but gamma outside the sums (LayerNorm's form)"),
        ("rstd*[gamma*gradOut - (sum_grp gamma*gradOut + x_hat*sum_grp gamma*gradOut*x_hat)/M]",
         {i: rstd[i] * (gam[i] * dy[i] - (w1[i] + xhat[i] * w2[i]) / m) for i in dy},
         "the op file's formula"),
    ]


def seed_checks(n: int = 2, g: int = 2, d: int = 2, hw: int = 2) -> list[SeedCheck]:
    """Seed 002 (aclnnGroupNormBackward): gradBeta/GammaOut as printed, gradInput in readings.

    A reading that differs is also tried with gamma constant within each group, which tells a
    gamma-placement error apart from a wrong structure.
    """
    truth = group_norm_truth(n, g, d, hw)
    t = _gn_seed_terms(n, g, d, hw)
    per_channel = {name: {_channel(i): v for i, v in t[name].items()} for name in ("dbeta", "dgamma")}
    checks = [
        SeedCheck("002", "group_norm_backward", "dbeta", "gradBetaOut = sum gradOut",
                  equal(per_channel["dbeta"], truth, "dbeta"), "summed over batch and HxW per channel"),
        SeedCheck("002", "group_norm_backward", "dgamma", "gradGammaOut = sum gradOut * x_hat",
                  equal(per_channel["dgamma"], truth, "dgamma"), "summed over batch and HxW per channel"),
    ]
    flat = {make_symbol("gamma", c): make_symbol("gamma", (c[0], 0)) for c in grid(g, d)}
    flat_truth = Truth({"dx": {i: e.xreplace(flat) for i, e in truth.outputs["dx"].items()}}, truth.bind)
    for formula, candidate, note in _gn_grad_input_readings(n, g, d, hw):
        ok = equal(candidate, truth, "dx")
        if not ok:
            flat_ok = equal({i: e.xreplace(flat) for i, e in candidate.items()}, flat_truth, "dx")
            note += ("; it holds only when gamma is constant within each group" if flat_ok
                     else "; wrong even with gamma constant within each group")
        checks.append(SeedCheck("002", "group_norm_backward", "dx", formula, ok, note))
    return checks


MODEL = ProofModel(("N", "G", "D", "HW"), group_norm_truth, ((2, 2, 2, 2), (2, 1, 2, 2)), seed_checks)
