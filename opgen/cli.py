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
    write_artifacts(kernel, out_root / target.name / op.name / combo.tag)
    if not target.can_run():
        return Row(op.name, combo.tag, target.name, build_ms, kernel.from_disk, None, "BUILT",
                   "cannot run here: compiled only")
    ratio, where = verify_kernel(kernel, rng)
    verdict = "PASS" if ratio <= 1.0 else "FAIL"
    return Row(op.name, combo.tag, target.name, build_ms, kernel.from_disk, ratio, verdict, where)


def print_table(rows: list[Row], stream=None) -> None:
    stream = stream or sys.stdout
    header = f"{'op':<20} {'dtypes':<10} {'target':<10} {'build ms':>9} {'max err/tol':>12}  verdict"
    print(header, file=stream)
    print("-" * len(header), file=stream)
    for r in rows:
        build = f"{r.build_ms:8.0f}{'c' if r.cached else ' '}"
        ratio = "-" if r.max_ratio is None else f"{r.max_ratio:.3g}"
        line = f"{r.op:<20} {r.dtypes:<10} {r.target:<10} {build:>9} {ratio:>12}  {r.verdict}"
        if r.verdict == "FAIL":
            line += f"  ({r.detail})"
        print(line, file=stream)
    print("(c: loaded from the kernel disk cache; max err/tol <= 1 passes)", file=stream)


def cmd_generate(args) -> int:
    if args.fresh:
        os.environ["OPGEN_DISK_CACHE"] = "0"
    ops = [get_op(n) for n in args.op] if args.op else all_ops()
    targets = [get_target(n) for n in args.target] if args.target else all_targets()
    targets = [t for t in targets if t.can_build()]
    rng = np.random.default_rng(args.seed)
    out_root = Path(args.out)
    rows = [generate_one(op, combo, target, out_root, rng)
            for op in ops for combo in op.combos for target in targets]
    print_table(rows)
    print(f"artifacts: {out_root.resolve()}")
    return 0 if all(r.verdict != "FAIL" for r in rows) else 1


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
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
