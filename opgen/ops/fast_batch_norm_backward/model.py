"""aclnnFastBatchNormBackward's proof model: BatchNormBackward's sympy forwards (both modes,
opgen.ops.batch_norm_backward.model), and the formulas this op's document prints
(aclnnFastBatchNormBackward.md l.30-58, the same six as aclnnBatchNormBackward.md) judged by
them under this document's name.
"""
from __future__ import annotations

import dataclasses

from opgen.ops.batch_norm_backward import model as bnb
from opgen.symbolic import ProofModel

OP = "fast_batch_norm_backward"
DOC = "aclnnFastBatchNormBackward.md"


def seed_checks(n: int = 2, c: int = 2, hw: int = 2) -> list:
    """BatchNormBackward's readings of the formulas, reported against this document."""
    return [dataclasses.replace(check, seed=DOC, op=OP) for check in bnb.seed_checks(n, c, hw)]


MODEL = ProofModel(bnb.MODEL.extents, bnb.batch_norm_truth, bnb.MODEL.cases, seed_checks)
