"""GroupNormBackward's peers (opgen compare, opgen bench) and the shapes the tools use:
ATen's hand-written ``native_group_norm_backward``, and the autograd of ``F.group_norm``
(eager and compiled) for a GPU's comparison."""
from __future__ import annotations

from opgen.ops.spec import Cases, Peer
from opgen.peers import autograd_peer, import_torch

EPS = 1e-5


def _native(problem, t: dict):
    torch = import_torch()
    p, gamma = problem, t.get("gamma")

    def run():
        dx, dgamma, dbeta = torch.ops.aten.native_group_norm_backward(
            t["dy"], t["x"], t["mean"], t["rstd"], gamma, p.N, p.C, p.HxW, p.group, [True, True, True])
        return {"dx": dx, "dgamma": dgamma, "dbeta": dbeta}
    return run


def _autograd(problem, t: dict, compiled: bool):
    import torch.nn.functional as F

    def forward(x, gamma):
        return F.group_norm(x, problem.group, gamma, None, EPS)
    return autograd_peer(forward, [t["x"], t["gamma"]], t["dy"], ("dx", "dgamma"), compiled)


PEERS = (
    Peer("aten", "ATen's native_group_norm_backward", _native, compare=True),
    Peer("eager", "eager autograd of F.group_norm, backward only", lambda problem, t: _autograd(problem, t, False),
         bench=False),
    Peer("compile", "torch.compile's backward graph of F.group_norm", lambda problem, t: _autograd(problem, t, True),
         bench=False),
)

CASES = Cases(compare=("2,64,16x16,8",),
              bench=("2,320,64x64,32", "2,640,32x32,32", "2,1280,16x16,32", "8,256,56x56,32", "16,64,112x112,32"),
              quick="2,640,32x32,32", tiny="1,32,2x2,8")
