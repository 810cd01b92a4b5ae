"""aclnnFastBatchNormBackward: the float64 reference is BatchNormBackward's
(opgen.ops.batch_norm_backward.reference, checked there against finite differences of the
float64 forward): the document prints the same six formulas (l.30-58), and the op_api fills
null inputs with the same constants (FastBatchNormBackwardPrepare l.485-513).
"""
from __future__ import annotations

from opgen.ops.batch_norm_backward.reference import NULL_FILL, batch_norm_backward, of_problem  # noqa: F401
