"""aclnnGroupNormSwishGrad: the backward of GroupNorm followed by Swish (CANN's GroupNormSwish).

The forward (aclnnGroupNormSwish): x (N, C, ...) in G groups of D = C / G channels of HxW
elements, M = D * HxW per (n, g); x_hat = (x - mean) * rstd, y = x_hat * gamma + beta,
out = y * sigmoid(s * y) with s = swishScale. The backward takes mean and rstd as inputs
(never recomputed from x; no eps) and recomputes y. With sig = sigmoid(s * y) and
dy_eff = dy * d out / d y = dy * sig * (1 + s * y * (1 - sig)), it is GroupNorm's backward
of dy_eff:

    dx     = rstd * (gamma*dy_eff - mean_g(gamma*dy_eff) - x_hat * mean_g(gamma*dy_eff*x_hat))
    dgamma = sum_{n,hw} dy_eff * x_hat          dbeta = sum_{n,hw} dy_eff

The document prints dx as rstd * (dYNew*gamma - x_hat * (sum gamma_i*dGamma) - (sum
gamma_i*dBeta)): that drops the 1/M, and its dGamma/dBeta there are the per-(n, group)
partial sums over the group's channels, not the outputs (its kernel and its ST golden
divide by M). opgen.derive proves the stages below against sympy's derivative of the
forward; model.py judges the printed formula.

The kernel sees x as (N, G, D, HW), mean, rstd and swish_scale (s in every element) as
(N, G), gamma and beta as (G, D). Stages (float32 throughout, rounded once into each
output's dtype):
    group_norm_swish_grad_y[n,g,d,hw]      = (x - mean) * rstd * gamma + beta
    group_norm_swish_grad_dy_eff[n,g,d,hw] = (1 + z * (1 - sigmoid(z))) * (dy * sigmoid(z)),
                                             z = swish_scale * y
    group_norm_swish_grad_ds[n,g,d]   = sum_hw dy_eff * x
    group_norm_swish_grad_db[n,g,d]   = sum_hw dy_eff
    group_norm_swish_grad_sum_ds[n,g] = sum_d ds * gamma
    group_norm_swish_grad_sum_db[n,g] = sum_d db * gamma
    group_norm_swish_grad_c2[n,g]     = (sum_db * mean - sum_ds) * rstd^3 / M
    group_norm_swish_grad_c3[n,g]     = -c2 * mean - sum_db * rstd / M
    group_norm_swish_grad_dx[n,g,d,hw] = rstd * gamma * dy_eff + c2 * x + c3
    group_norm_swish_grad_dgamma_acc[g,d] = sum_n (ds - db * mean) * rstd
    group_norm_swish_grad_dbeta_acc[g,d]  = sum_n db
and, for float16/bfloat16, ``_dgamma``/``_dbeta`` round the accumulators. y and dy_eff are
an elementwise prologue: every target's schedules inline it into ds, db and dx (recomputed
there, never stored) and schedule the rest as the group pattern, like GroupNormBackward.
"""
from __future__ import annotations

from opgen.ops.group_norm_swish_grad import reference
from opgen.ops.group_norm_swish_grad.api import API
from opgen.ops.group_norm_swish_grad.kernel import (  # noqa: F401  (re-exported)
    BF16_BF16, COMBOS, F16_F16, F32_F32, INPUTS, OUTPUTS, PRODUCTS, STAGE, Problem, compute, kernel_args,
    kernel_shapes, output_shapes, random_inputs)
from opgen.ops.group_norm_swish_grad.peers import CASES, PEERS
from opgen import kernel_view as view
from opgen.ops.spec import CannAttr, CannOp, OpSpec

# CANN's OpDef of this op: names, order and attributes as ops-nn defines them.
CANN = CannOp("GroupNormSwishGrad",
              inputs=(("dy", "dy"), ("mean", "mean"), ("rstd", "rstd"), ("x", "x"), ("gamma", "gamma"),
                      ("beta", "beta")),
              outputs=(("dx", "dx"), ("dgamma", "dgamma"), ("dbeta", "dbeta")),
              attrs=(CannAttr("num_groups", "Int"), CannAttr("data_format", "String", "NCHW"),
                     CannAttr("swish_scale", "Float", 1.0, tensor="swish_scale"),
                     CannAttr("dgamma_is_require", "Bool", True), CannAttr("dbeta_is_require", "Bool", True)),
              round_modes=(("bfloat16", "CAST_ROUND"), ("float16", "CAST_ROUND")),   # group_norm_swish_grad.h
              source="ops-nn norm/group_norm_swish_grad/op_host/group_norm_swish_grad_def.cpp",
              view=view.grouped("dy"))

SPEC = OpSpec(
    name="group_norm_swish_grad",
    aclnn_name="aclnnGroupNormSwishGrad",
    doc=__doc__,
    inputs=INPUTS,
    outputs=OUTPUTS,
    combos=COMBOS,
    products=PRODUCTS,
    compute=compute,
    reference=reference.of_problem,
    random_inputs=random_inputs,
    kernel_args=kernel_args,
    problems=(Problem((2, 3, 4), 1), Problem((2, 6, 3, 11), 3, 0.5), Problem((1, 64, 941), 64, -2.0),
              Problem((3, 2130, 7), 71, 1.7)),
    api=API,
    output_shapes=output_shapes,
    peers=PEERS,
    cases=CASES,
    package=__name__,
    cann=CANN,
    flops_per_element=22,   # from the TE stages: dy_eff 14 (y 4, z 1, sigmoid 4, the rest 5), ds and db 3, dx 5
)
