"""The host side of a CANN custom op: the tiling struct, the tiling function, the op def.

op_host/<kernel>_tiling.cpp ``<kernel>_tiling(rows, cols, cores, ub_bytes, &t)``: the row
                            pattern's tiling, the same arithmetic as
                            schedules/ascend_tiling.plan_rows (tests compare the two), with
                            the UB budget printed from the schedule's buffer list
(targets/ascend/host_context.py makes that function the file's ComputeTiling behind a
gert::TilingContext TilingFunc, and prints the tiling data header, InferShape and the OpDef.)
"""
from __future__ import annotations

from opgen.schedules.ascend_tiling import SMALL_D_REPEATS, itemsize, row_buffers

FIELDS = ("rows", "cols", "block_dim", "block_factor", "ub_rows", "ub_cols", "pitch", "mode", "ws_pitch", "work")


def _ub_bytes_fn(k, hw, buffers=row_buffers) -> str:
    """Work, UbBytes and BufferCount: the budget of ``buffers`` (a pattern's list of a pass's
    UB buffers, row_buffers by default) as C++ of the tiling's ub_rows and pitch."""
    nbuf = int(k.knobs.get("buffer_num", 2))
    terms = []
    for b in buffers(hw, k.ops, 1, 16, nbuf):
        terms.append(f"        + {b.count} * AlignUp(({b.expr}) * {itemsize(b.dtype)})   // {b.name}")
    body = "\n".join(terms)
    return (f"static int64_t Work(int64_t ub_rows, int64_t pitch) {{\n"
            f"    int64_t whole = AlignUp(ub_rows, {hw.elements_per_block(4)});\n"
            f"    int64_t per_row = {hw.elements_per_block(4)} + AlignUp(2 * CeilDiv(pitch, {hw.elements_per_repeat(4)}), "
            f"{hw.elements_per_block(4)});\n"
            f"    return whole > per_row ? whole : per_row;\n}}\n\n"
            f"static int64_t UbBytes(int64_t ub_rows, int64_t pitch) {{\n"
            f"    const int64_t work = Work(ub_rows, pitch);\n    return 0\n{body}\n        ;\n}}\n\n"
            f"static int64_t BufferCount() {{ return {sum(b.count for b in buffers(hw, k.ops, 1, 16, nbuf))}; }}\n")


TILING_HELPERS = r"""
static bool Fits(int64_t ub_rows, int64_t pitch, int64_t ub_bytes) {
    return UbBytes(ub_rows, pitch) <= ub_bytes && BufferCount() <= MAX_BUFFERS;
}

// The largest n in [lo, hi] with Fits (0 if not even lo): the budget grows with n.
template <typename F>
static int64_t LargestFitting(int64_t lo, int64_t hi, F fits) {
    if (hi < lo || !fits(lo)) return 0;
    while (lo < hi) {
        int64_t mid = (lo + hi + 1) / 2;
        if (fits(mid)) lo = mid; else hi = mid - 1;
    }
    return lo;
}

// split-D: (columns per pass, pitch), or 0 when not even one repeat fits.
static int SplitD(int64_t cols, int64_t ub_bytes, int64_t* ub_cols, int64_t* pitch) {
    const int64_t step = REPEAT_ELEMS;
    if (COLS_PER_PASS) {
        *ub_cols = COLS_PER_PASS < cols ? COLS_PER_PASS : cols;
        *pitch = PitchOf(*ub_cols);
        return Fits(1, *pitch, ub_bytes) ? 0 : 1;
    }
    int64_t reps = LargestFitting(1, CeilDiv(cols, step), [&](int64_t r) { return Fits(1, r * step, ub_bytes); });
    if (!reps) return 1;
    *pitch = reps * step;
    *ub_cols = *pitch < cols ? *pitch : cols;
    return 0;
}
"""

