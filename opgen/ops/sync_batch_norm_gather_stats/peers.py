"""SyncBatchNormGatherStats's peers (opgen compare, opgen bench) and the shapes the tools use.

ATen has no op of these inputs (its batch_norm_gather_stats takes means and invstds, not
sums: that is aclnnBatchNormGatherStatsWithCounts), so the peer is the torch composite of the
document's formulas in float32, each output in the sums' dtype.
"""
from __future__ import annotations

from opgen.ops.spec import Cases, Peer


def _composite(problem, t: dict):
    out = t["total_sum"].dtype
    eps = problem.eps

    def run():
        n = t["sample_count"].float().sum()
        mean = t["total_sum"].float().sum(0) / n
        var = t["total_square_sum"].float().sum(0) / n - mean * mean
        return {"batch_mean": mean.to(out), "batch_invstd": (var + eps).rsqrt().to(out)}
    return run


PEERS = (
    Peer("composite", "the torch composite of the document's formulas, float32", _composite, compare=True),
)

CASES = Cases(compare=("4x64", "7x33"),
              bench=("8x64", "8x1024", "64x1024", "256x4096"),
              quick="8x1024", tiny="2x4")
