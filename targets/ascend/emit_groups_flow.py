"""The group pattern's kernel flow, cross-core sums, host tiling: the rest of op_kernel/ and op_host/.

See targets/ascend/emit_groups.py for what each stage becomes; this module prints Init, the
per-task loop (one pass when the group fits, else a sums pass and an outputs pass), the
workspace sums and the final pass, and the host tiling function (the arithmetic of
schedules/ascend_tiling_groups.plan_groups, compared with it by the tests).
"""
from __future__ import annotations

from opgen.schedules.ascend_tiling import itemsize
from opgen.schedules.ascend_tiling_groups import group_buffers
from opgen.targets.ascend.emit_groups import (GROUP_MODES, GroupKernel, _chan_stage_fn, _context,
                                              _names, _task_fns, _tile_fns, phases)
from opgen.targets.ascend.emitter import CPP_TYPE, kernel_file, load_scalars, visit_lines
from opgen.targets.ascend.exprs import EmitError, emit_expr, load_name, reduction_body, sync

GM_SIZE = {"tile": "t_.N * t_.G * t_.D * t_.HW", "task": "t_.N * t_.G", "chan": "t_.G * t_.D", "scalar": "1"}


def _buffers(k: GroupKernel, hw):
    return group_buffers(hw, k.ops, 1, 16, int(k.knobs.get("buffer_num", 2)), 1)


def _members_init(k: GroupKernel, hw) -> tuple[list[str], list[str]]:
    members = ["TPipe pipe_;", f"{k.struct} t_;", "int64_t core_ = 0, task0_ = 0, ntasks_ = 0;",
               "GlobalTensor<float> g_ws_;"]
    members += [f"GlobalTensor<{CPP_TYPE[d]}> g_{n}_;" for n, d, _ in k.args]
    members += [f"LocalTensor<{CPP_TYPE[d]}> q_{n}_;" for n, d in k.ops.tiles_in + k.ops.tasks_in + k.ops.chans_in]
    members += [f"LocalTensor<float> v_{n}_;" for n, _ in k.ops.tiles_in]
    members += [f"LocalTensor<float> cf_{n}_;" for n, _ in k.ops.chans_in]
    members += [f"float s_{n} = 0.0f;" for n, _ in k.ops.tasks_in + k.ops.scalars_in]
    members += [f"float s_{s} = 0.0f;" for s in k.ops.task_stages]
    params = ", ".join(f"GM_ADDR {n}" for n, _, _ in k.args)
    init = [f"__aicore__ inline void Init({params}, GM_ADDR workspace, const {k.struct}& t) {{",
            "    t_ = t;", "    core_ = GetBlockIdx();", "    task0_ = core_ * t_.block_factor;",
            "    ntasks_ = task0_ < t_.tasks ? (t_.tasks - task0_ < t_.block_factor ? t_.tasks - task0_ : t_.block_factor) : 0;",
            "    if (t_.mode == MODE_EMPTY) ntasks_ = 0;" if not k.ops.tasks_out else
            "    // empty groups (HxW or D of 0) still store their per-task outputs (EmptyTask)"]
    for n, d, role in k.args:
        init.append(f"    if ({GM_SIZE[role]} > 0) g_{n}_.SetGlobalBuffer((__gm__ {CPP_TYPE[d]}*){n}, {GM_SIZE[role]});")
    rows = "t_.tasks" if k.knobs.get("sums") != "atomic" else "t_.G"
    init.append(f"    g_ws_.SetGlobalBuffer((__gm__ float*)workspace, {rows} * t_.ws_pitch * {len(k.ops.chan_sums)});")
    for b in _buffers(k, hw):
        size = b.expr.replace("ub_rows", "t_.ub_rows").replace("pitch", "t_.pitch").replace("work", "t_.work")
        size = size.replace("D", "t_.D")
        if k.ops.tasks_out and "t_.D" in size:   # empty groups of D = 0 run EmptyTask: no 0-byte buffer
            size = f"(t_.D > 0 ? ({size}) : 1)"
        if b.position == "VECCALC":
            members.append(f"TBuf<TPosition::VECCALC> {b.name}_;")
            members.append(f"LocalTensor<float> {b.name}_t_;")
            init += [f"    pipe_.InitBuffer({b.name}_, ({size}) * sizeof(float));", f"    {b.name}_t_ = {b.name}_.Get<float>();"]
        else:
            depth = "BUFFER_NUM" if b.count > 1 else "1"
            members.append(f"TQue<TPosition::{b.position}, {depth}> {b.name}_;")
            init.append(f"    pipe_.InitBuffer({b.name}_, {depth}, ({size}) * sizeof({CPP_TYPE[b.dtype]}));")
    return members, init + ["}"]


