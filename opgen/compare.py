"""``opgen compare``: opgen next to a hand-written library, judged by CANN's precision standards.

For each op x dtype combo x shape (or each case of a golden dump) both sides get the same
inputs; each output of each side is measured against the float64 reference
(the op's own, opgen.ops.<op>.reference) with opgen.standards, and the row reports, for opgen: the double
thousandths' share and verdict, MERE/MARE and verdict, then the double-benchmark ratios
(opgen's error over the library's) and the level reached, and the time ratio. The exit
status is 1 when any standard fails for opgen (the library's own verdicts are shown, not
judged). opgen always runs through its public Pythonic API on numpy arrays.
"""
from __future__ import annotations

import csv
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from opgen import baselines, config, standards
from opgen.dtypes import dtype_name
from opgen.ops import all_ops, get_op, unknown_op
from opgen.registry import Registry
from opgen.targets import all_targets

@dataclass
class Row:
    """One output of one case: opgen's and the library's errors and the verdicts."""

    op: str
    dtypes: str
    shape: str
    output: str
    library: str
    ours: standards.Errors
    theirs: standards.Errors
    ratios: tuple
    level: str | None
    opgen_ms: float | None = None
    library_ms: float | None = None

    @property
    def passed(self) -> bool:
        return self.ours.dt_pass and self.ours.mm_pass and self.level is not None

    def as_dict(self) -> dict:
        speedup = self.library_ms / self.opgen_ms if self.opgen_ms and self.library_ms else None
        return {"op": self.op, "dtypes": self.dtypes, "shape": self.shape, "output": self.output,
                "library": self.library, **self.ours.as_dict("opgen_"), **self.theirs.as_dict("library_"),
                "ratio_mare": self.ratios[0], "ratio_mere": self.ratios[1], "ratio_rmse": self.ratios[2],
                "level": self.level or "none", "opgen_ms": self.opgen_ms, "library_ms": self.library_ms,
                "speedup": speedup, "passed": self.passed}


def _timed(runs: dict, repeats: int) -> tuple[dict, dict]:
    """Each run's outputs (first call) and median ms over interleaved rounds (opgen.bench.measure)."""
    from opgen.bench import measure

    outputs = {name: run() for name, run in runs.items()}
    if repeats < 1:
        return outputs, {name: None for name in runs}
    return outputs, {name: t * 1e3 for name, t in measure(runs, repeats).items()}


def judge(op_name: str, tag: str, problem, inputs: dict, theirs: dict, library: str,
          ours: dict | None = None, times=(None, None)) -> list[Row]:
    """Rows for one case: both sides' outputs (by kernel name) against the reference."""
    op = get_op(op_name)
    combo = op.combo(tag)
    reference = op.reference(problem, inputs)
    if ours is None:
        ours = baselines.opgen_call(op_name, problem, inputs)()
    rows = []
    for name in op.outputs:
        if name not in theirs or ours.get(name) is None:
            continue
        ref = reference[name]
        data = combo[op.inputs[0]]          # the compute dtype (as opgen.verify reads it)
        mine = standards.errors(baselines.to_float64(ours[name]).reshape(ref.shape), ref, data, combo[name])
        lib_dtype = _dtype_of(theirs[name])
        other = standards.errors(baselines.to_float64(theirs[name]).reshape(ref.shape), ref, data, lib_dtype)
        ratios = standards.benchmark_ratios(mine, other)
        rows.append(Row(op_name, tag, baselines.problem_label(problem), name, library, mine, other, ratios,
                        standards.level(ratios), *times))
    return rows


def _dtype_of(value) -> str:
    if type(value).__module__.startswith("torch"):
        return str(value.dtype).replace("torch.", "")
    return dtype_name(np.asarray(value).dtype)


def against_aten(op_names, tags, shapes, seed: int, repeats: int) -> list[Row]:
    """Compare with ATen on every device torch has here (CPU; CUDA when present)."""
    rng = np.random.default_rng(seed)
    rows = []
    for op_name in op_names:
        with config.using_product(_product_of(op_name)):
            for tag in tags.get(op_name) or _product_tags(op_name):
                for text in shapes.get(op_name) or get_op(op_name).cases.compare:
                    problem = baselines.parse_problem(op_name, text)
                    inputs = baselines.random_inputs(op_name, tag, problem, rng)
                    for device in baselines.torch_devices():
                        tensors = {k: baselines.to_torch(v, device) for k, v in inputs.items()}
                        runs = {"opgen": baselines.opgen_call(op_name, problem, inputs),
                                "lib": _synced(baselines.aten_call(op_name, problem, tensors), device)}
                        out, ms = _timed(runs, repeats)
                        rows += judge(op_name, tag, problem, inputs, out["lib"], f"aten-{device}", out["opgen"],
                                      (ms["opgen"], ms["lib"]))
    return rows


