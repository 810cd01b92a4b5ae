"""CPU schedules (LLVM): parallel outer loops, fused passes, deterministic reductions.

Six rules matched by stage pattern, and a fallback:

* ``RowPassWithColumnSums``: an elementwise output over (rows, cols) fed by per-row
  reductions/scalars, plus column reductions over the same rows (RmsNorm-like). One
  parallel pass over chunks of a fixed number of rows computes the per-row stages, the
  elementwise output and each column sum's per-chunk partials (rfactor); a fixed-order sum
  of the partials follows, each column rounded by its casts (if any) in the task that
  summed it. The chunking depends on the shape alone, never on the thread count, so the
  bits do not either; the partials take 1/rows_per_chunk of a column sum's input (a fixed
  chunk *count* would need count x cols floats: 256 MB for one row of 1M).
* ``RowPass``: the same without column sums (a forward norm): rows in parallel, each
  row's reductions and scalars (outputs too: rstd) then its elementwise outputs.
* ``GroupedRowPass``: row reductions over the innermost axis of an (outer..., inner)
  input, per-group reductions/scalars and an elementwise output sharing the outer axes,
  and column reductions over the first axis of the row reductions (GroupNorm-like). One
  parallel pass over the fused outer axes, then a parallel fixed-order column pass. An
  elementwise prologue the group reads (a swish derivative) is computed once per group
  into a per-thread buffer rather than in both of the group's passes.

* ``ChannelPass``: per-channel sums of an (N, C, HW) input over N and HW, per-channel
  scalars and elementwise outputs (BatchNorm-like): one parallel pass over the channels.
* ``ChannelMap``: elementwise outputs over (N, C, HW) reading per-channel stages and
  one-element call sums, no sum over the data (the sums came from elsewhere): the tiny stages
  first, then each output with its (N, C) rows in parallel.
* ``SegmentedRowPass``: ``RowPassWithColumnSums`` over (B, S, H) whose column sums restart
  at every segment of S rows (per-sample sums), then small per-segment stages and sums over
  the segments: chunks of rows within a segment in parallel, per-segment partials.
* ``ColumnPass``: reductions of an (N, C, HW) input over its middle axis C for every (n,
  p) position, per-position stages, elementwise outputs over (N, C, HW) (a LayerNorm over
  the channels of NCHW data), and per-channel sums over N and HW: the rows of HW positions
  (one per n) in parallel, channels outside and positions inside (contiguous, vectorized);
  the channel sums in a parallel pass over the channels of their own.
* ``Fallback``: anything else (dlight's idea): each loop nest as written, its outer spatial
  loop in parallel; correct for any op, and the reason no op meets ``NoScheduleRule`` here.

Inner loops are left for LLVM's vectorizer: the extents are symbolic, and the target
allows reassociation so float sums vectorize (deterministically: the order is fixed in
the compiled code).

Sums over the batch (the channel rule's sums, the row and grouped passes' column sums, the
Fallback's) accumulate
in float64, their partials too, and the channel rule's per-channel stages are computed in
float64 from them (``_widen_sum``, ``_stage_in_float64``): each comes out rounded once, as
ATen's CPU kernels' double accumulations do (issue 37, docs/compare-and-bench.md). The
TE stays float32: other targets keep float32 sums (Ascend's vector unit has no float64).
Per-row sums stay float32 (a row's sum feeds float32 arithmetic over that row).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

from tvm import ir, s_tir, tirx

from opgen.schedules import (STREAMED_OUTPUT, VECTOR_LANES, Block, Knob, PatternRule, ScheduleRule, blocks, patterns,
                             pattern_schedule, prologues)

DEFAULT_ROWS_PER_CHUNK = 64
ROWS_PER_CHUNK = Knob(
    "rows_per_chunk", (8, 16, 32, 64, 128, 256, 512), DEFAULT_ROWS_PER_CHUNK,
    "rows summed into one partial per column; more rows: a smaller partial-sum workspace and "
    "less final-sum work, fewer parallel chunks (measured on RmsNormGrad 4096^2 f32: "
    "16 -> 10.2 ms, 64 -> 9.0, 256 -> 8.0)")
PARALLEL = Knob(
    "parallel", (True, False), True,
    "run the outer loops on TVM's thread pool; False runs the whole kernel on the calling "
    "thread, which is faster when waking the pool costs more than the work")
# Below this many elements in the largest tensor, the kernel runs on the calling thread:
# waking TVM's pool cost more than it saved. Measured on 2 cores (f32, kernel only, median
# us, parallel / serial): RmsNormGrad 4x64 2.0/0.4, 64x256 5.3/4.2, 64x512 10.5/9.4,
# 128x512 16.6/19.4, 256x512 28.7/45.3; GroupNorm 128 elements 2.9/0.5, 8K 4.8/2.2,
# 32K 8.4/5.2, 64K 15.7/10.3. The crossover is 48K-128K; 32K stays on the safe side and
# the tuner may move it per shape bucket (knob ``parallel``).
SERIAL_BELOW = 1 << 15
STREAM_STORES = Knob(
    "stream_stores", (False, True), False,
    "write the elementwise output with non-temporal stores (targets/llvm_stream.py): no "
    "read of each output line before it is written, but the output leaves the caches")
# No problem size streams the elementwise output by default (knob ``stream_stores``: the
# tuner may still pick it per shape bucket). The kernels promise LLVM element alignment
# only, so LLVM splits every non-temporal vector store into scalar ones (``movntsd``/
# ``movntss`` on AMD's SSE4a, 64-bit ``movnti`` for 16-bit data), and how fast those are
# depends on where the caller's arrays happen to lie, not on the kernel. Measured (2-core
# AMD EPYC VM, DeepNormGrad kernel alone, caches evicted, ms, streamed / plain stores):
#   f32 8192x4096, the same data copied to arrays at other addresses: page-aligned 32 / 45,
#     64 bytes into a page 127-370 / 67, 16 bytes in 220-480 / 45, numpy's own arrays
#     (rng.standard_normal, np.empty) 138-186 / 60-75, torch's allocations 42-55 / 37-44;
#   bf16-f32 16384x1024: numpy's arrays 36-44 / 13-14, torch's 55-70 / 9-10.
# Streaming used to start at 1M elements (measured on torch tensors: GroupNorm (2,64,HW)
# f32 16 MiB 2.30 -> 1.84 ms cold, RmsNorm 4096x4096 f32 10.2 -> 7.3): on a user's numpy
# arrays the same default made DeepNormGrad 8192x4096 f32 4x slower than on torch tensors
# (opgen bench: 160 ms against 37).
ALIGNED_STREAM = Knob(
    "aligned_stream", (0, 16, 64), 0,
    "the streamed row variant: the elementwise outputs written with full non-temporal vector "
    "stores (vmovntps/vmovntdq), their addresses this many bytes aligned (64: ymm/zmm stores, "
    "16: xmm), every row a multiple of 64 bytes long, the column loop vectorized by 64 bytes "
    "of the narrowest output; 0: off. Chosen per call by the outputs' addresses "
    "(knobs_for_call), never tuned")
# Why a variant and not ``stream_stores``: a kernel that promises element alignment only
# gets every non-temporal vector store split by LLVM into scalar ones (it may not emit a
# vector movnt on an address it cannot prove aligned), whose speed depends on where the
# caller's arrays lie (STREAM_STORES above). This variant declares its streamed outputs
# aligned (opgen.kernels.declare_vector_alignment; Kernel.prepare refuses a misaligned
# address) and vectorizes their column loop itself, so every store is a whole vector at
# an aligned address (targets/llvm_stream.py tells LLVM so), and the call chooses it only
# where that holds (StreamRequirement): the row length times the element size a multiple
# of 64 (every row starts as aligned as the first: no head or tail to peel) and the
# output's address aligned. Two alignments, because the callers' large arrays come in two
# (measured, docs/cpu-benchmark.md): torch's allocator puts them on 64 bytes (full ymm/zmm
# stores), numpy's (glibc's mmap chunks) 16 bytes past a page (xmm stores: four fill a
# line, which the CPU's write-combining merges as it does two ymm ones). From
# ALIGNED_STREAM_FROM elements in the output: below, the output would have stayed in the
# caches for its consumer. Elsewhere the call takes the kernel it took before.
STREAM_ALIGNMENTS = (64, 16)   # the variants, the widest tried first
STREAM_VECTOR_BYTES = 64       # the lanes of the variant's column loop: 64 bytes of the narrowest output
ALIGNED_STREAM_FROM = 1 << 20
# OPGEN_STREAM_VARIANT=0 keeps every call on the generic kernels (the same calls, the variant
# never chosen): how the benchmark compares the two (docs/cpu-benchmark.md).
STREAM_VARIANT_ENV = "OPGEN_STREAM_VARIANT"
PROLOGUE_ONCE = Knob(
    "prologue_once", (True, False), True,
    "compute an elementwise prologue the group's stages read (GroupNormSwishGrad's swish "
    "derivative) once per group into a buffer of the group's size, read by its sums and its "
    "output; False recomputes it in both passes (see _prologues_per_group)")
# The prologue buffer holds one group (D x HW float32) per thread, allocated from TVM's
# workspace pool. Computing once was faster at every size measured, up to 4M elements a
# group (f32, kernel alone, once / twice: (2,64,256x256) G=4 20.8 / 27.8 ms, (2,64,512x512)
# G=4 90 / 120 ms); past 16 MB a thread the memory is not worth hiding inside a kernel.
PROLOGUE_ONCE_UP_TO = 1 << 22
DEFAULT_FINAL_COLUMNS = 256
FINAL_COLUMNS = Knob(
    "final_columns", (64, 128, 256, 512, 1024), DEFAULT_FINAL_COLUMNS,
    "columns per parallel task of the final sum of the partials; each task walks the "
    "partials row by row (unit stride) instead of down a column (one cache line per load)")


def size_defaults(shapes: dict | None) -> dict:
    """The problem-size defaults shared by the CPU rules: no thread launch for tiny
    problems (never non-temporal stores: see STREAM_STORES above)."""
    if not shapes:
        return {}
    largest = max(math.prod(shape) for shape in shapes.values())
    return {"parallel": False} if largest < SERIAL_BELOW else {}


def _parallel(sch, loop, knobs) -> None:
    if knobs.get("parallel", True):
        sch.parallel(loop)


def _stream(sch, out: Block, knobs) -> None:
    """Ask the target to write the elementwise output around the caches (knob)."""
    if knobs.get("stream_stores", STREAM_STORES.default):
        sch.annotate(sch.get_sblock(out.name), STREAMED_OUTPUT, True)


def _row_params(func, outs: list[Block]) -> tuple:
    """(names of ``func``'s parameters in order, the elementwise outputs' names)."""
    return [p.name for p in func.params], [n for out in outs for n in out.writes]


def _stream_lanes(func, out_names: list) -> int:
    """Columns per vector of the streamed variant: 64 bytes of the narrowest output."""
    by_name = {p.name: p for p in func.params}
    return STREAM_VECTOR_BYTES // min(by_name[n].dtype.bits // 8 for n in out_names)


@dataclass(frozen=True)
class StreamRequirement:
    """What a call must give the streamed row variant (ALIGNED_STREAM), by position in the
    kernel's parameters; the interface of the GPU's VectorRequirement (schedules/
    gpu_vector.py), so the call path (``knobs_for_call``) and an exported plan choose alike.
    ``column_params`` are the streamed outputs: each ``align``-byte aligned."""

    lanes: int
    row_param: int
    column_params: tuple
    align: int
    from_elements: int = ALIGNED_STREAM_FROM

    def shape_refusal(self, shape) -> str | None:
        """Why a call whose output has ``shape`` cannot take the variant, or None."""
        if not shape or any(int(e) == 0 for e in shape):
            return "an empty tensor"
        cols = int(shape[-1])
        if cols % self.lanes:
            return f"a row length ({cols}) that is not a multiple of {self.lanes} (rows would not stay aligned)"
        if math.prod(int(e) for e in shape) < self.from_elements:
            return f"fewer than {self.from_elements} elements (the output stays in the caches)"
        return None

    def admits(self, shapes: list, alignments: list) -> bool:
        """Whether a call with these shapes and address alignments (per parameter, in
        order; bytes) takes the variant."""
        shape = shapes[self.row_param] if self.row_param < len(shapes) else None
        return self.shape_refusal(shape) is None and \
            all(i < len(alignments) and alignments[i] >= self.align for i in self.column_params)

    def conditions(self, shape: list) -> list:
        """``shape_refusal``'s rule as Python expressions over the output's size expressions."""
        count = " * ".join(f"({e})" for e in shape)
        return [f"0 < {count}", f"({shape[-1]}) % {self.lanes} == 0", f"{self.from_elements} <= {count}"]


class StreamedRowVariant:
    """The per-call choice of the streamed row variant (ALIGNED_STREAM), shared by the row
    rules: ``aligned_stream`` is decided by the call alone (never tuned)."""

    def call_knobs(self, target) -> tuple:
        return ("aligned_stream",)

    def stream_requirement(self, func, align: int) -> StreamRequirement | None:
        """What a call must give the variant aligned to ``align`` bytes (None: no match)."""
        matched = self.match(blocks(pattern_schedule(func))) if func is not None else None
        if matched is None:
            return None
        names, outs = _row_params(func, matched[0])
        return StreamRequirement(_stream_lanes(func, outs), names.index(outs[0]),
                                 tuple(names.index(n) for n in outs), align)

    def knobs_for_call(self, target, shapes, func=None, alignments=None) -> dict:
        """``knobs_for_shapes``, plus the widest streamed variant the call admits."""
        defaults = self.knobs_for_shapes(target, shapes)
        if not shapes or alignments is None or func is None or os.environ.get(STREAM_VARIANT_ENV) == "0":
            return defaults
        aligned = [alignments.get(n, 0) for n in shapes]
        for align in STREAM_ALIGNMENTS:
            requirement = self.stream_requirement(func, align)
            if requirement is not None and requirement.admits(list(shapes.values()), aligned):
                defaults["aligned_stream"] = align
                break
        return defaults

    def alignment_matters(self, target, shapes, func=None) -> bool:
        """Only where the shapes admit the variant (1M elements, rows a multiple of 64
        bytes): a smaller call's plan does not depend on its addresses, so its warm calls
        neither read them nor lose opgen.api's bound path."""
        if func is None or not shapes or os.environ.get(STREAM_VARIANT_ENV) == "0":
            return False
        requirement = self.stream_requirement(func, STREAM_ALIGNMENTS[-1])
        shape = list(shapes.values())[requirement.row_param] if requirement is not None else None
        return shape is not None and requirement.shape_refusal(shape) is None

    def call_variants(self, target, func) -> tuple:
        found = [(align, self.stream_requirement(func, align)) for align in STREAM_ALIGNMENTS]
        return tuple((f"stream{align}", {"aligned_stream": align}, r) for align, r in found if r is not None)

    def check_knobs(self, knobs: dict, target, shapes=None, func=None) -> str | None:
        if not knobs.get("aligned_stream") or not shapes or func is None:
            return None
        requirement = self.stream_requirement(func, int(knobs["aligned_stream"]))
        shape = list(shapes.values())[requirement.row_param] if requirement is not None else None
        if shape and int(shape[-1]) % requirement.lanes:
            return f"aligned_stream needs a row length that is a multiple of {requirement.lanes}, not {shape[-1]}"
        return None


