"""The control flow of a row-pattern AscendC kernel: passes, modes, cross-core sums.

targets/ascend/emitter.py prints the per-stage functions; this module prints how they are
driven (split-N / small-D passes of whole rows, split-D column chunks) and how column sums
cross cores, then assembles op_kernel/<kernel>.cpp. Every core calls SyncAll the same
number of times whatever its share of rows (a core that skipped one would hang the others:
the emulation reports it).
"""
from __future__ import annotations

from opgen.schedules.ascend import pass_steps
from opgen.schedules.ascend_tiling import row_buffers
from opgen.targets.ascend.emitter import (CPP_TYPE, MODES, RowKernel, _column_sum_fns, _init, _load_fns,
                                          _members, _outputs_fn, _row_stage_fn, _store_rows_fn, kernel_file,
                                          pass_items, visit_lines)
from opgen.targets.ascend.exprs import Context, emit_expr, sync

ONE = "DataCopyExtParams(1, len * 4, 0, 0, 0)"


def _atomic_target(k: RowKernel, name: str, at: str) -> str:
    """Where atomic adds of column sum ``name`` go: its float32 output, or the workspace
    row of an accumulator (rounded into its outputs by the final pass)."""
    if name in k.ops.accumulators:
        return f"g_ws_[{k.ws_row(name)} * t_.ws_pitch + {at}]"
    return f"g_{name}_[{at}]"


def _begin_sums(k: RowKernel) -> list[str]:
    """Zero the accumulators (split-N) or, on a core of no rows, its workspace row (split-D); atomic sums
    have core 0 zero the outputs (or accumulators' workspace rows) before any core adds."""
    out = ["__aicore__ inline void BeginSums(bool split_d) {", "    const int32_t P = t_.pitch; (void)P;"]
    for i, (n, _) in enumerate(k.ops.col_sums):
        out.append(f"    Duplicate(acc_{n}_t_, 0.0f, P);")
    if not k.ops.col_sums:
        return out + ["    (void)split_d; (void)P;", "}"]
    out.append(f"    {sync('V_MTE3')}   // the zeros are copied out below")
    if k.knobs.get("sums") == "atomic":
        out.append("    if (core_ == 0) {")
        out.append("        for (int64_t c0 = 0; c0 < t_.cols; c0 += P) { int32_t len = t_.cols - c0 < P ? t_.cols - c0 : P;")
        out += [f"            DataCopyPad({_atomic_target(k, n, 'c0')}, acc_{n}_t_, {ONE});" for n, _ in k.ops.col_sums]
        out += ["        }", "    }", "    SyncAll();", "    (void)split_d;"]
    else:   # split-D: a core's first row writes its workspace row; a core of no rows writes zeros
        out.append("    if (split_d && nrows_ == 0) {")
        out.append("        for (int64_t c0 = 0; c0 < t_.cols; c0 += P) { int32_t len = t_.cols - c0 < P ? t_.cols - c0 : P;")
        out += [f"            DataCopyPad(g_ws_[{k.ws_row(n)} * t_.ws_pitch + c0], acc_{n}_t_, {ONE});"
                for n, _ in k.ops.col_sums]
        out += ["        }", f"        {sync('MTE3_V')}   // the final sums write the accumulators again", "    }"]
    out.append("}")
    return out


def _end_sums(k: RowKernel) -> list[str]:
    out = ["__aicore__ inline void EndSums(bool split_d) {", "    const int32_t P = t_.pitch; (void)P; (void)split_d;"]
    if not k.ops.col_sums:
        return out + ["}"]
    out.append(f"    {sync('V_MTE3')}   // the copy-out reads the accumulators the vector pipe added")
    if k.knobs.get("sums") == "atomic":
        out += ["    if (!split_d) {", "        const int32_t len = t_.cols;", "        SetAtomicAdd<float>();"]
        out += [f"        DataCopyPad({_atomic_target(k, n, '0')}, acc_{n}_t_, {ONE});" for n, _ in k.ops.col_sums]
        out += ["        SetAtomicNone();", "    }"]
        # Accumulators are rounded once every core has added (every core calls SyncAll).
        return out + (["    SyncAll();", "    FinalSums();"] if k.ops.accumulators else []) + ["}"]
    out += ["    if (!split_d) {", "        const int32_t len = t_.cols;"]
    out += [f"        DataCopyPad(g_ws_[{k.ws_row(n)} * t_.ws_pitch], acc_{n}_t_, {ONE});" for n, _ in k.ops.col_sums]
    out += ["    }", "    SyncAll();", "    FinalSums();", "}"]
    return out


