"""Scheduled TIR -> an AscendC kernel (op_kernel/<kernel>.cpp), by pattern, never by op.

The schedule (schedules/ascend.py) annotated every block with its role and the root with
the pattern and knobs; the tiling numbers are runtime fields of a struct the host tiling
function fills (targets/ascend/host.py). This module prints the kernel class of the row
pattern:

  Init:     GlobalTensor::SetGlobalBuffer per argument, pipe.InitBuffer per UB buffer of
            the plan (the same list and sizes as the budget in schedules/ascend_tiling.py);
  SplitN:   per pass of n <= ub_rows whole rows: DataCopyPad in (EnQue/DeQue), Cast to
            float32, the row stages in program order (sum reductions -> WholeReduceSum for
            rows of one repeat, else ReduceSum per row; per-row scalars -> scalar code), the
            elementwise outputs (vector calls, Cast in the op's CANN round mode, DataCopyPad out) and the
            column sums accumulated into a UB vector;
  SplitD:   per row, one pass over the column chunks per group of row reductions that
            do not read each other (schedules.ascend.pass_steps), then one for the
            outputs, each chunk's copy-in issued during the previous chunk's compute; column
            sums go straight to GM per chunk;
  sums:     deterministic (per-core partials in the workspace, SyncAll, a fixed-order sum
            split over the cores by columns) or atomic (core 0 zeroes, SyncAll, SetAtomicAdd);
  casts:    a float32 accumulator that ``cast`` blocks round (a half output's column sum)
            is summed like any column sum, but only the final pass writes GM: it rounds the
            float32 sum with CAST_RINT into each cast's output (atomic: the cores add into a
            workspace row per accumulator, SyncAll, then that final pass).

Expressions are translated by targets/ascend/exprs.py; the group and channel patterns have
their own printers (targets/ascend/emit_groups.py, targets/ascend/emit_channels.py), and the
segmented row pattern reuses this one's stage printers (targets/ascend/emit_segments.py); any
other pattern raises EmitError: the emitter refuses what it cannot print instead of
guessing.
"""
from __future__ import annotations

from dataclasses import dataclass

from opgen.lazy import s_tir
from opgen.schedules.ascend import RowTiles
from opgen.schedules.ascend_scratch import VIA_HALF
from opgen.targets.ascend.cann import entry_lines
from opgen.targets.ascend.exprs import (LOADS, Context, EmitError, Value, emit_expr, integral, load_name,
                                        reduction_body, reduction_of, row_extremes, row_sums, stored_value, sync)
from opgen.targets.ascend.vector_order import order_vector_pipe

CPP_TYPE = {"float32": "float", "float16": "half", "bfloat16": "bfloat16_t", "int32": "int32_t", "int8": "int8_t"}


def copy_in(name: str, dtype: str, gm_index: str, params: str) -> list[str]:
    """GM -> UB through ``name``'s input queue: AllocTensor, DataCopyPad, EnQue, then DeQue
    into ``q_<name>_`` (the tensor the vector code reads, freed by the caller later)."""
    ty = CPP_TYPE[dtype]
    return [f"    {{ LocalTensor<{ty}> a = in_{name}_.AllocTensor<{ty}>();",
            f"      DataCopyPad(a, g_{name}_[{gm_index}], {params}, DataCopyPadExtParams<{ty}>(false, 0, 0, 0));",
            f"      in_{name}_.EnQue(a); q_{name}_ = in_{name}_.DeQue<{ty}>(); }}"]


def load_scalars(scalars, pad: bool) -> list[str]:
    """LoadScalars(): each (1,) input into its float32 register ``s_<name>``, once per core
    (with DataCopyPad through its one-element queue; without it, a scalar GM read)."""
    out = ["__aicore__ inline void LoadScalars() {"]
    for name, d in scalars:
        ty = CPP_TYPE[d]
        if not pad:
            out.append(f"    s_{name} = static_cast<float>(g_{name}_.GetValue(0));")
            continue
        out += [f"    {{ LocalTensor<{ty}> a = in_{name}_.AllocTensor<{ty}>();",
                f"      DataCopyPad(a, g_{name}_[0], DataCopyExtParams(1, sizeof({ty}), 0, 0, 0), "
                f"DataCopyPadExtParams<{ty}>(false, 0, 0, 0));",
                f"      in_{name}_.EnQue(a); a = in_{name}_.DeQue<{ty}>();",
                # the queue orders V after the copy (MTE2_V); the scalar read needs its own event
                f"      {sync('MTE2_S')} s_{name} = static_cast<float>(a.GetValue(0));",
                f"      in_{name}_.FreeTensor(a); }}"]
    return out + ["}"]


