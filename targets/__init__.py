"""The target registry: what a target is, independent of any op.

A target module in this package defines ``TARGET``, an instance of a ``TargetSpec``
subclass; it is registered on import (Liger-style backends). Adding a target:
  1. write ``targets/<name>.py`` with a frozen dataclass subclassing ``TargetSpec``;
  2. write ``schedules/<name>.py`` with a ``RULES`` list (see schedules/__init__.py);
  3. add the name to the tests' ``target`` fixture parameters.
"""
from __future__ import annotations

from dataclasses import dataclass

from opgen.registry import Registry


@dataclass(frozen=True)
class TargetSpec:
    """A place kernels are built for and (maybe) run on.

    ``name`` is what users pass to ``opgen.set_target``/``OPGEN_TARGET`` and what the
    schedule module is called. ``library_suffix`` is the file extension of a built kernel
    exported to the disk cache ("" when the target's kernels cannot be exported).
    """

    name: str
    description: str
    library_suffix: str = ".so"

    def __post_init__(self):
        if not self.name or not all(ch.isalnum() or ch in "-_" for ch in self.name):
            raise ValueError(f"bad target name {self.name!r}")

    @property
    def schedule_module(self) -> str:
        return self.name.replace("-", "_")

    def tvm_target(self):
        raise NotImplementedError

    def device(self):
        """The TVM device kernels run on."""
        raise NotImplementedError

    def can_build(self) -> bool:
        return True

    def for_product(self, product: str) -> "TargetSpec":
        """This target as configured for ``product`` (an opgen.config product name).

        Most targets do not depend on the product and return themselves. A target whose
        code depends on the hardware the product names (Ascend: UB bytes, core count,
        available copy instructions) returns a copy bound to that hardware description;
        since targets are frozen dataclasses, the kernel cache keys on the whole object,
        so kernels for two products never stand in for each other.
        """
        return self

    def can_run(self) -> bool:
        """Whether kernels for this target can execute on this machine."""
        raise NotImplementedError

    def build(self, mod):
        """Compile an IRModule of scheduled PrimFuncs; returns a runtime module."""
        raise NotImplementedError


_REGISTRY = Registry("target", TargetSpec)
register = _REGISTRY.register
get_target = _REGISTRY.get
all_targets = _REGISTRY.all
_REGISTRY.discover(__name__, __path__, "TARGET")
