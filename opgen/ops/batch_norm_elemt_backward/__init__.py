"""aclnnBatchNormElemtBackward: the elementwise half of a synchronized BatchNorm's backward
(ATen's batch_norm_backward_elemt; the reduce half, aclnnBatchNormReduceBackward, computed
sumDy and sumDyXmu, which SyncBatchNorm all-reduced across devices with every rank's count).

The kernel sees gradOut, input and gradInput as (N, C, HW) (the channel on axis 1; see
kernel.py), mean, invstd, weight, sumDy, sumDyXmu as (C,), the counter flat as (K,):

    batch_norm_elemt_backward_total[0]     = sum_k counter[k]                      (float32)
    batch_norm_elemt_backward_inv_total[0] = 1 / total
    batch_norm_elemt_backward_mean_dy[c]   = sum_dy * inv_total
    batch_norm_elemt_backward_factor[c]    = invstd * invstd * (sum_dy_xmu * inv_total)
    batch_norm_elemt_backward_scale[c]     = invstd * weight
    batch_norm_elemt_backward_dx           = ((dy - mean_dy) - (x - mean) * factor) * scale

Float32 throughout, gradInput rounded once to its dtype (CANN computes in float16 when every
input is float16: docs/validation-vs-cann.md BE2). A null weight is ones (the op_api's FillScalar).
"""
from __future__ import annotations

from opgen.ops.batch_norm_elemt_backward import reference
from opgen.ops.batch_norm_elemt_backward.api import API
from opgen.ops.batch_norm_elemt_backward.kernel import (  # noqa: F401  (re-exported)
    COMBOS, F32, INPUTS, OUTPUTS, PRODUCTS, STAGE, Problem, compute, kernel_args, kernel_shapes, output_shapes,
    random_inputs)
from opgen.ops.batch_norm_elemt_backward.peers import CASES, PEERS
from opgen import kernel_view as view
from opgen.ops.spec import CannOp, OpSpec

# CANN's aclnn layer sums the counter (ReduceSum), divides sumDy and sumDyXmu by it
# (RealDiv), broadcasts every per-channel tensor to input's shape and runs the l0 op
# SyncBatchNormBackwardElemt (inputs grad_output, save_input, mean, invstd, weight, mean_dy,
# mean_dy_xmu; output grad_input: its OpDef, cited in ``source``); opgen's kernel fuses them,
# so its project takes the aclnn's tensors under the l0 op's names where they exist.
CANN = CannOp("SyncBatchNormBackwardElemt",
              inputs=(("grad_output", "dy"), ("save_input", "x"), ("mean", "mean"), ("invstd", "invstd"),
                      ("weight", "weight"), ("sum_dy", "sum_dy"), ("sum_dy_xmu", "sum_dy_xmu"),
                      ("counter", "counter")),
              outputs=(("grad_input", "dx"),),
              source="ops-nn norm/sync_batch_norm_backward_elemt/op_host/sync_batch_norm_backward_elemt_def.cpp",
              view=view.channels_and_count("grad_output", "counter"))

SPEC = OpSpec(
    name="batch_norm_elemt_backward",
    aclnn_name="aclnnBatchNormElemtBackward",
    doc=__doc__,
    inputs=INPUTS,
    outputs=OUTPUTS,
    combos=COMBOS,
    products=PRODUCTS,
    compute=compute,
    reference=reference.of_problem,
    random_inputs=random_inputs,
    kernel_args=kernel_args,
    problems=(Problem((2, 3, 4, 5)), Problem((3, 7, 33), (4,)), Problem((2, 33, 941), (2, 2)),
              Problem((5, 4, 3, 2, 7)), Problem((4, 3))),
    api=API,
    output_shapes=output_shapes,
    peers=PEERS,
    cases=CASES,
    package=__name__,
    cann=CANN,
    flops_per_element=7,   # counted from the TE stages: dx's sub, sub, sub, mul, mul (the casts not counted) + 2
)
