"""aclnnSyncBatchNormGatherStats: the gather of a synchronized BatchNorm's forward from sums:
after each rank's per-channel sum and square sum and an all-gather, every rank's totalSum and
totalSquareSum (W, C) and sampleCount (W,) become the global mean and 1/sqrt(var + eps) of the
whole batch, per channel (the document's formulas, l.31-51).

The kernel sees the sums as (N, C, HW) with N = W ranks and HW = 1 (see kernel.py), the
counts as (N,); aclnnBatchNormGatherStatsWithCounts's gather with plain sums (shift 0):

    sync_batch_norm_gather_stats_count[c]    = sum_{n,hw} sampleCount
    sync_batch_norm_gather_stats_sum[c]      = sum_{n,hw} totalSum
    sync_batch_norm_gather_stats_sumsq[c]    = sum_{n,hw} totalSquareSum
    sync_batch_norm_gather_stats_mean32[c]   = 0 + sum / count
    sync_batch_norm_gather_stats_var32[c]    = sumsq / count - (sum / count)^2
    sync_batch_norm_gather_stats_invstd32[c] = 1 / sqrt(var32 + eps)
    sync_batch_norm_gather_stats_batch_mean, _batch_invstd: mean32 and invstd32 in their dtype (outputs).

Float32 throughout, each output rounded once. The running mean and variance (mean, variance)
are not updated in place (api.py: no in-out parameters in opgen): momentum must be 0.
"""
from __future__ import annotations

from opgen.ops.sync_batch_norm_gather_stats import reference
from opgen.ops.sync_batch_norm_gather_stats.api import API
from opgen.ops.sync_batch_norm_gather_stats.kernel import (  # noqa: F401  (re-exported)
    COMBOS, F32, INPUTS, OUTPUTS, PRODUCTS, STAGE, Problem, compute, kernel_args, kernel_shapes, output_shapes,
    random_inputs)
from opgen.ops.sync_batch_norm_gather_stats.peers import CASES, PEERS
from opgen import kernel_view as view
from opgen.ops.spec import CannAttr, CannOp, OpSpec

# CANN's OpDef (op_host/sync_batch_norm_gather_stats_def.cpp): inputs total_sum,
# total_square_sum, sample_count, mean, variance; outputs batch_mean, batch_invstd, mean,
# variance (the running update, which opgen's kernel does not write: api.py), attributes
# momentum and eps. opgen's kernel reads the first three.
CANN = CannOp("SyncBatchNormGatherStats",
              inputs=(("total_sum", "total_sum"), ("total_square_sum", "total_square_sum"),
                      ("sample_count", "sample_count")),
              outputs=(("batch_mean", "batch_mean"), ("batch_invstd", "batch_invstd")),
              attrs=(CannAttr("momentum", "Float", 0.1), CannAttr("eps", "Float", 1e-5, tensor="eps")),
              source="ops-nn norm/sync_batch_norm_gather_stats/op_host/sync_batch_norm_gather_stats_def.cpp",
              view=view.channels("total_sum"))

SPEC = OpSpec(
    name="sync_batch_norm_gather_stats",
    aclnn_name="aclnnSyncBatchNormGatherStats",
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
    flops_per_element=3,   # counted from the TE stages per (rank, channel): count, sum, sumsq (1 each)
)
