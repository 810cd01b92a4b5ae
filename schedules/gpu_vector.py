"""The vector variant of the GPU row rules (schedules/gpu.py: GpuRowPass, GpuRowReduce; see
its docstring for what it does and why TVM 0.27 needed each step): the knob, the per-call
choice (``vector_defaults``, ``check_vector``) and the scheduling steps the rules share.

Registers, measured (CUDA 13.0, default knobs, sm_80 / sm_90, bf16-f32 and f32-f32): the
variant holds a thread's lanes of every row tensor at once, so it takes more than the
generic kernels' 32-39: rms_norm_grad 64 / 64 and 56 / 58, layer_norm_backward 75 / 77 and
64 / 64, deep_norm_grad 80 / 102 (12 B spilled on sm_80) and 80 / 80, rms_norm 32 / 31.
Not yet weighed against occupancy on a GPU (none was lent); ``threads`` is the knob to try.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from opgen.schedules import VECTOR_LANES, Block, Knob

VECTOR = Knob(
    "vector", (False, True), False,
    "the vector variant: each thread owns `lanes` consecutive columns (16 bytes of the "
    "narrowest row tensor: 8 x f16/bf16, 4 x f32) and moves them with 128-bit loads and stores "
    "through registers; the row's scalars read once per row. Only for rows whose length the "
    "lanes divide and tensors 16-byte aligned: chosen per call (knobs_for_call), never tuned")
VECTOR_BYTES = 16
INT32_INDEX = 1 << 31  # the vector variant indexes in int32: problems past it take the generic one
COMPUTE_LANES = 4      # float32 lanes of the vector variant's arithmetic (128 bits)


def _column_params(func, outs: list[Block]) -> list:
    """The parameters whose innermost extent is the row length of the elementwise ``outs``."""
    by_name = {p.name: p for p in func.params}
    cols = by_name[next(iter(outs[0].writes))].shape[-1]
    return [p for p in func.params if p.shape and p.shape[-1].same_as(cols)]


def vector_lanes(func, outs: list[Block]) -> int:
    """Columns per thread in the vector variant: 16 bytes of the narrowest row tensor."""
    return VECTOR_BYTES // min(p.dtype.bits // 8 for p in _column_params(func, outs))


def _vector_copy(sch, block, lanes: int) -> None:
    """The loops of a cache block under its thread loop fused and vectorized by 16 bytes of
    its dtype (a 128-bit access each; two for f32 at 8 lanes), the rest unrolled."""
    loops = sch.get_loops(block)
    inner = [lp for lp in loops if sch.get(lp).kind == 0 and sch.get(lp).thread_binding is None]
    fused = sch.fuse(*inner[-2:]) if len(inner) > 1 and _unit(sch, inner[-2]) else inner[-1]
    buffer = sch.get(block).writes[0].source
    width = min(lanes, VECTOR_BYTES // (buffer.dtype.bits // 8))
    outer, vec = sch.split(fused, [None, width])
    sch.vectorize(vec)
    sch.unroll(outer)


def _unit(sch, loop) -> bool:
    extent = sch.get(loop).extent
    return getattr(extent, "value", None) == 1


def _cached_reads(sch, blocks: list, at, lanes: int, columns: set, rows: set) -> None:
    """Each column tensor the ``blocks`` only read (not write), copied once per thread step
    into registers with 128-bit loads at loop ``at`` (shared by all ``blocks``); ``rows``:
    per-row tensors, cached the same way by the caller at the row loop."""
    seen = set()
    for rv in blocks:
        block = sch.get(rv)
        written = {r.source.name for r in block.writes}
        for index, region in enumerate(block.reads):
            name = region.source.name
            if name in seen or name in written or name not in columns:
                continue
            seen.add(name)
            readers = [b for b in blocks if name in {r.source.name for r in sch.get(b).reads}]
            cache = sch.cache_read(rv, index, "local", consumer_blocks=readers)
            sch.compute_at(cache, at, preserve_unit_loops=True)
            _vector_copy(sch, cache, lanes)


def _split_columns(sch, loop, lanes: int, threads: int):
    """(thread loop, lane loop) of a column loop: ``lanes`` consecutive columns per thread,
    threads striding. The lanes split carries no guard: the variant is built for row lengths
    they divide (the buffers' declared strides make TVM check it per call)."""
    vectors, lane = sch.split(loop, [None, lanes], disable_predication=True)
    _, thread = sch.split(vectors, [None, threads])
    sch.bind(thread, "threadIdx.x")
    sch.unroll(lane)
    return thread, lane


def _vector_row_reductions(sch, row_stages, lanes: int, threads: int, columns: set) -> None:
    """Each row reduction strided over the threads, ``lanes`` columns per thread read from
    registers filled by 128-bit loads (a cross-thread reduction after the in-thread one)."""
    for info in row_stages:
        if "R" not in info.kinds:
            continue
        rv = sch.get_sblock(info.name)
        thread, _ = _split_columns(sch, sch.get_loops(rv)[-1], lanes, threads)
        _cached_reads(sch, [rv], thread, lanes, columns, set())


def _vector_nest(sch, names: list, out_names: list, lanes: int, threads: int, columns: set):
    """The elementwise nest (its first block ``names[0]``, the others merged into it)
    split into ``lanes`` columns per thread; its column inputs read into registers with
    128-bit loads, its elementwise outputs (``out_names``) written from registers with
    128-bit stores. Returns the thread loop."""
    stores = [sch.cache_write(sch.get_sblock(name), 0, "local") for name in out_names]
    main = sch.get_sblock(names[0])
    thread, lane = _split_columns(sch, sch.get_loops(main)[-1], lanes, threads)
    rvs = [sch.get_sblock(n) for n in names]
    _cached_reads(sch, rvs, thread, lanes, columns, set())
    # The arithmetic as float32x4 (TVM 0.27's CUDA code generator cannot print float32x8:
    # it made a ulonglong4 of eight floats), which also moves the column partials the nest
    # adds into (a read-modify-write of global memory) 128 bits at a time.
    if lanes > COMPUTE_LANES:
        sch.vectorize(sch.split(lane, [None, COMPUTE_LANES])[1])
    else:
        sch.vectorize(lane)
    for store in stores:
        sch.reverse_compute_at(store, thread, preserve_unit_loops=True)
        _vector_copy(sch, store, lanes)
    return thread


def _row_scalars_in_registers(sch, blocks: list, row_loop, per_row: set) -> None:
    """Per-row inputs (rstd) read once per row into a register, not once per element."""
    seen = set()
    for rv in blocks:
        for index, region in enumerate(sch.get(rv).reads):
            name = region.source.name
            if name in seen or name not in per_row:
                continue
            seen.add(name)
            readers = [b for b in blocks if name in {r.source.name for r in sch.get(b).reads}]
            cache = sch.cache_read(rv, index, "local", consumer_blocks=readers)
            sch.compute_at(cache, row_loop, preserve_unit_loops=True)


def _tensor_sets(sch, outs: list[Block]) -> tuple[set, set]:
    """(names of the column parameters, names of the per-row input parameters)."""
    func = sch.mod["main"]
    columns = {p.name for p in _column_params(func, outs)}
    rows = sch.get(sch.get_sblock(outs[0].name)).iter_vars[0].dom.extent
    per_row = {p.name for p in func.params if len(p.shape) == 1 and p.shape[0].same_as(rows)}
    return columns, per_row


def _promise(sch, outs: list[Block], lanes: int) -> None:
    """Record on the root block what the variant needs of its buffers (schedules.VECTOR_LANES)."""
    sch.annotate(sch.get_sblock("root"), VECTOR_LANES, {"lanes": lanes, "axis": next(iter(outs[0].writes))})


def vector_refusal(func, outs: list[Block], target) -> str | None:
    """Why the target cannot take the vector variant of ``func`` (a row tensor's dtype it
    cannot carry in vector registers: GpuTargetSpec.vector_dtypes), or None."""
    allowed = target.vector_dtypes() if hasattr(target, "vector_dtypes") else None
    if allowed is None:
        return None
    refused = sorted({str(p.dtype) for p in _column_params(func, outs)} - allowed)
    return f"{target.name} cannot carry {', '.join(refused)} rows in vector registers" if refused else None


@dataclass(frozen=True)
class VectorRequirement:
    """What a call must give the vector variant, by position in the kernel's parameters: the
    one rule both the library's per-call choice (``vector_defaults``) and an exported plan's
    selection (opgen.export writes ``conditions``; opgen.runtime.plan evaluates them) apply,
    so a runner without TVM picks the variant exactly where the library would."""

    lanes: int
    row_param: int            # the elementwise output whose shape is rows x row length
    column_params: tuple      # parameters moved 128 bits at a time: each ``align``-byte aligned
    align: int = VECTOR_BYTES

    def shape_refusal(self, shape) -> str | None:
        """Why a call whose row parameter has ``shape`` cannot take the variant, or None."""
        if not shape or any(int(e) == 0 for e in shape):
            return "an empty tensor"
        rows, cols = math.prod(int(e) for e in shape[:-1]), int(shape[-1])
        if cols % self.lanes:
            return f"a row length ({cols}) that is not a multiple of {self.lanes}"
        if not index_fits(rows, cols):
            return "more elements than its 32-bit indices reach"
        return None

    def admits(self, shapes: list, alignments: list) -> bool:
        """Whether a call with these shapes and address alignments (per parameter, in order;
        alignments in bytes) takes the variant."""
        shape = shapes[self.row_param] if self.row_param < len(shapes) else None
        return self.shape_refusal(shape) is None and \
            all(i < len(alignments) and alignments[i] >= self.align for i in self.column_params)

    def conditions(self, shape: list) -> list:
        """``shape_refusal``'s rule as Python boolean expressions over the row parameter's
        size expressions ``shape`` (text, one per axis): all true exactly when it is None."""
        rows = " * ".join(f"({e})" for e in shape[:-1]) or "1"
        cols = f"({shape[-1]})"
        return [f"0 < {rows}", f"0 < {cols}", f"{cols} % {self.lanes} == 0",
                f"(max({rows}, {INDEX_ROWS}) + 1) * ({cols} + {VECTOR_BYTES * INDEX_THREADS}) < {INT32_INDEX}"]


def index_fits(rows: int, cols: int) -> bool:
    """Whether the variant's int32 indices (targets/gpu_launch.with_32_bit_indices) reach the
    row tensors, the column partials and the loops' last strides (with the margins below)."""
    return (max(rows, INDEX_ROWS) + 1) * (cols + VECTOR_BYTES * INDEX_THREADS) < INT32_INDEX


def vector_requirement(func, matched, target=None) -> VectorRequirement | None:
    """The vector variant's requirement for ``func`` (the unscheduled PrimFunc ``matched``
    by a row rule), or None when the target cannot take it at all (``vector_refusal``)."""
    if func is None or matched is None:
        return None
    outs = matched[0]
    if vector_refusal(func, outs, target):
        return None
    names = [p.name for p in func.params]
    columns = {p.name for p in _column_params(func, outs)}
    return VectorRequirement(vector_lanes(func, outs), names.index(next(iter(outs[0].writes))),
                             tuple(i for i, n in enumerate(names) if n in columns))


def vector_variants(func, matched, target) -> tuple:
    """The rule's ``call_variants``: ("vector", its knobs, its requirement) when the target
    can take it."""
    requirement = vector_requirement(func, matched, target)
    return () if requirement is None else (("vector", {"vector": True}, requirement),)


def vector_defaults(func, matched, shapes: dict, alignments: dict | None, target=None) -> dict:
    """{"vector": True} when the call can take the vector variant (``VectorRequirement``):
    rows and columns not empty, the row length a multiple of the lanes, every row tensor
    16-byte aligned as the kernel receives it, and the element count within 32-bit range of
    the index types TVM keeps (a bound the variant's callers rely on nowhere else)."""
    if not shapes or alignments is None:
        return {}
    requirement = vector_requirement(func, matched, target)
    if requirement is None:
        return {}
    aligned = [alignments.get(n, 0) for n in shapes]
    return {"vector": True} if requirement.admits(list(shapes.values()), aligned) else {}


def by_param(func, per_tensor: dict) -> dict:
    """``per_tensor`` (keyed by the kernel's tensor names, in parameter order: the
    convention of ``shapes`` throughout the rules) keyed by parameter name instead."""
    return dict(zip((p.name for p in func.params), per_tensor.values()))


def check_vector(knobs: dict, target, shapes, func, matched) -> str | None:
    """Why ``vector`` cannot be set for this problem (its row length not a multiple of the
    lanes) or on this target (``vector_refusal``)."""
    if not knobs.get("vector") or func is None or matched is None:
        return None
    outs = matched[0]
    refusal = vector_refusal(func, outs, target)
    if refusal or not shapes:
        return refusal
    shape = by_param(func, shapes).get(next(iter(outs[0].writes)))
    lanes = vector_lanes(func, outs)
    if shape and int(shape[-1]) % lanes:
        return f"vector needs a row length that is a multiple of {lanes}, not {shape[-1]}"
    return None



# The int32 bound of a problem is checked with a margin of this many rows of column partials
# and this many threads' spans past the row's end (the largest values of gpu.PARTIALS and
# gpu.THREADS; gpu.py asserts it).
INDEX_ROWS = 2048
INDEX_THREADS = 1024
