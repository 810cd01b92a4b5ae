"""aclnnGroupNormSwish: GroupNorm followed by Swish (the forward aclnnGroupNormSwishGrad
differentiates), written once in TE.

The kernel sees x as (N, G, D, HW), as aclnnGroupNorm's does, and shares its float32 stages
(opgen.ops.group_norm.kernel.normalization, named ``group_norm_swish_*`` here): per group the
mean, the variance about it, rstd = 1/sqrt(var + eps), then per channel scale = rstd * gamma
and shift = beta - mean * scale. The output stage is
    group_norm_swish_y[n,g,d,hw] = z * (on * sigmoid(s * z) + (1 - on)),   z = x * scale + shift
with on = activateSwish (a (1,) float32 input, 1 or 0) and s = swishScale (a (1,) float32
input): the swish when on = 1 and exactly z when on = 0, in one kernel with no branch. mean
and rstd (outputs, (N, G)) are rounded once to gamma's dtype, as the document types meanOut
and rstdOut; aclnnGroupNormSwishGrad takes them back. The pattern is a grouped pass without
column sums, as aclnnGroupNorm's.
"""
from __future__ import annotations

from opgen.ops.group_norm_swish import reference
from opgen.ops.group_norm_swish.api import API
from opgen.ops.group_norm_swish.kernel import (  # noqa: F401  (re-exported)
    BF16_BF16, BF16_F32, COMBOS, F16_F16, F16_F32, F32_F32, INPUTS, OUTPUTS, PRODUCTS, STAGE, Problem, compute,
    kernel_args, kernel_shapes, output_shapes, random_inputs)
from opgen.ops.group_norm_swish.peers import CASES, PEERS
from opgen import kernel_view as view
from opgen.ops.spec import CannAttr, CannOp, OpSpec

# CANN's OpDef (names, order, attributes as ops-nn defines them); activate_swish and
# swish_scale reach opgen's kernel as (1,) float32 GM scalars.
CANN = CannOp("GroupNormSwish", inputs=(("x", "x"), ("gamma", "gamma"), ("beta", "beta")),
              outputs=(("y", "y"), ("mean", "mean"), ("rstd", "rstd")),
              attrs=(CannAttr("num_groups", "Int"), CannAttr("data_format", "String", "NCHW"),
                     CannAttr("eps", "Float", 1e-5, tensor="eps"),
                     CannAttr("activate_swish", "Bool", True, tensor="swish_on"),
                     CannAttr("swish_scale", "Float", 1.0, tensor="swish_scale")),
              source="ops-nn norm/group_norm_swish/op_host/group_norm_swish_def.cpp",
              view=view.grouped("x"))

SPEC = OpSpec(
    name="group_norm_swish",
    aclnn_name="aclnnGroupNormSwish",
    doc=__doc__,
    inputs=INPUTS,
    outputs=OUTPUTS,
    combos=COMBOS,
    products=PRODUCTS,
    compute=compute,
    reference=reference.of_problem,
    random_inputs=random_inputs,
    kernel_args=kernel_args,
    problems=(Problem(2, 3, 4, 1), Problem(2, 6, 33, 3, 1e-5, 0.5), Problem(1, 64, 941, 64),
              Problem(3, 2130, 7, 71), Problem(2, 4, 12290, 2, 1e-3, 1.0, False)),
    api=API,
    output_shapes=output_shapes,
    peers=PEERS,
    cases=CASES,
    package=__name__,
    cann=CANN,
    flops_per_element=10,   # counted from the TE stages: GroupNorm's 6, the swish's s*z, on*sig + (1-on), z*(...)
)
