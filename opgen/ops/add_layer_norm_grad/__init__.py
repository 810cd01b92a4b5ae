"""aclnnAddLayerNormGrad: the backward of Add + LayerNorm (x = x1 + x2, y = LayerNorm(x) * gamma + beta).

dy, x1 and x2 have shape [A1..Ai, R1..Rj] and gamma [R1..Rj]; the kernel sees them as
(rows, cols), rows = A1*..*Ai, cols = R1*..*Rj. rstd and mean hold one value per row (dy's
leading dims, then 1s) and are used as given. With x = x1 + x2, x_hat = (x - mean) * rstd
and g = dy * gamma:

    dx     = rstd * (g - mean_N(g) - x_hat * mean_N(g * x_hat)) + dsum
    dgamma = sum_rows dy * x_hat          dbeta = sum_rows dy

dx is the gradient of x1 and of x2 alike (one output, the document's dxOut, l.104-108), dsum
the gradient reaching x from elsewhere (dsumOptional; null: no term). opgen.derive proves
the stages below against sympy's derivative of the forward (opgen.ops.add_layer_norm_grad.model).

Stages (float32 throughout, dx rounded once into its dtype; dgamma/dbeta are float32):
    add_layer_norm_grad_sum_g[r]   = sum_c dy * gamma
    add_layer_norm_grad_sum_gxc[r] = sum_c dy * gamma * (x1 + x2 - mean)
    add_layer_norm_grad_c1[r]      = rstd * sum_g * (1/N)
    add_layer_norm_grad_c2[r]      = rstd^3 * sum_gxc * (1/N)
    add_layer_norm_grad_dx[r, c]   = rstd * dy * gamma - c1 - (x1 + x2 - mean) * c2 [+ dsum]
    add_layer_norm_grad_dgamma[c]  = sum_r dy * (x1 + x2 - mean) * rstd
    add_layer_norm_grad_dbeta[c]   = sum_r dy
LayerNormBackward's row pattern with two column sums (schedules/patterns.py ``row_pass``).

dsum is the first user of OpSpec.optional_terms: every dtype combo has a variant without it
(tag ``...-nodsum``: no dsum parameter, no ``+ dsum``), which a call with a null
dsumOptional runs, so no tensor of zeros the size of dy is made (CANN's kernel too has a
no-dsum path, op_kernel add_layer_norm_grad_cut_d.h HAS_ADDITIONAL_INPUT/has_dsum).
"""
from __future__ import annotations

from opgen.ops.add_layer_norm_grad import reference
from opgen.ops.add_layer_norm_grad.api import API
from opgen.ops.add_layer_norm_grad.kernel import (  # noqa: F401  (re-exported)
    BF16_F32, COMBOS, F16_F32, F32_F32, INPUTS, OPTIONAL_TERMS, OUTPUTS, PRODUCTS, STAGE, Problem, compute,
    kernel_args, kernel_shapes, output_shapes, random_inputs)
from opgen.ops.add_layer_norm_grad.peers import CASES, PEERS
from opgen import kernel_view as view
from opgen.ops.spec import CannOp, OpSpec

# CANN's OpDef of this op: names and order as ops-nn defines them (no attributes).
CANN = CannOp("AddLayerNormGrad",
              inputs=(("dy", "dy"), ("x1", "x1"), ("x2", "x2"), ("rstd", "rstd"), ("mean", "mean"),
                      ("gamma", "gamma"), ("dsum", "dsum")),
              outputs=(("dx", "dx"), ("dgamma", "dgamma"), ("dbeta", "dbeta")),
              source="ops-nn norm/add_layer_norm_grad/op_host/add_layer_norm_grad_def.cpp",
              view=view.trailing("dy", ranks=(1, 8), params_ranks=(1, 8)))   # api.py _check_ranks

SPEC = OpSpec(
    name="add_layer_norm_grad",
    aclnn_name="aclnnAddLayerNormGrad",
    doc=__doc__,
    inputs=INPUTS,
    outputs=OUTPUTS,
    combos=COMBOS,
    products=PRODUCTS,
    compute=compute,
    reference=reference.of_problem,
    random_inputs=random_inputs,
    kernel_args=kernel_args,
    problems=(Problem((2, 3, 8), 2), Problem((2, 2), 1), Problem((7, 33), 1), Problem((4, 941), 1),
              Problem((3, 12290), 1), Problem((3, 5, 7), 1)),
    api=API,
    output_shapes=output_shapes,
    peers=PEERS,
    cases=CASES,
    package=__name__,
    cann=CANN,
    optional_terms=OPTIONAL_TERMS,
    # counted from the TE stages: x1 + x2 - mean formed per use (2 each), the two row sums (2 + 4),
    # dx (6, + 1 with dsum), dgamma (4), dbeta (1)
    flops_per_element=19,
)
