"""AddLayerNormGrad's peers (opgen compare, opgen bench) and the shapes the tools use: ATen's
hand-written ``native_layer_norm_backward`` on x = x1 + x2, plus dsum (the issue's
reference).

ATen's CPU kernel takes one dtype throughout, or half data with float32 statistics and
weight: mean and rstd are float32 here, so a half gamma is upcast (exactly). The peers form
x1 + x2 and add dsum themselves, as a user of ATen would: those passes are part of the work
the fused op saves, so they belong in the time.
"""
from __future__ import annotations

from opgen.ops.spec import Cases, Peer
from opgen.peers import import_torch

def _native(problem, t: dict):
    torch = import_torch()
    shape = list(problem.gamma_shape)
    dy, x1, x2, mean, rstd, gamma = t["dy"], t["x1"], t["x2"], t["mean"], t["rstd"], t["gamma"]
    dsum = t.get("dsum")
    weight = gamma.float()      # float32 statistics: ATen then takes a float32 weight (exact)
    bias = torch.zeros(shape, dtype=weight.dtype, device=dy.device)

    def run():
        dx, dgamma, dbeta = torch.ops.aten.native_layer_norm_backward(dy, x1 + x2, shape, mean, rstd, weight, bias,
                                                                       [True, True, True])
        if dsum is not None:
            dx = dx + dsum
        return {"dx": dx, "dgamma": dgamma, "dbeta": dbeta}
    return run


PEERS = (
    Peer("aten", "ATen's native_layer_norm_backward on x1 + x2, plus dsum", _native, compare=True),
)

CASES = Cases(compare=("256x1024", "4x3x40,2"), bench=("4096x4096", "8192x5120", "16384x1024", "2048x8192"),
              quick="4096x4096", tiny="4x64")
