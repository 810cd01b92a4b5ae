"""aclnnBatchNormReduce: the statistics half of a synchronized BatchNorm's forward (CANN's
BNTrainingReduce; ATen's counterpart is batch_norm_stats, which returns mean and invstd: CANN
returns the sums, which SyncBatchNorm all-reduces across devices before it forms mean and
invstd and the elemt half, aclnnBatchNormElemt, normalizes).

The kernel sees x as (N, C, HW) (NCHW: the channel on axis 1, H x W folded into HW; NHWC: the
channel last, N x H x W folded into N and HW = 1; see kernel.py):

    batch_norm_reduce_total[c]      = sum_{n,hw} x
    batch_norm_reduce_squares[c]    = sum_{n,hw} x * x
    batch_norm_reduce_sum[c]        = total      (sum)
    batch_norm_reduce_square_sum[c] = squares    (squareSum)

x widened to float32, both sums accumulated in float32 (in a fixed order: deterministic),
both outputs FLOAT32.
"""
from __future__ import annotations

from opgen.ops.batch_norm_reduce import reference
from opgen.ops.batch_norm_reduce.api import API
from opgen.ops.batch_norm_reduce.kernel import (  # noqa: F401  (re-exported)
    COMBOS, F16, F32, BF16, INPUTS, OUTPUTS, PRODUCTS, STAGE, Problem, compute, kernel_args, kernel_shapes,
    output_shapes, random_inputs)
from opgen.ops.batch_norm_reduce.peers import CASES, PEERS
from opgen import kernel_view as view
from opgen.ops.spec import CannOp, OpSpec

# CANN's aclnn layer makes x contiguous and runs the l0 op BNTrainingReduce (input x; outputs
# sum, square_sum: its OpDef, cited in ``source``), then views the 4-D sums as 1-D; opgen's
# kernel is that op, under the same tensor names.
CANN = CannOp("BNTrainingReduce",
              inputs=(("x", "x"),),
              outputs=(("sum", "sum"), ("square_sum", "square_sum")),
              source="ops-nn norm/bn_training_reduce/op_host/bn_training_reduce_def.cpp",
              view=view.channels("x"))

SPEC = OpSpec(
    name="batch_norm_reduce",
    aclnn_name="aclnnBatchNormReduce",
    doc=__doc__,
    inputs=INPUTS,
    outputs=OUTPUTS,
    combos=COMBOS,
    products=PRODUCTS,
    compute=compute,
    reference=reference.of_problem,
    random_inputs=random_inputs,
    kernel_args=kernel_args,
    problems=(Problem((2, 3, 4, 5)), Problem((3, 7, 33, 1)), Problem((2, 33, 941, 1)), Problem((2, 4, 3, 5), True),
              Problem((1, 1, 1, 1))),
    api=API,
    output_shapes=output_shapes,
    peers=PEERS,
    cases=CASES,
    package=__name__,
    cann=CANN,
    flops_per_element=3,   # counted from the TE stages: total (1), squares (2)
)
