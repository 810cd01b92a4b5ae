"""aclnnGroupNorm: the forward of GroupNorm (PyTorch's native_group_norm), written once in TE.

The kernel sees x as (N, G, D, HW): G groups of D = C / G channels of HW elements each;
gamma and beta are (G, D); mean and rstd are (N, G). With M = D * HW and the stage names
used below (all arithmetic in float32, each output rounded once to its dtype):
    group_norm_sum[n,g,d]     = sum_hw x
    group_norm_total[n,g]     = sum_d sum            group_norm_mean32[n,g] = total / M
    group_norm_sq[n,g,d]      = sum_hw (x - mean32)^2
    group_norm_sq_total[n,g]  = sum_d sq             group_norm_rstd32[n,g] = 1/sqrt(sq_total / M + eps)
    group_norm_scale[n,g,d]   = rstd32 * gamma       group_norm_shift[n,g,d] = beta - mean32 * scale
    group_norm_y[n,g,d,hw]    = x * scale + shift
    group_norm_mean, group_norm_rstd: mean32 and rstd32 in the statistics' dtype (outputs).

The variance is taken about the mean (a second pass over the group, from cache), not as
E[x^2] - E[x]^2, which loses every digit when |mean| >> std; per-channel scale and shift
leave one multiply-add per element. mean and rstd are what aclnnGroupNormBackward takes.
eps is the aclnn attribute, a (1,) float32 kernel input. The pattern is a grouped pass
without column sums: one parallel pass per (n, group).
"""
from __future__ import annotations

from opgen.ops.group_norm import reference
from opgen.ops.group_norm.api import API
from opgen.ops.group_norm.kernel import (  # noqa: F401  (re-exported)
    BF16_BF16, BF16_F32, COMBOS, F16_F16, F16_F32, F32_F32, INPUTS, OUTPUTS, PRODUCTS, STAGE, Problem, compute,
    kernel_args, kernel_shapes, output_shapes, random_inputs)
from opgen.ops.group_norm.peers import CASES, PEERS
from opgen import kernel_view as view
from opgen.ops.spec import CannAttr, CannOp, OpSpec

# CANN's OpDef of the op aclnnGroupNorm's outputs match (y, mean, rstd: GroupNormV2; GroupNorm's
# own OpDef returns a variance): names, order and attributes as ops-nn defines them.
CANN = CannOp("GroupNormV2", inputs=(("x", "x"), ("gamma", "gamma"), ("beta", "beta")),
              outputs=(("y", "y"), ("mean", "mean"), ("rstd", "rstd")),
              attrs=(CannAttr("num_groups", "Int"), CannAttr("data_format", "String", "NHWC"),
                     CannAttr("eps", "Float", 1e-5, tensor="eps"), CannAttr("is_training", "Bool", True)),
              source="ops-nn norm/group_norm_v2/op_host/group_norm_v2_def.cpp",
              view=view.grouped("x"))

SPEC = OpSpec(
    name="group_norm",
    aclnn_name="aclnnGroupNorm",
    doc=__doc__,
    inputs=INPUTS,
    outputs=OUTPUTS,
    combos=COMBOS,
    products=PRODUCTS,
    compute=compute,
    reference=reference.of_problem,
    random_inputs=random_inputs,
    kernel_args=kernel_args,
    problems=(Problem(2, 3, 4, 1), Problem(2, 6, 33, 3), Problem(1, 64, 941, 64), Problem(3, 2130, 7, 71),
              Problem(2, 4, 12290, 2, 1e-3)),
    api=API,
    output_shapes=output_shapes,
    peers=PEERS,
    cases=CASES,
    package=__name__,
    cann=CANN,
    flops_per_element=6,    # counted from the TE stages: the sum (1), the centred square sum (3), x*scale+shift (2)
)
