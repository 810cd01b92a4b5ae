"""InstanceNorm's forward in sympy: the truth opgen.derive proves the forward TE against.

A forward op's truth is its outputs themselves: y, mean and variance as aclnnInstanceNorm's
document prints them (y = (x - E(x)) / sqrt(Var(x) + eps) * gamma + beta, E and Var over
each (n, c)'s H * W elements, Var the biased variance about the mean), written over x's
(N, C, HW) indices and read through the kernel's (N, C, D, HW) form with D = 1, with the
kernel's eps input bound to the model's eps.
"""
from __future__ import annotations

from functools import lru_cache

import sympy

from opgen.symbolic import EPS, FORWARD_COVERS, ProofModel, Truth, grid, make_symbol, symbols


@lru_cache(maxsize=None)
def instance_norm_forward_truth(n: int, c: int, d: int, hw: int) -> Truth:
    """The document's formula per (n, c) over its HW elements (D is 1: the kernel's grouped
    form of one channel per group; a D other than 1 is no InstanceNorm call)."""
    if d != 1:
        raise ValueError(f"InstanceNorm's kernel form has D = 1, not {d}")
    x, gamma, beta = symbols("x", n, c, d, hw), symbols("gamma", c, d), symbols("beta", c, d)
    mean, variance, y = {}, {}, {}
    for a, b in grid(n, c):
        values = [x[(a, b, 0, i)] for i in range(hw)]
        mean[(a, b)] = sympy.Add(*values) / hw
        variance[(a, b)] = sympy.Add(*((v - mean[(a, b)]) ** 2 for v in values)) / hw
        for i in range(hw):
            y[(a, b, 0, i)] = ((x[(a, b, 0, i)] - mean[(a, b)]) / sympy.sqrt(variance[(a, b)] + EPS)
                               * gamma[(b, 0)] + beta[(b, 0)])
    return Truth({"y": y, "mean": mean, "variance": variance}, {make_symbol("eps", (0,)): EPS})


MODEL = ProofModel(("N", "C", "D", "HW"), instance_norm_forward_truth, ((2, 2, 1, 3), (1, 1, 1, 2)),
                   covers=FORWARD_COVERS, combo="f32")
