"""The operator registry: each module in this package defines one op and registers it.

An op is its math (a TE compute with named stages) plus its spec (tensors, dtype combos per
product, problem shapes). Nothing here names a target or a tile size: schedules/ and
targets/ decide how the math runs. Modules are discovered by naming convention: every
module in this package that defines ``SPEC`` is registered on import of ``opgen.ops``.
"""
from __future__ import annotations

from opgen.products import PRODUCTS  # noqa: F401  (re-exported: the product names)
from opgen.ops.spec import DtypeCombo, OpSpec, as_float32  # noqa: F401  (re-exported)
from opgen.registry import Registry

_REGISTRY = Registry("op", OpSpec)
register = _REGISTRY.register
get_op = _REGISTRY.get
all_ops = _REGISTRY.all


def unknown_op(names) -> str | None:
    """The one-line complaint about the first of ``names`` that is no registered op, listing
    the registered ones (None: all are). Every subcommand that takes an op says this, so a
    misspelt op is named as such instead of surfacing as some later, unrelated problem."""
    registered = [op.name for op in all_ops()]
    unknown = [name for name in names if name not in registered]
    if not unknown:
        return None
    return f"unknown op {unknown[0]!r}; registered ops: {', '.join(registered)}"


_REGISTRY.discover(__name__, __path__, "SPEC")
