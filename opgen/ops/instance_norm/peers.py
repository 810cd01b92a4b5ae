"""InstanceNorm's peers (opgen compare, opgen bench) and the shapes the tools use.

The library side of ``opgen compare`` is ATen: ``torch.instance_norm`` (use_input_stats, no
running statistics) for y, and ``torch.var_mean`` over H and W (correction 0, the biased
variance) for mean and variance, since ATen's instance_norm returns y alone (it runs
native_batch_norm on x viewed as (1, N*C, H, W) and drops its saved statistics, which are
the mean and 1/sqrt(var + eps), not the variance). Statistics keep x's shape (N, C, 1, 1)
and dtype, as the aclnn outputs. ``opgen bench``'s "aten" row times that closure (both calls:
the three outputs opgen's kernel writes), its "eager" row ``F.instance_norm`` alone (y only,
what a torch user calls).
"""
from __future__ import annotations

from opgen.ops.spec import Cases, Peer
from opgen.peers import import_torch


def _native(problem, t: dict):
    torch = import_torch()
    x, gamma, beta, eps = t["x"], t["gamma"], t["beta"], problem.eps

    def run():
        y = torch.instance_norm(x, gamma, beta, None, None, True, 0.0, eps, False)
        variance, mean = torch.var_mean(x, dim=(2, 3), correction=0, keepdim=True)
        return {"y": y, "mean": mean, "variance": variance}
    return run


def _functional(problem, t: dict):
    torch = import_torch()
    x, gamma, beta = t["x"], t["gamma"], t["beta"]

    def run():
        with torch.no_grad():
            return {"y": torch.nn.functional.instance_norm(x, weight=gamma, bias=beta, eps=problem.eps)}
    return run


PEERS = (
    Peer("aten", "ATen's instance_norm (y) and var_mean over H, W (mean, variance)", _native, compare=True),
    Peer("eager", "eager F.instance_norm, forward only", _functional),
)

# Bench: style-transfer and GAN generator layers (batch 8-32, 64-256 channels).
CASES = Cases(compare=("2,64,16x16",),
              bench=("32,64,32x32", "8,128,64x64", "16,256,16x16", "4,64,128x128"),
              quick="32,64,32x32", tiny="1,8,4x4")