def _aligned_stream(sch, outs: list[Block], col_loops: list, align: int) -> None:
    """The streamed row variant (ALIGNED_STREAM): each of ``col_loops`` (the column loops
    the outputs are written in) split by the lanes and vectorized, the outputs marked as
    streamed, and the promise recorded on the root block (schedules.VECTOR_LANES), which
    makes the kernel declare the outputs ``align``-byte aligned with rows a multiple of the
    lanes."""
    func = sch.mod["main"]
    _, names = _row_params(func, outs)
    lanes = _stream_lanes(func, names)
    for loop in col_loops:
        sch.vectorize(sch.split(loop, [None, lanes], disable_predication=True)[1])
    for out in outs:
        sch.annotate(sch.get_sblock(out.name), STREAMED_OUTPUT, True)
    sch.annotate(sch.get_sblock("root"), VECTOR_LANES,
                 {"lanes": lanes, "axis": names[0], "align": align, "params": names})


@dataclass(frozen=True)
class RowPassWithColumnSums(StreamedRowVariant, PatternRule):
    """Knobs: ``rows_per_chunk`` (rows summed into one partial per column; default 64) and
    ``final_columns`` (columns per task of the final fixed-order sum of the partials)."""

    def knobs(self, target) -> tuple:
        return (ROWS_PER_CHUNK, FINAL_COLUMNS, PARALLEL, STREAM_STORES, ALIGNED_STREAM)

    def knobs_for_shapes(self, target, shapes) -> dict:
        return size_defaults(shapes)

    def match(self, infos: list[Block]):
        return patterns.row_pass(infos)

    def schedule(self, sch, matched, target, knobs):
        outs, column_sums, row_stages, casts = matched
        copies = _column_sums_in_float64(sch, column_sums)
        per_chunk = int(knobs.get("rows_per_chunk", DEFAULT_ROWS_PER_CHUNK))
        chunk_loop, row_loop, partials = patterns.fuse_row_pass(sch, outs, column_sums, row_stages,
                                                                [None, per_chunk])
        _parallel(sch, chunk_loop, knobs)
        for out in outs:
            _stream(sch, out, knobs)
        if knobs.get("aligned_stream"):   # one column loop: the outputs and partials are merged
            _aligned_stream(sch, outs, [sch.get_loops(sch.get_sblock(outs[0].name))[-1]],
                            int(knobs["aligned_stream"]))
        lanes = int(knobs.get("final_columns", DEFAULT_FINAL_COLUMNS))
        patterns.zero_partials(sch, partials, row_loop)
        for info, (block, _) in zip(column_sums, partials):
            final_col, final_chunk = sch.get_loops(block)
            col_block, col_lane = sch.split(final_col, [None, lanes])
            sch.reorder(col_block, final_chunk, col_lane)   # rows of partials, not columns: unit stride
            _parallel(sch, col_block, knobs)
            sch.decompose_reduction(block, final_chunk)
            for cast in casts:   # rounded in the task that summed its columns, from its cache
                if cast.reads & info.writes:
                    sch.reverse_compute_at(sch.get_sblock(cast.name), col_block)
            if info.name in copies:  # a float32 output: rounded there too
                sch.reverse_compute_at(copies[info.name], col_block)
        _finish_row_stages(sch, row_stages)
        return sch


