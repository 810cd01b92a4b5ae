"""The channel pattern's kernel flow and host tiling: the rest of op_kernel/ and op_host/.

See targets/ascend/emit_channels.py for what each stage becomes; this module prints Init,
the loops (a core's channels in chunks of ``ub_chans``, per channel one pass when it fits,
else a sums pass and an outputs pass over its batch rows or HxW chunks) and the host tiling
function (the arithmetic of schedules/ascend_tiling_channels.plan_channels, compared with it by the
tests). No SyncAll, workspace or atomics: every channel, and so every sum, belongs to one
core, which writes its per-channel outputs itself.
"""
from __future__ import annotations

from opgen.schedules.ascend_tiling import itemsize
from opgen.schedules.ascend_tiling_channels import CHANNELS_PER_COPY, channel_buffers
from opgen.targets.ascend.emit_channels import CHANNEL_MODES, ChannelKernel, chan_fns, sum_args, tile_fns
from opgen.targets.ascend.emitter import CPP_TYPE, kernel_file

GM_SIZE = {"tile": "t_.N * t_.C * t_.HW", "chan": "t_.C", "scalar": "1", "call": "t_.K", "batch": "t_.N"}


def _buffers(k: ChannelKernel, hw):
    return channel_buffers(hw, k.ops, 1, 16, 16, int(k.knobs.get("buffer_num", 2)))


def _members_init(k: ChannelKernel, hw) -> tuple[list[str], list[str]]:
    members = ["TPipe pipe_;", f"{k.struct} t_;", "int64_t core_ = 0, chan0_ = 0, nchans_ = 0;"]
    members += [f"GlobalTensor<{CPP_TYPE[d]}> g_{n}_;" for n, d, _ in k.args]
    members += [f"LocalTensor<{CPP_TYPE[d]}> q_{n}_;" for n, d in k.ops.tiles_in + k.ops.chans_in]
    members += [f"LocalTensor<float> v_{n}_;" for n, _ in k.ops.tiles_in]
    members += [f"LocalTensor<float> cf_{n}_;" for n, _ in k.ops.chans_in]
    registers = [n for n, _ in k.ops.chans_in + k.ops.scalars_in]
    registers += list(k.ops.statistics + k.ops.sums + k.ops.chan_stages + k.ops.call_sums)
    members += [f"float s_{n} = 0.0f;" for n in dict.fromkeys(registers)]
    params = ", ".join(f"GM_ADDR gm_{n}" for n, _, _ in k.args)     # gm_: a tensor may be named t or tiling
    init = [f"__aicore__ inline void Init({params}, GM_ADDR workspace, const {k.struct}& t) {{",
            "    (void)workspace;", "    t_ = t;", "    core_ = GetBlockIdx();", "    chan0_ = core_ * t_.block_factor;",
            "    nchans_ = chan0_ < t_.C ? (t_.C - chan0_ < t_.block_factor ? t_.C - chan0_ : t_.block_factor) : 0;"]
    for n, d, role in k.args:    # an empty tensor has no buffer: bind only what exists
        size = GM_SIZE[role]
        init.append(f"    if ({size} > 0) g_{n}_.SetGlobalBuffer((__gm__ {CPP_TYPE[d]}*)gm_{n}, {size});")
    for b in _buffers(k, hw):
        size = b.expr.replace("ub_rows", "t_.ub_rows").replace("pitch", "t_.pitch").replace("work", "t_.work")
        size = size.replace("ub_chans", "t_.ub_chans")
        if b.position == "VECCALC":
            members += [f"TBuf<TPosition::VECCALC> {b.name}_;", f"LocalTensor<float> {b.name}_t_;"]
            init += [f"    pipe_.InitBuffer({b.name}_, ({size}) * sizeof(float));",
                     f"    {b.name}_t_ = {b.name}_.Get<float>();"]
        else:
            depth = "BUFFER_NUM" if b.count > 1 else "1"
            members.append(f"TQue<TPosition::{b.position}, {depth}> {b.name}_;")
            init.append(f"    pipe_.InitBuffer({b.name}_, {depth}, ({size}) * sizeof({CPP_TYPE[b.dtype]}));")
    return members, init + ["}"]


