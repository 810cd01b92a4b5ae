"""``iree-cpu``: the op's TE stages as MLIR linalg, compiled and run by IREE on this CPU.

A second compiler next to TVM: IREE fuses, tiles and vectorizes the same formulas its own
way (targets/mlir/), so a PASS here cross-checks the math, and ``opgen compare --against
iree`` / ``opgen bench`` put its speed beside opgen's kernels. It has no schedule rules of
opgen's own (``schedule_rules=None``), no knobs, and no disk cache (IREE compiles a kernel
in about a second; TVM's export format does not hold its modules).
"""
from __future__ import annotations

from dataclasses import dataclass

from opgen.lazy import tvm
from opgen.targets import llvm_host
from opgen.targets.mlir import iree
from opgen.targets.spec import WALL_CLOCK, TargetSpec


@dataclass(frozen=True)
class IreeTarget(TargetSpec):
    backend: str = "llvm-cpu"        # IREE's target backend
    flags: tuple = ()                # more iree-compile flags (the CPU's come from cpu_flags)
    runs_here: bool = True           # False: compile-only (a device this machine lacks)
    library_suffix: str = ""
    schedule_rules: str | None = None
    timer: str = WALL_CLOCK
    peer_name: str = "iree"          # opgen compare --against iree, and a contender in opgen bench

    def can_run(self) -> bool:
        return self.runs_here and self.can_build() and self.cross_built() is None

    def cross_built(self) -> str | None:
        """Why IREE's llvm-cpu code for the llvm target's CPU cannot run here (an
        OPGEN_LLVM_TARGET naming features this CPU lacks), or None."""
        return llvm_host.why_not_here(llvm_host.current()) if self.backend == "llvm-cpu" else None

    def run_place(self) -> str:
        if not self.runs_here:
            return (f"compiled only: IREE's {self.backend} backend ({' '.join(self.flags)}); "
                    "nothing runs without the device")
        return "IREE llvm-cpu, run by iree.runtime (local-task) on this CPU" if self.can_run() else \
            f"not here: {self.missing() or self.cross_built()}"

    def cpu_flags(self) -> tuple:
        """The CPU IREE compiles for (``iree.cpu_flags``); none for another backend."""
        return iree.cpu_flags() if self.backend == "llvm-cpu" else ()

    def missing(self) -> str | None:
        return iree.iree_missing() or (llvm_host.problem() if self.backend == "llvm-cpu" else None)

    def hardware_summary(self) -> str | None:
        return llvm_host.current().describe() if self.backend == "llvm-cpu" else None

    def tvm_target(self):
        # TVM compiles nothing here; the CPU the llvm target builds for names the hardware.
        return tvm.target.Target({"kind": "llvm", **llvm_host.current().tvm_config()})

    def hardware_key(self) -> dict:
        return {"iree_backend": self.backend, "flags": list(self.flags + self.cpu_flags())}

    def device(self):
        return tvm.cpu(0)            # tensors are handed over on the host

    def build(self, mod):
        return iree.build(mod, self.backend, self.flags + self.cpu_flags(), self.runs_here)

    def source_of(self, module):
        return "kernel.mlir", module.text


TARGET = IreeTarget(name="iree-cpu",
                    description="MLIR linalg compiled and run by IREE on the host CPU (a second compiler)")