def _sum_fns(k: GroupKernel) -> list[str]:
    """Per task: each column sum's D contributions into the workspace. Then the final pass."""
    atomic = k.knobs.get("sums") == "atomic"
    out = ["__aicore__ inline void ColumnSums(int64_t task, int64_t g) {", "    (void)task; (void)g;"]
    index = 0
    for name, role, blk in k.stages:
        if role != "column_sum":
            continue
        g_, d_, n_ = _names(blk)
        ctx = _context(k, blk, {"n": n_, "g": g_, "d": d_}, "i")
        value = emit_expr(reduction_body(blk.body), ctx)
        if value.kind not in ("row", "scalar") or ctx.lines:
            raise EmitError(f"{name}: a per-task contribution to a column sum must be scalar code")
        acc = f"acc_{blk.body.buffer.name}_t_"
        row = f"({index} * t_.G + g)" if atomic else f"({index} * t_.tasks + task)"
        out += [f"    for (int32_t i = 0; i < t_.D; ++i) {acc}.SetValue(i, {value.text});",
                f"    {sync('S_MTE3')}   // the copy-out reads what the scalar pipe wrote"]
        copy = f"DataCopyPad(g_ws_[{row} * t_.ws_pitch], {acc}, DataCopyExtParams(1, t_.D * 4, 0, 0, 0));"
        out += (["    SetAtomicAdd<float>();", f"    {copy}", "    SetAtomicNone();"] if atomic else [f"    {copy}"])
        out.append(f"    {sync('MTE3_S')}   // the next task's SetValue overwrites what the copy-out read")
        index += 1
    out.append("}")
    return out + _final_fn(k, atomic)


def _final_fn(k: GroupKernel, atomic: bool) -> list[str]:
    casts = {}
    for _, role, blk in k.stages:
        if role == "cast":
            casts.setdefault(load_name(blk.body.value.value), []).append(blk.body.buffer.name)
    arg_names = {n for n, _, _ in k.args}
    part = f"chan_{k.ops.chan_stages[0]}_t_"
    out = ["__aicore__ inline void FinalSums() {",
           "    const int64_t per = (t_.G + t_.block_dim - 1) / t_.block_dim;",
           "    const int64_t g_end = (core_ + 1) * per < t_.G ? (core_ + 1) * per : t_.G;",
           "    for (int64_t g = core_ * per; g < g_end; ++g) {"]
    for index, (name, _) in enumerate(k.ops.chan_sums):
        acc = f"acc_{name}_t_"
        rows, row = (("1", f"({index} * t_.G + g)") if atomic else
                     ("(t_.mode == MODE_EMPTY ? 0 : t_.N)", f"({index} * t_.tasks + r * t_.G + g)"))
        # The previous group's copy-out (MTE3) still reads the accumulator the Duplicate (V)
        # overwrites: a core with more than one group, and no partial rows in between (N
        # of 0, an empty HxW) to put a barrier there, raced (the emulation's WAR check).
        out += [f"        {sync('MTE3_V')}",
                f"        Duplicate({acc}, 0.0f, t_.D);",
                f"        for (int64_t r = 0; r < {rows}; ++r) {{",
                f"            {sync('V_MTE2')}   // the copy-in overwrites what the last Add read",
                f"            DataCopyPad({part}, g_ws_[{row} * t_.ws_pitch], DataCopyExtParams(1, t_.D * 4, 0, 0, 0), "
                "DataCopyPadExtParams<float>(false, 0, 0, 0));",
                f"            {sync('MTE2_V')}",
                f"            Add({acc}, {acc}, {part}, t_.D);",
                "        }", f"        {sync('V_MTE3')}   // the copy-out reads the sum"]
        if name in arg_names:
            out.append(f"        DataCopyPad(g_{name}_[g * t_.D], {acc}, DataCopyExtParams(1, t_.D * 4, 0, 0, 0));")
        for target in casts.get(name, []):
            dtype = dict((n, d) for n, d, _ in k.args)[target]
            ty = CPP_TYPE[dtype]
            out += [f"        {{ LocalTensor<{ty}> o = out_{target}_.AllocTensor<{ty}>();",
                    f"          Cast(o, {acc}, RoundMode::{k.face.round_mode(dtype)}, t_.D);",
                    f"          out_{target}_.EnQue(o); o = out_{target}_.DeQue<{ty}>();",
                    f"          DataCopyPad(g_{target}_[g * t_.D], o, DataCopyExtParams(1, t_.D * sizeof({ty}), 0, 0, 0));",
                    f"          out_{target}_.FreeTensor(o); }}"]
    return out + ["    }", "}"]


