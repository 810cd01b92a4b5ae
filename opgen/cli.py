"""The ``opgen`` command line. ``opgen generate`` is the main job.

    opgen generate [--out opgen-out] [--op NAME ...] [--target NAME ...] [--dtypes TAG ...] [--fresh]
    opgen prove [--op NAME ...]   # the sympy proofs of opgen.derive, and the seed-formula report
    opgen compare [--against aten|DIR] [--op ..] [--dtypes ..] [--shape ..] [--out F.json|F.csv]
    opgen bench [--quick] [--plot F.png] [--out F.json|F.csv]   # see opgen.compare, opgen.bench
    opgen explain OP --shape S [--dtype D] [--target T]   # which kernel a call runs, and why
    opgen targets      # every target: can it build and run here, and why not
    opgen export --target cuda|opencl --out DIR   # device code + launch plans that run without TVM
    opgen tune ...     # see opgen.tune.cli; a target may add commands (Ascend: opgen tiling)
    opgen new-op NAME --like OP [--root DIR]   # a new op's package, tests and spec page (opgen.scaffold)

For every registered op x dtype combo x target that can build here: build the kernel,
verify it against the float64 reference on the op's sample problems (targets that can run
here), write the artifacts under ``--out`` (<target>/<op>/<dtypes>/: the scheduled TIR,
the compiled library, and a target's generated source where it has one), and print one
summary row each. A target that cannot build here gets NOT RUN rows saying why (an
optional target: no nvcc, no OpenCL device that builds opgen's probe kernel); one named
with ``--target`` is refused instead (one line, exit status 2). Exit status 1 when any
row fails. Rows print as they are decided, in op and combo order; the next kernels build
meanwhile, a few at once (``OPGEN_GENERATE_JOBS``, default: the cores this process may use,
at most 4; 1 builds one at a time), and each row's verification inputs come from ``--seed``
and the row's own op, combo and target, so the table does not depend on the jobs. A
target's smoke kernel runs first in a child process (opgen.smoke): a kernel that kills its
process (SIGILL, SIGBUS) fails that target's rows instead of ending ``generate`` with
nothing printed.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import importlib
import os
import sys
import time
import zlib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np

from opgen import kernels, verify
from opgen.environment import positive_setting, usable_cpus
from opgen.ops import all_ops, get_op, unknown_op
from opgen.targets import all_targets, get_target
from opgen.targets.spec import ProblemRefused


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
    target = kernel.target
    if target.library_suffix:
        kernel.export(out_dir / f"kernel{target.library_suffix}")
    source = target.source_of(kernel.module)
    if source is not None:
        name, text = source
        (out_dir / name).write_text(text)
    for rel, text in target.artifacts(kernel.module).items():   # a generated project (ascend-emu: CANN layout)
        (out_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (out_dir / rel).write_text(text)


def verify_kernel(kernel, rng: np.random.Generator) -> tuple[float, str, list]:
    """Worst tolerance ratio over the op's sample problems, where it occurred, and the
    problems the target's own host code refused (ProblemRefused: the product cannot run
    that shape, as its device would refuse it), each as "problem: why"."""
    worst, where, refused = 0.0, "", []
    for problem in kernel.op.problems:
        try:
            comparisons, _ = verify.run_and_compare(kernel, problem, rng)
        except ProblemRefused as err:
            refused.append(f"{problem}: {err}")
            continue
        for c in comparisons:
            if c.ratio > worst or not where:
                worst, where = c.ratio, f"{c.name} @ {problem}"
    return worst, where, refused


def write_op_project(target, op, built: list, out_root: Path) -> None:
    """The target's files of the whole op (Ascend: its CANN project) under <target>/<op>/project/."""
    files = target.op_artifacts(op, built) if built else {}
    for rel, text in files.items():
        path = out_root / target.name / op.name / "project" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@dataclass
class Built:
    """A kernel built, written and compile-checked: its row when that decided it (a compile
    failure, a target that cannot run here), else None and it waits for its verification."""
    op: object
    combo: object
    target: object
    kernel: object
    build_ms: float
    note: str
    row: Row | None = None


