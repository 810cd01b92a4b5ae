"""GroupNormSwish's peers (opgen compare, opgen bench) and the shapes the tools use.

torch has no GroupNorm + Swish kernel: the library side of ``opgen compare`` is ATen's
``native_group_norm`` followed by ATen's ``silu`` (swishScale 1) or ``x * sigmoid(s * x)``,
with the statistics native_group_norm returns; ``opgen bench`` also times the eager
``F.group_norm`` + ``F.silu`` a PyTorch user writes. Each closure runs the forward only.
"""
from __future__ import annotations

from opgen.ops.spec import Cases, Peer
from opgen.peers import import_torch


def _swish(torch, z, problem):
    if not problem.activateSwish:
        return z
    return torch.nn.functional.silu(z) if problem.swishScale == 1.0 else z * torch.sigmoid(problem.swishScale * z)


def _native(problem, t: dict):
    torch = import_torch()
    p = problem
    x, gamma, beta = t["x"], t["gamma"].to(t["x"].dtype), t["beta"].to(t["x"].dtype)

    def run():
        z, mean, rstd = torch.ops.aten.native_group_norm(x, gamma, beta, p.N, p.C, p.HxW, p.group, p.eps)
        return {"y": _swish(torch, z, p), "mean": mean, "rstd": rstd}
    return run


def _functional(problem, t: dict):
    torch = import_torch()
    x, gamma, beta = t["x"], t["gamma"].to(t["x"].dtype), t["beta"].to(t["x"].dtype)

    def run():
        with torch.no_grad():
            z = torch.nn.functional.group_norm(x, problem.group, gamma, beta, problem.eps)
            return {"y": _swish(torch, z, problem)}
    return run


PEERS = (
    Peer("aten", "ATen's native_group_norm, then silu (y, mean and rstd)", _native, compare=True),
    Peer("eager", "eager F.group_norm + F.silu, forward only", _functional),
)

CASES = Cases(compare=("2,64,16x16,8",), bench=("32,32,64x64,8", "2,320,64x64,32", "8,256,56x56,32"),
              quick="32,32,64x64,8", tiny="1,32,2x2,8")
