"""TVM's auto-scheduler (tvm.s_tir.meta_schedule) on the same workload, recorded comparably.

MetaSchedule needs static shapes ("random variable has been produced once" on symbolic
extents), so the op's TE function is specialised to the problem's kernel shapes. It tunes
with its own builder, runner and xgboost cost model (``cost_model="xgb"``; the ``tune``
extra installs xgboost-cpu, tornado, psutil and cloudpickle, which it needs), then its
best schedule is compiled and measured by *our* runner: the same inputs, the same check
against the float64 reference, the same time_evaluator settings as the template tuner's
candidates. One database record per run: engine ``metaschedule``, no knobs, the trial
budget and the wall time to result. Such records are shown next to the template tuner's
and never chosen by the kernel cache (they are not points of a rule's space, and the
kernel is specialised to one shape).
"""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import tvm
from tvm import te

from opgen.kernels import kernel_symbol
from opgen.tune import database
from opgen.tune.driver import Options, make_record, record_context
from opgen.tune.measure import Built, LocalRunner, Measurement, Workload


def static_function(op, combo, problem, symbol: str):
    """The op's PrimFunc with every size variable bound to the problem's extent."""
    func = te.create_prim_func(op.compute(combo))
    shapes = op.api.kernel_shapes(problem)
    binding = {buf: tvm.tirx.decl_buffer(tuple(tvm.tirx.IntImm("int64", int(d)) for d in shapes[name]), buf.dtype,
                                         buf.name, elem_offset=buf.elem_offset)
               for name, buf in zip(op.kernel_tensors(combo), func.params)}
    return func.specialize(binding).with_attr("global_symbol", symbol)


def _ms_builder(options: Options):
    """MetaSchedule's builder with a patient timeout: its default 30 s killed every build of
    a small kernel on a loaded 2-core machine (each popen worker imports TVM first)."""
    from tvm.s_tir import meta_schedule as ms

    return ms.builder.LocalBuilder(max_workers=max(1, options.jobs), timeout_sec=300)


def _ms_runner(options: Options, runner):
    """MetaSchedule's own runner: local, or the same RPC tracker and key as ours."""
    from tvm.s_tir import meta_schedule as ms

    evaluator = ms.runner.EvaluatorConfig(number=1, repeat=max(1, options.settings.repeat // 2),
                                          min_repeat_ms=int(options.settings.min_repeat_ms))
    if getattr(runner, "key", None) is not None:   # an RpcRunner
        config = ms.runner.RPCConfig(tracker_host=runner.host, tracker_port=runner.port, tracker_key=runner.key,
                                     session_timeout_sec=int(options.settings.timeout_s))
        return ms.runner.RPCRunner(rpc_config=config, evaluator_config=evaluator, max_workers=runner.parallel)
    return ms.runner.LocalRunner(timeout_sec=300, evaluator_config=evaluator)


def _reported_ms(ms_db, mod) -> float | None:
    """MetaSchedule's own timing of its best schedule (its runner, not ours), in ms."""
    try:
        best = ms_db.get_top_k(ms_db.commit_workload(mod), 1)[0]
        return 1e3 * sum(float(t) for t in best.run_secs) / len(best.run_secs)
    except Exception:
        return None


def _search_and_build(mod, target, options: Options, runner, work: str, out: str, symbol: str):
    """MetaSchedule's search, then its best schedule compiled to ``out``; (Built, its own ms)."""
    from tvm.s_tir import meta_schedule as ms

    tvm_target = target.tvm_target()
    ms_db = ms.tune_tir(mod, target=tvm_target, work_dir=work, max_trials_global=options.trials,
                        num_trials_per_iter=min(16, options.trials), cost_model="xgb", seed=options.seed,
                        num_tuning_cores=max(1, options.jobs), builder=_ms_builder(options),
                        runner=_ms_runner(options, runner))
    sch = ms.tir_integration.compile_tir(ms_db, mod, tvm_target)
    if sch is None:
        raise RuntimeError("MetaSchedule found no valid schedule within its trial budget")
    start = time.perf_counter()
    tvm.compile(sch.mod, target=tvm_target).mod.export_library(out)
    return Built({}, out, symbol, (), time.perf_counter() - start), _reported_ms(ms_db, mod)


def tune_metaschedule(op, combo, target, problem, options: Options = Options(), runner=None, db_path=None,
                      workload: Workload | None = None, work_dir: str | None = None):
    """Run MetaSchedule for ``options.trials`` trials; returns (record, seconds to result).

    A MetaSchedule failure (TVM 0.27 raised a ScheduleError out of its search on GroupNorm
    backward) is recorded as a failed run with its message, like a failed candidate.
    """
    start = time.perf_counter()
    db_path = Path(db_path) if db_path is not None else database.user_db_path()
    workload = workload or Workload(op, combo, problem, options.seed)
    runner = runner or LocalRunner(target, options.settings)
    symbol = kernel_symbol(op, combo, "metaschedule")
    mod = tvm.IRModule({"main": static_function(op, combo, problem, symbol)})
    built, reported = Built({}, None), None
    with tempfile.TemporaryDirectory(prefix="opgen-ms-") as scratch:
        work = work_dir or os.path.join(scratch, "ms")
        os.makedirs(work, exist_ok=True)
        try:
            built, reported = _search_and_build(mod, target, options, runner, work,
                                                os.path.join(scratch, f"{symbol}{target.library_suffix}"), symbol)
            measurement = runner.run(workload, built)
        except Exception as err:
            first = str(err).strip().splitlines()[0][:300] if str(err).strip() else ""
            measurement = Measurement(database.FAILED, error=f"MetaSchedule: {type(err).__name__}: {first}",
                                      device=getattr(runner, "device", ""))
    seconds = time.perf_counter() - start
    ctx = record_context(op, combo, target, problem, "metaschedule-evolutionary", options.seed,
                         database.METASCHEDULE)
    record = {**make_record(ctx, 0, {}, measurement, built.build_s, workload),
              "ms_trials": options.trials, "seconds_to_result": round(seconds, 1), "ms_reported_ms": reported}
    database.append(db_path, record)
    return record, seconds