def build_one(op, combo, target, out_root: Path) -> Row | Built:
    """The part of a row that runs no kernel: build (or load) it, write its artifacts, run the
    target's compile check. A Row when the kernel was not built (no printer for its
    pattern, a build error), else Built. Safe to run in a thread beside other kernels'
    (``generate_target`` does)."""
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
        return Built(op, combo, target, kernel, build_ms, note,
                     Row(op.name, combo.tag, target.name, build_ms, kernel.from_disk, None, "FAIL", note, note))
    if not (target.can_run() or target.numeric_check()):
        return Built(op, combo, target, kernel, build_ms, note,
                     Row(op.name, combo.tag, target.name, build_ms, kernel.from_disk, None, "BUILT",
                         "cannot run here: compiled only", f"{note}; run: {target.run_place()}".lstrip("; ")))
    return Built(op, combo, target, kernel, build_ms, note)


def finish_one(stage: Row | Built, rng, built: list | None = None) -> Row:
    """The row of what ``build_one`` returned: a built module is appended to ``built`` as
    (combo tag, module) for the op-level artifacts, and a kernel that can run is verified."""
    if isinstance(stage, Row):
        return stage
    op, combo, target, kernel = stage.op, stage.combo, stage.target, stage.kernel
    if built is not None:
        built.append((combo.tag, kernel.module))
    if stage.row is not None:
        return stage.row
    try:
        ratio, where, refused = verify_kernel(kernel, rng)
    except Exception as err:  # noqa: BLE001 -- a row says it; generate goes on with the other kernels
        return Row(op.name, combo.tag, target.name, stage.build_ms, kernel.from_disk, None, "FAIL",
                   f"run: {type(err).__name__}: {err}", stage.note)
    if refused and len(refused) == len(op.problems):
        why = f"the target refused every sample problem ({refused[0]})"
        return Row(op.name, combo.tag, target.name, stage.build_ms, kernel.from_disk, None, "NOT RUN", "",
                   f"{stage.note}; {why}".lstrip("; "))
    verdict = "PASS" if ratio <= 1.0 else "FAIL"
    place = target.run_place()
    note = f"{stage.note}; run: {place}".lstrip("; ") if stage.note or place != "here" else ""
    if refused:
        note = f"{note}; {len(refused)} of {len(op.problems)} sample problems refused by the target ({refused[0]})"
        note = note.lstrip("; ")
    summary = target.run_summary(kernel.module)       # ascend-emu: modelled time, % of the GM bound
    note = f"{note}; {summary}".lstrip("; ") if summary else note
    return Row(op.name, combo.tag, target.name, stage.build_ms, kernel.from_disk, ratio, verdict, where, note)


def generate_one(op, combo, target, out_root: Path, rng, built: list | None = None) -> Row:
    """Build, write and verify one kernel; a built module is appended to ``built`` as
    (combo tag, module) for the op-level artifacts."""
    return finish_one(build_one(op, combo, target, out_root), rng, built)


def compile_check(kernel, out_dir: Path) -> tuple[bool, str]:
    """A target's own compile check (cuda: nvcc per architecture, registers and spills;
    ascend-mlir: bishengir per kernel, how far it got). Each report has ``arch``, ``ok``,
    ``error`` and the ``summary`` printed on the row."""
    reports = kernel.target.compile_check(kernel.module, out_dir)
    if reports is None:
        return True, ""
    archs = "/".join(r.arch for r in reports) if len(reports) <= 3 else f"{len(reports)} kernels"
    failed = [r for r in reports if not r.ok]
    if failed:
        return False, f"compiled {archs}: FAIL ({failed[0].arch}: {failed[0].error})"
    usage = ", ".join(r.summary for r in reports)
    return True, f"compiled {archs}: PASS ({usage})"


HEADER = f"{'op':<20} {'dtypes':<10} {'target':<10} {'build ms':>9} {'max err/tol':>12}  verdict"
FOOTER = "(c: loaded from the kernel disk cache; max err/tol <= 1 passes)"


def format_row(r: Row) -> str:
    build = f"{r.build_ms:8.0f}{'c' if r.cached else ' '}"
    ratio = "-" if r.max_ratio is None else f"{r.max_ratio:.3g}"
    line = f"{r.op:<20} {r.dtypes:<10} {r.target:<10} {build:>9} {ratio:>12}  {r.verdict}"
    if r.verdict == "FAIL" and r.detail != r.note:
        line += f"  ({r.detail})"
    if r.note:
        line += f"  [{r.note}]"
    return line


