"""AdaLayerNorm's forward in sympy: the truth opgen.derive proves the TE against, and the CANN
document's printed formulas (aclnnAdaLayerNormBackward.md, "计算公式") judged by it."""
from __future__ import annotations

from functools import lru_cache

import sympy

from opgen.symbolic import EPS, ProofModel, SeedCheck, Truth, equal, grad, grid, make_symbol, symbols

DOC = "aclnnAdaLayerNormBackward"   # hicann/ops-nn norm/ada_layer_norm_grad/docs/aclnnAdaLayerNormBackward.md


@lru_cache(maxsize=None)
def ada_layer_norm_truth(batch: int, seq: int, hidden: int) -> Truth:
    """out = ((x - mean) * rstd(x) * gamma + beta) * (1 + scale[b]) + shift[b], mean and the
    biased variance over hidden, scale and shift one row per sample."""
    x, dy = symbols("x", batch, seq, hidden), symbols("dy", batch, seq, hidden)
    gamma, beta = symbols("gamma", hidden), symbols("beta", hidden)
    scale, shift = symbols("scale", batch, hidden), symbols("shift", batch, hidden)
    rows = grid(batch, seq)
    mean = {r: sympy.Add(*(x[(*r, h)] for h in range(hidden))) / hidden for r in rows}
    base = {r: sympy.Add(*((x[(*r, h)] - mean[r]) ** 2 for h in range(hidden))) / hidden + EPS for r in rows}

    def out(b, s, h):
        normed = (x[b, s, h] - mean[b, s]) * base[b, s] ** sympy.Rational(-1, 2) * gamma[h,] + beta[h,]
        return normed * (1 + scale[b, h]) + shift[b, h]
    loss = sympy.Add(*(dy[i] * out(*i) for i in grid(batch, seq, hidden)))
    stat = {base[r]: make_symbol("rstd", r) ** -2 for r in rows}
    outputs = {"dx": grad(loss, x, stat), "dscale": grad(loss, scale, stat), "dshift": grad(loss, shift, stat),
               "dgamma": grad(loss, gamma, stat), "dbeta": grad(loss, beta, stat)}
    return Truth(outputs, {make_symbol("mean", r): mean[r] for r in rows})


def _printed(batch: int, seq: int, hidden: int) -> dict:
    """The document's five formulas, literally, over the kernel's symbols."""
    x, dy = symbols("x", batch, seq, hidden), symbols("dy", batch, seq, hidden)
    w, bias, scale = symbols("gamma", hidden), symbols("beta", hidden), symbols("scale", batch, hidden)
    mean, rstd = symbols("mean", batch, seq), symbols("rstd", batch, seq)
    z = {(b, s, h): (x[b, s, h] - mean[b, s]) * rstd[b, s] for b, s, h in x}
    dy_g = {(b, s, h): dy[b, s, h] * w[h,] * (1 + scale[b, h]) for b, s, h in x}
    temp1 = {(b, s): sympy.Add(*(dy_g[b, s, h] for h in range(hidden))) / hidden for b, s in mean}
    dot = {(b, s): sympy.Add(*(dy_g[b, s, h] * z[b, s, h] for h in range(hidden))) for b, s in mean}
    return {
        "dx": {(b, s, h): (dy_g[b, s, h] - (temp1[b, s] + z[b, s, h] * dot[b, s] / hidden)) * rstd[b, s]
               for b, s, h in x},
        "dscale": {(b, h): sympy.Add(*(dy[b, s, h] * (z[b, s, h] * w[h,] + bias[h,]) for s in range(seq)))
                   for b, h in scale},
        "dshift": {(b, h): sympy.Add(*(dy[b, s, h] for s in range(seq))) for b, h in scale},
        "dgamma": {(h,): sympy.Add(*(dy[b, s, h] * (1 + scale[b, h]) * z[b, s, h] for b, s in mean))
                   for h in range(hidden)},
        "dbeta": {(h,): sympy.Add(*(dy[b, s, h] * (1 + scale[b, h]) for b, s in mean)) for h in range(hidden)},
    }


def seed_checks(batch: int = 2, seq: int = 2, hidden: int = 3) -> list[SeedCheck]:
    """The document's formulas: gradInputOut with N = H (normalizedShape is [H]),
    gradScaleOut/gradShiftOut summed over S (reduce_axis_1), gradWeightOut/gradBiasOut over
    B and S (reduce_axis_0,1)."""
    truth = ada_layer_norm_truth(batch, seq, hidden)
    printed = _printed(batch, seq, hidden)
    lines = {"dx": ("gradInputOut = (gradOut*weight*(1+scale) - (temp_1 + temp_2)) * rstd", "dy_g, temp_1, temp_2"),
             "dscale": ("gradScaleOut = sum_{reduce_axis_1} gradOut*((input-mean)*rstd*weight + bias)", ""),
             "dshift": ("gradShiftOut = sum_{reduce_axis_1} gradOut", ""),
             "dgamma": ("gradWeightOut = sum_{reduce_axis_0,1} gradOut*(1+scale)*(input-mean)*rstd", ""),
             "dbeta": ("gradBiasOut = sum_{reduce_axis_0,1} gradOut*(1+scale)", "")}
    return [SeedCheck(DOC, "ada_layer_norm_backward", name, formula, equal(printed[name], truth, name),
                      "计算公式 (反向)" + (f": {detail}" if detail else ""))
            for name, (formula, detail) in lines.items()]


# (batch, seq, hidden): two small cases and a degenerate one (one element per row: x_hat = 0, dx = 0).
MODEL = ProofModel(("batch", "seq", "hidden"), ada_layer_norm_truth, ((2, 2, 3), (1, 3, 2), (2, 2, 1)), seed_checks)
