"""BatchNormElemtBackward's peers (opgen compare, opgen bench) and the shapes the tools use.

ATen's ``batch_norm_backward_elemt`` has a CUDA kernel only (no CPU one: "Could not run
'aten::batch_norm_backward_elemt' with arguments from the 'CPU' backend", torch 2.x), so on
the CPU the peer is the torch composite of ATen's CUDA kernel: float32 math, the per-channel
coefficients once (mean_dy = sumDy / n, factor = invstd^2 * sumDyXmu / n, n the counter's
sum), gradInput in input's dtype. On CUDA ATen's own kernel joins (``devices=("cuda",)``).
"""
from __future__ import annotations

from opgen.ops.spec import Cases, Peer
from opgen.peers import import_torch


def _composite(problem, t: dict):
    dy, x = t["dy"], t["x"]
    shape = [1, x.shape[1]] + [1] * (x.ndim - 2)

    def run():
        per = lambda name: t[name].float().view(shape)  # noqa: E731
        total = t["counter"].float().sum()
        mean_dy = per("sum_dy") / total
        factor = per("invstd") * per("invstd") * (per("sum_dy_xmu") / total)
        dx = ((dy.float() - mean_dy) - (x.float() - per("mean")) * factor) * (per("invstd") * per("weight"))
        return {"dx": dx.to(x.dtype)}
    return run


def _aten(problem, t: dict):
    torch = import_torch()

    def run():
        return {"dx": torch.batch_norm_backward_elemt(t["dy"], t["x"], t["mean"], t["invstd"], t["weight"],
                                                      t["sum_dy"], t["sum_dy_xmu"], t["counter"].int())}
    return run


PEERS = (
    Peer("composite", "the torch composite of ATen's CUDA kernel: float32 math, per-channel coefficients once",
         _composite, compare=True),
    Peer("aten", "ATen's batch_norm_backward_elemt (CUDA only: no CPU kernel)", _aten, devices=("cuda",)),
)

CASES = Cases(compare=("2x16x7x9,4", "3x5x11,2x2"),
              bench=("32x64x56x56,8", "32x256x14x14,8", "16x512x7x7,8", "8x128x28x28,8"),
              quick="8x128x28x28,8", tiny="1x4x2x2,2")
