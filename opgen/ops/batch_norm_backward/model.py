"""BatchNorm's forwards in sympy: the truth opgen.derive proves the TE against, and the
document's printed formulas (aclnnBatchNormBackward.md l.30-58) judged by it.

The kernel serves both modes with one TE, so the proof's cases carry the mode as a fourth
"extent", ``training`` (1 or 0): it names no TE variable, it picks the forward.
  * training: y = (x - mean) * rstd * w + b with mean and the biased variance of the batch
    (per channel, over N and HW), rstd = (var + eps)^(-1/2). The kernel's saveMean is bound
    to the forward's mean, its saveInvstd to a positive rstd symbol standing for the
    (var + eps) subtree, and its training flag to 1.
  * eval: y = (x - runningMean) * (runningVar + eps)^(-1/2) * w + b, the statistics
    constants (the kernel's own runningMean, runningVar and eps symbols); training -> 0.
"""
from __future__ import annotations

from functools import lru_cache

import sympy

from opgen.symbolic import EPS, ProofModel, SeedCheck, Truth, equal, grad, grid, make_symbol, symbols

OP = "batch_norm_backward"
DOC = "aclnnBatchNormBackward.md"


def _rstd(c: int) -> sympy.Symbol:
    """The positive symbol the kernel's saveInvstd stands for in training (1/sqrt(var + eps))."""
    return sympy.Symbol(f"save_invstd_{c}", positive=True)


def _channel_sums(values: dict, n: int, c: int, hw: int) -> dict:
    """Per channel: the sum of ``values`` (indexed (n, c, hw)) over n and hw."""
    return {ci: sympy.Add(*(values[a, ci, i] for a, i in grid(n, hw))) for ci in range(c)}


@lru_cache(maxsize=None)
def batch_norm_truth(n: int, c: int, hw: int, training: int) -> Truth:
    """sympy's gradients of L = sum(dy * y) for the mode's forward, per output element."""
    x, dy = symbols("x", n, c, hw), symbols("dy", n, c, hw)
    weight, bias = symbols("weight", c), symbols("bias", c)
    m = n * hw
    flag = {make_symbol("training", (0,)): sympy.Integer(1 if training else 0)}
    if training:
        mean = {ci: s / m for ci, s in _channel_sums(x, n, c, hw).items()}
        base = {ci: s / m + EPS for ci, s in _channel_sums(
            {i: (x[i] - mean[i[1]]) ** 2 for i in x}, n, c, hw).items()}
        scale = {ci: base[ci] ** sympy.Rational(-1, 2) for ci in range(c)}
        stat = {base[ci]: _rstd(ci) ** -2 for ci in range(c)}
        bind = {**flag, **{make_symbol("save_mean", (ci,)): mean[ci] for ci in range(c)},
                **{make_symbol("save_invstd", (ci,)): _rstd(ci) for ci in range(c)}}
    else:
        mean = {ci: make_symbol("running_mean", (ci,)) for ci in range(c)}
        eps = make_symbol("eps", (0,))
        scale = {ci: (make_symbol("running_var", (ci,)) + eps) ** sympy.Rational(-1, 2) for ci in range(c)}
        stat, bind = {}, flag
    loss = sympy.Add(*(dy[i] * ((x[i] - mean[i[1]]) * scale[i[1]] * weight[i[1],] + bias[i[1],]) for i in x))
    outputs = {"dx": grad(loss, x, stat), "dweight": grad(loss, weight, stat), "dbias": grad(loss, bias, stat)}
    return Truth(outputs, bind)


def _doc_terms(n: int, c: int, hw: int, save_var_plus_eps) -> dict:
    """The document's symbols over the (N, C, HW) grid: g, x, weight, saveMean, the sums."""
    g, x = symbols("dy", n, c, hw), symbols("x", n, c, hw)
    w = {ci: make_symbol("weight", (ci,)) for ci in range(c)}
    sm = {ci: make_symbol("save_mean", (ci,)) for ci in range(c)}
    root = {ci: sympy.sqrt(save_var_plus_eps(ci)) for ci in range(c)}
    xhat = {i: (x[i] - sm[i[1]]) / root[i[1]] for i in x}
    return {"g": g, "x": x, "w": w, "sm": sm, "root": root, "xhat": xhat,
            "sum_g": _channel_sums(g, n, c, hw), "sum_g_xhat": _channel_sums({i: g[i] * xhat[i] for i in g}, n, c, hw)}


