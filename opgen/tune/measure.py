"""Building candidates in parallel and measuring them one at a time per device.

Building: a process pool (``spawn``: TVM's threads do not survive ``fork``) schedules and
compiles each point, exports the library to the run's scratch directory and returns a
``Built``: picklable, so the same result feeds the local runner and remote RPC servers.
``jobs=0`` builds in this process (a target whose kernels cannot be exported, or a
test's toy target that the pool's fresh interpreters do not know).

Measuring (``measure_module``, shared by the local and the RPC runner): the candidate runs
once on the workload's inputs with NaN-filled outputs; every output is compared with the
float64 reference (opgen.verify's tolerance table) and a candidate that fails is WRONG
and never timed, so a wrong kernel can never be the fastest. Then ``warmup`` more runs
and TVM's ``time_evaluator`` (``repeat`` timings, each at least ``min_repeat_ms``); the
cost is their median.
"""
from __future__ import annotations

import concurrent.futures as futures
import multiprocessing
import socket
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import tvm

from opgen import kernels, verify
from opgen.dtypes import fill_value, numpy_dtype, ulp
from opgen.ops import get_op
from opgen.targets import TIME_EVALUATOR, WALL_CLOCK
from opgen.tune import database
from opgen.tune.space import kernel_shapes, workload_bytes


@dataclass(frozen=True)
class Settings:
    warmup: int = 1
    repeat: int = 10
    min_repeat_ms: int = 2
    timeout_s: float = 10.0      # one candidate on a remote server: a dead or stopped one costs this long


@dataclass
class Built:
    knobs: dict
    path: str | None
    symbol: str = ""
    scratch: tuple = ()         # (name, dtype, concrete shape)
    build_s: float = 0.0
    error: str | None = None
    kernel: object = field(default=None, repr=False)   # only for in-process builds


@dataclass
class Measurement:
    status: str
    times_ms: list = field(default_factory=list)
    max_err_ratio: float | None = None
    error: str | None = None
    device: str = ""
    model: str | None = None    # the cost model's label when the time is an estimate
    timer: str = TIME_EVALUATOR

    @property
    def median_ms(self) -> float | None:
        return statistics.median(self.times_ms) if self.times_ms else None


class Workload:
    """One problem's inputs, float64 reference and kernel-shaped views, made once per run."""

    def __init__(self, op, combo, problem, seed: int = 0):
        self.op, self.combo, self.problem = op, combo, problem
        self.inputs = op.random_inputs(problem, combo, np.random.default_rng(seed))
        self.reference = op.reference(problem, self.inputs)
        self.shapes = kernel_shapes(op, problem, combo)
        self.bytes = workload_bytes(op, combo, problem)

        self.checker = Checker(op, combo, self.reference)

    def kernel_inputs(self) -> dict:
        """The inputs, contiguous, in the kernel's shapes."""
        arrays = self.op.kernel_args(self.problem, self.inputs)
        return {n: np.ascontiguousarray(np.reshape(arrays[n], self.shapes[n])) for n in self.op.kernel_inputs(self.combo)}

    def nan_outputs(self) -> dict:
        """NaN-filled outputs: an element a kernel forgets to write fails the check."""
        return {n: np.full(self.shapes[n], fill_value(self.combo[n]), dtype=numpy_dtype(self.combo[n]))
                for n in self.op.outputs}

    def kernel_arrays(self) -> dict:
        """Inputs and NaN-filled outputs, contiguous, in the kernel's shapes."""
        return {**self.kernel_inputs(), **self.nan_outputs()}

    def gbps(self, median_ms: float | None) -> float | None:
        return self.bytes / (median_ms * 1e-3) / 1e9 if median_ms else None


