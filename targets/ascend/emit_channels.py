"""Scheduled TIR of the channel pattern -> an AscendC kernel (BatchNorm-like ops).

The channel pattern (schedules/ascend.py, ChannelTiles): tensors (N, C, HW), per-channel
(C,) inputs and outputs, (1,) inputs read once per call, (K,) inputs summed whole once per
core (a channel map's call sums: ``call_sum`` blocks -> a scalar loop of GM reads in
LoadScalars); the channels are split over the cores. Per channel the kernel sees its N x HxW elements as N batch rows of HxW contiguous
elements, C x HW apart in GM: a pass is a (batch rows x pitch) tile, so one strided copy
moves several rows and the row machinery of the other patterns applies with rows = batch
rows of one channel:
  * ``statistic`` blocks (per-channel stages that read no sum) -> scalar code in registers
    (``s_<buffer>``), before the channel's first pass; one may read single elements of a
    tile input (a shift by the channel's first element): a scalar GM read at channel
    ``ch``, which an if_then_else guard (C++ ?:) leaves unread for an empty channel;
  * ``channel_sum`` blocks (sums over N and HW) -> the vector calls of their body over the
    tile, then row sums (WholeReduceSum / ReduceSum per batch row) into a float32 register;
    an (N,) input (role ``batch``, one value per batch row, no UB buffer) is a per-row value
    read from GM by the scalar unit at batch row ``b0 + i`` (a per-row Muls; summed alone,
    value x len per row), and a single element of a tile input (the channel's first) a
    scalar GM read at ``ch``: such a sum's function takes (ch, b0, n, len), the others (n, len);
  * ``channel_stage`` blocks (per-channel stages that read the sums) -> scalar code;
  * ``tile`` blocks -> vector calls over the tile, per-channel values as scalars, Cast with
    CAST_RINT to the output's dtype, a strided copy out;
  * per-channel outputs (a sum, or a stage after the sums, written to a (C,) parameter) ->
    staged in a float32 UB vector per chunk of channels, rounded and copied out per chunk.
Modes (runtime, from the host tiling): channel (the whole channel in one pass: one read),
rows / hw-chunk (a sums pass over the channel, then an outputs pass), empty (N or HxW is 0:
no pass, the per-channel outputs are still written).
"""
from __future__ import annotations

from dataclasses import dataclass

from opgen.lazy import s_tir
from opgen.schedules.ascend import ChannelTiles
from opgen.targets.ascend.emitter import CPP_TYPE, as_float32, camel, copy_in, load_scalars, recorded_stages, store_tile
from opgen.targets.ascend.emit_groups import scalar_reads_after_load
from opgen.targets.ascend.exprs import Context, EmitError, Value, emit_expr, reduction_body, row_sums, stored_value, sync

CHANNEL_FIELDS = ("N", "C", "HW", "tasks", "block_dim", "block_factor", "ub_rows", "ub_cols", "pitch", "mode",
                  "ub_chans", "work")
CHANNEL_MODES = {"channel": 0, "rows": 1, "hw-chunk": 2, "empty": 3}


@dataclass
class ChannelKernel:
    symbol: str
    ops: object                # ChannelOperands
    stages: list               # (name, role, SBlock) in program order
    args: list                 # (name, dtype, role) kernel GM arguments in parameter order
    sizes: dict                # size variable name -> C++
    knobs: dict
    param_names: tuple
    pad: bool = True           # the product has DataCopyPad (else per-call values are GM reads)
    pattern = "channels"
    modes = CHANNEL_MODES

    @property
    def struct(self) -> str:
        return f"{camel(self.symbol)}TilingData"

    @property
    def fields(self) -> tuple:
        """The tiling struct's fields: K (the call inputs' length) after them for a channel map."""
        return CHANNEL_FIELDS + (("K",) if self.ops.calls_in else ())

    def size_args(self, by_name: dict) -> tuple:
        tile = next(n for n, _, role in self.args if role == "tile")
        calls = tuple(int(by_name[n].shape[0]) for n, _ in self.ops.calls_in[:1])
        return tuple(int(v) for v in by_name[tile].shape) + calls    # N, C, HW[, K]

    def workspace_floats(self, t) -> int:
        return 0               # a channel belongs to one core: nothing crosses cores


