"""Kernel build and cache: TE -> schedule -> compiled module, once per variant.

One kernel serves every shape of an (op, dtype combo, target, variant): the TE has
symbolic extents. Kernels are cached in process (thread-safe, built once even when many
threads ask at the same time) and on disk as exported libraries under
``$OPGEN_CACHE_DIR`` or ``$XDG_CACHE_HOME/opgen`` (``~/.cache/opgen``), keyed by a hash of
the scheduled TIR, the TVM version and the TVM target, so a change of math, schedule or
compiler never reuses a stale library. Files are written atomically (temp file + rename)
and rebuilt when unreadable. ``OPGEN_DISK_CACHE=0`` turns the disk cache off. A library
is loaded only from a cache that passes opgen.diskcache's ownership and mode checks.
"""
from __future__ import annotations

import functools
import hashlib
import os
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tvm
from tvm import s_tir, te, tirx
from tvm.sym.analyzer import Analyzer
from tvm.tirx.transform.common import BufferReplacer

from opgen import diskcache
from opgen import schedules as schedule_rules
from opgen.memory import to_tvm
from opgen.ops import DtypeCombo, OpSpec, get_op
from opgen.targets import Scratch, TargetSpec, default_target, get_target


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
    scratch: tuple = ()                # Scratch buffers, parameters after inputs and outputs
    size_vars: tuple = ()              # (tensor name, axis, tvm Var) binding each size variable
    aligned: tuple = ()                # (parameter index, bytes): addresses a vector variant needs aligned

    @functools.cached_property
    def function(self):
        """The compiled entry point (looked up once: a module lookup per call costs µs)."""
        return self.module[self.symbol]

    @property
    def tensor_names(self) -> tuple[str, ...]:
        """Parameter order: the op's inputs (those of this combo: OpSpec.kernel_inputs), its
        outputs, then the scratch buffers."""
        return self.op.kernel_tensors(self.combo) + tuple(b.name for b in self.scratch)

    def scratch_shapes(self, shapes: dict) -> dict:
        """Concrete shape of every scratch buffer, given the kernel shapes of the tensors."""
        analyzer = Analyzer()
        for name, axis, var in self.size_vars:
            analyzer.bind(var, int(shapes[name][axis]))
        return {b.name: tuple(b.shape(shapes)) if callable(b.shape) else
                tuple(int(analyzer.simplify(e)) for e in b.shape) for b in self.scratch}

    def export(self, path: Path) -> None:
        """Write the compiled library to ``path`` (a module loaded from disk cannot re-export)."""
        if self.library_path is not None and self.library_path.exists():
            Path(path).write_bytes(diskcache.payload(self.library_path))     # without the cache's seal
        else:
            self.module.export_library(str(path))

    def prepare(self, arrays: dict) -> tuple[list, list]:
        """TVM arguments for ``arrays`` (name -> tvm Tensor or numpy array, kernel shapes).

        Returns (arguments in parameter order, [(numpy output, staged tensor)] to copy
        back). Scratch buffers not given are allocated here.
        """
        tensor_names = self.op.kernel_tensors(self.combo)
        missing = [n for n in tensor_names if n not in arrays]
        if missing:
            raise ValueError(f"{self.symbol}: missing arrays {missing}")
        dev = self.target.device()
        arrays = {**arrays, **self._allocate_missing_scratch(arrays, dev)}
        args, write_back = [], []
        for index, name in enumerate(self.tensor_names):
            tensor, copied = to_tvm(arrays[name], dev)
            args.append(tensor)
            self._check_alignment(index, name, tensor)
            if copied and name in self.op.outputs:
                write_back.append((arrays[name], tensor))
        return args, write_back

    def _check_alignment(self, index: int, name: str, tensor) -> None:
        """A clear error for a tensor a vector variant needs aligned and that is not (TVM's
        binder checks offsets and strides, not addresses; an aligned host store would fault).
        The call path never hands such a tensor: it chooses a variant by these addresses."""
        for aligned_index, align in self.aligned:
            if index == aligned_index and tensor.data_ptr() % align:
                raise ValueError(f"{self.symbol}: {name} must be {align}-byte aligned for this variant "
                                 f"(its address is {tensor.data_ptr() % align} bytes past a boundary)")

    def _allocate_missing_scratch(self, arrays: dict, dev) -> dict:
        """Device buffers for the scratch parameters the caller did not supply (executors
        supply workspace slots, so this costs them nothing)."""
        absent = [b for b in self.scratch if b.name not in arrays]
        if not absent:
            return {}
        shapes = self.scratch_shapes({n: tuple(arrays[n].shape) for n in self.op.kernel_tensors(self.combo)})
        return {b.name: tvm.runtime.empty(shapes[b.name], b.dtype, dev) for b in absent}

    def __call__(self, arrays: dict) -> None:
        """Run on ``arrays``; numpy outputs are written in place (through a copy when they
        are not aligned and contiguous). Inputs are never written."""
        args, write_back = self.prepare(arrays)
        self.function(*args)
        for array, tensor in write_back:
            np.copyto(array, tensor.numpy().view(array.dtype))