def _product_of(op_name: str) -> str:
    """The product an op is compared on (config.product_for); one line on stderr when it is
    not the current one, so a row's rules are never a surprise."""
    op, product = get_op(op_name), config.product_for(get_op(op_name))
    if product != config.get_product():
        print(f"opgen compare: {op.aclnn_name} is not offered on {config.get_product()}: compared on {product}",
              file=sys.stderr)
    return product


def _product_tags(op_name: str) -> tuple:
    """The dtype combos the current product documents (all of them on Ascend950, for every op
    the 950 offers; the caller chose a product offering the op, see _product_of)."""
    return tuple(c.tag for c in get_op(op_name).products.get(config.get_product(), ()))


def _synced(run, device: str):
    if device == "cpu":
        return run
    torch = baselines.import_torch()

    def synced():
        out = run()
        torch.cuda.synchronize()
        return out
    return synced


def against_dump(directory, repeats: int) -> list[Row]:
    """Compare with a golden dump's outputs (opgen runs on the dump's own inputs)."""
    from opgen import dumps

    library, cases = dumps.read_dump(directory)
    rows = []
    for case in cases:
        out, ms = _timed({"opgen": baselines.opgen_call(case.op, case.problem, case.inputs)}, repeats)
        rows += judge(case.op, case.tag, case.problem, case.inputs, case.outputs, library, out["opgen"],
                      (ms["opgen"], None))
    return rows


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_table(rows: list[Row], stream=None) -> None:
    stream = stream or sys.stdout
    head = (f"{'op':<19} {'dtypes':<9} {'shape':<15} {'out':<6} {'library':<10} {'within %':>9} {'DT':>4} "
            f"{'MERE':>8} {'MARE':>8} {'MM':>4} {'xMARE':>6} {'xMERE':>6} {'xRMSE':>6} {'level':>5} "
            f"{'ms':>7} {'lib ms':>7} {'speedup':>7}")
    print(head, file=stream)
    print("-" * len(head), file=stream)
    for r in rows:
        o = r.ours
        print(f"{r.op:<19} {r.dtypes:<9} {r.shape:<15} {r.output:<6} {r.library[:10]:<10} "
              f"{100 * o.within:9.3f} {'ok' if o.dt_pass else 'FAIL':>4} {o.mere:8.2e} {o.mare:8.2e} "
              f"{'ok' if o.mm_pass else 'FAIL':>4} {r.ratios[0]:6.2f} {r.ratios[1]:6.2f} {r.ratios[2]:6.2f} "
              f"{r.level or 'FAIL':>5} {_fmt(r.opgen_ms, '7.3f')} {_fmt(r.library_ms, '7.3f')} "
              f"{_fmt(r.as_dict()['speedup'], '6.2f')}{'x' if r.as_dict()['speedup'] else ''}", file=stream)
    print("DT: double thousandths (share within, needs 99.9% half / 99.99% f32); MM: MERE < T and MARE < 10T; "
          "xMARE/xMERE/xRMSE: opgen's error over the library's (level L2 <= 2/1.2/1.2, L1 <= 5/1.5/1.5, "
          "L0 <= 10/2/2); ms: median per call; speedup: library ms / opgen ms", file=stream)


def write_rows(rows: list[Row], path) -> None:
    """JSON (a list of row objects) or CSV, by the file's extension."""
    path = Path(path)
    records = [r.as_dict() for r in rows]
    if path.suffix == ".json":
        path.write_text(json.dumps(records, indent=1) + "\n")
        return
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(records[0]) if records else ["op"])
        writer.writeheader()
        writer.writerows(records)


def add_arguments(parser) -> None:
    parser.add_argument("--against", default="aten", help="a comparison source: 'aten' (torch's native kernels), "
                        "a golden dump DIR, or one a target or tool registered (opgen.compare.register_source)")
    parser.add_argument("source_args", nargs="*", metavar="DIR",
                        help="what the source reads: for cann-src, the hicann/ops-nn checkout "
                        "(default $OPGEN_CANN_SRC, else ~/ops-nn)")
    parser.add_argument("--op", action="append", metavar="OP",   # checked in main: one line names an unknown op
                        help="only this op (repeatable)")
    parser.add_argument("--dtypes", action="append", help="only this dtype combo, e.g. bf16-f32 (repeatable)")
    parser.add_argument("--shape", action="append", metavar="[OP=]SHAPE",
                        help="a shape in the op's Problem spelling (fields joined by commas, dims by 'x': "
                        "rms_norm_grad=4096x4096, group_norm_backward=2,320,64x64,32; repeatable); a bare SHAPE "
                        "needs --op and is kept for the named ops it fits")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per side (median)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="also write the rows to FILE.json or FILE.csv")
    parser.add_argument("--omp-wait", choices=("passive", "default", "inherit"), default="passive",
                        help="OMP_WAIT_POLICY while timing (as opgen bench; passive keeps spinning threads "
                             "of one side from slowing the other)")


