"""aclnnRmsNormGrad: the backward of RmsNorm, written once in TE.

Forward (per row r of the flattened x, over its ``cols`` trailing elements):
    y[r, c] = x[r, c] * rstd[r] * gamma[c],   rstd[r] = 1 / sqrt(mean_c(x[r, c]^2) + eps)

Backward, with the stage names used below (all arithmetic in float32):
    rms_norm_grad_dot[r]    = sum_c dy[r, c] * gamma[c] * x[r, c]
    rms_norm_grad_coef[r]   = rms_norm_grad_dot[r] * rstd[r]^3 / cols
    rms_norm_grad_dx[r, c]  = rstd[r] * dy[r, c] * gamma[c] - x[r, c] * rms_norm_grad_coef[r]
    rms_norm_grad_dgamma[c] = sum_r dy[r, c] * x[r, c] * rstd[r]

which is the seed's dx = rstd * (dy*g - x*rstd * Mean(dy*g*x*rstd)) with the per-row factor
rstd^3/cols hoisted out of the inner loop (a divide per element costs more than the math).
rstd is treated as an input, exactly as CANN does: the gradient flowing through rstd's
dependence on x is the second term, already included above (opgen.derive proves it).

Shapes: x and dy have any rank 1-8; gamma covers the last ``gamma.ndim`` axes, so with
n = x.ndim - gamma.ndim the kernel sees rows = prod(x.shape[:n]) and cols = prod(x.shape[n:]).
rstd holds one value per row and dgamma is always float32.
"""
from __future__ import annotations

from opgen.ops.rms_norm_grad import reference
from opgen.ops.rms_norm_grad.api import API
from opgen.ops.rms_norm_grad.kernel import (  # noqa: F401  (re-exported)
    BF16_BF16, BF16_F32, COMBOS, F16_F16, F16_F32, F32_F32, INPUTS, OUTPUTS, PRODUCTS, Problem, compute, kernel_args,
    kernel_shapes, output_shapes, random_inputs)
from opgen.ops.rms_norm_grad.peers import CASES, PEERS
from opgen import kernel_view as view
from opgen.ops.spec import CannOp, OpSpec

# CANN's OpDef of this op: names, order and attributes as ops-nn defines them.
CANN = CannOp("RmsNormGrad", inputs=(("dy", "dy"), ("x", "x"), ("rstd", "rstd"), ("gamma", "gamma")),
              outputs=(("dx", "dx"), ("dgamma", "dgamma")),
              source="ops-nn norm/rms_norm_grad/op_host/rms_norm_grad_def.cpp",
              view=view.trailing("dy"))

SPEC = OpSpec(
    name="rms_norm_grad",
    aclnn_name="aclnnRmsNormGrad",
    doc=__doc__,
    inputs=INPUTS,
    outputs=OUTPUTS,
    combos=COMBOS,
    products=PRODUCTS,
    compute=compute,
    reference=reference.of_problem,
    random_inputs=random_inputs,
    kernel_args=kernel_args,
    problems=(Problem((2, 1, 16), 1), Problem((7, 33), 1), Problem((3, 12290), 1), Problem((4, 941), 1)),
    api=API,
    output_shapes=output_shapes,
    peers=PEERS,
    cases=CASES,
    package=__name__,
    cann=CANN,
    flops_per_element=10,   # counted from the TE stages: the row dot, dx's terms and dgamma's
)
