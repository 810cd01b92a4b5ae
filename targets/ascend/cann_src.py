"""CANN's hand-written AscendC kernels, from an ops-nn checkout, run on opgen's emulation.

``opgen compare --against cann-src DIR`` (DIR: a hicann/ops-nn checkout, else $OPGEN_CANN_SRC,
else ~/ops-nn) compiles CANN's own kernel source (op_kernel/*.cpp, unchanged, read from DIR:
nothing of it is copied into opgen) against the emulation headers (targets/ascend/emu) with
the tiling CANN's host code would give (transcribed in the op's ``cann_tiling.tiling_data``;
CANN's tiling .cpp needs CANN's whole host framework), runs it on the same inputs as opgen's
kernel and measures both against the float64 reference. That checks the emulation's API
semantics on code opgen did not write, and sets CANN's modelled time (the same timing model)
beside opgen's: the bar opgen's kernels must meet.

Kernels are built as for Atlas A2 (``__CCE_AICORE__ == 220``: the split-N / split-D kernels
with DataCopyPad), on the AtlasA2 hardware description's cores and UB.
"""
from __future__ import annotations

import ctypes
import importlib
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from opgen.dtypes import BFLOAT16, FLOAT16, FLOAT32, INT8, INT32, fill_value, numpy_dtype, ulp
from opgen.targets.ascend.build import EMU_DIR, bind_launch, emu_flags, emulation_library, run_launch

ENV = "OPGEN_CANN_SRC"
DEFAULT_DIR = Path("~/ops-nn")
PRODUCT = "AtlasA2"
C_TYPES = {FLOAT32: "float", FLOAT16: "half", BFLOAT16: "bfloat16_t", INT32: "int32_t", INT8: "int8_t"}
# CANN's kernels are built without -Werror (their sources are theirs), as C++17 like opgen's.
CXXFLAGS = ("-std=c++17", "-O1", "-pthread", "-shared", "-fPIC", "-fno-gnu-unique", "-w")
# Atlas A2's AI core; CANN's in-place widening Cast accepted and counted. __CCE_KT_TEST__ (CANN's
# CPU kernel-test build: no <<<>>> launcher) is added for the kernels that ask for it (kt_test).
CCE_FLAGS = ("-D__CCE_AICORE__=220", "-DOPGEN_EMU_CANN_IDIOMS")


class NotACheckout(ValueError):
    """DIR is not an ops-nn checkout holding the kernels compared here."""


@dataclass(frozen=True)
class CannKernel:
    """One of CANN's kernels: where its sources are in ops-nn, how opgen drives it (an op
    package declares it as ``KERNEL`` in its ``cann_tiling`` module).

    ``tiling(problem, combo, cores)`` gives (tiling fields, tiling key, user workspace bytes);
    ``entry`` lists the kernel's GM arguments before workspace and tiling (kernel tensor names);
    ``dtype_macros`` maps each DTYPE_* macro of the kernel to the tensor whose dtype it takes;
    ``kt_test`` builds with __CCE_KT_TEST__ (hides a <<<>>> launcher), off for kernels whose
    __CCE_KT_TEST__ branches drop device code (GroupNormGrad's SyncAll); ``sums(problem)``
    is how CANN's kernel adds its column sums across cores on that problem ("atomic" or
    "deterministic"): opgen's kernel with the same ``sums`` knob is the like-for-like time."""

    op: str
    kernel: str            # op_kernel .cpp, relative to the checkout
    tiling_header: str     # op_host header holding BEGIN_TILING_DATA_DEF(struct)
    struct: str
    symbol: str            # the extern "C" kernel function
    entry: tuple
    dtype_macros: dict
    tiling: Callable
    shapes: tuple          # default problems (the op's Problem spelling)
    kt_test: bool = True
    sums: Callable = lambda problem: "atomic"


