"""aclnnRmsNormGradQuant: RmsNormGrad's backward with dx quantized (Ascend 950 only).

RmsNormGrad's stages (opgen.ops.rms_norm_grad: dot, coef, dx's float32 value, dgamma; all
arithmetic in float32), imported, then one stage of its own:
    rms_norm_grad_quant_dx[r, c] = int8(clip(rint(q), -128, 127)),
    q = dx[r, c] / scales_x + offset_x   (divMode true)   or   dx[r, c] * scales_x + offset_x
with rint rounding half to even (CANN's CAST_RINT). dgamma is RmsNormGrad's, float32.

Shapes as RmsNormGrad's: gamma covers x's last ``gamma.ndim`` axes (rows x cols); scalesX
and offsetXOptional hold one element; divMode reaches the kernel as a (1,) float32 input
(0.0/1.0) so one kernel per dtype combo serves both modes. dxOut is INT8; the document's
HIFLOAT8 rows are not offered (docs/specs/aclnnRmsNormGradQuant.md says why).
"""
from __future__ import annotations

from opgen.ops.rms_norm_grad_quant import reference
from opgen.ops.rms_norm_grad_quant.api import API
from opgen.ops.rms_norm_grad_quant.kernel import (  # noqa: F401  (re-exported)
    COMBOS, INPUTS, OUTPUTS, PRODUCTS, Problem, compute, kernel_args, kernel_shapes, output_shapes, random_inputs)
from opgen.ops.rms_norm_grad_quant.peers import CASES, PEERS
from opgen import kernel_view as view
from opgen.ops.spec import CannAttr, CannOp, OpSpec

# CANN's OpDef of this op: names, order and attributes as ops-nn defines them.
CANN = CannOp("RmsNormGradQuant", inputs=(("dy", "dy"), ("x", "x"), ("rstd", "rstd"), ("gamma", "gamma"),
                                         ("scales_x", "scales_x"), ("offset_x", "offset_x")),
              outputs=(("dx", "dx"), ("dgamma", "dgamma")),
              attrs=(CannAttr("quant_mode", "String", "static"), CannAttr("div_mode", "Bool", True, tensor="div_mode"),
                     CannAttr("dst_type", "Int", 2)),
              source="ops-nn norm/rms_norm_grad_quant/op_host/rms_norm_grad_quant_def.cpp",
              view=view.trailing("dy"))

SPEC = OpSpec(
    name="rms_norm_grad_quant",
    aclnn_name="aclnnRmsNormGradQuant",
    doc=__doc__,
    inputs=INPUTS,
    outputs=OUTPUTS,
    combos=COMBOS,
    products=PRODUCTS,
    compute=compute,
    reference=reference.of_problem,
    random_inputs=random_inputs,
    kernel_args=kernel_args,
    problems=(Problem((2, 1, 16), 1), Problem((7, 33), 1, False), Problem((3, 12290), 1), Problem((4, 941), 1, False)),
    api=API,
    output_shapes=output_shapes,
    peers=PEERS,
    cases=CASES,
    package=__name__,
    cann=CANN,
    flops_per_element=14,   # RmsNormGrad's 10, then dx's scale, offset, round and clip
)
