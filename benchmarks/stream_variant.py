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
    argv += [a for d in DTYPES for a in ("--dtypes", d)] + [a for s in SHAPES for a in ("--shape", f"rms_norm_grad={s}")]
    argv += [a for s in SKIP for a in ("--skip", s)]
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out-dir", type=Path, default=Path("stream-variant"))
    parser.add_argument("--from-dir", type=Path, help="tabulate the runs saved there; measure nothing")
    args = parser.parse_args(argv)
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
