"""The ``opgen`` command line. ``opgen generate`` is the main job.

    opgen generate [--out opgen-out] [--op NAME ...] [--target NAME ...] [--fresh]
    opgen prove        # the sympy proofs of opgen.derive, and the seed-formula report
    opgen compare [--against aten|DIR] [--op ..] [--dtypes ..] [--shape ..] [--out F.json|F.csv]
    opgen bench [--quick] [--plot F.png] [--out F.json|F.csv]   # see opgen.compare, opgen.bench

For every registered op x dtype combo x target that can build here: build the kernel,
verify it against the float64 reference on the op's sample problems (targets that can run
here), write the artifacts under ``--out`` (<target>/<op>/<dtypes>/: the scheduled TIR,
the compiled library, and a target's generated source where it has one), and print one
summary row each. Exit status 1 when any row fails.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from opgen import kernels, verify
from opgen.ops import all_ops, get_op
from opgen.targets import all_targets, get_target


@dataclass
class Row:
    op: str
    dtypes: str
    target: str
    build_ms: float
    cached: bool
    max_ratio: float | None    # worst |err| / allowed over all outputs and problems
    verdict: str
    detail: str = ""
    note: str = ""             # printed on every row: a compile check, where the kernel ran


def write_artifacts(kernel, out_dir: Path) -> None:
    """TIR text, the compiled library and any generated source of one kernel."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "kernel.tir.py").write_text(kernel.tir)
    if kernel.target.library_suffix:
        kernel.export(out_dir / f"kernel{kernel.target.library_suffix}")
    source = getattr(kernel.target, "source_of", None)
    if source is not None:
        name, text = source(kernel.module)
        (out_dir / name).write_text(text)
    for rel, text in getattr(kernel.module, "files", {}).items():   # a generated project (ascend-emu: CANN layout)
        (out_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (out_dir / rel).write_text(text)


def verify_kernel(kernel, rng: np.random.Generator) -> tuple[float, str]:
    """Worst tolerance ratio over the op's sample problems, and where it occurred."""
    worst, where = 0.0, ""
    for problem in kernel.op.problems:
        comparisons, _ = verify.run_and_compare(kernel, problem, rng)
        for c in comparisons:
            if c.ratio > worst or not where:
                worst, where = c.ratio, f"{c.name} @ {problem}"
    return worst, where


def generate_one(op, combo, target, out_root: Path, rng) -> Row:
    start = time.perf_counter()
    try:
        kernel = kernels.get_kernel(op, combo, target)
    except NotImplementedError as err:  # the target has no code printer for this op's pattern yet
        return Row(op.name, combo.tag, target.name, (time.perf_counter() - start) * 1e3, False, None,
                   "NOT EMITTED", str(err))
    except Exception as err:  # report, keep going with the other kernels
        return Row(op.name, combo.tag, target.name, (time.perf_counter() - start) * 1e3, False, None,
                   "FAIL", f"build: {type(err).__name__}: {err}")
    build_ms = kernel.build_seconds * 1e3
    out_dir = out_root / target.name / op.name / combo.tag
    write_artifacts(kernel, out_dir)
    compiled, note = compile_check(kernel, out_dir)
    if not compiled:
        return Row(op.name, combo.tag, target.name, build_ms, kernel.from_disk, None, "FAIL", note, note)
    if not target.can_run():
        return Row(op.name, combo.tag, target.name, build_ms, kernel.from_disk, None, "BUILT",
                   "cannot run here: compiled only", f"{note}; run: {run_place(target)}".lstrip("; "))
    ratio, where = verify_kernel(kernel, rng)
    verdict = "PASS" if ratio <= 1.0 else "FAIL"
    note = f"{note}; run: {run_place(target)}".lstrip("; ") if note or hasattr(target, "run_place") else ""
    return Row(op.name, combo.tag, target.name, build_ms, kernel.from_disk, ratio, verdict, where, note)


def compile_check(kernel, out_dir: Path) -> tuple[bool, str]:
    """A target's own compile check (cuda: nvcc per architecture, registers and spills)."""
    check = getattr(kernel.target, "compile_check", None)
    if check is None:
        return True, ""
    reports = check(kernel.module, out_dir)
    archs = "/".join(r.arch for r in reports)
    failed = [r for r in reports if not r.ok]
    if failed:
        return False, f"compiled {archs}: FAIL ({failed[0].arch}: {failed[0].error})"
    usage = ", ".join(f"{r.arch} {r.max_registers} regs {r.spill_bytes} B spilled" for r in reports)
    return True, f"compiled {archs}: PASS ({usage})"


def run_place(target) -> str:
    """Where a target's kernels ran (or why they did not)."""
    place = getattr(target, "run_place", None)
    return place() if place is not None else ("here" if target.can_run() else "not here")


def print_table(rows: list[Row], stream=None) -> None:
    stream = stream or sys.stdout
    header = f"{'op':<20} {'dtypes':<10} {'target':<10} {'build ms':>9} {'max err/tol':>12}  verdict"
    print(header, file=stream)
    print("-" * len(header), file=stream)
    for r in rows:
        build = f"{r.build_ms:8.0f}{'c' if r.cached else ' '}"
        ratio = "-" if r.max_ratio is None else f"{r.max_ratio:.3g}"
        line = f"{r.op:<20} {r.dtypes:<10} {r.target:<10} {build:>9} {ratio:>12}  {r.verdict}"
        if r.verdict == "FAIL" and r.detail != r.note:
            line += f"  ({r.detail})"
        if r.note:
            line += f"  [{r.note}]"
        print(line, file=stream)
    print("(c: loaded from the kernel disk cache; max err/tol <= 1 passes)", file=stream)


def cmd_generate(args) -> int:
    if args.fresh:
        os.environ["OPGEN_DISK_CACHE"] = "0"
    ops = [get_op(n) for n in args.op] if args.op else all_ops()
    targets = requested_targets(args.target)
    if targets is None:
        return 2
    rng = np.random.default_rng(args.seed)
    out_root = Path(args.out)
    rows = [generate_one(op, combo, target, out_root, rng)
            for op in ops for combo in op.combos for target in targets]
    print_table(rows)
    print(f"artifacts: {out_root.resolve()}")
    return 0 if all(r.verdict != "FAIL" for r in rows) else 1


def requested_targets(names: list | None) -> list | None:
    """The targets to generate for; None (after one line on stderr) when a target named on
    the command line is unknown or cannot build here. Unnamed ones that cannot build are
    skipped with a note."""
    registered = ", ".join(t.name for t in all_targets())
    if not names:
        usable = [t for t in all_targets() if t.can_build()]
        for t in all_targets():
            if not t.can_build():
                print(f"note: skipping target {t.name}: {why_not_buildable(t)}", file=sys.stderr)
        return usable
    chosen = []
    for name in names:
        try:
            target = get_target(name)
        except KeyError:
            print(f"opgen generate: unknown target {name!r}; registered targets: {registered}", file=sys.stderr)
            return None
        if not target.can_build():
            print(f"opgen generate: target {name} cannot build here: {why_not_buildable(target)}; "
                  f"registered targets: {registered}", file=sys.stderr)
            return None
        chosen.append(target)
    return chosen


def why_not_buildable(target) -> str:
    missing = getattr(target, "missing", None)
    return (missing() if missing is not None else None) or "its can_build() is false"


def cmd_prove(args) -> int:
    from opgen import derive

    return derive.main()


def _add_from_module(parser, module_name: str) -> None:
    """Arguments and entry point live in ``module_name`` (add_arguments, main(args))."""
    import importlib

    module = importlib.import_module(module_name)
    module.add_arguments(parser)
    parser.set_defaults(func=module.main)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="opgen", description="operator generator on Apache TVM")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="build, verify and write every kernel")
    gen.add_argument("--out", default="opgen-out", help="artifact directory (default ./opgen-out)")
    gen.add_argument("--op", action="append", help="only this op (repeatable)")
    gen.add_argument("--target", action="append", help="only this target (repeatable)")
    gen.add_argument("--fresh", action="store_true", help="ignore the kernel disk cache (time real builds)")
    gen.add_argument("--seed", type=int, default=0, help="seed of the verification inputs")
    gen.set_defaults(func=cmd_generate)
    prove = sub.add_parser("prove", help="prove each op's TE against sympy's derivative of its forward")
    prove.set_defaults(func=cmd_prove)
    from opgen import tiling_report
    tiling = sub.add_parser("tiling", help="opgen's Ascend tiling next to CANN's formulas, on ops-nn's test shapes")
    tiling_report.add_arguments(tiling)
    tiling.set_defaults(func=tiling_report.main)
    compare = sub.add_parser("compare", help="opgen vs a hand-written library (ATen or golden dumps), CANN's standards")
    _add_from_module(compare, "opgen.compare")
    bench = sub.add_parser("bench", help="time opgen's public API against the baselines and the same-run bandwidth")
    _add_from_module(bench, "opgen.bench")
    tune = sub.add_parser("tune", help="search a schedule rule's knobs for one op and shape (or MetaSchedule); --show")
    _add_from_module(tune, "opgen.tune.cli")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