def _column_sums_in_float64(sch, column_sums: list[Block]) -> dict:
    """Accumulate each column sum in float64, its per-chunk partials too (_sums_in_float64).
    Returns {column sum's name: the copy block that rounds it into its output}."""
    return _sums_in_float64(sch, column_sums, "column sum")


def _sums_in_float64(sch, sums: list[Block], kind: str) -> dict:
    """Accumulate each sum in float64 (_widen_sum). A sum that writes a float32 output
    directly (an op's output that is the raw sum) first gets a buffer of its own
    (cache_write): the output's dtype is the API's, so the float64 total lives in scratch
    and a copy block rounds it into the output once. Returns {sum's name: copy block}; the
    caller places each copy after its sum (before the stages that read the output). Raises
    for a sum _widen_sum refuses even then (not a float32 sum): a schedule that silently
    kept it in float32 would break the rule's promise of one rounding per sum."""
    copies = {}
    for info in sums:
        if info.writes_output:
            copies[info.name] = sch.cache_write(sch.get_sblock(info.name), 0, "global")
        if not _widen_sum(sch, info.name):
            raise RuntimeError(f"{info.name}: a {kind} the CPU cannot accumulate in float64")
    return copies


@dataclass(frozen=True)
class SegmentedRowPass(PatternRule):
    """A row pass over (B, S, H) whose column sums restart at every segment of S rows
    (patterns.segmented_row_pass), as ``RowPassWithColumnSums`` with the segment axis kept.
    One parallel pass over (segment, chunk of rows): a chunk never crosses a segment, so its
    partials (one per column) belong to one segment; then, per segment in parallel, the
    fixed-order sum of its chunks' partials and the per-segment stages; then the sums over
    the segments, columns in parallel, each rounded by its casts. The chunking depends on
    the shape alone, so the bits do not depend on the thread count. Knobs: as
    ``RowPassWithColumnSums``'s."""

    def knobs(self, target) -> tuple:
        return (ROWS_PER_CHUNK, FINAL_COLUMNS, PARALLEL, STREAM_STORES)

    def knobs_for_shapes(self, target, shapes) -> dict:
        return size_defaults(shapes)

    def match(self, infos: list[Block]):
        return patterns.segmented_row_pass(infos)

    def schedule(self, sch, matched, target, knobs):
        outs, segment_sums, row_stages, segment_stages, batch_sums, casts = matched
        per_chunk = int(knobs.get("rows_per_chunk", DEFAULT_ROWS_PER_CHUNK))
        chunk_loop, row_loop, partials = patterns.fuse_row_pass(sch, outs, segment_sums, row_stages,
                                                                [None, per_chunk], outer=1)
        segment_loop = sch.get_loops(sch.get_sblock(outs[0].name))[0]
        _parallel(sch, sch.fuse(segment_loop, chunk_loop), knobs)
        for out in outs:
            _stream(sch, out, knobs)
        patterns.zero_partials(sch, partials, row_loop)
        lanes = int(knobs.get("final_columns", DEFAULT_FINAL_COLUMNS))
        _segment_totals(sch, [block for block, _ in partials], segment_stages, lanes, knobs)
        _batch_totals(sch, batch_sums, casts, lanes, knobs)
        _finish_row_stages(sch, row_stages)
        return sch


