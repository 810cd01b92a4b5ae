"""SASS instructions per element of a CUDA kernel's elementwise loop, read from its cubin.

Without a GPU nothing can be timed, but the machine code can be counted: the instructions
ptxas emits per element of the loop that writes the outputs are what a memory-bound kernel
spends besides its loads and stores (64-bit index arithmetic, per-element reloads of a
row's scalars, scalar 16-bit accesses: all visible here).

``sass(cubin)`` disassembles with ``cuobjdump -sass`` (pip ``nvidia-cuda-cuobjdump``, the
``sass`` extra of pyproject.toml, or a CUDA toolkit's), which runs ``nvdisasm`` (pip
``nvidia-cuda-nvdisasm``, also in the extra); without either ``missing()`` says how to get
it, and a cuobjdump that fails raises ``SassError`` with its reason in one phrase (the
cuda target's row note), never a traceback. The measure, per kernel function: its loops are
the backward branches; among the innermost ones (containing no other) that load from global
memory, the one storing the most bytes there is the elementwise loop (a loop that only
stores zeroes partials); its trip covers ``stored bytes /
stored_bytes_per_element`` elements (ptxas unrolls, so a trip is often several elements),
and the figure is its instruction count divided by that. ``stored_bytes_per_element`` is
the bytes the kernel writes per element of its data: the element sizes of the parameters of
the data's rank that it stores to (an elementwise output and the column partials,
``stored_bytes_per_element(func)``). ``all_passes`` counts every pass over the data instead
(the row reductions too), pairing the loops with the passes the scheduled TIR holds
(targets/gpu_traffic.py).
"""
from __future__ import annotations

import functools
import glob
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from opgen.lazy import tirx, tvm, tvm_ffi

_FUNCTION = re.compile(r"Function : (\S+)")
_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_BRANCH = re.compile(r"\bBRA\b(?:\s+!?U?P\d,)?\s+(0x[0-9a-f]+)")
_STORE_BYTES = {"U8": 1, "S8": 1, "U16": 2, "S16": 2, "64": 8, "128": 16}


NVDISASM_NOT_FOUND = "nvdisasm not found (pip install nvidia-cuda-nvdisasm)"


class SassError(RuntimeError):
    """cuobjdump could not disassemble a cubin; the message is the reason in one phrase,
    short enough for the note of a row of ``opgen generate --target cuda``."""


def _pip_tool(name: str) -> str | None:
    """An executable of NVIDIA's pip wheels (nvidia/<cu13 or a tool's folder>/bin/<name>)."""
    try:
        import nvidia
    except ImportError:
        return None
    for root in nvidia.__path__:
        for path in sorted(glob.glob(os.path.join(root, "*", "bin", name))):
            if os.access(path, os.X_OK):
                return path
    return None


@functools.lru_cache(maxsize=None)
def cuobjdump() -> str | None:
    """The cuobjdump binary: on PATH, else the pip wheel's (nvidia/*/bin/cuobjdump)."""
    return shutil.which("cuobjdump") or _pip_tool("cuobjdump")


def nvdisasm() -> str | None:
    """The nvdisasm that ``cuobjdump -sass`` will run. cuobjdump looks next to itself, in
    the folder NVDISASM_PATH names and on PATH; opgen also takes the pip wheel's, whose
    folder ``sass`` puts on cuobjdump's PATH (a toolkit's cuobjdump on PATH would not find
    it otherwise)."""
    beside = [os.path.join(os.path.dirname(found), "nvdisasm") for found in (cuobjdump(),) if found]
    named = [os.path.join(os.environ["NVDISASM_PATH"], "nvdisasm")] if os.environ.get("NVDISASM_PATH") else []
    for path in beside + named:
        if os.access(path, os.X_OK):
            return path
    return shutil.which("nvdisasm") or _pip_tool("nvdisasm")


