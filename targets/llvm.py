"""The host CPU through LLVM.

The TVM target names the host CPU (``mcpu``) so that LLVM uses its vector units and F16C;
plain "llvm" is generic x86-64 and turns every fp16 conversion into a library call (~35x
slower in a probe). The name comes with the features this machine's OS actually enables
(``mattr`` edits: a VM that hides AVX-512 from a Zen 4 gets ``-avx512f``...), or with what
``OPGEN_LLVM_TARGET`` says: ``llvm_host.py``. ``fast-math-reassoc`` alone (no nnan/ninf) lets LLVM vectorize float
sums: the order it picks is fixed at compile time, so results stay bit-identical run to
run and for any thread count, and inf/nan still propagate.

Threads: TVM's pool uses half the logical CPUs by default (it assumes hyper-threads do not
help). These kernels are memory-bound, where every core helps: RmsNormGrad 4096x4096 f32
ran 14.6 ms on 1 thread and 8.1 ms on 2 here. So unless the user set TVM_NUM_THREADS,
opgen sets it to the CPUs this process may use, before TVM's pool starts (it reads the
variable once, at its first parallel launch).

Next to torch, the kernels' parallel loops run on torch's OpenMP pool instead of TVM's
(``llvm_threads.py``: the two pools' spinning threads otherwise fight for the cores).

Outputs a schedule marks as streamed (``opgen.schedules.STREAMED_OUTPUT``) are written with
non-temporal stores, which TVM cannot emit: ``llvm_stream.py`` edits the compiled IR.
float32 exp is a vectorized polynomial, not a libm call per element (``llvm_math.py``).
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

from opgen import diskcache
from opgen.environment import usable_cpus
from opgen.lazy import tvm
from opgen.targets.spec import TargetSpec
from opgen.targets import llvm_host, llvm_threads
from opgen.targets.llvm_math import polynomial_exp
from opgen.targets.llvm_stream import aligned_buffers, streamed_buffers, with_streamed_stores


os.environ.setdefault("TVM_NUM_THREADS", str(usable_cpus()))


def prefers_256_bit_vectors(cpu: llvm_host.CpuSpec) -> bool:
    """Whether LLVM caps this CPU's vectors at 256 bits by default (its tuning for
    AVX-512 parts that slow their clock on 512-bit instructions)."""
    return "prefer-256-bit" in cpu.features()


def holds_16bit_floats(mod) -> bool:
    """Whether any kernel of ``mod`` takes bfloat16 or float16 tensors."""
    return any(str(buf.dtype) in ("bfloat16", "float16")
               for func in mod.functions.values() if hasattr(func, "params") for buf in func.params)


@dataclass(frozen=True)
class LlvmTarget(TargetSpec):
    # Kernels whose tensors hold 16-bit floats are built with 512-bit vectors where LLVM
    # would cap them at 256 (AVX-512 CPUs tuned "prefer-256-bit"): their inner loops
    # widen, convert and round every element, so they are bound by instructions, not
    # bytes. Measured on this VM (rocketlake, kernel alone, caches evicted, median of 25):
    # RmsNormGrad bf16 16384x1024 5.18 -> 4.66 ms, f16-f32 4096x4096 4.97 -> 4.59,
    # GroupNorm bf16 (2,640,32x32) 0.52 -> 0.44; f32 kernels stay at 256 bits, where 512
    # made RmsNormGrad slower (4096x4096 10.5 -> 11.9 ms, 16384x1024 8.3 -> 10.7) and
    # GroupNorm no faster (1.53 both).
    wide_vectors_for_16bit_floats: bool = True
    # float32 exp as Cephes' polynomial, vectorized (targets/llvm_math.py), instead of
    # TVM's llvm.exp, which LLVM scalarizes into libm expf calls. Part of the target's
    # repr, so kernels built either way never share a disk-cache entry.
    polynomial_exp: bool = True
    # The CPU built for; None: this host as probed, or OPGEN_LLVM_TARGET (llvm_host.current).
    # A CpuSpec here builds for another CPU (tests simulate hosts they do not have).
    cpu: llvm_host.CpuSpec | None = None

    def built_for(self) -> llvm_host.CpuSpec:
        return self.cpu if self.cpu is not None else llvm_host.current()

    def missing(self) -> str | None:
        return None if self.cpu is not None else llvm_host.problem()

    def tvm_target(self, wide_vectors: bool = False):
        cpu = self.built_for()
        config = {"kind": "llvm", **cpu.tvm_config(), "num-cores": usable_cpus(), "fast-math-reassoc": True}
        if wide_vectors and self.wide_vectors_for_16bit_floats and prefers_256_bit_vectors(cpu):
            config["mattr"] = [*config.get("mattr", ()), "-prefer-256-bit"]
        return tvm.target.Target(config)

    def hardware_summary(self) -> str:
        return self.built_for().describe()

    def device(self):
        return tvm.cpu(0)

    def can_run(self) -> bool:
        """Built here, and for no feature this CPU lacks (an OPGEN_LLVM_TARGET cross build
        compiles, but its kernels would die of SIGILL here: they are not run)."""
        return self.can_build() and llvm_host.why_not_here(self.built_for()) is None

    def run_place(self) -> str:
        return "here" if self.can_run() else f"not here: {self.missing() or llvm_host.why_not_here(self.built_for())}"

    def build(self, mod):
        with polynomial_exp() if self.polynomial_exp else contextlib.nullcontext():
            module = tvm.compile(mod, target=self.tvm_target(wide_vectors=holds_16bit_floats(mod))).mod
        streamed = streamed_buffers(mod)
        return with_streamed_stores(module, streamed, aligned_buffers(mod)) if streamed else module

    def loaded(self, module, library_path, from_disk: bool):
        """The stored library, its parallel loops routed through llvm_threads' launcher
        (TVM's pool, or the host program's OpenMP pool once one is loaded). A fresh build
        runs from a private copy of what it stored: the loader serves a path it has opened
        from its table whatever the file later holds, and a file this process maps must
        not be one that a corrupt-cache rebuild rewrites. A module that is not stored keeps
        TVM's pool (its pointer lives in JIT memory)."""
        if library_path is None:
            return module
        if not from_disk:
            library_path = diskcache.private_copy(library_path)
            module = tvm.runtime.load_module(str(library_path))
        llvm_threads.route(library_path)
        return module

    def share_host_threads(self) -> None:
        """Kernels routed before torch was loaded move to its pool now; without any (no
        launcher yet) the first one routed adopts the pool itself (llvm_threads.route), and
        importing opgen.torch compiles nothing."""
        if llvm_threads.launcher_loaded():
            llvm_threads.adopt_openmp()


TARGET = LlvmTarget(name="llvm", description="host CPU via LLVM (vectorized, multi-threaded)", default=True)