def kernel_file(k, pattern: str, body: list[str], members: list[str], modes: dict | None = None,
                arg_prefix: str = "") -> str:
    """op_kernel/<kernel>.cpp of any pattern around its class ``body`` and ``members``: the
    includes, the constants and scalar helpers every printer's code uses, the class, and
    the extern "C" entry that reads the tiling and runs Process (plus the emulation's export).
    ``modes``: the tiling's mode numbers as constants; ``arg_prefix``: the GM parameters'
    prefix where a member would otherwise share a parameter's name."""
    cls = f"{camel(k.symbol)}Kernel"
    consts = [f"constexpr int32_t BUFFER_NUM = {int(k.knobs.get('buffer_num', 2))};"]
    if modes:
        consts.append("constexpr int64_t " + ", ".join(f"MODE_{m.upper().replace('-', '_')} = {v}"
                                                       for m, v in modes.items()) + ";")
    lines = [f"// Generated by opgen from the scheduled TIR of {k.symbol} ({pattern} pattern). Do not edit.",
             "#include \"kernel_operator.h\"", f"#include \"{k.symbol}_tiling_data.h\"", "", "using namespace AscendC;", "",
             *consts, "",
             "__aicore__ inline int64_t AlignUp(int64_t v, int64_t a = 32) { return (v + a - 1) / a * a; }",
             "__aicore__ inline float opgen_fmax(float a, float b) { return a > b ? a : b; }",
             "__aicore__ inline float opgen_fmin(float a, float b) { return a < b ? a : b; }",
             "// One SetFlag/WaitFlag pair: pipe B of event A_B waits for pipe A's earlier work.",
             "template <HardEvent E>", "__aicore__ inline void OpgenSync() {",
             "    const int32_t id = static_cast<int32_t>(GetTPipePtr()->FetchEventID(E));",
             "    SetFlag<E>(id);", "    WaitFlag<E>(id);", "}", "",
             f"class {cls} {{", "public:"] + [f"    {line}" for line in order_vector_pipe(body)]
    lines += ["private:"] + [f"    {line}" for line in members] + ["};", ""]
    lines += entry_lines(k, cls, arg_prefix)
    return "\n".join(lines)


def copy_out(src: str, dtype: str, queue: str, gm: str, params: str, count: str, round_mode: str,
             indent: str = "    ") -> list[str]:
    """A computed float32 tile to a narrower GM output: Cast into its output queue, whose
    EnQue/DeQue orders V before MTE3."""
    ty = CPP_TYPE[dtype]
    return [f"{indent}{{ LocalTensor<{ty}> o = {queue}.AllocTensor<{ty}>();",
            f"{indent}  Cast(o, {src}, RoundMode::{round_mode}, {count});",
            f"{indent}  {queue}.EnQue(o); o = {queue}.DeQue<{ty}>();",
            f"{indent}  DataCopyPad({gm}, o, {params});", f"{indent}  {queue}.FreeTensor(o); }}"]


def via_half(value, expr, ctx, count: str, round_mode: str) -> str:
    """A float32 tile staged as half for a dtype the vector Cast reaches only from half
    (ascend_scratch.VIA_HALF; asc-devkit Cast.md table 4 on Atlas A2): first rounded to an
    integer in float32 in ``round_mode`` (float -> float takes no CAST_NONE: CAST_RINT, which
    CAST_NONE means where a value is rounded), so the output is rounded once, not twice
    through half's 11 bits (skipped where exprs.integral says it is an integer already);
    then Cast to half, exact for |v| <= 2048 and past int8's range above, and the half ->
    int8_t Cast (CAST_NONE: exact, saturating) follows in copy_out. Returns the half view."""
    mode = "CAST_RINT" if round_mode == "CAST_NONE" else round_mode
    rounded = value.text if value.temp else ctx.take(expr)
    if not (integral(expr) and value.temp):     # a rounded (and clipped) value needs no second rounding
        ctx.lines.append(f"Cast({rounded}, {value.text}, RoundMode::{mode}, {count});")
    staged = ctx.take(expr)
    ctx.lines.append(f"Cast({staged}.ReinterpretCast<half>(), {rounded}, RoundMode::CAST_NONE, {count});")
    return f"{staged}.ReinterpretCast<half>()"