def _training_readings(n: int, c: int, hw: int) -> list:
    """gradInput as printed, with its n and its saveVar read three ways."""
    invstd = {ci: make_symbol("save_invstd", (ci,)) for ci in range(c)}
    readings = []
    for label, count, var_eps, note in (
            ("n = N*HxW elements per channel, saveVar + eps = 1/saveInvstd^2", n * hw, lambda ci: invstd[ci] ** -2,
             "the document's sums run over the M = N*spatial elements of a channel (its i = 0..m) and n = M"),
            ("n read as the batch size N", n, lambda ci: invstd[ci] ** -2,
             "n must count every element of a channel (N*HxW), not the batch"),
            ("saveVar read as the saveInvstd tensor itself", n * hw, lambda ci: invstd[ci] + EPS,
             "saveInvstd is already 1/sqrt(var + eps): the formula's sqrt(saveVar + eps) is 1/saveInvstd")):
        t = _doc_terms(n, c, hw, var_eps)
        dx = {i: t["w"][i[1]] / (count * t["root"][i[1]]) * (count * t["g"][i] - t["sum_g"][i[1]]
                                                            - t["xhat"][i] * t["sum_g_xhat"][i[1]]) for i in t["g"]}
        readings.append((f"gradInput = weight/(n*sqrt(saveVar+eps)) * (n*gradOut - sum gradOut - x_hat * sum "
                         f"gradOut*x_hat), {label}", dx, note))
    return readings


def _check(output: str, formula: str, candidate: dict, truth: Truth, detail: str) -> SeedCheck:
    return SeedCheck(DOC, OP, output, formula, equal(candidate, truth, output), detail)


def seed_checks(n: int = 2, c: int = 2, hw: int = 2) -> list[SeedCheck]:
    """The document's six formulas (training and eval), gradInput in three readings."""
    train, infer = batch_norm_truth(n, c, hw, 1), batch_norm_truth(n, c, hw, 0)
    t = _doc_terms(n, c, hw, lambda ci: make_symbol("save_invstd", (ci,)) ** -2)
    per_channel = lambda values: {(ci,): v for ci, v in values.items()}  # noqa: E731
    checks = [_check("dx", formula, dx, train, note) for formula, dx, note in _training_readings(n, c, hw)]
    checks += [
        _check("dweight", "gradWeight = sum gradOut*(x - saveMean) / sqrt(saveVar + eps) (training)",
               per_channel({ci: t["sum_g_xhat"][ci] for ci in range(c)}), train, "saveVar + eps = 1/saveInvstd^2"),
        _check("dbias", "gradBias = sum gradOut (training)", per_channel(t["sum_g"]), train, "summed per channel"),
    ]
    rm = {ci: make_symbol("running_mean", (ci,)) for ci in range(c)}
    inv = {ci: (make_symbol("running_var", (ci,)) + make_symbol("eps", (0,))) ** sympy.Rational(-1, 2)
           for ci in range(c)}
    g, x, w = t["g"], t["x"], t["w"]
    checks += [
        _check("dx", "gradInput = gradOut / sqrt(runningVar + eps) * weight (eval)",
               {i: g[i] * inv[i[1]] * w[i[1]] for i in g}, infer, "the statistics are constants in eval"),
        _check("dweight", "gradWeight = sum gradOut*(x - runningMean) / sqrt(runningVar + eps) (eval)",
               per_channel(_channel_sums({i: g[i] * (x[i] - rm[i[1]]) * inv[i[1]] for i in g}, n, c, hw)), infer,
               "summed per channel"),
        _check("dbias", "gradBias = sum gradOut (eval)", per_channel(t["sum_g"]), infer, "summed per channel"),
    ]
    return checks


MODEL = ProofModel(("N", "C", "HW", "training"), batch_norm_truth,
                   ((2, 2, 2, 1), (1, 2, 3, 1), (1, 1, 1, 1), (2, 2, 2, 0), (1, 1, 1, 0)), seed_checks)
