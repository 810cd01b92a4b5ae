"""Build and run emitted AscendC under the CPU emulation: g++ -> shared library -> ctypes.

``project(func, symbol, hw)`` prints the CANN custom-op layout (op_kernel/, op_host/) with
the printer of the pattern the schedule recorded (rows, groups, channels, segments);
``compile_project`` builds kernel + host tiling + the emulation header into one shared
library (cached by a hash of the sources and flags under opgen's cache directory, since g++
on the emulation header takes seconds); ``EmuModule`` is what the target's ``build``
returns: ``module[symbol](*tvm_tensors)`` computes the tiling with the library's own host
tiling function, allocates the workspace, launches the kernel on ``block_dim`` emulated
cores and raises with the emulation's message on any violation.
"""
from __future__ import annotations

import concurrent.futures
import ctypes
import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from opgen import diskcache
from opgen.environment import usable_cpus
from opgen.dtypes import numpy_dtype
from opgen.targets.spec import ProblemRefused, Scratch
from opgen.targets.ascend.emit_channels import read_channel_kernel
from opgen.targets.ascend.cann import GE_CODE, face_of
from opgen.targets.ascend.emit_channels_flow import channel_kernel_source, channel_tiling_source
from opgen.targets.ascend.emit_flow import kernel_source
from opgen.targets.ascend.emit_groups import read_group_kernel
from opgen.targets.ascend.emit_groups_flow import group_kernel_source, group_tiling_source
from opgen.targets.ascend.emit_segments import read_segment_kernel, segment_kernel_source, segment_tiling_source
from opgen.targets.ascend.emitter import read_row_kernel
from opgen.targets.ascend.exprs import EmitError
from opgen.targets.ascend.host import FIELDS, tiling_source
from opgen.targets.ascend.host_context import def_cpp, host_header, kernel_view, tiling_cpp, tiling_data_header
from opgen.targets.ascend import timing as pipe_timing

EMU_DIR = Path(__file__).parent / "emu"
SYSTEM_WORKSPACE_BYTES = 16 * 1024 * 1024   # CANN's system workspace (platform_ascendc.h, emu_runtime.h)
# -fno-gnu-unique: the host emulation's OpDef registry is an inline function's static; as a
# GNU unique symbol glibc would share it between every loaded kernel library (RTLD_LOCAL or
# not), and one library's TilingFunc would answer for another's op of the same name.
CXXFLAGS = ("-std=c++17", "-O1", "-pthread", "-shared", "-fPIC", "-Wall", "-Werror", "-fno-gnu-unique")


def emulation_available() -> bool:
    return (EMU_DIR / "kernel_operator.h").exists() and shutil.which("g++") is not None


def _pattern(func) -> tuple[str, dict]:
    from tvm import s_tir

    sch = s_tir.Schedule(func)
    ann = sch.get(sch.get_sblock("root")).annotations
    knobs = {key[len("ascend."):]: (str(v) if isinstance(v, str) or hasattr(v, "startswith") else int(v))
             for key, v in ann.items() if key.startswith("ascend.") and key != "ascend.pattern"}
    return str(ann.get("ascend.pattern", "")), knobs


NO_PAD_ADAPTER = """
// This product has no DataCopyPad: each copy moves whole 32-byte blocks with DataCopy. The
// host tiling admits only shapes whose copied rows are whole blocks (else it returns 2).
template <typename T>
__aicore__ inline void OpgenCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyExtParams& p,
                                 const DataCopyPadExtParams<T>&) {
    DataCopy(dst, src, DataCopyParams(p.blockCount, p.blockLen / 32, p.srcStride / 32, p.dstStride));
}
template <typename T>
__aicore__ inline void OpgenCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyExtParams& p) {
    DataCopy(dst, src, DataCopyParams(p.blockCount, p.blockLen / 32, p.srcStride, p.dstStride / 32));
}
"""


def without_data_copy_pad(kernel: str) -> str:
    """The kernel for a product without DataCopyPad: its copies go through whole-block DataCopy."""
    marker = "using namespace AscendC;\n"
    return kernel.replace("DataCopyPad(", "OpgenCopy(").replace(marker, marker + NO_PAD_ADAPTER, 1)