def missing() -> str | None:
    """Why SASS cannot be counted here (one line naming what to install), or None."""
    if not cuobjdump():
        return 'cuobjdump is not installed (pip install -e ".[sass]")'
    if not nvdisasm():
        return NVDISASM_NOT_FOUND   # cuobjdump -sass runs it
    return None


def _environment() -> dict:
    """cuobjdump's environment: this one, with nvdisasm's folder first on PATH."""
    env = dict(os.environ)
    found = nvdisasm()
    if found:
        env["PATH"] = os.pathsep.join([os.path.dirname(found), env.get("PATH", "")])
    return env


def _failure(log: str) -> str:
    """cuobjdump's error output as one phrase: what to install when it is nvdisasm that
    it could not find, else its last line."""
    if "nvdisasm" in log and "could not find" in log.lower():
        return f"cuobjdump failed: {NVDISASM_NOT_FOUND}"
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    return f"cuobjdump failed: {lines[-1][:160] if lines else 'no message'}"


def _disassemble(path: Path) -> str:
    """``cuobjdump -sass path``'s output; SassError when it cannot run or fails."""
    try:
        proc = subprocess.run([cuobjdump(), "-sass", str(path)], capture_output=True, text=True, timeout=120,
                              env=_environment())
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SassError(f"cuobjdump failed: {err}") from None
    if proc.returncode:
        raise SassError(_failure(proc.stderr + proc.stdout))
    return proc.stdout


def sass(cubin: bytes) -> dict:
    """function name -> [(address, instruction text)] of ``cubin`` (cuobjdump -sass;
    SassError when it fails)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        out = _disassemble(path)
    functions, current = {}, None
    for line in out.splitlines():
        if m := _FUNCTION.search(line):
            current = functions.setdefault(m.group(1), [])
        elif (m := _INSTRUCTION.search(line)) and current is not None:
            current.append((int(m.group(1), 16), m.group(2).strip()))
    return functions


def _stored_bytes(text: str) -> int:
    op = text.split()[0] if not text.startswith("@") else text.split()[1]
    if not op.startswith("STG"):
        return 0
    suffix = op.split(".")[-1]
    return _STORE_BYTES.get(suffix, 4)


@dataclass(frozen=True)
class Loop:
    function: str
    instructions: int
    stored_bytes: int

    def per_element(self, bytes_per_element: int) -> float:
        return self.instructions * bytes_per_element / self.stored_bytes


def elementwise_loop(functions: dict) -> Loop | None:
    """The innermost loop that loads and stores the most bytes, over every function (None:
    no loop does both)."""
    best = None
    for name, code in functions.items():
        loops = []
        for address, text in code:
            m = _BRANCH.search(text)
            if m and int(m.group(1), 16) < address:
                loops.append((int(m.group(1), 16), address))
        inner = [(a, b) for a, b in loops if not any(a <= c and d <= b and (c, d) != (a, b) for c, d in loops)]
        for start, end in inner:
            body = [t for addr, t in code if start <= addr <= end]
            stored = sum(_stored_bytes(t) for t in body)
            loads = any(" LDG" in f" {t}" for t in body)   # a loop that only stores fills (zeroes partials)
            if stored and loads and (best is None or stored > best.stored_bytes):
                best = Loop(name, len(body), stored)
    return best


def _loaded_bytes(text: str) -> int:
    op = text.split()[0] if not text.startswith("@") else text.split()[1]
    if not op.startswith("LDG"):
        return 0
    sizes = [_STORE_BYTES[part] for part in op.split(".")[1:] if part in _STORE_BYTES]
    return sizes[0] if sizes else 4


def _inner_loops(code: list) -> list:
    """(start, end) of the innermost loops (backward branches holding no other) of one
    function, in address order."""
    loops = []
    for address, text in code:
        m = _BRANCH.search(text)
        if m and int(m.group(1), 16) < address:
            loops.append((int(m.group(1), 16), address))
    inner = [(a, b) for a, b in loops if not any(a <= c and d <= b and (c, d) != (a, b) for c, d in loops)]
    return sorted(inner)


def _kernel_index(name: str) -> int:
    """A TVM kernel's launch order from its name: <symbol>_kernel, <symbol>_kernel_1, ..."""
    m = re.search(r"_kernel(?:_(\d+))?$", name)
    return int(m.group(1)) if m and m.group(1) else 0