class Checker:
    """opgen.verify's rule with its reference-only term computed once per workload.

    ``verify.compare`` recomputes ``atol + rtol*|ref| + ulp_out(ref)/2`` on every call
    (3 s for 16M elements here); a tuning run compares tens of candidates with one
    reference, so the allowed error is kept. Same table, same special-value rule.
    """

    def __init__(self, op, combo, reference: dict):
        rtol, atol = verify.TOLERANCES[combo[op.inputs[0]]]
        self.reference = {n: np.asarray(reference[n], dtype=np.float64) for n in op.outputs}
        self.allowed = {n: atol + rtol * np.abs(r) + 0.5 * ulp(r, combo[n]) for n, r in self.reference.items()}
        self.finite = {n: bool(np.isfinite(r).all()) for n, r in self.reference.items()}

    def ratios(self, outputs: dict) -> dict:
        """Output name -> worst |error| / allowed (inf where a special value differs)."""
        result = {}
        for name, ref in self.reference.items():
            got = np.asarray(outputs[name]).astype(np.float64).reshape(ref.shape)
            if got.size == 0:
                result[name] = 0.0
                continue
            if self.finite[name] and np.isfinite(got).all():   # the common case, in place
                np.subtract(got, ref, out=got)
                np.abs(got, out=got)
                result[name] = float(np.divide(got, self.allowed[name], out=got).max())
                continue
            finite = np.isfinite(ref) & np.isfinite(got)
            special = (np.isnan(got) != np.isnan(ref)) | (np.isinf(ref) & (got != ref)) | (np.isinf(got) & ~np.isinf(ref))
            if special.any():
                result[name] = float("inf")
                continue
            error = np.abs(np.where(finite, got - np.where(finite, ref, 0.0), 0.0))
            result[name] = float((error / self.allowed[name]).max())
        return result


def build_candidate(op_name: str, combo_tag: str, target, knobs: dict, shapes: dict, out_path: str | None,
                    keep_kernel: bool = False) -> Built:
    """Schedule, compile and export one point (runs in a pool worker, or here with
    ``keep_kernel``: the Kernel object is then returned too)."""
    start = time.perf_counter()
    try:
        op = get_op(op_name)
        kernel = kernels.build(op, op.combo(combo_tag), target, knobs=knobs)
        if out_path is not None:
            kernel.export(Path(out_path))
        concrete = kernel.scratch_shapes(shapes)
        scratch = tuple((b.name, b.dtype, concrete[b.name]) for b in kernel.scratch)
        return Built(knobs, out_path, kernel.symbol, scratch, time.perf_counter() - start, None,
                     kernel if keep_kernel or out_path is None else None)
    except Exception as err:  # a point the rule accepted but TVM cannot build: one failed trial
        return Built(knobs, None, build_s=time.perf_counter() - start, error=f"build: {type(err).__name__}: {err}")


class Builder:
    """A process pool of ``jobs`` builders (0: build here, in order)."""

    def __init__(self, workload: Workload, target, out_dir: Path, jobs: int):
        self.workload, self.target, self.out_dir, self.jobs = workload, target, Path(out_dir), jobs
        self.count = 0
        self.pool = None
        if jobs > 0:
            self.pool = futures.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"))

    def _path(self) -> str | None:
        self.count += 1
        if self.jobs == 0 and not self.target.library_suffix:
            return None
        return str(self.out_dir / f"candidate-{self.count}{self.target.library_suffix}")

    def build(self, points: list[dict]) -> list[Built]:
        w = self.workload
        calls = [(w.op.name, w.combo.tag, self.target, p, w.shapes, self._path()) for p in points]
        if self.pool is None:
            return [build_candidate(*c, keep_kernel=True) for c in calls]
        try:
            return list(self.pool.map(build_candidate, *zip(*calls)))
        except futures.process.BrokenProcessPool as err:  # a builder crashed (compiler segfault)
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = futures.ProcessPoolExecutor(self.jobs, mp_context=multiprocessing.get_context("spawn"))
            return [Built(p, None, error=f"build: the builder process died ({err})") for p in points]

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


