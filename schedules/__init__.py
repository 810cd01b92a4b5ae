"""Schedules: how each stage pattern runs on each target, never what it computes.

A schedule module ``schedules/<target>.py`` holds ``RULES``: objects with
``apply(func, target, knobs) -> s_tir.Schedule | None`` (TVM dlight's protocol). Rules are
tried in order; ``None`` means "this rule does not match this function". Rules recognise
stages by pattern (row reduction + elementwise, column reduction) using ``blocks()`` below,
never by op name, so a new op written in the same patterns needs no schedule code.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

from tvm import s_tir
from tvm.sym.analyzer import Analyzer


class NoScheduleRule(LookupError):
    """No rule of the target's schedule module matched the function."""


@dataclass(frozen=True)
class Block:
    """What a rule needs to know about one block: its iterators and its buffers."""

    name: str
    kinds: str                     # one letter per iterator: S spatial, R reduction
    extents: tuple                 # PrimExpr extent of each iterator
    reads: frozenset               # names of buffers read
    writes: frozenset              # names of buffers written
    writes_output: bool            # writes a function parameter (not a scratch buffer)


def blocks(sch: s_tir.Schedule) -> list[Block]:
    """The root's child blocks in program order, described for pattern matching."""
    root = sch.get_sblock("root")
    scratch = {buf.name for buf in sch.get(root).alloc_buffers}
    result = []
    for rv in sch.get_child_blocks(root):
        blk = sch.get(rv)
        kinds = "".join("R" if iv.iter_type == 2 else "S" for iv in blk.iter_vars)
        writes = frozenset(r.source.name for r in blk.writes)
        result.append(Block(
            name=blk.name_hint,
            kinds=kinds,
            extents=tuple(iv.dom.extent for iv in blk.iter_vars),
            reads=frozenset(r.source.name for r in blk.reads),
            writes=writes,
            writes_output=bool(writes - scratch),
        ))
    return result


def same_extent(a, b) -> bool:
    """Whether two (possibly symbolic) extents are provably equal."""
    return bool(Analyzer().can_prove_equal(a, b))


def schedule(func, target, knobs: dict | None = None) -> s_tir.Schedule:
    """Schedule ``func`` for ``target`` (a TargetSpec) with the first matching rule."""
    module = importlib.import_module(f"{__name__}.{target.schedule_module}")
    for rule in module.RULES:
        sch = rule.apply(func, target, dict(knobs or {}))
        if sch is not None:
            return sch
    names = [type(rule).__name__ for rule in module.RULES]
    raise NoScheduleRule(f"no {target.name} schedule rule matches {func.attrs['global_symbol']}; tried {names}")