def _visit(calls: list[str], last_pass: bool) -> list[str]:
    """One pass over a task's chunks (channels x HxW): each chunk's tiles were issued before
    (by the previous visit, or before the task's first pass) and the visit issues the
    next chunk's (IssueAfter) before computing on this one."""
    last = "true" if last_pass else "false"
    return (["for (int64_t d0 = 0; d0 < t_.D; d0 += t_.ub_rows) {",
             "    const int32_t n = t_.D - d0 < t_.ub_rows ? t_.D - d0 : t_.ub_rows;",
             "    for (int64_t h0 = 0; h0 < t_.HW; h0 += t_.ub_cols) {",
             "        const int32_t len = t_.HW - h0 < t_.ub_cols ? t_.HW - h0 : t_.ub_cols;"]
            + visit_lines("TakeTiles(n);", f"IssueAfter(task, d0, h0, {last})", calls, "FreeTiles();", "        ")
            + ["    }", "}"])


def _issue_after() -> list[str]:
    """IssueAfter(task, d0, h0, last_pass): the copy-in of the chunk visited after chunk
    (d0, h0) of ``task``: the next HxW chunk, else the next channels, else the first chunk
    of the task's next pass (every pass reads the same tiles), else the first chunk of the
    core's next task; nothing after the core's last chunk."""
    return ["__aicore__ inline void IssueAfter(int64_t task, int64_t d0, int64_t h0, bool last_pass) {",
            "    const int32_t n0 = t_.D < t_.ub_rows ? t_.D : t_.ub_rows;",
            "    const int32_t len0 = t_.HW < t_.ub_cols ? t_.HW : t_.ub_cols;",
            "    const int64_t h1 = h0 + t_.ub_cols, d1 = d0 + t_.ub_rows;",
            "    const int32_t n = t_.D - d0 < t_.ub_rows ? t_.D - d0 : t_.ub_rows;",
            "    if (h1 < t_.HW) IssueTiles(task, d0, n, h1, t_.HW - h1 < t_.ub_cols ? t_.HW - h1 : t_.ub_cols);",
            "    else if (d1 < t_.D) IssueTiles(task, d1, t_.D - d1 < t_.ub_rows ? t_.D - d1 : t_.ub_rows, 0, len0);",
            "    else if (!last_pass) IssueTiles(task, 0, n0, 0, len0);",
            "    else if (task + 1 < task0_ + ntasks_) IssueTiles(task + 1, 0, n0, 0, len0);",
            "}"]


