"""GPU schedules (CUDA, OpenCL, any target with blocks and threads), matched by stage pattern.

The patterns are those of the CPU rules (schedules/patterns.py, including the fused row
pass both build): only how the matched stages are laid onto blocks and threads differs.

* ``GpuRowPass`` (RmsNorm-like: per-row reductions and scalars, an elementwise output,
  column sums over the rows). A persistent grid of ``partials`` blocks, each owning a
  contiguous range of ceil(rows / partials) rows (QuACK sizes its grid the same way, a few
  blocks per SM), or, with ``rows_per_block`` set (by default too with several column sums
  or more than PERSISTENT_ACCUMULATORS accumulators), ceil(rows / rows_per_block) blocks.
  For each of its rows a block reduces the row across its threads (a
  cross-thread reduction: warp shuffles on CUDA, a __local tree on OpenCL), computes the
  per-row scalars, then writes the elementwise output and adds the row into its own row
  of column partials, in one pass over the row (threads stride the columns, with a loop
  when the row is longer than the block). A second kernel per column sum sums the
  ``partials`` rows of each column in a fixed order, parallel over columns (threadIdx.x)
  and over the partials (threadIdx.y, PARTIAL_SPLIT threads a column, each summing every
  PARTIAL_SPLIT-th row, then a fixed-order tree in shared memory); thread y = 0 stores the
  sum, or rounds it when cast stages follow (the float32 sum then stays in its register).
  No atomics: the bits depend on the shape and the knobs, never on timing.
* ``GpuRowReduce`` (the row pattern without column sums: a forward norm): a block per row,
  its reductions across the threads, its scalars in registers, then its elementwise
  outputs; a per-row output (rstd) stored by one thread.
* ``GpuGroupedRowPass`` (GroupNorm-like: per-(outer..., inner) row sums, per-group
  scalars, an elementwise output, column sums over the first axis). Kernel 1: a block per
  row (knob ``block_per="row"``, the default: N*C blocks, so a group's work is spread over
  many blocks even when N*G is smaller than the GPU's SM count) or per group looping over
  its rows (``"group"``) reduces each row across its threads into the row-sum buffers
  (which the column sums also read, so they are kernel parameters in the workspace).
  Kernel 2: the group scalars, from those row sums in a fixed order (every thread the
  same; each block of a group recomputes them, D multiply-adds), and the elementwise
  output, a block per row (rows on blockIdx.y) or per group. Kernel 3: a thread per
  column sums over the first axis in a fixed order. (With ``"row"``, C/G must stay within
  CUDA's 65535 blocks in y.)

  Why the group scalars are not computed in kernel 1 from the row sums it has just
  written: TVM lowers a cross-thread reduction into a global buffer as a store by
  thread 0 with no barrier after it (TVM 0.27, read in the emitted OpenCL), so other
  threads reading the row sums in the same kernel would race. A kernel boundary is the
  barrier; the row sums are D floats per group, and x/dy are read twice either way.

Per-row and per-group scalars live in "local" scope: each thread holds its own copy
(a global one raced in a probe: TVM 0.27 kept a single copy in global memory that every
thread wrote). The GPU targets build with
StorageRewrite off because, with it on, TVM 0.27 folded a local scalar computed from a
reduction (RmsNorm's coef) into the shared buffer holding the reduction's result, so every
thread rewrote the value the others were still reading (seen in the emitted OpenCL).

* ``GpuChannelPass`` (BatchNorm-like: per-channel sums over N and HW, per-channel scalars,
  elementwise outputs): a kernel of per-channel cross-thread sums, then a kernel of
  per-channel scalars and outputs, a block per channel in both.
* ``GpuSegmentedRowPass`` (the row pass whose column sums restart at every segment: per-sample
  sums over S): GpuRowPass's row kernel with a block per (segment, rows_per_block rows), so
  a block's partials belong to one segment; then a thread per (segment, column) sums them in
  order, a kernel per per-segment stage, and a thread per column sums over the segments.
* ``GpuFallback``: anything else, through TVM dlight's ``gpu.Fallback``.

Tails: every split is guarded (TVM predicates), so any extent works, 0 included.

The vector variant (knob ``vector`` of GpuRowPass and GpuRowReduce; chosen per call by
``knobs_for_call``, never by a tuned record): for rows whose length the lanes divide (16
bytes of the narrowest row tensor: 8 x f16/bf16, 4 x f32), tensors 16-byte aligned as the
kernel receives them (opgen.executor.kernel_alignments) and index values within int32. Each
thread owns ``lanes`` consecutive columns: its row tensors are copied into registers with
128-bit loads, the arithmetic runs as float32x4 (which also moves the column partials 128
bits at a time), the elementwise outputs go back with 128-bit stores (bf16/f16 outputs: nvcc
splits them into two 64-bit stores), and per-row inputs (rstd) are read once per row. What
made TVM 0.27 emit it (each measured in the emitted CUDA):
  * the lanes split carries no guard (``disable_predication``); the body's row length is
    ``cols // lanes * lanes`` and the parameters declare the promise (strides, element
    offsets a multiple of the lanes, 16-byte alignment: opgen.kernels.declare_vector_alignment),
    which TVM's argument binder checks per call; without it TVM scalarized the loop under
    the tail guard, and its code generator gathered element by element any ramp whose base
    it could not prove a multiple of the lanes (a free element offset, a symbolic stride);
  * common-subexpression elimination off (it bound the ramps to variables: gathers again)
    and the index arithmetic forced to int32 (targets/gpu_launch.py);
  * float32x8 cannot be printed for CUDA (a ulonglong4 of eight floats), hence the x4
    arithmetic; the register caches get a constant extent (CompactBufferAllocation clamped
    them to min(cols, lanes), which CUDA cannot allocate).
SASS instructions per element of the row pass's elementwise loop (targets/cuda_sass.py,
CUDA 13.0, rms_norm_grad, default knobs, sm_80 / sm_90): bf16-f32 generic 39.8 / 40.8,
vector 13.6 / 13.5; f32-f32 generic 36.2 / 37.5, vector 15.4 / 16.0; over every pass
(reduction + output) generic 55.5 / 56.5 and 50.0 / 51.2, vector 21.6 / 21.0 and
22.7 / 23.6 (benchmarks/sass_per_element.py; table in docs/targets.md).

Not here yet (issue 40; the static measures of today's kernels, targets/gpu_traffic.py and
cuda_sass.all_passes, are in docs/targets.md): the column partials of the row pass are still
a read-modify-write of global memory per row (in 128-bit pieces in the vector variant); the
row reduction and the output pass each read the row from global memory; the grid is the
fixed ``partials`` knob, not sized from the device's SM count. Several rows per block on threadIdx.y (a warp per short row) needs the column
partials split per warp as well; ``threads=32`` with more ``partials`` is the nearest point
of the current space.
"""
from __future__ import annotations

