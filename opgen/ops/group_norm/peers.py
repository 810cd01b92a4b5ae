"""GroupNorm's peers (opgen compare, opgen bench) and the shapes the tools use.

The library side of ``opgen compare`` is ATen's hand-written ``native_group_norm``, which
returns y, mean and rstd as this op does; ``opgen bench`` also times the eager
``F.group_norm`` a PyTorch user calls. Each closure runs the forward only and returns its
outputs by kernel name. Bench shapes: issue 21's UNet layers (batch 32, 64x64 and 32x32)
next to the backward op's shapes.
"""
from __future__ import annotations

from opgen.ops.spec import Cases, Peer
from opgen.peers import import_torch


def _native(problem, t: dict):
    torch = import_torch()
    p = problem

    def run():
        y, mean, rstd = torch.ops.aten.native_group_norm(t["x"], t["gamma"], t["beta"], p.N, p.C, p.HxW, p.group,
                                                         p.eps)
        return {"y": y, "mean": mean, "rstd": rstd}
    return run


def _functional(problem, t: dict):
    torch = import_torch()
    x, gamma, beta = t["x"], t["gamma"], t["beta"]

    def run():
        with torch.no_grad():
            return {"y": torch.nn.functional.group_norm(x, problem.group, gamma, beta, problem.eps)}
    return run


PEERS = (
    Peer("aten", "ATen's native_group_norm (y, mean and rstd)", _native, compare=True),
    Peer("eager", "eager F.group_norm, forward only", _functional),
)

CASES = Cases(compare=("2,64,16x16,8",),
              bench=("32,32,64x64,8", "32,64,32x32,16", "2,320,64x64,32", "8,256,56x56,32"),
              quick="32,32,64x64,8", tiny="1,32,2x2,8")
