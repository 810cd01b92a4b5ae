"""RmsNorm's peers (opgen compare, opgen bench) and the shapes the tools use.

The library side of ``opgen compare`` is ATen's fused kernel, ``_fused_rms_norm``, the one
op of torch 2.13 that returns rstd as this op does. ``opgen bench`` times it, the eager
``F.rms_norm`` a PyTorch user calls (a composite of pow, mean, rsqrt and two multiplies on
the CPU), and its torch.compile. Each closure runs the forward only and returns its outputs
by kernel name; the peers that keep no rstd return ``y`` alone, and the tools compare what
a peer returns.
"""
from __future__ import annotations

from opgen.ops.spec import Cases, Peer
from opgen.peers import import_torch


def _fused(problem, t: dict):
    """ATen's ``_fused_rms_norm(x, normalized_shape, weight, eps) -> (y, rstd)``. It wants
    the weight in x's dtype, so a float32 gamma for half x is rounded once, outside the
    timed call."""
    torch = import_torch()
    x, gamma = t["x"], t["gamma"].to(t["x"].dtype)
    shape = list(gamma.shape)

    def run():
        y, rstd = torch.ops.aten._fused_rms_norm(x, shape, gamma, problem.epsilon)
        return {"y": y, "rstd": rstd}
    return run


def _functional(problem, t: dict, compiled: bool):
    """``F.rms_norm`` (eager or torch.compile'd on fresh dynamo caches, as the backward
    peers do), y only."""
    torch = import_torch()
    x, gamma = t["x"], t["gamma"].to(t["x"].dtype)
    shape = tuple(gamma.shape)

    def forward(x, gamma):
        return torch.nn.functional.rms_norm(x, shape, gamma, problem.epsilon)
    if compiled:
        torch._dynamo.reset()
        forward = torch.compile(forward)

    def run():
        with torch.no_grad():
            return {"y": forward(x, gamma)}
    return run


PEERS = (
    Peer("aten", "ATen's _fused_rms_norm (y and rstd)", _fused, compare=True),
    Peer("eager", "eager F.rms_norm, forward only", lambda problem, t: _functional(problem, t, False)),
    Peer("compile", "torch.compile of F.rms_norm, forward only", lambda problem, t: _functional(problem, t, True)),
)

CASES = Cases(compare=("256x1024",), bench=("4096x4096", "8192x5120", "8x512x1024", "16384x1024"),
              quick="4096x4096", tiny="4x64")
