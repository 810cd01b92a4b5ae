"""BatchNormBackward's peers (opgen compare, opgen bench) and the shapes the tools use:
ATen's hand-written ``native_batch_norm_backward``, and the autograd of ``F.batch_norm``
(eager and compiled).

ATen's CPU kernel takes the parameters (weight, running and saved statistics) either all in
the input's dtype or all in float32 ("mixed dtype (CPU): expect parameter to have scalar
type of Float"); the 950's mixed rows (e.g. float16 weight with float32 saved statistics)
are handed to it in float32, as a torch user would. eps is rounded to float32 as CANN's
callees take it. A channel-last problem (``nhwc``) is refused: the tools hand opgen numpy
arrays, which carry no NHWC tag, so opgen would read their axis 1 as the channel.
"""
from __future__ import annotations

import numpy as np

from opgen.ops.spec import Cases, Peer
from opgen.peers import autograd_peer, import_torch

_PARAMS = ("weight", "running_mean", "running_var", "save_mean", "save_invstd")


def _eps(problem) -> float:
    return float(np.float32(problem.eps))


def _refuse_channel_last(problem) -> None:
    if problem.channel_last:
        raise ValueError(f"{problem.label()}: a channel-last problem needs NHWC-tagged aclTensors; the compare "
                         f"and bench tools pass untagged arrays, which opgen reads with the channel on axis 1")


def _params(t: dict) -> dict:
    """weight and the statistics in one dtype ATen accepts: the input's, else float32."""
    torch = import_torch()
    dtype = t["x"].dtype if all(t[n].dtype == t["x"].dtype for n in _PARAMS) else torch.float32
    return {n: t[n].to(dtype) for n in _PARAMS}


def _native(problem, t: dict):
    torch = import_torch()
    _refuse_channel_last(problem)
    p = _params(t)
    dy, x = t["dy"], t["x"]

    def run():
        dx, dweight, dbias = torch.ops.aten.native_batch_norm_backward(
            dy, x, p["weight"], p["running_mean"], p["running_var"], p["save_mean"], p["save_invstd"],
            problem.training, _eps(problem), [True, True, True])
        return {"dx": dx, "dweight": dweight, "dbias": dbias}
    return run


def _autograd(problem, t: dict, compiled: bool):
    import torch.nn.functional as F

    _refuse_channel_last(problem)
    p = _params(t)
    running = (None, None) if problem.training else (p["running_mean"], p["running_var"])

    def forward(x, weight):
        return F.batch_norm(x, *running, weight, None, problem.training, 0.0, _eps(problem))
    return autograd_peer(forward, [t["x"], p["weight"]], t["dy"], ("dx", "dweight"), compiled)


PEERS = (
    Peer("aten", "ATen's native_batch_norm_backward", _native, compare=True),
    Peer("eager", "eager autograd of F.batch_norm, backward only", lambda problem, t: _autograd(problem, t, False),
         bench=False),
    Peer("compile", "torch.compile's backward graph of F.batch_norm", lambda problem, t: _autograd(problem, t, True),
         bench=False),
)

# NCHW, training (the list: vs ATen's native_batch_norm_backward).
CASES = Cases(compare=("2x16x7x9", "2x16x7x9,eval"),
              bench=("32x64x56x56", "32x256x14x14", "16x512x7x7", "8x128x28x28"),
              quick="8x128x28x28", tiny="1x4x2x2")