def _kernels() -> dict:
    """Every op package's CANN kernel (``<package>.cann_tiling.KERNEL``), by op name."""
    from opgen.ops import all_ops

    found = {}
    for op in all_ops():
        try:
            module = importlib.import_module(f"{op.package}.cann_tiling")
        except ModuleNotFoundError:
            continue
        if hasattr(module, "KERNEL"):
            found[op.name] = CannKernel(op=op.name, **module.KERNEL)
    return found


KERNELS = _kernels()


# ---- the checkout --------------------------------------------------------------------------

def checkout_dir(given: str | None = None) -> Path:
    """The ops-nn checkout: ``given``, else $OPGEN_CANN_SRC, else ~/ops-nn (not checked here)."""
    return Path(given or os.environ.get(ENV) or DEFAULT_DIR).expanduser()


def check_checkout(root: Path) -> Path:
    """``root`` itself when it holds every kernel and tiling header compared here; else
    NotACheckout naming the first file missing (a one-line error, not a traceback)."""
    for kernel in KERNELS.values():
        for rel in (kernel.kernel, kernel.tiling_header):
            if not (root / rel).is_file():
                raise NotACheckout(f"{root} is not a hicann/ops-nn checkout: {rel} is missing "
                                   f"(give the checkout's root: --against cann-src DIR, or set {ENV})")
    return root


def found_checkout() -> Path | None:
    """The checkout the tests use, when there is one ($OPGEN_CANN_SRC or ~/ops-nn)."""
    try:
        return check_checkout(checkout_dir())
    except NotACheckout:
        return None


# ---- the tiling struct, read from CANN's own header -------------------------------------------

FIELD_TYPES = {"uint32_t": "I", "int32_t": "i", "float": "f", "uint64_t": "Q", "int64_t": "q",
               "uint16_t": "H", "int16_t": "h", "uint8_t": "B", "int8_t": "b"}


def tiling_fields(header_text: str, name: str) -> list[tuple[str, str]]:
    """(C type, field) of BEGIN_TILING_DATA_DEF(name) ... END_TILING_DATA_DEF, in order: the
    layout the kernel's GET_TILING_DATA reads (CANN generates a plain struct from it)."""
    body = re.search(rf"BEGIN_TILING_DATA_DEF\(\s*{name}\s*\)(.*?)END_TILING_DATA_DEF", header_text, re.S)
    if not body:
        raise NotACheckout(f"no BEGIN_TILING_DATA_DEF({name}) in the tiling header")
    fields = re.findall(r"TILING_DATA_FIELD_DEF\(\s*(\w+)\s*,\s*(\w+)\s*\)", body.group(1))
    unknown = [t for t, _ in fields if t not in FIELD_TYPES]
    if not fields or unknown or "FIELD_DEF_ARR" in body.group(1) or "FIELD_DEF_STRUCT" in body.group(1):
        raise NotACheckout(f"{name}: fields opgen cannot lay out ({', '.join(unknown) or 'arrays or structs'})")
    return fields


def struct_source(name: str, fields: list) -> str:
    """The kernel-side struct (naturally aligned, as the generated CANN header lays it out)."""
    lines = "".join(f"    {ctype} {field};\n" for ctype, field in fields)
    return (f"#include <cstdint>\nstruct {name} {{\n{lines}}};\n#define OPGEN_TILING_TYPE {name}\n")


def pack_tiling(fields: list, values: dict) -> bytes:
    """The tiling argument's bytes: every field of the header, in its order (native alignment)."""
    missing = [f for _, f in fields if f not in values]
    if missing:
        raise ValueError(f"the transcribed tiling gives no value for {', '.join(missing)}")
    fmt = "@" + "".join(FIELD_TYPES[t] for t, _ in fields)
    return struct.pack(fmt, *(values[f] for _, f in fields))


# ---- build and run ---------------------------------------------------------------------------