def print_header(stream=None) -> None:
    """Flushed, like every row: stdout to a file or a pipe is block-buffered, and a run that
    a signal ends (issue 33) would otherwise lose every row it had decided."""
    stream = stream or sys.stdout
    print(HEADER, file=stream)
    print("-" * len(HEADER), file=stream, flush=True)


def print_row(row: Row, stream=None) -> Row:
    """Print one row as soon as it is decided (flushed: see print_header); returns it."""
    print(format_row(row), file=stream or sys.stdout, flush=True)
    return row


def print_footer(stream=None) -> None:
    print(FOOTER, file=stream or sys.stdout, flush=True)


def print_table(rows: list[Row], stream=None) -> None:
    print_header(stream)
    for r in rows:
        print_row(r, stream)
    print_footer(stream)


def usage_error(command: str, message: str) -> int:
    """Bad input on the command line: one line on stderr, exit status 2, no traceback."""
    print(f"opgen {command}: {message}", file=sys.stderr)
    return 2


def known_ops(names) -> list | str:
    """The ops named (all when none), or the one-line complaint about an unknown name."""
    if not names:
        return all_ops()
    return unknown_op(names) or [get_op(n) for n in names]


def unknown_dtypes(ops: list, tags) -> str | None:
    """The one-line complaint about a ``--dtypes`` tag none of ``ops`` has, else None."""
    known = {combo.tag for op in ops for combo in op.combos}
    unknown = [tag for tag in tags or () if tag not in known]
    return f"unknown dtype combo {unknown[0]!r} for {', '.join(op.name for op in ops)}" if unknown else None


def chosen_combos(op, tags) -> list:
    """The op's combos that ``--dtypes`` asked for (every combo when it asked for none)."""
    return [combo for combo in op.combos if not tags or combo.tag in tags]


def cmd_generate(args) -> int:
    if args.fresh:
        os.environ["OPGEN_DISK_CACHE"] = "0"
    ops = known_ops(args.op)
    if isinstance(ops, str):
        return usage_error("generate", ops)
    complaint = unknown_dtypes(ops, args.dtypes)
    if complaint:
        return usage_error("generate", complaint)
    targets = requested_targets(args.target)
    if targets is None:
        return 2
    if args.product is not None:
        from opgen import config
        try:
            config.check_product(args.product)
        except ValueError as err:
            return usage_error("generate", str(err))
        targets = [t.for_product(args.product) for t in targets]
    out_root = Path(args.out)
    print_header()
    rows = []
    for target in targets:
        rows += generate_target(target, ops, out_root, args.seed, args.product, args.dtypes)
    print_footer()
    print(f"artifacts: {out_root.resolve()}")
    return 0 if all(r.verdict != "FAIL" for r in rows) else 1


def generate_target(target, ops: list, out_root: Path, seed: int, product: str | None, tags=None) -> list[Row]:
    """Every row of one target, in the order of ``ops`` and their combos, each printed as soon
    as it and every row before it are decided. A target whose smoke kernel died gets the
    smoke's FAIL row, then its kernel rows unbuilt (see smoke_rows).

    Up to ``generate_jobs()`` kernels build at once (build_one: TVM, then the target's
    compilers, g++ or nvcc or bishengir, as child processes that threads overlap) ahead of
    the row being verified; the verification runs here, one kernel at a time, in row
    order, on inputs drawn from the row's own generator (row_rng), so the table is the same
    whatever the number of jobs. An op's project is written after its last row. ``tags``:
    only those dtype combos (``--dtypes``)."""
    died = smoke_test(target, ops, product)
    if died is not None:
        return smoke_rows(target, ops, died, tags)
    if not target.can_build():
        return [print_row(not_run(op, combo, target)) for op in ops for combo in chosen_combos(op, tags)]
    rows = []
    work = [(op, combo) for op in ops for combo in chosen_combos(op, tags)]
    with contextlib.closing(in_order(lambda item: build_one(*item, target, out_root), work, generate_jobs())) as stages:
        for op in ops:
            built: list = []
            rows += [print_row(finish_one(next(stages), row_rng(seed, op, combo, target), built))
                     for combo in chosen_combos(op, tags)]
            write_op_project(target, op, built, out_root)
    return rows


JOBS_VARIABLE = "OPGEN_GENERATE_JOBS"
MAX_JOBS = 4


