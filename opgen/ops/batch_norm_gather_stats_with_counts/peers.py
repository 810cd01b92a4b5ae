"""BatchNormGatherStatsWithCounts's peers (opgen compare, opgen bench) and the shapes the tools use.

ATen's ``batch_norm_gather_stats_with_counts`` has a CUDA kernel only (no CPU one: torch 2.13
answers "Could not run ... with arguments from the 'CPU' backend"), so on the CPU the peer is
the torch composite a SyncBatchNorm user would write: the count-weighted mean, the law of
total variance, in float32, each output in the statistics' dtype. On CUDA ATen's own kernel
joins (``devices=("cuda",)``).
"""
from __future__ import annotations

from opgen.ops.spec import Cases, Peer
from opgen.peers import import_torch


def _composite(problem, t: dict):
    out = t["mean"].dtype
    eps = problem.eps

    def run():
        mean, invstd = t["mean"].float(), t["invstd"].float()
        k = t["counts"].float().view(-1, 1)
        n = k.sum()
        mean_all = (k * mean).sum(0) / n
        var = (k * (1.0 / (invstd * invstd) - eps + (mean - mean_all) ** 2)).sum(0) / n
        return {"mean_all": mean_all.to(out), "invstd_all": (var + eps).rsqrt().to(out)}
    return run


def _aten(problem, t: dict):
    torch = import_torch()

    def run():
        mean_all, invstd_all = torch.batch_norm_gather_stats_with_counts(
            t["mean"], t["mean"], t["invstd"], None, None, 0.0, problem.eps, t["counts"])
        return {"mean_all": mean_all, "invstd_all": invstd_all}
    return run


PEERS = (
    Peer("composite", "the torch composite: count-weighted mean, the law of total variance, float32", _composite,
         compare=True),
    Peer("aten", "ATen's batch_norm_gather_stats_with_counts (CUDA only: no CPU kernel)", _aten, devices=("cuda",)),
)

CASES = Cases(compare=("4x64", "7x33"),
              bench=("8x64", "8x1024", "64x1024", "256x4096"),
              quick="8x1024", tiny="2x4")
