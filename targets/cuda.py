"""CUDA: the GPU schedules (schedules/gpu.py) as CUDA C, checked by nvcc for sm_80 and sm_90.

Without a GPU (this machine, CI): TVM 0.27 emits CUDA C without libcuda (a source-only
module, ~30 ms), ``build`` returns that source (``CudaSource``), and ``compile_check``
compiles it with ``nvcc -cubin`` for every architecture in ``archs`` with ``-Xptxas -v``,
reporting registers and spills per kernel. ``opgen generate --target cuda`` writes
``kernel.cu`` and prints that check; running such a kernel raises.

With a GPU (UNTESTED in the sessions that wrote this: none had one): ``can_run`` is true,
``build`` compiles through TVM inside ``with target:`` (TVM's compile callback reads
``Target.current()``) with ``TVM_CUDA_COMPILE_MODE=nvcc`` unless the user chose a mode
(the default, NVRTC, needs the cuda-bindings package), and the result is an ordinary TVM
runtime module: kernels take ``tvm.cuda(0)`` tensors, which the aclnn layer provides
(workspace slots on the device; torch CUDA tensors through DLPack).

Built with StorageRewrite off, like OpenCL: see schedules/gpu.py for the race it caused.
Every launch is guarded in the host code (``gpu_launch.guard_empty_launches``): TVM's CUDA
runtime raises a 0 grid dimension to 1, and a kernel over N*C rows would then run row 0 of
an empty tensor. ``CudaSource.plans`` are the host code's launches as opgen reads them
(what a GPU's host code does, checked without one; tests/test_gpu_races.py).
"""
from __future__ import annotations

import dataclasses
import functools
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from opgen.lazy import tvm
from opgen.targets.gpu_launch import (UnsupportedHostCode, compile_capturing_split, config_for, guard_empty_launches,
                                      launch_plan, with_32_bit_indices)
from opgen.targets import cuda_sass
from opgen.targets.spec import GpuTargetSpec

BUILD_CONFIG = {"tirx.disable_storage_rewrite": True}


@functools.lru_cache(maxsize=None)
def gpu_present() -> bool:
    """Whether TVM's runtime has CUDA and sees a device (False without a driver)."""
    try:
        return bool(tvm.runtime.enabled("cuda") and tvm.cuda(0).exist)
    except Exception:  # no libcuda: the runtime cannot even ask
        return False


def nvcc() -> str | None:
    return shutil.which("nvcc")


class CudaSource:
    """A CUDA kernel that can only be read and compiled here: no GPU to run it on.
    ``plans``: symbol -> the host code's launches (gpu_launch.LaunchPlan); when opgen
    cannot read the host code, none, and ``plan_error`` says why (the CUDA code itself is
    unaffected: TVM's runtime runs the host code, not these plans)."""

    def __init__(self, source: str, plans: dict | None = None, plan_error: str = "", bytes_per_element: int = 0):
        self.source = source
        self.plans = plans or {}
        self.plan_error = plan_error
        self.bytes_per_element = bytes_per_element   # cuda_sass.stored_bytes_per_element of the kernel

    def __getitem__(self, symbol: str):
        def no_gpu(*_args):
            raise RuntimeError(f"cuda kernel {symbol} cannot run here: no GPU (compile-checked only)")
        return no_gpu


@dataclass(frozen=True)
class ArchReport:
    """nvcc's verdict for one architecture: per kernel (registers, spill bytes)."""

    arch: str
    ok: bool
    kernels: dict          # kernel name -> (registers, spill store bytes + spill load bytes)
    error: str = ""
    sass_per_element: float | None = None   # cuda_sass.per_element (None: not measured)
    sass_note: str = ""                      # why not, when it could not be

    @property
    def max_registers(self) -> int:
        return max((r for r, _ in self.kernels.values()), default=0)

    @property
    def spill_bytes(self) -> int:
        return sum(s for _, s in self.kernels.values())

    @property
    def summary(self) -> str:
        """What ``opgen generate`` prints of it."""
        text = f"{self.arch} {self.max_registers} regs {self.spill_bytes} B spilled"
        if self.sass_per_element is not None:
            text += f" {self.sass_per_element:.1f} SASS/elem"
        elif self.sass_note:
            text += f" SASS/elem: {self.sass_note}"
        return text


