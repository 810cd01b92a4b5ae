"""The Ascend tiling of the segmented row pattern (schedules.ascend.SegmentTiles): a row
pass over (B, S, H) whose column sums restart at every segment of S rows. The core split
is over tasks, a task being one segment's range of rows, so that a task's column sums are
one segment's partial; within a task the rows stream as the row pattern's do (split-N /
small-D whole rows, else split-D column chunks), with the same UB budget plus what the
final per-segment pass holds. The budget rules and shared arithmetic are
schedules/ascend_tiling.py's.
"""
from __future__ import annotations

from dataclasses import dataclass

from opgen.schedules.ascend_tiling import (FLOAT32, RowOperands, Tiling, UbBuffer, ceil_div, check_budget,
                                           check_whole_blocks, itemsize, row_buffers, _rows_split_d,
                                           _rows_split_n)


@dataclass(frozen=True)
class SegmentOperands(RowOperands):
    """The row pattern's operands (``col_sums``: the segment sums, summed per task into the
    workspace; ``cols_in``: the (H,) inputs and the (B, H) ones, the latter read at their
    segment's row) plus what the final per-segment pass moves; entries (name, dtype)."""

    segs_in: tuple = ()        # (B, H) inputs: one row per segment
    seg_outs: tuple = ()       # (B, H) outputs: segment sums or segment stages that are outputs
    seg_stages: tuple = ()     # names of the per-segment stages, in program order
    seg_scratch: tuple = ()    # the segment stages that are no output: a UB row each
    batch_sums: tuple = ()     # (H,) sums over the segments: outputs or float32 accumulators
    batch_accumulators: tuple = ()   # the batch sums that casts round (no output of their own)


def segment_buffers(hw, ops: SegmentOperands, ub_rows: int, pitch: int, nbuf: int) -> list[UbBuffer]:
    """The row pass's buffers (row_buffers) plus the final pass's: a float32 row of ``pitch``
    per scratch segment stage and per batch sum, and an output queue row per narrower
    segment output (batch outputs narrower than float32 are the row pattern's col_outs)."""
    bufs = row_buffers(hw, ops, ub_rows, pitch, nbuf)
    bufs += [UbBuffer(f"seg_{n}", "VECCALC", 1, pitch, FLOAT32, "pitch") for n in ops.seg_scratch]
    bufs += [UbBuffer(f"bacc_{n}", "VECCALC", 1, pitch, FLOAT32, "pitch") for n, _ in ops.batch_sums]
    bufs += [UbBuffer(f"out_{n}", "VECOUT", 1, pitch, d, "pitch") for n, d in ops.seg_outs + ops.batch_sums
             if d != FLOAT32 and n not in ops.batch_accumulators]
    return bufs


def split_segments(segments: int, seg_rows: int, cores: int) -> tuple[int, int, int, int, int]:
    """(seg_chunks, task_rows, tasks, block_factor, block_dim): each segment's rows in
    seg_chunks tasks of task_rows rows (the last maybe fewer, none empty), enough tasks to
    give every core one where the segments are fewer than the cores; then CANN's split of
    the tasks, ceil(tasks / cores) per core. No rows: no tasks, one core for the final pass."""
    if segments <= 0 or seg_rows <= 0:
        return 0, 0, 0, 0, 1
    chunks = min(seg_rows, max(1, cores // segments))
    task_rows = ceil_div(seg_rows, chunks)
    chunks = ceil_div(seg_rows, task_rows)
    tasks = segments * chunks
    factor = ceil_div(tasks, cores)
    return chunks, task_rows, tasks, factor, ceil_div(tasks, factor)


def plan_segments(hw, ops: SegmentOperands, segments: int, seg_rows: int, cols: int, knobs: dict) -> Tiling:
    """The segmented row pattern's tiling: tasks over cores (split_segments), then the row
    pattern's split-N / small-D (as many of a task's rows per pass as fit) or split-D per
    task; the final pass splits the columns over the same cores. No columns: nothing to
    launch; no rows: one core writes the sums of nothing (mode empty)."""
    buffers_of = lambda r, p: segment_buffers(hw, ops, r, p, knobs["buffer_num"])  # noqa: E731
    chunks, task_rows, tasks, factor, block_dim = split_segments(segments, seg_rows, hw.vector_cores)
    rows = segments * seg_rows
    fields = {"segments": segments, "seg_rows": seg_rows, "seg_chunks": chunks, "task_rows": task_rows,
              "tasks": tasks, "rows": rows, "cols": cols}
    if cols == 0:               # every output has a column axis: no tasks, nothing launched
        fields.update(seg_chunks=0, task_rows=0, tasks=0)
        return Tiling("segments", "empty", 0, 0, 0, 0, 0, (), "deterministic", 0, 0, fields)
    check_whole_blocks(hw, ops.dtypes, {"cols": cols})
    split_n = _rows_split_n(hw, ops, rows, cols, task_rows, knobs, segment_buffers) if tasks else None
    if split_n:
        mode, ub_rows, pitch = split_n
        ub_cols = cols
    else:
        mode, ub_rows = ("split-D" if tasks else "empty"), 1
        ub_cols, pitch = _rows_split_d(hw, ops, rows, cols, knobs, segment_buffers)
    buffers = tuple(buffers_of(ub_rows, pitch))
    check_budget(hw, buffers, f"{mode} at {segments} x {seg_rows} x {cols}")
    workspace = tasks * cols * 4 * len(ops.col_sums)
    return Tiling("segments", mode, block_dim, factor, ub_rows, ub_cols, pitch, buffers, "deterministic",
                  workspace, _traffic(ops, segments, rows, cols, tasks, mode), fields)


def _traffic(ops, segments: int, rows: int, cols: int, tasks: int, mode: str) -> int:
    """GM bytes as the emitted kernel moves them: the tiles once (split-N) or once per pass
    (split-D), per-row values once, the (H,) and (B, H) inputs once per task and again in
    the final pass, the partials written once per task (split-N) or read back per row
    (split-D) and read once by the final pass, and the outputs once."""
    size = {n: itemsize(d) for n, d in ops.tiles_in + ops.tiles_out + ops.rows_in + ops.cols_in + ops.segs_in
            + ops.seg_outs + ops.batch_sums + ops.col_outs + ops.scalars_in}
    reread = 1 if mode != "split-D" else 1 + ops.row_passes
    gm = sum(reread * rows * cols * size[n] for n, _ in ops.tiles_in)
    gm += sum(rows * cols * size[n] for n, _ in ops.tiles_out) + sum(rows * size[n] for n, _ in ops.rows_in)
    gm += sum((tasks if mode != "split-D" else reread * rows) * cols * size[n] for n, _ in ops.cols_in)
    flushed = tasks * cols * 4 if mode != "split-D" else (2 * rows - tasks) * cols * 4
    gm += len(ops.col_sums) * (flushed + tasks * cols * 4)
    gm += sum(cols * size[n] for n, _ in ops.cols_in if (n, _) not in ops.segs_in)
    gm += sum(segments * cols * size[n] for n, _ in ops.segs_in + ops.seg_outs)
    written = [n for n, _ in ops.batch_sums if n not in ops.batch_accumulators] + [n for n, _ in ops.col_outs]
    return gm + sum(cols * size[n] for n in written)
