"""LayerNormBackward's peers (opgen compare, opgen bench) and the shapes the tools use:
ATen's hand-written ``native_layer_norm_backward`` (the issue's reference), and the
autograd of ``F.layer_norm`` (eager and compiled).

ATen takes the same mean and rstd (any shape of M values) and computes the same formula
even when they are not input's statistics. Two of its habits are met here: it raises
"tensor does not have a device" for a null weight when grad_weight is asked for, or a null
bias when grad_bias is (it allocates those outputs like them), so ones and zeros stand in,
as CANN's op_api builds them. The op's kernel has no bias tensor (aclnn's biasOptional is
validated only), so the peers always get zeros in the weight's dtype and shape. ATen's CPU
kernel takes mixed dtypes only as half data with float32 statistics and weight, so the other
mixed combos reach it with their statistics and weight upcast to float32 (exactly).
"""
from __future__ import annotations

from opgen.ops.spec import Cases, Peer
from opgen.peers import autograd_peer, import_torch

EPS = 1e-5      # the eps random_inputs computes rstd with


def _native(problem, t: dict):
    torch = import_torch()
    shape = list(problem.normalizedShape)
    x = t["x"]
    weight = t.get("gamma")
    weight = torch.ones(shape, dtype=x.dtype, device=x.device) if weight is None else weight
    dy, mean, rstd = t["dy"], t["mean"], t["rstd"]
    if {mean.dtype, rstd.dtype, weight.dtype} != {x.dtype}:
        # ATen's CPU kernel takes one dtype throughout, or half data with float32 statistics
        # and weight ("expected scalar type Float but found Half" otherwise: 9 of the 13
        # combos). Upcasting the statistics and weight to float32 is exact and keeps it.
        mean, rstd, weight = mean.float(), rstd.float(), weight.float()
    bias = torch.zeros(shape, dtype=weight.dtype, device=x.device)

    def run():
        dx, dgamma, dbeta = torch.ops.aten.native_layer_norm_backward(dy, x, shape, mean, rstd, weight, bias,
                                                                       [True, True, True])
        return {"dx": dx, "dgamma": dgamma, "dbeta": dbeta}
    return run


def _autograd(problem, t: dict, compiled: bool):
    import torch.nn.functional as F

    shape = list(problem.normalizedShape)

    def forward(x, gamma, beta):
        return F.layer_norm(x, shape, gamma, beta, EPS)
    beta = import_torch().zeros_like(t["gamma"])     # the leaf dbeta is taken against (no kernel tensor)
    return autograd_peer(forward, [t["x"], t["gamma"], beta], t["dy"], ("dx", "dgamma", "dbeta"), compiled)


PEERS = (
    Peer("aten", "ATen's native_layer_norm_backward", _native, compare=True),
    Peer("eager", "eager autograd of F.layer_norm, backward only", lambda problem, t: _autograd(problem, t, False),
         bench=False),
    Peer("compile", "torch.compile's backward graph of F.layer_norm", lambda problem, t: _autograd(problem, t, True),
         bench=False),
)

CASES = Cases(compare=("256x1024", "4x3x40,2"), bench=("4096x4096", "8192x5120", "16384x1024", "2048x8192"),
              quick="4096x4096", tiny="4x64")
