"""``opgen tune``: search a rule's knobs for one op and shape, or run MetaSchedule on it.

    opgen tune rms_norm_grad --target llvm --shape 4096x4096 --dtype f32-f32 --trials 32
    opgen tune group_norm_backward --shape 8,256,56x56,32 --engine metaschedule --trials 64
    opgen tune rms_norm_grad --shape 4096x4096 --rpc 127.0.0.1:9190:mykey
    opgen tune --show

A progress line (trials done, best so far, ETA) goes to stderr; the run ends with one
table: the best point, the rule's default and the latest MetaSchedule record of the same
key (ms and GB/s), so the template tuner and TVM's auto-scheduler sit side by side. Times
of a target tuned against a cost model are marked ``(model)`` everywhere they appear.

Exit status: 0 when at least one candidate was measured ok, 1 when none was (every build
failed, every candidate was wrong, the tracker was unreachable), 2 for a malformed command
line, 130 after Ctrl-C (the finished trials are kept), so scripts can tell them apart.
"""
from __future__ import annotations

import importlib.util
import ipaddress
import math
import socket
import statistics
import sys
import time
import warnings
from pathlib import Path

from opgen import config, diskcache, kernels, schedules
from opgen.ops import get_op, unknown_op
from opgen.targets import get_target
from opgen.tune import database

MODEL_MARK = " (model)"


def add_arguments(parser) -> None:
    from opgen.tune.measure import Settings
    from opgen.tune.strategies import STRATEGIES

    parser.add_argument("op", nargs="?", help="a registered op's name (opgen generate lists them)")
    parser.add_argument("--target", help="target name (default: opgen's current target)")
    parser.add_argument("--shape", help="problem shape: 4096x4096 (RmsNormGrad x), 8,256,56x56,32 (GroupNorm N,C,HxW,G)")
    parser.add_argument("--dtype", default="f32-f32", help="dtype combo tag (default f32-f32)")
    parser.add_argument("--product", default=None, help="product whose hardware the target is bound to")
    parser.add_argument("--trials", type=int, default=24, help="measurement budget (default 24)")
    parser.add_argument("--strategy", choices=STRATEGIES, default="model", help="search strategy (default model)")
    parser.add_argument("--engine", choices=("template", "metaschedule"), default="template")
    parser.add_argument("--rpc", metavar="HOST:PORT:KEY",
                        help="measure on the servers of a TVM RPC tracker. WARNING: a TVM RPC server runs any code "
                             "it is sent, without authentication: bind tracker and servers to 127.0.0.1 and reach "
                             "them through SSH tunnels, or use them only on a trusted network (docs/tuning.md)")
    parser.add_argument("--rpc-timeout", metavar="SECONDS", default=None,
                        help="with --rpc: a candidate without a result this long after it was picked up "
                             f"fails, naming its server (default {Settings().timeout_s:g})")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2, help="parallel builders (0: build in this process)")
    parser.add_argument("--patience", type=int, default=8, help="stop after this many trials without a 1%% gain")
    parser.add_argument("--repeat", type=int, default=10, help="timings per candidate (the median counts)")
    parser.add_argument("--confirm", type=int, default=2, help="rounds re-measuring the default and the best")
    parser.add_argument("--db", help="database file (default $OPGEN_TUNE_DB or <cache>/tuning.jsonl)")
    parser.add_argument("--show", action="store_true", help="list the database instead of tuning")


