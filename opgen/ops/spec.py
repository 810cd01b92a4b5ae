"""What an op is: its dtype combos and its OpSpec (see opgen.ops for the registry).

Op modules import these declarations from here while the ``opgen.ops`` package discovers
the op modules, so the two never import each other.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from opgen.products import PRODUCTS
from opgen.dtypes import ALL_FLOATS, short


@dataclass(frozen=True)
class DtypeCombo:
    """One supported assignment of dtypes to the kernel's tensors (inputs then outputs)."""

    dtypes: tuple[tuple[str, str], ...]
    key_tensors: tuple[str, ...]

    def __post_init__(self):
        names = [n for n, _ in self.dtypes]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate tensor in dtype combo {names}")
        for name, dt in self.dtypes:
            if dt not in ALL_FLOATS:
                raise ValueError(f"tensor {name}: unsupported dtype {dt}")
        missing = set(self.key_tensors) - set(names)
        if missing:
            raise ValueError(f"key tensors {sorted(missing)} not in combo")

    def __getitem__(self, tensor: str) -> str:
        return dict(self.dtypes)[tensor]

    @property
    def tag(self) -> str:
        """Short stable name, e.g. ``f16-f32``: the key tensors' dtypes in order."""
        return "-".join(short(self[t]) for t in self.key_tensors)


@dataclass(frozen=True)
class OpSpec:
    """Everything opgen knows about one operator, independent of any target.

    ``compute(combo)`` returns the TE tensors in kernel argument order (placeholders first,
    then outputs), all with symbolic extents so one kernel serves every shape.
    ``products`` maps a product name to the combos it documents; a product that is absent
    does not offer the op. ``problems`` are named problem sizes that ``opgen generate``
    verifies; ``random_inputs(problem, combo, rng)`` makes inputs in the user's shapes and
    ``kernel_args(problem, arrays)`` views them in the kernel's canonical shapes and
    ``reference(problem, arrays)`` gives the float64 outputs in the user's shapes.
    """

    name: str
    aclnn_name: str
    doc: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    combos: tuple[DtypeCombo, ...]
    products: Mapping[str, tuple[DtypeCombo, ...]]
    compute: Callable[[DtypeCombo], list]
    reference: Callable[..., dict]
    random_inputs: Callable[..., dict]
    kernel_args: Callable[..., dict]
    problems: tuple[Any, ...] = field(default=())
    # The aclnn face (opgen.apispec.ApiSpec): parameters in the seed's order, documented
    # error lines, how a call maps onto the kernel. None: no aclnn functions are generated.
    api: Any = None
    # Floating-point operations per element of the first input, counted from the TE stages:
    # the x axis of a roofline (opgen bench --plot). 0: not counted.
    flops_per_element: int = 0

    def __post_init__(self):
        if not self.name.isidentifier():
            raise ValueError(f"op name {self.name!r} must be an identifier")
        unknown = set(self.products) - set(PRODUCTS)
        if unknown:
            raise ValueError(f"{self.name}: unknown products {sorted(unknown)}")
        for product, combos in self.products.items():
            stray = [c.tag for c in combos if c not in self.combos]
            if stray:
                raise ValueError(f"{self.name}/{product}: combos {stray} not in the op's combos")
        tensors = self.inputs + self.outputs
        for combo in self.combos:
            if tuple(n for n, _ in combo.dtypes) != tensors:
                raise ValueError(f"{self.name}: combo {combo.tag} does not list {tensors}")

    def combo(self, tag: str) -> DtypeCombo:
        for candidate in self.combos:
            if candidate.tag == tag:
                return candidate
        raise KeyError(f"{self.name} has no dtype combo {tag!r}; known: {[c.tag for c in self.combos]}")


def as_float32(expr):
    """Widen a TE expression to float32: the accumulation type of every op here."""
    return expr if expr.dtype == "float32" else expr.astype("float32")
