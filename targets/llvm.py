"""The host CPU through LLVM.

The TVM target names the host CPU (``mcpu``) so that LLVM uses its vector units and F16C;
plain "llvm" is generic x86-64 and turns every fp16 conversion into a library call (~35x
slower in a probe). ``fast-math-reassoc`` alone (no nnan/ninf) lets LLVM vectorize float
sums: the order it picks is fixed at compile time, so results stay bit-identical run to
run and for any thread count, and inf/nan still propagate.

Threads: TVM's pool uses half the logical CPUs by default (it assumes hyper-threads do not
help). These kernels are memory-bound, where every core helps: RmsNormGrad 4096x4096 f32
ran 14.6 ms on 1 thread and 8.1 ms on 2 here. So unless the user set TVM_NUM_THREADS,
opgen sets it to the CPUs this process may use, before TVM's pool starts (it reads the
variable once, at its first parallel launch).
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import tvm

from opgen.targets import TargetSpec


def usable_cpus() -> int:
    """CPUs this process may run on (affinity/cgroup aware where the OS tells)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


os.environ.setdefault("TVM_NUM_THREADS", str(usable_cpus()))


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
            "num-cores": usable_cpus(),
            "fast-math-reassoc": True,
        })

    def device(self):
        return tvm.cpu(0)

    def can_run(self) -> bool:
        return True

    def build(self, mod):
        return tvm.compile(mod, target=self.tvm_target()).mod


TARGET = LlvmTarget(name="llvm", description="host CPU via LLVM (vectorized, multi-threaded)")
