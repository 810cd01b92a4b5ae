"""RmsNormGrad's peers (opgen compare, opgen bench) and the shapes the tools use.

torch 2.13 has no CPU backward kernel for RmsNorm, so the library side of ``opgen compare``
is the autograd of ``F.rms_norm``; ``opgen bench`` times its eager autograd, its
torch.compile and ATen's nearest native kernel, ``native_layer_norm_backward`` over the same
rows (it does slightly more work: the mean term). ATen recomputes rstd from x with the
eps the inputs' rstd was made with, so both sides see the same statistics up to f32
rounding.
"""
from __future__ import annotations

from opgen.ops.spec import Cases, Peer
from opgen.peers import autograd_peer, import_torch

EPS = 1e-6      # the eps random_inputs computes rstd with


def _autograd(problem, t: dict, compiled: bool):
    import torch.nn.functional as F

    shape = tuple(t["gamma"].shape)

    def forward(x, gamma):
        return F.rms_norm(x, shape, gamma, EPS)
    return autograd_peer(forward, [t["x"], t["gamma"]], t["dy"], ("dx", "dgamma"), compiled)


def _layer_norm(problem, t: dict):
    """native_layer_norm_backward over the same rows (its statistics from native_layer_norm
    once, outside the timed call): issue 10's per-call reference."""
    torch = import_torch()
    x, gamma = t["x"], t["gamma"].to(t["x"].dtype)
    shape = list(gamma.shape)
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, shape, gamma, None, EPS)
    dy = t["dy"]

    def run():
        dx, dgamma, _ = torch.ops.aten.native_layer_norm_backward(dy, x, shape, mean, rstd, gamma, None,
                                                                   [True, True, False])
        return {"dx": dx, "dgamma": dgamma}
    return run


PEERS = (
    Peer("aten", "autograd of F.rms_norm (torch has no CPU backward kernel for it)",
         lambda problem, t: _autograd(problem, t, False), compare=True, bench=False),
    Peer("eager", "eager autograd of F.rms_norm, backward only", lambda problem, t: _autograd(problem, t, False)),
    Peer("compile", "torch.compile's backward graph of F.rms_norm", lambda problem, t: _autograd(problem, t, True)),
    Peer("aten-layernorm", "ATen's nearest native kernel, native_layer_norm_backward", _layer_norm),
)

CASES = Cases(compare=("256x1024",), bench=("4096x4096", "8192x5120", "16384x1024", "2048x8192"),
              quick="4096x4096", tiny="4x64")
