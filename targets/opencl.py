"""OpenCL: the GPU schedules as OpenCL C, launched through pyopencl on any OpenCL device.

The device is chosen by probe (targets/opencl_devices.py): a GPU's driver, else a CPU
runtime (PoCL from the ``opencl`` extra; Intel's from ``opencl-intel``); ``PYOPENCL_CTX``
names one explicitly (the Oclgrind simulator too). Without a device that passes, the target
cannot build here and says why (each rejected device's build log): ``opgen generate``
marks its rows NOT RUN, the tests skip. On a CPU device the GPU schedules get real
numerics on a machine without a GPU.

``TARGET.simulator()`` is the same target on Oclgrind with its data-race detector on and
empty launches made the way TVM's CUDA runtime makes them (a 0 grid or block dimension
raised to 1): every launch's diagnostics (data races, out-of-bounds reads and writes) raise
``SimulatorFindings``. The test suite runs the GPU matrix through it (tests/test_gpu_races.py).

How a kernel runs. TVM 0.27 emits OpenCL C from the scheduled TIR, but its runtime in the
wheel cannot launch OpenCL, so:
  * ``build`` compiles with TVM (source-only module), captures the host code's launch
    sequence (targets/gpu_launch.py) and builds the source with pyopencl;
  * the kernel's ``device()`` is the host (tvm.cpu): the aclnn layer and Kernel hand the
    module host TVM tensors, exactly as on llvm (zero-copy views, workspace slots);
  * the module's callable wraps each tensor's memory in a ``CL_MEM_USE_HOST_PTR`` buffer
    (a CPU device then works on that memory in place; a GPU driver copies), launches
    the device kernels in order with grid/block sizes evaluated from the shapes, and maps
    the buffers back, which makes the results visible in host memory on any device.
Every build first guards each launch in the host code by its sizes
(``gpu_launch.guard_empty_launches``): a kernel whose grid is empty is not launched, on
OpenCL and on CUDA alike.
A device without ``cl_khr_fp16`` (PoCL, Oclgrind) cannot compile ``half`` arithmetic: the
source is rewritten to carry float16 as 16-bit storage through the core ``vload_half`` /
``vstore_half`` (targets/opencl_source.py). bfloat16 needs nothing: TVM already legalizes
it to ushort storage with round-to-nearest-even conversions.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import re
import tempfile
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from opgen import diskcache
from opgen.lazy import tvm
from opgen.targets import opencl_devices as devices
from opgen.targets.spec import WALL_CLOCK, GpuTargetSpec
from opgen.targets.gpu_launch import LaunchPlan, compile_capturing_split, guard_empty_launches, launch_plan
from opgen.targets.opencl_source import (fence_thread0_stores, hoist_local_declarations, needs_half_rewrite,
                                         rewrite_half)

# See schedules/gpu.py: with StorageRewrite on, TVM 0.27 put a per-row scalar into the
# shared buffer of a cross-thread reduction's result, where every thread overwrote it.
BUILD_CONFIG = {"tirx.disable_storage_rewrite": True}

# How a launch with an empty grid or block dimension is made (OpenclTarget.empty_launch).
SKIP_EMPTY = "skip"          # not at all: an OpenCL 1.2 ND-range cannot be empty
CUDA_EMPTY = "cuda"          # as TVM's CUDA runtime does: each 0 dimension raised to 1
                             # (LaunchParamConfig::Extract), so a kernel must guard itself

# Oclgrind's plugins read these when a context is created: its data-race detector, with
# "uniform" writes (several work-items storing the same value) reported too, as they are
# races in CUDA's memory model (opgen's kernels have none: measured over the whole test
# matrix), where its diagnostics go (OCLGRIND_LOG, per context), and how many it prints per
# process (1000 by default, counted over every context: a long test run would go quiet).
SIMULATOR_ENV = {"OCLGRIND_DATA_RACES": "1", "OCLGRIND_UNIFORM_WRITES": "1", "OCLGRIND_MAX_ERRORS": "1000000000"}


class SimulatorFindings(RuntimeError):
    """Oclgrind reported data races or invalid memory accesses during a call."""


@dataclass
class Runtime:
    """The chosen device with its context and queue; ``log``: Oclgrind's diagnostics (the
    simulator only), an open file read on from where the last call stopped."""

    cl: object
    ctx: object
    queue: object
    device: object
    label: str
    log: object = None
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def findings(self) -> list[str]:
        """Oclgrind's messages written since the last call: each starts on an unindented
        line, its details (kernel, entities, source line) are indented."""
        if self.log is None:
            return []
        with self.lock:
            text = self.log.read()
        messages: list[list[str]] = []
        for line in text.splitlines():
            if line.strip() and not line[0].isspace():
                messages.append([line])
            elif line.strip() and messages:
                messages[-1].append(line)
        return ["\n".join(m) for m in messages]


def _simulator_context(cl, device) -> tuple[object, object]:
    """A context on the Oclgrind device with race detection on, and its diagnostics file
    open for reading. Oclgrind reads its settings and opens OCLGRIND_LOG when a context is
    created; the name is removed right after (both ends stay open), so nothing is left in
    the temporary folder when the process ends."""
    handle, log = tempfile.mkstemp(prefix="opgen-oclgrind-", suffix=".log")
    os.close(handle)
    settings = dict(SIMULATOR_ENV, OCLGRIND_LOG=log)
    saved = {name: os.environ.get(name) for name in settings}
    try:
        os.environ.update(settings)
        ctx = cl.Context([device])
        stream = open(log, errors="replace")   # noqa: SIM115 -- read for the context's lifetime
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        os.unlink(log)
    return ctx, stream


@functools.lru_cache(maxsize=None)
def _runtime(simulator: bool = False) -> Runtime | str:
    """The Runtime kernels run on, or why there is none (one line)."""
    try:
        import pyopencl as cl
    except ImportError:
        return 'pyopencl is not installed (pip install -e ".[opencl]")'
    choice = devices.choose(simulator=simulator)
    if choice.device is None:
        if simulator:
            hint = "" if choice.failures else ' (the opencl extra installs it: pip install -e ".[opencl]")'
            return choice.reason("no Oclgrind simulator") + hint
        hint = "" if devices.intel_library().is_file() else \
            ' (the opencl-intel extra adds a CPU runtime: pip install -e ".[opencl-intel]")'
        return choice.reason() + hint
    if simulator:
        ctx, log = _simulator_context(cl, choice.device)
        return Runtime(cl, ctx, cl.CommandQueue(ctx), choice.device, choice.label, log)
    ctx = cl.Context([choice.device])
    return Runtime(cl, ctx, cl.CommandQueue(ctx), choice.device, choice.label)


def reset() -> None:
    """Forget the chosen devices (tests that change what the probe sees). Kernels built
    before keep their context: clear opgen.kernels' memory cache too."""
    _runtime.cache_clear()


