"""aclnnSyncBatchNormGatherStats: the float64 numpy reference every kernel is compared with.

Written independently of the TE (plain numpy, the document's formulas l.31-51 in float64).
"""
from __future__ import annotations

import numpy as np


def sync_batch_norm_gather_stats(total_sum, total_square_sum, sample_count, eps):
    """(batch_mean, batch_invstd) per channel from W ranks' sums and square sums (W, C) and
    their counts (W,): n = sum counts, batchMean = sum totalSum / n,
    batchVar = sum totalSquareSum / n - batchMean^2, batchInvstd = 1/sqrt(batchVar + eps).
    A zero total count: NaN."""
    s = np.asarray(total_sum, np.float64).sum(axis=0)
    q = np.asarray(total_square_sum, np.float64).sum(axis=0)
    n = np.asarray(sample_count, np.float64).sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = s / n
        return mean, 1.0 / np.sqrt(q / n - mean * mean + eps)


def of_problem(problem, arrays: dict) -> dict:
    """The reference outputs of one problem, by kernel name, in the user's shapes."""
    mean, invstd = sync_batch_norm_gather_stats(arrays["total_sum"], arrays["total_square_sum"],
                                                arrays["sample_count"], float(np.float32(problem.eps)))
    return {"batch_mean": mean, "batch_invstd": invstd}
