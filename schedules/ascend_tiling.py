"""The Ascend tiling arithmetic: UB buffers and their exact budget, core split, modes.

Pure functions of a hardware description (opgen.targets.ascend.hardware), the operands a
schedule rule found (names, dtypes, roles: never op names) and the runtime sizes. The
rules in schedules/ascend.py decide the structure; these functions give the numbers, the
same numbers the emitted host tiling function computes at run time (CANN's split: the
kernel is shape-generic, the host tiling fills a struct per call).

The budget is exact: every UB buffer x its count (2 = double buffering) x its elements x
its dtype's bytes, each rounded up to whole 32-byte blocks (TPipe::InitBuffer rounds the
same way). A shape or a knob that cannot fit raises UbBudgetError naming every buffer.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

FLOAT32 = "float32"
# Row reductions of rows no longer than this many float32 repeats (10 x 256 B = 640
# floats: CANN RmsNormGrad's SMALLD_THRESHOLD, expressed in repeats) pack many rows per
# pass: each row's partial sums fold into one repeat, then one WholeReduceSum call reduces
# every row of the pass (one repeat per row, so at most max_repeats rows per pass).
SMALL_D_REPEATS = 10
# Float32 tiles for sub-expressions of the elementwise and reduction stages: the channel
# pattern's fixed budget (two live temporaries cover every op's expressions); the row and
# group patterns budget what schedules/ascend_scratch.py counts for the op (RowOperands and
# GroupOperands.scratch_tiles), which is what the emitter's pool takes.
TEMP_TILES = 2


class UbBudgetError(ValueError):
    """A tiling whose buffers do not fit the UB (or exceed the TPipe's buffer count)."""


class CopyAlignmentError(ValueError):
    """A shape whose rows are not whole 32-byte blocks, on a product without DataCopyPad."""


def check_whole_blocks(hw, dtypes, what: dict) -> None:
    """Without DataCopyPad, DataCopy moves whole 32-byte blocks: every row the kernel copies
    (``what``: name -> elements) must be a whole number of blocks in every dtype it has."""
    if hw.data_copy_pad:
        return
    step = max(hw.elements_per_block(itemsize(d)) for d in dtypes)
    bad = {k: v for k, v in what.items() if v % step}
    if bad:
        listing = ", ".join(f"{k}={v}" for k, v in bad.items())
        raise CopyAlignmentError(f"{hw.product} has no DataCopyPad: copied rows must be whole 32-byte blocks "
                                 f"(multiples of {step} elements here), got {listing}")


def itemsize(dtype: str) -> int:
    return 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class UbBuffer:
    """One TQue/TBuf: ``count`` buffers of ``elements`` x ``dtype`` each."""

    name: str
    position: str          # VECIN, VECOUT or VECCALC (TQue positions / TBuf)
    count: int
    elements: int
    dtype: str
    expr: str = ""         # elements as a C++ expression of the tiling (ub_rows, pitch): the host
                           # tiling function and the kernel's InitBuffer compute the same number

    def bytes_each(self, block: int = 32) -> int:
        return ceil_div(self.elements * itemsize(self.dtype), block) * block

    def total(self, block: int = 32) -> int:
        return self.count * self.bytes_each(block)

    def describe(self, block: int = 32) -> str:
        return f"{self.name} {self.count} x {self.elements} {self.dtype} = {self.total(block)} B"


@dataclass(frozen=True)
class Tiling:
    """One call's tiling: what the host tiling function computes, and what it costs."""

    pattern: str               # "rows", "groups" or "channels": which rule made it
    mode: str                  # split-N, small-D, split-D / group, hw1, channels, channel, hw-chunk /
                               # channel, rows, hw-chunk / empty
    block_dim: int             # vector cores used
    block_factor: int          # rows (or (n, g) tasks, or channels) per core; the last core may get fewer
    ub_rows: int               # rows (or channels, or batch rows) per UB pass
    ub_cols: int               # columns (or HxW elements) per UB pass
    pitch: int                 # UB elements per tile row (ub_cols rounded up to whole blocks)
    buffers: tuple = ()        # UbBuffer list (the exact UB budget)
    sums: str = "none"         # cross-core column sums: deterministic, atomic, none
    workspace_bytes: int = 0   # GM workspace for per-core partial sums
    gm_bytes: int = 0          # bytes moved between GM and UB in total
    fields: dict = field(default_factory=dict, compare=False)  # the tiling struct's other fields

    def ub_bytes(self, block: int = 32) -> int:
        return sum(b.total(block) for b in self.buffers)

    @property
    def tail_rows(self) -> int:
        """Rows (tasks) of the last core."""
        total = self.fields.get("tasks", 0)
        return total - (self.block_dim - 1) * self.block_factor if self.block_dim else 0


def split_cores(tasks: int, cores: int) -> tuple[int, int]:
    """(block_factor, block_dim): CANN's split, ceil(tasks / cores) per core."""
    if tasks <= 0:
        return 0, 0
    factor = ceil_div(tasks, cores)
    return factor, ceil_div(tasks, factor)


def check_budget(hw, buffers, what: str) -> None:
    """Refuse ``buffers`` when they exceed the usable UB or the TPipe's buffer count."""
    used = sum(b.total(hw.block_bytes) for b in buffers)
    count = sum(b.count for b in buffers)
    if used <= hw.usable_ub_bytes and count <= hw.max_buffers:
        return
    listing = "; ".join(b.describe(hw.block_bytes) for b in buffers)
    raise UbBudgetError(
        f"{what} needs {used} B of UB in {count} buffers; {hw.product} offers {hw.usable_ub_bytes} B "
        f"and {hw.max_buffers} buffers. Buffers: {listing}")


def fits(hw, buffers) -> bool:
    return (sum(b.total(hw.block_bytes) for b in buffers) <= hw.usable_ub_bytes
            and sum(b.count for b in buffers) <= hw.max_buffers)


def pitch_of(hw, cols: int, dtypes) -> int:
    """Elements per UB tile row: ``cols`` rounded up to a whole block of the narrowest dtype,
    so every dtype's copy of a tile (fp16 input, its fp32 cast) has the same row pitch and one
    count-based vector call covers the whole tile."""
    step = max(hw.elements_per_block(itemsize(d)) for d in dtypes)
    return ceil_div(cols, step) * step


def largest_fitting(hw, lo: int, hi: int, buffers_for) -> int:
    """The largest n in [lo, hi] whose ``buffers_for(n)`` fit (0 if not even ``lo``);
    the budget grows with n, so bisection is exact."""
    if hi < lo or not fits(hw, buffers_for(lo)):
        return 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(hw, buffers_for(mid)):
            lo = mid
        else:
            hi = mid - 1
    return lo


# ---- the row pattern: (rows, cols) tiles, per-row values, per-column inputs and sums ----

@dataclass(frozen=True)
class RowOperands:
    """What a row-pattern kernel moves, by role; each entry is (buffer name, dtype)."""

    tiles_in: tuple = ()       # (rows, cols) inputs
    tiles_out: tuple = ()      # (rows, cols) outputs
    rows_in: tuple = ()        # (rows,) inputs
    cols_in: tuple = ()        # (cols,) inputs
    scalars_in: tuple = ()     # (1,) inputs: one value per call (an attribute passed as data)
    col_sums: tuple = ()       # (cols,) sums over the rows: outputs, or float32 accumulators
    col_outs: tuple = ()       # (cols,) outputs rounded from an accumulator (its casts)
    accumulators: tuple = ()   # names of the col_sums that are accumulators (no output of their own)
    row_stages: tuple = ()     # names of per-row intermediate values (float32)
    row_reductions: tuple = () # the row stages that reduce over the columns
    row_passes: int = 1        # split-D passes over a row's chunks for its reductions (pass_steps)
    rows_out: tuple = ()       # (rows,) outputs: row stages stored per pass (a forward norm's rstd)
    row_out_stages: tuple = () # the row stage that computes each of rows_out, in the same order
    scratch_tiles: int = TEMP_TILES  # float32 scratch tiles the expressions need (ascend_scratch)

    @property
    def dtypes(self) -> set:
        return {d for _, d in self.tiles_in + self.tiles_out} | {FLOAT32}


def reduce_work_elements(hw, ub_rows: int, pitch: int) -> int:
    """float32 scratch of the row reductions: one WholeReduceSum result per row of the pass
    (small rows), or one row's per-repeat partials (ReduceSum: one per repeat; ReduceMax/Min:
    a value and an index per repeat) plus one block for its result."""
    per_block = hw.elements_per_block(4)
    whole = ceil_div(ub_rows, per_block) * per_block
    per_row = per_block + ceil_div(2 * ceil_div(pitch, hw.elements_per_repeat(4)), per_block) * per_block
    return max(whole, per_row)


def row_buffers(hw, ops: RowOperands, ub_rows: int, pitch: int, nbuf: int) -> list[UbBuffer]:
    """Every UB buffer of one pass over ``ub_rows`` rows of ``pitch`` elements."""
    tile, t_expr = ub_rows * pitch, "ub_rows * pitch"
    bufs = [UbBuffer(f"in_{n}", "VECIN", nbuf, tile, d, t_expr) for n, d in ops.tiles_in]
    if hw.data_copy_pad:   # else per-row values are scalar GM reads (a ragged copy needs the pad)
        bufs += [UbBuffer(f"in_{n}", "VECIN", nbuf, ub_rows, d, "ub_rows") for n, d in ops.rows_in]
    bufs += [UbBuffer(f"in_{n}", "VECIN", 1, pitch, d, "pitch") for n, d in ops.cols_in]
    if hw.data_copy_pad:   # else per-call values are scalar GM reads
        bufs += [UbBuffer(f"in_{n}", "VECIN", 1, 1, d, "1") for n, d in ops.scalars_in]
    bufs += [UbBuffer(f"out_{n}", "VECOUT", nbuf, tile, d, t_expr) for n, d in ops.tiles_out]
    if hw.data_copy_pad:   # a narrower per-row output is Cast into its queue (else scalar GM writes)
        bufs += [UbBuffer(f"out_{n}", "VECOUT", 1, ub_rows, d, "ub_rows") for n, d in ops.rows_out if d != FLOAT32]
    bufs += [UbBuffer(f"acc_{n}", "VECCALC", 1, pitch, FLOAT32, "pitch") for n, _ in ops.col_sums]
    bufs += [UbBuffer(f"out_{n}", "VECOUT", 1, pitch, d, "pitch") for n, d in ops.col_sums + ops.col_outs
             if d != FLOAT32]
    bufs += [UbBuffer(f"f32_{n}", "VECCALC", 1, tile, FLOAT32, t_expr) for n, d in ops.tiles_in if d != FLOAT32]
    bufs += [UbBuffer(f"f32_{n}", "VECCALC", 1, pitch, FLOAT32, "pitch") for n, d in ops.cols_in if d != FLOAT32]
    bufs += [UbBuffer(f"tmp{i}", "VECCALC", 1, tile, FLOAT32, t_expr) for i in range(ops.scratch_tiles)]
    bufs += [UbBuffer(f"row_{s}", "VECCALC", 1, ub_rows, FLOAT32, "ub_rows") for s in ops.row_stages]
    bufs.append(UbBuffer("reduce_work", "VECCALC", 1, reduce_work_elements(hw, ub_rows, pitch), FLOAT32,
                         "work"))
    return bufs


def _rows_split_n(hw, ops, rows, cols, block_factor, knobs, buffers=row_buffers) -> tuple[str, int, int]:
    """(mode, rows per pass, pitch) when a whole row fits, else None; ``buffers`` lists a
    pass's UB buffers (row_buffers, or a pattern's that adds its own to them)."""
    pitch = pitch_of(hw, cols, ops.dtypes)
    nbuf = knobs["buffer_num"]
    if knobs["cols_per_pass"] and knobs["cols_per_pass"] < cols:
        return None                              # the tuner asked for split-D
    wanted = knobs["rows_per_pass"]
    if not wanted and not fits(hw, buffers(hw, ops, 1, pitch, nbuf)):
        return None
    small = pitch <= SMALL_D_REPEATS * hw.elements_per_repeat(4)
    limit = min(block_factor, hw.max_repeats if small else hw.max_bursts)
    if wanted:                                   # whole rows asked for: refuse, never fall back
        ub_rows = min(wanted, block_factor, hw.max_bursts)
        check_budget(hw, buffers(hw, ops, ub_rows, pitch, nbuf),
                     f"rows_per_pass={wanted} at {rows} x {cols}")
        if small and ub_rows > hw.max_repeats:
            raise UbBudgetError(f"rows_per_pass={wanted} exceeds {hw.max_repeats} repeats of one WholeReduceSum")
    else:
        ub_rows = largest_fitting(hw, 1, limit, lambda r: buffers(hw, ops, r, pitch, nbuf))
    return ("small-D" if small else "split-N"), ub_rows, pitch


def _rows_split_d(hw, ops, rows, cols, knobs, buffers=row_buffers) -> tuple[int, int]:
    """(columns per pass, pitch) of split-D: one row per pass, whole float32 repeats;
    ``buffers`` as in _rows_split_n."""
    nbuf = knobs["buffer_num"]
    step = hw.elements_per_repeat(4)
    wanted = knobs["cols_per_pass"]
    if wanted:
        pitch = pitch_of(hw, min(wanted, cols), ops.dtypes)
        check_budget(hw, buffers(hw, ops, 1, pitch, nbuf), f"cols_per_pass={wanted} at {rows} x {cols}")
        return min(wanted, cols), pitch
    repeats = largest_fitting(hw, 1, ceil_div(cols, step), lambda k: buffers(hw, ops, 1, k * step, nbuf))
    if not repeats:
        check_budget(hw, buffers(hw, ops, 1, step, nbuf), f"split-D at {rows} x {cols}")
    return min(repeats * step, cols), repeats * step


def _rows_empty(hw, ops, rows, cols, knobs, sums) -> Tiling:
    """No rows or no columns: nothing to launch, except column sums of no rows, which are
    zeros: one core runs the split-D structure over no rows (its zero partials are summed)."""
    fields = {"rows": rows, "cols": cols, "tasks": rows, "ub_loops": 0, "ub_tail": 0}
    if ops.rows_out and rows:
        # Rows of no columns still have their per-row outputs (the mean of nothing is NaN):
        # the rows over the cores as usual, the split-D structure with no column chunk.
        block_factor, block_dim = split_cores(rows, hw.vector_cores)
        pitch = pitch_of(hw, 1, ops.dtypes)
        buffers = tuple(row_buffers(hw, ops, 1, pitch, knobs["buffer_num"]))
        check_budget(hw, buffers, f"empty rows at {rows} x {cols}")
        return Tiling("rows", "empty", block_dim, block_factor, 1, 0, pitch, buffers, sums, 0,
                      sum(rows * itemsize(d) for _, d in ops.rows_out + ops.rows_in), fields)
    if not (ops.col_sums and cols):
        return Tiling("rows", "empty", 0, 0, 0, 0, 0, (), sums, 0, 0, fields)
    check_whole_blocks(hw, ops.dtypes, {"cols": cols})
    ub_cols, pitch = _rows_split_d(hw, ops, rows, cols, knobs)
    buffers = tuple(row_buffers(hw, ops, 1, pitch, knobs["buffer_num"]))
    size = {n: itemsize(d) for n, d in ops.col_sums + ops.col_outs}
    return Tiling("rows", "empty", 1, 0, 1, ub_cols, pitch, buffers, sums, _workspace_bytes(ops, cols, 1, sums),
                  _column_sum_traffic(ops, rows, cols, 1, sums, False, size), fields)


def _column_sum_traffic(ops, rows, cols, block_dim, sums, split_n, size) -> int:
    """GM bytes of the column sums as the emitted kernel moves them. split-N: one UB
    accumulator per core, flushed once; split-D: every row's chunk goes to GM (a
    read-modify-write of the core's workspace row, or an atomic add). Atomic adds go
    straight into a float32 output, or, for an accumulator its casts round, into a
    workspace row that a final pass reads back and rounds."""
    per_sum = 0
    flushed = block_dim * cols * 4 if split_n else rows * cols * 4
    if sums == "deterministic":
        # split-D: a core's first row writes its workspace row, later rows read it back
        # first; a core of no rows (only when there are none) writes zeros.
        zero = block_dim * cols * 4 if not (split_n or rows) else 0
        reread = 0 if split_n else max(rows - block_dim, 0) * cols * 4
        per_sum = zero + flushed + reread + block_dim * cols * 4      # + the final read
    else:
        per_sum = cols * 4 + flushed                                                 # zeroing + atomic adds
    written = [n for n, _ in ops.col_sums if n not in ops.accumulators] + [n for n, _ in ops.col_outs]
    final = sum(cols * size[n] for n in written) if sums == "deterministic" else 0
    if sums == "atomic":
        final = len(ops.accumulators) * cols * 4 + sum(cols * size[n] for n, _ in ops.col_outs)
    return per_sum * len(ops.col_sums) + final


def _workspace_bytes(ops, cols, block_dim, sums) -> int:
    """The float32 workspace of the column sums: a row per core and sum (deterministic),
    or a row per accumulator that atomic adds fill before its casts round it."""
    if sums == "deterministic":
        return block_dim * cols * 4 * len(ops.col_sums)
    return cols * 4 * len(ops.accumulators) if sums == "atomic" else 0


def plan_rows(hw, ops: RowOperands, rows: int, cols: int, knobs: dict) -> Tiling:
    """The row pattern's tiling: rows over cores (CANN's split), then split-N / small-D when
    a whole row fits the UB (as many rows per pass as fit), else split-D (column chunks,
    two passes per row: its reductions first, then the elementwise outputs)."""
    block_factor, block_dim = split_cores(rows, hw.vector_cores)
    sums = knobs["sums"] if ops.col_sums else "none"
    if rows == 0 or cols == 0:
        return _rows_empty(hw, ops, rows, cols, knobs, sums)
    check_whole_blocks(hw, ops.dtypes, {"cols": cols})
    split_n = _rows_split_n(hw, ops, rows, cols, block_factor, knobs)
    if split_n:
        mode, ub_rows, pitch = split_n
        ub_cols, loops, reread = cols, ceil_div(block_factor, ub_rows), 1
    else:
        mode, ub_rows = "split-D", 1
        ub_cols, pitch = _rows_split_d(hw, ops, rows, cols, knobs)
        loops, reread = ceil_div(cols, ub_cols), 1 + ops.row_passes
    buffers = tuple(row_buffers(hw, ops, ub_rows, pitch, knobs["buffer_num"]))
    check_budget(hw, buffers, f"{mode} at {rows} x {cols}")
    size = {n: itemsize(d) for n, d in ops.tiles_in + ops.tiles_out + ops.rows_in + ops.cols_in + ops.col_sums
            + ops.col_outs + ops.scalars_in}
    gm = sum(reread * rows * cols * size[n] for n, _ in ops.tiles_in)
    gm += sum(block_dim * size[n] for n, _ in ops.scalars_in)      # read once per core
    gm += sum(rows * cols * size[n] for n, _ in ops.tiles_out) + sum(rows * size[n] for n, _ in ops.rows_in)
    gm += sum(rows * itemsize(d) for _, d in ops.rows_out)
    gm += sum((block_dim if split_n else reread * rows) * cols * size[n] for n, _ in ops.cols_in)
    gm += _column_sum_traffic(ops, rows, cols, block_dim, sums, bool(split_n), size)
    workspace = _workspace_bytes(ops, cols, block_dim, sums)
    fields = {"rows": rows, "cols": cols, "tasks": rows, "ub_loops": loops,
              "ub_tail": (block_factor - (loops - 1) * ub_rows) if split_n else cols - (loops - 1) * ub_cols}
    return Tiling("rows", mode, block_dim, block_factor, ub_rows, ub_cols, pitch, buffers, sums, workspace, gm, fields)
