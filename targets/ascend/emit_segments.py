"""The AscendC kernel and host tiling of the segmented row pattern (schedules.ascend.SegmentTiles).

A segmented row pass is the row pattern's pass over (B, S, H) rows whose column sums
restart at every segment of S rows, then per-segment stages over (B, H) and sums of them
over the segments. The kernel reuses the row pattern's per-stage printers
(targets/ascend/emitter.py) and pass drivers (emit_flow.py); what is its own:

  tasks:    a core runs its tasks in order, a task being one segment's range of rows
            (schedules/ascend_tiling_segments.split_segments); each task streams its rows
            (split-N / small-D / split-D, as the row pattern) and writes its column sums,
            the segment's partial, to a workspace row of its own (no atomics);
  final:    after SyncAll, core c owns a slice of the columns; per column chunk and per
            segment in order, it adds the segment's partials in task order, computes the
            per-segment stages (outputs to GM, the others kept in a UB row), and adds the
            batch sums' terms into float32 rows, written (or rounded by their casts) once
            every segment is in: the same bits every run and on any core count.

Loads in the row pass carry the segment iterator too (dy[b, s, h], mean[b, s], scale[b, h]):
``SegmentKernel.lead_loads`` gives them their UB homes; a (B, H) input is read at its
segment's row (``col_at``). Every core calls SyncAll once, whatever its share of tasks.
"""
from __future__ import annotations

from dataclasses import dataclass

from opgen.lazy import s_tir
from opgen.schedules.ascend import SegmentTiles
from opgen.schedules.ascend_tiling import itemsize
from opgen.schedules.ascend_tiling_segments import segment_buffers
from opgen.targets.ascend.emit_flow import ONE, _issue_after, _stage_calls, _tail_calls, _visit
from opgen.targets.ascend.emitter import (CPP_TYPE, MODES, ROW_SCALARS, RowKernel, _column_sum_fns, _load_fns,
                                          _members, _outputs_fn, _row_stage_fn, as_float32, copy_in, copy_out,
                                          kernel_file, recorded_stages)
from opgen.targets.ascend.exprs import Context, EmitError, Value, emit_expr, reduction_body, stored_value, sync
from opgen.targets.ascend.host import tiling_file

# The row pass's scalars with the task and its segment.
SEGMENT_SCALARS = ("core_", "task_", "seg_") + ROW_SCALARS[1:]

FIELDS = ("segments", "seg_rows", "seg_chunks", "task_rows", "tasks", "rows", "cols", "block_dim", "block_factor",
          "ub_rows", "ub_cols", "pitch", "mode", "ws_pitch", "work")


@dataclass
class SegmentKernel(RowKernel):
    """The row kernel's description plus the final pass's; ``args`` roles add "seg": a
    (B, H) tensor, one row per segment."""

    outputs: frozenset = frozenset()   # buffers the final pass writes to GM (segment and batch outputs)

    pattern = "segments"
    lead = 1                   # every row-pass block's first iterator is the segment

    @property
    def fields(self) -> tuple:
        return FIELDS

    def workspace_floats(self, t) -> int:
        """A row of partials per task and column sum."""
        return t.ws_pitch * t.tasks * len(self.ops.col_sums)

    def ws_row(self, name: str, core: str = "task_") -> str:
        return f"({[n for n, _ in self.ops.col_sums].index(name)} * t_.tasks + {core})"

    def col_at(self, name: str) -> str:
        return "seg_ * t_.cols + c0" if name in dict(self.ops.segs_in) else "c0"

    def lead_loads(self, ivs: list, row: int, col: int | None, rows: dict) -> dict:
        """Homes of the row pass's loads: tiles x[b, s, h], per-row values m[b, s] (inputs and
        row stages) and the segment's column vectors w[b, h]."""
        seg, r = ivs[0], ivs[row]
        loads = {(n, (seg, r)): Value("row", text) for n, text in rows.items()}
        if col is not None:
            c = ivs[col]
            loads.update({(n, (seg, r, c)): Value("tile", f"v_{n}_") for n, _ in self.ops.tiles_in})
            loads.update({(n, (seg, c)): Value("col", f"v_{n}_") for n, _ in self.ops.segs_in})
        return loads