def store_tile(expr, ctx, dtype: str, queue: str, gm: str, params: str, count: str, round_mode: str) -> list[str]:
    """An elementwise output's expression computed over the pass and copied to GM. A float32
    output is computed straight into a tile of its output queue (the first tile of the
    expression's pool), so its copy-out overlaps the next pass's compute through the queue's
    buffers, with no UB-to-UB copy and no event; a narrower one is computed in scratch tiles
    and Cast into its queue (copy_out)."""
    if dtype == "float32":
        ctx.temps.insert(0, "o")
    value = emit_expr(expr, ctx)
    if value.kind != "tile":
        raise EmitError(f"an elementwise output that is not a tile: {expr}")
    if dtype in VIA_HALF:
        src = via_half(value, expr, ctx, count, round_mode)
        return [f"    {line}" for line in ctx.lines] + copy_out(src, dtype, queue, gm, params, count, "CAST_NONE")
    if dtype != "float32":
        return [f"    {line}" for line in ctx.lines] + copy_out(value.text, dtype, queue, gm, params, count,
                                                                 round_mode)
    out = [f"    {{ LocalTensor<float> o = {queue}.AllocTensor<float>();"] + [f"      {line}" for line in ctx.lines]
    if value.text != "o":                 # a loaded tile, or a result in another scratch tile
        out.append(f"      Adds(o, {value.text}, 0.0f, {count});")
    return out + [f"      {queue}.EnQue(o); o = {queue}.DeQue<float>();", f"      DataCopyPad({gm}, o, {params});",
                  f"      {queue}.FreeTensor(o); }}"]


def visit_lines(take: str, issue_next: str, calls: list[str], free: str, indent: str) -> list[str]:
    """The body of one visit of a streamed chunk, the double-buffering protocol every chunked
    loop shares: take this chunk's tiles (issued before), issue the next chunk's copy-in
    before computing when there is a second buffer, compute, free, and with one buffer issue
    the next copy-in only once this chunk's buffer is free."""
    return ([f"{indent}{take}", f"{indent}if (BUFFER_NUM > 1) {issue_next};"] + [f"{indent}{c}" for c in calls]
            + [f"{indent}{free}", f"{indent}if (BUFFER_NUM == 1) {issue_next};"])


def as_float32(view: str, name: str, dtype: str, count: str) -> str:
    """``view`` = the copied-in tile as float32: the queue tensor itself, or a Cast of it
    into ``name``'s float32 scratch."""
    if dtype == "float32":
        return f"    {view} = q_{name}_;"
    return f"    {view} = f32_{name}_t_; Cast({view}, q_{name}_, RoundMode::CAST_NONE, {count});"
MODES = {"split-N": 0, "small-D": 1, "split-D": 2, "empty": 3}


@dataclass
class RowKernel:
    """Everything the row-pattern printer needs, read from the annotated TIR."""

    symbol: str
    ops: object                # RowOperands
    stages: list               # (name, role, SBlock) in program order
    args: list                 # (buffer name, dtype, "tile"|"row"|"col"|"scalar") kernel GM arguments
    sizes: dict                # size variable name -> C++ field
    knobs: dict
    param_names: tuple = ()    # every parameter of the TIR function, in order
    pad: bool = True           # the product has DataCopyPad (else per-row values are GM reads)

    pattern = "rows"
    modes = MODES
    lead = 0                   # iterators before a block's row and column (none: (rows, cols) blocks)

    def lead_loads(self, ivs: list, row: int, col: int | None, rows: dict) -> dict:
        """Explicit homes of loads indexed by the lead iterators too (none here)."""
        return {}

    def col_at(self, name: str) -> str:
        """The GM index of column input ``name``'s element c0 (a (cols,) vector: c0)."""
        return "c0"

    @property
    def struct(self) -> str:
        return f"{camel(self.symbol)}TilingData"

    @property
    def fields(self) -> tuple:
        from opgen.targets.ascend.host import FIELDS
        return FIELDS

    def size_args(self, by_name: dict) -> tuple:
        """The host tiling function's leading arguments: the tile's kernel shape ((rows, cols);
        a segmented pass's (segments, rows of a segment, cols))."""
        tile = next(n for n, _, role in self.args if role == "tile")
        return tuple(int(v) for v in by_name[tile].shape)

    def workspace_floats(self, t) -> int:
        if self.knobs.get("sums") == "atomic":
            return t.ws_pitch * len(self.ops.accumulators)
        return t.ws_pitch * t.block_dim * len(self.ops.col_sums)

    def ws_row(self, name: str, core: str = "core_") -> str:
        """The workspace row of column sum ``name``: one per core (deterministic partials) or,
        with atomic sums, one per accumulator (the cores add into it; outputs take the adds
        themselves)."""
        if self.knobs.get("sums") == "atomic":
            return str(self.ops.accumulators.index(name))
        return f"({[n for n, _ in self.ops.col_sums].index(name)} * t_.block_dim + {core})"

    def casts(self) -> dict:
        """{accumulator: [(output, dtype)]}: what each ``cast`` block rounds, and into what;
        EmitError for a cast that does more than round one float32 column sum."""
        dtypes = {n: d for n, d, _ in self.args}
        result: dict = {}
        for name, role, blk in self.stages:
            if role != "cast":
                continue
            value = blk.body.value
            if type(value).__name__ != "Cast" or type(value.value).__name__ not in LOADS:
                raise EmitError(f"{name}: a cast stage must round a column sum, nothing else ({value})")
            target = blk.body.buffer.name
            result.setdefault(load_name(value.value), []).append((target, dtypes[target]))
        return result