def project(func, symbol: str, hw) -> tuple[object, dict]:
    """(the kernel description, {relative path: text}) of the CANN layout, by the pattern the
    schedule recorded (EmitError for a pattern without a printer)."""
    pattern, knobs = _pattern(func)
    readers = {"groups": (read_group_kernel, group_kernel_source, group_tiling_source),
               "channels": (read_channel_kernel, channel_kernel_source, channel_tiling_source),
               "rows": (lambda f, s, _: read_row_kernel(f, s), kernel_source, tiling_source),
               "segments": (read_segment_kernel, segment_kernel_source, segment_tiling_source)}
    if pattern not in readers:
        raise EmitError(f"no AscendC printer for the schedule pattern {pattern!r} of {symbol}")
    read, print_kernel, print_tiling = readers[pattern]
    k = read(func, symbol, knobs)
    k.pad = hw.data_copy_pad
    k.buffers = list(func.params)
    k.face = face_of(func, k)
    kernel = print_kernel(k, hw)
    if not hw.data_copy_pad:
        kernel = without_data_copy_pad(kernel)
    row = {p.name: p.dtype for p in k.face.entry}
    files = {
        f"op_kernel/{symbol}.cpp": kernel,
        f"op_kernel/{symbol}_tiling_data.h": tiling_data_header(k),
        f"op_host/{symbol}_tiling.h": host_header(k),
        f"op_host/{symbol}_tiling.cpp": tiling_cpp(k, k.face, print_tiling(k, hw)),
        f"op_host/{symbol}_def.cpp": def_cpp(k.symbol, k.face, {hw.product: [row]}, f" ({k.symbol})"),
    }
    return k, files


def write_project(files: dict, root: Path) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def emu_flags(hw) -> list[str]:
    flags = [f"-DOPGEN_UB_BYTES={hw.usable_ub_bytes}", f"-DOPGEN_MAX_BUFFERS={hw.max_buffers}", "-DOPGEN_EMU",
             f"-DOPGEN_VECTOR_CORES={hw.vector_cores}", "-DOPGEN_EMU_CHECK_WAR"]
    flags += ["-DOPGEN_REDUCE_ACROSS_TREE"] if hw.reduce_across_tree else []
    return flags + ([] if hw.data_copy_pad else ["-DOPGEN_NO_DATACOPYPAD"])


def include_flags(root: Path) -> list[str]:
    """The emulation's kernel and host headers, then the project's own folders."""
    return [f"-I{EMU_DIR}", f"-I{EMU_DIR / 'host'}", f"-I{root / 'op_kernel'}", f"-I{root / 'op_host'}"]


def emulation_library(name: str, flags: list, key: str, lay_out, what: str, symbol: str) -> Path:
    """A shared library built by g++ with ``flags`` against the emulation headers, cached (in
    the trusted-or-private code folder) by ``name``, the flags, ``key`` (the sources' text)
    and the headers. ``lay_out(folder)`` writes the sources into a scratch folder and returns
    (the .cpp files, flags that name the folder, which stay out of the key); a compile error
    is a RuntimeError naming ``what``. Shared by opgen's emitted projects and CANN's kernels
    (targets/ascend/cann_src.py), whose launch entry for kernel ``symbol`` it must export.

    A cached library that is damaged is set aside and rebuilt (opgen.diskcache.intact); one
    without the entry too, and since this process has then loaded the old file under that
    name (the dynamic loader would hand it out again), the rebuilt one is loaded from a
    private copy."""
    header_text = "".join(p.read_text() for p in sorted(EMU_DIR.rglob("*.h")))
    digest = hashlib.sha256("\0".join([diskcache.KEY_FORMAT, key, *flags, header_text]).encode()).hexdigest()
    lib = diskcache.code_dir("ascend-emu", "emulation libraries") / f"{name}-{digest[:20]}.so"
    if diskcache.intact(lib):
        if _exports(lib, launch_entry(symbol)):
            return lib
        diskcache.set_aside(lib, f"it lacks {launch_entry(symbol)}")
        return _compile(flags, lay_out, what, lib, private_copy=True)
    return _compile(flags, lay_out, what, lib)


def launch_entry(symbol: str) -> str:
    """The emulation's exported launch function of kernel ``symbol`` (OPGEN_EMU_EXPORT)."""
    return f"opgen_emu_launch_{symbol}"


def _exports(lib: Path, entry: str) -> bool:
    try:
        return hasattr(ctypes.CDLL(str(lib)), entry)
    except OSError:
        return False


def _compile(flags: list, lay_out, what: str, lib: Path, private_copy: bool = False) -> Path:
    """g++ the sources into ``lib`` (sealed); with ``private_copy`` also into this process's
    private scratch folder under a name of its own, which is returned."""
    with tempfile.TemporaryDirectory() as tmp:
        sources, folder_flags = lay_out(Path(tmp))
        objects = _compile_each([*flags, *folder_flags], sources, Path(tmp), what)
        out = Path(tmp) / "lib.so"
        _gxx([*flags, *map(str, objects), "-o", str(out)], what)
        diskcache.place(out, lib)
    return diskcache.private_copy(lib) if private_copy else lib


