"""The target protocol: what opgen asks of a target, declared once with its defaults.

See opgen.targets (the package) for the protocol by concern and the recipe for a new
target. This module holds the declarations only, so that target modules can import them
while the package discovers those modules (no import cycle between the two).
"""
from __future__ import annotations

from dataclasses import dataclass

# How the tuner times a candidate (TargetSpec.timer).
TIME_EVALUATOR = "time_evaluator"   # TVM's time_evaluator on the module: device time
WALL_CLOCK = "wall_clock"           # the host's clock around a synchronised call (not a TVM module)
MODEL = "model"                     # a cost model's estimate (TargetSpec.cost_model), never a clock


class ProblemRefused(RuntimeError):
    """A target's own host code refuses a problem on its hardware, as the device's would
    (Ascend's TilingFunc: rows that are not whole 32-byte blocks on a product without
    DataCopyPad): not a wrong kernel. ``opgen generate`` verifies a kernel on the sample
    problems its target takes and says how many it refused."""


@dataclass(frozen=True)
class Scratch:
    """A buffer that carries data from one loop nest to a later one (the partial sums of a
    split reduction). It is a kernel parameter so that its memory belongs to the caller:
    the aclnn workspace, sized by GetWorkspaceSize, instead of a hidden allocation. The
    compiler makes them from the TIR; a target's own module may declare its own
    (``TargetSpec.scratch_of``)."""

    name: str
    dtype: str
    shape: object   # PrimExprs over the kernel's size variables, or a function of the kernel
                    # shapes (tensor name -> shape) for a module that sizes its own scratch


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
        chose one (exactly one registered target sets it);
      * ``peer_name``: non-empty for a second compiler of the same formulas (IREE): the
        name ``opgen compare --against`` takes for it, and its contender in ``opgen bench``.
    """

    name: str
    description: str
    library_suffix: str = ".so"
    schedule_rules: str | None = ""
    timer: str = TIME_EVALUATOR
    tools: tuple = ()
    own_suite: str = ""
    default: bool = False
    peer_name: str = ""

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

    def numeric_check(self) -> str | None:
        """For a target that cannot run here: how its kernels' numbers are checked here all
        the same (ascend-mlir: what bishengir accepted, run back on this CPU by IREE), or
        None. ``opgen generate`` verifies such a target's kernels like any other's."""
        return None

    def run_place(self) -> str:
        """Where kernels run, for tables ("PoCL (pthread-AMD EPYC)", "no GPU")."""
        return "here" if self.can_run() else "not here"

    def hardware_summary(self) -> str | None:
        """The hardware its kernels are compiled for, when it is worth a line of ``opgen
        targets`` (llvm: the CPU name, its feature edits and vector extensions); None."""
        return None

    def simulated(self) -> "TargetSpec | None":
        """This target's kernels on a simulator that checks them as they run (opencl:
        Oclgrind, data races and invalid accesses raise), or None when it has none. Its
        ``missing()`` says whether the simulator is here (``opgen targets``: simulate)."""
        return None

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

    def loaded(self, module, library_path, from_disk: bool):
        """The module opgen runs, given the one built (or loaded, ``from_disk``) and the
        disk-cache library holding it (None when it is not stored). Default: ``module``.
        The CPU target runs the stored library with its parallel loops routed through a
        launcher that can use the host program's OpenMP pool (targets/llvm_threads.py)."""
        return module

    def share_host_threads(self) -> None:
        """Another library in this process (torch) now runs an OpenMP thread pool between
        opgen's calls: a target whose kernels run on host threads may join that pool
        rather than fight it for the cores. Default: nothing."""

    def source_of(self, module) -> tuple[str, str] | None:
        """(file name, text) of the generated source worth reading, or None (llvm)."""
        return None

    def artifacts(self, module) -> dict:
        """Further generated files, relative path -> text (Ascend: a CANN op project)."""
        return {}

    def op_artifacts(self, op, built: list) -> dict:
        """Files of one op across its dtype combos, relative path -> text, from ``built`` =
        [(combo tag, module)] (Ascend: the op's CANN custom-op project); {} for none."""
        return {}

    def scratch_of(self, module):
        """The module's own scratch buffers (``Scratch``), or None when its
        scratch is the TIR's hoisted pass buffers (every TVM-built target)."""
        return None

    def export_missing(self) -> str | None:
        """Why ``opgen export`` cannot write this target's device code here (None: it can):
        the code that runs without TVM, a launch plan per kernel (docs/launch-plan.md)."""
        return f"target {self.name} has no device code that runs without TVM"

    def export_code(self, mod, out_dir) -> tuple[dict, dict]:
        """Write the device code of the scheduled IRModule ``mod`` into ``out_dir``; returns
        (the plan's "code" section: its language and file names, {symbol: LaunchPlan})."""
        raise NotImplementedError(self.export_missing())

    def run_summary(self, module) -> str | None:
        """One line about the module's runs so far for ``opgen generate``'s row (ascend-emu:
        the emulation's modelled time), or None."""
        return None

    def compile_check(self, module, out_dir=None) -> list | None:
        """Reports of a compiler this target's code must pass beyond ``build`` (cuda: nvcc
        per architecture; ascend-mlir: bishengir per kernel), each with ``arch``, ``ok``,
        ``error`` and ``summary`` (one phrase for ``opgen generate``'s row); None when
        there is none."""
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

    def vector_dtypes(self) -> frozenset | None:
        """The dtypes whose tensors the vector variant of the GPU row rules may carry in
        registers on this target (schedules/gpu.py, knob ``vector``); None: every dtype."""
        return None
