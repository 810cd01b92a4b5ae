"""aclnnLayerNormBackward: the backward of LayerNorm (PyTorch's native_layer_norm_backward).

input has shape [A1..Ai, R1..Rj] and normalizedShape = [R1..Rj]; the kernel sees it as
(rows, cols) with rows = M = A1*..*Ai and cols = N = R1*..*Rj (N is the product of the
normalized dims, not their number: the document's l.59 is read as its op_api and kernel
compute it). mean and rstd hold one value per row and are used as given (CANN never
recomputes them); eps is inside rstd. With x_hat = (x - mean) * rstd and g = dy * gamma:

    dx     = rstd * (g - mean_N(g) - x_hat * mean_N(g * x_hat))
    dgamma = sum_rows dy * x_hat          dbeta = sum_rows dy

which is the document's gradInputOut = (g - (temp_1 + temp_2)) * rstd (l.39-49).
opgen.derive proves the stages below against sympy's derivative of the forward.

Stages (float32 throughout, each output rounded once into its dtype):
    layer_norm_backward_sum_g[r]   = sum_c dy * gamma
    layer_norm_backward_sum_gxc[r] = sum_c dy * gamma * (x - mean)
    layer_norm_backward_c1[r]      = rstd * sum_g * (1/N)               (rstd * mean_N(g))
    layer_norm_backward_c2[r]      = rstd^3 * sum_gxc * (1/N)           (rstd * mean_N(g * x_hat) * rstd)
    layer_norm_backward_dx[r, c]   = rstd * dy * gamma - c1 - (x - mean) * c2
    layer_norm_backward_dgamma[c]  = sum_r dy * (x - mean) * rstd
    layer_norm_backward_dbeta[c]   = sum_r dy
where the weight is half precision, ``_dgamma_acc``/``_dbeta_acc`` are the float32 sums and
``_dgamma``/``_dbeta`` round them. (x - mean) is kept explicit rather than expanded into
x * c + d, which would cancel catastrophically for |mean| >> std. This is the row pattern
with two column sums (schedules/patterns.py ``row_pass``).

weightOptional may be null (ones, as CANN builds them); biasOptional is validated and never
read: it is ``Param.validated_only`` (api.py), so the kernel has no tensor for it, no dtype
combo names it, and the plan never stages, fills or passes it.
"""
from __future__ import annotations

from opgen.ops.layer_norm_backward import reference
from opgen.ops.layer_norm_backward.api import API
from opgen.ops.layer_norm_backward.kernel import (  # noqa: F401  (re-exported)
    BF16_BF16, BF16_BF16_F32, BF16_F16, BF16_F16_F32, BF16_F32, BF16_F32_F32, COMBOS, F16_BF16, F16_BF16_F32, F16_F16,
    F16_F16_F32, F16_F32, F16_F32_F32, F32_F32, INPUTS, OUTPUTS, PRODUCTS, STAGE, Problem, compute, kernel_args,
    kernel_shapes, output_shapes, random_inputs)
from opgen.ops.layer_norm_backward.peers import CASES, PEERS
from opgen import kernel_view as view
from opgen.ops.spec import CannAttr, CannOp, OpSpec

# CANN's OpDef of this op: names, order and attributes as ops-nn defines them.
CANN = CannOp("LayerNormGradV3",
              inputs=(("dy", "dy"), ("x", "x"), ("rstd", "rstd"), ("mean", "mean"), ("gamma", "gamma")),
              outputs=(("pd_x", "dx"), ("pd_gamma", "dgamma"), ("pd_beta", "dbeta")),
              attrs=(CannAttr("output_mask", "ListBool", (True, True, True)),),
              round_modes=(("bfloat16", "CAST_ROUND"),),   # layer_norm_grad_v3_common.h b16RoundMode
              source="ops-nn norm/layer_norm_grad_v3/op_host/layer_norm_grad_v3_def.cpp",
              view=view.trailing("dy"))

SPEC = OpSpec(
    name="layer_norm_backward",
    aclnn_name="aclnnLayerNormBackward",
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
    flops_per_element=17,   # counted from the TE stages: the two row sums (2 + 4), dx (6), dgamma (4), dbeta (1)
)