def _segment_totals(sch, totals: list, segment_stages: list[Block], lanes: int, knobs) -> None:
    """Each segment's column sums from its chunks' partials, in chunk order, ``lanes``
    columns per task (rows of partials, unit stride), then its per-segment stages for those
    columns in the same task, from cache. The sums' (segment, column block) loops are merged
    (one task computes every sum of its columns) and fused for the thread pool last."""
    for block in totals:
        _, col, chunk = sch.get_loops(block)
        col_block, col_lane = sch.split(col, [None, lanes])
        sch.reorder(col_block, chunk, col_lane)
    segment, col_block = _merge_nests(sch, totals, 2)
    for info in segment_stages:
        sch.reverse_compute_at(sch.get_sblock(info.name), col_block)
    _parallel(sch, sch.fuse(segment, col_block), knobs)
    for block in totals:
        sch.decompose_reduction(block, sch.get_loops(block)[1])


def _batch_totals(sch, batch_sums: list[Block], casts: list[Block], lanes: int, knobs) -> None:
    """The sums over the segments (a (segments, columns) operand each: small), ``lanes``
    columns per task, segments in order, each rounded by its casts in its task."""
    if not batch_sums:
        return
    rvs = [sch.get_sblock(info.name) for info in batch_sums]
    for rv in rvs:
        col, segment = sch.get_loops(rv)
        col_block, col_lane = sch.split(col, [None, lanes])
        sch.reorder(col_block, segment, col_lane)
    col_block = _merge_nests(sch, rvs, 1)[0]
    for cast in casts:
        sch.reverse_compute_at(sch.get_sblock(cast.name), col_block)
    _parallel(sch, col_block, knobs)
    for rv in rvs:
        sch.decompose_reduction(rv, sch.get_loops(rv)[1])


@dataclass(frozen=True)
class RowPass(StreamedRowVariant, PatternRule):
    """A row pass without column sums (a forward norm: per-row reductions and scalars, some
    of them outputs, then the elementwise outputs). The rows run in parallel, each row's
    stages computed right before its elementwise outputs, so the row is read from memory
    once (its second read for the outputs hits the cache) and nothing per row goes through
    memory but the outputs. No partials: no chunking to decide, the thread pool splits the
    rows. Knobs: ``parallel``, ``stream_stores``."""

    def knobs(self, target) -> tuple:
        return (PARALLEL, STREAM_STORES, ALIGNED_STREAM)

    def knobs_for_shapes(self, target, shapes) -> dict:
        return size_defaults(shapes)

    def match(self, infos: list[Block]):
        matched = patterns.row_pass(infos, need_column_sums=False)
        return matched if matched is not None and not matched[1] else None

    def schedule(self, sch, matched, target, knobs):
        outs, _, row_stages, _ = matched
        row_loop = patterns.fuse_row_stages(sch, outs, row_stages)
        _parallel(sch, row_loop, knobs)
        for out in outs:
            _stream(sch, out, knobs)
        if knobs.get("aligned_stream"):   # each output in a column loop of its own
            _aligned_stream(sch, outs, [sch.get_loops(sch.get_sblock(o.name))[-1] for o in outs],
                            int(knobs["aligned_stream"]))
        _finish_row_stages(sch, row_stages)
        return sch


def _finish_row_stages(sch, row_stages: list[Block]) -> None:
    """One loop over a row for its independent sums (_merge_row_sums), each per-row
    reduction zeroed before its own loop (not inside it), and each per-row scalar's value
    fenced (see _fence_value)."""
    _merge_row_sums(sch, row_stages)
    for info in row_stages:
        if "R" in info.kinds:
            block = sch.get_sblock(info.name)
            sch.decompose_reduction(block, sch.get_loops(block)[-1])
        else:
            _fence_value(sch, info.name)


def _merge_row_sums(sch, row_stages: list[Block]) -> None:
    """One loop over a row's columns for its row sums that read no other row stage
    (LayerNorm's sum of dy * gamma and of dy * gamma * xhat): each row is read once for
    them instead of once per sum.

    The merged loop takes the place of the first loop listed (TVM 0.27, measured: listed
    in program order, it lands before the scalars that read the second sum; listed the
    other way, after a scalar that reads the first). TVM does not check the order a merge
    leaves, so it is checked here: every stage reading a sum must come after the loop."""
    produced = {n for info in row_stages for n in info.writes}
    sums = [info for info in row_stages if "R" in info.kinds and not info.reads & produced]
    if len(sums) < 2:       # a sum that reads a row scalar (a variance of the mean) waits for it
        return
    sch.merge(*[sch.get_loops(sch.get_sblock(info.name))[-1] for info in sums])
    row_loop = sch.get_loops(sch.get_sblock(sums[0].name))[-2]
    order = [sch.get(rv).name_hint for rv in sch.get_child_blocks(row_loop)]
    written = {n for info in sums for n in info.writes}
    last_sum = max(order.index(info.name) for info in sums)
    late = [info.name for info in row_stages if info.reads & written and order.index(info.name) < last_sum]
    if late:
        raise RuntimeError(f"merging the row sums left {late} before the sums they read: {order}")


