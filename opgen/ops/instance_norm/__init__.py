"""aclnnInstanceNorm: the forward of InstanceNorm (torch.nn.InstanceNorm2d's normalization,
with the mean and the biased variance as outputs), written once in TE.

InstanceNorm is GroupNorm with one channel per group, and the kernel sees it so: x as (N, C,
D, HW) with D = 1 (GroupNorm's (N, G, D, HW) with G = C), gamma and beta (C, D), mean and
variance (N, C). With M = D * HW and the stage names used below (all arithmetic in float32,
each output rounded once to x's dtype):
    instance_norm_sum[n,c,d]     = sum_hw x
    instance_norm_total[n,c]     = sum_d sum          instance_norm_mean32[n,c] = total / M
    instance_norm_sq[n,c,d]      = sum_hw (x - mean32)^2
    instance_norm_sq_total[n,c]  = sum_d sq           instance_norm_var32[n,c]  = sq_total / M
    instance_norm_rstd32[n,c]    = 1 / sqrt(var32 + eps)
    instance_norm_scale[n,c,d]   = rstd32 * gamma     instance_norm_shift[n,c,d] = beta - mean32 * scale
    instance_norm_y[n,c,d,hw]    = x * scale + shift
    instance_norm_mean, instance_norm_variance: mean32 and var32 in x's dtype (outputs).

The variance is taken about the mean (a second pass over the channel, from cache), not as
E[x^2] - E[x]^2, which loses every digit when |mean| >> std. It is the biased variance (over
M), the one the normalization divides by (the document's Var(x); torch's instance_norm uses
the same). aclnnGroupNormBackward with num_groups = C takes this op's mean and
rstd = 1 / sqrt(variance + eps) (opgen.torch's InstanceNorm modules hand them over so). eps
is the aclnn attribute, a (1,) float32 kernel input. The pattern is GroupNorm's grouped pass
without column sums: one parallel pass per (n, c).
"""
from __future__ import annotations

from opgen.ops.instance_norm import reference
from opgen.ops.instance_norm.api import API
from opgen.ops.instance_norm.kernel import (  # noqa: F401  (re-exported)
    COMBOS, F16, F32, INPUTS, OUTPUTS, PRODUCTS, STAGE, Problem, compute, kernel_args, kernel_shapes,
    output_shapes, random_inputs)
from opgen.ops.instance_norm.peers import CASES, PEERS
from opgen.kernel_view import RANK, Dim, KernelView, Prod
from opgen.ops.spec import CannAttr, CannOp, OpSpec

# CANN's l0 op aclnnInstanceNorm launches (op_host/op_api/instance_norm_v3.cpp l.56-57:
# OP_INPUT(x, gamma, beta), OP_OUTPUT(y, mean, variance), OP_ATTR(dataFormat, (float)eps)).
# Its OpDef is not in ops-nn at e5c3fa932: the attribute names follow the l0 call.
CANN = CannOp("InstanceNormV3", inputs=(("x", "x"), ("gamma", "gamma"), ("beta", "beta")),
              outputs=(("y", "y"), ("mean", "mean"), ("variance", "variance")),
              attrs=(CannAttr("data_format", "String", "NCHW"), CannAttr("epsilon", "Float", 1e-5, tensor="eps")),
              source="ops-nn norm/instance_norm_v3/op_host/op_api/instance_norm_v3.cpp",
              view=KernelView("x", (Dim(0), Dim(1), Prod(2, 2), Prod(2, RANK)), (4, 4),
                              canonical=((0,), (1, 2), (3,), ()),
                              note="NCHW: N = dim 0, C = dim 1, D = 1, HW = dims 2 and 3 multiplied"))

SPEC = OpSpec(
    name="instance_norm",
    aclnn_name="aclnnInstanceNorm",
    doc=__doc__,
    inputs=INPUTS,
    outputs=OUTPUTS,
    combos=COMBOS,
    products=PRODUCTS,
    compute=compute,
    reference=reference.of_problem,
    random_inputs=random_inputs,
    kernel_args=kernel_args,
    # The first is every generic suite's valid call (W != C: read as NHWC, its gamma is refused).
    problems=(Problem(2, 3, 2, 5), Problem(2, 16, 4, 5), Problem(2, 7, 33, 1), Problem(1, 64, 941, 1),
              Problem(3, 130, 7, 7),
              Problem(2, 3, 12290, 1, 1e-3)),
    api=API,
    output_shapes=output_shapes,
    peers=PEERS,
    cases=CASES,
    package=__name__,
    cann=CANN,
    flops_per_element=6,    # counted from the TE stages: the sum (1), the centred square sum (3), x*scale+shift (2)
)