def to_argv(args) -> list[str]:
    """The command line that reproduces ``args`` (for the rerun in a fresh process)."""
    argv = ["--against", str(args.against), "--repeats", str(args.repeats), "--seed", str(args.seed),
            "--omp-wait", args.omp_wait]
    for flag, values in (("--op", args.op), ("--dtypes", args.dtypes), ("--shape", args.shape)):
        for value in values or ():
            argv += [flag, value]
    return argv + (["--out", str(args.out)] if args.out else []) + list(getattr(args, "source_args", None) or ())


def _for_ops(values, op_names, accept) -> dict:
    """Per op, the given values that ``accept(op, value)`` does not refuse."""
    result = {}
    for op_name in op_names:
        picked = []
        for value in values or ():
            try:
                accept(op_name, value)
                picked.append(value)
            except (KeyError, ValueError):
                pass
        result[op_name] = tuple(picked)
    return result


@dataclass(frozen=True)
class Source:
    """Something opgen's outputs are compared with: ``opgen compare --against NAME``.

    ``rows(args)`` runs the comparison (args: the parsed command line) and returns Rows.
    ``accepts(value)``, when given, claims values that are not the source's name (a golden
    dump is named by its directory). A target or tool adds a source with
    ``register_source`` (e.g. from a module in its ``tools``), with no change here.
    A source whose rows are not ``Row`` (cann-src) prints them with ``print_rows``; they
    still give ``passed`` and ``as_dict()``.
    """

    name: str
    description: str
    rows: Callable
    accepts: Callable | None = None
    print_rows: Callable | None = None   # its own table (default print_table)
    takes_dir: bool = False              # reads the positional DIR after --against NAME


_SOURCES = Registry("comparison source", Source)
register_source = _SOURCES.register
all_sources = _SOURCES.all


def source_for(value: str) -> Source:
    """The source ``--against value`` names: a registered name, else a source claiming it."""
    for source in all_sources():
        if source.name == value:
            return source
    for source in all_sources():
        if source.accepts is not None and source.accepts(value):
            return source
    raise ValueError(f"--against {value!r} is neither a comparison source ({', '.join(s.name for s in all_sources())})"
                     f" nor a golden dump directory")


def _aten_rows(args) -> list[Row]:
    op_names = args.op or [op.name for op in all_ops() if op.cases.compare]
    shapes, tags = _selection(args, op_names)
    return against_aten(op_names, tags, shapes, args.seed, args.repeats)


def against_target(target_name: str, library: str, op_names, tags, shapes, seed: int, repeats: int) -> list[Row]:
    """Compare with another compiler of the same formulas: the same Pythonic call on the
    same numpy arrays, run on ``target_name`` (e.g. iree-cpu) and on opgen's target."""
    rng = np.random.default_rng(seed)
    rows = []
    for op_name in op_names:
        op = get_op(op_name)
        problems = [baselines.parse_problem(op_name, t) for t in shapes.get(op_name) or op.cases.compare] \
            or list(op.problems[:2])
        with config.using_product(_product_of(op_name)):
            for tag in tags.get(op_name) or _product_tags(op_name):
                for problem in problems:
                    inputs = baselines.random_inputs(op_name, tag, problem, rng)
                    runs = {"opgen": baselines.opgen_call(op_name, problem, inputs),
                            "lib": baselines.on_target(baselines.opgen_call(op_name, problem, inputs), target_name)}
                    out, ms = _timed(runs, repeats)
                    rows += judge(op_name, tag, problem, inputs, out["lib"], library, out["opgen"],
                                  (ms["opgen"], ms["lib"]))
    return rows


def _targeted_shapes(values, op_names) -> tuple[dict, list]:
    """``OP=SHAPE`` values by op (each must name a chosen op and parse), and the bare ones.
    A bare shape with no --op is refused: it would apply to every op whose spelling happens
    to read it (4096x4096 reads as a GroupNorm of N=16777216, C=1)."""
    targeted, bare = {}, []
    for value in values or ():
        op_name, equals, text = value.partition("=")
        if not equals:
            bare.append(value)
            continue
        if op_name not in op_names:
            raise ValueError(f"--shape {value}: {op_name!r} is not among the compared ops ({', '.join(op_names)})")
        try:
            baselines.parse_problem(op_name, text)
        except (TypeError, ValueError) as err:
            raise ValueError(f"--shape {value}: {err}") from err
        targeted.setdefault(op_name, []).append(text)
    return targeted, bare


