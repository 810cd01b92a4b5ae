"""``ascend-emu``: Ascend vector-core kernels, scheduled from a hardware description.

The target is bound to one product's hardware description (targets/ascend/hardware.py):
``for_product`` returns a copy bound to that product, so the kernel cache, which keys on
the whole frozen target, never lets a kernel tiled for one UB size stand in for another.
Its schedule rules live in schedules/ascend.py (``schedule_module`` is "ascend" for every
Ascend target, whatever its name), its code comes from the AscendC emitter, and it runs
the emitted code under the CPU emulation of the AscendC API (targets/ascend/emu/).

Status: the hardware descriptions, the schedule and the tiling are in place; the emitter
and the emulated build are not yet, so ``can_build``/``can_run`` say False and
``opgen generate`` skips this target instead of reporting a failure.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import tvm

from opgen.config import DEFAULT_PRODUCT
from opgen.targets import TargetSpec
from opgen.targets.ascend.hardware import AscendHardware, describe


@dataclass(frozen=True)
class AscendEmuTarget(TargetSpec):
    hardware: AscendHardware = field(default_factory=lambda: describe(DEFAULT_PRODUCT))
    library_suffix: str = ""          # ctypes-loaded g++ libraries: no TVM export

    @property
    def schedule_module(self) -> str:
        return "ascend"

    def for_product(self, product: str) -> "AscendEmuTarget":
        return replace(self, hardware=describe(product))

    def tvm_target(self):
        # The emitted code is C++ for the host (the emulation); TVM itself compiles nothing.
        return tvm.target.Target({"kind": "c"})

    def device(self):
        return tvm.cpu(0)            # the emulation's GM is host memory

    def can_build(self) -> bool:
        return False

    def can_run(self) -> bool:
        return False

    def build(self, mod):
        raise NotImplementedError("the AscendC emitter is not in place yet (see targets/ascend/__init__.py)")


TARGET = AscendEmuTarget(name="ascend-emu",
                         description="AscendC for Ascend vector cores, run under opgen's CPU emulation")
