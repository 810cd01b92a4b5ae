"""aclnnGroupNormBackward: the backward of GroupNorm (PyTorch's native_group_norm_backward).

The kernel sees x as (N, G, D, HW): G groups of D = C / G channels of HW elements each;
mean and rstd are (N, G), gamma is (G, D). With x_hat = (x - mean) * rstd and
M = D * HW, the true gradient is

    dx     = rstd * (gamma*dy - mean_g(gamma*dy) - x_hat * mean_g(gamma*dy*x_hat))
    dgamma = sum_{n,hw} dy * x_hat          dbeta = sum_{n,hw} dy

The seed prints gradInput as "mean * rstd * gamma [gradOut - (gradBetaOut + x_hat *
gradGammaOut) / N]": that garbles it (the factor is rstd * gamma, not mean * rstd * gamma,
and the bracket's sums are per-group sums of gamma-weighted terms over M elements, not the
per-channel outputs over N). opgen.derive proves the formula below against sympy's
derivative of the forward.

Stages (float32 throughout, rounded once into each output's dtype):
    group_norm_backward_ds[n,g,d]   = sum_hw dy * x
    group_norm_backward_db[n,g,d]   = sum_hw dy
    group_norm_backward_sum_ds[n,g] = sum_d ds * gamma
    group_norm_backward_sum_db[n,g] = sum_d db * gamma
    group_norm_backward_c2[n,g]     = (sum_db * mean - sum_ds) * rstd^3 / M
    group_norm_backward_c3[n,g]     = -c2 * mean - sum_db * rstd / M
    group_norm_backward_dx[n,g,d,hw] = rstd * gamma * dy + c2 * x + c3
    group_norm_backward_dgamma_acc[g,d] = sum_n (ds - db * mean) * rstd
    group_norm_backward_dbeta_acc[g,d]  = sum_n db
and, when mean's dtype is not float32, ``_dgamma``/``_dbeta`` round the accumulators.
(sum_hw dy * x_hat = (ds - db * mean) * rstd, so x_hat is never materialised.)
gamma may be absent: the caller passes ones, as CANN does.
"""
from __future__ import annotations

from opgen.ops.group_norm_backward import reference
from opgen.ops.group_norm_backward.api import API
from opgen.ops.group_norm_backward.kernel import (  # noqa: F401  (re-exported)
    BF16_BF16, BF16_F32, COMBOS, F16_F16, F16_F32, F32_F32, INPUTS, OUTPUTS, PRODUCTS, STAGE, Problem, compute,
    kernel_args, kernel_shapes, output_shapes, random_inputs)
from opgen.ops.group_norm_backward.peers import CASES, PEERS
from opgen import kernel_view as view
from opgen.ops.spec import CannAttr, CannOp, OpSpec

# CANN's OpDef of this op: names, order and attributes as ops-nn defines them.
CANN = CannOp("GroupNormGrad",
              inputs=(("dy", "dy"), ("mean", "mean"), ("rstd", "rstd"), ("x", "x"), ("gamma", "gamma")),
              outputs=(("dx", "dx"), ("dgamma", "dgamma"), ("dbeta", "dbeta")),
              attrs=(CannAttr("num_groups", "Int"), CannAttr("data_format", "String", "NCHW"),
                     CannAttr("dx_is_require", "Bool", True), CannAttr("dgamma_is_require", "Bool", True),
                     CannAttr("dbeta_is_require", "Bool", True)),
              round_modes=(("bfloat16", "CAST_ROUND"), ("float16", "CAST_ROUND")),   # group_norm_grad.h Custom_DataCopy_Out
              source="ops-nn norm/group_norm_grad/op_host/group_norm_grad_def.cpp",
              view=view.grouped("dy"))

SPEC = OpSpec(
    name="group_norm_backward",
    aclnn_name="aclnnGroupNormBackward",
    doc=__doc__,
    inputs=INPUTS,
    outputs=OUTPUTS,
    combos=COMBOS,
    products=PRODUCTS,
    compute=compute,
    reference=reference.of_problem,
    random_inputs=random_inputs,
    kernel_args=kernel_args,
    problems=(Problem(2, 3, 4, 1), Problem(2, 6, 33, 3), Problem(1, 64, 941, 64), Problem(3, 2130, 7, 71)),
    api=API,
    output_shapes=output_shapes,
    peers=PEERS,
    cases=CASES,
    package=__name__,
    cann=CANN,
    flops_per_element=7,    # counted from the TE stages: the channel sums, dx's terms, dgamma/dbeta
)