RPC_SESSION_MASK = 128   # TVM encodes a remote session in the device type (kRPCSessMask)


def _tensors(workload: Workload, built: Built, dev) -> tuple[list, dict]:
    """Arguments on ``dev``: the inputs copied once per workload and device (kernels never
    write them), fresh NaN-filled outputs and scratch for every candidate."""
    remote = dev.dlpack_device_type() >= RPC_SESSION_MASK   # a session's tensors die with it: no cache
    cache = {} if remote else workload.__dict__.setdefault("_device_inputs", {})
    key = (dev.dlpack_device_type(), dev.index)
    if key not in cache:
        cache[key] = {n: tvm.runtime.tensor(a, dev) for n, a in workload.kernel_inputs().items()}
    outputs = {n: tvm.runtime.tensor(a, dev) for n, a in workload.nan_outputs().items()}
    by_name = {**cache[key], **outputs}
    args = [by_name[n] for n in workload.op.kernel_tensors(workload.combo)]
    args += [tvm.runtime.empty(shape, dtype, dev) for _, dtype, shape in built.scratch]
    return args, by_name


def measure_module(module, workload: Workload, built: Built, dev, settings: Settings, device: str,
                   timer: str = TIME_EVALUATOR) -> Measurement:
    """Check one compiled candidate against the reference, then time it (local or remote)
    with the target's ``timer``: TVM's time_evaluator, or the wall clock for modules TVM
    cannot drive (opencl through pyopencl)."""
    op = workload.op
    args, by_name = _tensors(workload, built, dev)
    func = module[built.symbol]
    func(*args)
    dev.sync()
    outputs = {n: by_name[n].numpy().reshape(workload.reference[n].shape) for n in op.outputs}
    ratios = workload.checker.ratios(outputs)
    worst = max(ratios.values(), default=0.0)
    if not worst <= 1.0:
        bad = max(ratios, key=ratios.get)
        return Measurement(database.WRONG, [], worst, f"{bad}: error {ratios[bad]:.3g}x the tolerance", device)
    for _ in range(settings.warmup):
        func(*args)
    if timer == WALL_CLOCK:
        return Measurement(database.OK, _wall_clock_ms(func, args, dev, settings), worst, None, device,
                           timer=WALL_CLOCK)
    evaluator = module.time_evaluator(built.symbol, dev, number=1, repeat=settings.repeat,
                                      min_repeat_ms=int(settings.min_repeat_ms))
    times = [t * 1e3 for t in evaluator(*args).results]
    return Measurement(database.OK, times, worst, None, device)


def _wall_clock_ms(func, args, dev, settings: Settings) -> list[float]:
    """``repeat`` wall-clock timings of one call each, synchronised: for modules that TVM's
    time_evaluator cannot drive. They include the call's host overhead (recorded as
    ``timer: wall_clock`` so they are not compared with device timings unawares)."""
    times = []
    for _ in range(settings.repeat):
        start = time.perf_counter()
        func(*args)
        dev.sync()
        times.append((time.perf_counter() - start) * 1e3)
    return times


class LocalRunner:
    """Measures on this machine's device of the target, one candidate at a time."""

    def __init__(self, target, settings: Settings = Settings()):
        self.target, self.settings = target, settings
        self.device = f"local:{socket.gethostname()}"

    def run_all(self, workload: Workload, builds: list[Built]):
        for built in builds:
            yield built, self.run(workload, built)

    def run(self, workload: Workload, built: Built) -> Measurement:
        if built.error:
            return Measurement(database.FAILED, error=built.error, device=self.device)
        try:
            module = built.kernel.module if built.kernel is not None else tvm.runtime.load_module(built.path)
            return measure_module(module, workload, built, self.target.device(), self.settings, self.device,
                                  self.target.timer)
        except Exception as err:
            return Measurement(database.FAILED, error=f"run: {type(err).__name__}: {err}", device=self.device)
