"""A named registry filled by naming convention (Liger-style backends).

Ops (``opgen.ops``) and targets (``opgen.targets``) are both plugins: a module in the
package defines one object under an agreed attribute name (``SPEC``, ``TARGET``) and is
registered when the package is imported. One small class keeps both registries alike.
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Objects of type ``kind`` keyed by their ``name`` attribute."""

    def __init__(self, what: str, kind: type):
        self.what = what
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, item: T) -> T:
        """Add ``item`` (idempotent for the same object; a different one of that name is an error)."""
        existing = self._items.get(item.name)
        if existing is not None and existing is not item:
            raise ValueError(f"{self.what} {item.name!r} registered twice")
        self._items[item.name] = item
        return item

    def discover(self, package: str, paths, attribute: str) -> None:
        """Import every module of ``package`` and register its ``attribute`` if it is a ``kind``."""
        for info in pkgutil.iter_modules(paths):
            module = importlib.import_module(f"{package}.{info.name}")
            item = getattr(module, attribute, None)
            if isinstance(item, self.kind):
                self.register(item)

    def get(self, name: str) -> T:
        if name not in self._items:
            raise KeyError(f"unknown {self.what} {name!r}; registered: {sorted(self._items)}")
        return self._items[name]

    def all(self) -> list[T]:
        return [self._items[n] for n in sorted(self._items)]
