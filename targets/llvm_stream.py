"""Non-temporal stores for the outputs a schedule marks as streamed (the CPU target).

Why: a kernel that writes an output it never reads back makes the CPU read every output
cache line from memory before overwriting it (read-for-ownership), so writing dx costs
two transfers per line, not one. A non-temporal store writes the line without reading
it. Measured on GroupNormBackward (kernel alone, torch tensors, caches evicted before each
call, median of 25, ms, plain -> non-temporal):

    (2,320,64x64) f32 1.43 -> 1.09   bf16 0.88 -> 0.80
    (8,256,56x56) f32 3.66 -> 2.80   bf16 1.99 -> 1.83
    (16,64,112x112) f32 7.09 -> 5.39 bf16 3.99 -> 3.59

The flip side: the written lines are not left in the caches, so an output that would have
fit there reaches its consumer from memory. Schedules therefore ask for it per problem
size (schedules/llvm.py, knob ``stream_stores``), never always.

How, in TVM 0.27: TIR has no non-temporal store and the LLVM code generator writes no
``!nontemporal`` metadata (nor does any x86 intrinsic LLVM still accepts make one). So the
target compiles as usual, takes the module's optimized LLVM IR, adds ``!nontemporal`` to
every store whose address derives from a streamed buffer, ends each function that got one
with ``sfence`` (non-temporal stores are weakly ordered: the fence makes them visible
before the thread pool's join), and has TVM load the edited IR (``load_module`` on a
``.ll`` file; the result exports and caches like any LLVM module).

Finding the stores: TVM names the LLVM value that holds a buffer's data pointer after the
buffer (a parameter of the kernel function, or the load of it from a parallel closure),
so a store is streamed when walking its address back through ``getelementptr``, ``phi``
and ``select`` reaches that name. The walk is over the IR's text: TVM exposes no LLVM
API, and the forms it follows are the few its code generator emits. An IR it cannot
follow gets no marks: the kernel is then only slower, never wrong (tests count the marks).
"""
from __future__ import annotations

import os
import re
import tempfile

from opgen.lazy import s_tir, tirx, tvm
from opgen.schedules import STREAMED_OUTPUT

SFENCE = "llvm.x86.sse.sfence"

_ASSIGN = re.compile(r"^\s*%(?P<name>[\w.$-]+) = (?P<rhs>.*)$")
_STORE = re.compile(r"^(?P<head>\s*store (?:volatile )?[^,]+, ptr %(?P<ptr>[\w.$-]+), align \d+)(?P<tail>.*)$")


def streamed_buffers(mod) -> frozenset:
    """Names of the buffers written by blocks a schedule annotated with
    STREAMED_OUTPUT (read through a Schedule: TVM 0.27's Python has no TIR visitor)."""
    names = set()
    for func in mod.functions.values():
        if not isinstance(func, tirx.PrimFunc):
            continue
        sch = s_tir.Schedule(func)
        for rv in sch.get_child_blocks(sch.get_sblock("root")):
            block = sch.get(rv)
            if block.annotations.get(STREAMED_OUTPUT):
                names.update(region.source.name for region in block.writes)
    return frozenset(names)


def _pointer_sources(rhs: str) -> list[str]:
    """The pointer values an address computed by ``rhs`` derives from (none: a root)."""
    if rhs.startswith("getelementptr"):
        base = re.search(r", ptr %([\w.$-]+)", rhs)
        return [base.group(1)] if base else []
    if rhs.startswith("phi ptr"):
        return re.findall(r"\[ %([\w.$-]+),", rhs)
    if rhs.startswith("select"):
        return re.findall(r"ptr %([\w.$-]+)", rhs)
    return []


def _buffer_named(value: str, buffers: frozenset) -> str | None:
    """The buffer whose pointer ``value`` is (TVM's name for it, or LLVM's uniqued copy of
    it: name + digits), or None."""
    return next((b for b in buffers if value == b or (value.startswith(b) and value[len(b):].lstrip(".").isdigit())),
                None)


def _derives_from(value: str, definitions: dict, buffers: frozenset) -> str | None:
    """The buffer an address derives from (the first reached), or None."""
    seen, todo = set(), [value]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        found = _buffer_named(current, buffers)
        if found is not None:
            return found
        todo += _pointer_sources(definitions.get(current, ""))
    return None