from dataclasses import dataclass

from tvm.s_tir import dlight

from opgen.schedules import Block, Knob, PatternRule, ScheduleRule, blocks, pattern_schedule, patterns
from opgen.schedules import gpu_vector
from opgen.schedules.gpu_vector import (VECTOR, _row_scalars_in_registers, _tensor_sets, _vector_nest,
                                        _vector_row_reductions, _promise, check_vector, vector_defaults,
                                        vector_lanes, vector_variants)
from opgen.schedules.llvm import _merge_nests

THREADS = Knob(
    "threads", (32, 64, 128, 256, 512, 1024), 256,
    "threads per block: the columns a block covers per step of its row loop; more threads "
    "help long rows and cost barrier steps in the cross-thread reduction")
PARTIALS = Knob(
    "partials", (1, 16, 64, 128, 256, 512, 1024, 2048), 512,
    "blocks of the row pass (the persistent grid) and so rows of column partials in the "
    "workspace; each block owns ceil(rows / partials) consecutive rows. 512 = about 4 "
    "blocks per SM on an H100/H200 (132 SMs). The final sum reads partials x cols floats")
ROWS_PER_BLOCK = Knob(
    "rows_per_block", (0, 1, 2, 4, 8, 16, 32, 64, 128), 0,
    "rows each block of the row pass owns; 0: ceil(rows / partials) (a grid of `partials` "
    "blocks whatever the shape; with several column sums or more than PERSISTENT_ACCUMULATORS "
    "accumulators, SEVERAL_SUMS_ROWS_PER_BLOCK rows, see GpuRowPass). A fixed count instead makes "
    "the grid ceil(rows / rows_per_block) blocks "
    "and the partials as many rows, so small problems read few partials back; `partials` is "
    "then unused")
