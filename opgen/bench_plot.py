"""The picture of an ``opgen bench`` run: GB/s per shape, and a roofline.

Left panel: effective GB/s (minimal bytes / time) of every contender on every large case,
with a line at the median same-run triad bandwidth: the ceiling a memory-bound kernel
approaches. Right panel: a roofline: attainable GFLOP/s = min(peak, bandwidth x intensity)
with the bandwidth measured in the run and the peak a float32 matmul measured here, and
each case's opgen point at its arithmetic intensity (FLOPs counted from the op's TE stages
over minimal bytes). Points near the slanted roof are bandwidth-bound; far below it, the
kernel leaves bandwidth on the table. matplotlib is an optional extra (``opgen[bench]``).
"""
from __future__ import annotations

import math
import statistics
import time

import numpy as np

from opgen.ops import get_op


def peak_gflops(size: int = 1024, repeats: int = 3) -> float:
    """float32 matmul GFLOP/s through numpy's BLAS: the compute roof of this machine, now."""
    a = np.random.default_rng(0).standard_normal((size, size)).astype(np.float32)
    a @ a
    best = min(_timed(lambda: a @ a) for _ in range(repeats))
    return 2 * size ** 3 / best / 1e9


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _short(op_name: str) -> str:
    """A tick label's op: its words' initials (rms_norm_grad -> rng)."""
    return "".join(word[0] for word in op_name.split("_"))


def _intensity(row) -> tuple[float, float]:
    """(FLOPs per byte, achieved GFLOP/s) of an opgen row (the op's own FLOPs per element)."""
    op = get_op(row.op)
    problem = op.parse_problem(row.shape)
    elements = math.prod(op.api.kernel_shapes(problem)[op.inputs[0]])
    flops = op.flops_per_element * elements
    nbytes = row.gbs * 1e9 * row.ms / 1e3
    return flops / nbytes, flops / (row.ms / 1e3) / 1e9


def plot(rows, path, peak: float | None = None) -> None:
    """Draw the two panels of ``rows`` (opgen.bench.Record) into the PNG ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    large = [r for r in rows if not r.tiny and r.gbs]
    cases = list(dict.fromkeys((r.op, r.dtypes, r.shape) for r in large if r.contender != "triad"))
    names = list(dict.fromkeys(r.contender for r in large if r.contender != "triad"))
    bandwidth = statistics.median([r.gbs for r in large if r.contender == "triad"] or [0.0])
    fig, (bars, roof) = plt.subplots(1, 2, figsize=(14, 5.5), gridspec_kw={"width_ratios": [2, 1]})
    width = 0.8 / max(len(names), 1)
    for i, name in enumerate(names):
        values = [next((r.gbs for r in large if (r.op, r.dtypes, r.shape) == c and r.contender == name), 0.0)
                  for c in cases]
        bars.bar(np.arange(len(cases)) + i * width, values, width, label=name)
    if bandwidth:
        bars.axhline(bandwidth, color="black", linestyle="--", label=f"triad {bandwidth:.1f} GB/s (same run)")
    bars.set_xticks(np.arange(len(cases)) + 0.4 - width / 2)
    bars.set_xticklabels([f"{_short(op)} {tag}\n{shape}" for op, tag, shape in cases],
                         fontsize=7, rotation=30, ha="right")
    bars.set_ylabel("GB/s (minimal bytes)")
    bars.set_title("effective bandwidth per shape")
    bars.legend(fontsize=7)
    _roofline(roof, [r for r in large if r.contender == "opgen-numpy"], bandwidth,
              peak if peak is not None else peak_gflops())
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _roofline(ax, rows, bandwidth: float, peak: float) -> None:
    points = [_intensity(r) for r in rows]
    lo = min([p[0] for p in points] + [0.1]) / 4
    hi = max([p[0] for p in points] + [1.0]) * 40
    ai = np.geomspace(lo, hi, 200)
    if bandwidth:
        ax.loglog(ai, np.minimum(peak, bandwidth * ai), color="black", label=f"roof: {bandwidth:.0f} GB/s, "
                  f"{peak:.0f} GFLOP/s (f32 matmul)")
    for r, (x, y) in zip(rows, points):
        ax.loglog([x], [y], "o", label=f"opgen {_short(r.op)} {r.dtypes} {r.shape}")
    ax.set_xlabel("FLOPs per byte")
    ax.set_ylabel("GFLOP/s")
    ax.set_title("roofline (opgen, numpy inputs)")
    ax.legend(fontsize=6)
