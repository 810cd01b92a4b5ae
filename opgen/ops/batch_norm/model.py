"""BatchNorm's forward in sympy: the truth opgen.derive proves the forward TE against.

A forward op's truth is its outputs themselves. The kernel serves both modes with one TE,
so the cases carry the mode as a fourth "extent", ``training`` (1 or 0), which names no TE
variable; the kernel's training flag is bound to it.
  * training: y = (x - E[x]) / sqrt(Var[x] + eps) * weight + bias per channel (over N and
    HW, the biased variance); saveMean = E[x], saveInvstd = 1/sqrt(Var[x] + eps). The
    kernel's shifted sums (about the channel's first element) must equal these exactly.
  * eval: the same with runningMean and runningVar for E[x] and Var[x].
"""
from __future__ import annotations

from functools import lru_cache

import sympy

from opgen.symbolic import EPS, FORWARD_COVERS, ProofModel, Truth, grid, make_symbol, symbols


@lru_cache(maxsize=None)
def batch_norm_forward_truth(n: int, c: int, hw: int, training: int) -> Truth:
    x, weight, bias = symbols("x", n, c, hw), symbols("weight", c), symbols("bias", c)
    m = n * hw
    if training:
        mean = {ci: sympy.Add(*(x[a, ci, i] for a, i in grid(n, hw))) / m for ci in range(c)}
        var = {ci: sympy.Add(*((x[a, ci, i] - mean[ci]) ** 2 for a, i in grid(n, hw))) / m for ci in range(c)}
    else:
        mean = {ci: make_symbol("running_mean", (ci,)) for ci in range(c)}
        var = {ci: make_symbol("running_var", (ci,)) for ci in range(c)}
    invstd = {ci: 1 / sympy.sqrt(var[ci] + EPS) for ci in range(c)}
    y = {i: (x[i] - mean[i[1]]) * invstd[i[1]] * weight[i[1],] + bias[i[1],] for i in x}
    outputs = {"y": y, "save_mean": {(ci,): mean[ci] for ci in range(c)},
               "save_invstd": {(ci,): invstd[ci] for ci in range(c)}}
    bind = {make_symbol("eps", (0,)): EPS, make_symbol("training", (0,)): sympy.Integer(1 if training else 0)}
    return Truth(outputs, bind)


MODEL = ProofModel(("N", "C", "HW", "training"), batch_norm_forward_truth,
                   ((2, 2, 2, 1), (1, 2, 3, 1), (2, 1, 2, 0)), covers=FORWARD_COVERS)