def read_segment_kernel(func, symbol: str, knobs: dict) -> SegmentKernel:
    """The segmented pattern's pieces from the scheduled function."""
    sch = s_tir.Schedule(func)
    stages = recorded_stages(sch)
    ops = SegmentTiles().operands(func)
    tile_out = next(b for n, r, b in stages if r == "tile")
    seg, rows, cols = (iv.dom.extent for iv in tile_out.iter_vars)
    sizes = {str(seg): "t_.segments", str(rows): "t_.seg_rows", str(cols): "t_.cols"}
    outputs = {n for n, _ in ops.seg_outs} | {n for n, _ in ops.batch_sums if n not in ops.batch_accumulators}
    scratch = (set(ops.row_stages) | {n for n, _ in ops.col_sums + ops.batch_sums} | set(ops.seg_scratch)) - outputs
    role = {n: "tile" for n, _ in ops.tiles_in + ops.tiles_out}
    role.update({n: "row" for n, _ in ops.rows_in})
    role.update({n: "col" for n, _ in ops.cols_in + ops.col_outs + ops.batch_sums if n not in scratch})
    role.update({n: "seg" for n, _ in ops.segs_in + ops.seg_outs})
    role.update({n: "scalar" for n, _ in ops.scalars_in})
    homeless = [f"{b.name}{tuple(b.shape)}" for b in func.params if b.name not in role and b.name not in scratch]
    if homeless:
        raise EmitError(f"{symbol}: no UB home for the segmented pattern's parameter(s) {', '.join(homeless)}")
    args = [(b.name, str(b.dtype), role[b.name]) for b in func.params if b.name not in scratch]
    return SegmentKernel(symbol, ops, stages, args, sizes, knobs, tuple(b.name for b in func.params),
                         outputs=frozenset(outputs))


# ---- the class: members, Init, the task loop ------------------------------------------

GM_SIZE = {"tile": "t_.rows * t_.cols", "row": "t_.rows", "col": "t_.cols", "seg": "t_.segments * t_.cols",
           "scalar": "1"}


def _init(k: SegmentKernel, buffers) -> list[str]:
    params = ", ".join(f"GM_ADDR {n}" for n, _, _ in k.args)
    lines = [f"__aicore__ inline void Init({params}, GM_ADDR workspace, const {k.struct}& t) {{",
             "    t_ = t;", "    core_ = GetBlockIdx();"]
    for n, d, role in k.args:          # an empty tensor has no buffer: bind only what exists
        size = GM_SIZE[role]
        lines.append(f"    if ({size} > 0) g_{n}_.SetGlobalBuffer((__gm__ {CPP_TYPE[d]}*){n}, {size});")
    if k.ops.col_sums:
        size = f"t_.ws_pitch * t_.tasks * {len(k.ops.col_sums)}"
        lines.append(f"    if ({size} > 0) g_ws_.SetGlobalBuffer((__gm__ float*)workspace, {size});")
    for b in buffers:
        size = b.expr.replace("ub_rows", "t_.ub_rows").replace("pitch", "t_.pitch").replace("work", "t_.work")
        count = "BUFFER_NUM, " if b.count > 1 else ("1, " if b.position != "VECCALC" else "")
        lines.append(f"    pipe_.InitBuffer({b.name}_, {count}({size}) * sizeof({CPP_TYPE[b.dtype]}));")
        if b.position == "VECCALC":
            lines.append(f"    {b.name}_t_ = {b.name}_.Get<float>();")
    lines += [f"    r_{s}_ = row_{s}_t_;" for s in k.ops.row_stages]
    return lines + ["}"]


