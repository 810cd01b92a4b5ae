"""BatchNormReduce's peers (opgen compare, opgen bench) and the shapes the tools use.

ATen's counterpart, ``batch_norm_stats`` (mean and invstd per channel, what SyncBatchNorm
all-gathers), has a CUDA kernel only ("Could not run 'aten::batch_norm_stats' with arguments
from the 'CPU' backend", torch 2.13), and returns other quantities. So on the CPU the peer is
the torch composite of the document's two formulas: x widened to float32, summed and
squared-and-summed over every axis but the channel axis. On CUDA ATen's kernel joins the
benchmark (``devices=("cuda",)``), its mean and invstd turned back into the two sums (count x
mean, count x (1/invstd^2 - eps + mean^2)); it is timed, not compared (the round trip through
invstd loses the digits the comparison measures).
"""
from __future__ import annotations

import math

from opgen.ops.spec import Cases, Peer
from opgen.peers import import_torch

_EPS = 1e-5


def _axes(problem, x) -> list:
    return [i for i in range(x.ndim) if i != problem.channel_axis]


def _composite(problem, t: dict):
    x = t["x"]
    axes = _axes(problem, x)

    def run():
        xf = x.float()
        return {"sum": xf.sum(axes), "square_sum": (xf * xf).sum(axes)}
    return run


def _aten(problem, t: dict):
    torch = import_torch()
    x = t["x"]
    if problem.channel_last:
        x = x.permute(0, 3, 1, 2)     # a channels_last view: batch_norm_stats reads the channel on axis 1
    count = math.prod(problem.x_shape) // max(problem.C, 1)

    def run():
        mean, invstd = torch.batch_norm_stats(x, _EPS)
        return {"sum": mean * count, "square_sum": (invstd.pow(-2) - _EPS + mean * mean) * count}
    return run


PEERS = (
    Peer("composite", "the torch composite: x in float32, summed and squared-and-summed per channel", _composite,
         compare=True),
    Peer("aten", "ATen's batch_norm_stats (CUDA only: no CPU kernel), its mean/invstd turned into the sums", _aten,
         devices=("cuda",)),
)

CASES = Cases(compare=("2x16x7x9", "3x5x11x2", "2x7x9x16,nhwc"),
              bench=("32x64x56x56", "32x256x14x14", "16x512x7x7", "8x128x28x28"),
              quick="8x128x28x28", tiny="1x4x2x2")
