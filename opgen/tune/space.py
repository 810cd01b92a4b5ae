"""The search space of one tuning problem, read from the schedule rule that matches it.

Nothing here names a knob: the matched rule declares its knobs (``knobs(target)``) and
its constraints (``check_knobs``), so a new rule's knobs are tuned without a change here.
A point is a dict knob -> value; invalid points are pruned before anything is built.
The default point is what an untuned call of this shape runs (the rule's defaults, with its
``knobs_for_shapes`` where it declares them); it is always a member and measured first, so
tuning is never slower than not tuning.

Features for the cost model: one number per knob, log2 of positive numeric values (the
knobs here are sizes that act multiplicatively), the domain index otherwise.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from opgen import kernels, schedules
from opgen.dtypes import numpy_dtype


def matching_rule(op, combo, target):
    """The rule of the target that matches the op's function (as the kernel cache picks)."""
    rule = kernels.matching_rule(op, combo, target)
    if rule is None:
        raise schedules.NoScheduleRule(f"target {target.name} has no schedule rules: nothing to tune")
    return rule


def parse_problem(op, text: str):
    """An op's Problem from a shape string (the op's own spelling: ProblemBase.parse)."""
    return op.parse_problem(text)


def kernel_shapes(op, problem, combo) -> dict:
    """Kernel tensor name -> its shape for ``problem``, in ``combo``'s kernel parameter
    order: what the rules read (OpSpec.kernel_shapes)."""
    return op.kernel_shapes(problem, combo)


def workload_bytes(op, combo, problem) -> int:
    """Bytes every kernel must move at least: each input read once, each output written once."""
    shapes = kernel_shapes(op, problem, combo)
    return sum(math.prod(shapes[n]) * numpy_dtype(combo[n]).itemsize for n in op.kernel_tensors(combo))


@dataclass(frozen=True)
class Space:
    """The valid points of a rule's knobs for one problem, in exhaustive order."""

    rule: object
    knobs: tuple            # schedules.Knob
    points: tuple           # tuple of dicts, default first
    pruned: int             # points the rule's constraints refused

    @property
    def default(self) -> dict:
        return self.points[0]

    def features(self, point: dict) -> np.ndarray:
        row = []
        for knob in self.knobs:
            value = point[knob.name]
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            row.append(math.log2(value) if numeric and value > 0 else float(knob.values.index(value)))
        return np.asarray(row, dtype=np.float64)

    def neighbours(self, point: dict) -> list[dict]:
        """Valid points differing from ``point`` by one knob moved one step in its domain."""
        valid = {freeze(p) for p in self.points}
        result = []
        for knob in self.knobs:
            i = knob.values.index(point[knob.name])
            for j in (i - 1, i + 1):
                if 0 <= j < len(knob.values):
                    moved = {**point, knob.name: knob.values[j]}
                    if freeze(moved) in valid:
                        result.append(moved)
        return result


def freeze(point: dict) -> tuple:
    return tuple(sorted(point.items()))


def build_space(rule, target, shapes: dict | None, func=None) -> Space:
    """Enumerate the rule's knob space for a problem (``shapes``: kernel shapes or None;
    ``func``: the unscheduled PrimFunc, so that the rule can refuse points the problem
    cannot run, e.g. tilings that do not fit the UB, before they cost a trial)."""
    fixed = set(rule.call_knobs(target))   # decided per call (alignment), never tuned
    knobs = tuple(k for k in schedules.rule_knobs(rule, target) if k.name not in fixed)
    default = {n: v for n, v in schedules.default_knobs(rule, target).items() if n not in fixed}
    if shapes is not None:   # what an untuned call of this shape uses
        default = {**default, **{n: v for n, v in rule.knobs_for_shapes(target, shapes).items() if n not in fixed}}
    points, pruned = [default], 0
    for values in itertools.product(*(k.values for k in knobs)):
        point = dict(zip((k.name for k in knobs), values))
        if point == default:
            continue
        if schedules.check_knobs(rule, point, target, shapes, func):
            pruned += 1
            continue
        points.append(point)
    return Space(rule, knobs, tuple(points), pruned)


def space_for(op, combo, target, problem) -> Space:
    return build_space(matching_rule(op, combo, target), target, kernel_shapes(op, problem, combo),
                       kernels.prim_func(op, combo))
