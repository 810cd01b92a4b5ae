"""Global-memory traffic of a GPU kernel's hot path, counted in its scheduled TIR (no GPU).

A row kernel is memory bound: what it costs is the bytes it moves between HBM (through L2)
and the SMs per element of its data. Without a GPU that cannot be timed, but it can be
counted in the schedule: every innermost loop (a ``For`` holding no other) that touches a
tensor of the data's rank (an elementwise input or output, rows x cols) walks the data once,
so each global buffer it loads or stores there moves its element size once per element of
the data. ``traffic(func)`` lists, per global buffer, how many such loops read it and how
many write it; ``bytes_per_element`` sums their element sizes.

What it counts and what it leaves out:

* buffers in ``local``/``shared`` scope (registers, shared memory) move nothing to HBM: a
  row held there between the reduction and the output pass, or column partials kept in
  registers, are not counted; a column-partials buffer in global memory that the hot loop
  reads and writes for every row is (twice its element size per element);
* loops that touch no tensor of the data's rank (zeroing a block's partials, the final sum
  of the partials over their rows, per-row scalars) run per row, per block or per column,
  not per element, and are left out: at 8192 x 4096 the final sum of 512 partial rows reads
  1/16 of a float per element;
* a tensor of lower rank read in the hot loop (gamma: one row, read by every row) is counted
  like the others: on a GPU it stays in L2, so the figure is an upper bound on HBM for it.
  ``data_bytes_per_element`` counts the data-rank tensors alone (what the row pattern's
  tests pin: dy and x read once, dx written once).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from opgen.lazy import tirx, tvm, tvm_ffi

_ON_CHIP = ("local", "shared", "warp")


@dataclass
class Access:
    """How many hot loops read and write one global buffer."""
    name: str
    bits: int
    rank: int
    reads: int = 0
    writes: int = 0


@dataclass
class Traffic:
    rank: int                                   # the data's rank (the highest of the parameters)
    buffers: dict = field(default_factory=dict)   # name -> Access

    def bytes_per_element(self) -> float:
        """HBM bytes per element of the data: the hot loops' accesses of global buffers of
        the data's rank (the elementwise tensors, column partials in global memory)."""
        return sum((a.reads + a.writes) * a.bits / 8 for a in self.buffers.values() if a.rank == self.rank)

    def l2_bytes_per_element(self) -> float:
        """Bytes per element the hot loops load from buffers of lower rank (a row of gamma
        every row reads, a per-row rstd): served by L2, not HBM, on a GPU."""
        return sum((a.reads + a.writes) * a.bits / 8 for a in self.buffers.values() if a.rank < self.rank)

    def table(self) -> str:
        """One line per buffer: name, reads, writes (per element of the data)."""
        return ", ".join(f"{a.name} r{a.reads} w{a.writes}" for a in sorted(self.buffers.values(), key=lambda a: a.name))


def _accesses(stmt) -> tuple[list, list, bool]:
    """(buffers loaded, buffers stored, whether a For is inside) in ``stmt``."""
    loads, stores, loops = [], [], []

    def load(node):
        loads.append(node.source)
        return node

    def store(node):
        stores.append(node.buffer)
        return node

    def loop(node):
        loops.append(node)
        return node
    tvm_ffi.structural_map(stmt, [(tvm.ir.TensorLoad, load), (tirx.BufferStore, store), (tirx.For, loop)],
                           order="post")
    return loads, stores, bool(loops)


def _global(buffer) -> bool:
    scope = buffer.scope() if callable(getattr(buffer, "scope", None)) else "global"
    return not any(scope.startswith(s) for s in _ON_CHIP)


def _shape(buffer) -> str:
    return str(list(buffer.shape))


def _data_shape(func, rank: int) -> str:
    """The shape most parameters of the data's rank share (the elementwise tensors'; a
    scratch buffer of column partials has as many rows as the grid, not the data's)."""
    shapes = [_shape(p) for p in func.params if len(p.shape) == rank]
    return max(shapes, key=shapes.count)


