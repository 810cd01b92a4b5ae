"""aclnnBatchNormGatherStatsWithCounts: the gather of a synchronized BatchNorm's forward (ATen's
batch_norm_gather_stats_with_counts): after each rank's aclnnBatchNormStats and an all-gather,
every rank's per-channel mean and invstd (W, C) and element count (W,) become the global mean
and 1/sqrt(var + eps) of the whole batch, per channel.

The kernel sees mean and invstd as (N, C, HW) with N = W ranks and HW = 1 (see kernel.py),
counts as (N,); k = counts[n], var_n = 1/invstd^2 - eps (each rank's biased variance):

    batch_norm_gather_stats_with_counts_shift[c]  = mean[0, c, 0] if N > 0 else 0   (rank 0's mean)
    batch_norm_gather_stats_with_counts_count[c]  = sum_{n,hw} k
    batch_norm_gather_stats_with_counts_sum[c]    = sum_{n,hw} k * (mean - shift)
    batch_norm_gather_stats_with_counts_sumsq[c]  = sum_{n,hw} k * (var_n + (mean - shift)^2)
    batch_norm_gather_stats_with_counts_mean32[c] = shift + sum / count    (0 if N = 0)
    batch_norm_gather_stats_with_counts_var32[c]  = sumsq / count - (sum / count)^2
    batch_norm_gather_stats_with_counts_invstd32[c] = 1 / sqrt(var32 + eps)
    batch_norm_gather_stats_with_counts_mean_all, _invstd_all: mean32 and invstd32 in their dtype (outputs).

Float32 throughout, each output rounded once. The sums about rank 0's mean are the law of
total variance (the ranks' variances plus the spread of their means) with the spread's
cancellation bounded by how far the ranks' means lie apart, not by |mean|. A rank whose
count is 0 adds nothing; a total count of 0 gives NaN. runningMean/runningVar are not
updated in place (api.py: no in-out parameters in opgen): with either given, momentum must be 0.
"""
from __future__ import annotations

from opgen.ops.batch_norm_gather_stats_with_counts import reference
from opgen.ops.batch_norm_gather_stats_with_counts.api import API
from opgen.ops.batch_norm_gather_stats_with_counts.kernel import (  # noqa: F401  (re-exported)
    BF16, COMBOS, F16, F32, INPUTS, OUTPUTS, PRODUCTS, STAGE, Problem, compute, kernel_args, kernel_shapes,
    output_shapes, random_inputs)
from opgen.ops.batch_norm_gather_stats_with_counts.peers import CASES, PEERS
from opgen import kernel_view as view
from opgen.ops.spec import CannAttr, CannOp, OpSpec

# CANN's aclnn layer runs ReduceSum, ReduceMeanWithCount and the l0 op
# SyncBatchNormGatherStatsWithCounts (A2/A3, training; l.227-277), or
# SyncBatchNormGatherStatsFused on the Ascend 950 (l.374-420, l.450-460; its OpDef cited in ``source``);
# opgen's kernel fuses them, so its project takes the fused op's names.
CANN = CannOp("SyncBatchNormGatherStatsFused",
              inputs=(("mean", "mean"), ("invstd", "invstd"), ("counts", "counts")),
              outputs=(("mean_all", "mean_all"), ("invstd_all", "invstd_all")),
              attrs=(CannAttr("eps", "Float", 1e-5, tensor="eps"), CannAttr("momentum", "Float", 0.01)),
              source="ops-nn norm/sync_batch_norm_gather_stats_fused/op_host/"
                     "sync_batch_norm_gather_stats_fused_def.cpp",
              view=view.channels("mean"))

SPEC = OpSpec(
    name="batch_norm_gather_stats_with_counts",
    aclnn_name="aclnnBatchNormGatherStatsWithCounts",
    doc=__doc__,
    inputs=INPUTS,
    outputs=OUTPUTS,
    combos=COMBOS,
    products=PRODUCTS,
    compute=compute,
    reference=reference.of_problem,
    random_inputs=random_inputs,
    kernel_args=kernel_args,
    problems=(Problem(4, 3), Problem(2, 7), Problem(7, 33), Problem(1, 941), Problem(3, 1, 1e-3)),
    api=API,
    output_shapes=output_shapes,
    peers=PEERS,
    cases=CASES,
    package=__name__,
    cann=CANN,
    flops_per_element=13,   # counted from the TE stages per (rank, channel): count (1), sum (3), sumsq (9)
)
