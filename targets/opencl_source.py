"""Rewrites of TVM's OpenCL C: float16 without ``cl_khr_fp16``; __local declarations
hoisted to the kernel's outermost scope; a barrier after thread-0 stores (a PoCL bug).

__local scope. OpenCL C allows ``__local`` variables only in a kernel's outermost scope.
TVM's StorageRewrite pass is what normally lifts allocations there; the GPU targets build
with it off (schedules/gpu.py says why), and TVM then declares a cross-thread reduction's
``__local float red_buf0[256];`` inside the row loop, which PoCL refuses ("variables in
the local address space can only be declared in the outermost scope"). The sizes are
constants, so moving each declaration to the top of its kernel changes nothing else.

float16 on OpenCL devices without ``cl_khr_fp16`` (PoCL's CPU device among them).

TVM emits float16 tensors as ``__global half*`` with half arithmetic behind the
``cl_khr_fp16`` pragma; such a device refuses the whole program ("Half precision floating
point not supported"). Core OpenCL still allows ``half`` *pointers* and converts through
``vload_half`` (16 bits -> float) and ``vstore_half`` (float -> 16 bits, round to nearest
even, the same rounding as TVM's ``convert_half``). opgen's kernels only load float16
inputs to widen them and store float16 outputs once, narrowing from float32, so rewriting
the source is enough:

    P[i] = RHS;        ->  vstore_half(RHS, i, P);     (P a __global half* parameter)
    P[i]               ->  vload_half(i, P)
    convert_half(e)    ->  convert_float(e)   (the value is narrowed by vstore_half)
and the fp16 pragma block is dropped. Anything else involving half (a half local, a half
vector type) is refused with the reason instead of being guessed at.
"""
from __future__ import annotations

import re

_PRAGMA = re.compile(r"#ifdef cl_khr_fp16\n.*?#endif\n", re.S)
_HALF_PARAM = re.compile(r"__global half\* restrict (\w+)")


_LOCAL_DECL = re.compile(r"^\s*__local \w+ \w+\[\d+\];\s*$")


def hoist_local_declarations(source: str) -> str:
    """Move every ``__local T name[N];`` line to the start of its kernel's body."""
    lines, out, top = source.splitlines(), [], None
    for line in lines:
        if line.startswith("__kernel") and line.rstrip().endswith("{"):
            out.append(line)
            top = len(out)           # declarations go right after the opening brace
        elif top is not None and _LOCAL_DECL.match(line):
            out.insert(top, "  " + line.strip())
            top += 1
        else:
            out.append(line)
    return "\n".join(out) + "\n"


_THREAD0 = "if ((convert_long(get_local_id(0))) == (long)0) {"
_BARRIER = "barrier(CLK_LOCAL_MEM_FENCE);"


def fence_thread0_stores(source: str) -> str:
    """A barrier after each cross-thread reduction's thread-0 store.

    PoCL 3.0 dropped such a store (``if (get_local_id(0) == 0) ds[i] = red_buf[0];``) when
    another reduction loop with barriers followed it: the row sums stayed at their initial
    value (measured on GroupNorm's ds; one more barrier after the store fixed it). The
    store sits in uniform control flow right after the reduction's last barrier, so a
    barrier after it is legal OpenCL and costs one synchronisation per reduction.
    """
    lines, out, pending = source.splitlines(), [], None
    last_code = ""
    for line in lines:
        out.append(line)
        stripped = line.strip()
        if pending is not None and line.startswith(pending + "}"):
            out.append(pending + _BARRIER)
            pending = None
        elif pending is None and stripped == _THREAD0 and last_code == _BARRIER:
            pending = line[:len(line) - len(line.lstrip())]
        if stripped and not stripped.startswith("long cse_v"):
            last_code = stripped
    return "\n".join(out) + "\n"


class HalfRewriteError(ValueError):
    """The OpenCL source uses float16 in a way the rewrite does not handle."""


def needs_half_rewrite(source: str, extensions: str) -> bool:
    """Whether ``source`` uses half and the device (its extension string) cannot run it."""
    return "half" in source and "cl_khr_fp16" not in extensions.split()


def _closing(text: str, start: int, open_ch: str, close_ch: str) -> int:
    """Index of the bracket closing the one at ``start``."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == open_ch:
            depth += 1
        elif text[i] == close_ch:
            depth -= 1
            if depth == 0:
                return i
    raise HalfRewriteError(f"unbalanced {open_ch} in the OpenCL source")


def _statement_end(text: str, start: int) -> int:
    """Index of the ``;`` ending the statement that continues at ``start``."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] in "([":
            depth += 1
        elif text[i] in ")]":
            depth -= 1
        elif text[i] == ";" and depth == 0:
            return i
    raise HalfRewriteError("statement without ';' in the OpenCL source")


def _rewrite_accesses(text: str, pointer: str) -> str:
    """Every ``pointer[index]`` in ``text`` as vload_half / vstore_half."""
    pattern = re.compile(rf"(?<![\w.]){re.escape(pointer)}\[")
    out, pos = [], 0
    while True:
        match = pattern.search(text, pos)
        if match is None:
            out.append(text[pos:])
            return "".join(out)
        close = _closing(text, match.end() - 1, "[", "]")
        index = _rewrite_accesses(text[match.end():close], pointer)
        after = text[close + 1:]
        store = re.match(r"\s*=(?!=)", after)
        out.append(text[pos:match.start()])
        if store:
            rhs_start = close + 1 + store.end()
            end = _statement_end(text, rhs_start)
            rhs = _rewrite_accesses(text[rhs_start:end], pointer)
            out.append(f"vstore_half({rhs.strip()}, {index}, {pointer})")
            pos = end
        else:
            out.append(f"vload_half({index}, {pointer})")
            pos = close + 1


def rewrite_half(source: str) -> str:
    """``source`` with float16 carried as 16-bit storage (see the module docstring)."""
    text = _PRAGMA.sub("", source)
    for pointer in sorted(set(_HALF_PARAM.findall(text))):
        text = _rewrite_accesses(text, pointer)
    text = text.replace("convert_half(", "convert_float(")
    leftover = [line.strip() for line in text.splitlines()
                if re.search(r"\bhalf\d*\b", line) and not _HALF_PARAM.search(line)]
    if leftover:
        raise HalfRewriteError(f"float16 used beyond loads and stores: {leftover[0][:120]}")
    return text