class Progress:
    """One self-rewriting line on a terminal, one line per trial elsewhere."""

    def __init__(self, stream=None, label: str = ""):
        self.stream = stream or sys.stderr
        self.start = time.perf_counter()
        self.label = label
        self.tty = self.stream.isatty()

    def __call__(self, trial, result, budget: int) -> None:
        done = len(result.trials)
        elapsed = time.perf_counter() - self.start
        eta = elapsed / done * (budget - done)
        best = result.best
        best_text = f"{best.measurement.median_ms:.3f} ms{self.label}" if best else "-"
        bar = "#" * (20 * done // budget) + "." * (20 - 20 * done // budget)
        status = trial.measurement.status + (f" ({trial.measurement.error})" if trial.measurement.error else "")
        line = f"[{bar}] {done}/{budget} best {best_text}  ETA {eta:.0f} s  last: {trial.knobs} {status}"
        if self.tty:
            self.stream.write("\r" + line[:160].ljust(160))
            if done == budget:
                self.stream.write("\n")
        else:
            self.stream.write(line[:300] + "\n")
        self.stream.flush()


def _row(name: str, record: dict | None, seconds: float | None = None) -> str:
    if record is None:
        reason = "not run (opgen tune --engine metaschedule)" if name == "metaschedule" else "no result"
        return f"{name:<14} {'-':>10} {'-':>8}  {reason}"
    if record.get("median_ms") is None:
        own = f"; its own timing {record['ms_reported_ms']:.3f} ms" if record.get("ms_reported_ms") else ""
        return f"{name:<14} {'-':>10} {'-':>8}  {record.get('status')}: {record.get('error')}{own}"
    mark = MODEL_MARK if record.get("model") else ""
    gbps = f"{record['gbps']:.1f}" if record.get("gbps") else "-"
    extra = f"  {seconds:.0f} s to result" if seconds is not None else ""
    what = record.get("knobs") if record.get("engine", database.TEMPLATE) == database.TEMPLATE else \
        f"MetaSchedule, {record.get('ms_trials', '?')} trials"
    return f"{name:<14} {record['median_ms']:>10.3f} {gbps:>8}  {what}{mark}{extra}"


def final_table(best: dict | None, default: dict | None, metaschedule: dict | None, timings: dict) -> str:
    lines = [f"{'':<14} {'ms':>10} {'GB/s':>8}  point", "-" * 72,
             _row("best", best, timings.get("best")), _row("default", default),
             _row("metaschedule", metaschedule, timings.get("metaschedule"))]
    if best and default and best.get("median_ms") and default.get("median_ms"):
        lines.append(f"best vs default: {default['median_ms'] / best['median_ms']:.2f}x")
    if any(r and r.get("model") for r in (best, default)):
        lines.append(f"times marked (model) are estimates of the cost model {best.get('model') if best else ''}, "
                     f"not measurements")
    return "\n".join(lines)


def _pooled(records: list[dict], record: dict | None) -> dict | None:
    """``record`` with the median over every ok record of its point (how the database ranks
    points), so the table shows what the kernel cache's choice was based on."""
    if record is None or not database.is_candidate(record):
        return record
    same = [r["median_ms"] for r in records if database.is_candidate(r)
            and database.record_key(r) == database.record_key(record) and r["knobs"] == record["knobs"]]
    median = statistics.median(same)
    gbps = record["gbps"] * record["median_ms"] / median if record.get("gbps") else None
    return {**record, "median_ms": median, "gbps": gbps}


def latest(records: list[dict], key: tuple, engine: str) -> dict | None:
    same = [r for r in records if database.record_key(r) == key and r.get("engine", database.TEMPLATE) == engine]
    return same[-1] if same else None


def resolved_best(op, combo, target, shapes: dict | None, ranked: tuple) -> tuple:
    """(the first of ``ranked`` that is a valid point of today's rule, [(record, why
    refused)] for better-ranked ones): the resolver's own decision, as a call would make
    it, so that neither ``--show`` nor a tuning run's table reports a record no call uses.
    ``shapes`` None: without a concrete shape (the bucket's problem-size checks are not
    applied)."""
    resolution = schedules.resolve(kernels.prim_func(op, combo), target, shapes, ranked)
    return resolution.record, list(resolution.refused)


def valid_best(key: tuple, ranked: tuple) -> tuple:
    """``resolved_best`` of a database key, without a concrete shape (``--show``)."""
    try:
        op = get_op(key[0])
        return resolved_best(op, op.combo(key[1]), get_target(key[2]), None, ranked)
    except (KeyError, schedules.NoScheduleRule) as err:
        return None, [(r, f"no such op, dtype combo, target or rule here ({err})") for r in ranked]


REFUSED_SHOWN = 3


def refused_lines(refused: list) -> list[str]:
    """The table's note on records faster than the best that the resolver refuses: a
    count, then file:line and why for the first few (``--show`` lists them all)."""
    if not refused:
        return []
    lines = [f"{len(refused)} faster record(s) refused (not valid points of today's rule; no call uses them):"]
    lines += [f"  {record.get('_source', '?')}: {why}" for record, why in refused[:REFUSED_SHOWN]]
    if len(refused) > REFUSED_SHOWN:
        lines.append(f"  ... and {len(refused) - REFUSED_SHOWN} more (opgen tune --show lists them)")
    return lines


def show(path) -> int:
    """Every key of the database with its best valid record and the number of trials; lines
    skipped on load and records the resolver refuses are listed with file and line."""
    skipped: list = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # listed below instead
        records = database.load_all([path] if path else None, skipped)
    if not records and not skipped:
        print(f"no tuning records ({path or database.user_db_path()})")
        return 0
    groups: dict = {}
    for r in records:
        groups.setdefault(database.record_key(r), []).append(r)
    print(f"{'op':<20} {'dtypes':<8} {'target':<10} {'bucket':<16} {'trials':>6} {'best ms':>10} {'GB/s':>7}  knobs")
    refused_all = []
    for key, group in groups.items():
        best, refused = valid_best(key, database.ranked_records(group).get(key, ()))
        refused_all += refused
        ms = next((r for r in reversed(group) if r.get("engine") == database.METASCHEDULE), None)
        best_ms = f"{best['median_ms']:.3f}" if best else "-"
        gbps = f"{best['gbps']:.1f}" if best and best.get("gbps") else "-"
        knobs = (best["knobs"] if best else "-")
        mark = MODEL_MARK if best and best.get("model") else ""
        flag = f"  ({len(refused)} faster record(s) refused, see below)" if refused else ""
        ms_text = f"  MetaSchedule {ms['median_ms']:.3f} ms" if ms and ms.get("median_ms") else ""
        print(f"{key[0]:<20} {key[1]:<8} {key[2]:<10} {key[4]:<16} {len(group):>6} {best_ms:>10} {gbps:>7}  "
              f"{knobs}{mark}{ms_text}{flag}")
    marked = [(source, why) for source, why in skipped] + \
        [(r.get("_source", "?"), why) for r, why in refused_all]
    if marked:
        print(f"\n{len(marked)} record(s) not used:")
        for source, why in marked:
            print(f"  SKIPPED {source}: {why}")
    return 0


def _rpc_timeout(text: str | None) -> float | None:
    """``--rpc-timeout`` in seconds (None: the default); ValueError with a one-line message.

    At least 1 s: the servers' session timeouts are whole seconds (MetaSchedule's RPC
    runner takes ``int(timeout_s)``, and 0 there is not a bound)."""
    if text is None:
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds >= 1):
        raise ValueError(f"--rpc-timeout wants a number of seconds >= 1, got {text!r}")
    return seconds