def _process(k: SegmentKernel) -> list[str]:
    """Process: the core's tasks in order, SyncAll, the final pass. A task's rows are
    row0_ .. row0_ + nrows_ of segment seg_ (never empty: split_segments)."""
    return ["__aicore__ inline void Process() {", "    LoadScalars();",
            "    const int64_t last = (core_ + 1) * t_.block_factor < t_.tasks ? (core_ + 1) * t_.block_factor "
            ": t_.tasks;",
            "    for (task_ = core_ * t_.block_factor; task_ < last; ++task_) {",
            "        seg_ = task_ / t_.seg_chunks;",
            "        const int64_t first = (task_ % t_.seg_chunks) * t_.task_rows;",
            "        row0_ = seg_ * t_.seg_rows + first;",
            "        nrows_ = t_.seg_rows - first < t_.task_rows ? t_.seg_rows - first : t_.task_rows;",
            f"        if (t_.mode == {MODES['split-D']}) SplitD(); else SplitN();",
            "    }",
            "    SyncAll();   // every task's partials are in the workspace",
            "    FinalSegments();", "}"]


def _task_passes(k: SegmentKernel) -> list[str]:
    """SplitN / SplitD of one task: emit_flow's row passes over the task's rows, its column
    sums begun and ended per task (BeginTask, EndTask) instead of per core."""
    split_n = ["__aicore__ inline void SplitN() {", "    BeginTask();", "    LoadCols(0, t_.cols);",
               "    IssueTiles(row0_, 0, nrows_ < t_.ub_rows ? nrows_ : t_.ub_rows, t_.cols);",
               "    for (int64_t p = 0; p < nrows_; p += t_.ub_rows) {",
               "        const int32_t n = nrows_ - p < t_.ub_rows ? nrows_ - p : t_.ub_rows;",
               "        const int64_t r0 = row0_ + p, c0 = 0, pn = p + t_.ub_rows;",
               "        const int32_t len = t_.cols, nn = nrows_ - pn < t_.ub_rows ? nrows_ - pn : t_.ub_rows;",
               "        LoadRows(r0, n); TakeTiles(n);",
               "        if (BUFFER_NUM > 1 && pn < nrows_) IssueTiles(row0_ + pn, 0, nn, len);"]
    split_n += [f"        {c}" for c in _stage_calls(k, False) + _tail_calls(k, "false", "false")]
    split_n += ["        FreeTiles(); FreeRows();",
                "        if (BUFFER_NUM == 1 && pn < nrows_) IssueTiles(row0_ + pn, 0, nn, len);", "    }",
                "    FreeCols();", "    EndTask(false);", "}"]
    split_d = ["__aicore__ inline void SplitD() {", "    BeginTask();",
               "    IssueTiles(row0_, 0, 1, t_.cols < t_.ub_cols ? t_.cols : t_.ub_cols);",
               "    for (int64_t r0 = row0_; r0 < row0_ + nrows_; ++r0) {", "        const int32_t n = 1;",
               "        LoadRows(r0, n);"]
    visits = _visit(_tail_calls(k, "true", "r0 == row0_"), last_pass=True)
    split_d += [f"        {c}" for c in _stage_calls(k, True) + visits]
    split_d += ["        FreeRows();", "    }", "    EndTask(true);", "}"]
    return split_n + split_d + _issue_after()


def _task_sums(k: SegmentKernel) -> list[str]:
    """BeginTask zeroes the UB accumulators; EndTask (split-N) copies them to the task's
    workspace rows (split-D wrote each row's chunk there already). The next task's zeros
    overwrite what the copy-out reads: MTE3 before V."""
    begin = ["__aicore__ inline void BeginTask() {", "    const int32_t P = t_.pitch; (void)P;"]
    begin += [f"    Duplicate(acc_{n}_t_, 0.0f, P);" for n, _ in k.ops.col_sums]
    end = ["__aicore__ inline void EndTask(bool split_d) {", "    (void)split_d;"]
    if k.ops.col_sums:
        end += ["    if (split_d) return;", "    const int32_t len = t_.cols;",
                f"    {sync('V_MTE3')}   // the copy-out reads the accumulators the vector pipe added"]
        end += [f"    DataCopyPad(g_ws_[{k.ws_row(n)} * t_.ws_pitch], acc_{n}_t_, {ONE});" for n, _ in k.ops.col_sums]
        end.append(f"    {sync('MTE3_V')}   // the next task zeroes the accumulators")
    return begin + ["}"] + end + ["}"]


