"""aclnnRmsNorm: the forward of RmsNorm, written once in TE (the op aclnnRmsNormGrad differentiates).

Per row r of the flattened x, over its ``cols`` trailing elements (gamma's axes), with the
stage names used below (all arithmetic in float32, y rounded once to x's dtype):
    rms_norm_sumsq[r] = sum_c x[r, c]^2
    rms_norm_rstd[r]  = 1 / sqrt(rms_norm_sumsq[r] / cols + eps)      (an output: rstdOut)
    rms_norm_y[r, c]  = x[r, c] * rms_norm_rstd[r] * gamma[c]

rstd is what aclnnRmsNormGrad takes back, in the dtype it takes (float32), so a training
step's backward reads the forward's statistics as they are. eps is the aclnn attribute
``epsilon``, a (1,) float32 kernel input. The pattern is a row pass without column sums:
one pass per row reads x for the sum and again (from cache) for y.

Shapes: x has rank 1-8; gamma covers the last ``gamma.ndim`` axes, so with
n = x.ndim - gamma.ndim the kernel sees rows = prod(x.shape[:n]), cols = prod(x.shape[n:]);
rstdOut has x's rank with the normalized dims 1.
"""
from __future__ import annotations

from opgen.ops.rms_norm import reference
from opgen.ops.rms_norm.api import API
from opgen.ops.rms_norm.kernel import (  # noqa: F401  (re-exported)
    BF16_BF16, BF16_F32, COMBOS, F16_F16, F16_F32, F32_F32, INPUTS, OUTPUTS, PRODUCTS, STAGE, Problem, compute,
    kernel_args, kernel_shapes, output_shapes, random_inputs)
from opgen.ops.rms_norm.peers import CASES, PEERS
from opgen import kernel_view as view
from opgen.ops.spec import CannAttr, CannOp, OpSpec

# CANN's OpDef of this op: names, order and attributes as ops-nn defines them (epsilon is the
# (1,) float32 kernel input eps here).
CANN = CannOp("RmsNorm", inputs=(("x", "x"), ("gamma", "gamma")), outputs=(("y", "y"), ("rstd", "rstd")),
              attrs=(CannAttr("epsilon", "Float", 1e-6, tensor="eps"),),
              source="ops-nn norm/rms_norm/op_host/rms_norm_def.cpp",
              view=view.trailing("x"))

SPEC = OpSpec(
    name="rms_norm",
    aclnn_name="aclnnRmsNorm",
    doc=__doc__,
    inputs=INPUTS,
    outputs=OUTPUTS,
    combos=COMBOS,
    products=PRODUCTS,
    compute=compute,
    reference=reference.of_problem,
    random_inputs=random_inputs,
    kernel_args=kernel_args,
    problems=(Problem((2, 1, 16)), Problem((7, 33)), Problem((3, 12290)), Problem((4, 941), 1, 1e-5),
              Problem((3, 4, 7), 2), Problem((5, 1))),
    api=API,
    output_shapes=output_shapes,
    peers=PEERS,
    cases=CASES,
    package=__name__,
    cann=CANN,
    flops_per_element=4,    # counted from the TE stages: x^2 summed (2), x * rstd * gamma (2)
)
