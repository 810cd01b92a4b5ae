"""aclnnLayerNorm: the forward of LayerNorm (PyTorch's native_layer_norm), written once in TE
(the op aclnnLayerNormBackward differentiates).

input has shape [A1..Ai, R1..Rj] and normalizedShape = [R1..Rj]; the kernel sees it as
(rows, cols) with rows = A1*..*Ai and cols = R1*..*Rj; weight and bias are (cols,), mean
and rstd (rows,). With the stage names used below (all arithmetic in float32, each output
rounded once to its dtype):
    layer_norm_sum[r]    = sum_c x[r, c]
    layer_norm_mean32[r] = sum[r] / cols
    layer_norm_sq[r]     = sum_c (x[r, c] - mean32[r])^2
    layer_norm_rstd32[r] = 1 / sqrt(sq[r] / cols + eps)
    layer_norm_y[r, c]   = (x[r, c] - mean32[r]) * rstd32[r] * gamma[c] + beta[c]
    layer_norm_mean, layer_norm_rstd: mean32 and rstd32 in the statistics' dtype (outputs).

The variance is taken about the mean (a second pass over the row, from cache), not as
E[x^2] - E[x]^2, which loses every digit when |mean| >> std. mean and rstd are what
aclnnLayerNormBackward takes (float32 ones with half data: opgen's rows, see api.py), in
aclnnLayerNorm's keepdim shape. eps is the aclnn attribute, a (1,) float32 kernel input.
The pattern is a row pass without column sums (``RowPass`` / ``GpuRowReduce``): one pass
per row reads x for the sums and again (from cache) for y.
"""
from __future__ import annotations

from opgen.ops.layer_norm import reference
from opgen.ops.layer_norm.api import API
from opgen.ops.layer_norm.kernel import (  # noqa: F401  (re-exported)
    BF16_BF16, BF16_BF16_F32, BF16_F32, BF16_F32_F32, COMBOS, F16_F16, F16_F16_F32, F16_F32, F16_F32_F32, F32_F32,
    INPUTS, OUTPUTS, PRODUCTS, STAGE, Problem, compute, kernel_args, kernel_shapes, output_shapes, random_inputs)
from opgen.ops.layer_norm.peers import CASES, PEERS
from opgen import kernel_view as view
from opgen.ops.spec import CannAttr, CannOp, OpSpec

# CANN's OpDef whose outputs aclnnLayerNorm's match (y, mean, rstd): LayerNormV3, the axis
# split as attributes (opgen's kernel sees the (rows, cols) view they describe).
CANN = CannOp("LayerNormV3", inputs=(("x", "x"), ("gamma", "gamma"), ("beta", "beta")),
              outputs=(("y", "y"), ("mean", "mean"), ("rstd", "rstd")),
              attrs=(CannAttr("begin_norm_axis", "Int", 0), CannAttr("begin_params_axis", "Int", 0),
                     CannAttr("epsilon", "Float", 1e-5, tensor="eps")),
              source="ops-nn norm/layer_norm_v3/op_host/layer_norm_v3_def.cpp",
              view=view.from_axis("x"))

SPEC = OpSpec(
    name="layer_norm",
    aclnn_name="aclnnLayerNorm",
    doc=__doc__,
    inputs=INPUTS,
    outputs=OUTPUTS,
    combos=COMBOS,
    products=PRODUCTS,
    compute=compute,
    reference=reference.of_problem,
    random_inputs=random_inputs,
    kernel_args=kernel_args,
    problems=(Problem((2, 3, 8), 2), Problem((5, 1)), Problem((7, 33)), Problem((4, 941), 1, 1e-3),
              Problem((3, 12290)), Problem((3, 5, 7))),
    api=API,
    output_shapes=output_shapes,
    peers=PEERS,
    cases=CASES,
    package=__name__,
    cann=CANN,
    flops_per_element=7,    # counted from the TE stages: the sum (1), the centred square sum (3), y (3)
)