def camel(symbol: str) -> str:
    return "".join(part.capitalize() for part in symbol.split("_"))


def recorded_stages(sch) -> list:
    """(name, "ascend.role" annotation, block) of every stage of a function the Ascend
    schedule rules scheduled, in program order (what both emitters read)."""
    return [(blk.name_hint, str(blk.annotations["ascend.role"]), blk)
            for blk in map(sch.get, sch.get_child_blocks(sch.get_sblock("root")))]


def pass_items(stages: list, roles: tuple, is_reduction) -> list[tuple]:
    """schedules.ascend.pass_steps' items of the recorded stages with ``roles``: (name,
    ``is_reduction(role, block)``, the buffers it reads, the buffers it writes)."""
    def names(regions) -> set:
        return {r.source.name for r in regions}
    return [(name, is_reduction(role, blk), names(blk.reads), names(blk.writes))
            for name, role, blk in stages if role in roles]


def read_row_kernel(func, symbol: str) -> RowKernel:
    """The row pattern's pieces from the scheduled function (EmitError for other patterns)."""
    sch = s_tir.Schedule(func)
    root = sch.get(sch.get_sblock("root"))
    pattern = str(root.annotations.get("ascend.pattern", ""))
    if pattern != "rows":
        raise EmitError(f"{symbol} is not of the row pattern but '{pattern}'")
    knobs = {key[len("ascend."):]: (str(v) if isinstance(v, str) or hasattr(v, "startswith") else int(v))
             for key, v in root.annotations.items() if key.startswith("ascend.") and key != "ascend.pattern"}
    stages = recorded_stages(sch)
    ops = RowTiles().operands(func)
    tile_out = next(b for n, r, b in stages if r == "tile")
    rows, cols = (iv.dom.extent for iv in tile_out.iter_vars)
    sizes = {str(rows): "t_.rows", str(cols): "t_.cols"}
    scratch = (set(ops.row_stages) - {n for n, _ in ops.rows_out}) | set(ops.accumulators)
    role = {n: "tile" for n, _ in ops.tiles_in + ops.tiles_out}
    role.update({n: "row" for n, _ in ops.rows_in + ops.rows_out})
    role.update({n: "col" for n, _ in ops.cols_in + ops.col_sums + ops.col_outs if n not in scratch})
    role.update({n: "scalar" for n, _ in ops.scalars_in})
    homeless = [f"{b.name}{tuple(b.shape)}" for b in func.params if b.name not in role and b.name not in scratch]
    if homeless:
        raise EmitError(f"{symbol}: no UB home for the row pattern's parameter(s) {', '.join(homeless)}")
    args = [(b.name, str(b.dtype), role[b.name]) for b in func.params if b.name not in scratch]
    return RowKernel(symbol, ops, stages, args, sizes, knobs, tuple(b.name for b in func.params))


# ---- pieces of the class -------------------------------------------------------------

def _gm_size(role: str) -> str:
    return {"tile": "t_.rows * t_.cols", "row": "t_.rows", "col": "t_.cols", "scalar": "1"}[role]