def _process(k: ChannelKernel) -> list[str]:
    sums = [f"Sum_{blk.body.buffer.name}({sum_args(k, blk)[1]});" for _, role, blk in k.stages if role == "channel_sum"]
    loop = ["for (int64_t b0 = 0; b0 < t_.N; b0 += t_.ub_rows) {",
            "    const int32_t n = t_.N - b0 < t_.ub_rows ? t_.N - b0 : t_.ub_rows;",
            "    for (int64_t h0 = 0; h0 < t_.HW; h0 += t_.ub_cols) {",
            "        const int32_t len = t_.HW - h0 < t_.ub_cols ? t_.HW - h0 : t_.ub_cols;",
            "        LoadTiles(ch, b0, n, h0, len);"]
    # The second pass over the channel writes its elementwise outputs; a channel reduction
    # (patterns.channel_reduction) has none, so its per-channel outputs need one pass only.
    outputs_pass = ([f"        {line}" for line in loop]
                    + ["                Outputs(ch, b0, n, h0, len);", "                FreeTiles();", "            }",
                       "        }"]) if k.ops.tiles_out else []
    # A channel map (patterns.channel_map) has no sums: no sums pass, its outputs pass alone.
    sums_pass = ([f"        {line}" for line in loop] + [f"                {c}" for c in sums]
                 + ["                FreeTiles();", "            }", "        }"]) if sums else []
    channel = (["__aicore__ inline void Channel(int64_t ch, int32_t i) {", "    BeginChannel(i);", "    Statistics(ch);",
                "    if (t_.mode == MODE_CHANNEL) {",
                "        const int64_t b0 = 0, h0 = 0; const int32_t n = t_.N, len = t_.HW;",
                "        LoadTiles(ch, b0, n, h0, len);"]
               + [f"        {c}" for c in sums]
               + ["        Stages(ch);", "        Outputs(ch, b0, n, h0, len);", "        FreeTiles();",
                  "    } else if (t_.mode == MODE_EMPTY) {", "        Stages(ch);", "    } else {"]
               + sums_pass + ["        Stages(ch);"]
               + outputs_pass + ["    }", "    EndChannel(i);", "}"])
    main = ["__aicore__ inline void Process() {", "    LoadScalars();",
            "    for (int64_t c0 = chan0_; c0 < chan0_ + nchans_; c0 += t_.ub_chans) {",
            "        const int32_t nc = chan0_ + nchans_ - c0 < t_.ub_chans ? chan0_ + nchans_ - c0 : t_.ub_chans;",
            "        LoadChans(c0, nc);", "        for (int32_t i = 0; i < nc; ++i) Channel(c0 + i, i);",
            "        StoreChans(c0, nc);", "        FreeChans();", "    }", "}"]
    return main + channel


def channel_kernel_source(k: ChannelKernel, hw) -> str:
    """op_kernel/<kernel>.cpp of a channel-pattern kernel."""
    members, init = _members_init(k, hw)
    body = init + tile_fns(k) + chan_fns(k) + _process(k)
    return kernel_file(k, "channel", body, members, CHANNEL_MODES, arg_prefix="gm_")


CHANNEL_TILING = r"""
extern "C" int KERNEL_tiling(int64_t N, int64_t C, int64_t HW, CALL_SIZEint64_t cores, int64_t ub_bytes, STRUCT* t) {
    *t = STRUCT{};
    t->N = N; t->C = C; t->HW = HW; t->tasks = C; t->mode = MODE_EMPTY;CALL_FIELD
    const bool data = N > 0 && HW > 0;
    if (C == 0 || !(data || HAS_CHAN_OUTS)) return 0;   // nothing to launch
    if (!HAS_PAD && (HW % PITCH_STEP || C % COPY_STEP)) return 2;   // whole 32-byte blocks without DataCopyPad
    t->block_factor = CeilDiv(C, cores);
    if (!HAS_PAD) t->block_factor = AlignUp(t->block_factor, COPY_STEP);
    t->block_dim = CeilDiv(C, t->block_factor);
    t->ub_chans = t->block_factor < CHANNELS_PER_COPY ? t->block_factor : CHANNELS_PER_COPY;
    const int64_t chans = t->ub_chans;
    if (!data) {                                        // no passes; the per-channel outputs are written
        t->ub_rows = 1; t->pitch = PitchOf(1);
        t->work = Work(1, t->pitch);
        return Fits(1, t->pitch, chans, ub_bytes) ? 0 : 1;
    }
    const int64_t pitch = PitchOf(HW);
    const bool whole_rows = !(HW_PER_PASS && HW_PER_PASS < HW);
    if (whole_rows && (ROWS_PER_PASS || Fits(1, pitch, chans, ub_bytes))) {
        const int64_t cap = StridedRows(C, HW) ? (N < MAX_BURSTS ? N : MAX_BURSTS) : 1;
        if (ROWS_PER_PASS) {
            t->ub_rows = ROWS_PER_PASS < cap ? ROWS_PER_PASS : cap;
            if (!Fits(t->ub_rows, pitch, chans, ub_bytes)) return 1;
        } else {
            t->ub_rows = LargestFitting(1, cap, [&](int64_t r) { return Fits(r, pitch, chans, ub_bytes); });
        }
        t->ub_cols = HW; t->pitch = pitch;
        t->mode = t->ub_rows == N ? MODE_CHANNEL : MODE_ROWS;
    } else {
        t->ub_rows = 1; t->mode = MODE_HW_CHUNK;
        if (HW_PER_PASS) {
            t->ub_cols = HW_PER_PASS < HW ? HW_PER_PASS : HW;
            t->pitch = PitchOf(t->ub_cols);
            if (!Fits(1, t->pitch, chans, ub_bytes)) return 1;
        } else {
            int64_t reps = LargestFitting(1, CeilDiv(HW, REPEAT_ELEMS),
                                          [&](int64_t r) { return Fits(1, r * REPEAT_ELEMS, chans, ub_bytes); });
            if (!reps) return 1;
            t->pitch = reps * REPEAT_ELEMS; t->ub_cols = t->pitch < HW ? t->pitch : HW;
        }
    }
    t->work = Work(t->ub_rows, t->pitch);
    return 0;
}
"""