def generate_jobs() -> int:
    """How many kernels ``generate`` builds at once: ``OPGEN_GENERATE_JOBS`` when set (1:
    one after another, no threads), else the cores this process may use, at most MAX_JOBS."""
    return positive_setting(JOBS_VARIABLE, int, min(MAX_JOBS, usable_cpus()), "whole number")


def in_order(work, items: list, jobs: int):
    """``work(item)`` for each item, yielded in the items' order; with ``jobs`` > 1 a pool of
    that many threads runs ahead (each result is yielded as soon as it and those before it
    are done). Leaving early (an exception, a signal) cancels what has not started."""
    if jobs <= 1:
        yield from map(work, items)
        return
    pool = concurrent.futures.ThreadPoolExecutor(jobs, thread_name_prefix="opgen-generate")
    try:
        for future in [pool.submit(work, item) for item in items]:
            yield future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def row_rng(seed: int, op, combo, target) -> np.random.Generator:
    """The generator of one row's verification inputs: from ``--seed`` and the row's identity
    alone, so a row's inputs do not depend on which rows ran before it, or in what order."""
    return np.random.default_rng([seed, zlib.crc32(f"{op.name}\0{combo.tag}\0{target.name}".encode())])


def smoke_test(target, ops: list, product: str | None) -> str | None:
    """Why the target's smoke kernel (the first op x combo) killed or hung its child process
    (opgen.smoke); None when it survived, or when nothing of this target runs here."""
    if not (target.can_build() and target.can_run()):
        return None
    from opgen import smoke

    return smoke.smoke_failure(target.name, ops[0].name, ops[0].combos[0].tag, product)


def smoke_rows(target, ops: list, died: str, tags=None) -> list[Row]:
    """The smoke's FAIL row, then one FAIL row per kernel, none of them built or run.

    Not run: what killed the child would kill this process, and with it the table (a
    hung child: this process has no timeout). Not built either: a signal in the child's
    build (the compiler itself) would recur here. FAIL, not NOT RUN: NOT RUN says a target
    that cannot build here is no failure, and these kernels did not survive a run here.
    The op column says ``smoke:<op>`` so that tables read per op count kernels only."""
    op, combo = ops[0], ops[0].combos[0]
    rows = [print_row(Row(f"smoke:{op.name}", combo.tag, target.name, 0.0, False, None, "FAIL", died))]
    reason = f"not run: {died.partition(': ')[0]}"     # what happened; why is on the smoke row
    return rows + [print_row(Row(o.name, c.tag, target.name, 0.0, False, None, "FAIL", reason))
                   for o in ops for c in chosen_combos(o, tags)]


def not_run(op, combo, target) -> Row:
    """The row of a kernel an optional target cannot build here: not a failure, and why."""
    return Row(op.name, combo.tag, target.name, 0.0, False, None, "NOT RUN", "",
               f"cannot build here: {why_not_buildable(target)}")


def requested_targets(names: list | None) -> list | None:
    """The targets to generate for; None (after one line on stderr) when a target named on
    the command line is unknown or cannot build here. Unnamed ones that cannot build are
    kept: their rows say NOT RUN and why."""
    registered = ", ".join(t.name for t in all_targets())
    if not names:
        return list(all_targets())
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
    return target.missing() or "its can_build() is false"


def add_explain_arguments(parser) -> None:
    parser.add_argument("op", help="op name")
    # Required, but checked after the op: an unknown op is named as such, not as a missing --shape.
    parser.add_argument("--shape", help="problem shape (required), as for opgen tune (e.g. 4096x4096, "
                        "8,256,56x56,32)")
    parser.add_argument("--dtype", default=None, help="dtype combo tag (default: the op's first)")
    parser.add_argument("--target", default=None, help="target name (default: opgen's current target)")
    parser.add_argument("--product", default=None, help="product whose rules and hardware apply (default: "
                        "opgen's current product)")