# ---- the final pass: per segment, its sums, stages and batch terms ------------------------

def _final_context(k: SegmentKernel, blk, row: int, col: int) -> Context:
    """Loads of a (B, H) stage, one segment and a column chunk at a time: the segment sums
    (in their accumulators), the scratch segment stages (their UB rows) and the (B, H)
    inputs are one-row tiles; (H,) inputs column vectors."""
    ivs = [str(iv.var) for iv in blk.iter_vars]
    segs = dict(k.ops.segs_in)
    tiles = {n: f"acc_{n}_t_" for n, _ in k.ops.col_sums}
    tiles.update({n: f"seg_{n}_t_" for n in k.ops.seg_scratch})
    tiles.update({n: f"v_{n}_" for n in segs})
    return Context(row_var=ivs[row], col_var=ivs[col], tiles=tiles, rows={},
                   cols={n: f"v_{n}_" for n, _ in k.ops.cols_in if n not in segs}, sizes=k.sizes,
                   temps=[f"tmp{i}_t_" for i in range(k.ops.scratch_tiles)],
                   loads={(n, ("0",)): Value("scalar", f"s_{n}") for n, _ in k.ops.scalars_in})


def _write_row(k: SegmentKernel, src: str, target: str, dtype: str, gm_index: str, indent: str) -> list[str]:
    """A float32 UB row of ``len`` values to GM output ``target`` (a narrower one Cast into
    its queue in the op's round mode)."""
    if dtype == "float32":
        return [f"{indent}{sync('V_MTE3')}", f"{indent}DataCopyPad(g_{target}_[{gm_index}], {src}, {ONE});",
                f"{indent}{sync('MTE3_V')}   // the next vector op may overwrite the row"]
    ty = CPP_TYPE[dtype]
    return copy_out(src, dtype, f"out_{target}_", f"g_{target}_[{gm_index}]",
                    f"DataCopyExtParams(1, len * sizeof({ty}), 0, 0, 0)", "P", k.face.round_mode(dtype), indent)


def _segment_sums(k: SegmentKernel) -> list[str]:
    """SegmentSums(b, c0, len): each column sum of segment b over the chunk, its partials
    added in task order (copy-ins staged in tmp0)."""
    out = ["__aicore__ inline void SegmentSums(int64_t b, int64_t c0, int32_t len) {",
           "    const int32_t P = t_.pitch; (void)P; (void)b; (void)c0; (void)len;"]
    for n, _ in k.ops.col_sums:
        out += [f"    Duplicate(acc_{n}_t_, 0.0f, P);",
                "    for (int64_t j = 0; j < t_.seg_chunks; ++j) {",
                f"        {sync('V_MTE2')}   // the copy-in overwrites what the last Add read",
                f"        DataCopyPad(tmp0_t_, g_ws_[{k.ws_row(n, 'b * t_.seg_chunks + j')} * t_.ws_pitch + c0], "
                f"{ONE}, "
                "DataCopyPadExtParams<float>(false, 0, 0, 0));",
                f"        {sync('MTE2_V')}", f"        Add(acc_{n}_t_, acc_{n}_t_, tmp0_t_, len);", "    }"]
    return out + ["}"]