_ENTRY = re.compile(r"Compiling entry function '(\w+)' for '(\w+)'")
_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_REGISTERS = re.compile(r"Used (\d+) registers")


def parse_ptxas(log: str) -> dict:
    """kernel -> (registers, spill bytes) from ``ptxas -v`` output."""
    kernels, current, spills = {}, None, 0
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            current, spills = m.group(1), 0
        elif (m := _SPILLS.search(line)) and current:
            spills = int(m.group(1)) + int(m.group(2))
        elif (m := _REGISTERS.search(line)) and current:
            kernels[current] = (int(m.group(1)), spills)
    return kernels


def compile_source(source: str, arch: str, out_dir: Path | None = None) -> ArchReport:
    """``nvcc -cubin -arch=<arch> -Xptxas -v`` on ``source``; the cubin is written to ``out_dir``."""
    report, cubin = _compile_cached(source, arch)
    if out_dir is not None and cubin:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / f"kernel.{arch}.cubin").write_bytes(cubin)
    return report


@functools.lru_cache(maxsize=256)
def _compile_cached(source: str, arch: str) -> tuple[ArchReport, bytes]:
    """One nvcc run per (source, arch) per process: the tests and ``opgen generate`` ask
    for the same kernels, and each run costs about a second."""
    with tempfile.TemporaryDirectory() as tmp:
        cu, cubin = Path(tmp) / "kernel.cu", Path(tmp) / "kernel.cubin"
        cu.write_text(source)
        proc = subprocess.run([nvcc(), "-cubin", f"-arch={arch}", "-Xptxas", "-v", str(cu), "-o", str(cubin)],
                              capture_output=True, text=True, timeout=300)
        log = proc.stdout + proc.stderr
        if proc.returncode:
            return ArchReport(arch, False, {}, log.strip().splitlines()[-1] if log.strip() else "nvcc failed"), b""
        return ArchReport(arch, True, parse_ptxas(log)), cubin.read_bytes()


def _ptx(source: str, arch: str) -> str:
    """``nvcc -ptx -arch=<arch>`` on ``source``; RuntimeError with nvcc's last line."""
    with tempfile.TemporaryDirectory() as tmp:
        cu, ptx = Path(tmp) / "kernel.cu", Path(tmp) / "kernel.ptx"
        cu.write_text(source)
        proc = subprocess.run([nvcc(), "-ptx", f"-arch={arch}", str(cu), "-o", str(ptx)],
                              capture_output=True, text=True, timeout=300)
        if proc.returncode:
            log = (proc.stdout + proc.stderr).strip().splitlines()
            raise RuntimeError(f"nvcc -ptx for {arch}: {log[-1] if log else 'failed'}")
        return ptx.read_text()


def _with_sass(report: ArchReport, source: str, bytes_per_element: int) -> ArchReport:
    """``report`` with the SASS instructions per element of its cubin's elementwise loop
    (targets/cuda_sass.py), or the reason it could not be counted: the SASS column is a
    measure beside nvcc's verdict, so a missing or failing cuobjdump is a note, never an error."""
    why = cuda_sass.missing()
    if why:
        return dataclasses.replace(report, sass_note=why)
    try:
        value = cuda_sass.per_element(_compile_cached(source, report.arch)[1], bytes_per_element)
    except cuda_sass.SassError as err:
        return dataclasses.replace(report, sass_note=str(err))
    return dataclasses.replace(report, sass_per_element=value, sass_note="" if value is not None else "no loop")