def _selection(args, op_names) -> tuple[dict, dict]:
    """(shapes, dtype tags) per op from --shape/--dtypes; a value no op accepts is an error."""
    targeted, bare = _targeted_shapes(args.shape, op_names)
    if bare and not args.op:
        raise ValueError(f"--shape {bare[0]}: say which op it is for: --shape OP={bare[0]} or --op OP")
    shapes = _for_ops(bare, op_names, baselines.parse_problem)
    shapes = {op: (*targeted.get(op, ()), *picked) for op, picked in shapes.items()}
    tags = _for_ops(args.dtypes, op_names, lambda op, tag: get_op(op).combo(tag))
    for flag, given, picked in (("--shape", bare, shapes), ("--dtypes", args.dtypes, tags)):
        unused = [v for v in given or () if not any(v in p for p in picked.values())]
        if unused:
            raise ValueError(f"{flag} {', '.join(unused)}: not valid for {', '.join(op_names)}")
    return shapes, tags


def _peer_rows(target):
    def rows(args) -> list[Row]:
        if not target.can_run():
            raise ValueError(f"--against {target.peer_name}: target {target.name} cannot run here: "
                             f"{target.missing() or target.run_place()}")
        op_names = args.op or [op.name for op in all_ops()]
        shapes, tags = _selection(args, op_names)
        return against_target(target.name, target.peer_name, op_names, tags, shapes, args.seed, args.repeats)
    return rows


def _is_dump(value: str) -> bool:
    return Path(value).is_dir()


register_source(Source("aten", "torch's native kernels on every device torch has here", _aten_rows))
register_source(Source("dump", "a golden dump directory (manifest.json and .npy/.bin files); give the directory",
                       lambda args: against_dump(args.against, args.repeats), accepts=_is_dump))


def _cann_src_rows(args) -> list:
    """CANN's own kernels from an ops-nn checkout, built on the AscendC emulation
    (opgen.targets.ascend.cann_src); a DIR that is not a checkout is a ValueError."""
    from opgen.targets.ascend import cann_src

    if len(args.source_args or ()) > 1:
        raise ValueError(f"--against cann-src takes one DIR, got {' '.join(args.source_args)}")
    checkout = cann_src.check_checkout(cann_src.checkout_dir((args.source_args or [None])[0]))
    unknown = [op for op in args.op or () if op not in cann_src.KERNELS]
    if unknown:
        raise ValueError(f"--against cann-src: no CANN kernel wired up for {', '.join(unknown)} "
                         f"(have {', '.join(cann_src.KERNELS)})")
    op_names = args.op or list(cann_src.KERNELS)
    shapes, tags = _selection(args, op_names)
    return cann_src.against_cann(checkout, op_names, tags, shapes, args.seed)


def _print_cann_src(rows, stream=None) -> None:
    from opgen.targets.ascend import cann_src

    cann_src.print_rows(rows, stream)


register_source(Source("cann-src", "CANN's hand-written AscendC kernels from an ops-nn checkout DIR, built on opgen's "
                       "emulation with CANN's tiling: errors and modelled times beside opgen's", _cann_src_rows,
                       print_rows=_print_cann_src, takes_dir=True))
for _target in all_targets():   # second compilers of the same formulas (TargetSpec.peer_name)
    if _target.peer_name:
        register_source(Source(_target.peer_name, f"the same formulas compiled by {_target.name}: "
                               f"{_target.description}", _peer_rows(_target)))


def _rows(args) -> tuple[list, Source]:
    source = source_for(args.against)
    if getattr(args, "source_args", None) and not source.takes_dir:
        raise ValueError(f"--against {args.against} takes no DIR (got {' '.join(args.source_args)})")
    return source.rows(args), source


def main(args) -> int:
    """The ``opgen compare`` command: table, optional --out, exit 1 if a standard fails."""
    from opgen.bench import apply_policy

    if args.op and (mistake := unknown_op(args.op)):
        print(f"opgen compare: {mistake}", file=sys.stderr)
        return 2
    rerun = apply_policy(args, "opgen.compare", to_argv(args))
    if rerun is not None:
        return rerun
    from opgen.api import AclnnError
    from opgen.dumps import DumpError

    try:
        rows, source = _rows(args)
    except (baselines.TorchMissing, DumpError, AclnnError, ValueError) as err:
        print(f"opgen compare: {err}", file=sys.stderr)
        return 2
    (source.print_rows or print_table)(rows)
    if args.out:
        write_rows(rows, args.out)
    failed = [r for r in rows if not r.passed]
    print(f"opgen compare: {len(rows) - len(failed)} of {len(rows)} rows meet every standard")
    return 1 if failed or not rows else 0


def cli(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="opgen compare", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return main(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(cli())
