"""LayerNormChannelsBackward's peer: the autograd of what a PyTorch user writes for a
channels-first LayerNorm (channels moved last, F.layer_norm, moved back), backward only."""
from __future__ import annotations

from opgen.ops.layer_norm_channels_backward.kernel import EPS
from opgen.ops.spec import Cases, Peer
from opgen.peers import autograd_peer, import_torch


def _autograd(problem, t: dict, compiled: bool):
    import torch.nn.functional as F

    c = problem.C

    def forward(x, gamma, beta):
        return F.layer_norm(x.movedim(1, -1), (c,), gamma, beta, EPS).movedim(-1, 1)
    beta = import_torch().zeros_like(t["gamma"])
    return autograd_peer(forward, [t["x"], t["gamma"], beta], t["dy"], ("dx", "dgamma", "dbeta"), compiled)


PEERS = (
    Peer("eager", "eager autograd of permute + F.layer_norm + permute, backward only",
         lambda problem, t: _autograd(problem, t, False), compare=True),
)

CASES = Cases(compare=("2x7x33", "4x96x7x7"), bench=("8x96x56x56", "8x384x14x14"), quick="8x96x56x56",
              tiny="2x8x4x4")
