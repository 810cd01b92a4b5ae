"""GemmaRmsNorm's peers (opgen compare, opgen bench) and the shapes the tools use.

ATen has no offset-form RMSNorm. transformers' GemmaRMSNorm (Gemma, Gemma 2, Gemma 3) computes
in float32 whatever x's dtype: ``x.float() * rsqrt(mean(x^2) + eps) * (1 + weight.float())``,
rounded back to x's dtype once, the math this op's kernel does. The library side of
``opgen compare`` is that computation on ATen's fused kernel, ``_fused_rms_norm`` fed x in
float32 and the weight 1 + gamma in float32 (it returns rstd as this op does); ``opgen bench``
also times transformers' eager composite (pow, mean, rsqrt, the offset add and two
multiplies) and its torch.compile. Each closure runs the forward only and returns its outputs
by kernel name; the composites keep no rstd and return ``y`` alone.
"""
from __future__ import annotations

from opgen.ops.spec import Cases, Peer
from opgen.peers import import_torch


def _fused(problem, t: dict):
    """ATen's ``_fused_rms_norm(x, normalized_shape, weight, eps) -> (y, rstd)`` on x widened
    to float32 with weight 1 + gamma in float32 (Gemma's float32 math), y rounded back to
    x's dtype; the widening and the offset are inside the timed call, as in the model."""
    torch = import_torch()
    x, gamma = t["x"], t["gamma"]
    shape = list(gamma.shape)

    def run():
        y, rstd = torch.ops.aten._fused_rms_norm(x.float(), shape, 1.0 + gamma.float(), problem.epsilon)
        return {"y": y.to(x.dtype), "rstd": rstd}
    return run


def _composite(problem, t: dict, compiled: bool):
    """transformers' GemmaRMSNorm forward (eager, or torch.compile'd on fresh dynamo caches,
    as the other ops' compiled peers are), y only."""
    torch = import_torch()
    x, gamma = t["x"], t["gamma"]
    dims = tuple(range(x.dim() - gamma.dim(), x.dim()))

    def forward(x, gamma):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(dims, keepdim=True) + problem.epsilon)
        return (y * (1.0 + gamma.float())).to(x.dtype)
    if compiled:
        torch._dynamo.reset()
        forward = torch.compile(forward)

    def run():
        with torch.no_grad():
            return {"y": forward(x, gamma)}
    return run


PEERS = (
    Peer("aten", "ATen's _fused_rms_norm on float32 x with weight 1 + gamma (y and rstd)", _fused, compare=True),
    Peer("eager", "transformers' GemmaRMSNorm composite, eager, forward only",
         lambda problem, t: _composite(problem, t, False)),
    Peer("compile", "torch.compile of transformers' GemmaRMSNorm composite, forward only",
         lambda problem, t: _composite(problem, t, True)),
)

# Gemma's hidden sizes: 2048 (Gemma 2B), 2304 (Gemma 2 2B), 3072 (Gemma 7B), 3584 (Gemma 2 9B).
CASES = Cases(compare=("256x1024",), bench=("4096x2048", "8x512x2304", "4096x3072", "8192x3584"),
              quick="4096x3072", tiny="4x64")