def _process(k: GroupKernel) -> list[str]:
    atomic = k.knobs.get("sums") == "atomic"
    steps = phases(k)
    chan_calls = lambda p: [f"Chan_{name}(d0, n, len);" for name in steps[p][0]]  # noqa: E731
    whole = []
    for p in range(len(steps)):
        whole += [f"        {c}" for c in chan_calls(p)] + [f"        TaskStages{p}();"]
    # The chunked modes visit (pass, channels, HxW chunk) in order, every pass reading the
    # same tiles: the core's first chunk is issued before its first pass, each visit issues
    # the next (_visit), so the copy-in overlaps the compute.
    passes = ["        if (task == task0_) IssueTiles(task, 0, t_.D < t_.ub_rows ? t_.D : t_.ub_rows, 0, "
              "t_.HW < t_.ub_cols ? t_.HW : t_.ub_cols);"]
    for p in range(len(steps)):
        if steps[p][0]:        # a pass over the task's data for this phase's sums
            passes += [f"        {line}" for line in _visit(chan_calls(p), last_pass=False)]
        passes.append(f"        TaskStages{p}();")
    empty = (["    if (t_.mode == MODE_EMPTY) { EmptyTask(task); return; }"] if k.ops.tasks_out else [])
    body = (["__aicore__ inline void Task(int64_t task) {"] + empty + ["    const int64_t g = task % t_.G;",
             "    LoadTask(task, g);", f"    if (t_.mode == {GROUP_MODES['group']} || t_.mode == {GROUP_MODES['hw1']}) {{",
             "        const int64_t d0 = 0, h0 = 0; const int32_t n = t_.D, len = t_.HW;",
             "        if (BUFFER_NUM == 1 || task == task0_) IssueTiles(task, d0, n, h0, len);",
             "        TakeTiles(n);",
             "        if (BUFFER_NUM > 1 && task + 1 < task0_ + ntasks_) IssueTiles(task + 1, d0, n, h0, len);"]
            + whole + ["        Outputs(task, d0, n, h0, len);", "        FreeTiles();", "    } else {"]
            + passes
            + [f"        {line}" for line in _visit(["Outputs(task, d0, n, h0, len);"], last_pass=True)]
            + ["    }", "    StoreTask(task);", "    ColumnSums(task, g);", "    FreeTask();", "}"])
    zero = []
    if atomic:
        zero = ["    if (core_ == 0) {", "        for (int64_t g = 0; g < t_.G; ++g) {"]
        for index, (name, _) in enumerate(k.ops.chan_sums):
            zero += [f"            Duplicate(acc_{name}_t_, 0.0f, t_.D);", f"            {sync('V_MTE3')}",
                     f"            DataCopyPad(g_ws_[({index} * t_.G + g) * t_.ws_pitch], acc_{name}_t_, "
                     "DataCopyExtParams(1, t_.D * 4, 0, 0, 0));", f"            {sync('MTE3_V')}"]
        zero += ["        }", "    }", "    SyncAll();"]
    main = (["__aicore__ inline void Process() {", "    LoadScalars();"] + zero
            + ["    for (int64_t task = task0_; task < task0_ + ntasks_; ++task) Task(task);"]
            + (["    SyncAll();", "    FinalSums();"] if k.ops.chan_sums else []) + ["    FlushStats();", "}"])
    return main + body + _issue_after()


def group_kernel_source(k: GroupKernel, hw) -> str:
    members, init = _members_init(k, hw)
    body = init + _tile_fns(k) + _task_fns(k) + _sum_fns(k) + _process(k) + load_scalars(k.ops.scalars_in, k.pad)
    for name, role, blk in k.stages:
        if role == "channel_sum":
            body += _chan_stage_fn(k, name, blk)
    return kernel_file(k, "group", body, members, GROUP_MODES)


GROUP_TILING = r"""
extern "C" int KERNEL_tiling(int64_t N, int64_t G, int64_t D, int64_t HW, int64_t cores, int64_t ub_bytes,
                             STRUCT* t) {
    *t = STRUCT{};
    t->N = N; t->G = G; t->D = D; t->HW = HW; t->tasks = N * G; t->ws_pitch = D;
    if (t->tasks == 0 || D == 0 || HW == 0) {
        t->mode = MODE_EMPTY;
        if (HAS_TASK_OUTS && t->tasks > 0) {            // empty groups still store their statistics
            t->block_factor = CeilDiv(t->tasks, cores);
            t->block_dim = CeilDiv(t->tasks, t->block_factor);
            t->ub_rows = 1; t->pitch = PitchOf(1);
            t->work = Work(1, t->pitch);
            return Fits(1, t->pitch, D, ub_bytes) ? 0 : 1;
        }
        if (!(HAS_SUMS && G * D > 0)) return 0;
        if (!HAS_PAD && D % PitchOf(1)) return 2;       // whole 32-byte blocks without DataCopyPad
        t->block_dim = 1; t->ub_rows = 1; t->pitch = PitchOf(1);
        t->work = Work(1, t->pitch);
        return Fits(1, t->pitch, D, ub_bytes) ? 0 : 1;
    }
    if (!HAS_PAD && (D % PitchOf(1) || HW % PitchOf(1))) return 2;
    t->block_factor = CeilDiv(t->tasks, cores);
    t->block_dim = CeilDiv(t->tasks, t->block_factor);
    int64_t pitch = PitchOf(HW), k = 0;
    if (CHANNELS_PER_PASS) {
        k = CHANNELS_PER_PASS < D ? CHANNELS_PER_PASS : D;
        if (!Fits(k, pitch, D, ub_bytes)) return 1;
    } else {
        k = LargestFitting(1, D < MAX_BURSTS ? D : MAX_BURSTS, [&](int64_t c) { return Fits(c, pitch, D, ub_bytes); });
    }
    if (k) {
        t->ub_rows = k; t->ub_cols = HW; t->pitch = pitch;
        t->mode = k == D ? (HW == 1 ? MODE_HW1 : MODE_GROUP) : (k > 1 ? MODE_CHANNELS : MODE_CHANNEL);
    } else {
        int64_t reps = LargestFitting(1, CeilDiv(HW, REPEAT_ELEMS),
                                      [&](int64_t r) { return Fits(1, r * REPEAT_ELEMS, D, ub_bytes); });
        if (!reps) return 1;
        t->ub_rows = 1; t->pitch = reps * REPEAT_ELEMS; t->ub_cols = t->pitch < HW ? t->pitch : HW;
        t->mode = MODE_HW_CHUNK;
    }
    t->work = Work(t->ub_rows, t->pitch);
    return 0;
}
"""


