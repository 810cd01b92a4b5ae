"""SASS instructions per element of a CUDA kernel's elementwise loop, read from its cubin.

Without a GPU nothing can be timed, but the machine code can be counted: the instructions
ptxas emits per element of the loop that writes the outputs are what a memory-bound kernel
spends besides its loads and stores (64-bit index arithmetic, per-element reloads of a
row's scalars, scalar 16-bit accesses: all visible here).

``sass(cubin)`` disassembles with ``cuobjdump -sass`` (pip ``nvidia-cuda-cuobjdump``, the
``sass`` extra of pyproject.toml, or a CUDA toolkit's); without it ``per_element`` returns
None and ``missing()`` says how to get it. The measure, per kernel function: its loops are
the backward branches; among the innermost ones (containing no other) that load from global
memory, the one storing the most bytes there is the elementwise loop (a loop that only
stores zeroes partials); its trip covers ``stored bytes /
stored_bytes_per_element`` elements (ptxas unrolls, so a trip is often several elements),
and the figure is its instruction count divided by that. ``stored_bytes_per_element`` is
the bytes the kernel writes per element of its data: the element sizes of the parameters of
the data's rank that it stores to (an elementwise output and the column partials,
``stored_bytes_per_element(func)``).
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

import tvm
import tvm_ffi
from tvm import tirx

_FUNCTION = re.compile(r"Function : (\S+)")
_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_BRANCH = re.compile(r"\bBRA\b(?:\s+!?U?P\d,)?\s+(0x[0-9a-f]+)")
_STORE_BYTES = {"U8": 1, "S8": 1, "U16": 2, "S16": 2, "64": 8, "128": 16}


@functools.lru_cache(maxsize=None)
def cuobjdump() -> str | None:
    """The cuobjdump binary: on PATH, else the pip wheel's (nvidia/*/bin/cuobjdump)."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    try:
        import nvidia
    except ImportError:
        return None
    for root in nvidia.__path__:
        for path in sorted(glob.glob(os.path.join(root, "*", "bin", "cuobjdump"))):
            if os.access(path, os.X_OK):
                return path
    return None


def missing() -> str | None:
    return None if cuobjdump() else 'cuobjdump is not installed (pip install -e ".[sass]")'


def sass(cubin: bytes) -> dict:
    """function name -> [(address, instruction text)] of ``cubin`` (cuobjdump -sass)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        out = subprocess.run([cuobjdump(), "-sass", str(path)], capture_output=True, text=True, timeout=120,
                             check=True).stdout
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
    or no loop that stores)."""
    if not cuobjdump() or not cubin or not bytes_per_element:
        return None
    loop = elementwise_loop(sass(cubin))
    return None if loop is None else loop.per_element(bytes_per_element)