def read_channel_kernel(func, symbol: str, knobs: dict) -> ChannelKernel:
    """The channel pattern's pieces from the scheduled function (EmitError for a parameter
    the pattern has no home for, e.g. a (C, N) input)."""
    sch = s_tir.Schedule(func)
    stages = recorded_stages(sch)
    ops = ChannelTiles().operands(func)
    tile = next((b for _, r, b in stages if r == "tile"), None)
    # No elementwise output (patterns.channel_reduction): a sum's (C, N, HW) iterators.
    block, axes = ((tile, ("N", "C", "HW")) if tile is not None else
                   (next(b for _, r, b in stages if r == "channel_sum"), ("C", "N", "HW")))
    sizes = {str(iv.dom.extent): f"t_.{f}" for iv, f in zip(block.iter_vars, axes)}
    role = {n: "tile" for n, _ in ops.tiles_in + ops.tiles_out}
    role.update({n: "chan" for n, _ in ops.chans_in + ops.chan_outs})
    role.update({n: "scalar" for n, _ in ops.scalars_in})
    role.update({n: "call" for n, _ in ops.calls_in})
    role.update({n: "batch" for n, _ in ops.batch_in})
    lengths = {str(b.iter_vars[1].dom.extent) for _, r, b in stages if r == "call_sum" and len(b.iter_vars) == 2}
    if len(lengths) > 1:
        raise EmitError(f"{symbol}: call sums over inputs of different lengths (the tiling has one K)")
    sizes.update(dict.fromkeys(lengths, "t_.K"))
    written = {r.source.name for _, _, b in stages for r in b.writes}
    homeless = [f"{b.name}{tuple(b.shape)}" for b in func.params if b.name not in role and b.name not in written]
    if homeless:
        raise EmitError(f"{symbol}: no UB home for the channel pattern's input(s) {', '.join(homeless)}")
    args = [(b.name, str(b.dtype), role[b.name]) for b in func.params if b.name in role]
    if [n for n, _, _ in args] != [b.name for b in func.params[:len(args)]]:
        raise EmitError(f"{symbol}: the kernel's tensors are not its leading parameters")
    return ChannelKernel(symbol, ops, stages, args, sizes, knobs, tuple(b.name for b in func.params))


def _names(blk) -> list[str]:
    return [str(iv.var) for iv in blk.iter_vars]


def _context(k: ChannelKernel, axes: dict) -> Context:
    """Homes of every load of a block; ``axes`` maps n/c/h to its iterator names (a
    per-channel stage has only c). Every per-channel and per-call value is a register."""
    a = axes
    loads = {}
    if "n" in a:
        for name, _ in k.ops.tiles_in:
            loads[(name, (a["n"], a["c"], a["h"]))] = Value("tile", f"v_{name}_")
    for name, _ in k.ops.chans_in:
        loads[(name, (a["c"],))] = Value("scalar", f"s_{name}")
    for name, _ in k.ops.scalars_in:
        loads[(name, ("0",))] = Value("scalar", f"s_{name}")
    for name in k.ops.statistics + k.ops.sums + k.ops.chan_stages:
        loads[(name, (a["c"],))] = Value("scalar", f"s_{name}")
    for name in k.ops.call_sums:
        loads[(name, ("0",))] = Value("scalar", f"s_{name}")
    # A per-channel stage may read single elements of a tile input (a channel's first
    # element): a scalar GM read at the channel ``ch``; the caller guards it where N x HxW is 0.
    elements = {} if "n" in a else {name: (f"g_{name}_", ("t_.N", "t_.C", "t_.HW")) for name, _ in k.ops.tiles_in}
    return Context(row_var=None, col_var=None, tiles={}, rows={}, cols={}, sizes=k.sizes,
                   temps=[f"tmp{i}_t_" for i in range(k.ops.scratch_tiles)], loads=loads, elements=elements,
                   index_vars={} if "n" in a else {a["c"]: "ch"})