def cmd_explain(args) -> int:
    """Resolve and build the kernel a call of this shape gets, then say how it was chosen."""
    from opgen import config, selection
    from opgen.tune.space import kernel_shapes, parse_problem

    ops = known_ops([args.op])
    if isinstance(ops, str):
        return usage_error("explain", ops)
    op = ops[0]
    if not args.shape:
        return usage_error("explain", f"give --shape, the problem of {op.name} to explain")
    try:
        combo = op.combo(args.dtype) if args.dtype else op.combos[0]
        target = get_target(args.target or config.get_target())
        product = config.check_product(args.product or config.get_product())
        problem = parse_problem(op, args.shape)
    except (KeyError, ValueError) as err:
        return usage_error("explain", str(err.args[0] if isinstance(err, KeyError) else err))
    chosen = selection.select(op, combo, target.for_product(product), kernel_shapes(op, problem, combo))
    print(f"problem    {problem}")
    print(selection.explain(chosen))
    return 0


def simulate_column(target) -> tuple[str, str]:
    """("yes"/"no"/"-", note) for a target's checking simulator (``simulated()``)."""
    simulator = target.simulated()
    if simulator is None:
        return "-", ""
    why = simulator.missing()
    return ("no", f"; simulate: {why}") if why else ("yes", f"; simulate on {simulator.run_place()}")


def cmd_targets(args) -> int:
    """One line per registered target: can it build, run and simulate here, and if not, why."""
    print(f"{'target':<12} {'build':<6} {'run':<6} {'sim':<4} where / why not")
    for target in all_targets():
        builds, runs = target.can_build(), target.can_build() and target.can_run()
        why = target.run_place() if builds else target.missing()
        built_for = target.hardware_summary() if builds else None     # llvm: the CPU and its features
        why = f"{why}; built for {built_for}" if built_for else why
        simulates, sim_note = simulate_column(target)
        print(f"{target.name:<12} {'yes' if builds else 'no':<6} {'yes' if runs else 'no':<6} {simulates:<4} "
              f"{why}{sim_note}{'  (default)' if target.default else ''}")
    return 0


def export_target(name: str):
    """The target ``opgen export`` writes for, or the one-line complaint."""
    registered = ", ".join(t.name for t in all_targets())
    try:
        target = get_target(name)
    except KeyError:
        return f"unknown target {name!r}; registered targets: {registered}"
    why = target.export_missing()
    return f"target {name} cannot export here: {why}" if why else target