@dataclass(frozen=True)
class CudaTarget(GpuTargetSpec):
    archs: tuple = ("sm_80", "sm_90")

    def arch(self) -> str:
        """The architecture TVM generates for: the GPU's when one is present, else the oldest."""
        if gpu_present():
            major, minor = tvm.cuda(0).compute_version.split(".")
            return f"sm_{major}{minor}"
        return self.archs[0]

    def tvm_target(self):
        return tvm.target.Target({"kind": "cuda", "arch": self.arch(), "max_num_threads": self.max_threads},
                                 host={"kind": "llvm"})

    def device(self):
        return tvm.cuda(0)

    def hardware_key(self) -> dict:
        """The TVM target (its arch) and, with a GPU, the device's name."""
        key = {"tvm": str(self.tvm_target())}
        if gpu_present():
            key["device"] = tvm.cuda(0).device_name
        return key

    def missing(self) -> str | None:
        """Why this machine cannot build (compile-check) cuda kernels, or None."""
        return None if gpu_present() or nvcc() else "nvcc is not on PATH (and no GPU)"

    def can_build(self) -> bool:
        return self.missing() is None

    def can_run(self) -> bool:
        return gpu_present()

    def run_place(self) -> str:
        return f"GPU {tvm.cuda(0).device_name}" if gpu_present() else "no GPU"

    def build(self, mod):
        target = self.tvm_target()
        mod = guard_empty_launches(mod)
        if not gpu_present():
            executable, split = compile_capturing_split(mod, target, BUILD_CONFIG)
            source = executable.mod.imports[0].inspect_source()
            per_element = max(cuda_sass.stored_bytes_per_element(f) for f in mod.functions.values())
            try:
                plans = {gv.name_hint: launch_plan(split, gv.name_hint) for gv in mod.functions}
            except UnsupportedHostCode as err:
                return CudaSource(source, {}, str(err), per_element)
            return CudaSource(source, plans, bytes_per_element=per_element)
        os.environ.setdefault("TVM_CUDA_COMPILE_MODE", "nvcc")   # UNTESTED here (no GPU)
        with target, tvm.transform.PassContext(config=config_for(mod, BUILD_CONFIG)):
            return tvm.compile(with_32_bit_indices(mod), target=target).mod

    def source_of(self, module) -> tuple[str, str]:
        """kernel.cu: the CUDA C that nvcc compiles."""
        if isinstance(module, CudaSource):
            return "kernel.cu", module.source
        device_module = module.imports[0]
        try:   # a module built on a GPU holds the CUDA source next to the compiled code
            return "kernel.cu", device_module.inspect_source("cu")
        except Exception:
            return "kernel.cu", device_module.inspect_source()

    def export_missing(self) -> str | None:
        return None if nvcc() else "nvcc is not on PATH (it writes the PTX and cubins)"

    def export_code(self, mod, out_dir) -> tuple[dict, dict]:
        """kernel.cu, and per architecture in ``archs`` its PTX (what a newer GPU's driver
        compiles) and cubin (what the named GPU loads as is); RuntimeError when nvcc fails."""
        mod = guard_empty_launches(mod)
        executable, split = compile_capturing_split(mod, self.tvm_target(), BUILD_CONFIG)
        source = executable.mod.imports[0].inspect_source()
        out_dir = Path(out_dir)
        (out_dir / "kernel.cu").write_text(source)
        archs = {}
        for arch in self.archs:
            report = compile_source(source, arch, out_dir)
            if not report.ok:
                raise RuntimeError(f"nvcc -cubin for {arch}: {report.error}")
            (out_dir / f"kernel.{arch}.ptx").write_text(_ptx(source, arch))
            archs[arch] = {"ptx": f"kernel.{arch}.ptx", "cubin": f"kernel.{arch}.cubin"}
        return {"language": "ptx", "source": "kernel.cu", "archs": archs}, \
            {gv.name_hint: launch_plan(split, gv.name_hint) for gv in mod.functions}

    def compile_check(self, module, out_dir: Path | None = None) -> list[ArchReport]:
        """nvcc on the kernel's source for every architecture in ``archs``."""
        source = self.source_of(module)[1]
        reports = [compile_source(source, arch, out_dir) for arch in self.archs]
        per_element = getattr(module, "bytes_per_element", 0)
        if not per_element:
            return reports
        return [_with_sass(r, source, per_element) if r.ok else r for r in reports]


TARGET = CudaTarget(name="cuda", description="GPU schedules as CUDA C; nvcc sm_80/sm_90 (runs only with a GPU)",
                    library_suffix="")