def _scalar_stage(k: ChannelKernel, name: str, blk) -> str:
    """``s_<buffer> = <value>;`` of a per-channel stage (its float32 value: an output stage
    is rounded to the output's dtype only when it is stored)."""
    (c_,) = _names(blk)
    ctx = _context(k, {"c": c_})
    expr, _ = stored_value(blk.body)
    value = emit_expr(expr, ctx)
    if value.kind != "scalar" or ctx.lines:
        raise EmitError(f"{name}: a per-channel stage must be scalar code")
    return f"s_{blk.body.buffer.name} = {value.text};"


def reads_by_position(k: ChannelKernel, blk) -> bool:
    """Whether a channel sum reads by where its pass is, not only its tile: a per-batch-row
    input (batch row ``b0 + i`` of the pass), or single elements of a tile input (the
    channel's first element, a shift): its Sum function then takes the channel and the
    pass's first batch row too (``SumArgs``)."""
    its = [str(iv.var) for iv in blk.iter_vars]               # c, n, h
    point = [its[1], its[0], its[2]]                           # a tile input's [n, c, h]
    batch = {n for n, _ in k.ops.batch_in}
    tiles = {n for n, _ in k.ops.tiles_in}
    for region in blk.reads:
        name = region.source.name
        at = [(str(r.min), int(r.extent) if type(r.extent).__name__ == "IntImm" else None) for r in region.region]
        if name in batch or (name in tiles and at != [(i, 1) for i in point]):
            return True
    return False


def sum_args(k: ChannelKernel, blk) -> tuple[str, str]:
    """(parameters, arguments) of a Sum function: the pass's batch rows and HxW elements,
    and, for a sum reading by position, the channel and the pass's first batch row."""
    if reads_by_position(k, blk):
        return "int64_t ch, int64_t b0, int32_t n, int32_t len", "ch, b0, n, len"
    return "int32_t n, int32_t len", "n, len"


def _sum_context(k: ChannelKernel, blk) -> Context:
    """A channel sum's homes: the tile inputs as tiles, the per-channel values as registers,
    a per-batch-row input as a per-row value (batch row ``b0 + i``: a scalar GM read), and
    single elements of a tile input as scalar GM reads at the channel ``ch``."""
    c_, n_, h_ = _names(blk)
    ctx = _context(k, {"n": n_, "c": c_, "h": h_})
    if not reads_by_position(k, blk):
        return ctx
    for name, _ in k.ops.batch_in:
        ctx.loads[(name, (n_,))] = Value("row", f"static_cast<float>(g_{name}_.GetValue(b0 + i))")
    ctx.elements = {name: (f"g_{name}_", ("t_.N", "t_.C", "t_.HW")) for name, _ in k.ops.tiles_in}
    ctx.index_vars = {c_: "ch"}
    return ctx


def _sum_fn(k: ChannelKernel, name: str, blk) -> list[str]:
    """Sum_<buffer>(n, len): this pass's contribution to a channel sum (float32 register). A
    per-row value (a per-batch-row input alone: a count) is the same over a row's ``len``
    elements: its row's contribution is value x len, one product per row."""
    ctx = _sum_context(k, blk)
    value = emit_expr(reduction_body(blk.body), ctx)
    acc = f"s_{blk.body.buffer.name}"
    if value.kind == "row" and not ctx.lines:
        body = [f"for (int32_t i = 0; i < n; ++i) {{ {acc} += {value.text} * static_cast<float>(len); }}"]
    elif value.kind == "tile":
        body = ["const int32_t P = t_.pitch;"] + ctx.lines + row_sums(value.text, lambda i, v: f"{acc} += {v};")
    else:
        raise EmitError(f"{name}: a channel sum of a {value.kind} value")
    return ([f"__aicore__ inline void Sum_{blk.body.buffer.name}({sum_args(k, blk)[0]}) {{"]
            + [f"    {line}" for line in body] + ["}"])