# With more than one column sum, only the first one's partials can be zeroed once per
# block before its rows (patterns.zero_partials: TVM 0.27 refuses a second decomposition);
# the others are zeroed at a block's first row, so every block must own one: the grid is
# ceil(rows / this) blocks instead of the persistent `partials` (where blocks past the last
# row would sum partials nobody zeroed).
SEVERAL_SUMS_ROWS_PER_BLOCK = 8
# The persistent grid only up to this many accumulators (row reductions + column sums), for
# register pressure: nvcc keeps no spill. With ``partials`` blocks each block owns
# ceil(rows / partials) rows, a symbolic trip count whose 64-bit row base every predicate
# and address of the row recomputes; under TVM's __launch_bounds__(threads) (no minimum of
# blocks per SM) ptxas then holds the kernel to 32 registers and spills (the same source with
# __launch_bounds__(256, 1) takes 56 registers and spills nothing, but no schedule sets that
# minimum: TVM 0.27 ignored a loop annotation and a function attribute named
# tirx.launch_bounds_min_blocks_per_sm). Measured with CUDA
# 13.0, default knobs (256 threads), on tests/toy_ops.row_pass_with_sums (spill = store +
# load bytes, sm_80 / sm_90): 1 row sum + 1 column sum (RmsNorm) 32 regs, no spill; 2 row
# sums + 1 column sum 32 regs, 32 B / 32 B; 4 + 1: 16 B / 32 B (LayerNormBackward's branch
# reported 16 B of stores on sm_80 for its 2 + 2 on a persistent grid, before several column
# sums took fixed rows per block here). With SEVERAL_SUMS_ROWS_PER_BLOCK rows
# per block (row base blockIdx.x * 8 + r) the same kernels take 40-48 registers and spill
# nothing; so does every mix of 1-4 row sums and 1-4 column sums (3 + 4 spilled 20 B on
# sm_90 at 256 threads while the row kernel shared ceil(cols / threads) with the final sums
# as a parameter; since the final sums are split over partials it computes it itself and
# spills nothing). ptxas's choice is not monotone in the accumulators (4 + 3 and
# 4 + 4 are clean): tests/test_patterns.py pins the measured shapes.
PERSISTENT_ACCUMULATORS = 2
COLUMN_THREADS = Knob(
    "column_threads", (32, 64, 128, 256, 512, 1024), 256,
    "threads per block of the fixed-order column sums (a thread per column)")


# The vector variant's int32 bound assumes no more partial rows nor threads than these.
assert max(PARTIALS.values) <= gpu_vector.INDEX_ROWS and max(THREADS.values) <= gpu_vector.INDEX_THREADS


def check_threads(knobs: dict, target) -> str | None:
    """The threads per block a point asks for, against the target's ``max_threads``
    (opgen.targets.GpuTargetSpec: 1024 on every CUDA GPU)."""
    limit = target.max_threads
    for name in ("threads", "column_threads"):
        if int(knobs.get(name, 0)) > limit:
            return f"{name}={knobs[name]} exceeds the {limit} threads per block {target.name} allows"
    return None


def bind_threads(sch, loop, threads: int):
    """Split ``loop`` by ``threads`` and bind the inner part to threadIdx.x; returns the outer."""
    outer, inner = sch.split(loop, [None, threads])
    sch.bind(inner, "threadIdx.x")
    return outer


def bind_blocks_and_threads(sch, loop, threads: int) -> None:
    """A thread per iteration of ``loop``: blocks of ``threads`` threads over it."""
    outer, inner = sch.split(loop, [None, threads])
    sch.bind(outer, "blockIdx.x")
    sch.bind(inner, "threadIdx.x")


def reduce_across_threads(sch, block_name: str, threads: int) -> None:
    """The innermost (reduction) loop of a block strided over threadIdx.x: TVM lowers it to
    a cross-thread reduction whose result every thread of the block sees."""
    block = sch.get_sblock(block_name)
    bind_threads(sch, sch.get_loops(block)[-1], threads)


