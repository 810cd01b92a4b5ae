"""aclnnBatchNormElemt: the elementwise half of a synchronized BatchNorm's forward (ATen's
batch_norm_elemt; the statistics half, aclnnBatchNormReduce, gave each device's per-channel sum
and squareSum, which SyncBatchNorm all-reduced across devices into mean and invstd).

The kernel sees input and output as (N, C, HW) (the channel on axis 1, every axis after it
folded into HW; see kernel.py), weight, bias, mean and invstd as (C,):

    batch_norm_elemt_scale[c] = invstd * weight
    batch_norm_elemt_y        = (x - mean) * scale + bias

Float32 throughout, output rounded once to its dtype. A null weight is ones, a null bias zeros
(the op_api's FillScalar). eps is no part of the math: CANN forms var = 1/invstd^2 - eps and
BNInfer adds eps back (docs/validation-vs-cann.md EL3).
"""
from __future__ import annotations

from opgen.ops.batch_norm_elemt import reference
from opgen.ops.batch_norm_elemt.api import API
from opgen.ops.batch_norm_elemt.kernel import (  # noqa: F401  (re-exported)
    COMBOS, F32, INPUTS, OUTPUTS, PRODUCTS, STAGE, Problem, compute, kernel_args, kernel_shapes, output_shapes,
    random_inputs)
from opgen.ops.batch_norm_elemt.peers import CASES, PEERS
from opgen import kernel_view as view
from opgen.ops.spec import CannOp, OpSpec

# CANN's aclnn layer has no OpDef of its own: it turns invstd into a variance (Mul, Div, Sub),
# fills a null weight or bias and runs batch_norm_v3's BatchNorm in inference (the l0 op BNInfer
# on A2/A3, BatchNormV3 on the 950), the op_api cited in ``source``. opgen's kernel is one pass,
# so its project takes the aclnn's tensors under the aclnn's names.
CANN = CannOp("BatchNormElemt",
              inputs=(("input", "x"), ("weight", "weight"), ("bias", "bias"), ("mean", "mean"),
                      ("invstd", "invstd")),
              outputs=(("output", "y"),),
              source="ops-nn norm/batch_norm_elemt/op_host/op_api/aclnn_batch_norm_elemt.cpp",
              view=view.channels("input"))

SPEC = OpSpec(
    name="batch_norm_elemt",
    aclnn_name="aclnnBatchNormElemt",
    doc=__doc__,
    inputs=INPUTS,
    outputs=OUTPUTS,
    combos=COMBOS,
    products=PRODUCTS,
    compute=compute,
    reference=reference.of_problem,
    random_inputs=random_inputs,
    kernel_args=kernel_args,
    problems=(Problem((2, 3, 4, 5)), Problem((3, 7, 33)), Problem((2, 33, 941)), Problem((5, 4, 3, 2, 7)),
              Problem((4, 3))),
    api=API,
    output_shapes=output_shapes,
    peers=PEERS,
    cases=CASES,
    package=__name__,
    cann=CANN,
    flops_per_element=3,   # counted from the TE stages: y's sub, mul, add (the casts not counted)
)
