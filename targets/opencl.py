"""OpenCL: the GPU schedules as OpenCL C, launched through pyopencl on any OpenCL device.

Here that device is PoCL's CPU device (``pip install "pyopencl[pocl]"``, the ``opencl``
extra), which gives real numerics of the GPU schedules on a machine without a GPU; on a
machine with a GPU's OpenCL driver the same code runs there (``PYOPENCL_CTX`` picks the
device, as in pyopencl).

How a kernel runs. TVM 0.27 emits OpenCL C from the scheduled TIR, but its runtime in the
wheel cannot launch OpenCL, so:
  * ``build`` compiles with TVM (source-only module), captures the host code's launch
    sequence (targets/gpu_launch.py) and builds the source with pyopencl;
  * the kernel's ``device()`` is the host (tvm.cpu): the aclnn layer and Kernel hand the
    module host TVM tensors, exactly as on llvm (zero-copy views, workspace slots);
  * the module's callable wraps each tensor's memory in a ``CL_MEM_USE_HOST_PTR`` buffer
    (PoCL's CPU device then works on that memory in place; a GPU driver copies), launches
    the device kernels in order with grid/block sizes evaluated from the shapes, and maps
    the buffers back, which makes the results visible in host memory on any device.
A device without ``cl_khr_fp16`` (PoCL here) cannot compile ``half`` arithmetic: the
source is rewritten to carry float16 as 16-bit storage through the core ``vload_half`` /
``vstore_half`` (targets/opencl_source.py). bfloat16 needs nothing: TVM already legalizes
it to ushort storage with round-to-nearest-even conversions.
"""
from __future__ import annotations

import functools
import threading
from dataclasses import dataclass

import numpy as np
import tvm

from opgen import diskcache
from opgen.targets.spec import WALL_CLOCK, GpuTargetSpec
from opgen.targets.gpu_launch import LaunchPlan, compile_capturing_split, launch_plan
from opgen.targets.opencl_source import (fence_thread0_stores, hoist_local_declarations, needs_half_rewrite,
                                         rewrite_half)

# See schedules/gpu.py: with StorageRewrite on, TVM 0.27 put a per-row scalar into the
# shared buffer of a cross-thread reduction's result, where every thread overwrote it.
BUILD_CONFIG = {"tirx.disable_storage_rewrite": True}


@functools.lru_cache(maxsize=None)
def _cl():
    """pyopencl, the context and a queue; None when pyopencl or a device is missing."""
    try:
        import pyopencl as cl
        ctx = cl.create_some_context(interactive=False)
        return cl, ctx, cl.CommandQueue(ctx)
    except Exception:  # no pyopencl, no ICD, no device: the target cannot build here
        return None


def missing() -> str | None:
    """Why this machine cannot build/run OpenCL kernels, or None."""
    try:
        import pyopencl  # noqa: F401
    except ImportError:
        return 'pyopencl is not installed (pip install -e ".[opencl]")'
    return None if _cl() is not None else "pyopencl found no OpenCL device"


def _binary_cache_dir():
    """Where pyopencl may cache the device binaries it builds (native code on a CPU device):
    under opgen's checked disk cache (opgen.diskcache), else nowhere (False: no caching)."""
    folder = diskcache.cache_dir() / "opencl"
    if diskcache.enabled() and diskcache.trusted_dir(folder, "OpenCL binaries are not cached"):
        return str(folder)
    return False


def _host_array(tensor) -> np.ndarray:
    """A numpy view of a host TVM tensor's memory (bfloat16 as its uint16 bits)."""
    if str(tensor.dtype) == "bfloat16":
        tensor = tensor._create_view(tuple(tensor.shape), "uint16")
    return np.from_dlpack(tensor)


_SCALARS = {"int64": np.int64, "int32": np.int32, "float32": np.float32, "float64": np.float64}