def missing(simulator: bool = False) -> str | None:
    """Why this machine cannot build/run OpenCL kernels (on the simulator), or None."""
    runtime = _runtime(simulator)
    return runtime if isinstance(runtime, str) else None


def _binary_cache_dir():
    """Where pyopencl may cache the device binaries it builds (native code on a CPU device):
    under opgen's checked disk cache (opgen.diskcache), else nowhere (False: no caching)."""
    folder = diskcache.cache_dir() / "opencl"
    if diskcache.enabled() and diskcache.trusted_dir(folder, "OpenCL binaries are not cached"):
        return str(folder)
    return False


def _build_with_binary_cache(cl, ctx, source: str):
    """The built program, through pyopencl's binary cache when opgen's cache may hold it.

    A damaged cache entry (a binary cut short or zero-filled) makes pyopencl's cached build
    raise (pyopencl 2026.1: a KeyError from its own fallback, which reads an unset
    environment variable), for this program in every later process. So a cached build that
    fails is tried once more without the cache: if that succeeds the cache was at fault, and
    its folder is set aside (opgen.diskcache.set_aside: one warning; the next build fills a
    new one); if it fails too, the program itself does not build and that error is raised."""
    cache = _binary_cache_dir()
    try:
        return devices.quiet_build(cl.Program(ctx, source), cache_dir=cache)
    except Exception:
        if cache is False:
            raise
    program = devices.quiet_build(cl.Program(ctx, source), cache_dir=False)
    diskcache.set_aside(Path(cache), "pyopencl could not build from its binaries there")
    return program


def _host_array(tensor) -> np.ndarray:
    """A numpy view of a host TVM tensor's memory (bfloat16 as its uint16 bits)."""
    if str(tensor.dtype) == "bfloat16":
        tensor = tensor._create_view(tuple(tensor.shape), "uint16")
    return np.from_dlpack(tensor)


_SCALARS = {"int64": np.int64, "int32": np.int32, "float32": np.float32, "float64": np.float64}


