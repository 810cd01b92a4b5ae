"""IREE as a second compiler: the linalg text compiled by ``iree.compiler``, run by ``iree.runtime``.

IREE schedules, fuses and vectorizes the stages itself (no opgen schedule rules), so a
kernel here is an independent check of the same TE formulas: different tiling, different
reduction order, different code generator. The runtime returns each output in a buffer
of its own; ``IreeKernel`` copies it into the caller's output (IREE's Python runtime
cannot store into a caller's numpy array), and reads inputs without a copy where DLPack
allows.

Both IREE packages are optional (``pip install -e ".[mlir]"``); without them the IREE
targets say so (``missing``) and nothing here is imported.
"""
from __future__ import annotations

import functools
import importlib.util
import threading

import numpy as np

from opgen.targets.mlir import linalg
from opgen.targets.mlir.stages import stage_graph


def iree_missing() -> str | None:
    """Why IREE cannot compile here (None: it can)."""
    for package in ("iree.compiler", "iree.runtime"):
        try:
            found = importlib.util.find_spec(package) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            return f"{package} is not installed (pip install -e \".[mlir]\")"
    return None


def cpu_flags() -> tuple:
    """The CPU IREE's llvm-cpu backend compiles for: the llvm target's (llvm_host: the probed
    host, or OPGEN_LLVM_TARGET), every feature spelled out. IREE's own ``cpu=host`` would
    probe the same way, but would ignore the override; and IREE picks its microkernels from
    the feature string, so it gets the whole set, not only the edits to the name."""
    from opgen.targets import llvm_host

    cpu = llvm_host.current()
    return (f"--iree-llvmcpu-target-cpu={cpu.name}",
            f"--iree-llvmcpu-target-cpu-features={llvm_host.feature_string(cpu)}")


def compile_text(text: str, backend: str, flags: tuple) -> bytes:
    """The VM flatbuffer IREE makes of ``text`` for ``backend`` (llvm-cpu, cuda)."""
    import iree.compiler as compiler

    return compiler.compile_str(text, target_backends=[backend], extra_args=list(flags))


@functools.lru_cache(maxsize=None)
def _config():
    import iree.runtime as rt

    return rt.Config("local-task")     # IREE's multi-threaded CPU driver


def _host_array(tensor) -> np.ndarray:
    """A numpy view of a TVM tensor (DLPack), or a copy where numpy cannot view its dtype
    (bfloat16 exports as a dtype numpy's DLPack import does not know)."""
    try:
        return np.from_dlpack(tensor)
    except (TypeError, BufferError, RuntimeError):
        return tensor.numpy()


class IreeKernel:
    """One compiled function: call it with TVM tensors, inputs then outputs."""

    def __init__(self, vmfb: bytes, symbol: str, n_inputs: int):
        self.vmfb, self.symbol, self.n_inputs = vmfb, symbol, n_inputs
        self._local = threading.local()   # a loaded module per thread: IREE contexts are not shared

    def _function(self):
        module = getattr(self._local, "module", None)
        if module is None:
            import iree.runtime as rt

            config = _config()
            module = rt.load_vm_module(rt.VmModule.copy_buffer(config.vm_instance, self.vmfb), config)
            self._local.module = module
        return module[self.symbol]

    def __call__(self, *tensors) -> None:
        inputs = [_host_array(t) for t in tensors[:self.n_inputs]]
        outputs = tensors[self.n_inputs:]
        results = self._function()(*inputs)
        if len(outputs) == 1:
            results = (results,)
        for out, result in zip(outputs, results):
            host = result.to_host()
            try:
                np.copyto(np.from_dlpack(out), host, casting="no")
            except (TypeError, BufferError, RuntimeError):
                out.copyfrom(host)


class IreeModule:
    """What an IREE target's build returns: ``module[symbol]`` runs the kernel (when the
    backend runs here), and the MLIR it was compiled from rides along for ``opgen generate``."""

    def __init__(self, symbol: str, text: str, vmfb: bytes, n_inputs: int, runs_here: bool):
        self.symbol, self.text, self.vmfb = symbol, text, vmfb
        self.kernel = IreeKernel(vmfb, symbol, n_inputs) if runs_here else None

    def __getitem__(self, symbol: str):
        if symbol != self.symbol:
            raise KeyError(f"this module holds {self.symbol}, not {symbol}")
        if self.kernel is None:
            raise RuntimeError(f"{symbol}: compiled for a device this machine does not have")
        return self.kernel


def build(mod, backend: str, flags: tuple, runs_here: bool) -> IreeModule:
    """Print ``mod``'s single kernel as linalg and compile it with IREE."""
    (gvar, func), = mod.functions.items()
    symbol = gvar.name_hint
    graph = stage_graph(func)                         # read once: printed, and counted for the call
    text = "module {\n" + linalg.FunctionPrinter(symbol, graph).print() + "\n}\n"
    return IreeModule(symbol, text, compile_text(text, backend, flags), len(graph.inputs), runs_here)