class OpenclModule:
    """Stands in for a TVM runtime module: ``module[symbol](*host tensors)`` runs the kernels."""

    def __init__(self, source: str, plans: dict):
        self.source = source
        self.plans = plans
        cl, ctx, queue = _cl()
        self._cl, self._ctx, self._queue = cl, ctx, queue
        program = cl.Program(ctx, source).build(cache_dir=_binary_cache_dir())
        names = {launch.kernel for plan in plans.values() for launch in plan.launches}
        self._kernels = {name: cl.Kernel(program, name) for name in names}
        self._lock = threading.Lock()   # a cl.Kernel's arguments are shared state

    def __getitem__(self, symbol: str):
        plan = self.plans[symbol]
        return lambda *tensors: self._run(plan, *tensors)

    def _buffers(self, arrays: list) -> list:
        cl = self._cl
        flags = cl.mem_flags.READ_WRITE | cl.mem_flags.USE_HOST_PTR
        # OpenCL has no empty buffers; a kernel never touches an empty tensor's element.
        return [cl.Buffer(self._ctx, flags, hostbuf=a) if a.size else cl.Buffer(self._ctx, cl.mem_flags.READ_WRITE, 4)
                for a in arrays]

    def _run(self, plan: LaunchPlan, *tensors) -> None:
        arrays = [_host_array(t) for t in tensors]
        env = plan.environment([a.shape for a in arrays])
        with self._lock:
            buffers = self._buffers(arrays)
            for launch in plan.launches:
                grid = [plan.evaluate(e, env) for e in launch.grid]
                block = [plan.evaluate(e, env) for e in launch.block]
                if 0 in grid or 0 in block:
                    continue
                args = [buffers[a[1]] if a[0] == "tensor" else _SCALARS[a[1]](plan.evaluate(a[2], env))
                        for a in launch.args]
                kernel = self._kernels[launch.kernel]
                kernel.set_args(*args)
                global_size = tuple(g * b for g, b in zip(grid, block))
                self._cl.enqueue_nd_range_kernel(self._queue, kernel, global_size, tuple(block))
            for array, buf in zip(arrays, buffers):
                if array.size:   # map: the device's results become visible in host memory
                    mapped, _ = self._cl.enqueue_map_buffer(self._queue, buf, self._cl.map_flags.READ, 0,
                                                            array.shape, array.dtype)
                    mapped.base.release(self._queue)
            self._queue.finish()


@dataclass(frozen=True)
class OpenclTarget(GpuTargetSpec):
    timer: str = WALL_CLOCK           # its modules are not TVM modules: time_evaluator cannot drive them

    def tvm_target(self):
        return tvm.target.Target({"kind": "opencl", "max_num_threads": self.max_threads},
                                 host={"kind": "llvm"})

    def device(self):
        return tvm.cpu(0)   # the module takes host tensors (see the module docstring)

    def hardware_key(self) -> dict:
        """The OpenCL platform, device and driver that kernels run on: two runtimes on one
        CPU (PoCL, Intel's) are different hardware for tuning."""
        key = {"tvm": str(self.tvm_target())}
        if _cl() is not None:
            device = _cl()[1].devices[0]
            key.update(platform=device.platform.name.strip(), device=device.name.strip(),
                       driver=device.driver_version.strip())
        return key

    def missing(self) -> str | None:
        """Why this machine cannot build/run opencl kernels, or None."""
        return missing()

    def can_build(self) -> bool:
        return missing() is None

    def run_place(self) -> str:
        """The OpenCL device kernels run on (PoCL's CPU device here)."""
        device = _cl()[1].devices[0]
        platform = device.platform.name.replace("Portable Computing Language", "PoCL")
        return f"{platform} ({device.name.strip()})"

    def can_run(self) -> bool:
        return missing() is None

    def build(self, mod):
        executable, split = compile_capturing_split(mod, self.tvm_target(), BUILD_CONFIG)
        source = fence_thread0_stores(hoist_local_declarations(executable.mod.imports[0].inspect_source()))
        _, ctx, _ = _cl()
        if needs_half_rewrite(source, ctx.devices[0].extensions):
            source = rewrite_half(source)
        plans = {gv.name_hint: launch_plan(split, gv.name_hint) for gv in mod.functions}
        return OpenclModule(source, plans)

    def source_of(self, module) -> tuple[str, str]:
        return "kernel.cl", module.source


TARGET = OpenclTarget(name="opencl", description="GPU schedules as OpenCL C via pyopencl (PoCL's CPU device here)",
                      library_suffix="")