def summarize_findings(messages: list[str]) -> str:
    """Oclgrind's messages counted by kind (addresses dropped), then the first in full."""
    kinds = Counter(re.sub(r"0x[0-9a-fA-F]+", "0x...", m.splitlines()[0]) for m in messages)
    counted = "; ".join(f"{kind} (x{n})" for kind, n in kinds.most_common())
    return f"Oclgrind reported {len(messages)} problem(s): {counted}\n--- first ---\n{messages[0]}"


class OpenclModule:
    """Stands in for a TVM runtime module: ``module[symbol](*host tensors)`` runs the kernels."""

    def __init__(self, source: str, plans: dict, runtime: Runtime, empty_launch: str = SKIP_EMPTY):
        self.source = source
        self.plans = plans
        self.runtime = runtime
        self.empty_launch = empty_launch
        cl, ctx, queue = runtime.cl, runtime.ctx, runtime.queue
        self._cl, self._ctx, self._queue = cl, ctx, queue
        program = _build_with_binary_cache(cl, ctx, source)
        names = {launch.kernel for plan in plans.values() for launch in plan.launches}
        self._kernels = {name: cl.Kernel(program, name) for name in names}
        self._lock = threading.Lock()   # a cl.Kernel's arguments are shared state

    def __getitem__(self, symbol: str):
        plan = self.plans[symbol]
        return lambda *tensors: self._run(plan, *tensors)

    def _buffers(self, arrays: list) -> list:
        """A device buffer per array. OpenCL has no empty buffers: an empty tensor gets a
        NULL pointer on the simulator (any access to it is reported) and a 4-byte stand-in
        elsewhere (a kernel never touches an empty tensor's elements)."""
        cl = self._cl
        flags = cl.mem_flags.READ_WRITE | cl.mem_flags.USE_HOST_PTR
        empty = (lambda: None) if self.runtime.log is not None else (
            lambda: cl.Buffer(self._ctx, cl.mem_flags.READ_WRITE, 4))
        return [cl.Buffer(self._ctx, flags, hostbuf=a) if a.size else empty() for a in arrays]

    def launch_sizes(self, plan: LaunchPlan, launch, env: dict) -> tuple | None:
        """(global size, local size) of one launch, or None when it is not made: the host
        code skips it (its guard), or a dimension is 0 and empty launches are skipped; with
        CUDA_EMPTY a 0 dimension becomes 1, as TVM's CUDA runtime makes it."""
        if not plan.evaluate(launch.condition, env):
            return None
        grid = [plan.evaluate(e, env) for e in launch.grid]
        block = [plan.evaluate(e, env) for e in launch.block]
        if 0 in grid or 0 in block:
            if self.empty_launch != CUDA_EMPTY:
                return None
            grid, block = [max(g, 1) for g in grid], [max(b, 1) for b in block]
        return tuple(g * b for g, b in zip(grid, block)), tuple(block)

    def _run(self, plan: LaunchPlan, *tensors) -> None:
        arrays = [_host_array(t) for t in tensors]
        env = plan.environment([a.shape for a in arrays])
        with self._lock:
            buffers = self._buffers(arrays)
            for launch in plan.launches:
                sizes = self.launch_sizes(plan, launch, env)
                if sizes is None:
                    continue
                args = [buffers[a[1]] if a[0] == "tensor" else _SCALARS[a[1]](plan.evaluate(a[2], env))
                        for a in launch.args]
                kernel = self._kernels[launch.kernel]
                kernel.set_args(*args)
                self._cl.enqueue_nd_range_kernel(self._queue, kernel, *sizes)
            for array, buf in zip(arrays, buffers):
                if array.size:   # map: the device's results become visible in host memory
                    mapped, _ = self._cl.enqueue_map_buffer(self._queue, buf, self._cl.map_flags.READ, 0,
                                                            array.shape, array.dtype)
                    mapped.base.release(self._queue)
            self._queue.finish()
            findings = self.runtime.findings()
        if findings:
            raise SimulatorFindings(summarize_findings(findings))


