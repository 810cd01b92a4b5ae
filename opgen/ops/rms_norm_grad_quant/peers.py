"""aclnnRmsNormGradQuant's peers (opgen compare, opgen bench) and the shapes the tools use.

ATen has no kernel for it: the peer is the torch composite a user would write, the eager
autograd of ``F.rms_norm`` (RmsNormGrad's peer, opgen.ops.rms_norm_grad.peers) followed by the
quantization in torch ops (divide or multiply by the scale, add the offset, round half to
even with ``torch.round``, clamp to int8's range, cast). ``compile`` is the same under
torch.compile.
"""
from __future__ import annotations

from opgen.ops.rms_norm_grad.peers import EPS
from opgen.ops.spec import Cases, Peer
from opgen.peers import autograd_peer, import_torch


def quantize(torch, dx, scales_x, offset_x, div_mode: bool):
    """The document's dx_quant in torch ops, in float32 as CANN's kernel computes it."""
    scale = scales_x.float()
    q = dx.float() / scale if div_mode else dx.float() * scale
    if offset_x is not None:
        q = q + offset_x.float()
    return torch.clamp(torch.round(q), -128, 127).to(torch.int8)


def _composite(problem, t: dict, compiled: bool):
    import torch.nn.functional as F

    torch = import_torch()
    shape = tuple(t["gamma"].shape)

    def forward(x, gamma):
        return F.rms_norm(x, shape, gamma, EPS)
    made = autograd_peer(forward, [t["x"], t["gamma"]], t["dy"], ("dx", "dgamma"), compiled)
    before, backward = made if compiled else (None, made)
    div_mode = bool(t["div_mode"].reshape(-1)[0].item())

    def run():
        out = backward()
        out["dx"] = quantize(torch, out["dx"], t["scales_x"], t.get("offset_x"), div_mode)
        out["dgamma"] = out["dgamma"].float()
        return out
    return (before, run) if compiled else run


PEERS = (
    Peer("aten", "eager autograd of F.rms_norm, then the quantization in torch ops (no ATen kernel)",
         lambda problem, t: _composite(problem, t, False), compare=True, bench=False),
    Peer("eager", "eager autograd of F.rms_norm + torch quantization, backward only",
         lambda problem, t: _composite(problem, t, False)),
    Peer("compile", "torch.compile of F.rms_norm's backward, then the torch quantization",
         lambda problem, t: _composite(problem, t, True)),
)

CASES = Cases(compare=("256x1024", "256x1024,1,0"), bench=("4096x4096", "8192x5120", "16384x1024", "2048x8192"),
              quick="4096x4096", tiny="4x64")