def built_with_auto_sync(kernel: CannKernel, checkout: Path) -> bool:
    """Whether ops-nn builds the kernel with the compiler's auto-sync, which inserts the
    pipe barriers and scalar events the source leaves out (GroupNormGrad's in-place Muls then
    Adds carry no PipeBarrier<PIPE_V>). ops-nn's cmake/func.cmake ``add_kernel_sources``:
    AUTO_SYNC defaults to true; an op opts out in its op_kernel/CMakeLists.txt with
    ``AUTO_SYNC false``. The emulation then trusts the compiler for those orderings
    (-DOPGEN_EMU_AUTO_SCALAR_SYNC) instead of reporting them as the kernel's hazards."""
    cmake = (checkout / kernel.kernel).parent / "CMakeLists.txt"
    text = cmake.read_text(errors="replace") if cmake.is_file() else ""
    return not re.search(r"\bAUTO_SYNC\s+false\b", text, re.IGNORECASE)


def _flags(kernel: CannKernel, combo, hw, checkout: Path) -> list[str]:
    macros = [f"-D{m}={C_TYPES[combo[tensor]]}" for m, tensor in kernel.dtype_macros.items()]
    kt = ["-D__CCE_KT_TEST__"] if kernel.kt_test else []
    sync = ["-DOPGEN_EMU_AUTO_SCALAR_SYNC"] if built_with_auto_sync(kernel, checkout) else []
    return [*CXXFLAGS, *emu_flags(hw), *kt, *sync, *CCE_FLAGS, *macros, f"-I{EMU_DIR}",
            f"-I{(checkout / kernel.kernel).parent}"]


def build(kernel: CannKernel, combo, hw, checkout: Path) -> tuple[Path, list]:
    """(the shared library of CANN's kernel on the emulation, its tiling fields); cached by the
    kernel folder's sources, the tiling struct, the flags and the emulation headers."""
    fields = tiling_fields((checkout / kernel.tiling_header).read_text(errors="replace"), kernel.struct)
    kernel_dir = (checkout / kernel.kernel).parent
    sources = "".join(p.read_text(errors="replace") for p in sorted(kernel_dir.glob("*.[ch]*")) if p.is_file())

    def lay_out(folder: Path):
        tiling_h, main = folder / "tiling.h", folder / "main.cpp"
        tiling_h.write_text(struct_source(kernel.struct, fields))
        main.write_text(f'#include "{checkout / kernel.kernel}"\nOPGEN_EMU_EXPORT({kernel.symbol}, '
                        f'{len(kernel.entry) + 2})\n')
        return [main], ["-include", str(tiling_h)]
    lib = emulation_library(f"cann-{kernel.symbol}", _flags(kernel, combo, hw, checkout),
                            sources + struct_source(kernel.struct, fields), lay_out,
                            f"CANN's {kernel.kernel} against the emulation", kernel.symbol)
    return lib, fields


def launch(lib_path: Path, kernel: CannKernel, fields: list, tiling: tuple, arrays: dict, hw):
    """Run the kernel once on ``arrays`` (kernel tensors by name, outputs included, written in
    place); returns the modelled time. RuntimeError with the emulation's message on a violation."""
    values, key, workspace_bytes = tiling
    lib = ctypes.CDLL(str(lib_path))
    workspace = np.empty(max(1, workspace_bytes), np.uint8)
    tiling_bytes = np.frombuffer(pack_tiling(fields, values), np.uint8).copy()
    buffers = [arrays[name] for name in kernel.entry] + [workspace, tiling_bytes]
    return run_launch(lib, bind_launch(lib, kernel.symbol), hw, values["block_dim"], [b.ctypes.data for b in buffers],
                      [b.nbytes for b in buffers], key, f"CANN's {kernel.symbol} on the emulation")


# ---- the comparison ------------------------------------------------------------------------