@dataclass(frozen=True)
class OpenclTarget(GpuTargetSpec):
    """``simulator``: run on Oclgrind with race detection (``simulator()``);
    ``empty_launch``: SKIP_EMPTY or CUDA_EMPTY (how a launch with a 0 dimension is made)."""

    timer: str = WALL_CLOCK           # its modules are not TVM modules: time_evaluator cannot drive them
    simulator: bool = False
    empty_launch: str = SKIP_EMPTY

    def __post_init__(self):
        super().__post_init__()
        if self.empty_launch not in (SKIP_EMPTY, CUDA_EMPTY):
            raise ValueError(f"target {self.name}: unknown empty_launch {self.empty_launch!r}")

    def simulated(self) -> "OpenclTarget":
        """This target on the Oclgrind simulator: data races and invalid accesses raise
        SimulatorFindings, and empty launches are made as TVM's CUDA runtime makes them."""
        if self.simulator:
            return self
        return dataclasses.replace(self, simulator=True, empty_launch=CUDA_EMPTY,
                                   description="GPU schedules as OpenCL C on the Oclgrind simulator "
                                               "(race detection, CUDA-style empty launches)")

    def tvm_target(self):
        return tvm.target.Target({"kind": "opencl", "max_num_threads": self.max_threads},
                                 host={"kind": "llvm"})

    def device(self):
        return tvm.cpu(0)   # the module takes host tensors (see the module docstring)

    def _runtime(self) -> Runtime:
        runtime = _runtime(self.simulator)
        if isinstance(runtime, str):
            raise RuntimeError(f"target {self.name} cannot run here: {runtime}")
        return runtime

    def hardware_key(self) -> dict:
        """The OpenCL platform, device and driver that kernels run on: two runtimes on one
        CPU (PoCL, Intel's) are different hardware for tuning."""
        key = {"tvm": str(self.tvm_target())}
        runtime = _runtime(self.simulator)
        if not isinstance(runtime, str):
            device = runtime.device
            key.update(platform=device.platform.name.strip(), device=device.name.strip(),
                       driver=device.driver_version.strip())
        return key

    def missing(self) -> str | None:
        """Why this machine cannot build/run opencl kernels, or None: building needs a
        device compiler, so no device that passes the probe means neither."""
        return missing(self.simulator)

    def can_build(self) -> bool:
        return self.missing() is None

    def run_place(self) -> str:
        """The OpenCL device kernels run on: platform (device), e.g. "PoCL (pthread-AMD
        EPYC)", "Oclgrind (Oclgrind Simulator)"."""
        runtime = _runtime(self.simulator)
        return f"not here: {runtime}" if isinstance(runtime, str) else runtime.label

    def can_run(self) -> bool:
        return self.missing() is None

    def build(self, mod):
        runtime = self._runtime()
        mod = guard_empty_launches(mod)
        executable, split = compile_capturing_split(mod, self.tvm_target(), BUILD_CONFIG)
        source = fence_thread0_stores(hoist_local_declarations(executable.mod.imports[0].inspect_source()))
        if needs_half_rewrite(source, runtime.device.extensions):
            source = rewrite_half(source)
        plans = {gv.name_hint: launch_plan(split, gv.name_hint) for gv in mod.functions}
        return OpenclModule(source, plans, runtime, self.empty_launch)

    def vector_dtypes(self) -> frozenset | None:
        """Without cl_khr_fp16 (PoCL, Oclgrind), no float16: the vector variant keeps
        float16 rows in ``half`` registers, which the storage rewrite (opencl_source) does
        not carry; float32 and bfloat16 (ushort storage in TVM) need nothing."""
        runtime = _runtime(self.simulator)
        if isinstance(runtime, str) or "cl_khr_fp16" not in runtime.device.extensions.split():
            return frozenset({"float32", "bfloat16"})
        return None

    def export_missing(self) -> str | None:
        return None          # TVM writes OpenCL C without a device

    def export_code(self, mod, out_dir) -> tuple[dict, dict]:
        """kernel.cl, portable: float16 always carried as storage (vload_half/vstore_half,
        core OpenCL), so the source builds on devices with and without cl_khr_fp16."""
        mod = guard_empty_launches(mod)
        executable, split = compile_capturing_split(mod, self.tvm_target(), BUILD_CONFIG)
        source = fence_thread0_stores(hoist_local_declarations(executable.mod.imports[0].inspect_source()))
        if needs_half_rewrite(source, ""):
            source = rewrite_half(source)
        (Path(out_dir) / "kernel.cl").write_text(source)
        return {"language": "opencl-c", "source": "kernel.cl"}, \
            {gv.name_hint: launch_plan(split, gv.name_hint) for gv in mod.functions}

    def source_of(self, module) -> tuple[str, str]:
        return "kernel.cl", module.source


TARGET = OpenclTarget(name="opencl", description="GPU schedules as OpenCL C via pyopencl (the first OpenCL "
                      "device that passes opgen's probe: GPU, CPU runtime, Oclgrind)", library_suffix="")
