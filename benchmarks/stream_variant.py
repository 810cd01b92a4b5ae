"""RmsNormGrad on the CPU with the streamed row variant and without, against the same-bytes
stream (schedules/llvm.py, ALIGNED_STREAM; docs/cpu-benchmark.md).

Each setting runs as its own ``opgen bench`` process (``OPGEN_STREAM_VARIANT=0`` keeps
every call on the generic kernels), the settings alternating run by run (on off, off on,
...), so that a machine whose speed drifts (a loaded VM) hits both alike; within a run
``opgen bench`` interleaves opgen (numpy arrays and torch tensors, public API) with the
stream round by round, every call after a 192 MiB eviction pass, median of ``--repeats``.
The table gives per row the median over the runs of each run's stream time / opgen's
(goal 0.95 f32, 0.9 bf16): only ratios taken within a run mean anything on a shared machine.

    python benchmarks/stream_variant.py [--runs 3] [--repeats 7] [--out-dir DIR] [--from-dir DIR]

``--kernels`` times the kernels alone instead, in one process, interleaved round by round
with the stream (same flush): the generic kernel and each variant on the same data, the
output at a 64-byte boundary and 16 bytes past one (numpy's usual placement); it prints
stream time / kernel time per contender (no Python call path: what the stores alone do).
``--kernels --op rms_norm`` does the same for RmsNorm's forward, whose kernel makes the same
two passes over each row (a sum, then the output from the caches) with one input and no
column sums: the control that tells the pass structure from what RmsNormGrad's second pass
adds (docs/cpu-benchmark.md).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from isa_builds import SKIP, table  # noqa: E402  (the same per-run ratios and table)

SHAPES = ("4096x4096,1", "16384x1024,1", "2048x8192,1")
DTYPES = ("f32-f32", "bf16-bf16")
SETTINGS = {"variant": "1", "generic": "0"}   # label -> OPGEN_STREAM_VARIANT


def bench_once(repeats: int, setting: str, out: Path) -> None:
    env = {**os.environ, "OPGEN_STREAM_VARIANT": setting}
    argv = [sys.executable, "-m", "opgen.cli", "bench", "--no-tiny", "--repeats", str(repeats), "--out", str(out),
            "--op", "rms_norm_grad"]
    argv += [a for d in DTYPES for a in ("--dtypes", d)]
    argv += [a for s in SHAPES for a in ("--shape", f"rms_norm_grad={s}")]
    argv += [a for s in SKIP for a in ("--skip", s)]
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)


def _placed(a, offset: int):
    """A copy of ``a`` starting ``offset`` bytes past a 64-byte boundary."""
    import numpy as np
    buf = np.empty(a.nbytes + 128, np.uint8)
    start = (-buf.ctypes.data) % 64 + offset
    out = buf[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def kernels_alone(op_name: str, repeats: int) -> None:
    """The kernels alone (see the module doc): one line per case. Full-size tensors (the
    size of x) are the op's elementwise data; the stream reads the full-size inputs and
    writes the full-size outputs (same_bytes_stream); the other outputs are zeroed."""
    import numpy as np
    import torch
    from opgen import bench, kernels
    from opgen.dtypes import numpy_dtype
    from opgen.ops import get_op
    from opgen.targets import get_target

    op, llvm, rng = get_op(op_name), get_target("llvm"), np.random.default_rng(0)
    flush, _ = bench.triad()
    for shape in SHAPES:
        for tag in DTYPES:
            combo, problem = op.combo(tag), op.parse_problem(shape)
            inputs = {n: _placed(a, 0) for n, a in op.random_inputs(problem, combo, rng).items()}
            ref = op.reference(problem, inputs)
            full = max(a.size for a in inputs.values())
            streamed = [n for n in op.outputs if ref[n].size == full]
            runs = {}
            for offset in (0, 16):
                for align in (0, 64, 16):
                    if align and offset % align:
                        continue
                    kernel = kernels.get_kernel(op, combo, llvm, knobs={"aligned_stream": align})
                    outputs = {n: _placed(np.zeros(ref[n].shape, numpy_dtype(combo[n])), offset if n in streamed else 0)
                               for n in op.outputs}
                    args = op.kernel_args(problem, {**inputs, **outputs})
                    runs[f"{'variant' + str(align) if align else 'generic'}@{offset}"] = (lambda k=kernel, a=args: k(a))
            bits = np.int16 if "bf16" in tag or "f16" in tag else np.int32
            data = [torch.from_numpy(a.view(bits)) for a in inputs.values() if a.size == full]
            outs = [torch.from_numpy(_placed(np.zeros(ref[n].shape, numpy_dtype(combo[n])), 0).view(bits))
                    for n in streamed]
            runs["stream"] = bench.same_bytes_stream(data, outs)
            times = bench.measure(runs, repeats, flush=flush)
            base = times["stream"]
            cells = ", ".join(f"{n} {t * 1e3:.2f} ms ({base / t:.2f}x)" for n, t in times.items() if n != "stream")
            print(f"{op_name} {tag} {shape}: stream {base * 1e3:.2f} ms; {cells}", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out-dir", type=Path, default=Path("stream-variant"))
    parser.add_argument("--from-dir", type=Path, help="tabulate the runs saved there; measure nothing")
    parser.add_argument("--kernels", action="store_true", help="time the kernels alone (see the module doc)")
    parser.add_argument("--op", default="rms_norm_grad",
                        help="--kernels: the row op (rms_norm, the forward: the same two passes over a row)")
    args = parser.parse_args(argv)
    if args.kernels:
        kernels_alone(args.op, args.repeats)
        return 0
    folder = args.from_dir or args.out_dir
    folder.mkdir(parents=True, exist_ok=True)
    runs = {label: [folder / f"{label}-{i}.json" for i in range(args.runs)] for label in SETTINGS}
    if args.from_dir is None:
        for i in range(args.runs):
            order = list(SETTINGS) if i % 2 == 0 else list(reversed(SETTINGS))
            for label in order:
                print(f"run {i + 1}/{args.runs}: {label}", file=sys.stderr, flush=True)
                bench_once(args.repeats, SETTINGS[label], runs[label][i])
    else:
        runs = {label: [p for p in paths if p.exists()] for label, paths in runs.items()}
    print(table(runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
