"""The CPU goals for two builds of the same kernels side by side: the host's full feature set
and the host with some switched off (default: AVX-512, through OPGEN_LLVM_TARGET).

Why: a machine that hides AVX-512 (a cloud VM whose hypervisor masks it) runs the kernels
opgen builds without it; their speed there is measured here, on a machine that has
AVX-512, against the same-run baselines. OPGEN_LLVM_TARGET is read once per process, so
each build runs as its own ``opgen bench`` process; the builds alternate run by run (A B,
B A, A B ...), so the machine's drifts hit both alike. Within a run ``opgen bench``
interleaves opgen with its baselines round by round (median of ``--repeats``), every call
after a 192 MiB eviction pass.

A row's ratio is taken in each run against that run's own baseline, and the table gives
the median over the runs:
  * rms_norm_grad: the same-bytes stream's time / opgen's (goal >= 0.95 f32, >= 0.9 bf16);
  * the other backward ops: ATen's time / opgen's (goal >= 1.3).

    python benchmarks/isa_builds.py [--runs 3] [--repeats 7] [--op OP ...] [--off -avx512f]
                                    [--out-dir DIR] [--from-dir DIR]   # re-tabulate saved runs
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

OPS = ("rms_norm_grad", "group_norm_backward", "layer_norm_backward", "batch_norm_backward")
BASELINE = {"rms_norm_grad": "stream (same bytes)"}          # else "aten"
SKIP = ("compile", "eager", "liger", "aten-layernorm", "after-torch", "iree")


def goal(op: str, dtypes: str) -> float:
    if op == "rms_norm_grad":
        return 0.95 if dtypes.startswith("f32") else 0.9
    return 1.3


def host_cpu_name() -> str:
    from opgen.targets import llvm_host
    return llvm_host.probe_host()[0]


def builds(off: str) -> dict:
    """Build label -> the OPGEN_LLVM_TARGET it runs with (None: the probed host)."""
    return {"host": None, f"host{off}": f"{host_cpu_name()},{off}"}


def bench_once(ops, repeats: int, setting: str | None, out: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "OPGEN_LLVM_TARGET"}
    if setting:
        env["OPGEN_LLVM_TARGET"] = setting
    argv = [sys.executable, "-m", "opgen.cli", "bench", "--no-tiny", "--repeats", str(repeats), "--out", str(out)]
    argv += [a for op in ops for a in ("--op", op)] + [a for s in SKIP for a in ("--skip", s)]
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)


def ratios(path: Path) -> dict:
    """(op, dtypes, shape) -> (opgen-numpy ms, opgen-torch ms, ratio numpy, ratio torch)."""
    rows = json.loads(path.read_text())["rows"]
    by_case: dict = {}
    for r in rows:
        by_case.setdefault((r["op"], r["dtypes"], r["shape"]), {})[r["contender"]] = r["ms"]
    result = {}
    for (op, dtypes, shape), times in by_case.items():
        base = times[BASELINE.get(op, "aten")]
        np_ms, pt_ms = times["opgen-numpy"], times["opgen-torch"]
        result[(op, dtypes, shape)] = (np_ms, pt_ms, base / np_ms, base / pt_ms)
    return result


def table(runs_by_build: dict) -> str:
    """Markdown: per case and build, the medians over runs, and whether the goal is met."""
    labels = list(runs_by_build)
    cases = list(ratios(runs_by_build[labels[0]][0]))
    head = "| op | dtypes | shape | goal |" + "".join(
        f" {b}: opgen ms (numpy / torch) | {b}: x baseline (numpy / torch) |" for b in labels) + " met (all builds) |"
    lines = [head, "|" + "---|" * (4 + 2 * len(labels) + 1)]
    for case in cases:
        cells, met = [], True
        for label in labels:
            per_run = [ratios(path)[case] for path in runs_by_build[label]]
            med = [statistics.median(run[i] for run in per_run) for i in range(4)]
            met &= min(med[2], med[3]) >= goal(case[0], case[1])
            cells.append(f" {med[0]:.3f} / {med[1]:.3f} | {med[2]:.2f} / {med[3]:.2f} |")
        lines.append(f"| {case[0]} | {case[1]} | {case[2]} | {goal(case[0], case[1])} |{''.join(cells)} "
                     f"{'yes' if met else '**no**'} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--op", action="append", choices=OPS)
    parser.add_argument("--off", default="-avx512f", help="feature edits of the second build")
    parser.add_argument("--out-dir", type=Path, default=Path("isa-builds"))
    parser.add_argument("--from-dir", type=Path, help="tabulate the runs saved there; measure nothing")
    args = parser.parse_args(argv)
    chosen = builds(args.off)
    folder = args.from_dir or args.out_dir
    folder.mkdir(parents=True, exist_ok=True)
    runs_by_build = {label: [folder / f"{label}-{i}.json" for i in range(args.runs)] for label in chosen}
    if args.from_dir is None:
        for i in range(args.runs):
            order = list(chosen) if i % 2 == 0 else list(reversed(chosen))
            for label in order:
                print(f"run {i + 1}/{args.runs}: {label} ({chosen[label] or 'probed'})", file=sys.stderr, flush=True)
                bench_once(args.op or OPS, args.repeats, chosen[label], runs_by_build[label][i])
    print(table(runs_by_build))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