# What tvm.s_tir.meta_schedule imports as it runs, not when it loads: its popen pool
# (cloudpickle), that pool's cleanup of child processes (psutil) and the "xgb" cost model.
METASCHEDULE_NEEDS = ("cloudpickle", "psutil", "xgboost")


def metaschedule_missing() -> str | None:
    """Why ``--engine metaschedule`` cannot run here (one line naming the extra), or None:
    without the ``tune`` extra MetaSchedule would fail only after it had started."""
    absent = [name for name in METASCHEDULE_NEEDS if importlib.util.find_spec(name) is None]
    if not absent:
        return None
    return f"--engine metaschedule needs {', '.join(absent)}: pip install 'opgen[tune]'"


def chosen_db(args) -> Path:
    """The database this command reads and appends to: ``--db``, else the default."""
    return Path(args.db).expanduser() if args.db else database.user_db_path()


def missing_folder(args) -> str | None:
    """Why the database cannot be written (its folder does not exist), or None. The file
    may be created, and the default one's private cache folder; a folder named by ``--db``
    or ``$OPGEN_TUNE_DB`` is not: a typo in a path should not leave folders behind."""
    db = chosen_db(args)
    if db.parent.is_dir() or (not args.db and db.parent == diskcache.cache_dir()):
        return None
    named = f"--db {args.db}" if args.db else f"$OPGEN_TUNE_DB={db}"
    return f"{named}: the folder {db.parent} does not exist (create it first)"


