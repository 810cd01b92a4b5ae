"""DeepNormGrad's peers (opgen compare, opgen bench) and the shapes the tools use.

torch has no DeepNorm, so every peer is built from the composite forward
x' = alpha * x + gx, y = (x' - mean) * rstd * gamma + beta:
* ``aten``: ATen's native_layer_norm_backward applied to x' with the given mean and rstd,
  dgx = dh and dx = alpha * dh: exact for any mean/rstd (CANN uses them as given), so it is
  the library ``opgen compare`` judges opgen against, and the nearest native kernel
  ``opgen bench`` times (the x' pass outside the timed call);
* ``eager`` / ``compile``: autograd of the composite forward (eager, and torch.compile's
  backward graph), which equals CANN's formula when mean/rstd are x''s true statistics, as
  random_inputs makes them (same eps).
Everything runs in float32 (as CANN accumulates); dx and dgx are rounded to the data dtype.
"""
from __future__ import annotations

from opgen.ops.deep_norm_grad.kernel import EPS
from opgen.ops.spec import Cases, Peer
from opgen.peers import autograd_peer, import_torch


def _alpha(torch, problem):
    """alpha as CANN's kernel reads it: float32."""
    return torch.tensor(problem.alpha, dtype=torch.float32)


def _layer_norm(problem, t: dict):
    """native_layer_norm_backward on h = alpha * x + gx with the inputs' mean and rstd."""
    torch = import_torch()
    alpha = _alpha(torch, problem)
    dtype, shape = t["x"].dtype, list(t["gamma"].shape)
    h = alpha * t["x"].float() + t["gx"].float()
    dy, gamma, mean, rstd = t["dy"].float(), t["gamma"].float(), t["mean"], t["rstd"]
    beta = torch.zeros_like(gamma)      # only its presence matters: dbeta is asked for

    def run():
        dh, dgamma, dbeta = torch.ops.aten.native_layer_norm_backward(dy, h, shape, mean, rstd, gamma, beta,
                                                                       [True, True, True])
        return {"dx": (alpha * dh).to(dtype), "dgx": dh.to(dtype), "dbeta": dbeta, "dgamma": dgamma}
    return run


def _autograd(problem, t: dict, compiled: bool):
    """Autograd of the composite DeepNorm forward (float32 inside, y in the data's dtype)."""
    torch = import_torch()
    alpha = _alpha(torch, problem)
    ndim = t["gamma"].dim()
    beta = torch.zeros(t["gamma"].shape, dtype=torch.float32)

    def forward(x, gx, gamma, beta):
        dims = tuple(range(x.dim() - ndim, x.dim()))
        h = alpha * x.float() + gx.float()
        mean = h.mean(dims, keepdim=True)
        rstd = torch.rsqrt(((h - mean) ** 2).mean(dims, keepdim=True) + EPS)
        return ((h - mean) * rstd * gamma.float() + beta).to(x.dtype)
    return autograd_peer(forward, [t["x"], t["gx"], t["gamma"], beta], t["dy"], ("dx", "dgx", "dgamma", "dbeta"),
                         compiled)


PEERS = (
    Peer("aten", "ATen's native_layer_norm_backward on x' = alpha*x + gx (the given mean/rstd), dx = alpha*dgx",
         _layer_norm, compare=True),
    Peer("eager", "eager autograd of the composite DeepNorm forward, backward only",
         lambda problem, t: _autograd(problem, t, False)),
    Peer("compile", "torch.compile's backward graph of the composite DeepNorm forward",
         lambda problem, t: _autograd(problem, t, True), bench=False),
)

CASES = Cases(compare=("256x1024", "4x8x64,2,0.87"), bench=("8192x4096", "16384x1024", "2048x8192"),
              quick="2048x8192", tiny="4x64")