def _compile_each(flags: list, sources: list, folder: Path, what: str) -> list:
    """Each source to its object file, as many g++ at once as this process may use cores:
    a project is a kernel and two host files, and one g++ given all three compiles them one
    after another (the kernel takes most of the time, the host files the rest).

    The pool starts them in the order given: a caller lists the longest first
    (project_sources)."""
    objects = [folder / f"{index}.o" for index in range(len(sources))]
    jobs = [[*flags, "-c", str(source), "-o", str(obj)] for source, obj in zip(sources, objects)]
    with concurrent.futures.ThreadPoolExecutor(min(len(jobs), usable_cpus()) or 1) as pool:
        list(pool.map(lambda args: _gxx(args, what), jobs))
    return objects


def _gxx(args: list, what: str) -> None:
    done = subprocess.run(["g++", *args], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"g++ failed on {what}:\n{done.stderr[-4000:]}")


def project_sources(files: dict, root: Path) -> list:
    """A project's translation units under ``root``: its kernel (op_kernel/) first, then one
    unit holding every op_host source (``host_unit``). The kernel takes most of the g++ time,
    and sorted by path it came after the host files (op_host/), so on two cores it waited for
    one of them (~1.2 s of a 3.2 s kernel compile; measured 4.5-5.0 s per project then,
    3.1-3.5 s kernel first)."""
    cpp = sorted(rel for rel in files if rel.endswith(".cpp"))
    kernels = [root / rel for rel in cpp if rel.startswith("op_kernel/")]
    hosts = [rel for rel in cpp if not rel.startswith("op_kernel/")]
    return kernels + ([host_unit(hosts, root)] if hosts else [])


def host_unit(hosts: list, root: Path) -> Path:
    """One translation unit that includes the op_host sources ``hosts`` (written under
    ``root``, beside the project's folders), so that their g++ parses the host headers once:
    2.1 CPU-s for a project's TilingFunc and OpDef files against 3.4 s apart (g++ 11, -O1).
    CANN compiles them apart; what only that would catch (a source leaning on another's
    includes, internal names that clash) is checked where a project is built as CANN builds
    it: the op-level project test compiles each file on its own (tests/test_ascend_project.py)."""
    unit = root / "opgen_op_host_unit.cpp"
    unit.write_text("".join(f'#include "{rel}"\n' for rel in hosts))
    return unit


def compile_project(files: dict, symbol: str, hw, extra_flags=()) -> Path:
    """The shared library of kernel + host tiling (built once per distinct source and flags)."""
    def lay_out(root: Path):
        write_project(files, root)
        return project_sources(files, root), include_flags(root)
    return emulation_library(symbol, list(CXXFLAGS) + emu_flags(hw) + list(extra_flags),
                             sorted(files.items()).__repr__(), lay_out, f"the emitted {symbol}", symbol)


def bind_launch(lib, symbol: str):
    """The emulation's typed launch entry of kernel ``symbol`` in ``lib``:
    ``launch(block_dim, pointers, sizes, count) -> status``."""
    launch = getattr(lib, launch_entry(symbol))
    launch.argtypes = [ctypes.c_uint32, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_uint64),
                       ctypes.c_uint32]
    launch.restype = ctypes.c_int
    lib.opgen_emu_last_error.restype = ctypes.c_char_p
    return launch


def run_launch(lib, launch, hw, block_dim: int, ptrs: list, sizes: list, tiling_key: int, what: str):
    """One launch on the emulation with ``hw``'s timing parameters and the tiling key
    TILING_KEY_IS sees; returns the modelled time, or raises RuntimeError with the
    emulation's message prefixed by ``what``."""
    argv = (ctypes.c_void_p * len(ptrs))(*ptrs)
    sizev = (ctypes.c_uint64 * len(sizes))(*sizes)
    pipe_timing.configure(lib, hw.timing)
    lib.opgen_emu_set_tiling_key(ctypes.c_uint64(tiling_key))
    if launch(block_dim, argv, sizev, len(ptrs)):
        raise RuntimeError(f"{what}: {lib.opgen_emu_last_error().decode(errors='replace')}")
    return pipe_timing.last(lib)


def tiling_struct(fields: tuple):
    """A ctypes struct of int64 ``fields`` (the emitted tiling header's struct)."""
    class Tiling(ctypes.Structure):
        _fields_ = [(name, ctypes.c_int64) for name in fields]

        def as_dict(self) -> dict:
            return {name: int(getattr(self, name)) for name in fields}
    return Tiling