ROW_SCALARS = ("core_", "row0_", "nrows_", "rbase_")


def _members(k: RowKernel, buffers, scalars: tuple = ROW_SCALARS) -> list[str]:
    """The kernel class's members: the pipe, the tiling, the int64 ``scalars`` its visits
    keep (a segmented pass adds its task and segment), the buffers, the GM tensors and the
    UB tensors of every row-pass operand."""
    lines = ["TPipe pipe_;", f"{k.struct} t_;", f"int64_t {', '.join(f'{n} = 0' for n in scalars)};"]
    for b in buffers:
        if b.position == "VECCALC":
            lines.append(f"TBuf<TPosition::VECCALC> {b.name}_;")
        else:
            depth = "BUFFER_NUM" if b.count > 1 else "1"
            lines.append(f"TQue<TPosition::{b.position}, {depth}> {b.name}_;")
    lines += [f"GlobalTensor<{CPP_TYPE[d]}> g_{n}_;" for n, d, _ in k.args]
    lines.append("GlobalTensor<float> g_ws_;")
    lines += [f"LocalTensor<{CPP_TYPE[d]}> q_{n}_;" for n, d in k.ops.tiles_in + k.ops.rows_in + k.ops.cols_in]
    lines += [f"LocalTensor<float> v_{n}_;" for n, _ in k.ops.tiles_in + k.ops.cols_in]
    lines += [f"LocalTensor<float> r_{s}_;" for s in k.ops.row_stages]
    lines += [f"float s_{n} = 0.0f;" for n, _ in k.ops.scalars_in]
    lines += [f"LocalTensor<float> {b.name}_t_;" for b in buffers if b.position == "VECCALC"]
    return lines


def _init(k: RowKernel, buffers) -> list[str]:
    params = ", ".join(f"GM_ADDR {n}" for n, _, _ in k.args)
    lines = [f"__aicore__ inline void Init({params}, GM_ADDR workspace, const {k.struct}& t) {{",
             "    t_ = t;", "    core_ = GetBlockIdx();", "    row0_ = core_ * t_.block_factor;",
             "    nrows_ = row0_ < t_.rows ? (t_.rows - row0_ < t_.block_factor ? t_.rows - row0_ : t_.block_factor) : 0;"]
    for n, d, role in k.args:
        size = _gm_size(role)      # an empty tensor has no buffer: bind only what exists
        lines.append(f"    if ({size} > 0) g_{n}_.SetGlobalBuffer((__gm__ {CPP_TYPE[d]}*){n}, {size});")
    if k.ops.col_sums and k.knobs.get("sums") != "atomic":
        lines.append(f"    g_ws_.SetGlobalBuffer((__gm__ float*)workspace, t_.ws_pitch * t_.block_dim * {len(k.ops.col_sums)});")
    elif k.ops.accumulators:
        lines.append(f"    g_ws_.SetGlobalBuffer((__gm__ float*)workspace, t_.ws_pitch * {len(k.ops.accumulators)});")
    for b in buffers:
        size = b.expr.replace("ub_rows", "t_.ub_rows").replace("pitch", "t_.pitch").replace("work", "t_.work")
        count = "BUFFER_NUM, " if b.count > 1 else ("1, " if b.position != "VECCALC" else "")
        lines.append(f"    pipe_.InitBuffer({b.name}_, {count}({size}) * sizeof({CPP_TYPE[b.dtype]}));")
        if b.position == "VECCALC":
            lines.append(f"    {b.name}_t_ = {b.name}_.Get<float>();")
    lines += [f"    r_{s}_ = row_{s}_t_;" for s in k.ops.row_stages]
    lines.append("}")
    return lines


def copy_params(n: str, length: str, itemsize: str, to_ub: bool, gm_row: str = "t_.cols") -> str:
    """DataCopyExtParams of n rows of ``length`` elements between GM rows of ``gm_row``
    elements and UB rows of P (UB gaps in 32-byte blocks, GM gaps in bytes)."""
    ub_gap = f"(P * {itemsize} - AlignUp({length} * {itemsize})) / 32"
    gm_gap = f"({gm_row} - {length}) * {itemsize}"
    src, dst = (gm_gap, ub_gap) if to_ub else (ub_gap, gm_gap)
    return f"DataCopyExtParams({n}, {length} * {itemsize}, {src}, {dst}, 0)"


