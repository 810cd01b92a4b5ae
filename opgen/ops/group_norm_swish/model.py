"""GroupNormSwish's forward in sympy: the truth opgen.derive proves the forward TE against.

A forward op's truth is its outputs themselves: GroupNorm's mean and rstd, and
out = z * sigmoid(s * z) with z GroupNorm's output, as aclnnGroupNormSwish prints them, with
the kernel's eps bound to the model's eps, swish_scale to s and swish_on to 1 (activateSwish;
0 leaves z, GroupNorm's own proof). The sigmoid is written 1 / (1 + exp(-u)), the form
opgen.symbolic translates TE's sigmoid to.
"""
from __future__ import annotations

from functools import lru_cache

import sympy

from opgen.ops.group_norm.model import group_norm_forward_truth
from opgen.symbolic import FORWARD_COVERS, ProofModel, Truth, make_symbol

SCALE = sympy.Symbol("s", real=True)      # swishScale


@lru_cache(maxsize=None)
def group_norm_swish_forward_truth(n: int, g: int, d: int, hw: int) -> Truth:
    """GroupNorm's truth with y replaced by y * sigmoid(s * y)."""
    base = group_norm_forward_truth(n, g, d, hw)
    z = base.outputs["y"]
    y = {i: z[i] / (1 + sympy.exp(-SCALE * z[i])) for i in z}
    bind = {**base.bind, make_symbol("swish_scale", (0,)): SCALE, make_symbol("swish_on", (0,)): sympy.Integer(1)}
    return Truth({**base.outputs, "y": y}, bind)


MODEL = ProofModel(("N", "G", "D", "HW"), group_norm_swish_forward_truth, ((2, 2, 2, 2), (1, 1, 2, 3)),
                   covers=FORWARD_COVERS + "; swish_on = 1 (activateSwish)")