def traffic(func) -> Traffic:
    """The hot loops' global accesses of ``func`` (a scheduled PrimFunc, before lowering)."""
    rank = max(len(p.shape) for p in func.params)
    shape = _data_shape(func, rank)
    data = {b.name for b in func.params if _shape(b) == shape}
    result = Traffic(rank)
    for loads, stores in _hot_leaves(func.body, data):
        for kind, group in (("reads", loads), ("writes", stores)):
            for buffer in {b.name: b for b in group if _global(b)}.values():
                access = result.buffers.setdefault(
                    buffer.name, Access(buffer.name, tvm.DataType(str(buffer.dtype)).bits, len(buffer.shape)))
                setattr(access, kind, getattr(access, kind) + 1)
    return result


def _hot_leaves(body, data: set) -> list:
    """(loads, stores) of every innermost loop inside a serial loop (or being one) that
    touches a tensor of the data's shape: the loops that run once per element (or per lanes
    of elements) of the data. An enclosing loop, not the leaf alone: the vector variant
    copies each tensor through registers in a loop of its own (gamma's, the partials')
    beside the data's. Serial, not bound to blocks or threads: a block's loop holds the
    whole kernel, its zeroing of the partials before the rows included."""
    fors = []
    tvm_ffi.structural_map(body, [(tirx.For, lambda node: fors.append(node) or node)], order="post")
    by_handle = {node.__chandle__(): node for node in fors}
    inside = {}
    for handle, node in by_handle.items():
        found = []
        tvm_ffi.structural_map(node.body, [(tirx.For, lambda n: found.append(n.__chandle__()) or n)], order="post")
        inside[handle] = set(found)
    touches = {h: bool({b.name for b in sum(_accesses(n.body)[:2], [])} & data) for h, n in by_handle.items()}
    hot = []
    for handle, node in by_handle.items():
        if inside[handle]:
            continue
        around = [h for h, below in inside.items() if handle in below] + [handle]
        if any(touches[h] and getattr(by_handle[h], "thread_binding", None) is None for h in around):
            hot.append(_accesses(node.body)[:2])
    return hot


@dataclass(frozen=True)
class HotLoop:
    """An innermost loop of symbolic trip count that touches the data: a pass over a row's
    columns (a row reduction, the elementwise output). ``loaded``/``stored``: bytes it moves
    per element (each distinct global buffer of the row's length once)."""
    kernel: int        # which kernel (top-level nest, in launch order)
    loaded: int
    stored: int


def hot_loops(func) -> list[HotLoop]:
    """The passes over the data of ``func`` (scheduled PrimFunc), kernel by kernel, in
    order: what targets/cuda_sass.py pairs with the loops of the machine code."""
    rank = max(len(p.shape) for p in func.params)
    shape = _data_shape(func, rank)
    data = {b.name for b in func.params if _shape(b) == shape}
    cols = str(next(p for p in func.params if _shape(p) == shape).shape[-1])
    tops, fors = [], []

    def visit(node):
        fors.append(node)
        return node
    tvm_ffi.structural_map(func.body, [(tirx.For, visit)], order="post")
    inside = {}
    for node in fors:
        found = []
        tvm_ffi.structural_map(node.body, [(tirx.For, lambda n: found.append(n.__chandle__()) or n)], order="post")
        inside[node.__chandle__()] = found
    nested = {h for below in inside.values() for h in below}
    tops = [n for n in fors if n.__chandle__() not in nested]
    symbolic = [n for n in fors if not isinstance(n.extent, tirx.IntImm)]
    result = []
    for kernel, top in enumerate(tops):
        below = set(inside[top.__chandle__()]) | {top.__chandle__()}
        for node in symbolic:
            handle = node.__chandle__()
            if handle not in below or any(h in inside[handle] for h in (n.__chandle__() for n in symbolic)):
                continue
            loads, stores, _ = _accesses(node.body)
            if not {b.name for b in loads + stores} & data:
                continue
            row_long = lambda group: {b.name: b for b in group if _global(b) and str(b.shape[-1]) == cols}
            size = lambda group: sum(tvm.DataType(str(b.dtype)).bits // 8 for b in row_long(group).values())
            result.append(HotLoop(kernel, size(loads), size(stores)))
    return result