def _load_fns(k: RowKernel) -> list[str]:
    out = ["// IssueTiles starts the copy-in of a pass (MTE2, into a free buffer of each tile queue);",
           "// TakeTiles waits for it: split-N issues the next pass before computing this one.",
           "__aicore__ inline void IssueTiles(int64_t r0, int64_t c0, int32_t n, int32_t len) {",
           "    const int32_t P = t_.pitch; (void)P;"]
    for n, d in k.ops.tiles_in:
        ty, q = CPP_TYPE[d], f"in_{n}_"
        out += [f"    {{ LocalTensor<{ty}> a = {q}.AllocTensor<{ty}>();",
                f"      DataCopyPad(a, g_{n}_[r0 * t_.cols + c0], {copy_params('n', 'len', f'sizeof({ty})', True)}, "
                f"DataCopyPadExtParams<{ty}>(false, 0, 0, 0));",
                f"      {q}.EnQue(a); }}"]
    out += ["}", "__aicore__ inline void TakeTiles(int32_t n) {", "    const int32_t P = t_.pitch; (void)P; (void)n;"]
    for n, d in k.ops.tiles_in:
        out.append(f"    q_{n}_ = in_{n}_.DeQue<{CPP_TYPE[d]}>();")
        out.append(as_float32(f"v_{n}_", n, d, "n * P"))
    out += ["}", "__aicore__ inline void FreeTiles() {"]
    out += [f"    in_{n}_.FreeTensor(q_{n}_);" for n, _ in k.ops.tiles_in]
    out += ["}", "__aicore__ inline void LoadRows(int64_t r0, int32_t n) {", "    rbase_ = r0; (void)n;"]
    for n, d in (k.ops.rows_in if k.pad else ()):
        out += copy_in(n, d, "r0", f"DataCopyExtParams(1, n * sizeof({CPP_TYPE[d]}), 0, 0, 0)")
    if k.pad and k.ops.rows_in:  # the queue hands them to V (MTE2_V); the stages read them with GetValue
        out.append(f"    {sync('MTE2_S')}   // the scalar pipe reads the loaded rows")
    out += ["}", "__aicore__ inline void FreeRows() {"]
    out += [f"    in_{n}_.FreeTensor(q_{n}_);" for n, _ in (k.ops.rows_in if k.pad else ())]
    out += ["}", "__aicore__ inline void LoadCols(int64_t c0, int32_t len) {", "    const int32_t P = t_.pitch; (void)P;"]
    for n, d in k.ops.cols_in:
        out += copy_in(n, d, k.col_at(n), f"DataCopyExtParams(1, len * sizeof({CPP_TYPE[d]}), 0, 0, 0)")
        out.append(as_float32(f"v_{n}_", n, d, "P"))
    out += ["}", "__aicore__ inline void FreeCols() {"]
    out += [f"    in_{n}_.FreeTensor(q_{n}_);" for n, _ in k.ops.cols_in]
    out.append("}")
    return out + load_scalars(k.ops.scalars_in, k.pad)


def _context(k: RowKernel, blk, row_iter: int, col_iter: int | None) -> Context:
    """What loads mean in a row-pass block whose ``row_iter``-th and ``col_iter``-th
    iterators are the row and the column (counted after the kernel's ``lead`` iterators:
    a segmented pass's segment, whose loads ``lead_loads`` resolves)."""
    ivs = [str(iv.var) for iv in blk.iter_vars]
    src = "q_{}_.GetValue(i)" if k.pad else "g_{}_.GetValue(rbase_ + i)"
    rows = {n: (src.format(n) if d == "float32" else f"static_cast<float>({src.format(n)})")
            for n, d in k.ops.rows_in}
    rows.update({s: f"r_{s}_.GetValue(i)" for s in k.ops.row_stages})
    row_iter += k.lead
    col_iter = col_iter + k.lead if col_iter is not None else None
    loads = {(n, ("0",)): Value("scalar", f"s_{n}") for n, _ in k.ops.scalars_in}
    loads.update(k.lead_loads(ivs, row_iter, col_iter, rows))
    return Context(row_var=ivs[row_iter], col_var=ivs[col_iter] if col_iter is not None else None,
                   tiles={n: f"v_{n}_" for n, _ in k.ops.tiles_in},
                   rows=rows, cols={n: f"v_{n}_" for n, _ in k.ops.cols_in}, sizes=k.sizes,
                   temps=[f"tmp{i}_t_" for i in range(k.ops.scratch_tiles)], loads=loads)


