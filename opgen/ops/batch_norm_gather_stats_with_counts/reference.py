"""aclnnBatchNormGatherStatsWithCounts: the float64 numpy reference every kernel is compared with.

Written independently of the TE (plain numpy): ATen's batch_norm_gather_stats_with_counts
merges the ranks one at a time (Chan's parallel update of a count, a mean and a sum of
squared deviations), where the TE sums shifted moments over all ranks at once.
"""
from __future__ import annotations

import numpy as np


def gather_stats_with_counts(mean, invstd, counts, eps):
    """(mean_all, invstd_all) per channel from W ranks' (mean, invstd) of (W, C) and counts (W,):
    each rank's biased variance is 1/invstd^2 - eps; the ranks merge as
        n' = n + k,  avg' = avg + (m - avg) * k / n',  M2' = M2 + k * v + (m - avg)^2 * n * k / n'
    and invstd_all = 1/sqrt(M2 / n + eps). No rank: mean 0, invstd NaN (CANN's empty answer);
    a zero total count: NaN."""
    mean, invstd = np.asarray(mean, np.float64), np.asarray(invstd, np.float64)
    counts = np.asarray(counts, np.float64).reshape(-1)
    c = mean.shape[1]
    n, avg, m2 = 0.0, np.zeros(c), np.zeros(c)
    with np.errstate(divide="ignore", invalid="ignore"):
        for k, m, r in zip(counts, mean, invstd):
            if k == 0:
                continue
            var = 1.0 / (r * r) - eps
            total = n + k
            delta = m - avg
            avg = avg + delta * (k / total)
            m2 = m2 + k * var + delta * delta * (n * k / total)
            n = total
        if not len(counts):
            return np.zeros(c), np.full(c, np.nan)
        if n == 0:
            return np.full(c, np.nan), np.full(c, np.nan)
        return avg, 1.0 / np.sqrt(m2 / n + eps)


def of_problem(problem, arrays: dict) -> dict:
    """The reference outputs of one problem, by kernel name, in the user's shapes."""
    mean_all, invstd_all = gather_stats_with_counts(arrays["mean"], arrays["invstd"], arrays["counts"],
                                                    float(np.float32(problem.eps)))
    return {"mean_all": mean_all, "invstd_all": invstd_all}