@dataclass
class CannRow:
    """One output of one case: CANN's and opgen's error against float64 and modelled times.

    ``*_ulps``: the largest |out - ref| in units of one rounding step of the output's dtype at
    |ref| (opgen.dtypes.ulp); ``*_tol``: the largest error over what opgen.verify allows (<= 1
    passes); ``idioms``: CANN's widening Casts accepted only for its kernels (emu_reduce_cast.h).
    ``opgen_us`` is opgen's default kernel (deterministic column sums: per-core partials,
    SyncAll and a final pass); ``opgen_atomic_us`` opgen's with ``sums=atomic``; ``cann_sums``
    how CANN's kernel sums on this problem (CannKernel.sums), which picks opgen's like-for-like
    time (``like_us``)."""

    op: str
    dtypes: str
    shape: str
    output: str
    cann_ulps: float
    cann_tol: float
    opgen_ulps: float
    opgen_tol: float
    cann_us: float
    opgen_us: float | None
    opgen_atomic_us: float | None = None
    idioms: int = 0
    cann_sums: str = "atomic"

    @property
    def like_us(self) -> float | None:
        return self.opgen_atomic_us if self.cann_sums == "atomic" else self.opgen_us

    @property
    def passed(self) -> bool:
        return self.cann_tol <= 1.0 and self.opgen_tol <= 1.0

    def as_dict(self) -> dict:
        return {**self.__dict__, "library": "cann-src", "passed": self.passed}


def max_ulps(out, ref, dtype: str) -> float:
    """max |out - ref| / ulp_dtype(ref): 0.5 is a correctly rounded result."""
    got, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return float(np.max(np.abs(got - ref) / ulp(ref, dtype))) if ref.size else 0.0


def run_cann(checkout: Path, kernel: CannKernel, op, combo, problem, inputs: dict, hw) -> tuple[dict, object, int]:
    """(CANN's outputs by kernel name in the reference's shapes, modelled time, idioms used)."""
    shapes = importlib.import_module(op.package).kernel_shapes(problem)
    arrays = {n: np.ascontiguousarray(v).reshape(shapes[n]) for n, v in inputs.items()}
    outputs = {n: np.full(shapes[n], fill_value(combo[n]), numpy_dtype(combo[n])) for n in op.outputs}
    lib, fields = build(kernel, combo, hw, checkout)
    before = _idioms(lib)
    modelled = launch(lib, kernel, fields, kernel.tiling(problem, combo, hw.vector_cores), {**arrays, **outputs}, hw)
    return outputs, modelled, _idioms(lib) - before


def _idioms(lib_path: Path) -> int:
    lib = ctypes.CDLL(str(lib_path))
    lib.opgen_emu_cann_idioms.restype = ctypes.c_uint64
    return int(lib.opgen_emu_cann_idioms())


def run_opgen(op, combo, problem, inputs: dict, target, knobs=None) -> tuple[dict, object]:
    """(opgen's outputs, its kernel's modelled time) on ``target`` (ascend-emu on AtlasA2)."""
    from opgen import kernels

    kernel = kernels.get_kernel(op, combo, target, knobs=knobs)
    ref_shapes = op.output_shapes(problem)
    outputs = {n: np.full(ref_shapes[n], fill_value(combo[n]), numpy_dtype(combo[n])) for n in op.outputs}
    kernel(op.kernel_args(problem, {**inputs, **outputs}))
    return outputs, kernel.module.kernel.last_timing


def compare_case(checkout: Path, op_name: str, tag: str, problem, rng, hw, target) -> list[CannRow]:
    """Rows for one op x dtype combo x problem: both kernels on the same inputs."""
    from opgen import verify
    from opgen.ops import get_op

    op = get_op(op_name)
    combo = op.combo(tag)
    inputs = op.random_inputs(problem, combo, rng)
    ref = op.reference(problem, inputs)
    theirs, cann_time, idioms = run_cann(checkout, KERNELS[op_name], op, combo, problem, inputs, hw)
    ours, opgen_time = run_opgen(op, combo, problem, inputs, target)
    atomic, atomic_time = run_opgen(op, combo, problem, inputs, target, {"sums": "atomic"})
    rows = []
    compute = combo[op.inputs[0]]
    for name in op.outputs:
        cann_out = theirs[name].reshape(ref[name].shape)
        outs = [o[name].reshape(ref[name].shape) for o in (ours, atomic)]
        rows.append(CannRow(
            op_name, tag, problem.label(), name,
            max_ulps(cann_out, ref[name], combo[name]),
            verify.compare(name, cann_out, ref[name], compute, combo[name]).ratio,
            max(max_ulps(o, ref[name], combo[name]) for o in outs),
            max(verify.compare(name, o, ref[name], compute, combo[name]).ratio for o in outs),
            cann_time.seconds * 1e6, _us(opgen_time), _us(atomic_time), idioms, KERNELS[op_name].sums(problem)))
    return rows


