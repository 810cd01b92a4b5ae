"""Kernel build and cache: TE -> schedule -> compiled module, once per variant.

One kernel serves every shape of an (op, dtype combo, target, variant): the TE has
symbolic extents. Kernels are cached in process (thread-safe, built once even when many
threads ask at the same time) and on disk as exported libraries under
``$OPGEN_CACHE_DIR`` or ``$XDG_CACHE_HOME/opgen`` (``~/.cache/opgen``), keyed by a hash of
the scheduled TIR, the TVM version and the TVM target, so a change of math, schedule or
compiler never reuses a stale library. Files are written atomically (temp file + rename)
and rebuilt when unreadable. ``OPGEN_DISK_CACHE=0`` turns the disk cache off.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tvm
from tvm import te

from opgen import schedules as schedule_rules
from opgen.dtypes import BFLOAT16, dtype_name
from opgen.ops import DtypeCombo, OpSpec, get_op
from opgen.targets import TargetSpec, get_target


@dataclass
class Kernel:
    """A compiled kernel and what produced it. Call it with arrays keyed by tensor name."""

    op: OpSpec
    combo: DtypeCombo
    target: TargetSpec
    variant: str
    symbol: str
    tir: str                       # the scheduled TIR, as TVMScript
    module: object                 # tvm runtime module
    build_seconds: float
    from_disk: bool
    library_path: Path | None = None   # the exported library in the disk cache, if any

    def export(self, path: Path) -> None:
        """Write the compiled library to ``path`` (a module loaded from disk cannot re-export)."""
        if self.library_path is not None and self.library_path.exists():
            shutil.copyfile(self.library_path, path)
        else:
            self.module.export_library(str(path))

    def __call__(self, arrays: dict) -> None:
        """Run on ``arrays`` (name -> tvm Tensor or numpy array in the kernel's shapes).

        numpy outputs are written in place (through a copy when they are not aligned and
        contiguous). Inputs are never written.
        """
        names = self.op.inputs + self.op.outputs
        missing = [n for n in names if n not in arrays]
        if missing:
            raise ValueError(f"{self.symbol}: missing arrays {missing}")
        dev = self.target.device()
        tensors, write_back = [], []
        for name in names:
            tensor, copied = to_tvm(arrays[name], dev)
            tensors.append(tensor)
            if copied and name in self.op.outputs:
                write_back.append((arrays[name], tensor))
        self.module[self.symbol](*tensors)
        for array, tensor in write_back:
            np.copyto(array, tensor.numpy().view(array.dtype))


def to_tvm(array, dev):
    """A TVM tensor for ``array``: zero-copy when possible; returns (tensor, copied)."""
    if isinstance(array, tvm.runtime.Tensor):
        return array, False
    a = np.asarray(array)
    name = dtype_name(a.dtype)
    if name is None:
        raise TypeError(f"unsupported dtype {a.dtype}")
    aligned = a.ctypes.data % 64 == 0 and a.flags.c_contiguous and dev.dlpack_device_type() == tvm.cpu().dlpack_device_type()
    if aligned and a.size:
        if name == BFLOAT16:
            return tvm.runtime.from_dlpack(a.view(np.uint16))._create_view(a.shape, BFLOAT16), False
        return tvm.runtime.from_dlpack(a), False
    return tvm.runtime.tensor(np.ascontiguousarray(a), dev), True


def kernel_symbol(op: OpSpec, combo: DtypeCombo, variant: str) -> str:
    suffix = "" if variant == "default" else f"_{variant}"
    return f"{op.name}_{combo.tag.replace('-', '_')}{suffix}"


def scheduled_module(op: OpSpec, combo: DtypeCombo, target: TargetSpec, variant: str = "default",
                     knobs: dict | None = None):
    """The IRModule of the scheduled kernel (not yet compiled) and its symbol."""
    symbol = kernel_symbol(op, combo, variant)
    func = te.create_prim_func(op.compute(combo)).with_attr("global_symbol", symbol)
    return schedule_rules.schedule(func, target, knobs).mod, symbol


def cache_dir() -> Path:
    root = os.environ.get("OPGEN_CACHE_DIR")
    if root:
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "opgen"


def _disk_cache_enabled() -> bool:
    return os.environ.get("OPGEN_DISK_CACHE", "1") not in ("0", "false", "no")


def _cache_path(target: TargetSpec, symbol: str, tir: str) -> Path:
    digest = hashlib.sha256("\n".join([tvm.__version__, str(target.tvm_target()), tir]).encode()).hexdigest()
    return cache_dir() / "kernels" / f"{symbol}-{target.name}-{digest[:20]}{target.library_suffix}"


def _load(path: Path):
    try:
        return tvm.runtime.load_module(str(path))
    except Exception:  # a truncated or foreign file: rebuild it
        return None


def _store(module, path: Path) -> None:
    """Export atomically: concurrent processes never see a half-written library."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=path.suffix)
    os.close(fd)
    try:
        module.export_library(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def build(op: OpSpec, combo: DtypeCombo, target: TargetSpec, variant: str = "default",
          knobs: dict | None = None) -> Kernel:
    """Schedule and compile (or load from the disk cache) one kernel; no in-process cache."""
    start = time.perf_counter()
    mod, symbol = scheduled_module(op, combo, target, variant, knobs)
    tir = mod.script()
    path = _cache_path(target, symbol, tir) if target.library_suffix and _disk_cache_enabled() else None
    module = _load(path) if path is not None and path.exists() else None
    from_disk = module is not None
    if module is None:
        module = target.build(mod)
        if path is not None:
            _store(module, path)
    return Kernel(op, combo, target, variant, symbol, tir, module, time.perf_counter() - start, from_disk, path)


_CACHE: dict[tuple, Kernel] = {}
_KEY_LOCKS: dict[tuple, threading.Lock] = {}
_CACHE_LOCK = threading.Lock()


def get_kernel(op: OpSpec | str, combo: DtypeCombo | str, target: TargetSpec | str = "llvm",
               variant: str = "default") -> Kernel:
    """The cached kernel of (op, combo, target, variant), built on first use."""
    op = get_op(op) if isinstance(op, str) else op
    combo = op.combo(combo) if isinstance(combo, str) else combo
    target = get_target(target) if isinstance(target, str) else target
    key = (op.name, combo.tag, target.name, variant)
    with _CACHE_LOCK:
        kernel = _CACHE.get(key)
        if kernel is not None:
            return kernel
        key_lock = _KEY_LOCKS.setdefault(key, threading.Lock())
    with key_lock:
        with _CACHE_LOCK:
            kernel = _CACHE.get(key)
        if kernel is None:
            kernel = build(op, combo, target, variant)
            with _CACHE_LOCK:
                _CACHE[key] = kernel
    return kernel


def clear_memory_cache() -> None:
    with _CACHE_LOCK:
        _CACHE.clear()
