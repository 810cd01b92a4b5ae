"""BatchNormReduceBackward's peers (opgen compare, opgen bench) and the shapes the tools use.

ATen's ``batch_norm_backward_reduce`` has a CUDA kernel only (no CPU one), so on the CPU the
peer is the torch composite a SyncBatchNorm user would write: the two channel sums in
float32 (as ATen's CUDA kernel accumulates), gradWeight = sumDyXmu * invstd, each output in
the statistics' dtype. On CUDA ATen's own kernel joins (``devices=("cuda",)``).
"""
from __future__ import annotations

from opgen.ops.spec import Cases, Peer
from opgen.peers import import_torch


def _composite(problem, t: dict):
    dy, x = t["dy"], t["x"]
    axes = [0] + list(range(2, x.ndim))
    shape = [1, x.shape[1]] + [1] * (x.ndim - 2)
    out = t["mean"].dtype

    def run():
        g = dy.float()
        sum_dy = g.sum(axes)
        sum_dy_xmu = (g * (x.float() - t["mean"].float().view(shape))).sum(axes)
        grad_weight = sum_dy_xmu * t["invstd"].float()
        return {"sum_dy": sum_dy.to(out), "sum_dy_xmu": sum_dy_xmu.to(out), "grad_weight": grad_weight.to(out),
                "grad_bias": sum_dy.to(out)}
    return run


def _aten(problem, t: dict):
    torch = import_torch()

    def run():
        sum_dy, sum_dy_xmu, grad_weight, grad_bias = torch.batch_norm_backward_reduce(
            t["dy"], t["x"], t["mean"], t["invstd"], None, True, True, True)
        return {"sum_dy": sum_dy, "sum_dy_xmu": sum_dy_xmu, "grad_weight": grad_weight, "grad_bias": grad_bias}
    return run


PEERS = (
    Peer("composite", "the torch composite: float32 channel sums, gradWeight = sumDyXmu * invstd", _composite,
         compare=True),
    Peer("aten", "ATen's batch_norm_backward_reduce (CUDA only: no CPU kernel)", _aten, devices=("cuda",)),
)

CASES = Cases(compare=("2x16x7x9", "3x5x11"),
              bench=("32x64x56x56", "32x256x14x14", "16x512x7x7", "8x128x28x28"),
              quick="8x128x28x28", tiny="1x4x2x2")
