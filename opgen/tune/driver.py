"""The tuning loop: propose a batch, build it in parallel, measure it, record every trial.

Each measured candidate is appended to the database as soon as its measurement ends, so
Ctrl-C (or a crash) loses at most the batch in flight. The default point is the first
trial, measured alone before any other point: a runner yields its results as they finish
(RPC: whichever server is done first), so inside a batch the default could land anywhere.
The best of a run is never slower than the untuned kernel. Early stopping: the run ends
after ``patience`` consecutive trials that did not improve the best by ``min_gain``.
"""
from __future__ import annotations

import datetime
import math
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import tvm

from opgen.tune import database, strategies
from opgen.tune import lookup
from opgen.tune.costmodel import ModelRunner
from opgen.tune.measure import Builder, LocalRunner, Measurement, Settings, Workload
from opgen.tune.space import freeze, kernel_shapes, space_for


def opgen_version() -> str:
    try:
        return metadata.version("opgen")
    except metadata.PackageNotFoundError:
        return "unknown"


@dataclass
class Trial:
    index: int
    knobs: dict
    measurement: Measurement
    build_s: float
    record: dict


@dataclass
class TuneResult:
    records_path: Path
    trials: list = field(default_factory=list)
    space_size: int = 0
    pruned: int = 0
    seconds: float = 0.0
    interrupted: bool = False
    stopped_early: bool = False
    workload_bytes: int = 0
    default_knobs: dict | None = None    # the space's default point

    def ok(self) -> list:
        return [t for t in self.trials if t.measurement.status == database.OK]

    def cost_of(self, knobs: dict) -> float:
        """A point's cost: the median of its measured medians (inf if never measured ok)."""
        times = [t.measurement.median_ms for t in self.ok() if t.knobs == knobs]
        return statistics.median(times) if times else math.inf

    @property
    def best(self) -> Trial | None:
        """The latest trial of the point with the lowest cost (see ``cost_of``)."""
        ok = self.ok()
        if not ok:
            return None
        best_knobs = min((t.knobs for t in ok), key=self.cost_of)
        return [t for t in ok if t.knobs == best_knobs][-1]

    @property
    def default(self) -> Trial | None:
        """The search's trial of the space's default point, found by its knobs: which
        trial it is depends on the order a runner reports results in, not on its index."""
        return next((t for t in self.trials if t.knobs == self.default_knobs), None)