ROW_TILING = r"""
extern "C" int KERNEL_tiling(int64_t rows, int64_t cols, int64_t cores, int64_t ub_bytes, STRUCT* t) {
    *t = STRUCT{};
    t->rows = rows; t->cols = cols;
    t->ws_pitch = cols;                             // GM rows need no alignment for DataCopyPad; without it cols is whole blocks
    if (rows == 0 || cols == 0) {                       // empty: only column sums of no rows (zeros)
        t->mode = MODE_EMPTY;
        if (HAS_ROW_OUTS && rows > 0) {                 // rows of no columns still store their statistics
            t->block_factor = CeilDiv(rows, cores);
            t->block_dim = CeilDiv(rows, t->block_factor);
            t->ub_rows = 1; t->pitch = PitchOf(1);
            t->work = Work(1, t->pitch);
            return Fits(1, t->pitch, ub_bytes) ? 0 : 1;
        }
        if (!(HAS_COL_SUMS && cols)) return 0;
        if (!HAS_PAD && cols % PitchOf(1)) return 2;    // whole 32-byte blocks without DataCopyPad
        t->block_dim = 1; t->ub_rows = 1;
        if (SplitD(cols, ub_bytes, &t->ub_cols, &t->pitch)) return 1;
        t->work = Work(1, t->pitch);
        return 0;
    }
    if (!HAS_PAD && cols % PitchOf(1)) return 2;        // whole 32-byte blocks without DataCopyPad
    t->block_factor = CeilDiv(rows, cores);
    t->block_dim = CeilDiv(rows, t->block_factor);
    const int64_t pitch = PitchOf(cols);
    const bool whole_rows = !(COLS_PER_PASS && COLS_PER_PASS < cols);
    if (whole_rows && (ROWS_PER_PASS || Fits(1, pitch, ub_bytes))) {
        const bool small = pitch <= SMALL_D_ELEMS;
        const int64_t cap = small ? MAX_REPEATS : MAX_BURSTS;
        int64_t limit = t->block_factor > cap ? cap : t->block_factor;
        if (ROWS_PER_PASS) {
            t->ub_rows = ROWS_PER_PASS < t->block_factor ? ROWS_PER_PASS : t->block_factor;
            if (t->ub_rows > MAX_BURSTS) t->ub_rows = MAX_BURSTS;
            if (!Fits(t->ub_rows, pitch, ub_bytes) || (small && t->ub_rows > MAX_REPEATS)) return 1;
        } else {
            t->ub_rows = LargestFitting(1, limit, [&](int64_t r) { return Fits(r, pitch, ub_bytes); });
        }
        t->mode = small ? MODE_SMALL_D : MODE_SPLIT_N;
        t->ub_cols = cols; t->pitch = pitch;
    } else {
        t->mode = MODE_SPLIT_D; t->ub_rows = 1;
        if (SplitD(cols, ub_bytes, &t->ub_cols, &t->pitch)) return 1;
    }
    t->work = Work(t->ub_rows, t->pitch);
    return 0;
}
"""


def tiling_source(k, hw) -> str:
    """op_host/<kernel>_tiling.cpp: the host tiling function of a row-pattern kernel."""
    return tiling_file(k, hw, ROW_TILING, row_buffers)


def tiling_file(k, hw, function: str, buffers) -> str:
    """op_host/<kernel>_tiling.cpp around a pattern's extern "C" ``function`` (KERNEL and
    STRUCT standing for the kernel's names), with the constants, the helpers and the UB
    budget of ``buffers`` it uses; the row and segmented row patterns share it."""
    step = max(hw.elements_per_block(itemsize(d)) for d in k.ops.dtypes)
    consts = [
        f"constexpr int64_t ROWS_PER_PASS = {int(k.knobs.get('rows_per_pass', 0))};",
        f"constexpr int64_t COLS_PER_PASS = {int(k.knobs.get('cols_per_pass', 0))};",
        f"constexpr int64_t REPEAT_ELEMS = {hw.elements_per_repeat(4)};",
        f"constexpr int64_t SMALL_D_ELEMS = {SMALL_D_REPEATS * hw.elements_per_repeat(4)};",
        f"constexpr int64_t MAX_REPEATS = {hw.max_repeats};",
        f"constexpr int64_t MAX_BUFFERS = {hw.max_buffers};",
        f"constexpr int64_t MAX_BURSTS = {hw.max_bursts};",
        f"constexpr bool HAS_COL_SUMS = {'true' if k.ops.col_sums else 'false'};",
        f"constexpr bool HAS_ROW_OUTS = {'true' if k.ops.rows_out else 'false'};",
        f"constexpr bool HAS_PAD = {'true' if hw.data_copy_pad else 'false'};",
        "constexpr int64_t MODE_SPLIT_N = 0, MODE_SMALL_D = 1, MODE_SPLIT_D = 2, MODE_EMPTY = 3;",
    ]
    helpers = ("static int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }\n"
               f"static int64_t AlignUp(int64_t v, int64_t a = {hw.block_bytes}) {{ return CeilDiv(v, a) * a; }}\n"
               f"static int64_t PitchOf(int64_t cols) {{ return AlignUp(cols, {step}); }}\n")
    body = (TILING_HELPERS + function).replace("KERNEL", k.symbol).replace("STRUCT", k.struct)
    return (f"// Generated by opgen: the host tiling of {k.symbol}, for {hw.summary()}.\n"
            f"// The same arithmetic as schedules/ascend_tiling.plan_rows (tests compare them).\n"
            f"#include \"{k.symbol}_tiling.h\"\n\nnamespace {{\n" + "\n".join(consts) + "\n" + helpers + "\n"
            + _ub_bytes_fn(k, hw, buffers) + "}  // namespace\n" + body)
