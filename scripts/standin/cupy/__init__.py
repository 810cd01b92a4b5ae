"""A stand-in for CuPy, for dry runs of scripts/gpu_check.sh on a machine without a GPU.

    PYTHONPATH=scripts/standin OPGEN_STANDIN_OPENCL=DIR/opencl scripts/gpu_check.sh DIR

"Device" memory is host memory (numpy), and a kernel loaded from ``DIR/cuda/<op>/<tags>/
[<variant>/]kernel.sm_XX.cubin`` runs as the same kernel, by the same name, compiled from
``DIR/opencl/<same folder>/kernel.cl`` (``opgen export --target opencl --no-cases``) on the
OpenCL device here: the exported cuda and opencl plans are the same launch for launch
(tests/test_export.py). So the CUDA code path (opgen.runtime.backends.CupyBackend: bind,
alloc, launch by name, copy-back) runs with real numerics, and the check and benchmark
scripts run end to end. Events read the host clock after the queue has drained (each launch
here is synchronous), so the timings a dry run prints are PoCL's, not a GPU's: they show the
loop works, nothing about speed. What no stand-in can show (the driver loading the cubin,
CUDA's launch itself, compute-sanitizer) is the lent GPU's.

Only the names opgen.runtime and scripts/export_bench.py use are here; anything else is an
AttributeError, never a silent no-op.
"""
from __future__ import annotations

import os
import time
import types
from pathlib import Path

import numpy as np

uint8, uint16, int16, float32 = np.uint8, np.uint16, np.int16, np.float32
STANDIN = True       # what the scripts print so a dry run's table is never taken for a GPU's


class _Pointer:
    """``ndarray.data``: what export_bench's device-to-device copy uses."""

    def __init__(self, array):
        self.array = array

    def copy_from_device_async(self, src, nbytes):
        self.array._flat()[:nbytes] = src.array._flat()[:nbytes]

    def memset_async(self, value, nbytes):
        self.array._flat()[:nbytes] = value


class ndarray:
    """"Device" memory: a C-contiguous numpy array."""

    def __init__(self, data: np.ndarray):
        self._host = np.ascontiguousarray(data)

    shape = property(lambda self: self._host.shape)
    dtype = property(lambda self: self._host.dtype)
    strides = property(lambda self: self._host.strides)
    nbytes = property(lambda self: self._host.nbytes)
    size = property(lambda self: self._host.size)
    data = property(lambda self: _Pointer(self))

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self._host.ctypes.data, False),
                "version": 3, "strides": None}

    def _flat(self) -> np.ndarray:
        return self._host.reshape(-1).view(np.uint8)

    def view(self, dtype):
        return ndarray(self._host.view(dtype))

    def fill(self, value):
        self._host.fill(value)

    def get(self):
        return self._host.copy()


def asarray(a, dtype=None):
    host = a.get() if isinstance(a, ndarray) else np.asarray(a)
    return ndarray(host if dtype is None else host.astype(dtype))


def empty(shape, dtype=np.float32):
    return ndarray(np.full(shape, 0xA5, np.uint8).view(dtype) if np.dtype(dtype).itemsize == 1
                   else np.empty(shape, dtype))   # uninitialized memory, as a device's is


def copyto(dst, src):
    dst._host[...] = src._host


# ---- kernels: the OpenCL twin of each cubin --------------------------------------------------

_RUNTIME = None


def _opencl():
    global _RUNTIME
    if _RUNTIME is None:
        from opgen.targets import get_target
        _RUNTIME = get_target("opencl")._runtime()
    return _RUNTIME


def _twin(cubin: Path) -> Path:
    """``<export>/cuda/<rest>/kernel.sm_XX.cubin`` -> ``$OPGEN_STANDIN_OPENCL/<rest>/kernel.cl``."""
    root = os.environ.get("OPGEN_STANDIN_OPENCL")
    if not root:
        raise RuntimeError("the CuPy stand-in needs OPGEN_STANDIN_OPENCL=<export>/opencl (opgen export "
                           "--target opencl --no-cases) to find each cubin's OpenCL twin")
    parts = cubin.resolve().parent.parts
    rest = parts[len(parts) - 1 - parts[::-1].index("cuda") + 1:]
    twin = Path(root).joinpath(*rest, "kernel.cl")
    if not twin.is_file():
        raise FileNotFoundError(f"the stand-in cannot run {cubin}: no OpenCL twin {twin} (the opencl export "
                                f"has no such kernel or variant)")
    return twin


class RawModule:
    def __init__(self, path=None, **_):
        runtime = _opencl()
        self.path = Path(path)
        self.program = runtime.cl.Program(runtime.ctx, _twin(self.path).read_text()).build()

    def get_function(self, name):
        runtime, program = _opencl(), self.program
        cl = runtime.cl
        kernel = cl.Kernel(program, name)     # an unknown name fails here, as cuModuleGetFunction would

        def launch(grid, block, args):
            flags = cl.mem_flags.READ_WRITE | cl.mem_flags.USE_HOST_PTR
            bufs = [(cl.Buffer(runtime.ctx, flags, hostbuf=a._flat()) if a.nbytes
                     else cl.Buffer(runtime.ctx, cl.mem_flags.READ_WRITE, 4), a)
                    if isinstance(a, ndarray) else (a, None) for a in args]
            kernel.set_args(*[b for b, _ in bufs])
            cl.enqueue_nd_range_kernel(runtime.queue, kernel, tuple(g * b for g, b in zip(grid, block)), block)
            for buf, array in bufs:
                if array is not None and array.nbytes:
                    mapped, _ = cl.enqueue_map_buffer(runtime.queue, buf, cl.map_flags.READ, 0,
                                                      array._flat().shape, np.uint8)
                    mapped.base.release(runtime.queue)
            runtime.queue.finish()
        return launch


# ---- cuda: the device, events, allocators ----------------------------------------------------

class _Event:
    def __init__(self, *_, **__):
        self.t = None

    def record(self, stream=None):
        self.t = time.perf_counter()       # every launch here has finished by now

    def synchronize(self):
        pass


def _elapsed(start, stop) -> float:
    return (stop.t - start.t) * 1e3


class _Device:
    compute_capability = "90"
    attributes = {"L2CacheSize": 0, "MultiProcessorCount": 1}

    def __init__(self, *_):
        pass

    def synchronize(self):
        pass


_PROPERTIES = {"name": b"CuPy stand-in (host memory; kernels as OpenCL C on the OpenCL device here)",
               "totalGlobalMem": 0}
_allocator = ["pool"]


def _set_allocator(allocator=None):
    _allocator[0] = allocator


runtime = types.SimpleNamespace(getDeviceCount=lambda: 1, runtimeGetVersion=lambda: 0, deviceSynchronize=lambda: None,
                                getDeviceProperties=lambda device: dict(_PROPERTIES))
cuda = types.SimpleNamespace(Device=_Device, Event=_Event, get_elapsed_time=_elapsed, runtime=runtime,
                             set_allocator=_set_allocator, set_pinned_memory_allocator=lambda allocator=None: None,
                             allocator_in_use=lambda: _allocator[0])
