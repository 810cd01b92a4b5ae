"""Bound calls written out: a Pythonic call of one op, specialized to one call signature.

A warm call of the Pythonic layer (opgen.api) reads its signature (each tensor input's
binding key, each attribute's type and value), looks its _Prepared up, allocates the
outputs, puts the arguments in GetWorkspaceSize's order and runs the bound plan. Each of
those steps is a few Python calls and a few dict lookups: 13 µs a GroupNorm call, warm,
and about 100 µs right after a cache-evicting op (a convolution, in a training step),
when every code object and dict the call touches is a cache miss.

Once a signature has a bound call, this module writes that call out as one function of
straight-line code, as opgen.launch writes binders: a guard that compares each argument
with the signature's constants (the same fields ``_signature`` keys on: ArgKind.guard
for tensors, ``_value_guard`` for the rest, then the product and target), and on a match
the outputs made with the signature's shapes and dtypes, the argument tuple in
GetWorkspaceSize's order and the bound run. A call that does not match gets None and
takes the general path. Measured (2 cores, torch tensors, GroupNorm (2,8,4x4)): 12.9 ->
6.9 µs warm, 108 -> 64 µs right after touching 64 MB (kernel included, prototype).

An op keeps up to MAX_PER_OP written calls (a model calls a norm at a few shapes) and
tries them in the order they were made; they go when the plan cache is cleared.
"""
from __future__ import annotations

import math

from opgen import aclnn, config
from opgen.binding import kind_of

MAX_PER_OP = 8
_CALLS: dict = {}   # op name -> tuple of written calls


def calls_of(op_name: str) -> tuple:
    """The written calls of an op (empty when none), in the order to try them."""
    return _CALLS.get(op_name, ())


def forget() -> None:
    _CALLS.clear()


aclnn.on_plan_cache_clear(forget)   # a written call holds a plan, like a bound one


class _Source:
    """Lines and constants of one written call."""

    def __init__(self):
        self.guards: list[str] = []
        self.namespace: dict = {}
        self.constants = 0

    def constant(self, value) -> str:
        """The name under which ``value`` is in the call's namespace."""
        name = f"c{self.constants}"
        self.constants += 1
        self.namespace[name] = value
        return name


def _value_guard(src: _Source, name: str, value) -> bool:
    """Append the guard of an attribute or mask ``name`` equal to ``value`` in type and
    value as opgen.binding.value_key tells them apart (a float by its bits, list items by
    type); False when none is written for it (a nan, a type not keyed by value)."""
    kind = type(value)
    if value is None or kind is bool:
        src.guards.append(f"{name} is {value}")
    elif kind is int or kind is str:
        src.guards.append(f"type({name}) is {kind.__name__} and {name} == {src.constant(value)}")
    elif kind is float:
        if math.isnan(value):
            return False   # never equal to itself
        sign = "" if value != 0.0 else f" and copysign(1.0, {name}) == {math.copysign(1.0, value)}"
        src.guards.append(f"type({name}) is float and {name} == {src.constant(value)}{sign}")
    elif kind in (list, tuple) and all(type(item) in (int, bool) for item in value):
        src.guards.append(f"type({name}) is {kind.__name__} and len({name}) == {len(value)}")
        for i, item in enumerate(value):
            _value_guard(src, f"{name}[{i}]", item)
    else:
        return False
    return True


def _tensor_guard(src: _Source, name: str, value) -> bool:
    """Append the guard of tensor input ``name`` with ``value``'s type and binding key."""
    if value is None:
        src.guards.append(f"{name} is None")
        return True
    guard = kind_of(value).guard(name, value, src.constant)
    if guard is None:
        return False
    src.guards.append(f"type({name}) is {src.constant(type(value))} and {guard}")
    return True


def _output_lines(src: _Source, prepared, count: int, make: dict) -> list[str]:
    """``o<i> = ...`` for each output the call makes (None for the others), by the
    allocators in ``make`` (opgen.api's, by the name _Prepared.new gives: ``alloc``,
    ``zeros``, ``placeholder``)."""
    lines = [f"    o{i} = None" for i in range(count)]
    for index, maker, library, shape, dtype, device in prepared.new:
        function = src.constant(make[maker])
        lines[index] = (f"    o{index} = {function}({src.constant(library)}, {src.constant(shape)}, "
                        f"{src.constant(dtype)}, {src.constant(device)})")
    return lines


def write(op, layout, values: tuple, prepared, make: dict):
    """The written call of ``op`` for the signature of ``values`` (whose _Prepared, with a
    bound call, is ``prepared``), or None when some value has no guard."""
    src = _Source()
    names = [f"v{i}" for i in range(len(values))]
    for name, value, is_input in zip(names, values, layout.is_input):
        if not (_tensor_guard if is_input else _value_guard)(src, name, value):
            return None
    outputs = len(prepared.wanted)
    pool = names + [src.constant(d) for d in prepared.derived] + [f"o{i}" for i in range(outputs)]
    arguments = ", ".join(pool[i] for i in layout.permutation)
    returned = ", ".join(f"o{i}" if want else "None" for i, want in enumerate(prepared.wanted))
    src.namespace.update(copysign=math.copysign, context=config.context, run_bound=aclnn.run_bound,
                         op=op, bound=prepared.bound, context_key=config.context(), failed=make["failed"])
    lines = ["def call(values):", f"    {', '.join(names)}{',' if len(names) == 1 else ''} = values",
             "    try:   # a guard never raises for the caller (a nested tensor has no sizes)",
             f"        if not ({' and '.join(src.guards) or 'True'}) or context() != context_key:",
             "            return None",
             "    except Exception:",
             "        return None",
             *_output_lines(src, prepared, outputs, make),
             f"    status = run_bound(op, bound, ({arguments},))",
             "    if status:",
             "        failed(status)",
             f"    return ({returned},)"]
    source = "\n".join(lines) + "\n"
    exec(source, src.namespace)  # noqa: S102 (names and constants are ours; values are in the namespace)
    call = src.namespace["call"]
    call.source = source
    return call


def remember(op, layout, values: tuple, prepared, make: dict) -> None:
    """Write the call of this signature and keep it, if the op has room for one more."""
    known = _CALLS.get(op.name, ())
    if len(known) >= MAX_PER_OP or prepared.bound is None:
        return
    call = write(op, layout, values, prepared, make)
    if call is not None:
        _CALLS[op.name] = known + (call,)
