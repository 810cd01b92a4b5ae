"""LayerNormChannels: LayerNorm over the channel axis (axis 1) of NCHW data, written once in TE
(ConvNeXt's ``data_format="channels_first"`` LayerNorm, timm's LayerNorm2d); the op
LayerNormChannelsBackward differentiates. An opgen extension: CANN has no aclnn function of
this form (aclnnLayerNorm normalizes trailing dims only; see api.py).

input has shape [N, C, spatial...]; the kernel sees it as (N, C, HW), a reshape of the
caller's memory (no permute): HW = the product of the spatial dims. weight and bias are
(C,), mean and rstd (N, HW). With the stage names used below (float32 arithmetic, each
output rounded once to its dtype):
    layer_norm_channels_sum[n, p]    = sum_c x[n, c, p]
    layer_norm_channels_mean32[n, p] = sum / C
    layer_norm_channels_sq[n, p]     = sum_c (x[n, c, p] - mean32[n, p])^2
    layer_norm_channels_rstd32[n, p] = 1 / sqrt(sq / C + eps)
    layer_norm_channels_y[n, c, p]   = (x - mean32) * rstd32 * gamma[c] + beta[c]
    layer_norm_channels_mean, layer_norm_channels_rstd: mean32 and rstd32 in the statistics' dtype.

Every sum runs over the middle axis, whose stride is HW: for a pixel p the C values lie HW
apart, and the pixels next to p are the next elements. The pattern is the column pass
(schedules/patterns.py ``column_pass``): the CPU rule walks a block of neighbouring pixels
at a time, the channels outside and the pixels inside (vectorized), so every load is a
contiguous run. The variance is taken about the mean (a second pass over the block, from
cache), as aclnnLayerNorm's.
"""
from __future__ import annotations

from opgen.ops.layer_norm_channels import reference
from opgen.ops.layer_norm_channels.api import API
from opgen.ops.layer_norm_channels.kernel import (  # noqa: F401  (re-exported)
    COMBOS, INPUTS, OUTPUTS, PRODUCTS, STAGE, Problem, compute, kernel_args, kernel_shapes, output_shapes,
    random_inputs)
from opgen.ops.layer_norm_channels.peers import CASES, PEERS
from opgen.ops.spec import OpSpec

SPEC = OpSpec(
    name="layer_norm_channels",
    aclnn_name="aclnnLayerNormChannels",
    doc=__doc__,
    inputs=INPUTS,
    outputs=OUTPUTS,
    combos=COMBOS,
    products=PRODUCTS,
    compute=compute,
    reference=reference.of_problem,
    random_inputs=random_inputs,
    kernel_args=kernel_args,
    problems=(Problem((2, 3, 4, 5)), Problem((1, 1, 7, 7)), Problem((2, 7, 33)), Problem((3, 33, 1), 1e-3),
              Problem((1, 96, 941)), Problem((2, 5, 12290)), Problem((4, 7))),
    api=API,
    output_shapes=output_shapes,
    peers=PEERS,
    cases=CASES,
    package=__name__,
    flops_per_element=7,    # counted from the TE stages: the sum (1), the centred square sum (3), y (3)
)
