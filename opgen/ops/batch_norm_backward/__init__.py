"""aclnnBatchNormBackward: the backward of BatchNorm (PyTorch's native_batch_norm_backward).

The kernel sees the data as (N, C, HW) (every axis before the channel folded into N, every
axis after it into HW; see kernel.py) and the per-channel weight and statistics as (C,).
M = N * HW elements per channel. The mode t is data (1.0 training, 0.0 eval), like eps,
so one kernel serves both; the per-channel stages blend it in arithmetically:

    batch_norm_backward_mean[c]       = t * saveMean + (1 - t) * runningMean
    batch_norm_backward_invstd[c]     = t * saveInvstd + (1 - t) * rsqrt(runningVar + eps)
    batch_norm_backward_scale[c]      = weight * invstd
    batch_norm_backward_sum_dy[c]     = sum_{n,hw} dy
    batch_norm_backward_sum_dy_xmu[c] = sum_{n,hw} (x - mean) * dy
    batch_norm_backward_mean_dy[c]    = t * sum_dy / M
    batch_norm_backward_proj[c]       = t * sum_dy_xmu * invstd^2 / M
    batch_norm_backward_dx[n,c,hw]    = (dy - mean_dy - (x - mean) * proj) * scale
    batch_norm_backward_dweight[c]    = sum_dy_xmu * invstd
    batch_norm_backward_dbias[c]      = sum_dy

Training (t = 1) is the document's gradInput = w*invstd/M * (M*g - sum g - x_hat * sum g*x_hat)
with x_hat = (x - saveMean) * saveInvstd (eps is not read: saveInvstd already holds it).
Eval (t = 0): the statistics are constants, so dx = dy * weight / sqrt(runningVar + eps) and
dweight/dbias are the same sums around runningMean. opgen.derive proves both modes against
sympy's derivative of the forward. Float32 throughout, each output rounded once to its dtype.
The document prints "saveVar + eps" for what is 1/saveInvstd^2 (model.py's seed checks).

Null optional inputs are CANN's fills (weight 1, runningMean 0, runningVar 1, saveMean 0,
saveInvstd 1); the statistics a mode does not read are filled the same way (api.py's
ApiSpec.unread), so nothing unused reaches the arithmetic blend. One known difference from a Select: in eval a
non-finite x makes its channel's dx nan (0 * inf in the blended mean term), where CANN's
eval gradInput never reads x.
"""
from __future__ import annotations

from opgen.ops.batch_norm_backward import reference
from opgen.ops.batch_norm_backward.api import API
from opgen.ops.batch_norm_backward.kernel import (  # noqa: F401  (re-exported)
    COMBOS, F16, F32, BF16, INPUTS, OUTPUTS, PRODUCTS, STAGE, Problem, compute, kernel_args, kernel_shapes,
    output_shapes, random_inputs)
from opgen.ops.batch_norm_backward.peers import CASES, PEERS
from opgen import kernel_view as view
from opgen.ops.spec import CannAttr, CannOp, OpSpec

# CANN's OpDef of this op: names, order and attributes as ops-nn defines them.
CANN = CannOp("BatchNormGradV3",
              inputs=(("dy", "dy"), ("x", "x"), ("weight", "weight"), ("running_mean", "running_mean"),
                      ("running_var", "running_var"), ("save_mean", "save_mean"), ("save_rstd", "save_invstd")),
              outputs=(("dx", "dx"), ("dweight", "dweight"), ("dbias", "dbias")),
              attrs=(CannAttr("is_training", "Bool", True, tensor="training"),
                     CannAttr("epsilon", "Float", 1e-5, tensor="eps"), CannAttr("version", "Int", 0)),
              source="ops-nn norm/batch_norm_grad_v3/op_host/batch_norm_grad_v3_def.cpp",
              view=view.channels("dy"))

SPEC = OpSpec(
    name="batch_norm_backward",
    aclnn_name="aclnnBatchNormBackward",
    doc=__doc__,
    inputs=INPUTS,
    outputs=OUTPUTS,
    combos=COMBOS,
    products=PRODUCTS,
    compute=compute,
    reference=reference.of_problem,
    random_inputs=random_inputs,
    kernel_args=kernel_args,
    problems=(Problem((2, 3, 4, 5)), Problem((3, 7, 33)), Problem((2, 33, 941), False, 1e-3),
              Problem((5, 4, 3, 2, 7)), Problem((7, 6, 5, 3), channel_last=True)),
    api=API,
    output_shapes=output_shapes,
    peers=PEERS,
    cases=CASES,
    package=__name__,
    cann=CANN,
    flops_per_element=10,   # counted from the TE stages: two channel sums (1 + 3), dx (6)
)
