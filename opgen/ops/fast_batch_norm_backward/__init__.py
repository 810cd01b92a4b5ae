"""aclnnFastBatchNormBackward: the backward of BatchNorm, "the high-performance version" of
aclnnBatchNormBackward (hicann/ops-nn norm/batch_norm_grad_v3/docs/aclnnFastBatchNormBackward.md).

The math is BatchNormBackward's, and so is everything that computes or checks it, imported
from opgen.ops.batch_norm_backward: the TE (under this op's stage names, below), the float64
reference, the proof model, the dtype rows, the problem and the peers. With M = N * HW
elements per channel and t the training flag (1.0 or 0.0):

    fast_batch_norm_backward_mean[c]       = t * saveMean + (1 - t) * runningMean
    fast_batch_norm_backward_invstd[c]     = t * saveInvstd + (1 - t) * rsqrt(runningVar + eps)
    fast_batch_norm_backward_scale[c]      = weight * invstd
    fast_batch_norm_backward_sum_dy[c]     = sum_{n,hw} dy
    fast_batch_norm_backward_sum_dy_xmu[c] = sum_{n,hw} (x - mean) * dy
    fast_batch_norm_backward_mean_dy[c]    = t * sum_dy / M
    fast_batch_norm_backward_proj[c]       = t * sum_dy_xmu * invstd^2 / M
    fast_batch_norm_backward_dx[n,c,hw]    = (dy - mean_dy - (x - mean) * proj) * scale
    fast_batch_norm_backward_dweight[c]    = sum_dy_xmu * invstd
    fast_batch_norm_backward_dbias[c]      = sum_dy

What differs is the interface (api.py): a ``version`` attribute after outputMask that CANN's
op_api never reads, Atlas A2 as the only product, no channel-last formats, and the op_api's
own checks (fewer than BatchNormBackward's on the 950). The two ops never share a compiled
kernel: a kernel's symbol is ``<op>_<combo>``, and the disk cache keys a library by the
hash of its scheduled TIR (which holds that symbol and the stage names) and by the symbol
in its file name (opgen.kernels._cache_path).
"""
from __future__ import annotations

from opgen.ops.batch_norm_backward import CANN
from opgen.ops.fast_batch_norm_backward import reference
from opgen.ops.fast_batch_norm_backward.api import API
from opgen.ops.fast_batch_norm_backward.kernel import (  # noqa: F401  (re-exported)
    BF16, COMBOS, F16, F32, INPUTS, OUTPUTS, PRODUCTS, STAGE, Problem, compute, kernel_args, kernel_shapes,
    output_shapes, random_inputs)
from opgen.ops.fast_batch_norm_backward.peers import CASES, PEERS
from opgen.ops.spec import OpSpec

SPEC = OpSpec(
    name="fast_batch_norm_backward",
    aclnn_name="aclnnFastBatchNormBackward",
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
              Problem((5, 4, 3, 2, 7))),
    api=API,
    output_shapes=output_shapes,
    peers=PEERS,
    cases=CASES,
    package=__name__,
    cann=CANN,
    flops_per_element=10,   # BatchNormBackward's stages: two channel sums (1 + 3), dx (6)
)
