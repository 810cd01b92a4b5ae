"""aclnnGemmaRmsNorm: RmsNorm with Gemma's offset scale, ``x / Rms(x) * (1 + gamma)``, written once in TE.

The document is hicann/ops-nn norm/gemma_rms_norm/docs/aclnnGemmaRmsNorm.md ("compared with
RmsNorm, gamma gets +1"). Per row r of the flattened x, over its ``cols`` trailing elements
(gamma's axes), with the stage names used below (all arithmetic in float32 after gamma is
widened, y rounded once to x's dtype):
    gemma_rms_norm_sumsq[r] = sum_c x[r, c]^2
    gemma_rms_norm_rstd[r]  = 1 / sqrt(gemma_rms_norm_sumsq[r] / cols + eps)      (an output: rstdOut)
    gemma_rms_norm_y[r, c]  = x[r, c] * gemma_rms_norm_rstd[r] * (1 + gamma[c])   (CANN's order: kernel.compute)

Why a package of its own rather than aclnnRmsNorm with a gamma of 1 + gamma: a caller (and
Gemma's weights, initialized to zeros) holds gamma, not 1 + gamma, and in float16 or bfloat16
the sum 1 + gamma rounded to gamma's dtype loses the small weights the offset form exists
to keep. rstd is what aclnnRmsNormGrad takes back (float32, keepdim), so a backward is
aclnnRmsNormGrad with gamma' = 1 + gamma in float32 (opgen.torch.GemmaRMSNorm, torch_module.py).

Shapes are aclnnRmsNorm's: x has rank 1-8; gamma covers the last ``gamma.ndim`` axes (all of
them allowed), so with n = x.ndim - gamma.ndim the kernel sees rows = prod(x.shape[:n]),
cols = prod(x.shape[n:]); rstdOut is x's leading n dims, then 1s (the flat form x.shape[:n]
also accepted: api.py). The pattern is a row pass without column sums, as aclnnRmsNorm's.
"""
from __future__ import annotations

from opgen import kernel_view as view
from opgen.ops.gemma_rms_norm import reference
from opgen.ops.gemma_rms_norm.api import API
from opgen.ops.gemma_rms_norm.kernel import (  # noqa: F401  (re-exported)
    BF16_BF16, COMBOS, F16_F16, F32_F32, INPUTS, OUTPUTS, PRODUCTS, STAGE, Problem, compute, kernel_args,
    kernel_shapes, output_shapes, random_inputs)
from opgen.ops.gemma_rms_norm.peers import CASES, PEERS
from opgen.ops.spec import CannAttr, CannOp, OpSpec

# CANN's OpDef of this op: names, order and attributes as ops-nn defines them (epsilon is the
# (1,) float32 kernel input eps here).
CANN = CannOp("GemmaRmsNorm", inputs=(("x", "x"), ("gamma", "gamma")), outputs=(("y", "y"), ("rstd", "rstd")),
              attrs=(CannAttr("epsilon", "Float", 1e-6, tensor="eps"),),
              source="ops-nn norm/gemma_rms_norm/op_host/gemma_rms_norm_def.cpp",
              view=view.trailing("x"))

SPEC = OpSpec(
    name="gemma_rms_norm",
    aclnn_name="aclnnGemmaRmsNorm",
    doc=__doc__,
    inputs=INPUTS,
    outputs=OUTPUTS,
    combos=COMBOS,
    products=PRODUCTS,
    compute=compute,
    reference=reference.of_problem,
    random_inputs=random_inputs,
    kernel_args=kernel_args,
    problems=(Problem((2, 1, 16)), Problem((7, 33)), Problem((3, 12290)), Problem((4, 941), 1, 1e-5),
              Problem((3, 4, 7), 2), Problem((5, 1)), Problem((2, 16), 2)),
    api=API,
    output_shapes=output_shapes,
    peers=PEERS,
    cases=CASES,
    package=__name__,
    cann=CANN,
    flops_per_element=5,    # counted from the TE stages: x^2 summed (2), xr = x * rstd, 1 + gamma, the product (3)
)
