"""RmsNormGrad's peers (opgen compare, opgen bench) and the shapes the tools use.

torch 2.13 has no CPU backward kernel for RmsNorm, so the library side of ``opgen compare``
is the autograd of ``F.rms_norm``; ``opgen bench`` times its eager autograd, its
torch.compile and ATen's nearest native kernel, ``native_layer_norm_backward`` over the same
rows (it does slightly more work: the mean term). ATen recomputes rstd from x with the
eps the inputs' rstd was made with, so both sides see the same statistics up to f32
rounding. On CUDA (scripts/gpu_bench.py) Liger-Kernel's Triton RMSNorm joins them: a peer
for ``devices=("cuda",)`` only, so the CPU's ``opgen bench`` never lists it.
"""
from __future__ import annotations

from opgen.ops.spec import Cases, Peer
from opgen.peers import autograd_peer, backward_closure, import_torch

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


def _liger(problem, t: dict):
    """Liger-Kernel's RMSNorm (Triton) through autograd, backward only (its forward keeps its
    own rstd, from x with the same eps). Liger normalizes the last axis only; ``in_place=False``
    where the installed version has it, so dy is not overwritten by dx on every call."""
    import inspect

    from liger_kernel.transformers.rms_norm import LigerRMSNorm

    torch = import_torch()
    if t["gamma"].dim() != 1:
        raise ValueError("Liger's RMSNorm normalizes the last axis only: gamma must be 1-d")
    options = {"in_place": False} if "in_place" in inspect.signature(LigerRMSNorm).parameters else {}
    norm = LigerRMSNorm(t["gamma"].shape[0], eps=EPS, **options).to(device=t["x"].device, dtype=t["gamma"].dtype)

    def forward(x, gamma):
        return torch.func.functional_call(norm, {"weight": gamma}, (x,))
    return backward_closure(forward, [t["x"], t["gamma"]], t["dy"], ("dx", "dgamma"), compiled=False)


PEERS = (
    Peer("aten", "autograd of F.rms_norm (torch has no CPU backward kernel for it)",
         lambda problem, t: _autograd(problem, t, False), compare=True, bench=False),
    Peer("eager", "eager autograd of F.rms_norm, backward only", lambda problem, t: _autograd(problem, t, False)),
    Peer("compile", "torch.compile's backward graph of F.rms_norm", lambda problem, t: _autograd(problem, t, True)),
    Peer("aten-layernorm", "ATen's nearest native kernel, native_layer_norm_backward", _layer_norm),
    Peer("liger", "Liger-Kernel's RMSNorm (Triton), backward through autograd", _liger, devices=("cuda",)),
)

CASES = Cases(compare=("256x1024",), bench=("4096x4096", "8192x5120", "16384x1024", "2048x8192"),
              quick="4096x4096", tiny="4x64")
