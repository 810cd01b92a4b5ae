"""The LLVM channel rule's two ways through a BatchNorm-like kernel, side by side: one
parallel pass over the channels, or batch rows (partials per (n, c) row, totals per channel,
outputs: three parallel nests; knob ``batch_row_sums``, schedules/llvm.py). Kernel alone
(opgen.kernels.get_kernel at each knob value), f32, on torch's OpenMP pool (opgen.torch
loaded), 2 threads, contenders interleaved in a random order, µs:

    python benchmarks/batch_rows.py            # warm: the same data call after call
    python benchmarks/batch_rows.py evict      # a 32 MiB torch op before every call

Where BATCH_ROWS_MIN_ELEMENTS comes from (issue 39: ResNet's BatchNorm2d shapes at
``opgen bench --models``, below it, and the case batch rows were made for, above it).
"""
from __future__ import annotations

import sys
import time

import numpy as np
import torch

import opgen.torch  # noqa: F401  (routes the kernels' parallel loops onto torch's OpenMP pool)
from opgen import kernels
from opgen.ops import get_op
from opgen.ops.batch_norm_backward import Problem

EVICT = len(sys.argv) > 1 and sys.argv[1] == "evict"
SHAPES = ([(8, 32, 16, 16), (8, 64, 8, 8), (32, 128, 8, 8), (16, 512, 7, 7)] if EVICT else
          [(8, 32, 16, 16), (8, 64, 8, 8), (16, 64, 16, 16), (32, 128, 8, 8), (16, 256, 8, 8)])
ROUNDS = 25
_BIG = torch.empty(32 << 18)   # 32 MiB of float32


def kernel_call(op_name: str, shape: tuple, batch_rows: bool, rng):
    op = get_op(op_name)
    combo = op.combo("f32-f32") if op_name == "batch_norm_backward" else op.combos[0]
    problem = Problem(shape)
    arrays = op.random_inputs(problem, combo, rng)
    outs = {name: np.empty(s, np.float32) for name, s in op.output_shapes(problem).items()}
    kernel = kernels.get_kernel(op, combo, "llvm", knobs={"batch_row_sums": batch_rows})
    args = op.kernel_args(problem, {**arrays, **outs})
    return lambda: kernel(args)


def us(call, calls: int = 10) -> float:
    if EVICT:
        total = 0.0
        for _ in range(3):
            _BIG.add_(1.0)
            start = time.perf_counter()
            call()
            total += time.perf_counter() - start
        return total / 3 * 1e6
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    torch.set_num_threads(2)
    rng = np.random.default_rng(0)
    cases = {(op, shape, rows): kernel_call(op, shape, rows, rng)
             for op in ("batch_norm", "batch_norm_backward") for shape in SHAPES for rows in (True, False)}
    for call in cases.values():
        call()
    times: dict = {key: [] for key in cases}
    names, order = list(cases), np.random.default_rng(1)
    for _ in range(ROUNDS):
        for i in order.permutation(len(names)):
            times[names[i]].append(us(cases[names[i]]))
    print(f"{'evicted' if EVICT else 'warm'}, {torch.get_num_threads()} threads, µs over {ROUNDS} rounds")
    for op, shape, rows in names:
        if rows:
            a, b = times[(op, shape, False)], times[(op, shape, True)]
            print(f"{op:20s} {str(shape):16s} channels min {min(a):7.1f} median {np.median(a):7.1f} | "
                  f"batch rows min {min(b):7.1f} median {np.median(b):7.1f}")


if __name__ == "__main__":
    main()