def writable_folder(path: Path) -> str | None:
    """None when ``path`` is (or can be made) a folder we can write into, else why not."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".opgen-export-probe"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        return f"cannot write to {path}: {err.strerror or err}"
    return None


def export_request(args):
    """(ops, target, combo tags or None) for ``opgen export``, or the one-line complaint."""
    ops, target = known_ops(args.op), export_target(args.target)
    for answer in (ops, target):
        if isinstance(answer, str):
            return answer
    return (unknown_dtypes(ops, args.dtypes) or writable_folder(Path(args.out)) or bad_bench_problems(ops, args.bench)
            or (ops, target, {c.tag for op in ops for c in chosen_combos(op, args.dtypes)}))


def bench_problems(texts) -> dict:
    """``--bench OP=PROBLEM`` values as {op name: [problem text, ...]}."""
    extra = {}
    for text in texts or ():
        name, _, problem = text.partition("=")
        extra.setdefault(name, []).append(problem)
    return extra


def bad_bench_problems(ops, texts) -> str | None:
    """The complaint about a ``--bench`` value that is not OP=PROBLEM of an exported op, or None."""
    by_name = {op.name: op for op in ops}
    for text in texts or ():
        name, sep, problem = text.partition("=")
        if not sep or name not in by_name:
            return f"--bench {text!r}: OP=PROBLEM with OP one of the exported ops ({', '.join(sorted(by_name))})"
        try:
            by_name[name].parse_problem(problem)
        except ValueError as err:
            return f"--bench {text!r}: {err}"
    return None


def cmd_export(args) -> int:
    """Device code + launch plan + golden cases per op x combo (opgen.export); one row each."""
    from opgen import export

    request = export_request(args)
    if isinstance(request, str):
        return usage_error("export", request)
    ops, target, tags = request
    rng, failed = np.random.default_rng(args.seed), 0
    for op, combo in [(op, combo) for op in ops for combo in op.combos if combo.tag in tags]:
        try:
            paths = export.export_kernel(op, combo, target, Path(args.out), rng, cases=not args.no_cases,
                                         bench=bench_problems(args.bench).get(op.name, ()))
            print(f"{op.name:<22} {combo.tag:<22} {paths[-1].parent}"
                  + "".join(f" +{p.parent.name}" for p in paths[:-1]))
        except Exception as err:   # report, keep going with the other kernels
            failed += 1
            print(f"{op.name:<22} {combo.tag:<22} FAIL: {type(err).__name__}: {err}")
    return 1 if failed else 0


def cmd_prove(args) -> int:
    ops = known_ops(args.op)
    if isinstance(ops, str):
        return usage_error("prove", ops)
    from opgen import derive

    return derive.main(args.op)


def _add_from_module(parser, module_name: str) -> None:
    """Arguments and entry point live in ``module_name`` (add_arguments, main(args))."""
    module = importlib.import_module(module_name)
    module.add_arguments(parser)
    parser.set_defaults(func=module.main)


def opgen_version() -> str:
    try:
        return metadata.version("opgen")
    except metadata.PackageNotFoundError:   # a source tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="opgen", description="operator generator on Apache TVM")
    parser.add_argument("--version", action="version", version=f"opgen {opgen_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="build, verify and write every kernel")
    gen.add_argument("--out", default="opgen-out", help="artifact directory (default ./opgen-out)")
    gen.add_argument("--op", action="append", help="only this op (repeatable)")
    gen.add_argument("--target", action="append", help="only this target (repeatable)")
    gen.add_argument("--dtypes", action="append", help="only this dtype combo tag, e.g. f32-f32 (repeatable)")
    gen.add_argument("--fresh", action="store_true", help="ignore the kernel disk cache (time real builds)")
    gen.add_argument("--seed", type=int, default=0, help="seed of the verification inputs")
    gen.add_argument("--product", default=None, help="product whose rules and hardware apply (ascend-emu: the "
                     "SoC of the CANN project's AddConfig and presets; default: opgen's current product)")
    gen.set_defaults(func=cmd_generate)
    exp = sub.add_parser("export", help="GPU kernels as device code + JSON launch plans that run without TVM "
                         "(opgen.runtime; docs/launch-plan.md)")
    exp.add_argument("--target", required=True, help="a GPU target (cuda: PTX and cubins; opencl: OpenCL C)")
    exp.add_argument("--out", required=True, help="folder to write <target>/<op>/<dtypes>/ under")
    exp.add_argument("--op", action="append", help="only this op (repeatable)")
    exp.add_argument("--dtypes", action="append", help="only this dtype combo tag (repeatable)")
    exp.add_argument("--no-cases", action="store_true", help="skip the golden cases (inputs + float64 reference)")
    exp.add_argument("--seed", type=int, default=0, help="seed of the golden cases' inputs")
    exp.add_argument("--bench", action="append", metavar="OP=PROBLEM",
                     help="one more benchmark problem for bench.json, after the op's own (repeatable)")
    exp.set_defaults(func=cmd_export)
    prove = sub.add_parser("prove", help="prove each op's TE against sympy's derivative of its forward")
    prove.add_argument("--op", action="append", help="only this op's proof and seed formulas (repeatable)")
    prove.set_defaults(func=cmd_prove)
    explain = sub.add_parser("explain", help="which kernel a call of OP with this shape runs: rule, knobs and "
                             "where each came from, cache key, artifact")
    add_explain_arguments(explain)
    explain.set_defaults(func=cmd_explain)
    targets = sub.add_parser("targets", help="every registered target: what it can do here (build, run) and why not")
    targets.set_defaults(func=cmd_targets)
    for target in all_targets():      # commands a target brings (Ascend: opgen tiling)
        for module_name in target.tools:
            module = importlib.import_module(module_name)
            tool = sub.add_parser(module.COMMAND, help=module.HELP)
            module.add_arguments(tool)
            tool.set_defaults(func=module.main)
    compare = sub.add_parser("compare", help="opgen vs a hand-written library (ATen or golden dumps), CANN's standards")
    _add_from_module(compare, "opgen.compare")
    bench = sub.add_parser("bench", help="time opgen's public API against the baselines and the same-run bandwidth")
    _add_from_module(bench, "opgen.bench")
    tune = sub.add_parser("tune", help="search a schedule rule's knobs for one op and shape (or MetaSchedule); --show")
    _add_from_module(tune, "opgen.tune.cli")
    new_op = sub.add_parser("new-op", help="a new op's package, test module and spec page, copied from an existing "
                            "op (--like) with its names replaced")
    _add_from_module(new_op, "opgen.scaffold")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
