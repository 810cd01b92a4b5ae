"""aclnnFastBatchNormBackward's peers and shapes: BatchNormBackward's (ATen's
native_batch_norm_backward, and the autograd of F.batch_norm eager and compiled), since the
math is the same; opgen compare and opgen bench hand both the same numpy arrays.
"""
from __future__ import annotations

from opgen.ops.batch_norm_backward.peers import CASES, PEERS  # noqa: F401  (re-exported)
