"""aclnnBatchNorm: the forward of BatchNorm (PyTorch's native_batch_norm), written once in TE
(the op aclnnBatchNormBackward differentiates).

The kernel sees the data as (N, C, HW) (aclnnBatchNormBackward's canonical form: every
axis before the channel folded into N, every axis after it into HW) and the per-channel
tensors as (C,). M = N * HW elements per channel. The mode t is data (1.0 training, 0.0
eval), like eps, so one kernel serves both; with the stage names used below (float32
throughout, each output rounded once to its dtype):

    batch_norm_shift[c]     = x[0, c, 0] if N * HW > 0 else 0  (the channel's first element)
    batch_norm_sum[c]       = sum_{n,hw} (x - shift)
    batch_norm_sumsq[c]     = sum_{n,hw} (x - shift)^2
    batch_norm_mean32[c]    = t * (shift + sum / M) + (1 - t) * runningMean
    batch_norm_var32[c]     = t * (sumsq / M - (sum / M)^2) + (1 - t) * runningVar
    batch_norm_invstd32[c]  = 1 / sqrt(var32 + eps)
    batch_norm_scale[c]     = invstd32 * weight      batch_norm_offset[c] = bias - mean32 * scale
    batch_norm_y[n, c, hw]  = x * scale + offset
    batch_norm_save_mean, batch_norm_save_invstd: mean32 and invstd32 in their dtype (outputs).

The variance comes from one pass over the channel with the data shifted by one of its own
elements (the shifted-data algorithm): exact algebraically for any shift, and about a
sample the cancellation of E[(x-K)^2] - E[x-K]^2 costs a few bits at most, where the
unshifted E[x^2] - E[x]^2 loses every digit when |mean| >> std. One pass is what the
channel pattern (``ChannelPass`` / ``GpuChannelPass``) schedules: its sums may read
per-channel statistics that read no sum (the shift), not a mean that needs a first pass.
In eval the sums are computed and not used (the arithmetic blend the proofs translate).
"""
from __future__ import annotations

from opgen.ops.batch_norm import reference
from opgen.ops.batch_norm.api import API
from opgen.ops.batch_norm.kernel import (  # noqa: F401  (re-exported)
    BF16_ROWS, COMBOS, F16_ROWS, F32, INPUTS, OUTPUTS, PRODUCTS, STAGE, Problem, compute, kernel_args,
    kernel_shapes, output_shapes, random_inputs)
from opgen.ops.batch_norm.peers import CASES, PEERS
from opgen import kernel_view as view
from opgen.ops.spec import CannAttr, CannOp, OpSpec

# CANN's OpDef of aclnnBatchNorm's kernel: BatchNormV3 (inputs, saveMean/saveRstd, attributes
# in its order). Its running_mean/running_var outputs (the in-place momentum update) are not
# listed: opgen's kernel updates no running statistics (api.py), so it has no such tensors.
CANN = CannOp("BatchNormV3", inputs=(("x", "x"), ("weight", "weight"), ("bias", "bias"),
                                     ("running_mean", "running_mean"), ("running_var", "running_var")),
              outputs=(("y", "y"), ("save_mean", "save_mean"), ("save_rstd", "save_invstd")),
              attrs=(CannAttr("epsilon", "Float", 1e-5, tensor="eps"), CannAttr("momentum", "Float", 0.1),
                     CannAttr("is_training", "Bool", True, tensor="training")),
              source="ops-nn norm/batch_norm_v3/op_host/batch_norm_v3_def.cpp",
              view=view.channels("x"))

SPEC = OpSpec(
    name="batch_norm",
    aclnn_name="aclnnBatchNorm",
    doc=__doc__,
    inputs=INPUTS,
    outputs=OUTPUTS,
    combos=COMBOS,
    products=PRODUCTS,
    compute=compute,
    reference=reference.of_problem,
    random_inputs=random_inputs,
    kernel_args=kernel_args,
    problems=(Problem((2, 3, 4, 5)), Problem((3, 7, 33)), Problem((2, 33, 941), False, 1e-3),
              Problem((5, 4, 3, 2, 7)), Problem((7, 6, 5, 3), channel_last=True), Problem((1, 2, 12290)),
              Problem((1, 1)), Problem((0, 0))),
    api=API,
    output_shapes=output_shapes,
    peers=PEERS,
    cases=CASES,
    package=__name__,
    cann=CANN,
    flops_per_element=7,    # counted from the TE stages: the shifted sum (2), the shifted square sum (3), y (2)
)
