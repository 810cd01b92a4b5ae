"""aclnnGemmaRmsNorm: the math in TE and what a kernel sees: tensors, dtype combos, problem sizes.

The formulas and stage names are in the package docstring (opgen.ops.gemma_rms_norm). The
tensors, the Problem (x's shape, gamma's rank, epsilon), the kernel and output shapes and
the same-dtype rows are aclnnRmsNorm's, imported from opgen.ops.rms_norm.kernel: the two
aclnn functions take the same arguments in the same order and differ in the y stage alone
(CANN runs both from one kernel source, ``is_gemma`` in ops-nn norm/rms_norm/op_kernel/rms_norm.h).
"""
from __future__ import annotations

import numpy as np

from opgen.dtypes import numpy_dtype
from opgen.lazy import te
from opgen.ops.rms_norm.kernel import (  # noqa: F401  (re-exported)
    BF16_BF16, DEFAULT_EPS, F16_F16, F32_F32, INPUTS, OUTPUTS, Problem, kernel_args, kernel_shapes, output_shapes)
from opgen.ops.spec import DtypeCombo, as_float32, attribute_array

STAGE = "gemma_rms_norm"

# The document's one table (aclnnGemmaRmsNorm.md l.250-256), for every product it supports:
# gamma and yOut in x's dtype, rstdOut float32. Ascend 950's OpDef also lists f16/bf16 x with
# a float32 gamma, but no binary is shipped for those rows (op_host/config/ascend950): the
# document stands (docs/validation-vs-cann.md, aclnnGemmaRmsNorm G2).
COMBOS: tuple[DtypeCombo, ...] = (F16_F16, BF16_BF16, F32_F32)
PRODUCTS = {
    "Ascend950": COMBOS,
    "AtlasA3": COMBOS,
    "AtlasA2": COMBOS,
}


def compute(combo: DtypeCombo) -> list[te.Tensor]:
    """TE of the forward over symbolic (rows, cols); returns x, gamma, eps, y, rstd.

    y is xr * (1 + gamma) with xr = x * rstd, in CANN's order: gamma widened to float32,
    then 1 + gamma (``Adds(gammaFp32, gammaFp32, 1.0)``), then one multiply. The offset is
    formed in float32: a float16 or bfloat16 gamma near 0 keeps its bits, which 1 + gamma in
    gamma's own dtype would round away."""
    rows = te.var("rows", "int64")
    cols = te.var("cols", "int64")
    x = te.placeholder((rows, cols), combo["x"], name="x")
    gamma = te.placeholder((cols,), combo["gamma"], name="gamma")
    eps = te.placeholder((1,), combo["eps"], name="eps")
    k = te.reduce_axis((0, cols), name="k")
    sumsq = te.compute((rows,), lambda r: te.sum(as_float32(x[r, k]) * as_float32(x[r, k]), axis=k),
                       name=f"{STAGE}_sumsq")
    rstd = te.compute((rows,), lambda r: te.rsqrt(sumsq[r] / cols.astype("float32") + eps[0]), name=f"{STAGE}_rstd")
    def y_value(r, c):
        xr = as_float32(x[r, c]) * rstd[r]
        return (xr * (1.0 + as_float32(gamma[c]))).astype(combo["y"])
    y = te.compute((rows, cols), y_value, name=f"{STAGE}_y")
    return [x, gamma, eps, y, rstd]


def random_inputs(problem: Problem, combo: DtypeCombo, rng: np.random.Generator) -> dict:
    """Inputs in the user's shapes (eps as the kernel's (1,) float32 input). gamma is drawn
    around 0, as Gemma's weights are (initialized to zeros, so 1 + gamma starts at 1): a
    kernel that dropped the offset or applied it in gamma's dtype shows."""
    x = rng.standard_normal(problem.x_shape).astype(numpy_dtype(combo["x"]))
    gamma = rng.uniform(-0.5, 0.5, problem.gamma_shape).astype(numpy_dtype(combo["gamma"]))
    return {"x": x, "gamma": gamma, "eps": attribute_array(problem.epsilon)}
