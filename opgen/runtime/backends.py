"""Device APIs a launch plan runs through: pyopencl for OpenCL C, CuPy for PTX/cubin.

A backend does only what differs between device APIs: wrap the caller's arrays, allocate
workspace, pack a scalar, launch one kernel by name with (grid, block), and make outputs
visible to the caller. Everything else (guards, sizes, arguments, workspace layout, shape
checks) is ``opgen.runtime.plan``'s, shared, so an OpenCL replay exercises it for CUDA too.
Both device APIs are optional imports: a missing one is a ``BackendMissing`` saying what to
install, never an ImportError from deep inside.
"""
from __future__ import annotations

import warnings

import numpy as np

from opgen.runtime.expr import PlanError


class BackendMissing(RuntimeError):
    """The device API a plan needs cannot be used here (not installed, no device)."""


def _bytes(array: np.ndarray) -> np.ndarray:
    """A C-contiguous host array's memory as flat bytes (any element type, bfloat16 too)."""
    if not array.flags.c_contiguous:
        raise PlanError("the runner takes C-contiguous arrays only")
    return array.reshape(-1).view(np.uint8)


def _on_device(array) -> bool:
    """Whether ``array`` is CUDA device memory (CuPy, torch CUDA tensors: the CUDA array
    interface), used in place rather than copied."""
    return hasattr(array, "__cuda_array_interface__")


class OpenclBackend:
    """pyopencl on ``context`` (default: pyopencl's choice, honouring PYOPENCL_CTX). Host
    arrays are used in place (CL_MEM_USE_HOST_PTR) and mapped back after the launches."""

    def __init__(self, plan, context=None):
        try:
            import pyopencl as cl
        except ImportError:
            raise BackendMissing("pyopencl is not installed (pip install pyopencl; a device: "
                                 "pip install 'pyopencl[pocl]')") from None
        self.cl = cl
        self.ctx = context if context is not None else cl.create_some_context(interactive=False)
        self.queue = cl.CommandQueue(self.ctx)
        source = plan.code_file(plan.code.get("source")).read_text()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")          # compiler chatter, not errors
            program = cl.Program(self.ctx, source).build()
        self.kernels = {k.name: cl.Kernel(program, k.name) for k in plan.kernels}

    def bind(self, arrays: list) -> list:
        cl = self.cl
        flags = cl.mem_flags.READ_WRITE | cl.mem_flags.USE_HOST_PTR
        return [cl.Buffer(self.ctx, flags, hostbuf=_bytes(a)) if a.size else self.alloc(0) for a in arrays]

    def alloc(self, nbytes: int):
        return self.cl.Buffer(self.ctx, self.cl.mem_flags.READ_WRITE, max(nbytes, 4))  # OpenCL has no empty buffer

    @staticmethod
    def scalar(dtype: str, value):
        return np.dtype(dtype).type(value)

    def launch(self, name: str, grid: tuple, block: tuple, args: list) -> None:
        kernel = self.kernels[name]
        kernel.set_args(*args)
        self.cl.enqueue_nd_range_kernel(self.queue, kernel, tuple(g * b for g, b in zip(grid, block)), block)

    def finish(self, arrays: list, handles: list, outputs: list) -> None:
        cl = self.cl
        for array, handle, is_output in zip(arrays, handles, outputs):
            if is_output and array.size:    # mapping makes the device's writes visible in host memory
                flat = _bytes(array)
                mapped, _ = cl.enqueue_map_buffer(self.queue, handle, cl.map_flags.READ, 0, flat.shape, flat.dtype)
                mapped.base.release(self.queue)
        self.queue.finish()


class CupyBackend:
    """CuPy on the current CUDA device: the cubin of the device's architecture when the plan
    has one, else the newest PTX not newer than the device (the driver compiles it). Arrays
    may be CuPy arrays (used in place) or host arrays (copied in, outputs copied back)."""

    def __init__(self, plan):
        try:
            import cupy
        except ImportError:
            raise BackendMissing("CuPy is not installed (pip install cupy-cuda12x or cupy-cuda13x)") from None
        self.cupy = cupy
        try:
            capability = int(cupy.cuda.Device().compute_capability)
        except Exception as err:   # noqa: BLE001 -- no driver, no device: say which
            raise BackendMissing(f"the CUDA runtime cannot load or sees no device: {err}") from None
        self.module = cupy.RawModule(path=str(self._code_path(plan, capability)))
        self.functions = {k.name: self.module.get_function(k.name) for k in plan.kernels}

    @staticmethod
    def _code_path(plan, capability: int):
        archs = plan.code.get("archs") or {}
        exact = archs.get(f"sm_{capability}", {})
        if "cubin" in exact:
            return plan.code_file(exact["cubin"])
        older = sorted((int(a[3:]), files) for a, files in archs.items()
                       if a.startswith("sm_") and a[3:].isdigit() and int(a[3:]) <= capability and "ptx" in files)
        if not older:
            raise BackendMissing(f"the plan has no code for sm_{capability} or older (it has {sorted(archs)})")
        return plan.code_file(older[-1][1]["ptx"])

    def bind(self, arrays: list) -> list:
        """Device arrays (CuPy's, or any with ``__cuda_array_interface__``: torch's CUDA
        tensors) in place; host arrays copied in."""
        cp = self.cupy
        return [a if isinstance(a, cp.ndarray) else cp.asarray(a) if _on_device(a) else cp.asarray(_bytes(a))
                for a in arrays]

    def alloc(self, nbytes: int):
        return self.cupy.empty(max(nbytes, 1), self.cupy.uint8)

    @staticmethod
    def scalar(dtype: str, value):
        return np.dtype(dtype).type(value)

    def launch(self, name: str, grid: tuple, block: tuple, args: list) -> None:
        self.functions[name](tuple(grid), tuple(block), tuple(args))

    def finish(self, arrays: list, handles: list, outputs: list) -> None:
        for array, handle, is_output in zip(arrays, handles, outputs):
            if is_output and not _on_device(array) and array.size:
                np.copyto(_bytes(array), handle.get())
        self.cupy.cuda.runtime.deviceSynchronize()


BACKENDS = {"opencl-c": OpenclBackend, "ptx": CupyBackend}


def for_plan(plan, **options):
    """The backend for the plan's code (its "language"), made ready to launch it."""
    language = plan.code.get("language")
    if language not in BACKENDS:
        raise PlanError(f"no backend for code language {language!r} (known: {', '.join(BACKENDS)})")
    return BACKENDS[language](plan, **options)
