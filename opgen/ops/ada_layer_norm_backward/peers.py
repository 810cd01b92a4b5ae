"""AdaLayerNormBackward's peers (opgen compare, opgen bench) and the shapes the tools use.

torch has no AdaLayerNorm kernel, so the peers are built from the composite forward
out = LayerNorm(x) * (1 + scale) + shift:
* ``aten``: ATen's native_layer_norm_backward on dy * (1 + scale) with the given mean and
  rstd (dx, dweight, dbias: exact for any mean/rstd, as CANN uses them as given), plus
  torch reductions over S for dscale = sum_S dy * (x_hat * weight + bias) and
  dshift = sum_S dy: the hand-written library ``opgen compare --against aten`` judges by;
* ``eager`` / ``compile``: autograd of the composite forward (eager, the issue's speed
  reference, and torch.compile's backward graph), which equals CANN's formula when mean
  and rstd are x's true statistics, as random_inputs makes them (same eps).
Everything is computed in float32 (as CANN accumulates) and rounded to each output's dtype.
"""
from __future__ import annotations

from opgen.ops.ada_layer_norm_backward.kernel import EPS
from opgen.ops.spec import Cases, Peer
from opgen.peers import autograd_peer, import_torch


def _per_sample(t, problem):
    """scale ([B..., H] or [B..., 1, H]) as (B, 1, H) float32."""
    return t.float().reshape(problem.batch, 1, problem.hidden)


def _weights(torch, problem, t: dict):
    """weight and bias as float32 (ones and zeros when not given, as CANN's op_api fills them)."""
    h = problem.hidden
    weight = t["gamma"].float() if t.get("gamma") is not None else torch.ones(h)
    bias = t["beta"].float() if t.get("beta") is not None else torch.zeros(h)
    return weight, bias


def _native(problem, t: dict):
    """native_layer_norm_backward on dy * (1 + scale), and the per-sample sums over S."""
    torch = import_torch()
    b, s, h = problem.batch, problem.seq, problem.hidden
    dtype, wdtype = t["x"].dtype, t["gamma"].dtype if t.get("gamma") is not None else torch.float32
    x, dy = t["x"].float().reshape(b, s, h), t["dy"].float().reshape(b, s, h)
    mean, rstd = t["mean"].float().reshape(b, s, 1), t["rstd"].float().reshape(b, s, 1)
    weight, bias = _weights(torch, problem, t)
    gain = 1.0 + _per_sample(t["scale"], problem)
    shape = t["scale"].shape

    def run():
        dx, dweight, dbias = torch.ops.aten.native_layer_norm_backward(dy * gain, x, [h], mean, rstd, weight, bias,
                                                                       [True, True, True])
        x_hat = (x - mean) * rstd
        dscale = (dy * (x_hat * weight + bias)).sum(1)
        dshift = dy.sum(1)
        return {"dx": dx.reshape(t["x"].shape).to(dtype), "dscale": dscale.reshape(shape).to(dtype),
                "dshift": dshift.reshape(shape).to(dtype), "dgamma": dweight.to(wdtype), "dbeta": dbias.to(wdtype)}
    return run


def _autograd(problem, t: dict, compiled: bool):
    """Autograd of the composite AdaLayerNorm forward (float32 inside, out in the data's dtype)."""
    torch = import_torch()
    import torch.nn.functional as F

    h = problem.hidden
    weight, bias = _weights(torch, problem, t)
    shift = torch.zeros(t["scale"].shape, dtype=t["scale"].dtype)

    def forward(x, scale, shift, weight, bias):
        normed = F.layer_norm(x.float(), [h], weight, bias, EPS)
        out = normed.reshape(problem.batch, -1, h) * (1.0 + _per_sample(scale, problem)) + _per_sample(shift, problem)
        return out.reshape(x.shape).to(x.dtype)
    return autograd_peer(forward, [t["x"], t["scale"], shift, weight, bias], t["dy"],
                         ("dx", "dscale", "dshift", "dgamma", "dbeta"), compiled)


PEERS = (
    Peer("aten", "ATen's native_layer_norm_backward on dy*(1+scale) (the given mean/rstd), with torch sums over S "
         "for dscale and dshift", _native, compare=True),
    Peer("eager", "eager autograd of the composite AdaLayerNorm forward, backward only",
         lambda problem, t: _autograd(problem, t, False)),
    Peer("compile", "torch.compile's backward graph of the composite AdaLayerNorm forward",
         lambda problem, t: _autograd(problem, t, True), bench=False),
)

CASES = Cases(compare=("4x256x1152", "2x3x77x64,0"), bench=("8x1024x1152", "2x4096x1152", "16x256x3072"),
              quick="8x1024x1152", tiny="2x4x64")
