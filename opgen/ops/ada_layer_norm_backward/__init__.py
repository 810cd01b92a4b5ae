"""aclnnAdaLayerNormBackward: the backward of AdaLayerNorm (DiT's adaLN modulation).

Forward (aclnnAdaLayerNormV2): input [B..., S, H] normalized over H, then modulated per
sample: out = LayerNorm(input) * (1 + scale) + shift, LayerNorm(input) = x_hat * weight +
bias, x_hat = (input - mean) * rstd, scale and shift one row of H per sample ([B..., H] or
[B..., 1, H]), broadcast over the sequence axis S. The kernel sees input as (B, S, H) with
B the product of the B axes (1 for a 2-d input); mean and rstd hold one value per (b, s) and
are used as given (CANN never recomputes them). With g = dy * weight * (1 + scale):

    dx     = rstd * (g - mean_H(g) - x_hat * mean_H(g * x_hat))
    dscale = sum_S dy * (x_hat * weight + bias)       dshift = sum_S dy        (per sample)
    dgamma = sum_{B,S} dy * (1 + scale) * x_hat       dbeta  = sum_{B,S} dy * (1 + scale)

which are the document's gradInputOut, gradScaleOut, gradShiftOut, gradWeightOut and
gradBiasOut (aclnnAdaLayerNormBackward.md, "计算公式"). opgen.derive proves the stages
below against sympy's derivative of the forward.

Stages (float32 throughout, each output rounded once into its dtype):
    ada_layer_norm_backward_sum_g[b, s]       = sum_h g
    ada_layer_norm_backward_sum_gxc[b, s]     = sum_h g * (x - mean)
    ada_layer_norm_backward_c1[b, s]          = rstd * sum_g / H
    ada_layer_norm_backward_c2[b, s]          = rstd^3 * sum_gxc / H
    ada_layer_norm_backward_dx[b, s, h]       = rstd * g - c1 - (x - mean) * c2
    ada_layer_norm_backward_sum_dy_xhat[b, h] = sum_s dy * (x - mean) * rstd
    ada_layer_norm_backward_sum_dy[b, h]      = sum_s dy
    ada_layer_norm_backward_dscale[b, h]      = weight * sum_dy_xhat + bias * sum_dy
    ada_layer_norm_backward_dshift[b, h]      = sum_dy
    ada_layer_norm_backward_dgamma[h]         = sum_b (1 + scale) * sum_dy_xhat
    ada_layer_norm_backward_dbeta[h]          = sum_b (1 + scale) * sum_dy
where, for a half weight, ``_dgamma_acc``/``_dbeta_acc`` are the float32 sums and
``_dgamma``/``_dbeta`` round them. The weight and bias gradients are taken from the
per-sample sums (1 + scale is constant over S), so the data is summed over S once.

Schedules: the stages are a *segmented row pass* (schedules/patterns.py,
``segmented_row_pass``): the row sums over H and dx are a row pass over (B*S, H), and
dscale/dshift's sums over S (blocks SSR over (B, H, S)) are its column sums restarted at
every sample (per-sample partials (B, H)), followed by small stages over (B, H) and the
sums over B. The CPU (SegmentedRowPass), GPU (GpuSegmentedRowPass) and Ascend
(SegmentTiles) rules take it.

Precision: the TE sums each per-sample column over S in one float32 accumulator. Where a
target's fallback runs it that way, gradScaleOut and gradShiftOut err 1.7 to 2.7 times as
much as ATen's cascade sum (``opgen compare --against aten``, f32 4x256x1152: within the
tolerance table, outside compare's library-ratio levels). The segmented row pass rules
sum each chunk of rows (rows_per_chunk, 64 by default, on the CPU; rows_per_block on GPUs)
in its own partial and the partials in order, a two-level sum from the same TE: on llvm the
same compare gives xMERE 1.09 (dscale) and 1.47 (dshift), every row met. Two remedies in
the TE were measured and left out: a two-level sum (chunks of 32 steps) has guarded chunk
loads with no linalg lowering (iree-cpu, ascend-mlir: NOT EMITTED), and a float64
accumulator has none on Ascend (ascend-mlir).

shift takes part in no output: its aclnn parameter is ``Param.validated_only`` (api.py), as
CANN's kernel has no input for it (ada_layer_norm_grad_def.cpp). weightOptional and
biasOptional may be null: ones and zeros, as CANN's op_api fills them.
"""
from __future__ import annotations

from opgen.ops.ada_layer_norm_backward import reference
from opgen.ops.ada_layer_norm_backward.api import API
from opgen.ops.ada_layer_norm_backward.kernel import (  # noqa: F401  (re-exported)
    BF16, BF16_F32, COMBOS, F16, F16_F32, F32, INPUTS, OUTPUTS, PRODUCTS, STAGE, Problem, compute, kernel_args,
    kernel_shapes, output_shapes, random_inputs)
from opgen.ops.ada_layer_norm_backward.peers import CASES, PEERS
from opgen import kernel_view as view
from opgen.ops.spec import CannOp, OpSpec

# CANN's OpDef of this op: names and order as ops-nn defines them (no shift input, no attribute).
CANN = CannOp("AdaLayerNormGrad",
              inputs=(("dy", "dy"), ("x", "x"), ("rstd", "rstd"), ("mean", "mean"), ("scale", "scale"),
                      ("gamma", "gamma"), ("beta", "beta")),
              outputs=(("pd_x", "dx"), ("pd_scale", "dscale"), ("pd_shift", "dshift"), ("pd_gamma", "dgamma"),
                       ("pd_beta", "dbeta")),
              source="ops-nn norm/ada_layer_norm_grad/op_host/ada_layer_norm_grad_def.cpp",
              view=view.segments("dy"))

SPEC = OpSpec(
    name="ada_layer_norm_backward",
    aclnn_name="aclnnAdaLayerNormBackward",
    doc=__doc__,
    inputs=INPUTS,
    outputs=OUTPUTS,
    combos=COMBOS,
    products=PRODUCTS,
    compute=compute,
    reference=reference.of_problem,
    random_inputs=random_inputs,
    kernel_args=kernel_args,
    problems=(Problem((2, 3, 8), 1), Problem((2, 2), 0), Problem((7, 33), 1), Problem((2, 3, 941), 0),
              Problem((1, 2, 12290), 1), Problem((2, 1, 3, 5, 7), 1)),
    api=API,
    output_shapes=output_shapes,
    peers=PEERS,
    cases=CASES,
    package=__name__,
    cann=CANN,
    flops_per_element=20,   # counted from the TE stages: the two row sums (4 + 5), dx (6), the S sums (3 + 1), g's 1
)