def all_passes(functions: dict, hot: list) -> float | None:
    """SASS instructions per element of the data over every pass over it (row reductions and
    the elementwise output, in every kernel): ``hot`` are the passes the scheduled TIR holds
    (gpu_traffic.hot_loops, kernel by kernel in order). Each kernel's innermost loops that
    load from global memory (a loop that only stores zeroes the partials once per block)
    are paired with its passes class by class, the passes that store with the loops that
    store, the load-only ones with the load-only loops: in address order when there are as
    many; when ptxas made several loops of a kernel's single pass of a class (an unrolled
    loop, its remainder, a copy per path, a loop of loads whose values go unused on a path
    that computes nothing), the one that computes the most: the most floating-point
    instructions a trip, then the most bytes. A loop that stores covers ``stored bytes / the pass's stored bytes per element``
    elements a trip, a load-only one ``loaded bytes / its loaded bytes per element``. None
    when they do not pair up (several passes of a class in fewer or more loops): the figure
    is then not measured, never guessed. Per-row and per-column work (the cross-thread
    reduction, the final sum of the partials over their rows) is not per element and not
    in it."""
    total = 0.0
    for name, code in functions.items():
        passes = [h for h in hot if h.kernel == _kernel_index(name)]
        if not passes:
            continue
        loops = [[t for addr, t in code if start <= addr <= end] for start, end in _inner_loops(code)]
        loops = [body for body in loops if any(_loaded_bytes(t) for t in body)]
        for storing in (False, True):
            steps = [h for h in passes if bool(h.stored) == storing]
            found = [b for b in loops if bool(sum(_stored_bytes(t) for t in b)) == storing]
            if len(found) > len(steps) == 1:
                found = [max(found, key=lambda b: (_float_ops(b), _moved_bytes(b)))]
            if len(found) != len(steps):
                return None
            for body, step in zip(found, steps):
                stored, loaded = sum(_stored_bytes(t) for t in body), sum(_loaded_bytes(t) for t in body)
                total += len(body) / (stored / step.stored if storing else loaded / step.loaded)
    return total


def _float_ops(body: list) -> int:
    """Floating-point arithmetic instructions (FFMA, FMUL, HFMA2, F2F, ...) in ``body``."""
    ops = [t.split()[1] if t.startswith("@") else t.split()[0] for t in body]
    return sum(op[0] in "FH" and not op.startswith(("FLO", "FSEL", "FSETP")) for op in ops)


def _moved_bytes(body: list) -> int:
    return sum(_stored_bytes(t) + _loaded_bytes(t) for t in body)


def stored_bytes_per_element(func) -> int:
    """Bytes ``func`` (a scheduled PrimFunc) stores per element of its data: the element
    sizes of its parameters of the highest rank that it writes."""
    rank = max(len(p.shape) for p in func.params)
    written = set()

    def visit(node):
        if isinstance(node, tirx.BufferStore):
            written.add(node.buffer.name)
        return node
    tvm_ffi.structural_map(func.body, [(tirx.BufferStore, visit)], order="post")
    return sum(tvm.DataType(str(p.dtype)).bits // 8 for p in func.params
               if len(p.shape) == rank and p.name in written)


def per_element(cubin: bytes, bytes_per_element: int) -> float | None:
    """SASS instructions per element of ``cubin``'s elementwise loop (None: no cuobjdump,
    or no loop that stores; SassError: cuobjdump failed)."""
    if not cuobjdump() or not cubin or not bytes_per_element:
        return None
    loop = elementwise_loop(sass(cubin))
    return None if loop is None else loop.per_element(bytes_per_element)