def _fence_value(sch, name: str) -> None:
    """Wrap the value a per-row scalar stage stores in ``llvm.arithmetic.fence``.

    With reassociation allowed (the target's ``fast-math-reassoc``), LLVM's InstCombine
    sinks a division through a product, ``x * (a / b) -> (x * a) / b``, whenever the
    division has one use; RmsNorm's ``coef = dot * rstd^3 / cols`` has exactly one (the
    elementwise ``x * coef``), so the division the TE hoisted to once per row came back as
    a ``vdivps`` per 8 elements of the inner loop (seen in the assembly of every RmsNorm
    kernel). The fence stops reassociation across it and costs nothing at run time.
    Measured on RmsNormGrad 4096x4096 (caches evicted before each call): through the aclnn
    API with 256-bit vectors, bf16 took 1.90x the time of the same run's stream of its
    bytes before, 1.62-1.68x after; kernel alone, interleaved A/B, 41 calls each, with the
    512-bit vectors bf16 now gets (targets/llvm.py): bf16 4.75-4.91 -> 4.55-4.82 ms, f32
    9.79-10.10 -> 10.10-10.33 ms (memory-bound f32 loses 2-3%: kept for one rule).
    """
    rv = sch.get_sblock(name)
    block = sch.get(rv)
    store = block.body
    dtype = str(store.buffer.dtype) if isinstance(store, tirx.BufferStore) else ""
    if not dtype.startswith("float"):
        return
    fenced = tirx.BufferStore(store.buffer, tirx.call_llvm_pure_intrin(dtype, "llvm.arithmetic.fence", store.value),
                              store.indices)
    new_block = s_tir.stmt.SBlock(block.iter_vars, block.reads, block.writes, block.name_hint, fenced,
                                  block.init, block.alloc_buffers, block.match_buffers, block.annotations)
    sch.state.replace(sch.get_sref(rv), new_block, {block: new_block})


def _widen_sum(sch, name: str) -> bool:
    """Accumulate the sum block ``name`` in float64; its readers get it rounded to float32
    once (CPU channel sums: ATen's CPU kernels accumulate such per-channel statistics in double).

    A float32 accumulator carries about u x the partial sums' size: on a channel whose sum
    cancels (a mean ~1/100 of the spread) that is tens of u of the result, and two float32
    summation orders differ by as much (issue 37: docs/compare-and-bench.md). A float64
    one is exact to ~2^-29 relative of the partials and rounds once: the sum comes out
    correctly rounded but for rare ties. The memory-bound pass reads the same bytes; each
    element costs a conversion and a float64 add, half as many per vector. Other targets
    keep float32 (Ascend's vector unit has no float64; GPUs' is slow on consumer parts).

    ``unsafe_set_dtype`` makes the buffer float64 but keeps the update in float32
    (``acc = f64(f32(acc) + e)``); the update is rewritten to ``acc = acc + e`` with ``e``
    itself evaluated in float64 (_in_float64), before any rfactor, so partial sums are
    float64 too. ``e`` in float64: a product of two float32 values is exact there, as it
    is inside the FMA LLVM contracts ``acc + a * b`` into in float32; rounding the product
    to float32 first made a column sum of products worse than the float32 sum (50u -> 66u
    MARE over 10 draws: docs/compare-and-bench.md). False (nothing changed) for a block that
    is not a float32 sum into a buffer of its own (a max; a sum written to a parameter)."""
    rv = sch.get_sblock(name)
    store = sch.get(rv).body
    params = {p.name for p in sch.mod["main"].params}
    own = lambda e: getattr(getattr(e, "source", None), "name", None) == store.buffer.name  # noqa: E731
    if not (isinstance(store, tirx.BufferStore) and str(store.buffer.dtype) == "float32"
            and store.buffer.name not in params and isinstance(store.value, tirx.Add) and own(store.value.a)):
        return False
    term = store.value.b
    sch.unsafe_set_dtype(name, 0, "float64")
    block = sch.get(rv)
    buffer = block.body.buffer
    update = tirx.BufferStore(buffer, tirx.BufferLoad(buffer, store.indices) + _in_float64(term),
                              store.indices)
    zero = tirx.BufferStore(buffer, tirx.const(0.0, "float64"), store.indices)  # rfactor's identity
    new_block = s_tir.stmt.SBlock(block.iter_vars, block.reads, block.writes, block.name_hint, update,
                                  zero, block.alloc_buffers, block.match_buffers, block.annotations)
    sch.state.replace(sch.get_sref(rv), new_block, {block: new_block})
    return True


def _in_float64(expr):
    """``expr`` (a float32 scalar expression of per-channel values) evaluated in float64:
    float32 loads, constants and casts widened, arithmetic and math calls redone in
    float64; a float64 sum read through its float32 cast is read as is. Anything else
    (integers, conditions, 16-bit values) is left as it is and widened where it meets a
    float32 operation."""
    if str(expr.ty) != "float32":
        return expr
    if isinstance(expr, tirx.Cast):
        inner = expr.value
        return inner if str(inner.ty) == "float64" else tirx.Cast("float64", inner)
    if isinstance(expr, tirx.FloatImm):
        return tirx.const(expr.value, "float64")
    binary = {tirx.Add: lambda a, b: a + b, tirx.Sub: lambda a, b: a - b,
              tirx.Mul: lambda a, b: a * b, tirx.Div: lambda a, b: a / b}
    for kind, make in binary.items():
        if isinstance(expr, kind):
            return make(_in_float64(expr.a), _in_float64(expr.b))
    if isinstance(expr, ir.Call):
        return ir.Call(expr.op, [_in_float64(a) for a in expr.args], ret_ty="float64")
    return tirx.Cast("float64", expr)


def _stage_in_float64(sch, name: str) -> None:
    """Compute the per-channel stage ``name`` (a mean, variance, inverse deviation, scale:
    C values, no bandwidth) in float64 from the float64 sums, rounded once when stored;
    in float32 each of its five or six roundings, amplified by the variance's
    E[(x-s)^2] - E[x-s]^2, made a stored inverse deviation 2-3x ATen's error, which rounds
    once (docs/compare-and-bench.md)."""
    rv = sch.get_sblock(name)
    block = sch.get(rv)
    store = block.body
    if not isinstance(store, tirx.BufferStore) or str(store.value.ty) != "float32":
        return
    stored = tirx.BufferStore(store.buffer, tirx.Cast("float32", _in_float64(store.value)), store.indices)
    new_block = s_tir.stmt.SBlock(block.iter_vars, block.reads, block.writes, block.name_hint, stored,
                                  block.init, block.alloc_buffers, block.match_buffers, block.annotations)
    sch.state.replace(sch.get_sref(rv), new_block, {block: new_block})


