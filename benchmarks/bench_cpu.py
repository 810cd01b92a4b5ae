"""CPU benchmark: opgen through the aclnn API (numpy and torch inputs) next to ATen, eager
autograd, torch.compile and the same-run triad bandwidth, plus the per-call cost on tiny shapes.

A thin entry point: the logic is opgen.bench, the same code as ``opgen bench``. Prints a
table to paste into a note; see ``--help`` (``--out FILE.csv|.json``, ``--plot FILE.png``,
``--omp-wait passive|default``, ``--quick``).

    python benchmarks/bench_cpu.py [--repeats 15] [--out rows.csv] [--plot bench.png]
    python benchmarks/bench_cpu.py --omp-wait default     # what a PyTorch user with default settings sees
"""
from __future__ import annotations

from opgen.bench import cli  # light: OMP_WAIT_POLICY can still be set before OpenMP loads

if __name__ == "__main__":
    raise SystemExit(cli())
