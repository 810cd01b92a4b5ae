"""LayerNormChannels's peers (opgen compare, opgen bench): what a PyTorch user writes for a
channels-first LayerNorm, the channels moved last, ``F.layer_norm`` over them and moved
back (transformers' ConvNextLayerNorm computes it in float32 from its input, timm's
LayerNorm2d permutes as here). Forward only."""
from __future__ import annotations

from opgen.ops.spec import Cases, Peer
from opgen.peers import import_torch


def _permuted(problem, t: dict):
    torch = import_torch()
    x, weight, bias = t["x"], t.get("gamma"), t.get("beta")
    weight, bias = (None if p is None else p.to(x.dtype) for p in (weight, bias))   # F.layer_norm: one dtype
    c = problem.C

    def run():
        with torch.no_grad():
            last = x.movedim(1, -1)
            return {"y": torch.nn.functional.layer_norm(last, (c,), weight, bias, problem.eps).movedim(-1, 1)}
    return run


PEERS = (
    Peer("eager", "permute, F.layer_norm over the channels, permute back (forward only)", _permuted, compare=True),
)

CASES = Cases(compare=("2x7x33", "4x96x7x7"), bench=("8x96x56x56", "8x384x14x14"), quick="8x96x56x56",
              tiny="2x8x4x4")