def kernel_symbol(op: OpSpec, combo: DtypeCombo, variant: str) -> str:
    suffix = "" if variant == "default" else f"_{variant}"
    return f"{op.name}_{combo.tag.replace('-', '_')}{suffix}"


def declare_element_alignment(func):
    """``func`` with parameter buffers that promise element alignment only.

    ``te.create_prim_func`` declares every parameter 64-byte aligned, and LLVM then emits
    aligned vector accesses: such a kernel handed numpy's 16-byte-aligned memory
    segfaulted (measured). Declaring the truth (alignment = element size, offset_factor 1)
    lets every caller array in without a copy; a probe's 16M-float kernel ran 5.7-6.7 ms
    misaligned vs 6.0-6.5 ms aligned, and numpy's large arrays are the common case.
    The element offset is free too (a tensor may be a view at any byte offset into a
    larger allocation, e.g. a workspace slot), so views need no DLPack round trip.
    """
    promise = schedule_rules.vector_promise(func)
    if promise.lanes:
        return declare_vector_alignment(func, promise.lanes, promise.axis, promise.align, promise.params)
    declared = {p: tirx.decl_buffer(p.shape, p.dtype, p.name, data_alignment=tvm.DataType(p.dtype).bits // 8,
                                    offset_factor=1)
                for p in func.params}
    body = BufferReplacer(dict(declared))(func.body)
    return tirx.PrimFunc([declared[p] for p in func.params], body, attrs=func.attrs)


# The extent given to the row-length axis of a vector variant's register caches: TVM's
# CompactBufferAllocation shrinks each to the lanes a thread touches, but clamps it to the
# buffer's own extent, min(cols, lanes), which it cannot prove constant and CUDA cannot
# allocate on the stack; with a constant extent above any row length the clamp is a no-op.
LOCAL_EXTENT = 1 << 31


