"""BatchNormElemt's peers (opgen compare, opgen bench) and the shapes the tools use.

ATen's ``batch_norm_elemt`` has a CUDA kernel only ("Could not run 'aten::batch_norm_elemt' with
arguments from the 'CPU' backend", torch 2.13), so on the CPU the peer is the torch composite of
ATen's CUDA kernel: float32 math, y = (x - mean) * (invstd * weight) + bias, output in input's
dtype. On CUDA ATen's own kernel joins (``devices=("cuda",)``).
"""
from __future__ import annotations

from opgen.ops.spec import Cases, Peer
from opgen.peers import import_torch


def _composite(problem, t: dict):
    x = t["x"]
    shape = [1, x.shape[1]] + [1] * (x.ndim - 2)

    def run():
        per = lambda name: t[name].float().view(shape)  # noqa: E731
        y = (x.float() - per("mean")) * (per("invstd") * per("weight")) + per("bias")
        return {"y": y.to(x.dtype)}
    return run


def _aten(problem, t: dict):
    torch = import_torch()

    def run():
        return {"y": torch.batch_norm_elemt(t["x"], t["weight"], t["bias"], t["mean"], t["invstd"], 1e-5)}
    return run


PEERS = (
    Peer("composite", "the torch composite of ATen's CUDA kernel: float32 math, the per-channel scale once",
         _composite, compare=True),
    Peer("aten", "ATen's batch_norm_elemt (CUDA only: no CPU kernel)", _aten, devices=("cuda",)),
)

CASES = Cases(compare=("2x16x7x9", "3x5x11"),
              bench=("32x64x56x56", "32x256x14x14", "16x512x7x7", "8x128x28x28"),
              quick="8x128x28x28", tiny="1x4x2x2")