def _merge_nests(sch, block_rvs, depth: int):
    """Merge the first ``depth`` loop levels of sibling loop nests; returns the merged loops.

    Sibling reductions over the same data (sum dy*x and sum dy) then read it in one pass.
    The nests are merged last-in-program-order first: merging (first, last) instead left a
    consumer of the first block with an unbounded region at a later reverse_compute_at
    (TVM 0.27, measured), which recomputed every group in every parallel iteration.
    """
    merged = []
    for level in range(depth):
        loops = [sch.get_loops(b)[level] for b in reversed(block_rvs)]
        merged.append(sch.merge(*loops) if len(loops) > 1 else loops[0])
    return merged


def _decompose_innermost(sch, info: Block) -> None:
    """Split a reduction's init out of its innermost (reduction) loop."""
    if "R" in info.kinds:
        block = sch.get_sblock(info.name)
        sch.decompose_reduction(block, sch.get_loops(block)[-1])


@dataclass(frozen=True)
class GroupedRowPass(PatternRule):
    """Knobs: ``parallel``, ``stream_stores``, ``prologue_once``. The outer (batch, group)
    axes are fused and run in parallel; the column sums (per channel, over the batch and the
    group's rows) accumulate in float64 and are rounded once (_column_sums_in_float64)."""

    def knobs(self, target) -> tuple:
        return (PARALLEL, STREAM_STORES, PROLOGUE_ONCE)

    def knobs_for_shapes(self, target, shapes) -> dict:
        defaults = size_defaults(shapes)
        if shapes:
            largest = max(shapes.values(), key=math.prod)
            if math.prod(largest[-2:]) > PROLOGUE_ONCE_UP_TO:
                defaults["prologue_once"] = False
        return defaults

    def keeps_prologues(self, knobs: dict) -> bool:
        return bool(knobs.get("prologue_once", PROLOGUE_ONCE.default))

    def check_knobs(self, knobs: dict, target, shapes: dict | None = None, func=None) -> str | None:
        if func is not None and not knobs.get("prologue_once", True) and not prologues(blocks(s_tir.Schedule(func))):
            return "prologue_once=False builds the same kernel as True: the function has no prologue"
        return None

    def match(self, infos: list[Block]):
        return patterns.grouped_pass(infos)

    def schedule(self, sch, matched, target, knobs):
        out, outer, row_sums, group_stages, column_sums, casts = matched
        _row_sums_of_column_sums_in_float64(sch, row_sums, column_sums)
        # Merge and compute_at on the separate outer loops, fuse them last: the region
        # analysis cannot bound (fused // G, fused % G) and would recompute every group.
        row_rvs = [sch.get_sblock(b.name) for b in row_sums]
        outer_loops = _merge_nests(sch, row_rvs, len(row_sums[0].kinds))[:outer]
        for info in group_stages:
            sch.reverse_compute_at(sch.get_sblock(info.name), outer_loops[-1])
        merged = _prologues_per_group(sch, out, outer_loops)
        if merged is None:
            sch.reverse_compute_at(sch.get_sblock(out.name), outer_loops[-1])
        outer_loops = merged or outer_loops
        _parallel(sch, sch.fuse(*outer_loops), knobs)
        _stream(sch, out, knobs)
        if column_sums:
            copies = _column_sums_in_float64(sch, column_sums)
            col_rvs = [sch.get_sblock(b.name) for b in column_sums]
            col_loops = _merge_nests(sch, col_rvs, len(column_sums[0].kinds))[:-1]
            for rv in [sch.get_sblock(info.name) for info in casts] + list(copies.values()):
                sch.reverse_compute_at(rv, col_loops[-1])    # each column rounded once, after its sum
            _parallel(sch, sch.fuse(*col_loops), knobs)
        for info in row_sums + group_stages + column_sums:
            _decompose_innermost(sch, info)
        return sch


def _row_sums_of_column_sums_in_float64(sch, row_sums: list[Block], column_sums: list[Block]) -> None:
    """Accumulate in float64 the scratch row sums a column sum reads (per-row sums whose
    difference, scaled, is summed over the batch): the column sum's term then runs in
    float64 from unrounded values (_in_float64 reads a widened sum as is), so a difference
    of two large row sums does not expose their float32 rounding errors. Other row sums
    (the per-group statistics feeding the elementwise output) stay float32."""
    read = set().union(*(c.reads for c in column_sums)) if column_sums else set()
    feeding = [b for b in row_sums if b.writes & read and not b.writes_output]
    _sums_in_float64(sch, feeding, "row sum")


def _prologues_per_group(sch, out: Block, outer_loops: list):
    """Compute each prologue kept as a block (``keep_prologues``) once per group, before the
    group's sums: TVM then allocates it at the group's size inside the parallel loop (a
    per-thread buffer), and the sums and the output read it instead of recomputing it.

    The output's loops are merged into the group loop (with the sums' and the prologue's)
    rather than moved under it: TVM moves a consumer under a loop only once all its
    producers are there, and a producer only once all its consumers are, and the output
    reads both the prologue and the group's scalars.

    Measured (2-core znver3 VM, GroupNormSwishGrad, kernel alone, interleaved medians).
    Before, one thread, f32 (2,320,64x64) G=32: the sigmoid in both passes cost 5.2 of
    7.7 ms (the same kernel with an affine map for the sigmoid took 2.4 ms, GroupNorm's
    2.4 ms). Once / twice, two threads, ms: f32 (2,320,64x64) 2.9 / 4.7, (8,256,56x56)
    13.4 / 23.4, (2,1280,16x16) 0.62 / 1.16; bf16 2.7 / 4.9, 13.6 / 25.2, 0.72 / 3.4."""
    kept = prologues(blocks(sch))
    if not kept:
        return None
    nests = [sch.get_sblock(b.name) for b in kept] + [None, sch.get_sblock(out.name)]
    merged = []
    for level, loop in enumerate(outer_loops):
        loops = [loop if rv is None else sch.get_loops(rv)[level] for rv in nests]
        merged.append(sch.merge(*loops))
    return merged


BATCH_ROW_SUMS = Knob(
    "batch_row_sums", (False, True), False,
    "sum each (n, c) row of HW elements into partials (N, C) in a pass over the batch in "
    "memory order, then the partials of each channel over N in a fixed order, and write the "
    "outputs in a second pass in memory order; False: one pass per channel (see BATCH_ROWS_UP_TO)")