def channel_tiling_source(k: ChannelKernel, hw) -> str:
    """op_host/<kernel>_tiling.cpp: the host tiling function of a channel-pattern kernel."""
    pitch_step = max(hw.elements_per_block(itemsize(d)) for d in k.ops.dtypes)
    copy_step = max(hw.elements_per_block(itemsize(d)) for d in k.ops.copied_dtypes)
    widest = max(itemsize(d) for d in k.ops.dtypes)
    bufs = _buffers(k, hw)
    terms = "\n".join(f"        + {b.count} * AlignUp(({b.expr}) * {itemsize(b.dtype)})   // {b.name}" for b in bufs)
    modes = ", ".join(f"MODE_{m.upper().replace('-', '_')} = {v}" for m, v in CHANNEL_MODES.items())
    pb, pr = hw.elements_per_block(4), hw.elements_per_repeat(4)
    strided = ("gap <= 0xFFFFFFFFLL" if hw.data_copy_pad else f"gap / {hw.block_bytes} <= 0xFFFF")
    return (f"// Generated by opgen: the host tiling of {k.symbol}, for {hw.summary()}.\n"
            f"// The same arithmetic as schedules/ascend_tiling_channels.plan_channels (tests compare them).\n"
            f"#include \"{k.symbol}_tiling.h\"\n\nnamespace {{\n"
            f"constexpr int64_t ROWS_PER_PASS = {int(k.knobs.get('rows_per_pass', 0))};\n"
            f"constexpr int64_t HW_PER_PASS = {int(k.knobs.get('hw_per_pass', 0))};\n"
            f"constexpr int64_t CHANNELS_PER_COPY = {CHANNELS_PER_COPY};\n"
            f"constexpr int64_t REPEAT_ELEMS = {pr};\nconstexpr int64_t MAX_BUFFERS = {hw.max_buffers};\n"
            f"constexpr int64_t MAX_BURSTS = {hw.max_bursts};\n"
            f"constexpr int64_t PITCH_STEP = {pitch_step}, COPY_STEP = {copy_step};\n"
            f"constexpr bool HAS_CHAN_OUTS = {'true' if k.ops.chan_outs else 'false'};\nconstexpr int64_t {modes};\n"
            f"constexpr bool HAS_PAD = {'true' if hw.data_copy_pad else 'false'};\n"
            "int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }\n"
            f"int64_t AlignUp(int64_t v, int64_t a = {hw.block_bytes}) {{ return CeilDiv(v, a) * a; }}\n"
            "int64_t PitchOf(int64_t n) { return AlignUp(n, PITCH_STEP); }\n"
            f"int64_t Work(int64_t rows, int64_t pitch) {{\n    int64_t whole = AlignUp(rows, {pb});\n"
            f"    int64_t per_row = {pb} + AlignUp(2 * CeilDiv(pitch, {pr}), {pb});\n"
            "    return whole > per_row ? whole : per_row;\n}\n"
            "// Whether one copy moves several batch rows: the GM gap between them fits its stride field.\n"
            f"bool StridedRows(int64_t C, int64_t HW) {{\n    const int64_t gap = (C - 1) * HW * {widest};\n"
            f"    return {strided};\n}}\n"
            "bool Fits(int64_t ub_rows, int64_t pitch, int64_t ub_chans, int64_t ub_bytes) {\n"
            f"    const int64_t work = Work(ub_rows, pitch);\n    const int64_t bytes = 0\n{terms}\n        ;\n"
            f"    return bytes <= ub_bytes && {sum(b.count for b in bufs)} <= MAX_BUFFERS;\n}}\n"
            "template <typename F>\nint64_t LargestFitting(int64_t lo, int64_t hi, F fits) {\n"
            "    if (hi < lo || !fits(lo)) return 0;\n"
            "    while (lo < hi) { int64_t mid = (lo + hi + 1) / 2; if (fits(mid)) lo = mid; else hi = mid - 1; }\n"
            "    return lo;\n}\n}  // namespace\n"
            + CHANNEL_TILING.replace("KERNEL", k.symbol).replace("STRUCT", k.struct)
            .replace("CALL_SIZE", "int64_t K, " if k.ops.calls_in else "")
            .replace("CALL_FIELD", " t->K = K;" if k.ops.calls_in else ""))
