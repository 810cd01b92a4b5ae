"""The target registry and protocol: what a target is, independent of any op.

A target module in this package defines ``TARGET``, an instance of a ``TargetSpec``
subclass; it is registered on import (Liger-style backends). Adding a target:
  1. write ``targets/<name>.py`` (or a package) with a frozen dataclass subclassing
     ``TargetSpec`` that overrides what differs from the defaults below;
  2. write ``schedules/<name>.py`` with a ``RULES`` list (see schedules/__init__.py), or
     declare ``schedule_rules=None`` when the target's compiler schedules for itself;
  3. nothing else: tests, ``opgen generate``, ``opgen targets``, the tuner and opgen.torch
     discover it here.

Everything opgen asks of a target is declared on ``TargetSpec`` with a documented default,
so core code calls it directly: no ``getattr``/``hasattr`` probe, and no target name in
core code (tinygrad's renderers and TVM dlight's rule namespaces are declared the same way).
The protocol, by concern:

* where it runs: ``missing``, ``can_build``, ``can_run``, ``run_place``;
* what it compiles for: ``tvm_target``, ``device``, ``dlpack_device_types``,
  ``hardware_key`` (what a tuning record must match), ``for_product``;
* how it builds: ``schedule_rules``, ``build``, and the module interface ``source_of``,
  ``artifacts``, ``scratch_of``, ``compile_check``, ``library_suffix`` (disk cache);
* how it is measured: ``timer``, ``cost_model``;
* what it adds: ``tools`` (CLI commands, e.g. Ascend's ``opgen tiling``), ``own_suite``
  (tests that build it in a suite of their own), ``default`` (the target used when none is
  chosen).
"""
from __future__ import annotations

from dataclasses import dataclass

from opgen.registry import Registry

# How the tuner times a candidate (TargetSpec.timer).
TIME_EVALUATOR = "time_evaluator"   # TVM's time_evaluator on the module: device time
WALL_CLOCK = "wall_clock"           # the host's clock around a synchronised call (not a TVM module)
MODEL = "model"                     # a cost model's estimate (TargetSpec.cost_model), never a clock


@dataclass(frozen=True)
class TargetSpec:
    """A place kernels are built for and (maybe) run on.

    Fields (all hashed into the kernel cache key; none into the tuning key, which is
    ``hardware_key``):
      * ``name``: what users pass to ``opgen.set_target``/``OPGEN_TARGET``;
      * ``description``: one line for tables and errors;
      * ``library_suffix``: the extension of a built kernel exported to the disk cache
        ("" when the target's modules cannot be exported: they are rebuilt per process);
      * ``schedule_rules``: the ``schedules/`` module holding its rules; "" means the
        target's name with "-" as "_", None means it has no rules (its compiler schedules);
      * ``timer``: how the tuner times its modules (TIME_EVALUATOR, WALL_CLOCK, MODEL);
      * ``tools``: modules adding ``opgen`` subcommands (see ``opgen.cli``);
      * ``own_suite``: the test file that exercises it when the generic ``target``
        fixture should not (its builds are slow); "" when the generic tests run it;
      * ``default``: the target used when neither ``set_target`` nor ``OPGEN_TARGET``
        chose one (exactly one registered target sets it).
    """

    name: str
    description: str
    library_suffix: str = ".so"
    schedule_rules: str | None = ""
    timer: str = TIME_EVALUATOR
    tools: tuple = ()
    own_suite: str = ""
    default: bool = False

    def __post_init__(self):
        if not self.name or not all(ch.isalnum() or ch in "-_" for ch in self.name):
            raise ValueError(f"bad target name {self.name!r}")
        if self.timer not in (TIME_EVALUATOR, WALL_CLOCK, MODEL):
            raise ValueError(f"target {self.name}: unknown timer {self.timer!r}")

    # ---- where it runs ------------------------------------------------------------------

    def missing(self) -> str | None:
        """Why this machine cannot build this target's kernels (None: it can)."""
        return None

    def can_build(self) -> bool:
        return self.missing() is None

    def can_run(self) -> bool:
        """Whether kernels for this target can execute on this machine."""
        raise NotImplementedError

    def run_place(self) -> str:
        """Where kernels run, for tables ("PoCL (pthread-AMD EPYC)", "no GPU")."""
        return "here" if self.can_run() else "not here"

    # ---- what it compiles for -----------------------------------------------------------

    def tvm_target(self):
        raise NotImplementedError

    def device(self):
        """The TVM device kernels run on."""
        raise NotImplementedError

    def dlpack_device_types(self) -> tuple[int, ...]:
        """DLPack device types of the tensors its kernels take (1 kDLCPU, 2 kDLCUDA):
        opgen.torch runs a tensor's call on a target that serves the tensor's device."""
        return (self.device().dlpack_device_type(),)

    def hardware_key(self) -> dict:
        """What a tuning record measured on this target must match to be used here: the
        hardware, named explicitly (JSON values). Default: the TVM target string (for llvm
        the CPU model and core count). A field added to a target class does not change it."""
        return {"tvm": str(self.tvm_target())}

    def for_product(self, product: str) -> "TargetSpec":
        """This target as configured for ``product`` (an opgen.config product name).

        Most targets do not depend on the product and return themselves. A target whose
        code depends on the hardware the product names (Ascend: UB bytes, core count,
        available copy instructions) returns a copy bound to that hardware description;
        since targets are frozen dataclasses, the kernel cache keys on the whole object,
        so kernels for two products never stand in for each other.
        """
        return self

    # ---- how it builds ------------------------------------------------------------------

    @property
    def schedule_module(self) -> str | None:
        """The ``opgen.schedules`` module with this target's rules (None: none)."""
        if self.schedule_rules is None:
            return None
        return self.schedule_rules or self.name.replace("-", "_")

    def build(self, mod):
        """Compile an IRModule of scheduled PrimFuncs; returns a runtime module (a TVM
        module, or an object with ``module[symbol] -> callable`` over TVM tensors)."""
        raise NotImplementedError

    def source_of(self, module) -> tuple[str, str] | None:
        """(file name, text) of the generated source worth reading, or None (llvm)."""
        return None

    def artifacts(self, module) -> dict:
        """Further generated files, relative path -> text (Ascend: a CANN op project)."""
        return {}

    def scratch_of(self, module):
        """The module's own scratch buffers (``opgen.kernels.Scratch``), or None when its
        scratch is the TIR's hoisted pass buffers (every TVM-built target)."""
        return None

    def compile_check(self, module, out_dir=None) -> list | None:
        """Reports of a compiler this target's code must pass beyond ``build`` (cuda: nvcc
        per architecture), each with ``arch``, ``ok``, ``error``, ``max_registers`` and
        ``spill_bytes``; None when there is none."""
        return None

    # ---- how it is measured -------------------------------------------------------------

    def cost_model(self):
        """A model for tuning without the hardware (``name``, ``estimate(op, combo, target,
        problem, knobs) -> seconds``), or None: candidates are timed by ``timer``."""
        return None


@dataclass(frozen=True)
class GpuTargetSpec(TargetSpec):
    """A target the shared GPU rules (schedules/gpu.py) schedule for: blocks of threads."""

    max_threads: int = 1024          # threads per block the hardware allows


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
