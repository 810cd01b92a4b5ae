"""aclnnBatchNormReduceBackward: the reduce half of a synchronized BatchNorm's backward
(ATen's batch_norm_backward_reduce; SyncBatchNorm all-reduces its sums across devices before
the elemt half, aclnnBatchNormElemtBackward, computes gradInput).

The kernel sees the data as (N, C, HW) (the channel on axis 1, every axis after it folded
into HW; see kernel.py) and mean/invstd as (C,):

    batch_norm_reduce_backward_sum_dy[c]         = sum_{n,hw} dy
    batch_norm_reduce_backward_sum_dy_xmu[c]     = sum_{n,hw} (x - mean) * dy
    batch_norm_reduce_backward_out_sum_dy[c]     = sum_dy            (sumDy)
    batch_norm_reduce_backward_out_sum_dy_xmu[c] = sum_dy_xmu        (sumDyXmu)
    batch_norm_reduce_backward_grad_weight[c]    = sum_dy_xmu * invstd
    batch_norm_reduce_backward_grad_bias[c]      = sum_dy

Float32 throughout, each output rounded once to its dtype. weight is checked, never read
(the op_api casts it and leaves it: gradWeight needs no weight). inputG asks for sumDy and
sumDyXmu, weightG for gradWeight, biasG for gradBias; the kernel computes all four and
writes only those asked for (Param.flag).
"""
from __future__ import annotations

from opgen.ops.batch_norm_reduce_backward import reference
from opgen.ops.batch_norm_reduce_backward.api import API
from opgen.ops.batch_norm_reduce_backward.kernel import (  # noqa: F401  (re-exported)
    COMBOS, F16, F32, BF16, INPUTS, OUTPUTS, PRODUCTS, STAGE, Problem, compute, kernel_args, kernel_shapes,
    output_shapes, random_inputs)
from opgen.ops.batch_norm_reduce_backward.peers import CASES, PEERS
from opgen import kernel_view as view
from opgen.ops.spec import CannOp, OpSpec

# CANN's aclnn layer runs two ReduceSum calls and then the l0 op SyncBatchNormBackwardReduce
# (inputs sum_dy, sum_dy_dx_pad, mean, invert_std; outputs sum_dy_xmu, y: its OpDef, cited in
# ``source``); opgen's kernel fuses the three, so its project takes the aclnn's tensors under
# the l0 op's names where they exist (mean, invert_std, sum_dy_xmu, y).
CANN = CannOp("SyncBatchNormBackwardReduce",
              inputs=(("grad_out", "dy"), ("input", "x"), ("mean", "mean"), ("invert_std", "invstd")),
              outputs=(("sum_dy", "sum_dy"), ("sum_dy_xmu", "sum_dy_xmu"), ("y", "grad_weight"),
                       ("grad_bias", "grad_bias")),
              source="ops-nn norm/sync_batch_norm_backward_reduce/op_host/sync_batch_norm_backward_reduce_def.cpp",
              view=view.channels("grad_out"))

SPEC = OpSpec(
    name="batch_norm_reduce_backward",
    aclnn_name="aclnnBatchNormReduceBackward",
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
    flops_per_element=4,   # counted from the TE stages: sum_dy (1), sum_dy_xmu (3)
)