# Threads of the final column sum that split a column's partials (threadIdx.y), each summing
# every PARTIAL_SPLIT-th partial row, then a fixed-order tree in shared memory: the sum of
# 512 partial rows is 64 loads deep per thread instead of 512, and a block covers
# column_threads / PARTIAL_SPLIT columns, so 4096 columns take 128 blocks instead of 16.
PARTIAL_SPLIT = 8


def final_column_sum(sch, block, threads: int, casts=(), scratch: bool = False) -> None:
    """Each column's partials summed in a fixed order, parallel over columns (threadIdx.x,
    ``threads // PARTIAL_SPLIT`` columns a block) and over the partials (threadIdx.y: a
    cross-thread reduction, whose result thread y = 0 stores), then the ``casts`` (blocks)
    that round the sum, run by thread y = 0 alone. A ``scratch`` sum (no output of its own)
    is then a register, never stored."""
    loops = sch.get_loops(block)
    spatial, partials = loops[:-1], loops[-1]
    columns = max(1, threads // PARTIAL_SPLIT)
    outer, inner = sch.split(sch.fuse(*spatial) if len(spatial) > 1 else spatial[0], [None, columns])
    sch.bind(outer, "blockIdx.x")
    sch.bind(inner, "threadIdx.x")
    sch.bind(sch.split(partials, [None, PARTIAL_SPLIT])[1], "threadIdx.y")
    if casts and scratch:
        sch.set_scope(block, 0, "local")
    else:   # TVM 0.27 stores a cross-thread result into a global buffer without the column
        # guard (seen in the emitted CUDA: past the row's end with 33 columns): a register
        # first, then a copy that keeps it
        casts = [sch.cache_write(block, 0, "local"), *casts]
    for cast in casts:
        sch.reverse_compute_at(cast, inner)
        one = sch.split(sch.add_unit_loop(cast), [None, PARTIAL_SPLIT])[1]
        sch.bind(one, "threadIdx.y")   # threadIdx.y < 1: one thread of the column stores


@dataclass(frozen=True)
class GpuRowPass(PatternRule):
    """Knobs: ``threads``, ``partials`` (the row pass's grid) or ``rows_per_block``,
    ``column_threads``."""

    def knobs(self, target) -> tuple:
        return (THREADS, PARTIALS, ROWS_PER_BLOCK, COLUMN_THREADS, VECTOR)

    def call_knobs(self, target) -> tuple:
        return ("vector",)

    def knobs_for_call(self, target, shapes, func=None, alignments=None) -> dict:
        matched = self.match(blocks(pattern_schedule(func))) if func is not None else None
        return vector_defaults(func, matched, shapes, alignments, target) if matched is not None else {}

    def call_variants(self, target, func) -> tuple:
        matched = self.match(blocks(pattern_schedule(func))) if func is not None else None
        return vector_variants(func, matched, target)

    def check_knobs(self, knobs: dict, target, shapes=None, func=None) -> str | None:
        if knobs.get("rows_per_block", 0) and knobs.get("partials", PARTIALS.default) != PARTIALS.default:
            return "partials is unused when rows_per_block is set (the same kernel as the default partials)"
        matched = self.match(blocks(pattern_schedule(func))) if func is not None and knobs.get("vector") else None
        return check_threads(knobs, target) or check_vector(knobs, target, shapes, func, matched)

    def match(self, infos: list[Block]):
        return patterns.row_pass(infos)

    def schedule(self, sch, matched, target, knobs):
        outs, column_sums, row_stages, casts = matched
        threads, per_block = int(knobs["threads"]), int(knobs["rows_per_block"])
        accumulators = len(column_sums) + sum("R" in b.kinds for b in row_stages)
        if not per_block and (len(column_sums) > 1 or accumulators > PERSISTENT_ACCUMULATORS):
            per_block = SEVERAL_SUMS_ROWS_PER_BLOCK
        factors = [None, per_block] if per_block else [int(knobs["partials"]), None]
        chunk_loop, row_loop, finals = patterns.fuse_row_pass(sch, outs, column_sums, row_stages, factors)
        main = sch.get_sblock(outs[0].name)
        sch.bind(chunk_loop, "blockIdx.x")
        if knobs.get("vector"):
            self._vector(sch, outs, row_stages, finals, row_loop, threads)
        else:
            bind_threads(sch, sch.get_loops(main)[2], threads)
            patterns.zero_partials(sch, finals, row_loop)
        for info in row_stages:
            if "R" in info.kinds and not knobs.get("vector"):
                reduce_across_threads(sch, info.name, threads)
            sch.set_scope(sch.get_sblock(info.name), 0, "local")
        for info, (block, _) in zip(column_sums, finals):
            rounding = [sch.get_sblock(c.name) for c in casts if c.reads & info.writes]
            final_column_sum(sch, block, int(knobs["column_threads"]), rounding, not info.writes_output)
        return sch

    @staticmethod
    def _vector(sch, outs, row_stages, finals, row_loop, threads: int) -> None:
        """The vector variant of the row pass (knob ``vector``): see VECTOR."""
        lanes = vector_lanes(sch.mod["main"], outs)
        columns, per_row = _tensor_sets(sch, outs)
        nest = [o.name for o in outs] + [sch.get(rf).name_hint for _, rf in finals]
        stage_rvs = [sch.get_sblock(b.name) for b in row_stages]
        _row_scalars_in_registers(sch, stage_rvs + [sch.get_sblock(n) for n in nest], row_loop, per_row)
        _vector_nest(sch, nest, [o.name for o in outs], lanes, threads, columns)
        patterns.zero_partials(sch, finals, row_loop)
        _vector_row_reductions(sch, row_stages, lanes, threads, columns)
        _promise(sch, outs, lanes)


@dataclass(frozen=True)
class GpuRowReduce(PatternRule):
    """The row pattern without column sums (a forward norm): a block per row reduces it
    across its threads, every thread keeps the row's scalars in registers, then the
    threads write the elementwise outputs, striding the columns. A per-row scalar that is
    also an output (rstd) is computed into each thread's register like the others and
    stored once, by thread 0 (every thread storing the same value is a race a checker
    such as Oclgrind reports). Knob: ``threads``."""

    def knobs(self, target) -> tuple:
        return (THREADS, VECTOR)

    def call_knobs(self, target) -> tuple:
        return ("vector",)

    def knobs_for_call(self, target, shapes, func=None, alignments=None) -> dict:
        matched = self.match(blocks(pattern_schedule(func))) if func is not None else None
        return vector_defaults(func, matched, shapes, alignments, target) if matched is not None else {}

    def call_variants(self, target, func) -> tuple:
        matched = self.match(blocks(pattern_schedule(func))) if func is not None else None
        return vector_variants(func, matched, target)

    def check_knobs(self, knobs: dict, target, shapes=None, func=None) -> str | None:
        matched = self.match(blocks(pattern_schedule(func))) if func is not None and knobs.get("vector") else None
        return check_threads(knobs, target) or check_vector(knobs, target, shapes, func, matched)

    def match(self, infos: list[Block]):
        matched = patterns.row_pass(infos, need_column_sums=False)
        return matched if matched is not None and not matched[1] else None

    def schedule(self, sch, matched, target, knobs):
        outs, _, row_stages, _ = matched
        threads = int(knobs["threads"])
        readers = [sch.get_sblock(b.name) for b in outs + row_stages]
        stores, terminal = [], []
        for info in row_stages:
            if info.writes_output:   # the value to a register, read by the others; one thread stores it
                block = sch.get_sblock(info.name)
                users = [rv for rv in readers if info.writes & {r.source.name for r in sch.get(rv).reads}]
                if users:
                    stores.append(sch.cache_write(block, 0, "local", consumer_blocks=users))
                else:                # read by no stage (a statistic rounded into its own dtype): one thread
                    terminal.append(info.name)   # stores it, with no register in the output's dtype
        row_loop = patterns.fuse_row_stages(sch, outs, row_stages)
        sch.bind(row_loop, "blockIdx.x")
        vector = knobs.get("vector")
        if vector:
            lanes = vector_lanes(sch.mod["main"], outs)
            columns, per_row = _tensor_sets(sch, outs)
            _row_scalars_in_registers(sch, [sch.get_sblock(b.name) for b in row_stages + list(outs)], row_loop,
                                      per_row)
            _vector_row_reductions(sch, row_stages, lanes, threads, columns)
            for out in outs:
                _vector_nest(sch, [out.name], [out.name], lanes, threads, columns)
            _promise(sch, outs, lanes)
        for info in row_stages:
            if "R" in info.kinds and not vector:
                reduce_across_threads(sch, info.name, threads)
            if not info.writes_output:
                sch.set_scope(sch.get_sblock(info.name), 0, "local")
        for out in ([] if vector else outs):
            bind_threads(sch, sch.get_loops(sch.get_sblock(out.name))[-1], threads)
        for store in stores:
            sch.reverse_compute_at(store, row_loop)
            bind_threads(sch, sch.add_unit_loop(store), threads)   # threadIdx.x < 1: thread 0 alone
        for name in terminal:   # already in the row loop (fuse_row_stages)
            bind_threads(sch, sch.add_unit_loop(sch.get_sblock(name)), threads)
        return sch


BLOCK_PER = Knob(
    "block_per", ("row", "group"), "row",
    "what one block of the row-sum and elementwise kernels covers: one (n, group, channel) row "
    "(N*C blocks: the work of a group spread over many blocks, for large HxW and small N*G) "
    "or a whole (n, group) with a loop over its rows (N*G blocks: fewer, fuller blocks when "
    "HxW is short)")


@dataclass(frozen=True)
class GpuGroupedRowPass(PatternRule):
    """Knobs: ``threads``, ``block_per`` (row or group), ``column_threads``."""

    def knobs(self, target) -> tuple:
        return (THREADS, BLOCK_PER, COLUMN_THREADS)

    def check_knobs(self, knobs: dict, target, shapes=None, func=None) -> str | None:
        return check_threads(knobs, target)

    def match(self, infos: list[Block]):
        """The grouped pattern whose group stages are small: each thread recomputes them
        (see _group_pass), which suits sums over a group's row sums but not a second pass
        over the group's data (a group stage reducing the data's innermost axis: a forward
        norm's centred variance), and compute_at cannot move a stage that is an output (a
        forward norm's mean and rstd). Those go to GpuFallback, correct nest by nest."""
        matched = patterns.grouped_pass(infos)
        if matched is None:
            return None
        out, _, _, group_stages = matched[:4]
        rank = len(out.kinds)
        if any(b.writes_output or (len(b.kinds) == rank and b.kinds.endswith("R")) for b in group_stages):
            return None
        return matched

    def schedule(self, sch, matched, target, knobs):
        out, outer, row_sums, group_stages, column_sums, casts = matched
        threads, per_row = int(knobs["threads"]), knobs["block_per"] == "row"
        self._row_sums(sch, row_sums, outer, threads, per_row)
        self._group_pass(sch, out, outer, group_stages, threads, per_row)
        if column_sums:
            col_rvs = [sch.get_sblock(b.name) for b in column_sums]
            col_loops = _merge_nests(sch, col_rvs, len(column_sums[0].kinds))[:-1]
            for info in casts:
                sch.reverse_compute_at(sch.get_sblock(info.name), col_loops[-1])
            for info in column_sums:
                if not info.writes_output:   # an accumulator rounded by a cast: one register
                    sch.set_scope(sch.get_sblock(info.name), 0, "local")
            fused = sch.fuse(*col_loops) if len(col_loops) > 1 else col_loops[0]
            bind_blocks_and_threads(sch, fused, int(knobs["column_threads"]))
            for rv in col_rvs:   # zero before the loop: with N = 0 it never runs
                sch.decompose_reduction(rv, sch.get_loops(rv)[-1])
        return sch

    @staticmethod
    def _row_sums(sch, row_sums, outer: int, threads: int, per_row: bool) -> None:
        """Kernel 1: each row reduced across a block's threads; a block per row, or per
        group looping over the group's rows.

        The sibling sums share their outer loops (one pass over the data), but each keeps
        its own thread-strided inner loop: TVM lowers a cross-thread reduction only when
        the reduction block is the last one under its thread loop."""
        rvs = [sch.get_sblock(b.name) for b in row_sums]
        loops = _merge_nests(sch, rvs, len(row_sums[0].kinds) - 1)
        spread = loops if per_row else loops[:outer]
        sch.bind(sch.fuse(*spread) if len(spread) > 1 else spread[0], "blockIdx.x")
        for info in row_sums:
            reduce_across_threads(sch, info.name, threads)

    @staticmethod
    def _group_pass(sch, out, outer: int, group_stages, threads: int, per_row: bool) -> None:
        """Kernel 2: the group scalars (each thread its own copy, from the row sums kernel
        1 wrote: every block of a group recomputes them, a sum over the group's rows) and
        the elementwise output, its rows on blockIdx.y or looped over by the group's block."""
        main = sch.get_sblock(out.name)
        loops = sch.get_loops(main)
        for info in reversed(group_stages):
            sch.compute_at(sch.get_sblock(info.name), loops[outer - 1])
        for info in group_stages:
            sch.set_scope(sch.get_sblock(info.name), 0, "local")
        loops = sch.get_loops(main)
        group = sch.fuse(*loops[:outer]) if outer > 1 else loops[0]
        sch.bind(group, "blockIdx.x")
        rest = sch.get_loops(main)[1:]
        if per_row:
            sch.bind(rest[0], "blockIdx.y")
            rest = rest[1:]
        bind_threads(sch, sch.fuse(*rest) if len(rest) > 1 else rest[0], threads)


@dataclass(frozen=True)
class GpuChannelPass(PatternRule):
    """Knobs: ``threads``. (The per-channel statistics the sums read are inlined: see
    patterns.inline_statistics.) Kernel 1: a block per channel reduces the channel's N*HW
    elements across its threads, one cross-thread reduction per sum (each the last block
    under its own thread loop, as TVM needs). Kernel 2: a thread per channel computes the
    per-channel stages that read the sums, into global memory (the kernel boundary is the
    barrier a sum written by thread 0 needs). Kernel 3: a block per channel writes its
    elementwise outputs, threads striding the fused (N, HW) elements.

    Why the stages get their own kernel: some are outputs (BatchNorm's dweight, dbias),
    which must be written by one thread, not by every thread of kernel 3's block (a race,
    even with equal values); the outputs kernel reads C values of them, from the cache."""

    def knobs(self, target) -> tuple:
        return (THREADS,)

    def check_knobs(self, knobs: dict, target, shapes=None, func=None) -> str | None:
        return check_threads(knobs, target)

    def match(self, infos: list[Block]):
        """The channel pattern whose stages after the sums are siblings: each reads sums,
        statistics and inputs, none another such stage. Kernel 2 merges their loops
        (_merge_nests), whose body then runs in reverse program order (the merged loop
        keeps the first nest's place, which kernel 3 needs): right for siblings, wrong for
        a chain (a forward's mean -> variance -> invstd -> scale read invstd before it was
        written, seen on OpenCL). A chain goes to GpuFallback, correct nest by nest."""
        matched = patterns.channel_pass(infos) or patterns.channel_reduction(infos)
        if matched is None:
            return None
        outs, sums, stages = matched
        _, after = patterns.split_stages(stages, sums)
        written = {n for b in after for n in b.writes}
        if any(b.reads & written for b in after):
            return None
        return matched

    def schedule(self, sch, matched, target, knobs):
        outs, sums, stages = matched
        threads = int(knobs["threads"])
        stages = patterns.inline_statistics(sch, stages, sums)
        sum_rvs = [sch.get_sblock(b.name) for b in sums]
        channel = _merge_nests(sch, sum_rvs, 1)[0]
        sch.bind(channel, "blockIdx.x")
        for rv in sum_rvs:
            bind_threads(sch, sch.fuse(*sch.get_loops(rv)[1:]), threads)
        if stages:
            stage_rvs = [sch.get_sblock(b.name) for b in stages]
            bind_blocks_and_threads(sch, _merge_nests(sch, stage_rvs, 1)[0], threads)
            read_by_outputs = set().union(*(b.reads for b in outs))
            for info, rv in zip(stages, stage_rvs):   # read only by stages: the thread's registers
                if not info.writes_output and not info.writes & read_by_outputs:
                    sch.set_scope(rv, 0, "local")
        if not outs:     # a channel_reduction: kernels 1 and 2 are the whole op
            return sch
        main = sch.get_sblock(outs[0].name)
        batch, chan, inner = sch.get_loops(main)
        sch.reorder(chan, batch)
        for info in outs[1:]:
            other = sch.get_sblock(info.name)
            o_batch, o_chan, o_inner = sch.get_loops(other)
            sch.reorder(o_chan, o_batch)
            sch.merge(sch.get_loops(main)[0], sch.get_loops(other)[0])
            sch.merge(sch.get_loops(main)[1], sch.get_loops(other)[1])
            sch.merge(sch.get_loops(main)[2], sch.get_loops(other)[2])
        loops = sch.get_loops(main)
        sch.bind(loops[0], "blockIdx.x")
        bind_threads(sch, sch.fuse(*loops[1:]), threads)
        return sch


@dataclass(frozen=True)
class GpuSegmentedRowPass(PatternRule):
    """A row pass whose column sums restart at every segment (patterns.segmented_row_pass),
    as ``GpuRowPass`` with the segment axis kept: kernel 1, a block per (segment,
    ``rows_per_block`` rows of it) (never the persistent grid: a block must not cross a
    segment), reduces each of its rows across its threads, writes the elementwise outputs
    and adds the row into its own row of per-segment column partials; then a thread per
    (segment, column) sums that segment's partials in a fixed order; a thread per (segment,
    column) computes the per-segment stages; a thread per column sums over the segments
    in order and rounds (casts). No atomics. Knobs: ``threads``, ``rows_per_block`` (0:
    SEVERAL_SUMS_ROWS_PER_BLOCK), ``column_threads``."""

    def knobs(self, target) -> tuple:
        return (THREADS, ROWS_PER_BLOCK, COLUMN_THREADS)

    def check_knobs(self, knobs: dict, target, shapes=None, func=None) -> str | None:
        return check_threads(knobs, target)

    def match(self, infos: list[Block]):
        return patterns.segmented_row_pass(infos)

    def schedule(self, sch, matched, target, knobs):
        outs, segment_sums, row_stages, segment_stages, batch_sums, casts = matched
        threads = int(knobs["threads"])
        per_block = int(knobs["rows_per_block"]) or SEVERAL_SUMS_ROWS_PER_BLOCK
        chunk_loop, row_loop, finals = patterns.fuse_row_pass(sch, outs, segment_sums, row_stages,
                                                              [None, per_block], outer=1)
        main = sch.get_sblock(outs[0].name)
        sch.bind(sch.fuse(sch.get_loops(main)[0], chunk_loop), "blockIdx.x")
        bind_threads(sch, sch.get_loops(main)[2], threads)
        patterns.zero_partials(sch, finals, row_loop)
        for info in row_stages:
            if "R" in info.kinds:
                reduce_across_threads(sch, info.name, threads)
            sch.set_scope(sch.get_sblock(info.name), 0, "local")
        column_threads = int(knobs["column_threads"])
        for block, _ in finals:
            final_column_sum(sch, block, column_threads)
        for info in segment_stages:
            block = sch.get_sblock(info.name)
            bind_blocks_and_threads(sch, sch.fuse(*sch.get_loops(block)), column_threads)
        for info in batch_sums:
            rounding = [sch.get_sblock(c.name) for c in casts if c.reads & info.writes]
            final_column_sum(sch, sch.get_sblock(info.name), column_threads, rounding, not info.writes_output)
        return sch


@dataclass(frozen=True)
class GpuFallback(ScheduleRule):
    """Any function the patterns above do not match: TVM dlight's own GPU fallback, which
    binds each loop nest's fused spatial loops to blocks and threads and runs reductions
    serially in each thread. Correct for any op (a nest is a kernel; kernels run in
    order), slow for reductions: the reason no op meets ``NoScheduleRule`` on a GPU."""

    def matches(self, func, target) -> bool:
        return True

    def apply(self, func, target, knobs):
        tvm_target = target.tvm_target()
        with tvm_target:
            return dlight.gpu.Fallback().apply(func, tvm_target, False)


RULES = [GpuRowPass(), GpuGroupedRowPass(), GpuRowReduce(), GpuChannelPass(), GpuSegmentedRowPass(), GpuFallback()]
