"""Schedules: how each stage pattern runs on each target, never what it computes.

A schedule module ``schedules/<target>.py`` holds ``RULES``: objects with
``apply(func, target, knobs) -> s_tir.Schedule | None`` (TVM dlight's protocol; a
``PatternRule`` supplies it from its ``match`` and ``schedule``). Rules are
tried in order; ``None`` means "this rule does not match this function". Rules recognise
stages by pattern (row reduction + elementwise, column reduction) using ``blocks()`` below,
never by op name, so a new op written in the same patterns needs no schedule code.

Knobs (the tuner's search space) are declared by the rules themselves:
  * ``rule.knobs(target) -> tuple[Knob, ...]``: each knob's domain, in the order a search
    should try it, and its default (the value ``apply`` uses when the knob is not given);
  * ``rule.check_knobs(knobs, target, shapes) -> str | None``: why a point of that space is
    invalid for this target (and, when ``shapes`` names the problem's tensor shapes, for
    that problem: UB budget, threads per block, divisibility), so the tuner prunes it
    before building anything. None means valid.
  * ``rule.knobs_for_shapes(target, shapes) -> dict`` (optional): defaults that depend on
    the problem (e.g. no thread launch for a tiny one), used for a call whose shape bucket
    the tuning database does not know.
A rule without knobs may omit all three (``rule_knobs`` treats that as an empty space). Adding
a target's knobs to the tuner is only this declaration: ``opgen.tune`` reads it from here.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

from tvm import s_tir
from tvm.sym.analyzer import Analyzer


# Block annotation a rule may set on a block that writes an output: "this output is written
# once and not read again by the kernel; write it around the caches". A target that can
# (targets/llvm_stream.py) uses non-temporal stores for it; the others ignore it.
STREAMED_OUTPUT = "opgen.streamed_output"


class NoScheduleRule(LookupError):
    """No rule of the target's schedule module matched the function."""


class InvalidKnobs(ValueError):
    """A knob the matched rule does not declare, a value outside its domain, or a point
    its constraints refuse."""


class PatternRule:
    """Base of the rules that match a stage pattern: ``match(infos)`` returns what the
    pattern found in the function's blocks (None: not this pattern) and ``schedule(sch,
    matched, target, knobs)`` schedules it and returns ``sch``. ``apply`` (dlight's
    protocol) opens the schedule and ties the two, once for every rule."""

    def match(self, infos: list):
        raise NotImplementedError

    def schedule(self, sch, matched, target, knobs):
        raise NotImplementedError

    def apply(self, func, target, knobs):
        sch = s_tir.Schedule(func)
        matched = self.match(blocks(sch))
        return None if matched is None else self.schedule(sch, matched, target, knobs)


@dataclass(frozen=True)
class Knob:
    """One tunable decision of a schedule rule: a finite domain and the default.

    ``values`` is the domain in the order an exhaustive search tries it; ``default`` is
    one of them and is what the rule uses when the knob is not given.
    """

    name: str
    values: tuple
    default: object
    doc: str = ""

    def __post_init__(self):
        if not self.values or self.default not in self.values:
            raise ValueError(f"knob {self.name}: default {self.default!r} not in its domain {self.values!r}")


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


def rules_of(target) -> list:
    """The ordered schedule rules of ``target`` (its ``schedules/<name>.py``)."""
    return importlib.import_module(f"{__name__}.{target.schedule_module}").RULES


def rule_knobs(rule, target) -> tuple:
    """The knobs ``rule`` declares for ``target`` (none if it declares none)."""
    declared = getattr(rule, "knobs", None)
    return tuple(declared(target)) if declared is not None else ()


def check_knobs(rule, knobs: dict, target, shapes: dict | None = None) -> str | None:
    """Why ``knobs`` is not a valid point of ``rule``'s space on ``target``; None if it is."""
    declared = {k.name: k for k in rule_knobs(rule, target)}
    for name, value in knobs.items():
        if name not in declared:
            return f"{type(rule).__name__} has no knob {name!r} (it has {sorted(declared) or 'none'})"
        if value not in declared[name].values:
            return f"{type(rule).__name__}: {name}={value!r} is outside its domain {declared[name].values!r}"
    constraint = getattr(rule, "check_knobs", None)
    return constraint(knobs, target, shapes) if constraint is not None else None


def default_knobs(rule, target) -> dict:
    return {k.name: k.default for k in rule_knobs(rule, target)}


def schedule_with_rule(func, target, knobs: dict | None = None):
    """(the first matching rule, its Schedule of ``func`` for ``target``).

    Knobs are checked against the matching rule's declaration before they are used, so a
    misspelt knob or an out-of-domain value is an error instead of a silent default.
    """
    knobs = dict(knobs or {})
    for rule in rules_of(target):
        sch = rule.apply(func, target, {**default_knobs(rule, target), **knobs})
        if sch is None:
            continue
        problem = check_knobs(rule, knobs, target)
        if problem:
            raise InvalidKnobs(problem)
        return rule, sch
    names = [type(rule).__name__ for rule in rules_of(target)]
    raise NoScheduleRule(f"no {target.name} schedule rule matches {func.attrs['global_symbol']}; tried {names}")


def schedule(func, target, knobs: dict | None = None) -> s_tir.Schedule:
    """Schedule ``func`` for ``target`` (a TargetSpec) with the first matching rule."""
    return schedule_with_rule(func, target, knobs)[1]