Tiling = tiling_struct(FIELDS)


def compile_host(files: dict, symbol: str, hw, folder: Path) -> Path:
    """A shared library of the project's op_host sources alone (the TilingFunc, InferShape,
    the OpDef) against the emulation's host headers, built in ``folder``, not cached: a
    host-only build takes a fraction of the kernel's g++ time, for tests that replay the
    TilingFunc on many calls (tests/test_ascend_host_tiling.py)."""
    write_project(files, folder)
    sources = [folder / rel for rel in sorted(files) if rel.startswith("op_host/") and rel.endswith(".cpp")]
    lib = folder / f"{symbol}_host.so"
    _gxx([*CXXFLAGS, "-O0", *emu_flags(hw), *include_flags(folder), *map(str, sources), "-o", str(lib)],
         f"the op_host sources of {symbol}")
    return lib


class HostTiling:
    """The emitted TilingFunc in a loaded library (a whole project's, or compile_host's),
    run through the emulation's TilingContext."""

    def __init__(self, lib_path: Path, kernel, hw):
        self.lib = ctypes.CDLL(str(lib_path))
        self.k, self.hw = kernel, hw
        self.lib.opgen_emu_host_last_error.restype = ctypes.c_char_p
        self.struct = tiling_struct(kernel.fields)
        self.view = kernel_view(kernel, kernel.face)    # how the TilingFunc reads a call
        self.tiling_key = 0

    def _context_inputs(self, shapes: dict) -> tuple:
        """(ranks, flat dims, ge dtype codes) of the entry's inputs, ``shapes`` by CANN
        name: an input the caller did not give is left rank 0 (the view reads only the
        inputs it names)."""
        ins = self.k.face.inputs + self.k.face.extra
        dims = [tuple(int(v) for v in shapes.get(p.name, ())) for p in ins]
        ranks = (ctypes.c_uint32 * max(1, len(ins)))(*[len(d) for d in dims])
        flat = [v for d in dims for v in d]
        flat_arr = (ctypes.c_int64 * max(1, len(flat)))(*flat)
        codes = (ctypes.c_int32 * max(1, len(ins)))(*[GE_CODE[p.dtype] for p in ins])
        return len(ins), ranks, flat_arr, codes

    def run_tiling(self, shapes: dict, attrs: dict | None = None):
        """The TilingFunc's (tiling struct, tiling key, workspace bytes) for a call as CANN's
        op sees it: input ``shapes`` and ``attrs`` by their CANN names (an attribute not
        given keeps its OpDef default), on the product's platform (its vector cores and
        usable UB). RuntimeError with the TilingFunc's message where it refuses."""
        n_in, ranks, dims, codes = self._context_inputs(shapes)
        t = self.struct()
        key, block_dim, ws, nbytes = ctypes.c_uint64(), ctypes.c_uint32(), ctypes.c_uint64(), ctypes.c_uint64()
        none32 = (ctypes.c_uint32 * 1)()
        text = ";".join(f"{name}={int(value)}" for name, value in (attrs or {}).items())
        status = self.lib.opgen_emu_tiling(
            self.k.face.op_type.encode(), ctypes.c_uint32(n_in), ranks, dims, codes, ctypes.c_uint32(0), none32,
            (ctypes.c_int64 * 1)(), (ctypes.c_int32 * 1)(), text.encode(), ctypes.c_uint32(self.hw.vector_cores),
            ctypes.c_uint64(self.hw.usable_ub_bytes), self.hw.soc.encode(), ctypes.byref(key),
            ctypes.byref(block_dim), ctypes.byref(ws), ctypes.byref(t), ctypes.c_uint64(ctypes.sizeof(t)),
            ctypes.byref(nbytes))
        if status:
            why = self.lib.opgen_emu_host_last_error().decode(errors="replace")
            raise ProblemRefused(f"{self.k.symbol}: the host tiling refused {dict(shapes)} {attrs or {}} on "
                               f"{self.hw.product}: {why}")
        if nbytes.value != ctypes.sizeof(t) or block_dim.value != t.block_dim:
            raise RuntimeError(f"{self.k.symbol}: the TilingFunc set {nbytes.value} B of tiling data and block dim "
                               f"{block_dim.value}; the struct has {ctypes.sizeof(t)} B and block_dim {t.block_dim}")
        return t, int(key.value), int(ws.value)

    def tiling(self, *sizes: int):
        """The host tiling for ``sizes`` (the tile input's kernel shape: rows, cols / N, G, D,
        HW / N, C, HW), run on the one user call the op's view reads as those sizes
        (KernelView.user_call: (N, G*D, HW) with num_groups = G; x (rows, cols) with gamma
        (cols,)), so the runner goes through the same TilingFunc a device would."""
        shapes, attrs = self.view.user_call(sizes)
        t, key, ws = self.run_tiling(shapes, attrs)
        user = ws - SYSTEM_WORKSPACE_BYTES
        if user != self.k.workspace_floats(t) * 4:
            raise RuntimeError(f"{self.k.symbol}: the TilingFunc asks for {user} B of user workspace, the kernel "
                               f"uses {self.k.workspace_floats(t) * 4}")
        self.tiling_key = key
        return t