_VECTOR = re.compile(r"^\s*store (?:volatile )?<(?P<lanes>\d+) x (?P<type>\w+)>")
_BYTES = {"i8": 1, "i16": 2, "half": 2, "bfloat": 2, "i32": 4, "float": 4, "i64": 8, "double": 8}


def _aligned_store(head: str, align: int) -> str:
    """A vector store's ``head`` with its alignment raised to min(``align``, its size): the
    vector stores into a buffer that a variant declared ``align``-byte aligned are each at a
    multiple of their size from an aligned row start (schedules/llvm.py, ALIGNED_STREAM:
    TVM vectorized the column loop by the lanes and every row is a whole number of
    vectors), which LLVM does not see (TVM tells it element alignment only). Without it,
    LLVM must split a non-temporal vector store into scalar ones; with it, the store is one
    vmovntps/vmovntdq per register. Scalar stores and odd sizes keep theirs."""
    vector = _VECTOR.match(head)
    size = int(vector.group("lanes")) * _BYTES.get(vector.group("type"), 0) if vector else 0
    if size < 16 or size & (size - 1):
        return head
    return re.sub(r"align \d+$", f"align {min(align, size)}", head)


def _fresh_metadata_id(ir: str) -> int:
    """A metadata number the IR does not use yet."""
    return 1 + max(map(int, re.findall(r"^!(\d+) =", ir, re.MULTILINE)), default=0)


def _functions(lines: list[str]):
    """(first, last) line index of each function body."""
    start = None
    for i, line in enumerate(lines):
        if line.startswith("define "):
            start = i
        elif line == "}" and start is not None:
            yield start, i
            start = None


def mark_nontemporal(ir: str, buffers: frozenset, aligned: dict | None = None) -> tuple[str, int]:
    """``ir`` with every store into ``buffers`` non-temporal, and the count of such stores;
    ``aligned`` (buffer name -> bytes): buffers a variant declared aligned, whose vector
    stores get that alignment (_aligned_store)."""
    lines = ir.split("\n")
    node = f"!{_fresh_metadata_id(ir)}"   # a new node, {i32 1}: the nontemporal flag
    marked = 0
    fenced_returns = []
    for first, last in _functions(lines):
        definitions = {m.group("name"): m.group("rhs") for m in map(_ASSIGN.match, lines[first + 1:last]) if m}
        in_function = 0
        for i in range(first + 1, last):
            store = _STORE.match(lines[i])
            buffer = _derives_from(store.group("ptr"), definitions, buffers) if store else None
            if buffer is not None:
                head = store.group("head")
                if aligned and buffer in aligned:
                    head = _aligned_store(head, aligned[buffer])
                lines[i] = f"{head}, !nontemporal {node}{store.group('tail')}"
                in_function += 1
        if in_function:
            fenced_returns += [i for i in range(first + 1, last) if lines[i].lstrip().startswith("ret ")]
            marked += in_function
    for i in fenced_returns:
        lines[i] = f"  call void @{SFENCE}()\n{lines[i]}"
    if marked:
        lines.append(f"{node} = !{{i32 1}}")
        if f"declare void @{SFENCE}()" not in ir:
            lines.append(f"declare void @{SFENCE}()")
    return "\n".join(lines), marked


def aligned_buffers(mod) -> dict:
    """Buffer name -> bytes for the parameters of ``mod``'s kernels declared with more than
    element alignment (a vector variant's promise: opgen.kernels.declare_vector_alignment)."""
    return {p.name: int(p.data_alignment) for func in mod.functions.values() if isinstance(func, tirx.PrimFunc)
            for p in func.params if int(p.data_alignment) > tvm.DataType(p.dtype).bits // 8}


def with_streamed_stores(module, buffers: frozenset, aligned: dict | None = None):
    """``module`` (a compiled LLVM module) rebuilt with non-temporal stores into ``buffers``
    (those into ``aligned`` ones as aligned vectors: mark_nontemporal); ``module`` itself
    when none of its stores write them."""
    ir, marked = mark_nontemporal(module.inspect_source("ll"), buffers, aligned)
    if not marked:
        return module
    fd, path = tempfile.mkstemp(suffix=".ll")
    try:
        with os.fdopen(fd, "w") as file:
            file.write(ir)
        return tvm.runtime.load_module(path)
    finally:
        os.unlink(path)
