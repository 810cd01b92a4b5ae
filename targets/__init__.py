"""The target registry and protocol: what a target is, independent of any op.

A target module in this package defines ``TARGET``, an instance of a ``TargetSpec``
subclass; it is registered on import (Liger-style backends). Adding a target:
  1. write ``targets/<name>.py`` (or a package) with a frozen dataclass subclassing
     ``TargetSpec`` that overrides what differs from the defaults below;
  2. write ``schedules/<name>.py`` with a ``RULES`` list (see schedules/__init__.py), or
     declare ``schedule_rules=None`` when the target's compiler schedules for itself;
  3. nothing else: tests, ``opgen generate``, ``opgen targets``, the tuner and opgen.torch
     discover it here.

Everything opgen asks of a target is declared on ``TargetSpec`` (``opgen.targets.spec``) with
a documented default,
so core code calls it directly: no ``getattr``/``hasattr`` probe, and no target name in
core code (tinygrad's renderers and TVM dlight's rule namespaces are declared the same way).
The protocol, by concern:

* where it runs: ``missing``, ``can_build``, ``can_run``, ``run_place``, ``simulated``
  (the same kernels on a checking simulator, or None);
* what it compiles for: ``tvm_target``, ``device``, ``dlpack_device_types``,
  ``hardware_key`` (what a tuning record must match), ``for_product``;
* how it builds: ``schedule_rules``, ``build``, and the module interface ``loaded`` (the
  module that runs), ``source_of``, ``artifacts``, ``scratch_of``, ``compile_check``,
  ``library_suffix`` (disk cache);
* how it runs next to other libraries: ``share_host_threads`` (torch's OpenMP pool);
* how it is measured: ``timer``, ``cost_model``;
* what it adds: ``tools`` (CLI commands, e.g. Ascend's ``opgen tiling``), ``own_suite``
  (tests that build it in a suite of their own), ``default`` (the target used when none is
  chosen).
"""
from __future__ import annotations

from opgen.registry import Registry
from opgen.targets.spec import (MODEL, TIME_EVALUATOR, WALL_CLOCK, GpuTargetSpec, Scratch,  # noqa: F401
                                TargetSpec)

_REGISTRY = Registry("target", TargetSpec)
register = _REGISTRY.register
get_target = _REGISTRY.get
all_targets = _REGISTRY.all


def default_target() -> TargetSpec:
    """The registered target marked ``default`` (the host CPU's)."""
    marked = [t for t in all_targets() if t.default]
    if len(marked) != 1:
        raise LookupError(f"exactly one target must be the default; marked: {[t.name for t in marked]}")
    return marked[0]


def serving(dlpack_device_type: int) -> list[TargetSpec]:
    """Registered targets whose kernels take tensors of this DLPack device type, those that
    can run here first (opgen.torch: where a tensor's call runs)."""
    serving = [t for t in all_targets() if dlpack_device_type in t.dlpack_device_types()]
    return sorted(serving, key=lambda t: not t.can_run())


_REGISTRY.discover(__name__, __path__, "TARGET")
