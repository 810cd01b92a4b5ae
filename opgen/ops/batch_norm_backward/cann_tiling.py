"""What ``opgen tiling`` shows for BatchNormBackward: opgen's plan only.

No CANN formula stands beside it: on Atlas A2/A3 the op_api runs TBE kernels
(BNTrainingUpdateGrad / BNTrainingReduceGrad / BNInferGrad) whose tiling is not in ops-nn
(docs/specs/aclnnBatchNormBackward.md); the Ascend 950's AscendC tiling (batch_norm_grad_v3)
is not transcribed. The cases: ResNet-50 layers and a ragged one.
"""
from __future__ import annotations

LABEL = "BatchNormGrad"
CASES = (("32x64x56x56", "f32-f32"), ("256x2048x7x7", "f16-f16"), ("2x33x941", "f32-f32"))
NOTE = "CANN: TBE kernels on A2/A3, their tiling is not public; nothing to set beside"