def _final_sums(k: RowKernel) -> list[str]:
    """The final pass: core c owns a slice of the columns and, per column sum, adds the
    block_dim partials of its slice in core order (the same order on every run and machine;
    atomic: reads the one workspace row of each accumulator), then writes the sum's outputs:
    the sum itself, or each cast's output rounded from it (in the op's CANN round mode: CannFace.round_mode)."""
    atomic = k.knobs.get("sums") == "atomic"
    summed = [(n, d) for n, d in k.ops.col_sums if not atomic or n in k.ops.accumulators]
    if not summed:
        return ["__aicore__ inline void FinalSums() {}"]
    casts = k.casts()
    out = ["__aicore__ inline void FinalSums() {", "    const int32_t P = t_.pitch; (void)P;",
           "    const int64_t chunk = AlignUp((t_.cols + t_.block_dim - 1) / t_.block_dim, 8);",
           "    const int64_t begin = core_ * chunk, end = begin + chunk < t_.cols ? begin + chunk : t_.cols;",
           "    for (int64_t c0 = begin; c0 < end; c0 += P) {",
           "        const int32_t len = end - c0 < P ? end - c0 : P;"]
    for n, d in summed:       # the sum in the accumulator (flushed before SyncAll), copy-ins in tmp0
        out += [f"        Duplicate(acc_{n}_t_, 0.0f, P);",
                f"        for (int64_t c = 0; c < {'1' if atomic else 't_.block_dim'}; ++c) {{",
                f"            {sync('V_MTE2')}   // the copy-in overwrites what the last Add read",
                f"            DataCopyPad(tmp0_t_, g_ws_[{k.ws_row(n, 'c')} * t_.ws_pitch + c0], {ONE}, "
                "DataCopyPadExtParams<float>(false, 0, 0, 0));",
                f"            {sync('MTE2_V')}",
                f"            Add(acc_{n}_t_, acc_{n}_t_, tmp0_t_, len);",
                "        }"]
        outputs = casts.get(n, []) if n in k.ops.accumulators else [(n, d)]
        for target, dtype in outputs:
            if dtype == "float32":   # the copy-out reads the sum before the next column chunk reuses it
                out += [f"        {sync('V_MTE3')}", f"        DataCopyPad(g_{target}_[c0], acc_{n}_t_, {ONE});",
                        f"        {sync('MTE3_V')}"]
                continue
            ty = CPP_TYPE[dtype]
            out += [f"        {{ LocalTensor<{ty}> o = out_{target}_.AllocTensor<{ty}>();",
                    f"          Cast(o, acc_{n}_t_, RoundMode::{k.face.round_mode(dtype)}, P);",
                    f"          out_{target}_.EnQue(o); o = out_{target}_.DeQue<{ty}>();",
                    f"          DataCopyPad(g_{target}_[c0], o, DataCopyExtParams(1, len * sizeof({ty}), 0, 0, 0));",
                    f"          out_{target}_.FreeTensor(o); }}"]
    out += ["    }", "}"]
    return out


def _visit(pass_calls: list[str], last_pass: bool) -> list[str]:
    """One split-D pass over a row's column chunks: each chunk's tiles were issued before
    (by the previous visit, or before the row loop) and the visit issues the next chunk's
    (IssueAfter) before computing on this one, so the copy-in overlaps the compute."""
    last = "true" if last_pass else "false"
    return (["for (int64_t c0 = 0; c0 < t_.cols; c0 += t_.ub_cols) {",
             "    const int32_t len = t_.cols - c0 < t_.ub_cols ? t_.cols - c0 : t_.ub_cols;"]
            + visit_lines("LoadCols(c0, len); TakeTiles(n);", f"IssueAfter(r0, c0, {last})", pass_calls,
                          "FreeTiles(); FreeCols();", "    ")
            + ["}"])


def _stage_calls(k: RowKernel, split_d: bool) -> list[str]:
    """Calls of the row stages: in program order (split-N: the rows are in UB), or in
    split-D's order (schedules.ascend.pass_steps, the passes the tiling's GM traffic
    counts): reductions computed together in one pass over the column chunks, each per-row
    scalar after the pass whose values it reads."""
    by_name = {name: blk for name, role, blk in k.stages if role in ("row_stage", "row_output")}
    if split_d:
        reduces = lambda _, blk: len(blk.iter_vars) == 2 + k.lead  # noqa: E731  (row and column after the lead)
        steps = pass_steps(pass_items(k.stages, ("row_stage", "row_output"), reduces))
    else:
        steps = [("stage", [name]) for name in by_name]
    out = []
    for kind, group in steps:
        for name in group:
            blk = by_name[name]
            if len(blk.iter_vars) == 2 + k.lead:          # a reduction: its identity first
                init = emit_expr(blk.init.value, Context(None, None, {}, {}, {}, k.sizes, []))
                out.append(f"for (int32_t i = 0; i < n; ++i) r_{name}_.SetValue(i, {init.text});")
        if kind == "pass":
            out += _visit([f"Stage_{name}(n, len);" for name in group], last_pass=False)
        else:
            out += [f"Stage_{name}(n, {'t_.cols' if not split_d else '0'});" for name in group]
    if k.ops.rows_out:
        out.append("StoreRows(r0, n);")
    return out


