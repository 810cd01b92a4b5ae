"""Modelled time of opgen's Ascend kernels on large shapes (the emulation's timing model).

    python scripts/ascend_model_table.py [--product AtlasA2] [op:combo:shape ...]

Runs each kernel once under the AscendC emulation (the emitted code, not a formula) and
prints the table docs/ascend-tiling.md carries: modelled time, busy % per pipe, GM bytes and
the fraction of the GM-bandwidth bound. Large shapes take minutes of CPU: the emulation checks
every element.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from opgen import kernels
from opgen.ops import get_op
from opgen.targets import get_target
from opgen.verify import numpy_dtype

DEFAULT = ("rms_norm_grad:f32-f32:8192x5120", "group_norm_backward:f32-f32:8,256,56x56,32")


def measure(spec: str, target):
    """(label, ModelledTime, wall seconds) of one op:combo:shape on ``target``."""
    name, tag, shape = spec.split(":")
    op = get_op(name)
    combo, problem = op.combo(tag), op.parse_problem(shape)
    kernel = kernels.get_kernel(op, combo, target)
    arrays = op.random_inputs(problem, combo, np.random.default_rng(0))
    ref = op.reference(problem, arrays)           # only for the output shapes
    outputs = {n: np.full(ref[n].shape, np.nan, dtype=numpy_dtype(combo[n])) for n in op.outputs}
    start = time.perf_counter()
    kernel(op.kernel_args(problem, {**arrays, **outputs}))
    wall = time.perf_counter() - start
    return f"{op.aclnn_name.removeprefix('aclnn')} {shape} {tag}", kernel.module.kernel.last_timing, wall


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--product", default="AtlasA2")
    parser.add_argument("cases", nargs="*", default=list(DEFAULT))
    args = parser.parse_args(argv)
    target = get_target("ascend-emu").for_product(args.product)
    print(f"| case ({args.product}) | modelled | MTE2 | V | MTE3 | S | GM bytes | GM bound | % of bound |")
    print("|---|---|---|---|---|---|---|---|---|")
    for spec in args.cases:
        label, m, wall = measure(spec, target)
        busy = " | ".join(f"{100 * m.busy[p]:.0f}%" for p in ("MTE2", "V", "MTE3", "S"))
        print(f"| {label} | {m.seconds * 1e6:,.1f} us | {busy} | {m.gm_bytes:,} | {m.bound_seconds * 1e6:,.1f} us "
              f"| {100 * m.of_bound:.0f}% |", flush=True)
        print(f"<!-- emulated in {wall:.0f} s on {m.cores} cores -->", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