def group_tiling_source(k: GroupKernel, hw) -> str:
    step = max(hw.elements_per_block(itemsize(d)) for d in k.ops.dtypes)
    nbuf = int(k.knobs.get("buffer_num", 2))
    bufs = group_buffers(hw, k.ops, 1, 16, nbuf, 1)
    terms = "\n".join(f"        + {b.count} * AlignUp(({b.expr}) * {itemsize(b.dtype)})   // {b.name}" for b in bufs)
    modes = ", ".join(f"MODE_{m.upper().replace('-', '_')} = {v}" for m, v in GROUP_MODES.items())
    pb, pr = hw.elements_per_block(4), hw.elements_per_repeat(4)
    return (f"// Generated by opgen: the host tiling of {k.symbol}, for {hw.summary()}.\n"
            f"// The same arithmetic as schedules/ascend_tiling_groups.plan_groups (tests compare them).\n"
            f"#include \"{k.symbol}_tiling.h\"\n\nnamespace {{\n"
            f"constexpr int64_t CHANNELS_PER_PASS = {int(k.knobs.get('channels_per_pass', 0))};\n"
            f"constexpr int64_t REPEAT_ELEMS = {pr};\nconstexpr int64_t MAX_BUFFERS = {hw.max_buffers};\n"
            f"constexpr int64_t MAX_BURSTS = {hw.max_bursts};\n"
            f"constexpr bool HAS_SUMS = {'true' if k.ops.chan_sums else 'false'};\nconstexpr int64_t {modes};\n"
            f"constexpr bool HAS_TASK_OUTS = {'true' if k.ops.tasks_out else 'false'};\n"
            f"constexpr bool HAS_PAD = {'true' if hw.data_copy_pad else 'false'};\n"
            "int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }\n"
            f"int64_t AlignUp(int64_t v, int64_t a = {hw.block_bytes}) {{ return CeilDiv(v, a) * a; }}\n"
            f"int64_t PitchOf(int64_t n) {{ return AlignUp(n, {step}); }}\n"
            f"int64_t Work(int64_t rows, int64_t pitch) {{\n    int64_t whole = AlignUp(rows, {pb});\n"
            f"    int64_t per_row = {pb} + AlignUp(2 * CeilDiv(pitch, {pr}), {pb});\n"
            "    return whole > per_row ? whole : per_row;\n}\n"
            "bool Fits(int64_t ub_rows, int64_t pitch, int64_t D, int64_t ub_bytes) {\n"
            f"    const int64_t work = Work(ub_rows, pitch);\n    const int64_t bytes = 0\n{terms}\n        ;\n"
            f"    return bytes <= ub_bytes && {sum(b.count for b in bufs)} <= MAX_BUFFERS;\n}}\n"
            "template <typename F>\nint64_t LargestFitting(int64_t lo, int64_t hi, F fits) {\n"
            "    if (hi < lo || !fits(lo)) return 0;\n"
            "    while (lo < hi) { int64_t mid = (lo + hi + 1) / 2; if (fits(mid)) lo = mid; else hi = mid - 1; }\n"
            "    return lo;\n}\n}  // namespace\n"
            + GROUP_TILING.replace("KERNEL", k.symbol).replace("STRUCT", k.struct))
