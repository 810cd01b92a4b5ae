"""One ``opgen compare --against aten`` row over many random draws: is opgen's error larger
than ATen's, or did one draw fail by chance?

    python scripts/compare_draws.py [--draws 10] [--row OP:DTYPES:SHAPE:OUTPUT ...]

The default run draws its inputs from one random stream across every op, so a row's data
(and a marginal row's verdict) changes with the ops before it. For each row this runs the
same comparison (opgen.compare.against_aten, no timing) with seeds 0..draws-1 and prints
opgen's and ATen's MARE and MERE in u = 2^-24 (mean and worst over the draws) and how many
draws fail a standard. With no --row: the rows issue 37 left failing (docs/compare-and-bench.md).
"""
from __future__ import annotations

import argparse

import numpy as np

from opgen import compare

ISSUE_37_ROWS = (
    "batch_norm:f32-f32:2x16x7x9:save_mean", "batch_norm:f16-f16-f32:2x16x7x9:save_mean",
    "batch_norm:f16-f32-f32:2x16x7x9:save_mean", "batch_norm:bf16-bf16-f32:2x16x7x9:save_mean",
    "batch_norm_backward:f16-f16-f32-f16-f32:2x16x7x9:dbias",
    "batch_norm_backward:f16-f16-f32-f32-f16:2x16x7x9,eval:dweight",
    "batch_norm_backward:f16-f16-f32-f32-f32:2x16x7x9,eval:dweight",
    "batch_norm_backward:f16-f32-f16-f32-f32:2x16x7x9,eval:dweight",
    "batch_norm_backward:bf16-bf16-bf16-f32-f32:2x16x7x9:dweight",
    "deep_norm_grad:bf16-f32:256x1024:dbeta", "group_norm_backward:f16-f32:2,64,16x16,8:dgamma")
U = 2.0 ** -24


def draws(op: str, tag: str, shape: str, output: str, count: int) -> np.ndarray:
    """Rows of (opgen MARE, ATen MARE, opgen MERE, ATen MERE, passed), one per seed."""
    got = []
    for seed in range(count):
        rows = compare.against_aten([op], {op: (tag,)}, {op: (shape,)}, seed, 0)
        (row,) = [r for r in rows if r.output == output]
        got.append((row.ours.mare, row.theirs.mare, row.ours.mere, row.theirs.mere, row.passed))
    return np.array(got, dtype=float)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=10)
    parser.add_argument("--row", action="append", metavar="OP:DTYPES:SHAPE:OUTPUT")
    args = parser.parse_args()
    for text in args.row or ISSUE_37_ROWS:
        op, tag, shape, output = text.split(":")
        a = draws(op, tag, shape, output, args.draws)
        mare, mere = a[:, :2] / U, a[:, 2:4] / U
        print(f"{op:19s} {tag:22s} {shape:13s} {output:9s} MARE opgen {mare[:, 0].mean():6.1f}u "
              f"(worst {mare[:, 0].max():6.1f}) ATen {mare[:, 1].mean():6.1f}u (worst {mare[:, 1].max():6.1f}) | "
              f"MERE opgen {mere[:, 0].mean():5.2f}u ATen {mere[:, 1].mean():5.2f}u | "
              f"fails {int(len(a) - a[:, 4].sum())}/{len(a)}", flush=True)


if __name__ == "__main__":
    main()
