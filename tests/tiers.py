"""The two test tiers, and how a parametrized test puts its cases in them.

The default tier (``python -m pytest -q``, what the README and CI run) guards every rule
once: every op on llvm over its edge shapes, every error rule, every pattern on every
target through representative kernels, the races, packaging and structure. The extended
tier (cases marked ``full``) holds the rest of the op x combo x target matrix: the same
checks over every kernel. ``opgen generate``, which CI runs first, verifies every kernel
against the float64 reference as well.

    python -m pytest -q                  # the default tier
    python -m pytest -q -m full          # the extended tier only
    OPGEN_TESTS=full python -m pytest -q # both

A new test joins the default tier only if it guards something no other default test
does; a matrix over every kernel puts its representatives there (``covering``) and the
other cases in the extended tier.
"""
from __future__ import annotations

import functools
import os

import pytest

FULL = pytest.mark.full


def full_in_environment() -> bool:
    """``OPGEN_TESTS=full``: both tiers (a test that scales itself, like hypothesis's number
    of examples, reads it too)."""
    return os.environ.get("OPGEN_TESTS", "").strip().lower() == "full"


def everything_requested(config) -> bool:
    """Both tiers: ``OPGEN_TESTS=full``, or a ``-m`` expression that names the tier (then
    pytest's own marker filter decides)."""
    return full_in_environment() or "full" in (config.option.markexpr or "")


def dtype_set(combo) -> frozenset:
    """What changes the casts a target emits, unlike the position of each dtype in the tag or
    a variant's missing input (``-nodsum``): the float dtypes a combo mixes (``bf16-f32-f32``
    -> {bf16, f32}); for a combo with an integer tensor, its integer dtypes alone (the kernels
    compute in float32 and cast an integer only to or from it, so one combo per integer dtype
    shows that cast; the float mixes are shown by the float combos)."""
    dtypes = {dt for _, dt in combo.dtypes}
    integers = frozenset(dt for dt in dtypes if dt.startswith(("int", "uint")))
    return integers or frozenset(dtypes)


def pattern_of(op, target: str = "llvm") -> str:
    """What an op's kernels exercise on ``target`` beyond their dtypes: the schedule rule its
    pattern matches there (by pattern matching alone, on its first combo: an op's combos share
    their stages, so their pattern); an op that falls back to a target's catch-all rule, or
    any op of a target without rules, is a pattern of its own (its name)."""
    return _pattern(op.name, target)


@functools.lru_cache(maxsize=None)
def _pattern(op_name: str, target: str) -> str:
    from opgen import kernels
    from opgen.ops import get_op
    from opgen.targets import get_target
    op = get_op(op_name)
    rule = kernels.matching_rule(op, op.combos[0], get_target(target))
    name = type(rule).__name__ if rule is not None else ""
    return op_name if not name or "Fallback" in name else name


def covering(pairs, target: str = "llvm") -> list:
    """Of (op, combo, ...) tuples, in their order: the first kernel of each schedule pattern
    on ``target`` (``pattern_of``: the rule its pattern matches there; each op on a catch-all
    rule counts as its own), then, for each dtype mix none of those shows, one pair with it,
    taken from the op with the most combos first (BatchNormBackward's 25 rows show most mixes
    at once; an op registered later, or sorted first by name, does not take every mix over).
    Every rule a target has and every cast it emits, once: a new op written in an existing
    pattern adds no default-tier kernel to the per-target matrices (the extended tier and
    ``opgen generate`` build it on every target)."""
    pairs = list(pairs)
    kept, seen_patterns, seen_mixes = [], set(), set()
    for pair in pairs:
        pattern = pattern_of(pair[0], target)
        if pattern not in seen_patterns:
            kept.append(pair)
            seen_patterns.add(pattern)
            seen_mixes.add(dtype_set(pair[1]))
    for pair in sorted(pairs, key=lambda p: -len(p[0].combos)):   # stable: ties keep their order
        if dtype_set(pair[1]) not in seen_mixes:
            kept.append(pair)
            seen_mixes.add(dtype_set(pair[1]))
    return [pair for pair in pairs if pair in kept]


def tiered(cases, keep, ids=None) -> list:
    """``cases`` as pytest params, those not in ``keep`` marked for the extended tier."""
    keep = list(keep)
    names = ids if ids is not None else [None] * len(cases)
    return [pytest.param(*(case if isinstance(case, tuple) else (case,)), id=name,
                         marks=() if case in keep else FULL)
            for case, name in zip(cases, names)]


def each_dtype_mix(op, value=lambda combo: combo) -> list:
    """The op's combos as pytest params (``value(combo)``, id its tag): the first of each
    dtype mix in the default tier (``covering``), the others extended."""
    return _combo_params(op, {combo.tag for _, combo in covering([(op, c) for c in op.combos])}, value)


def _combo_params(op, kept_tags, value) -> list:
    """The op's combos as pytest params (``value(combo)``, id its tag), those whose tag is not
    in ``kept_tags`` marked for the extended tier."""
    return [pytest.param(value(c), id=c.tag, marks=() if c.tag in kept_tags else FULL) for c in op.combos]


@functools.lru_cache(maxsize=None)
def kernels_kept_on(target: str) -> frozenset:
    """(op name, combo tag) of the kernels ``covering`` keeps on ``target`` over every
    registered op, in registration order: the default tier's kernels of that target for the
    tests that any op's module repeats there (its kernel against the reference, its GPU
    casts). One op's module keeping every mix of its own on each target built the same
    pattern and the same casts once per op; over every op, a pattern and a dtype mix are
    built once per target, and an op written in a pattern other ops already show there keeps
    none (its own module runs it on the default target; the extended tier and ``opgen
    generate`` everywhere)."""
    from opgen.ops import all_ops
    pairs = [(op, combo) for op in all_ops() for combo in op.combos]
    return frozenset((op.name, combo.tag) for op, combo in covering(pairs, target))


def kept_on(op, target: str, value=lambda combo: combo) -> list:
    """The op's combos as pytest params (``value(combo)``, id its tag) for a test on
    ``target``, not the default one: those ``kernels_kept_on(target)`` holds in the default
    tier, the others extended."""
    return _combo_params(op, {tag for name, tag in kernels_kept_on(target) if name == op.name}, value)
