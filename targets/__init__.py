"""The target registry: what a target is, independent of any op.

A target module in this package defines ``TARGET``, an instance of a ``TargetSpec``
subclass; it is registered on import (Liger-style backends). Adding a target:
  1. write ``targets/<name>.py`` with a frozen dataclass subclassing ``TargetSpec``;
  2. write ``schedules/<name>.py`` with a ``RULES`` list (see schedules/__init__.py);
  3. add the name to the tests' ``target`` fixture parameters.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass


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

    def can_run(self) -> bool:
        """Whether kernels for this target can execute on this machine."""
        raise NotImplementedError

    def build(self, mod):
        """Compile an IRModule of scheduled PrimFuncs; returns a runtime module."""
        raise NotImplementedError


_REGISTRY: dict[str, TargetSpec] = {}


def register(target: TargetSpec) -> TargetSpec:
    existing = _REGISTRY.get(target.name)
    if existing is not None and existing is not target:
        raise ValueError(f"target {target.name!r} registered twice")
    _REGISTRY[target.name] = target
    return target


def _discover() -> None:
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        target = getattr(module, "TARGET", None)
        if isinstance(target, TargetSpec):
            register(target)


def get_target(name: str) -> TargetSpec:
    if name not in _REGISTRY:
        raise KeyError(f"unknown target {name!r}; registered: {sorted(_REGISTRY)}")
    return _REGISTRY[name]


def all_targets() -> list[TargetSpec]:
    return [_REGISTRY[n] for n in sorted(_REGISTRY)]


_discover()