def _check_arguments(args) -> str | None:
    """The first problem with the command line, as one line, or None. Checked before any
    build: a malformed value should cost a message, not a traceback minutes later."""
    if not args.op:
        return "give an op and --shape (or --show)"
    if mistake := unknown_op([args.op]):
        return mistake
    if not args.shape:
        return f"give --shape, the problem of {args.op} to tune"
    if mistake := missing_folder(args):
        return mistake
    for option, least in (("trials", 1), ("repeat", 1), ("jobs", 0), ("confirm", 0), ("patience", 0)):
        if getattr(args, option) < least:
            return f"--{option} wants a number >= {least}, got {getattr(args, option)}"
    if args.engine == "metaschedule" and (why := metaschedule_missing()):
        return why
    try:
        if args.rpc:
            from opgen.tune.rpc import parse_address

            parse_address(args.rpc)
        elif args.rpc_timeout is not None:
            return "--rpc-timeout applies to measurements through --rpc only"
        _rpc_timeout(args.rpc_timeout)
    except ValueError as err:
        return str(err)
    return None


def _is_local(address) -> bool:
    """Loopback or private (RFC 1918, unique-local, link-local): not routed from the
    internet. An IPv4-mapped IPv6 address is judged by its IPv4 address (Python counts the
    whole ::ffff:0:0/96 block as private)."""
    if address.version == 6 and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback or address.is_private


def rpc_exposure(host: str) -> str | None:
    """Why a tracker at ``host`` may be reachable from outside a trusted network (one
    line), or None when every address it names or resolves to is loopback or private.
    A name that does not resolve is reported too: where it will point is unknown."""
    try:
        return None if _is_local(ipaddress.ip_address(host)) else f"{host} is not a loopback or private address"
    except ValueError:   # a name
        pass
    try:
        addresses = {ipaddress.ip_address(info[4][0]) for info in socket.getaddrinfo(host, None)}
    except (OSError, UnicodeError) as err:
        return f"{host} does not resolve ({type(err).__name__}), so it may be any address"
    if not addresses:
        return f"{host} does not resolve, so it may be any address"
    public = sorted(str(a) for a in addresses if not _is_local(a))
    return f"{host} resolves to {', '.join(public)}, not a loopback or private address" if public else None


def _warn_if_exposed(rpc_text: str) -> None:
    """One line on stderr when ``--rpc`` points off the trusted network: TVM's tracker and
    servers authenticate nobody, and the servers run what they are sent."""
    from opgen.tune.rpc import parse_address

    reason = rpc_exposure(parse_address(rpc_text)[0])
    if reason:
        print(f"opgen tune: warning: --rpc {reason}: TVM RPC servers run the code they are sent without "
              f"authentication; use them only on a trusted network or through an SSH tunnel (docs/tuning.md)",
              file=sys.stderr)


def _resolve(args):
    """(op, combo, target, problem) named by the command line; ValueError with one line
    naming the argument (the registries' KeyErrors list what is known)."""
    from opgen.tune.space import parse_problem

    try:
        op = get_op(args.op)
        combo = op.combo(args.dtype)
        target = get_target(args.target or config.get_target())
        target = target.for_product(config.check_product(args.product)) if args.product else target
    except KeyError as err:
        raise ValueError(err.args[0] if err.args else str(err)) from err
    try:
        problem = parse_problem(op, args.shape)
    except (ValueError, TypeError) as err:
        raise ValueError(f"--shape {args.shape!r}: {err}") from err
    return op, combo, target, problem


def _settings(args):
    """The measurement settings of the command line (``--repeat``, ``--rpc-timeout``)."""
    from opgen.tune import Settings

    timeout = _rpc_timeout(args.rpc_timeout)
    return Settings(repeat=args.repeat) if timeout is None else Settings(repeat=args.repeat, timeout_s=timeout)


class TrackerUnreachable(Exception):
    """``--rpc`` names a tracker that cannot be asked for its servers."""


def _rpc_runner(args, target, settings):
    """The RpcRunner of ``--rpc``; TrackerUnreachable (one line) when the tracker cannot
    be reached, instead of a traceback."""
    from opgen.tune.rpc import RpcRunner, parse_address

    host, port, key = parse_address(args.rpc)
    try:
        return RpcRunner(host, port, key, target, settings)
    except (OSError, RuntimeError) as err:
        raise TrackerUnreachable(f"cannot reach the RPC tracker at {host}:{port}: {type(err).__name__}: "
                                 f"{str(err).splitlines()[0] if str(err) else ''}") from err