def _us(timing) -> float | None:
    return timing.seconds * 1e6 if timing else None


def against_cann(checkout: Path, op_names, tags: dict, shapes: dict, seed: int) -> list[CannRow]:
    """Every op x combo (default: the op's AtlasA2 combos) x shape (default: KERNELS' shapes)."""
    from opgen.ops import get_op
    from opgen.targets import get_target
    from opgen.targets.ascend.hardware import describe

    hw, target = describe(PRODUCT), get_target("ascend-emu").for_product(PRODUCT)
    rng = np.random.default_rng(seed)
    rows = []
    for op_name in op_names:
        op = get_op(op_name)
        for tag in tags.get(op_name) or [c.tag for c in op.products[PRODUCT]]:
            for text in shapes.get(op_name) or KERNELS[op_name].shapes:
                rows += compare_case(checkout, op_name, tag, op.parse_problem(text), rng, hw, target)
    return rows


def print_rows(rows: list[CannRow], stream=None) -> None:
    """The table: errors in ulps of the output dtype (and over opgen.verify's tolerance), and
    modelled microseconds of both kernels on the emulation's timing model (AtlasA2)."""
    import sys

    stream = stream or sys.stdout
    wo, ws = max([14, *(len(r.op) for r in rows)]), max([10, *(len(r.shape) for r in rows)])
    head = (f"{'op':<{wo}} {'shape':<{ws}} {'dtypes':<10} {'out':<7} {'CANN ulps':>10} {'tol':>6} {'opgen ulps':>10} "
            f"{'tol':>6} {'CANN us':>9} {'opgen us':>9} {'atomic':>9} {'CANN sums':>13} {'like/CANN':>9}")
    print(head, file=stream)
    print("-" * len(head), file=stream)
    for r in rows:
        ratio = f"{r.like_us / r.cann_us:8.2f}x" if r.like_us and r.cann_us else "-"
        us = [f"{v:9.1f}" if v is not None else "-" for v in (r.opgen_us, r.opgen_atomic_us)]
        print(f"{r.op:<{wo}} {r.shape:<{ws}} {r.dtypes:<10} {r.output:<7} {r.cann_ulps:10.2f} {r.cann_tol:6.3f} "
              f"{r.opgen_ulps:10.2f} {r.opgen_tol:6.3f} {r.cann_us:9.1f} {us[0]:>9} {us[1]:>9} {r.cann_sums:>13} "
              f"{ratio:>9}", file=stream)
    print(f"ulps: max |out - float64| in rounding steps of the output dtype; tol: max error over opgen.verify's "
          f"tolerance (<= 1 passes; opgen's: the worse of its two kernels); us: modelled on {PRODUCT}'s timing model "
          f"(targets/ascend/emu/emu_timing.h). opgen us: its default, deterministic column sums; atomic: with "
          f"sums=atomic. CANN sums: how CANN's kernel adds its column sums on the row (the op's CannKernel.sums: "
          f"atomically, or deterministically through its workspace); like/CANN: opgen's kernel summing the same "
          f"way over CANN's.", file=stream)
    if any(r.idioms for r in rows):
        print("CANN's kernels cast 16-bit data into the float buffer holding it (ops-nn Cast2FloatIf): a partial "
              "overlap within one iteration that asc-devkit's general constraints call unsupported; accepted "
              "for CANN's kernels only and computed read-before-write.", file=stream)