def declare_vector_alignment(func, lanes: int, axis, align: int = 16, aligned: frozenset | None = None):
    """``func`` (scheduled by a vector variant: ``schedules.VECTOR_LANES`` on its root block)
    with the promise that variant was built on declared, so that TVM both checks it on every
    call and lets the code generator see it.

    The buffers whose innermost extent is the vectorized ``axis`` (a size variable, the row
    length) are declared ``align``-byte aligned, with an element offset a multiple of ``lanes``
    (offset_factor: TVM's argument binder asserts it) and, when 2-D, a row stride of
    ``axis // lanes * lanes`` (equal to ``axis`` exactly when it divides: the binder asserts
    that too, so a row length the variant cannot take is an error, never wrong results).
    ``align`` (bytes) and ``aligned`` (parameter names; None: every such buffer) say which
    buffers get that declaration and how much alignment (the CPU's streamed variant: 64
    bytes, its streamed outputs only; schedules/llvm.py). TVM's binder checks the offset
    and the strides, not the address: a host kernel's aligned stores would fault on a
    misaligned one, so ``Kernel.prepare`` checks those (``Kernel.aligned``).
    The code generator emits a vector access only when it can prove the index a multiple of
    the lanes (TVM 0.27 CodeGenC: modular set of the ramp's base); the parameter's own
    element offset is a free variable, so the body reads the parameters through views
    (DeclBuffer, same data) whose offset is ``offset // lanes * lanes``, and the body's row
    length is ``axis // lanes * lanes``: the same values, with their divisibility visible
    (which also lets TVM drop the per-lane guards the schedule's caches carry). Other buffers keep element alignment; the register caches get
    a constant extent (LOCAL_EXTENT)."""
    params, views, decls = [], [], []
    for p in func.params:
        if not (p.shape and p.shape[-1].same_as(axis)) or (aligned is not None and p.name not in aligned):
            declared = tirx.decl_buffer(p.shape, p.dtype, p.name, data_alignment=tvm.DataType(p.dtype).bits // 8,
                                        offset_factor=1)
            params.append(declared)
            views.append(declared)
            continue
        one = tirx.IntImm(str(axis.ty), 1)
        strides = None if len(p.shape) == 1 else \
            [tirx.floordiv(axis, lanes) * lanes * functools.reduce(lambda a, b: a * b, p.shape[i + 1:-1], one)
             for i in range(len(p.shape) - 1)] + [one]
        declared = tirx.decl_buffer(p.shape, p.dtype, p.name, strides=strides, data_alignment=align,
                                    offset_factor=lanes)
        view = tirx.decl_buffer(p.shape, p.dtype, p.name, data=declared.data, strides=declared.strides,
                                elem_offset=tirx.floordiv(declared.elem_offset, lanes) * lanes,
                                data_alignment=align, offset_factor=lanes)
        params.append(declared)
        views.append(view)
        decls.append(tirx.DeclBuffer(view, data=declared.data))
    replace = dict(zip(func.params, views))
    for buf in func.body.block.alloc_buffers:
        if buf.scope() == "local" and any(e.same_as(axis) for e in buf.shape):
            replace[buf] = tirx.decl_buffer([tirx.IntImm(str(axis.ty), LOCAL_EXTENT) if e.same_as(axis) else e
                                             for e in buf.shape], buf.dtype, buf.name, scope="local")
    body = BufferReplacer(replace, {axis: tirx.floordiv(axis, lanes) * lanes})(func.body)
    body = tirx.SeqStmt(decls + [body]) if decls else body
    return tirx.PrimFunc(params, body, attrs=func.attrs).with_attr(schedule_rules.VECTOR_LANES, lanes)


@functools.lru_cache(maxsize=None)
def _prim_func(op_name: str, combo_tag: str):
    op = get_op(op_name)
    return te.create_prim_func(op.compute(op.combo(combo_tag)))


def prim_func(op: OpSpec, combo: DtypeCombo):
    """The op's unscheduled PrimFunc for ``combo`` (made once: TIR is immutable)."""
    return _prim_func(op.name, combo.tag)


@functools.lru_cache(maxsize=None)
def _matching_rule(op_name: str, combo_tag: str, target: TargetSpec):
    return schedule_rules.match(_prim_func(op_name, combo_tag), target)


def matching_rule(op: OpSpec, combo: DtypeCombo, target: TargetSpec):
    """The schedule rule for (op, combo) on ``target``: found by pattern matching alone,
    once, then cached. None for a target without schedule rules."""
    if target.schedule_module is None:
        return None
    return _matching_rule(op.name, combo.tag, target)