def exit_status(interrupted: bool, succeeded: int) -> int:
    """130 after an interrupt (the shell's code for SIGINT), 1 when no candidate was
    measured ok, else 0."""
    if interrupted:
        return 130
    return 0 if succeeded else 1


def _run(args, op, combo, target, problem, db):
    """Tune with the chosen engine; returns ({row name: seconds to result}, exit status)."""
    from opgen.tune import Options, tune
    from opgen.tune.measure import Workload

    settings = _settings(args)
    options = Options(trials=args.trials, strategy=args.strategy, seed=args.seed, jobs=args.jobs,
                      patience=args.patience or None, confirm=args.confirm, settings=settings)
    runner = None
    if args.rpc:
        runner = _rpc_runner(args, target, settings)
        print(f"measuring on {runner.parallel} RPC server(s) under key {runner.key!r}")
    workload = Workload(op, combo, problem, args.seed)
    if args.engine == "metaschedule":
        from opgen.tune.metaschedule import tune_metaschedule

        record, seconds = tune_metaschedule(op, combo, target, problem, options, runner, db, workload)
        return {"metaschedule": seconds}, exit_status(False, record["status"] == database.OK)
    label = MODEL_MARK if target.cost_model() is not None else ""
    result = tune(op, combo, target, problem, options, runner, db, Progress(label=label), workload)
    if result.interrupted:
        print(f"interrupted: {len(result.trials)} finished trials are in {db}")
    elif result.stopped_early:
        searched = sum(1 for t in result.trials if not t.record.get("confirm"))
        print(f"stopped early after {searched} trials (no 1% gain in {args.patience})")
    if not result.interrupted and not result.ok():
        print(f"opgen tune: none of the {len(result.trials)} trials was measured ok (their errors are in {db})",
              file=sys.stderr)
    return {"best": result.seconds}, exit_status(result.interrupted, len(result.ok()))


def main(args) -> int:
    if args.show:
        if args.db and (mistake := missing_folder(args)):
            print(f"opgen tune: {mistake}", file=sys.stderr)
            return 2
        return show(args.db)
    mistake = _check_arguments(args)
    if mistake:
        print(f"opgen tune: {mistake}", file=sys.stderr)
        return 2
    if args.rpc:
        _warn_if_exposed(args.rpc)
    from opgen.tune import lookup
    from opgen.tune.space import kernel_shapes, space_for

    try:
        op, combo, target, problem = _resolve(args)
    except ValueError as err:
        print(f"opgen tune: {err}", file=sys.stderr)
        return 2
    db = chosen_db(args)
    space = space_for(op, combo, target, problem)
    bucket = database.bucket_for(op, kernel_shapes(op, problem, combo))
    print(f"tuning {op.name} {combo.tag} on {target.name}, {problem} (bucket {bucket}): {len(space.points)} valid "
          f"points of {type(space.rule).__name__}'s knobs {[k.name for k in space.knobs]} ({space.pruned} pruned); "
          f"engine {args.engine}, strategy {args.strategy}, seed {args.seed}; records -> {db}")
    try:
        timings, status = _run(args, op, combo, target, problem, db)
    except KeyboardInterrupt:   # outside the search loop (inputs, MetaSchedule): nothing to show
        print(f"opgen tune: interrupted; finished records are in {db}", file=sys.stderr)
        return exit_status(True, 0)
    except TrackerUnreachable as err:
        print(f"opgen tune: {err}", file=sys.stderr)
        return exit_status(False, 0)
    records = database.load(db)
    key = database.key_of(op.name, combo.tag, target, bucket)
    best, refused = resolved_best(op, combo, target, kernel_shapes(op, problem, combo),
                                  database.ranked_records(records).get(key, ()))
    default = next((r for r in reversed(records) if database.record_key(r) == key and r.get("knobs") == space.default
                    and r.get("engine", database.TEMPLATE) == database.TEMPLATE), None)
    print(final_table(_pooled(records, best), _pooled(records, default), latest(records, key, database.METASCHEDULE),
                      timings))
    for line in refused_lines(refused):
        print(line)
    lookup.reload()
    return status
