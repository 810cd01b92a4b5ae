"""``ascend-emu``: Ascend vector-core kernels, scheduled from a hardware description.

The target is bound to one product's hardware description (targets/ascend/hardware.py):
``for_product`` returns a copy bound to that product, so the kernel cache, which keys on
the whole frozen target, never lets a kernel tiled for one UB size stand in for another.
Its schedule rules live in schedules/ascend.py (``schedule_module`` is "ascend" for every
Ascend target, whatever its name), its code comes from the AscendC emitter, and it runs
the emitted code under the CPU emulation of the AscendC API (targets/ascend/emu/).

``build`` prints the CANN custom-op project (targets/ascend/build.py), compiles kernel +
host tiling + emulation with g++ and returns a module whose ``[symbol]`` runs the kernel on
emulated cores. It needs g++ and the emulation header (targets/ascend/emu/); without them
the target neither builds nor runs. The four schedule patterns (rows, groups, channels,
segments) have printers; a function no pattern matches, or a pattern without a printer, raises
NotImplementedError naming it: ``opgen generate`` reports such a row as NOT EMITTED
instead of failing it. Statistics that are outputs (a forward norm's per-row rstd, or mean
and rstd; per-(n, group) mean and rstd) are found by the stage graph (a row or task stage
that writes a parameter): the row kernel stores each UB pass's values with one copy per
output (split-N, small-D and split-D alike), the group kernel collects them in UB and
stores every TASKS_PER_STORE tasks; a sum over the data that reads such a per-task value
(a centred variance) is a second phase over the task's data. On products without
DataCopyPad (Atlas training, Atlas inference) the copies are whole-block DataCopy, the
host tiling refuses shapes whose rows are not whole 32-byte blocks, and output statistics
are scalar GM writes flushed from the data cache once per core.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from opgen.lazy import tvm
from opgen.products import DEFAULT_PRODUCT
from opgen.targets.spec import MODEL, TargetSpec
from opgen.targets.ascend.build import EmuKernel, EmuModule, compile_project, emulation_available, project
from opgen.targets.ascend.costmodel import AscendEmulated
from opgen.targets.ascend.exprs import EmitError
from opgen.targets.ascend.hardware import AscendHardware, describe
from opgen.targets.ascend.op_project import op_project


@dataclass(frozen=True)
class AscendEmuTarget(TargetSpec):
    hardware: AscendHardware = field(default_factory=lambda: describe(DEFAULT_PRODUCT))
    library_suffix: str = ""          # ctypes-loaded g++ libraries: no TVM export
    schedule_rules: str = "ascend"    # every Ascend target, whatever its name
    timer: str = MODEL                # no device here: the tuner uses cost_model()
    tools: tuple = ("opgen.targets.ascend.tiling_report",)   # opgen tiling
    # The generic `target` fixture skips this target: g++ on the emulation header takes
    # ~10 s per kernel (cached on disk afterwards), so tests/test_ascend.py runs it on chosen shapes.
    own_suite: str = "tests/test_ascend.py"

    def hardware_key(self) -> dict:
        """The product and the numbers its kernels are tiled and modelled for."""
        hw = self.hardware
        return {"product": hw.product, "soc": hw.soc, "vector_cores": hw.vector_cores, "ub_bytes": hw.ub_bytes}

    def cost_model(self):
        """The emulation's timing model of each checked run; the analytic formula without one."""
        return AscendEmulated()

    def for_product(self, product: str) -> "AscendEmuTarget":
        return replace(self, hardware=describe(product))

    def tvm_target(self):
        # The emitted code is C++ for the host (the emulation); TVM itself compiles nothing.
        return tvm.target.Target({"kind": "c"})

    def device(self):
        return tvm.cpu(0)            # the emulation's GM is host memory

    def can_build(self) -> bool:
        return emulation_available()

    def can_run(self) -> bool:
        return emulation_available()

    def build(self, mod):
        (gvar, func), = mod.functions.items()
        symbol = gvar.name_hint
        storage = set(self.hardware.storage_dtypes)
        try:
            kernel, files = project(func, symbol, self.hardware)
        except EmitError as err:
            kernel, files, failure = None, None, err
        # A tensor the kernel reads with the scalar unit alone (a channel map's counter, role
        # "call"; a per-batch-row count, role "batch") never enters the vector unit: its dtype
        # need not be a storage type.
        scalar_only = {n for n, _, role in getattr(kernel, "args", ()) if role in ("call", "batch")}
        missing = sorted({str(b.dtype) for b in func.params if b.name not in scalar_only} - storage)
        if missing:     # e.g. bfloat16 on Atlas training: the description says the hardware has none
            raise NotImplementedError(f"ascend-emu on {self.hardware.product}: no {', '.join(missing)} in its "
                                      f"vector unit's storage types {self.hardware.storage_dtypes}")
        if kernel is None:
            raise NotImplementedError(f"ascend-emu: {failure}") from failure
        lib = compile_project(files, symbol, self.hardware)
        return EmuModule(symbol, EmuKernel(lib, kernel, self.hardware), files)

    def run_place(self) -> str:
        """Where kernels run (opgen generate prints it on each row)."""
        return (f"emitted AscendC, emulated on {self.hardware.vector_cores} cores of {self.hardware.product}"
                if self.can_run() else "not here: g++ or the emulation header is missing")

    def missing(self) -> str | None:
        return None if emulation_available() else "g++ or targets/ascend/emu/kernel_operator.h is missing"

    def source_of(self, module):
        """The emitted kernel (opgen generate writes the whole project next to it)."""
        return f"{module.symbol}.cpp", module.files[f"op_kernel/{module.symbol}.cpp"]

    def artifacts(self, module) -> dict:
        """The CANN custom-op project: op_host/ and op_kernel/ sources."""
        return dict(module.files)

    def run_summary(self, module) -> str | None:
        """The emulation's modelled time of the largest launch so far (opgen generate's rows)."""
        modelled = module.kernel.largest_timing()
        return None if modelled is None else modelled.summary()

    def op_artifacts(self, op, built: list) -> dict:
        """The op's CANN custom-op project (targets/ascend/op_project.py) over the combos the
        target's product documents for it. A combo's variant without an optional input
        (DtypeCombo.absent) stays out: the project has one kernel entry with CANN's full
        signature, which dispatches on dtypes, not on a null optional input."""
        documented = {c.tag for c in op.products.get(self.hardware.product, ()) if not c.absent}
        mine = [(tag, m) for tag, m in built if tag in documented and isinstance(m, EmuModule)]
        return op_project(op.name, mine, self.hardware) if mine else {}

    def scratch_of(self, module):
        """One GM workspace sized by the host tiling (the TIR's hoisted buffers are unused)."""
        return module.scratch


TARGET = AscendEmuTarget(name="ascend-emu",
                         description="AscendC for Ascend vector cores, run under opgen's CPU emulation")