def kernel_point(op: OpSpec, combo: DtypeCombo, target: TargetSpec, knobs: dict | None = None) -> dict:
    """Every knob of the matching rule, defaults filled in (InvalidKnobs for a bad one): the
    point a kernel is built at, so {} and the explicit defaults name the same kernel."""
    rule = matching_rule(op, combo, target)
    if rule is None:
        if knobs:
            raise schedule_rules.InvalidKnobs(f"target {target.name} has no schedule rules, hence no knobs")
        return {}
    return schedule_rules.full_point(rule, target, knobs)


def scheduled_module(op: OpSpec, combo: DtypeCombo, target: TargetSpec, variant: str = "default",
                     knobs: dict | None = None):
    """The IRModule of the scheduled kernel (not yet compiled) and its symbol: the matching
    rule applied once, at ``knobs`` (validated, defaults filled in)."""
    symbol = kernel_symbol(op, combo, variant)
    func = prim_func(op, combo).with_attr("global_symbol", symbol)
    if op.cann is not None:      # CANN's names and order, for targets that print a CANN project
        func = func.with_attr("opgen.cann", op.cann.to_json(op.kernel_tensors(combo)))
    rule = matching_rule(op, combo, target)
    if rule is None:   # the target's compiler schedules for itself, intermediates included
        return tvm.IRModule({symbol: declare_element_alignment(func)}), symbol
    sch = schedule_rules.schedule(func, target, knobs, rule=rule)
    func = declare_element_alignment(hoist_pass_buffers(sch))
    return tvm.IRModule({symbol: func}), symbol


def hoist_pass_buffers(sch):
    """Turn root-level buffers used by more than one loop nest into trailing parameters.

    Buffers used inside a single nest (per-row scalars) stay internal: TVM compacts them to
    registers or stack. Returns the new PrimFunc.
    """
    nests_using: dict[str, set] = {}
    for rv in sch.get_child_blocks(sch.get_sblock("root")):
        loops = sch.get_loops(rv)
        nest = (sch.get(loops[0]) if loops else sch.get(rv)).__chandle__()
        blk = sch.get(rv)
        for region in list(blk.reads) + list(blk.writes):
            nests_using.setdefault(region.source.name, set()).add(nest)
    func = sch.mod["main"]
    realize = func.body
    root = realize.block
    hoisted = [b for b in root.alloc_buffers if len(nests_using.get(b.name, ())) > 1]
    kept = [b for b in root.alloc_buffers if b not in hoisted]
    new_root = s_tir.stmt.SBlock(root.iter_vars, root.reads, root.writes, root.name_hint, root.body,
                                 root.init, kept, root.match_buffers, root.annotations)
    body = s_tir.stmt.SBlockRealize(realize.iter_values, realize.predicate, new_root)
    return tvm.tirx.PrimFunc(list(func.params) + hoisted, body, attrs=func.attrs)


def _size_vars(func, tensor_names) -> tuple:
    """(tensor, axis, Var) for the first appearance of each symbolic extent among the params."""
    seen, bindings = set(), []
    for name, buf in zip(tensor_names, func.params):
        for axis, extent in enumerate(buf.shape):
            if isinstance(extent, tvm.tirx.Var) and extent.name not in seen:
                seen.add(extent.name)
                bindings.append((name, axis, extent))
    return tuple(bindings)


def _cache_path(target: TargetSpec, symbol: str, tir: str) -> Path:
    key = [diskcache.KEY_FORMAT, tvm.__version__, repr(target), str(target.tvm_target()), tir]
    digest = hashlib.sha256("\n".join(key).encode()).hexdigest()
    return diskcache.cache_dir() / "kernels" / f"{symbol}-{target.name}-{digest[:20]}{target.library_suffix}"