def _segment_stages(k: SegmentKernel) -> list[str]:
    """SegmentStages(b, c0, len): the per-segment stages in program order (an output to GM
    row b, a scratch stage into its UB row), the segment sums that are outputs, then each
    batch sum's term added into its float32 row."""
    out = ["__aicore__ inline void SegmentStages(int64_t b, int64_t c0, int32_t len) {",
           "    const int32_t P = t_.pitch; const int32_t n = 1; (void)P; (void)n; (void)b; (void)c0; (void)len;"]
    dtypes = {n: d for n, d, _ in k.args}
    for name, role, blk in k.stages:
        if role == "column_sum" and blk.body.buffer.name in k.outputs:
            target = blk.body.buffer.name
            out += _write_row(k, f"acc_{target}_t_", target, dtypes[target], "b * t_.cols + c0", "    ")
        if role != "segment_stage":
            continue
        target = blk.body.buffer.name
        ctx = _final_context(k, blk, 0, 1)
        expr, dtype = stored_value(blk.body)
        value = emit_expr(expr, ctx)
        if value.kind != "tile":
            raise EmitError(f"{name}: a segment stage that is not a row of columns: {expr}")
        out += [f"    {line}" for line in ctx.lines]
        if target in k.outputs:
            out += _write_row(k, value.text, target, dtype, "b * t_.cols + c0", "    ")
        elif value.text != f"seg_{target}_t_":
            out.append(f"    Adds(seg_{target}_t_, {value.text}, 0.0f, P);")
    for name, role, blk in k.stages:
        if role != "batch_sum":
            continue
        target = blk.body.buffer.name
        ctx = _final_context(k, blk, 1, 0)            # iterators (col, segment)
        value = emit_expr(reduction_body(blk.body), ctx)
        if value.kind != "tile":
            raise EmitError(f"{name}: a sum over the segments of a non-row value")
        out += [f"    {line}" for line in ctx.lines]
        out.append(f"    Add(bacc_{target}_t_, bacc_{target}_t_, {value.text}, P);")
    return out + ["}"]


def _final_loads(k: SegmentKernel) -> list[str]:
    """LoadFinalCols / FreeFinalCols: the (H,) inputs of a column chunk; LoadSegs / FreeSegs:
    the (B, H) inputs of segment seg_'s row of it."""
    segs = dict(k.ops.segs_in)
    cols = [(n, d) for n, d in k.ops.cols_in if n not in segs]
    out = []
    for fn, group, at in (("FinalCols", cols, "c0"), ("Segs", k.ops.segs_in, "seg_ * t_.cols + c0")):
        out += [f"__aicore__ inline void Load{fn}(int64_t c0, int32_t len) {{",
                "    const int32_t P = t_.pitch; (void)P; (void)c0; (void)len;"]
        for n, d in group:
            out += copy_in(n, d, at, f"DataCopyExtParams(1, len * sizeof({CPP_TYPE[d]}), 0, 0, 0)")
            out.append(as_float32(f"v_{n}_", n, d, "P"))
        out += ["}", f"__aicore__ inline void Free{fn}() {{"]
        out += [f"    in_{n}_.FreeTensor(q_{n}_);" for n, _ in group]
        out.append("}")
    return out


def _final_segments(k: SegmentKernel, align: int) -> list[str]:
    """FinalSegments: core c's slice of the columns, chunk by chunk: every segment in order
    (SegmentSums, SegmentStages), then the batch sums to GM (an accumulator rounded into
    each of its casts' outputs). A slice is a whole number of ``align`` columns (32-byte
    blocks of the narrowest dtype the pass copies), so that on a product without DataCopyPad
    every copy of it is whole blocks."""
    out = ["__aicore__ inline void FinalSegments() {", "    const int32_t P = t_.pitch; (void)P;",
           f"    const int64_t chunk = AlignUp((t_.cols + t_.block_dim - 1) / t_.block_dim, {align});",
           "    const int64_t begin = core_ * chunk, end = begin + chunk < t_.cols ? begin + chunk : t_.cols;",
           "    for (int64_t c0 = begin; c0 < end; c0 += P) {",
           "        const int32_t len = end - c0 < P ? end - c0 : P;",
           "        LoadFinalCols(c0, len);"]
    out += [f"        Duplicate(bacc_{n}_t_, 0.0f, P);" for n, _ in k.ops.batch_sums]
    out += ["        for (seg_ = 0; seg_ < t_.segments; ++seg_) {",
            "            SegmentSums(seg_, c0, len); LoadSegs(c0, len);",
            "            SegmentStages(seg_, c0, len); FreeSegs();", "        }", "        FreeFinalCols();"]
    casts = k.casts()
    for n, d in k.ops.batch_sums:
        targets = casts.get(n, []) if n in k.ops.batch_accumulators else [(n, d)]
        for target, dtype in targets:
            out += _write_row(k, f"bacc_{n}_t_", target, dtype, "c0", "        ")
    return out + ["    }", "}"]