def _issue_after() -> list[str]:
    """IssueAfter(r0, c0, last_pass): the copy-in of the tiles split-D visits after chunk c0
    of row r0: the next chunk of this pass, else the first chunk of the row's next pass
    (every pass reads the same tiles), else the first chunk of the next row; nothing after
    the core's last tile."""
    return ["__aicore__ inline void IssueAfter(int64_t r0, int64_t c0, bool last_pass) {",
            "    const int64_t next = c0 + t_.ub_cols;",
            "    const int32_t first = t_.cols < t_.ub_cols ? t_.cols : t_.ub_cols;",
            "    if (next < t_.cols) IssueTiles(r0, next, 1, "
            "t_.cols - next < t_.ub_cols ? t_.cols - next : t_.ub_cols);",
            "    else if (!last_pass) IssueTiles(r0, 0, 1, first);",
            "    else if (r0 + 1 < row0_ + nrows_) IssueTiles(r0 + 1, 0, 1, first);",
            "}"]


def _tail_calls(k: RowKernel, direct: str, first: str) -> list[str]:
    calls = ["Outputs(r0, c0, n, len);"]
    calls += [f"ColSum_{n}(n, len, c0, {direct}, {first});" for n, _ in k.ops.col_sums]
    return calls


def _process(k: RowKernel) -> list[str]:
    # Double buffering: with two buffers per tile queue, pass p+1's copy-in (MTE2) is issued
    # before pass p's compute (V), so the two overlap; with one, after pass p frees it.
    split_n = ["__aicore__ inline void SplitN() {", "    BeginSums(false);", "    LoadCols(0, t_.cols);",
               "    if (nrows_ > 0) IssueTiles(row0_, 0, nrows_ < t_.ub_rows ? nrows_ : t_.ub_rows, t_.cols);",
               "    for (int64_t p = 0; p < nrows_; p += t_.ub_rows) {",
               "        const int32_t n = nrows_ - p < t_.ub_rows ? nrows_ - p : t_.ub_rows;",
               "        const int64_t r0 = row0_ + p, c0 = 0, pn = p + t_.ub_rows;",
               "        const int32_t len = t_.cols, nn = nrows_ - pn < t_.ub_rows ? nrows_ - pn : t_.ub_rows;",
               "        LoadRows(r0, n); TakeTiles(n);",
               "        if (BUFFER_NUM > 1 && pn < nrows_) IssueTiles(row0_ + pn, 0, nn, len);"]
    split_n += [f"        {c}" for c in _stage_calls(k, False) + _tail_calls(k, "false", "false")]
    split_n += ["        FreeTiles(); FreeRows();",
                "        if (BUFFER_NUM == 1 && pn < nrows_) IssueTiles(row0_ + pn, 0, nn, len);", "    }",
                "    FreeCols();", "    EndSums(false);", "}"]
    # Split-D visits (row, pass, column chunk) in order, every pass reading the same tiles:
    # the first tile is issued before the rows, each visit issues the next (_visit).
    split_d = ["__aicore__ inline void SplitD() {", "    BeginSums(true);",
               "    if (nrows_ > 0 && t_.cols > 0) "
               "IssueTiles(row0_, 0, 1, t_.cols < t_.ub_cols ? t_.cols : t_.ub_cols);",
               "    for (int64_t r0 = row0_; r0 < row0_ + nrows_; ++r0) {", "        const int32_t n = 1;",
               "        LoadRows(r0, n);"]
    visits = _visit(_tail_calls(k, "true", "r0 == row0_"), last_pass=True)
    split_d += [f"        {c}" for c in _stage_calls(k, True) + visits]
    split_d += ["        FreeRows();", "    }", "    EndSums(true);", "}"]
    main = ["__aicore__ inline void Process() {", "    LoadScalars();",
            f"    if (t_.mode == {MODES['split-D']} || t_.mode == {MODES['empty']}) SplitD(); else SplitN();",
            "    FlushRows();", "}"]
    return main + split_n + split_d + _issue_after()


def kernel_source(k: RowKernel, hw) -> str:
    """op_kernel/<kernel>.cpp of a row-pattern kernel."""
    buffers = row_buffers(hw, k.ops, 1, 16, int(k.knobs.get("buffer_num", 2)))
    body = (_init(k, buffers) + _load_fns(k) + _process(k) + _begin_sums(k) + _end_sums(k) + _final_sums(k))
    for name, role, blk in k.stages:
        if role in ("row_stage", "row_output"):
            body += _row_stage_fn(k, name, blk)
    body += _store_rows_fn(k) + _outputs_fn(k) + _column_sum_fns(k)
    return kernel_file(k, "row", body, _members(k, buffers))