def _load(path: Path, symbol: str):
    """The cached library at ``path``, or None: absent, damaged or lacking ``symbol`` (set
    aside, rebuilt: opgen.diskcache.load_sealed), or in a place someone else could have
    written (never loaded)."""
    return diskcache.load_sealed(path, lambda p: tvm.runtime.load_module(str(p)),
                                 lambda module: module.implements_function(symbol))


def _store(module, path: Path) -> bool:
    """Export atomically: concurrent processes never see a half-written library. Nothing
    is stored in a directory opgen would refuse to load from (returns False then)."""
    if not diskcache.trusted_dir(path.parent, "kernels are built in memory"):
        return False
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=path.suffix)
    os.close(fd)
    try:
        module.export_library(tmp)
        diskcache.seal(Path(tmp), path.name)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return True


def build(op: OpSpec, combo: DtypeCombo, target: TargetSpec, variant: str = "default",
          knobs: dict | None = None) -> Kernel:
    """Schedule and compile (or load from the disk cache) one kernel; no in-process cache."""
    start = time.perf_counter()
    mod, symbol = scheduled_module(op, combo, target, variant, knobs)
    func = mod[symbol]
    tensors = op.kernel_tensors(combo)
    scratch = tuple(Scratch(b.name, str(b.dtype), tuple(b.shape)) for b in func.params[len(tensors):])
    size_vars = _size_vars(func, tensors)
    tir = mod.script()
    path = _cache_path(target, symbol, tir) if target.library_suffix and diskcache.enabled() else None
    module = _load(path, symbol) if path is not None else None
    from_disk = module is not None
    if module is None:
        module = target.build(mod)
        if path is not None and not _store(module, path):
            path = None        # never point at a file opgen did not write (Kernel.export copies it)
    module = target.loaded(module, path, from_disk)
    own = target.scratch_of(module)     # a target's own module may size its own scratch (AscendC:
    scratch = scratch if own is None else own   # one GM workspace from the host tiling)
    return Kernel(op, combo, target, variant, symbol, tir, module, time.perf_counter() - start, from_disk, path,
                  scratch, size_vars, _aligned_params(func))


def _aligned_params(func) -> tuple:
    """(index, bytes) of the parameters declared with more than element alignment (a vector
    variant's: declare_vector_alignment)."""
    return tuple((i, int(p.data_alignment)) for i, p in enumerate(func.params)
                 if int(p.data_alignment) > tvm.DataType(p.dtype).bits // 8)


_CACHE: dict[tuple, Kernel] = {}
_KEY_LOCKS: dict[tuple, threading.Lock] = {}
_CACHE_LOCK = threading.Lock()


def get_kernel(op: OpSpec | str, combo: DtypeCombo | str, target: TargetSpec | str | None = None,
               variant: str = "default", knobs: dict | None = None) -> Kernel:
    """The cached kernel of (op, combo, target, variant, knobs), built on first use.

    ``target``: a TargetSpec or a name (None: the default target). ``knobs`` are the
    schedule rule's knobs (None or {}: the rule's defaults); the full point is part of the
    key, so a tuned kernel never stands in for another point of the space, and the same
    point given two ways is one kernel.
    """
    op = get_op(op) if isinstance(op, str) else op
    combo = op.combo(combo) if isinstance(combo, str) else combo
    target = default_target() if target is None else get_target(target) if isinstance(target, str) else target
    point = kernel_point(op, combo, target, knobs)
    key = (op.name, combo.tag, target, variant, tuple(sorted(point.items())))
    with _CACHE_LOCK:
        kernel = _CACHE.get(key)
        if kernel is not None:
            return kernel
        key_lock = _KEY_LOCKS.setdefault(key, threading.Lock())
    with key_lock:
        with _CACHE_LOCK:
            kernel = _CACHE.get(key)
        if kernel is None:
            kernel = build(op, combo, target, variant, point)
            with _CACHE_LOCK:
                _CACHE[key] = kernel
    return kernel


def clear_memory_cache() -> None:
    with _CACHE_LOCK:
        _CACHE.clear()
