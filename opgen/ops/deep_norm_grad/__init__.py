"""aclnnDeepNormGrad: the backward of DeepNorm (aclnnDeepNorm), written once in TE.

Forward (per row r of the flattened x, over its D = prod(gamma.shape) trailing elements):
    x'[r, c] = alpha * x[r, c] + gx[r, c]
    y[r, c]  = (x'[r, c] - mean[r]) * rstd[r] * gamma[c] + beta[c]
    mean[r]  = mean_c x'[r, c],   rstd[r] = 1 / sqrt(mean_c (x'[r, c] - mean[r])^2 + eps)

Backward: the LayerNorm backward of x', with dgx = dx' and dx = alpha * dx'. mean and rstd
are inputs used as given (as CANN does; the gradient through their dependence on x is the
dvar/dmean terms, exact when they are x''s true statistics: opgen.derive proves it).
alpha is an attribute (double); the kernel reads it as a (1,) float32 input, as CANN's
kernel reads a float32 attribute. Stages (float32 throughout, each output rounded once):
    tmpone[r, c] = dy[r, c] * gamma[c]
    tmptwo[r, c] = alpha * x[r, c] + gx[r, c] - mean[r]
    deep_norm_grad_sum_dyg[r]  = sum_c tmpone[r, c]
    deep_norm_grad_sum_dygh[r] = sum_c tmpone[r, c] * tmptwo[r, c]
    deep_norm_grad_dvar[r]     = -deep_norm_grad_sum_dygh[r] * rstd[r]^3 / D
    deep_norm_grad_dmean[r]    = -deep_norm_grad_sum_dyg[r] * rstd[r] / D
    deep_norm_grad_dgx[r, c]   = tmpone * rstd[r] + deep_norm_grad_dvar[r] * tmptwo + deep_norm_grad_dmean[r]
    deep_norm_grad_dx[r, c]    = alpha * (the same float32 value, before dgx's rounding)
    deep_norm_grad_dbeta[c]    = sum_r dy[r, c]
    deep_norm_grad_dgamma[c]   = sum_r dy[r, c] * rstd[r] * tmptwo[r, c]
(tmpone and tmptwo are inlined where they are used: never materialised.)

The document prints these formulas with one symbol sum_{i=1}^{N} for two reductions: over a
row's D normalized elements in dvar/dmean (oneDiv = -1/SizeOf(gamma)) and over the N rows in
dbeta/dgamma; read as dbeta's N in dvar/dmean it is wrong (model.seed_checks says so).

Shapes: dy, x, gx, dx, dgx have 2-8 dims; gamma, dbeta, dgamma 1-7, gamma being x's last
gamma.dim dims; n = x.dim - gamma.dim >= 1 leading dims make rows = prod(x.shape[:n]) and
D = prod(gamma.shape); mean and rstd are (x.shape[:n], 1, ..., 1). dbeta and dgamma are float32.
"""
from __future__ import annotations

from opgen.ops.deep_norm_grad import reference
from opgen.ops.deep_norm_grad.api import API
from opgen.ops.deep_norm_grad.kernel import (  # noqa: F401  (re-exported)
    BF16_F32, COMBOS, F16_F32, F32_F32, INPUTS, OUTPUTS, PRODUCTS, STAGE, Problem, compute, kernel_args,
    kernel_shapes, output_shapes, random_inputs)
from opgen.ops.deep_norm_grad.peers import CASES, PEERS
from opgen import kernel_view as view
from opgen.ops.spec import CannAttr, CannOp, OpSpec

# CANN's OpDef of this op: names, order and attributes as ops-nn defines them.
CANN = CannOp("DeepNormGrad",
              inputs=(("dy", "dy"), ("x", "x"), ("gx", "gx"), ("gamma", "gamma"), ("mean", "mean"), ("rstd", "rstd")),
              outputs=(("dx", "dx"), ("dgx", "dgx"), ("dbeta", "dbeta"), ("dgamma", "dgamma")),
              attrs=(CannAttr("alpha", "Float", 0.3, tensor="alpha"),),
              source="ops-nn norm/deep_norm_grad/op_host/deep_norm_grad_def.cpp",
              view=view.trailing("dy", ranks=(2, 8), params_ranks=(1, 7)))   # api.py _check_ranks

SPEC = OpSpec(
    name="deep_norm_grad",
    aclnn_name="aclnnDeepNormGrad",
    doc=__doc__,
    inputs=INPUTS,
    outputs=OUTPUTS,
    combos=COMBOS,
    products=PRODUCTS,
    compute=compute,
    reference=reference.of_problem,
    random_inputs=random_inputs,
    kernel_args=kernel_args,
    problems=(Problem((3, 1, 4), 1), Problem((7, 33), 1, 0.87), Problem((3, 12290), 1), Problem((2, 2, 941), 1, 1.5),
              Problem((3, 4, 5), 2, -0.5)),
    api=API,
    output_shapes=output_shapes,
    peers=PEERS,
    cases=CASES,
    package=__name__,
    cann=CANN,
    # counted from the TE stages per element of dy, tmpone and tmptwo formed once: tmpone (1),
    # tmptwo (3), the two row sums (3), dgx (4), dx (1), dbeta (1), dgamma (3)
    flops_per_element=16,
)