# A channel of an (N, C, HW) tensor is N pieces of HW elements, C x HW apart. Up to this HW
# the channel pass reads short strided pieces (16 of 196 bytes per channel at (16,512,7x7))
# and waits on memory; the batch-row passes read it in order. Measured (BatchNormBackward f32,
# kernel alone, caches evicted before each call, ms, channel / batch rows): (16,512,7x7)
# 1.13 / 0.57, (32,256,14x14) 2.57 / 1.95, (8,128,28x28) 1.01 / 1.08. From BATCH_ROWS_FROM:
# the partials take 1/HW of the data (a channels-last input is (N*H*W, C, 1): its partials
# would be a copy of it).
BATCH_ROWS_UP_TO = 256
BATCH_ROWS_FROM = 16
# ... and only for data of at least this many elements (1.5 MiB of float32; (16,512,7x7)
# stays batch rows). Below it the data sits in the caches (a training step's norm reads what
# the layer before it just wrote) and the channel pass needs one parallel launch, against the
# batch rows' three: each wakes a sleeping thread under OMP_WAIT_POLICY=PASSIVE. Measured
# (issue 39: ResNet's BatchNorm2d at `opgen bench --models`' shapes, through opgen.torch.calls,
# 2 threads on torch's pool, PASSIVE, 2-core VM, min of 31 rounds, µs, batch rows -> channel
# pass; forward, backward): (8,32,16x16) 85 -> 68, 108 -> 85; (8,64,8x8) 84 -> 57, 95 -> 71.
# With spinning threads (the default policy) the two measured alike at those shapes.
BATCH_ROWS_MIN_ELEMENTS = 3 << 17


@dataclass(frozen=True)
class ChannelPass(PatternRule):
    """Knobs: ``parallel``, ``stream_stores``, ``batch_row_sums``. One parallel pass over the
    channels: each channel's sums over N and HW in one loop nest (one read of its data; the
    statistics they read inlined, see patterns.inline_statistics), its scalars, then its
    elementwise outputs (a second read, from cache when a channel's N*HW elements fit). For
    a small HW on data too large for the caches, batch rows instead (``_batch_row_passes``).
    Each sum runs in a fixed order in either: the bits do not depend on threads. A channel_reduction (the sums and their
    scalars, no elementwise output) is the same pass without the outputs: the Fallback ran
    each sum as its own nest, reading the data once per sum, one channel at a time."""

    def knobs(self, target) -> tuple:
        return (PARALLEL, STREAM_STORES, BATCH_ROW_SUMS)

    def knobs_for_shapes(self, target, shapes) -> dict:
        defaults = size_defaults(shapes)
        data = [shape for shape in (shapes or {}).values() if len(shape) == 3]   # (N, C, HW)
        if data:
            n, c, hw = max(data, key=math.prod)
            if n >= 2 and BATCH_ROWS_FROM <= hw <= BATCH_ROWS_UP_TO and n * c * hw >= BATCH_ROWS_MIN_ELEMENTS:
                defaults["batch_row_sums"] = True
        return defaults

    def match(self, infos: list[Block]):
        return patterns.channel_pass(infos) or patterns.channel_reduction(infos)

    def schedule(self, sch, matched, target, knobs):
        outs, sums, stages = matched   # outs is empty for a channel_reduction
        after = patterns.inline_statistics(sch, stages, sums)
        copies = list(_sums_in_float64(sch, sums, "channel sum").values())
        for info in after:
            _stage_in_float64(sch, info.name)
        if knobs.get("batch_row_sums", BATCH_ROW_SUMS.default):
            _batch_row_passes(sch, outs, sums, after, knobs, copies)
            return sch
        sum_rvs = [sch.get_sblock(b.name) for b in sums]
        channel = _merge_nests(sch, sum_rvs, 3)[0]
        for rv in copies:   # the outputs' rounded sums first: the stages may read them
            sch.reverse_compute_at(rv, channel)
        for info in after + outs:
            sch.reverse_compute_at(sch.get_sblock(info.name), channel)
        _parallel(sch, channel, knobs)
        for out in outs:
            _stream(sch, out, knobs)
        for rv in sum_rvs:   # zero each channel's sums before its N loop, not in the inner loop
            sch.decompose_reduction(rv, sch.get_loops(rv)[1])
        return sch


def _batch_row_passes(sch, outs: list[Block], sums: list[Block], after: list[Block], knobs,
                      copies: list = ()) -> None:
    """The channel pattern in memory order, three loop nests:

    1. over n in parallel, then c: each sum's partial of row (n, c) over HW (rfactor over N);
    2. over c: the partials summed over n in order, then the channel's scalars;
    3. over n in parallel, then c and HW: the elementwise outputs.
    The partials take N x C doubles per sum (the workspace: kernels.hoist_pass_buffers);
    ``copies`` (_sums_in_float64) round the sums that are outputs, in nest 2."""
    partials = []
    for info in sums:
        channel, batch, _ = sch.get_loops(sch.get_sblock(info.name))
        rf = sch.rfactor(batch, 0)
        c, n, hw = sch.get_loops(rf)
        sch.reorder(n, c, hw)
        partials.append(rf)
    _parallel(sch, _merge_nests(sch, partials, 3)[0], knobs)
    for rf in partials:   # zero each partial before its HW loop
        sch.decompose_reduction(rf, sch.get_loops(rf)[2])
    totals = [sch.get_sblock(b.name) for b in sums]
    channel = _merge_nests(sch, totals, 1)[0]
    for rv in copies:     # sums that are outputs, rounded from their float64 totals first
        sch.reverse_compute_at(rv, channel)
    for info in after:
        sch.reverse_compute_at(sch.get_sblock(info.name), channel)
    _parallel(sch, channel, knobs)
    for rv in totals:     # zero each channel's total before its N loop (N may be 0)
        sch.decompose_reduction(rv, sch.get_loops(rv)[1])
    if not outs:          # a channel_reduction: the sums and their scalars are the outputs
        return
    _parallel(sch, _merge_nests(sch, [sch.get_sblock(b.name) for b in outs], 3)[0], knobs)
    for out in outs:
        _stream(sch, out, knobs)


@dataclass(frozen=True)
class ChannelMap(PatternRule):
    """Knobs: ``parallel``, ``stream_stores``. The call sums (a few elements) and the
    per-channel stages (C elements each) run first on the calling thread, as written, each
    sum zeroed before its loop (it may have no elements); then each elementwise output over
    its fused (N, C) rows in parallel, the HW loop inside for LLVM's vectorizer. Fusing N
    and C (not N alone, the fallback's outer loop) keeps both cores busy at N = 1."""

    def knobs(self, target) -> tuple:
        return (PARALLEL, STREAM_STORES)

    def knobs_for_shapes(self, target, shapes) -> dict:
        return size_defaults(shapes)

    def match(self, infos: list[Block]):
        return patterns.channel_map(infos)

    def schedule(self, sch, matched, target, knobs):
        outs, call_sums, _ = matched
        for info in call_sums:
            if "R" in info.kinds:
                block = sch.get_sblock(info.name)
                sch.decompose_reduction(block, sch.get_loops(block)[1])
        for info in outs:
            n, c, _ = sch.get_loops(sch.get_sblock(info.name))
            _parallel(sch, sch.fuse(n, c), knobs)
            _stream(sch, info, knobs)
        return sch


