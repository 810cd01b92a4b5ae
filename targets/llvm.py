"""The host CPU through LLVM.

The TVM target names the host CPU (``mcpu``) so that LLVM uses its vector units and F16C;
plain "llvm" is generic x86-64 and turns every fp16 conversion into a library call (~35x
slower in a probe). ``fast-math-reassoc`` alone (no nnan/ninf) lets LLVM vectorize float
sums: the order it picks is fixed at compile time, so results stay bit-identical run to
run and for any thread count, and inf/nan still propagate.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import tvm

from opgen.targets import TargetSpec


@functools.lru_cache(maxsize=None)
def host_cpu() -> str:
    """LLVM's name for this machine's CPU (e.g. znver4, skylake-avx512)."""
    return str(tvm.target.codegen.llvm_get_system_cpu())


@dataclass(frozen=True)
class LlvmTarget(TargetSpec):
    def tvm_target(self):
        return tvm.target.Target({
            "kind": "llvm",
            "mcpu": host_cpu(),
            "num-cores": os.cpu_count() or 1,
            "fast-math-reassoc": True,
        })

    def device(self):
        return tvm.cpu(0)

    def can_run(self) -> bool:
        return True

    def build(self, mod):
        return tvm.compile(mod, target=self.tvm_target()).mod


TARGET = LlvmTarget(name="llvm", description="host CPU via LLVM (vectorized, multi-threaded)")