def _row_stage_fn(k: RowKernel, name: str, blk) -> list[str]:
    """RowStage_<name>(n, len): a sum reduction accumulates into its row buffer; a per-row
    scalar is computed with scalar code."""
    out = [f"__aicore__ inline void Stage_{name}(int32_t n, int32_t len) {{", "    const int32_t P = t_.pitch; (void)P;",
           "    (void)len; (void)P;"]
    if len(blk.iter_vars) == 2 + k.lead:                # reduction over the columns
        ctx = _context(k, blk, 0, 1)
        kind, body = reduction_of(blk.body)
        value = emit_expr(body, ctx)
        if value.kind != "tile":
            raise EmitError(f"{name}: a row reduction of a non-tile value")
        out += [f"    {line}" for line in ctx.lines]
        if kind == "sum":
            add = lambda i, v: f"r_{name}_.SetValue({i}, r_{name}_.GetValue({i}) + {v});"  # noqa: E731
            out += [f"    {line}" for line in row_sums(value.text, add)]
        else:
            fold = lambda i, v: f"r_{name}_.SetValue({i}, opgen_f{kind}(r_{name}_.GetValue({i}), {v}));"  # noqa: E731
            out += [f"    {line}" for line in row_extremes(value.text, kind, fold)]
    else:
        ctx = _context(k, blk, 0, None)
        value = emit_expr(stored_value(blk.body)[0], ctx)   # an output's rounding: at its store
        if value.kind not in ("row", "scalar") or ctx.lines:
            raise EmitError(f"{name}: a per-row stage must be scalar code")
        out.append(f"    for (int32_t i = 0; i < n; ++i) r_{name}_.SetValue(i, {value.text});")
    out.append("}")
    return out


def store_values(k, target: str, dtype: str, src: str, first: str, reuse: tuple) -> list[str]:
    """n float32 values the scalar pipe set in UB tensor ``src`` to GM ``g_{target}_[first]``
    with one DataCopyPad, Cast into the output's queue first when ``target`` is narrower. The
    events: S before the copy-out (or the Cast), then MTE3 (or V) before the scalar pipe
    writes ``src`` again; ``reuse`` says, for each case, what writes it again. Shared by the
    row rule's per-row outputs and the group rule's per-task ones."""
    ty = CPP_TYPE[dtype]
    params = f"DataCopyExtParams(1, n * sizeof({ty}), 0, 0, 0)"
    if dtype == "float32":
        return [f"    {sync('S_MTE3')}   // the copy-out reads what the scalar pipe set",
                f"    DataCopyPad(g_{target}_[{first}], {src}, {params});",
                f"    {sync('MTE3_S')}   // {reuse[0]}"]
    return [f"    {sync('S_V')}   // the Cast reads what the scalar pipe set",
            f"    {{ LocalTensor<{ty}> o = out_{target}_.AllocTensor<{ty}>();",
            f"      Cast(o, {src}, RoundMode::{k.face.round_mode(dtype)}, n);",
            f"      out_{target}_.EnQue(o); o = out_{target}_.DeQue<{ty}>();",
            f"      DataCopyPad(g_{target}_[{first}], o, {params});",
            f"      out_{target}_.FreeTensor(o); }}",
            f"    {sync('V_S')}   // {reuse[1]}"]


def _store_rows_fn(k: RowKernel) -> list[str]:
    """StoreRows(r0, n): the pass's per-row outputs (row stages that are outputs) to GM, one
    copy of n values per output: a float32 one straight from its row buffer, a narrower one
    Cast into its queue first. The scalar pipe set the values (S before MTE3 or V); the next
    pass's scalar code overwrites them after the copy or the Cast read them. Without
    DataCopyPad (a ragged copy of n values) each value is a scalar GM write, flushed from the
    data cache at the end of Process (FlushRows)."""
    out = ["__aicore__ inline void StoreRows(int64_t r0, int32_t n) {", "    (void)r0; (void)n;"]
    for (target, dtype), stage in zip(k.ops.rows_out, k.ops.row_out_stages):
        ty, src = CPP_TYPE[dtype], f"r_{stage}_"
        if not k.pad:
            value = f"{src}.GetValue(i)" if dtype == "float32" else f"static_cast<{ty}>({src}.GetValue(i))"
            out.append(f"    for (int32_t i = 0; i < n; ++i) g_{target}_.SetValue(r0 + i, {value});")
            continue
        out += store_values(k, target, dtype, src, "r0", ("the next pass's scalar code overwrites the row buffer",
                                                         "the next pass's scalar code overwrites what the Cast read"))
    out += ["}", "__aicore__ inline void FlushRows() {"]
    if not k.pad:
        out += [f"    if (nrows_ > 0) DataCacheCleanAndInvalid<{CPP_TYPE[d]}, CacheLine::ENTIRE_DATA_CACHE>(g_{n}_);"
                for n, d in k.ops.rows_out[:1]]
    return out + ["}"]