def _call_sum(k: ChannelKernel, blk) -> list[str]:
    """A call sum (patterns.channel_map: a one-element sum of a (K,) input, the counter's
    total) as scalar GM reads into its float32 register, once per core, in index order; or
    a one-element scalar of the call sums before it (its reciprocal), in a register too."""
    acc = f"s_{blk.body.buffer.name}"
    names = _names(blk)
    index_vars = {names[-1]: "kk"} if len(names) == 2 else {}
    ctx = Context(row_var=None, col_var=None, tiles={}, rows={}, cols={}, sizes=k.sizes, temps=[],
                  loads={(name, ("0",)): Value("scalar", f"s_{name}") for name in k.ops.call_sums},
                  elements={name: (f"g_{name}_", ("t_.K",)) for name, _ in k.ops.calls_in}, index_vars=index_vars)
    value = emit_expr(reduction_body(blk.body) if index_vars else stored_value(blk.body)[0], ctx)
    if value.kind != "scalar" or ctx.lines:
        raise EmitError(f"{blk.name_hint}: a call sum must be scalar code")
    if not index_vars:
        return [f"    {acc} = {value.text};"]
    return [f"    {acc} = 0.0f;", f"    for (int64_t kk = 0; kk < t_.K; ++kk) {acc} += {value.text};"]


def _copy(n: str, length: str, itemsize: str, to_ub: bool) -> str:
    """Copy parameters of ``n`` batch rows of one channel: ``length`` elements each, C x HW
    apart in GM (a gap of 0 for one row: the stride field is not read, and a large gap
    might not fit it), ``P`` apart in UB (gaps in 32-byte blocks)."""
    ub_gap = f"(P * {itemsize} - AlignUp({length} * {itemsize})) / 32"
    gm_gap = f"({n} > 1 ? (t_.C * t_.HW - {length}) * {itemsize} : 0)"
    src, dst = (gm_gap, ub_gap) if to_ub else (ub_gap, gm_gap)
    return f"DataCopyExtParams({n}, {length} * {itemsize}, {src}, {dst}, 0)"


GM_AT = "(b0 * t_.C + ch) * t_.HW + h0"


def tile_fns(k: ChannelKernel) -> list[str]:
    """LoadTiles / FreeTiles / Outputs: one pass over batch rows [b0, b0 + n) and HxW
    elements [h0, h0 + len) of channel ``ch``."""
    out = ["__aicore__ inline void LoadTiles(int64_t ch, int64_t b0, int32_t n, int64_t h0, int32_t len) {",
           "    const int32_t P = t_.pitch;"]
    for name, d in k.ops.tiles_in:
        out += copy_in(name, d, GM_AT, _copy("n", "len", f"sizeof({CPP_TYPE[d]})", True))
        out.append(as_float32(f"v_{name}_", name, d, "n * P"))
    out += ["}", "__aicore__ inline void FreeTiles() {"]
    out += [f"    in_{name}_.FreeTensor(q_{name}_);" for name, _ in k.ops.tiles_in]
    out += ["}", "__aicore__ inline void Outputs(int64_t ch, int64_t b0, int32_t n, int64_t h0, int32_t len) {",
            "    const int32_t P = t_.pitch;" if k.ops.tiles_out else   # a channel reduction writes no tile
            "    (void)ch; (void)b0; (void)n; (void)h0; (void)len;"]
    for name, role, blk in k.stages:
        if role != "tile":
            continue
        n_, c_, h_ = _names(blk)
        ctx = _context(k, {"n": n_, "c": c_, "h": h_})
        expr, dtype = stored_value(blk.body)
        target, ty = blk.body.buffer.name, CPP_TYPE[dtype]
        out += store_tile(expr, ctx, dtype, f"out_{target}_", f"g_{target}_[{GM_AT}]",
                          _copy('n', 'len', f'sizeof({ty})', False), "n * P", k.face.round_mode(dtype))
    out.append("}")
    return out


