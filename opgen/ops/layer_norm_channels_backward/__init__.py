"""LayerNormChannelsBackward: the backward of LayerNormChannels (LayerNorm over axis 1 of
NCHW data, ConvNeXt's channels-first LayerNorm). An opgen extension: CANN has no aclnn
function of this form (see api.py).

input has shape [N, C, spatial...]; the kernel sees it as (N, C, HW), a reshape (no
permute). mean and rstd hold one value per pixel (N, HW) and are used as given. With
x_hat = (x - mean) * rstd and g = dy * gamma, per pixel over the C channels:

    dx     = rstd * (g - mean_C(g) - x_hat * mean_C(g * x_hat))
    dgamma = sum_{n, p} dy * x_hat          dbeta = sum_{n, p} dy

aclnnLayerNormBackward's formula with the channels as the normalized axis. Stages (float32,
each output rounded once into its dtype):
    layer_norm_channels_backward_sum_g[n, p]   = sum_c dy * gamma
    layer_norm_channels_backward_sum_gxc[n, p] = sum_c dy * gamma * (x - mean)
    layer_norm_channels_backward_c1[n, p]      = rstd * sum_g / C
    layer_norm_channels_backward_c2[n, p]      = rstd^3 * sum_gxc / C
    layer_norm_channels_backward_dx[n, c, p]   = rstd * dy * gamma - c1 - (x - mean) * c2
    layer_norm_channels_backward_dgamma[c]     = sum_{n, p} dy * (x - mean) * rstd
    layer_norm_channels_backward_dbeta[c]      = sum_{n, p} dy
(``_dgamma_acc``/``_dbeta_acc`` and a rounding stage where the weight is half precision).
The pixel sums run over the middle axis (stride HW), the channel sums over the outer and
inner axes: the column pass with channel sums (schedules/patterns.py ``column_pass``).
opgen.derive proves the stages against sympy's derivative of the forward (model.py).
"""
from __future__ import annotations

from opgen.ops.layer_norm_channels_backward import reference
from opgen.ops.layer_norm_channels_backward.api import API
from opgen.ops.layer_norm_channels_backward.kernel import (  # noqa: F401  (re-exported)
    COMBOS, INPUTS, OUTPUTS, PRODUCTS, STAGE, Problem, compute, kernel_args, kernel_shapes, output_shapes,
    random_inputs)
from opgen.ops.layer_norm_channels_backward.peers import CASES, PEERS
from opgen.ops.spec import OpSpec

SPEC = OpSpec(
    name="layer_norm_channels_backward",
    aclnn_name="aclnnLayerNormChannelsBackward",
    doc=__doc__,
    inputs=INPUTS,
    outputs=OUTPUTS,
    combos=COMBOS,
    products=PRODUCTS,
    compute=compute,
    reference=reference.of_problem,
    random_inputs=random_inputs,
    kernel_args=kernel_args,
    problems=(Problem((2, 3, 4, 5)), Problem((1, 1, 7, 7)), Problem((2, 7, 33)), Problem((3, 33, 1)),
              Problem((1, 96, 941)), Problem((2, 5, 12290)), Problem((4, 7))),
    api=API,
    output_shapes=output_shapes,
    peers=PEERS,
    cases=CASES,
    package=__name__,
    flops_per_element=17,   # counted from the TE stages: the two pixel sums (2 + 4), dx (6), dgamma (4), dbeta (1)
)
