"""The stage graph of an unscheduled kernel: what an MLIR printer needs from TVM's TIR.

``te.create_prim_func`` turns each TE compute stage into one block: its iterators (spatial
or reduction, with extents over the kernel's size variables), the store it makes, and for
a reduction the init it starts from. A compiler that schedules for itself (IREE,
bishengir) wants exactly that, one stage at a time, with the op's intermediates left as
values rather than memory; this module reads them off the PrimFunc, knowing nothing of
any op: the printers in this package turn each stage into MLIR.

The accumulator of a reduction appears in its update as a load of the stage's own buffer
at the store's indices (``acc[i] = acc[i] + E``): printers read it as the running value,
so any combiner TVM can express (sum, max, a custom one) prints without being named.
"""
from __future__ import annotations

from dataclasses import dataclass

SPATIAL, REDUCTION = "S", "R"


def kind(node) -> str:
    """A TIR node's kind by class name: TVM 0.27 exposes several node constructors as
    functions (``tirx.BufferLoad`` builds a ``TensorLoad``), so isinstance cannot be used."""
    return type(node).__name__


LOADS = ("BufferLoad", "TensorLoad")


def loaded(node):
    """The buffer a load reads (TVM 0.27's TensorLoad names it ``source``)."""
    return node.buffer if hasattr(node, "buffer") else node.source


class UnsupportedStage(NotImplementedError):
    """A TIR construct the MLIR printers have no lowering for (the message names it)."""


@dataclass(frozen=True)
class Iterator:
    var: object          # the block's iterator Var (what loads index with)
    extent: object       # PrimExpr over the size variables
    kind: str            # SPATIAL or REDUCTION


@dataclass(frozen=True)
class Stage:
    """One TE stage: ``buffer[store_indices] = value`` over ``iterators`` (+ ``init``)."""

    name: str
    buffer: object                 # the tirx.Buffer it writes
    iterators: tuple               # Iterator, in the block's order
    store_indices: tuple           # the store's index expressions
    value: object                  # the stored PrimExpr (a reduction's update)
    init: object | None            # a reduction's initial value, None for elementwise

    @property
    def kinds(self) -> str:
        return "".join(it.kind for it in self.iterators)

    @property
    def is_reduction(self) -> bool:
        return REDUCTION in self.kinds

    @property
    def spatial(self) -> tuple:
        return tuple(it for it in self.iterators if it.kind == SPATIAL)

    @property
    def reduced(self) -> tuple:
        return tuple(it for it in self.iterators if it.kind == REDUCTION)


@dataclass(frozen=True)
class StageGraph:
    """A kernel as stages: its parameters (inputs, then the buffers stages write), its
    intermediates (written and read, never parameters) and the stages in program order."""

    params: tuple                  # tirx.Buffer, in the kernel's parameter order
    intermediates: tuple           # tirx.Buffer
    stages: tuple                  # Stage

    @property
    def outputs(self) -> tuple:
        written = {s.buffer.name for s in self.stages}
        return tuple(b for b in self.params if b.name in written)

    @property
    def inputs(self) -> tuple:
        written = {s.buffer.name for s in self.stages}
        return tuple(b for b in self.params if b.name not in written)

    def size_vars(self) -> dict:
        """Each symbolic size (Var name) -> (parameter, axis) where it is a whole extent:
        where its value is read at run time. A size that is nowhere a whole extent has no
        such place and is refused."""
        found = whole_extents(self.params)
        for buf in self.params + self.intermediates:
            for extent in buf.shape:
                for var in free_vars(extent):
                    if var.name not in found:
                        raise UnsupportedStage(f"size {var.name} is no parameter's whole extent")
        return found


def whole_extents(buffers) -> dict:
    """Size Var name -> (buffer, axis) of its first whole-extent appearance in ``buffers``."""
    found: dict = {}
    for buf in buffers:
        for axis, extent in enumerate(buf.shape):
            if kind(extent) in ("Var", "SizeVar") and extent.name not in found:
                found[extent.name] = (buf, axis)
    return found


def free_vars(expr) -> list:
    """The Vars an index/shape expression uses, in first-use order."""
    seen, out = set(), []

    def visit(node):
        if kind(node) in ("Var", "SizeVar"):
            if node.name not in seen:
                seen.add(node.name)
                out.append(node)
            return
        for child in ("a", "b", "value"):
            if hasattr(node, child):
                visit(getattr(node, child))

    visit(expr)
    return out


def loads(expr) -> list:
    """The loads of ``expr`` in first-use order (those inside another load's indices too)."""
    found: list = []

    def visit(node):
        if kind(node) in LOADS:
            found.append(node)
            for i in node.indices:
                visit(i)
            return
        if kind(node) == "Call":
            for arg in node.args:
                visit(arg)
            return
        for child in ("a", "b", "value", "condition", "true_value", "false_value"):
            if hasattr(node, child):
                visit(getattr(node, child))

    visit(expr)
    return found


def _blocks(stmt) -> list:
    """The blocks under ``stmt`` in program order (loops and sequences only: unscheduled)."""
    if kind(stmt) == "SBlockRealize":
        return [stmt.block]
    if kind(stmt) == "SeqStmt":
        return [b for s in stmt.seq for b in _blocks(s)]
    if kind(stmt) == "For":
        return _blocks(stmt.body)
    raise UnsupportedStage(f"an unscheduled kernel holds loops and blocks only, not {kind(stmt)}")


def _store(stmt, block_name: str):
    if kind(stmt) != "BufferStore":
        raise UnsupportedStage(f"stage {block_name}: one store per stage (several outputs per stage have no "
                               f"lowering here), got {kind(stmt)}")
    return stmt


def _stage(block) -> Stage:
    store = _store(block.body, block.name_hint)
    iterators = tuple(Iterator(iv.var, iv.dom.extent, REDUCTION if int(iv.iter_type) == 2 else SPATIAL)
                      for iv in block.iter_vars)
    init = None
    if block.init is not None:
        init_store = _store(block.init, block.name_hint)
        init = init_store.value
    spatial = [it.var.name for it in iterators if it.kind == SPATIAL]
    indices = [i.name if kind(i) in ("Var", "SizeVar") else None for i in store.indices]
    if sorted(n for n in indices if n) != sorted(spatial) or None in indices:
        raise UnsupportedStage(f"stage {block.name_hint}: its store must index each spatial iterator once, "
                               f"got [{', '.join(map(str, store.indices))}]")
    return Stage(block.name_hint, store.buffer, iterators, tuple(store.indices), store.value, init)


def stage_graph(func) -> StageGraph:
    """The stages of an unscheduled PrimFunc (as ``te.create_prim_func`` makes it)."""
    realize = func.body
    if kind(realize) != "SBlockRealize":
        raise UnsupportedStage("expected an unscheduled kernel (a root block)")
    root = realize.block
    params = tuple(func.params)          # TVM 0.27: parameters are the buffers themselves
    stages = tuple(_stage(b) for b in _blocks(root.body))
    return StageGraph(params, tuple(root.alloc_buffers), stages)