def _store_events(k, when: str) -> list[str]:
    """The events around StoreChans: before, the copy-out (MTE3) of float32 outputs and the
    Cast (V) of the others wait for the scalar pipe's SetValue; after, the next chunk's
    SetValue waits for them."""
    dtypes = {d for _, d in k.ops.chan_outs}
    pipes = (["MTE3"] if "float32" in dtypes else []) + (["V"] if dtypes - {"float32"} else [])
    return [f"S_{p}" if when == "S" else f"{p}_S" for p in pipes]


def chan_fns(k: ChannelKernel) -> list[str]:
    """LoadScalars (once per core), LoadChans / StoreChans / FreeChans (per chunk of ``nc``
    channels from ``c0``), BeginChannel / EndChannel (per channel ``i`` of the chunk), and
    Statistics / Stages (the per-channel scalar code before and after the sums)."""
    out = load_scalars(k.ops.scalars_in, k.pad)[:-1]
    for _, role, blk in k.stages:
        if role == "call_sum":
            out += _call_sum(k, blk)
    out.append("}")
    out += ["__aicore__ inline void LoadChans(int64_t c0, int32_t nc) {"]
    for name, d in k.ops.chans_in:
        out += copy_in(name, d, "c0", f"DataCopyExtParams(1, nc * sizeof({CPP_TYPE[d]}), 0, 0, 0)")
        out.append(as_float32(f"cf_{name}_", name, d, "nc"))
    out += scalar_reads_after_load(k.ops.chans_in)
    out += ["    (void)c0; (void)nc;", "}", "__aicore__ inline void FreeChans() {"]
    out += [f"    in_{name}_.FreeTensor(q_{name}_);" for name, _ in k.ops.chans_in]
    out += ["}", "__aicore__ inline void StoreChans(int64_t c0, int32_t nc) {",
            f"    {sync(*_store_events(k, 'S'))}   // the channels' SetValue (S) before the copy-out or Cast",
            "    (void)c0; (void)nc;"]
    for name, d in k.ops.chan_outs:
        ty, one = CPP_TYPE[d], f"DataCopyExtParams(1, nc * sizeof({CPP_TYPE[d]}), 0, 0, 0)"
        if d == "float32":
            out.append(f"    DataCopyPad(g_{name}_[c0], co_{name}_t_, {one});")
            continue
        out += [f"    {{ LocalTensor<{ty}> o = out_{name}_.AllocTensor<{ty}>();",
                f"      Cast(o, co_{name}_t_, RoundMode::{k.face.round_mode(d)}, nc);",
                f"      out_{name}_.EnQue(o); o = out_{name}_.DeQue<{ty}>();",
                f"      DataCopyPad(g_{name}_[c0], o, {one});", f"      out_{name}_.FreeTensor(o); }}"]
    # The copy-out (MTE3) reads the staging vectors the next chunk's SetValue (S) overwrites.
    out += [f"    {sync(*_store_events(k, 'after'))}", "}", "__aicore__ inline void BeginChannel(int32_t i) {", "    (void)i;"]
    out += [f"    s_{name} = cf_{name}_.GetValue(i);" for name, _ in k.ops.chans_in]
    out += [f"    s_{name} = 0.0f;" for name in k.ops.sums]
    out += ["}", "__aicore__ inline void EndChannel(int32_t i) {", "    (void)i;"]
    out += [f"    co_{name}_t_.SetValue(i, s_{name});" for name, _ in k.ops.chan_outs]
    out += ["}", "__aicore__ inline void Statistics(int64_t ch) {", "    (void)ch;"]
    out += [f"    {_scalar_stage(k, name, blk)}" for name, role, blk in k.stages if role == "statistic"]
    out += ["}", "__aicore__ inline void Stages(int64_t ch) {", "    (void)ch;"]
    out += [f"    {_scalar_stage(k, name, blk)}" for name, role, blk in k.stages if role == "channel_stage"]
    out.append("}")
    for name, role, blk in k.stages:
        if role == "channel_sum":
            out += _sum_fn(k, name, blk)
    return out