class EmuKernel(HostTiling):
    """One emitted kernel in a loaded library: call it with TVM tensors in parameter order.
    The tiling comes from the project's own TilingFunc, run through the emulation's
    TilingContext (``tiling``); the launch passes the buffers in the kernel entry's order."""

    def __init__(self, lib_path: Path, kernel, hw):
        super().__init__(lib_path, kernel, hw)
        self.launch = bind_launch(self.lib, kernel.symbol)
        self.timings = []       # ModelledTime of each launch: the emulation's timing model
        self.last_timing = None

    def workspace_shape(self, shapes: dict) -> tuple:
        """The GM user workspace (float32 elements) the host tiling asks for, given the kernel
        shapes by tensor name: the aclnn layer gives it a slot of the caller's workspace,
        as CANN's GetWorkspaceSize does (the system part is the emulation's own)."""
        by_name = {name: SimpleNamespace(shape=tuple(shape)) for name, shape in shapes.items()}
        return (max(1, self.k.workspace_floats(self.tiling(*self.k.size_args(by_name)))),)

    def __call__(self, *tensors) -> None:
        """Run on the kernel's tensors, then (when the caller sizes it, see workspace_shape)
        the workspace; without one the workspace is allocated here (direct module calls)."""
        n = len(self.k.args)
        self.last_timing = None     # set again by a launch (none for an empty problem)
        by_name = dict(zip(self.k.param_names, tensors[:n]))
        t = self.tiling(*self.k.size_args(by_name))
        if t.block_dim == 0:
            return
        need = max(1, self.k.workspace_floats(t)) * 4
        if len(tensors) > n:
            ws_ptr, ws_bytes = tensors[n].data_ptr(), int(np.prod(tensors[n].shape)) * 4
            if ws_bytes < need:
                raise RuntimeError(f"{self.k.symbol}: workspace of {ws_bytes} bytes; the tiling needs {need}")
        else:   # not zeroed, like CANN's: the kernel must write what it reads
            own = np.full(need // 4, np.nan, np.float32)
            ws_ptr, ws_bytes = own.ctypes.data, own.nbytes
        tiling = np.frombuffer(bytes(t), np.uint8).copy()
        ptrs, sizes = [], []
        for p in self.k.face.entry:          # CANN's order: inputs, attribute tensors, outputs
            arr = by_name.get(p.tensor)
            ptrs.append(arr.data_ptr() if arr is not None else None)
            sizes.append(int(np.prod(arr.shape)) * numpy_dtype(p.dtype).itemsize if arr is not None else 0)
        ptrs += [ws_ptr, tiling.ctypes.data]
        sizes += [ws_bytes, tiling.nbytes]
        ptrs = [p if s else None for p, s in zip(ptrs, sizes)]
        self.last_timing = run_launch(self.lib, self.launch, self.hw, t.block_dim, ptrs, sizes, self.tiling_key,
                                      "AscendC emulation")
        self.timings.append(self.last_timing)

    def largest_timing(self):
        """The modelled time of the launch that moved the most GM bytes (None before any)."""
        return max(self.timings, key=lambda m: m.gm_bytes, default=None)


class EmuModule:
    """What AscendEmuTarget.build returns: ``module[symbol]`` is the callable kernel; the
    CANN project files ride along for ``opgen generate`` to write."""

    def __init__(self, symbol: str, kernel: EmuKernel, files: dict):
        self.symbol, self.kernel, self.files = symbol, kernel, files

    def __getitem__(self, symbol: str):
        if symbol != self.symbol:
            raise KeyError(f"this module holds {self.symbol}, not {symbol}")
        return self.kernel

    @property
    def scratch(self) -> tuple:
        """The kernel's own scratch (opgen.targets.Scratch): one GM workspace sized by the
        host tiling, instead of the TIR's hoisted buffers, which AscendC does not use."""
        return (Scratch("workspace", "float32", self.kernel.workspace_shape),)
