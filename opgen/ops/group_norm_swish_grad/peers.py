"""GroupNormSwishGrad's peers (opgen compare, opgen bench) and the shapes the tools use.

torch has no GroupNormSwish op, so the library side of ``opgen compare`` is the autograd of
its eager composite, ``F.group_norm`` followed by ``y * sigmoid(s*y)`` (it recomputes mean
and rstd from x with the eps random_inputs made them with, so both sides see the same
statistics up to their rounding); ``opgen bench`` times that autograd eager and compiled,
and the exact composite at the given statistics: the swish's derivative in torch, then
ATen's hand-written ``native_group_norm_backward`` (what aclnnGroupNormSwishGrad computes).
"""
from __future__ import annotations

import numpy as np

from opgen.ops.spec import Cases, Peer
from opgen.peers import autograd_peer, import_torch

EPS = 1e-5      # the eps random_inputs computes mean and rstd with


def _scale(problem) -> float:
    with np.errstate(over="ignore"):
        return float(np.float32(problem.swishScale))


def _autograd(problem, t: dict, compiled: bool):
    import torch
    import torch.nn.functional as F

    groups, s = problem.numGroups, _scale(problem)

    def forward(x, gamma, beta):
        y = F.group_norm(x, groups, gamma, beta, EPS)
        return y * torch.sigmoid(s * y)
    return autograd_peer(forward, [t["x"], t["gamma"], t["beta"]], t["dy"], ("dx", "dgamma", "dbeta"), compiled)


def _native(problem, t: dict):
    """dy * d(swish)/dy at the given statistics in float32, then native_group_norm_backward."""
    torch = import_torch()
    p, s = problem, _scale(problem)
    n, c, hw, g = p.N, p.C, p.HxW, p.numGroups
    x32, mean, rstd = t["x"].float(), t["mean"].float(), t["rstd"].float()
    gamma, beta, dy = t["gamma"].float(), t["beta"].float(), t["dy"].float()

    def run():
        xhat = ((x32.reshape(n, g, -1) - mean[..., None]) * rstd[..., None]).reshape(n, c, hw)
        y = xhat * gamma[:, None] + beta[:, None]
        sig = torch.sigmoid(s * y)
        dy_eff = (dy.reshape(n, c, hw) * sig * (1 + s * y * (1 - sig))).reshape(x32.shape)
        dx, dgamma, dbeta = torch.ops.aten.native_group_norm_backward(
            dy_eff, x32, mean, rstd, gamma, n, c, hw, g, [True, True, True])
        dtype = t["dx"].dtype if "dx" in t else t["x"].dtype
        return {"dx": dx.to(dtype), "dgamma": dgamma.to(dtype), "dbeta": dbeta.to(dtype)}
    return run


PEERS = (
    Peer("aten", "autograd of F.group_norm followed by y * sigmoid(s*y) (torch has no GroupNormSwish op)",
         lambda problem, t: _autograd(problem, t, False), compare=True, bench=False),
    Peer("eager", "eager autograd of F.group_norm + swish, backward only", lambda problem, t: _autograd(problem, t, False)),
    Peer("compile", "torch.compile's backward graph of F.group_norm + swish",
         lambda problem, t: _autograd(problem, t, True)),
    Peer("aten-native", "the swish's derivative in torch, then ATen's native_group_norm_backward (float32)", _native),
)

CASES = Cases(compare=("2x64x16x16,8",),
              bench=("2x320x64x64,32", "2x640x32x32,32", "2x1280x16x16,32", "8x256x56x56,32", "16x64x112x112,32"),
              quick="2x640x32x32,32", tiny="1x32x2x2,8")