def _outputs_fn(k: RowKernel) -> list[str]:
    """Outputs(r0, c0, n, len): each elementwise output of the pass to GM (store_tile)."""
    out = ["__aicore__ inline void Outputs(int64_t r0, int64_t c0, int32_t n, int32_t len) {",
           "    const int32_t P = t_.pitch; (void)P;"]
    for name, role, blk in k.stages:
        if role != "tile":
            continue
        target = blk.body.buffer.name
        expr, dtype = stored_value(blk.body)
        ty = CPP_TYPE[dtype]
        out += store_tile(expr, _context(k, blk, 0, 1), dtype, f"out_{target}_", f"g_{target}_[r0 * t_.cols + c0]",
                          copy_params('n', 'len', f'sizeof({ty})', False), "n * P", k.face.round_mode(dtype))
    out.append("}")
    return out


def _column_sum_fns(k: RowKernel) -> list[str]:
    """ColSum_<out>(n, len, c0, direct, first): accumulate this pass's rows into the UB
    accumulator (split-N) or, with ``direct``, add the one row straight into GM (split-D;
    the core's ``first`` row stores its values, there is nothing to add them to yet)."""
    out = []
    for name, role, blk in k.stages:
        if role != "column_sum":
            continue
        target = blk.body.buffer.name
        ctx = _context(k, blk, 1, 0)          # iterators (col, row)
        value = emit_expr(reduction_body(blk.body), ctx)
        if value.kind != "tile":
            raise EmitError(f"{name}: a column sum of a non-tile value")
        spare = f"acc_{target}_t_"     # split-D adds each row straight to GM: its accumulator is free
        atomic = k.knobs.get("sums") == "atomic"
        ws = f"g_ws_[{k.ws_row(target)} * t_.ws_pitch + c0]" if not atomic or target in k.ops.accumulators else ""
        one = "DataCopyExtParams(1, len * 4, 0, 0, 0)"
        out += [f"__aicore__ inline void ColSum_{target}(int32_t n, int32_t len, int64_t c0, bool direct, "
                "bool first) {", "    const int32_t P = t_.pitch; (void)P; (void)first;"]
        out += [f"    {line}" for line in ctx.lines]
        out += ["    if (!direct) {",
                f"        for (int32_t i = 0; i < n; ++i) Add(acc_{target}_t_, acc_{target}_t_, {value.text}[i * P], P);",
                "        return;", "    }"]
        if atomic:
            dest = ws or f"g_{target}_[c0]"
            out += [f"    {sync('V_MTE3')}   // the copy-out reads the vector result",
                    "    SetAtomicAdd<float>();", f"    DataCopyPad({dest}, {value.text}, {one});",
                    "    SetAtomicNone();"]
        else:
            # The core's first row writes its workspace row (no zeros to read back); later
            # rows read-modify-write it: the copy-in re-reads GM this core's last copy-out
            # wrote (MTE3) into a tile the vector pipe last used (V).
            out += ["    if (first) {", f"        {sync('V_MTE3')}   // the copy-out reads the vector result",
                    f"        DataCopyPad({ws}, {value.text}, {one});",
                    f"        {sync('MTE3_V')}   // the next vector op may overwrite the tile", "        return;",
                    "    }"]
            out += [f"    {sync('MTE3_MTE2', 'V_MTE2')}",
                    f"    DataCopyPad({spare}, {ws}, {one}, DataCopyPadExtParams<float>(false, 0, 0, 0));",
                    f"    {sync('MTE2_V')}", f"    Add({spare}, {spare}, {value.text}, len);",
                    f"    {sync('V_MTE3')}", f"    DataCopyPad({ws}, {spare}, {one});"]
        # The copy-out (MTE3) reads a scratch tile the next chunk's vector ops (V) overwrite.
        out.append(f"    {sync('MTE3_V')}")
        out.append("}")
    return out