DEFAULT_COLUMN_BLOCK = 0
COLUMN_BLOCK = Knob(
    "column_block", (0, 16, 32, 64, 128, 256, 512), DEFAULT_COLUMN_BLOCK,
    "neighbouring positions one task normalizes at a time (0: a whole row of HW per n, one "
    "task per n). A block of a symbolic HW leaves a tail predicate on every inner loop, which "
    "LLVM turns into masked vector loads with 64-bit index compares: measured on one thread "
    "(f32, kernel alone, ms, whole / 64 / 256): forward (8,96,56,56) 2.16 / 21.6 / 23.0, "
    "(8,384,14,14) 0.39 / 2.3 / 13.9, (8,32,32,32) 0.22 / 0.68; backward (8,96,56,56) "
    "15.6 / 40.6 / 31.0, (8,384,14,14) 0.87 / 11.5 / 14.3. Whole rows keep the parallelism "
    "to N tasks")


@dataclass(frozen=True)
class ColumnPass(PatternRule):
    """Knobs: ``column_block``, ``parallel``, ``stream_stores``. The column pass (a norm over
    the middle axis of (N, C, HW)) as one loop nest: by default a task per n, its whole row
    of HW positions (``column_block`` > 0 cuts the positions into blocks of that many
    neighbours instead, slower: see the knob); in a task, each sum over C walks the
    channels outside and the positions inside, so every load is a contiguous run the
    vectorizer takes (the TE's order, C inside, strides HW apart and vectorizes nothing); the
    per-position stages and the outputs follow in the same task (from cache where its C x HW
    elements fit). The per-channel sums (a backward's dgamma and dbeta) are their own parallel pass over the
    channels, accumulated in float64 and rounded once (as the channel rule's sums), merged so
    that the data is read once for all of them."""

    def knobs(self, target) -> tuple:
        return (COLUMN_BLOCK, PARALLEL, STREAM_STORES)

    def knobs_for_shapes(self, target, shapes) -> dict:
        return size_defaults(shapes)

    def match(self, infos: list[Block]):
        return patterns.column_pass(infos)

    def schedule(self, sch, matched, target, knobs):
        outs, column_sums, stages, channel_sums, casts = matched
        if channel_sums:
            _channel_sums_pass(sch, channel_sums, casts, knobs)
        produced = {nm for b in column_sums + stages for nm in b.writes}
        roots = [b for b in column_sums if not b.reads & produced]
        width = int(knobs.get("column_block", DEFAULT_COLUMN_BLOCK))
        if width:
            for info in roots:
                position = sch.get_loops(sch.get_sblock(info.name))[1]
                sch.split(position, [None, width])
            batch, block_loop = _merge_nests(sch, [sch.get_sblock(b.name) for b in roots], 2)
        else:   # whole rows: a task per n, its HW positions one block (no tail predicate)
            batch = block_loop = _merge_nests(sch, [sch.get_sblock(b.name) for b in roots], 1)[0]
        rest = sorted((b for b in column_sums + stages + outs if b not in roots), key=lambda b: b.order)
        for info in rest:
            sch.reverse_compute_at(sch.get_sblock(info.name), block_loop)
        for info in column_sums:   # channels outside, positions inside: contiguous runs
            loops = sch.get_loops(sch.get_sblock(info.name))
            sch.reorder(loops[-1], loops[-2])
        _parallel(sch, sch.fuse(batch, block_loop) if width else batch, knobs)
        for info in column_sums:   # zeroed before the channel loop (after _parallel: TVM's order)
            rv = sch.get_sblock(info.name)
            sch.decompose_reduction(rv, sch.get_loops(rv)[-2])
        for out in outs:
            _stream(sch, out, knobs)
        for info in stages:
            if not info.writes_output:
                _fence_value(sch, info.name)
        return sch


def _channel_sums_pass(sch, channel_sums: list[Block], casts: list[Block], knobs) -> None:
    """The column pass's per-channel sums over (N, HW): one nest over the channels in
    parallel, the sums merged (one read of the data), each in float64 zeroed before its N
    loop, then rounded by its cast (or its copy into a float32 output) in the same task."""
    copies = _sums_in_float64(sch, channel_sums, "channel sum")
    rvs = [sch.get_sblock(b.name) for b in channel_sums]
    channel = _merge_nests(sch, rvs, 3)[0]
    for rv in copies.values():
        sch.reverse_compute_at(rv, channel)
    for cast in casts:
        sch.reverse_compute_at(sch.get_sblock(cast.name), channel)
    _parallel(sch, channel, knobs)
    for rv in rvs:
        sch.decompose_reduction(rv, sch.get_loops(rv)[1])


@dataclass(frozen=True)
class Fallback(ScheduleRule):
    """Any function the patterns above do not match (dlight's Fallback, for the CPU): every
    loop nest runs as the TE wrote it, in program order, its outermost spatial loop on the
    thread pool, each sum zeroed before its reduction loops (a sum over an empty axis is
    still written: with the init inside, it never ran). Correct for any op (each nest
    finishes before the next starts, and a spatial loop's iterations write disjoint
    elements), not fast: a stage's output goes through memory to the next one. Knob:
    ``parallel``."""

    def knobs(self, target) -> tuple:
        return (PARALLEL,)

    def knobs_for_shapes(self, target, shapes) -> dict:
        return {k: v for k, v in size_defaults(shapes).items() if k == "parallel"}

    def matches(self, func, target) -> bool:
        return True

    def apply(self, func, target, knobs):
        sch = s_tir.Schedule(func)
        nests = sch.get_child_blocks(sch.get_sblock("root"))
        for rv in nests:   # float32 sums in float64 (_widen_sum), as the channel rule's
            if sch.get(rv).init is not None:
                _widen_sum(sch, sch.get(rv).name_hint)
        for rv in nests:
            loops, block = sch.get_loops(rv), sch.get(rv)
            spatial_first = block.iter_vars and block.iter_vars[0].iter_type == 0
            if loops and spatial_first and knobs.get("parallel", True):
                sch.parallel(loops[0])
        for rv in nests:   # zero each sum before its reduction loops: they may run 0 times
            loops, block = sch.get_loops(rv), sch.get(rv)
            spatial = sum(1 for iv in block.iter_vars if iv.iter_type == 0)
            if block.init is not None and spatial < len(loops):
                sch.decompose_reduction(rv, loops[spatial])
        return sch


RULES = [RowPassWithColumnSums(), RowPass(), GroupedRowPass(), ChannelPass(), ChannelMap(), SegmentedRowPass(),
         ColumnPass(), Fallback()]
