"""LayerNorm's peers (opgen compare, opgen bench) and the shapes the tools use.

The library side of ``opgen compare`` is ATen's hand-written ``native_layer_norm``, which
returns y, mean and rstd as this op does; ``opgen bench`` also times the eager
``F.layer_norm`` a PyTorch user calls. Each closure runs the forward only. ATen takes
mixed dtypes only as half data with float32 weight and bias, so a weight or bias in
another dtype than the data reaches it upcast to float32 (exactly).
"""
from __future__ import annotations

from opgen.ops.spec import Cases, Peer
from opgen.peers import import_torch


def _params(problem, t: dict):
    """(x, normalized_shape, weight, bias) as ATen takes them."""
    x, weight, bias = t["x"], t.get("gamma"), t.get("beta")
    if any(p is not None and p.dtype != x.dtype for p in (weight, bias)):
        weight, bias = (None if p is None else p.float() for p in (weight, bias))
    return x, list(problem.x_shape[problem.n:]), weight, bias


def _native(problem, t: dict):
    torch = import_torch()
    x, shape, weight, bias = _params(problem, t)

    def run():
        y, mean, rstd = torch.native_layer_norm(x, shape, weight, bias, problem.eps)
        return {"y": y, "mean": mean, "rstd": rstd}
    return run


def _functional(problem, t: dict):
    torch = import_torch()
    x, shape, weight, bias = _params(problem, t)
    weight, bias = (None if p is None else p.to(x.dtype) for p in (weight, bias))   # F.layer_norm: one dtype

    def run():
        with torch.no_grad():
            return {"y": torch.nn.functional.layer_norm(x, shape, weight, bias, problem.eps)}
    return run


PEERS = (
    Peer("aten", "ATen's native_layer_norm (y, mean and rstd)", _native, compare=True),
    Peer("eager", "eager F.layer_norm, forward only", _functional),
)

CASES = Cases(compare=("256x1024", "4x3x40,2"), bench=("8x512x1024", "4096x4096", "16384x1024"),
              quick="8x512x1024", tiny="4x64")