def make_record(ctx: dict, index: int, knobs: dict, m: Measurement, build_s: float, workload: Workload) -> dict:
    """One database line for one measured candidate."""
    return {
        **ctx, "trial": index, "knobs": knobs, "status": m.status, "error": m.error,
        "times_ms": [round(t, 6) for t in m.times_ms], "median_ms": m.median_ms,
        "gbps": workload.gbps(m.median_ms), "max_err_ratio": m.max_err_ratio, "device": m.device,
        "model": m.model, "timer": m.timer if m.status == database.OK else None, "build_s": round(build_s, 3),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def record_context(op, combo, target, problem, strategy: str, seed: int, engine: str) -> dict:
    return {
        "op": op.name, "combo": combo.tag, "target": target.name, "hardware": database.hardware_of(target),
        "bucket": database.bucket_for(op, kernel_shapes(op, problem, combo)), "problem": str(problem),
        "engine": engine, "strategy": strategy, "seed": seed, "run": uuid.uuid4().hex[:12],
        "opgen_version": opgen_version(), "tvm_version": tvm.__version__,
    }


@dataclass
class Options:
    trials: int = 24
    strategy: str = "model"
    seed: int = 0
    jobs: int = 2
    batch: int = 4
    patience: int | None = 8
    min_gain: float = 0.01
    confirm: int = 2          # rounds re-measuring the default and the best, alternated
    settings: Settings = Settings()


def tune(op, combo, target, problem, options: Options = Options(), runner=None, db_path=None,
         progress=None, workload: Workload | None = None) -> TuneResult:
    """Search the matched rule's knob space for ``problem``; returns every trial.

    ``runner``: LocalRunner (default), an RpcRunner, or a cost-model runner; ``progress``:
    called after each trial with (trial, result, budget).
    """
    start = time.perf_counter()
    db_path = Path(db_path) if db_path is not None else database.user_db_path()
    space = space_for(op, combo, target, problem)
    workload = workload or Workload(op, combo, problem, options.seed)
    runner = runner or _default_runner(target, options.settings)
    strategy = strategies.make(options.strategy, space, options.seed)
    ctx = record_context(op, combo, target, problem, options.strategy, options.seed, database.TEMPLATE)
    result = TuneResult(db_path, [], len(space.points), space.pruned, 0.0, workload_bytes=workload.bytes,
                        default_knobs=space.default)
    budget = min(options.trials, len(space.points))
    measured: dict = {}
    with tempfile.TemporaryDirectory(prefix="opgen-tune-") as scratch:
        # A model-tuned candidate is checked here (Ascend: in the emulation): build in-process.
        jobs = 0 if not target.library_suffix or isinstance(runner, ModelRunner) else options.jobs
        builder = Builder(workload, target, Path(scratch), jobs)
        built: dict = {}
        try:
            _loop(strategy, space.default, builder, runner, workload, options, ctx, db_path, result, measured, budget,
                  progress, built)
            _confirm(built, runner, workload, options, ctx, db_path, result)
        except KeyboardInterrupt:
            result.interrupted = True
        finally:
            builder.close()
    result.seconds = time.perf_counter() - start
    if db_path == database.user_db_path():
        lookup.reload()   # this process's kernel cache sees the new records from now on
    return result


def _default_runner(target, settings: Settings):
    return ModelRunner(target, settings) if target.cost_model() is not None else LocalRunner(target, settings)


def _record(ctx, db_path, result, built, m, workload) -> Trial:
    record = make_record(ctx, len(result.trials), built.knobs, m, built.build_s, workload)
    database.append(db_path, record)
    result.trials.append(Trial(len(result.trials), built.knobs, m, built.build_s, record))
    return result.trials[-1]


def _confirm(built: dict, runner, workload, options, ctx, db_path, result) -> None:
    """Measure the default and the best again, alternated, so that the winner is not a
    lucky timing on a noisy machine (the database ranks a point by the median of its
    records). Not for cost models: their estimates do not vary.

    One candidate per ``run_all`` call: a parallel runner (RPC) would otherwise time the
    two at once, on two servers of one machine competing for it, and report them in
    either order; alternated means default, best, default, best."""
    best, default = result.best, result.default
    if isinstance(runner, ModelRunner) or best is None or default is None or best.knobs == default.knobs:
        return
    pair = [built[freeze(default.knobs)], built[freeze(best.knobs)]]
    for _ in range(options.confirm):
        for candidate in pair:
            for b, m in runner.run_all(workload, [candidate]):
                _record({**ctx, "confirm": True}, db_path, result, b, m, workload)


def _next_batch(strategy, default: dict, n: int, measured: dict) -> list[dict]:
    """The default point alone until it is measured, then the strategy's proposals.

    Alone, because runners yield results as they finish: in a batch of several, any point
    could be recorded first, and the default must be trial 0 whatever the runner."""
    if freeze(default) not in measured:
        return [default]
    return strategy.next_batch(n, measured)


def _loop(strategy, default, builder, runner, workload, options, ctx, db_path, result, measured, budget, progress,
          built):
    best, since_gain = math.inf, 0
    while len(measured) < budget:
        batch = _next_batch(strategy, default, min(options.batch, budget - len(measured)), measured)
        if not batch:
            return
        for point in batch:
            measured[freeze(point)] = math.inf  # reserved: never proposed again
        for b, m in runner.run_all(workload, builder.build(batch)):
            cost = m.median_ms if m.status == database.OK else math.inf
            measured[freeze(b.knobs)] = cost
            built[freeze(b.knobs)] = b
            _record(ctx, db_path, result, b, m, workload)
            since_gain = 0 if cost < best * (1 - options.min_gain) else since_gain + 1
            best = min(best, cost)
            if progress is not None:
                progress(result.trials[-1], result, budget)
        if options.patience and since_gain >= options.patience and len(measured) < budget:
            result.stopped_early = True
            return