def segment_kernel_source(k: SegmentKernel, hw) -> str:
    """op_kernel/<kernel>.cpp of a segmented-row-pattern kernel."""
    buffers = segment_buffers(hw, k.ops, 1, 16, int(k.knobs.get("buffer_num", 2)))
    body = (_init(k, buffers) + _load_fns(k) + _process(k) + _task_passes(k) + _task_sums(k))
    for name, role, blk in k.stages:
        if role == "row_stage":
            body += _row_stage_fn(k, name, blk)
    body += _outputs_fn(k) + _column_sum_fns(k)
    copied = k.ops.cols_in + k.ops.seg_outs + k.ops.batch_sums + k.ops.col_outs
    align = max(hw.elements_per_block(itemsize(d)) for d in {d for _, d in copied} | {"float32"})
    body += _final_loads(k) + _segment_sums(k) + _segment_stages(k) + _final_segments(k, align)
    return kernel_file(k, "segmented row", body, _members(k, buffers, SEGMENT_SCALARS))


SEGMENT_TILING = r"""
extern "C" int KERNEL_tiling(int64_t segments, int64_t seg_rows, int64_t cols, int64_t cores, int64_t ub_bytes,
                             STRUCT* t) {
    *t = STRUCT{};
    t->segments = segments; t->seg_rows = seg_rows; t->rows = segments * seg_rows; t->cols = cols;
    t->ws_pitch = cols;                 // GM rows need no alignment for DataCopyPad; without it cols is whole blocks
    if (cols == 0) { t->mode = MODE_EMPTY; return 0; }    // every output has a column axis: nothing to do
    if (!HAS_PAD && cols % PitchOf(1)) return 2;          // whole 32-byte blocks without DataCopyPad
    t->block_dim = 1;                                      // no rows: one core writes the sums of nothing
    if (segments > 0 && seg_rows > 0) {                    // a segment's rows in tasks, enough for every core
        int64_t chunks = cores / segments;
        if (chunks < 1) chunks = 1;
        if (chunks > seg_rows) chunks = seg_rows;
        t->task_rows = CeilDiv(seg_rows, chunks);
        t->seg_chunks = CeilDiv(seg_rows, t->task_rows);
        t->tasks = segments * t->seg_chunks;
        t->block_factor = CeilDiv(t->tasks, cores);
        t->block_dim = CeilDiv(t->tasks, t->block_factor);
    }
    const int64_t pitch = PitchOf(cols);
    const bool whole_rows = !(COLS_PER_PASS && COLS_PER_PASS < cols);
    if (t->tasks > 0 && whole_rows && (ROWS_PER_PASS || Fits(1, pitch, ub_bytes))) {
        const bool small = pitch <= SMALL_D_ELEMS;
        const int64_t cap = small ? MAX_REPEATS : MAX_BURSTS;
        int64_t limit = t->task_rows > cap ? cap : t->task_rows;
        if (ROWS_PER_PASS) {
            t->ub_rows = ROWS_PER_PASS < t->task_rows ? ROWS_PER_PASS : t->task_rows;
            if (t->ub_rows > MAX_BURSTS) t->ub_rows = MAX_BURSTS;
            if (!Fits(t->ub_rows, pitch, ub_bytes) || (small && t->ub_rows > MAX_REPEATS)) return 1;
        } else {
            t->ub_rows = LargestFitting(1, limit, [&](int64_t r) { return Fits(r, pitch, ub_bytes); });
        }
        t->mode = small ? MODE_SMALL_D : MODE_SPLIT_N;
        t->ub_cols = cols; t->pitch = pitch;
    } else {
        t->mode = t->tasks > 0 ? MODE_SPLIT_D : MODE_EMPTY; t->ub_rows = 1;
        if (SplitD(cols, ub_bytes, &t->ub_cols, &t->pitch)) return 1;
    }
    t->work = Work(t->ub_rows, t->pitch);
    return 0;
}
"""


def segment_tiling_source(k: SegmentKernel, hw) -> str:
    """op_host/<kernel>_tiling.cpp: the same arithmetic as
    schedules/ascend_tiling_segments.plan_segments (tests compare them)."""
    return tiling_file(k, hw, SEGMENT_TILING, segment_buffers)
