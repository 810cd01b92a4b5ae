"""TIR expressions -> AscendC vector calls over UB tiles (patterns, never ops).

A block body of the scheduled TIR is an expression over buffer loads. Each load is
classified by its indices against the block's row and column iterators:
  * ``tile``:   X[row, col]  -> a float32 UB tile of the pass (``n`` rows x ``P`` pitch);
  * ``row``:    X[row]       -> one value per row of the pass, read with GetValue(i);
  * ``col``:    X[col]       -> a float32 UB vector of ``P`` elements (broadcast over rows);
  * ``scalar``: constants and size variables (C++ expressions of the tiling struct).
Binary operations pick the vector form their operand kinds call for: Add/Sub/Mul/Div/Max/Min
on two tiles (one count-based call over the whole pass), Adds/Muls/Maxs/Mins with a scalar,
a loop over the pass's rows for a per-row value (Muls(dst[i*P], a[i*P], v_i, P)) or a column
vector (Mul(dst[i*P], a[i*P], col, P)). A column vector with a scalar or another column
vector stays a column vector (one call over its P elements: Adds(dst, col, 1.0f, P)), held
in row 0 of a temporary; a tile computed over that temporary runs its rows last to first,
so the column is read before row 0 overwrites it. Tile-valued sub-expressions live in a pool of float32
temporaries (the schedule budgets what schedules/ascend_scratch.py counts); an expression
needing more is refused with its text. Scalar and per-row values become C++ scalar code.
"""
from __future__ import annotations

from dataclasses import dataclass, field

VECTOR_BINARY = {"Add": "Add", "Sub": "Sub", "Mul": "Mul", "Div": "Div", "Max": "Max", "Min": "Min"}
SCALAR_BINARY = {"Add": "({a} + {b})", "Sub": "({a} - {b})", "Mul": "({a} * {b})", "Div": "({a} / {b})",
                 "Max": "opgen_fmax({a}, {b})", "Min": "opgen_fmin({a}, {b})"}
VECTOR_UNARY = {"tirx.exp": "Exp", "tirx.sqrt": "Sqrt", "tirx.rsqrt": "Rsqrt", "tirx.log": "Ln", "tirx.fabs": "Abs"}
SCALAR_UNARY = {"tirx.exp": "expf({a})", "tirx.sqrt": "sqrtf({a})", "tirx.rsqrt": "(1.0f / sqrtf({a}))",
                "tirx.log": "logf({a})", "tirx.fabs": "fabsf({a})", "tirx.nearbyint": "nearbyintf({a})"}
# Rounding to an integer in float32: a float -> float Cast in that RoundMode (asc-devkit Cast.md,
# table 4: float -> float takes CAST_RINT/FLOOR/CEIL/ROUND/TRUNC). nearbyint is round half to
# even, as C's nearbyintf in the default rounding mode is for the scalar form.
ROUNDING = {"tirx.nearbyint": "CAST_RINT"}


LOADS = ("BufferLoad", "TensorLoad")   # TVM 0.27 prints and names a buffer load TensorLoad


class EmitError(ValueError):
    """A TIR construct the Ascend emitter has no pattern for (the message names it)."""


@dataclass
class Value:
    kind: str                  # tile, row, col, scalar
    text: str                  # tile/col: a LocalTensor<float> name; row: C++ with {i}; scalar: C++
    temp: bool = False         # a pool temporary this expression owns


@dataclass
class Context:
    """What loads mean in one block: iterator names -> roles, buffers -> UB tensors."""

    row_var: str | None
    col_var: str | None
    tiles: dict                # buffer name -> LocalTensor<float> name (tile, f32 view)
    rows: dict                 # buffer name -> C++ of element i (e.g. "rstd_t.GetValue(i)")
    cols: dict                 # buffer name -> LocalTensor<float> name
    sizes: dict                # size variable name -> C++ (e.g. "t_.cols")
    temps: list                # free temporaries (LocalTensor<float> names)
    lines: list = field(default_factory=list)
    loads: dict = field(default_factory=dict)   # (buffer, index var names) -> Value: explicit homes
    # buffer name -> (C++ GM tensor, C++ extents): an element read straight from GM by a
    # scalar load at any integer index (a per-channel stage reading one element of a tile input)
    elements: dict = field(default_factory=dict)
    index_vars: dict = field(default_factory=dict)   # iterator name -> C++ integer of its value

    def take(self, expr) -> str:
        if not self.temps:
            raise EmitError(f"expression needs more float32 temporaries than the schedule budgets: {expr}")
        return self.temps.pop(0)

    def give(self, value: Value) -> None:
        if value.temp:
            self.temps.insert(0, value.text)


def _kind(node) -> str:
    return type(node).__name__


def dtype_of(node) -> str:
    """An expression's dtype (PrimExpr.dtype; TVM 0.27 names it ``ty``)."""
    return str(node.dtype if hasattr(node, "dtype") else node.ty)


def load_name(node) -> str:
    """The buffer a load reads (BufferLoad.buffer; TVM 0.27's TensorLoad calls it source)."""
    return (node.buffer if hasattr(node, "buffer") else node.source).name


def _load(node, ctx: Context) -> Value:
    name = load_name(node)
    idx = [str(i) for i in node.indices]
    if (name, tuple(idx)) in ctx.loads:
        return ctx.loads[(name, tuple(idx))]
    if idx == [ctx.row_var, ctx.col_var] and name in ctx.tiles:
        return Value("tile", ctx.tiles[name])
    if idx == [ctx.row_var] and name in ctx.rows:
        return Value("row", ctx.rows[name])
    if idx == [ctx.col_var] and name in ctx.cols:
        return Value("col", ctx.cols[name])
    if name in ctx.elements and len(node.indices) == len(ctx.elements[name][1]):
        gm, extents = ctx.elements[name]
        offset = _index(node.indices[0], ctx)
        for extent, index in zip(extents[1:], node.indices[1:]):
            offset = f"({offset} * {extent} + {_index(index, ctx)})"
        return Value("scalar", f"static_cast<float>({gm}.GetValue({offset}))")
    raise EmitError(f"no UB home for load {name}[{', '.join(idx)}] (rows {ctx.row_var}, cols {ctx.col_var})")


INDEX_BINARY = {"Add": "+", "Sub": "-", "Mul": "*"}


def _index(node, ctx: Context) -> str:
    """C++ int64 of an integer index expression (constants, iterators, sizes, + - *)."""
    kind = _kind(node)
    if kind == "IntImm":
        return f"{int(node.value)}"
    if kind in ("Var", "SizeVar") and node.name in ctx.index_vars:
        return ctx.index_vars[node.name]
    if kind in ("Var", "SizeVar") and node.name in ctx.sizes:
        return f"static_cast<int64_t>({ctx.sizes[node.name]})"
    if kind in INDEX_BINARY:
        return f"({_index(node.a, ctx)} {INDEX_BINARY[kind]} {_index(node.b, ctx)})"
    raise EmitError(f"no AscendC pattern for the index {node}")


def _scalar_text(v: Value) -> str:
    return v.text


def _combine_scalars(op: str, a: Value, b: Value) -> Value:
    kind = "row" if "row" in (a.kind, b.kind) else "scalar"
    return Value(kind, SCALAR_BINARY[op].format(a=a.text, b=b.text))


def _row_loop(ctx: Context, call: str, reverse: bool = False) -> None:
    """A loop of ``call`` over the pass's rows; ``reverse`` runs the last row first (a
    result written over the column vector it reads, which lives in row 0's place)."""
    head = "for (int32_t i = n - 1; i >= 0; --i)" if reverse else "for (int32_t i = 0; i < n; ++i)"
    ctx.lines.append(f"{head} {{ {call} }}")


def _count(v: Value) -> str:
    """Elements of one vector call over a vector value: a column vector's P, a tile's n * P."""
    return "P" if v.kind == "col" else "n * P"


def _over_column(dst: str, *values: Value) -> bool:
    """Whether a per-row loop writes its tile over the scratch tile holding a column vector
    it reads (the column's P elements are row 0 of that tile: the rows go last to first, so
    each row reads the column before row 0 is overwritten, in place, last)."""
    return any(v.kind == "col" and v.text == dst for v in values)


def _tile_scalar(op: str, dst: str, t: Value, s: Value, tile_first: bool, ctx: Context) -> None:
    """dst = t op s (or s op t) for a tile or column vector t and a scalar or per-row value s
    (a column vector with a per-row value makes a tile, row by row)."""
    per_row = s.kind == "row"
    src = f"{t.text}[i * P]" if per_row and t.kind == "tile" else t.text
    out = f"{dst}[i * P]" if per_row else dst
    count = "P" if per_row else _count(t)
    val = s.text
    if op == "Add":
        calls = [f"Adds({out}, {src}, {val}, {count});"]
    elif op == "Mul":
        calls = [f"Muls({out}, {src}, {val}, {count});"]
    elif op in ("Max", "Min"):
        calls = [f"{op}s({out}, {src}, {val}, {count});"]
    elif op == "Sub":
        calls = ([f"Adds({out}, {src}, -({val}), {count});"] if tile_first else
                 [f"Muls({out}, {src}, -1.0f, {count});", f"Adds({out}, {out}, {val}, {count});"])
    elif op == "Div":
        calls = ([f"Muls({out}, {src}, 1.0f / ({val}), {count});"] if tile_first else
                 [f"Reciprocal({out}, {src}, {count});", f"Muls({out}, {out}, {val}, {count});"])
    else:
        raise EmitError(f"no vector form of {op} with a scalar")
    if per_row:
        _row_loop(ctx, " ".join(calls), reverse=_over_column(dst, t))
    else:
        ctx.lines.extend(calls)


def _binary(op: str, node, ctx: Context) -> Value:
    """a op b. Two column vectors, or one with a scalar, make a column vector (P elements,
    one call); with a tile or a per-row value, a tile (a loop over the rows)."""
    a, b = emit_expr(node.a, ctx), emit_expr(node.b, ctx)
    if a.kind in ("scalar", "row") and b.kind in ("scalar", "row"):
        return _combine_scalars(op, a, b)
    kind = "col" if {a.kind, b.kind} <= {"col", "scalar"} else "tile"
    dst = a.text if a.temp else b.text if b.temp else ctx.take(node)
    if a.kind == b.kind:                                   # two tiles or two column vectors
        ctx.lines.append(f"{VECTOR_BINARY[op]}({dst}, {a.text}, {b.text}, {_count(a)});")
    elif {a.kind, b.kind} == {"tile", "col"}:
        x = f"{a.text}[i * P]" if a.kind == "tile" else a.text
        y = f"{b.text}[i * P]" if b.kind == "tile" else b.text
        _row_loop(ctx, f"{VECTOR_BINARY[op]}({dst}[i * P], {x}, {y}, P);", reverse=_over_column(dst, a, b))
    else:
        vector, other = (a, b) if a.kind in ("tile", "col") else (b, a)
        _tile_scalar(op, dst, vector, other, vector is a, ctx)
    for v in (a, b):
        if v.temp and v.text != dst:
            ctx.give(v)
    return Value(kind, dst, temp=True)


def _sigmoid(a: Value, node, ctx: Context) -> Value:
    """1 / (1 + exp(-a)): AscendC's vector unit has no sigmoid instruction; four passes."""
    if a.kind in ("scalar", "row"):
        return Value(a.kind, f"(1.0f / (1.0f + expf(-({a.text}))))")
    if a.kind == "col":
        raise EmitError(f"sigmoid of a column vector: {node}")
    dst = a.text if a.temp else ctx.take(node)
    ctx.lines.extend([f"Muls({dst}, {a.text}, -1.0f, n * P);", f"Exp({dst}, {dst}, n * P);",
                      f"Adds({dst}, {dst}, 1.0f, n * P);", f"Reciprocal({dst}, {dst}, n * P);"])
    return Value("tile", dst, temp=True)


COMPARE = {"LT": "<", "LE": "<=", "GT": ">", "GE": ">=", "EQ": "==", "NE": "!="}
LOGIC = {"And": "&&", "Or": "||"}


def _condition(node, ctx: Context) -> str:
    """C++ bool of a scalar condition (comparisons of scalar values, && and ||)."""
    kind = _kind(node)
    if kind in LOGIC:
        return f"({_condition(node.a, ctx)} {LOGIC[kind]} {_condition(node.b, ctx)})"
    if kind == "Not":
        return f"(!{_condition(node.a, ctx)})"
    if kind in COMPARE:
        a, b = emit_expr(node.a, ctx), emit_expr(node.b, ctx)
        if a.kind != "scalar" or b.kind != "scalar":
            raise EmitError(f"a condition over vector values: {node}")
        return f"({a.text} {COMPARE[kind]} {b.text})"
    raise EmitError(f"no AscendC pattern for the condition {node}")


def _select(node, ctx: Context) -> Value:
    """if_then_else(cond, a, b) of scalar values: C++'s ?:, which evaluates only the branch
    taken (a guarded GM read stays unread where the guard is false)."""
    cond = _condition(node.args[0], ctx)
    lines = len(ctx.lines)
    a, b = emit_expr(node.args[1], ctx), emit_expr(node.args[2], ctx)
    if a.kind != "scalar" or b.kind != "scalar" or len(ctx.lines) != lines:
        raise EmitError(f"if_then_else of vector values: {node}")
    return Value("scalar", f"({cond} ? {a.text} : {b.text})")


def _call(node, ctx: Context) -> Value:
    name = node.op.name
    if name.endswith(".if_then_else") and len(node.args) == 3:   # TVM 0.27: prim.if_then_else
        return _select(node, ctx)
    if name == "tirx.sigmoid" and len(node.args) == 1:
        return _sigmoid(emit_expr(node.args[0], ctx), node, ctx)
    if name not in SCALAR_UNARY or len(node.args) != 1:
        raise EmitError(f"no AscendC pattern for call {name}")
    a = emit_expr(node.args[0], ctx)
    if a.kind in ("scalar", "row"):
        return Value(a.kind, SCALAR_UNARY[name].format(a=a.text))
    if a.kind == "col":
        raise EmitError(f"{name} of a column vector: {node}")
    dst = a.text if a.temp else ctx.take(node)
    if name in ROUNDING:
        ctx.lines.append(f"Cast({dst}, {a.text}, RoundMode::{ROUNDING[name]}, n * P);")
    else:
        ctx.lines.append(f"{VECTOR_UNARY[name]}({dst}, {a.text}, n * P);")
    return Value("tile", dst, temp=True)


def integral(node) -> bool:
    """Whether a float32 expression's value is an integer by construction: a rounding call,
    or a Min/Max of such values and integer constants (a clip after the rounding)."""
    kind = _kind(node)
    if kind == "Call":
        return node.op.name in ROUNDING
    if kind == "FloatImm":
        return float(node.value).is_integer()
    if kind in ("Max", "Min"):
        return integral(node.a) and integral(node.b)
    return False


def emit_expr(node, ctx: Context) -> Value:
    """The value of ``node`` for the current pass; vector calls are appended to ctx.lines."""
    kind = _kind(node)
    if kind in VECTOR_BINARY:
        return _binary(kind, node, ctx)
    if kind in LOADS:
        return _load(node, ctx)
    if kind == "Cast":
        if dtype_of(node) != "float32":
            raise EmitError(f"a cast to {dtype_of(node)} inside an expression (only the stored value is rounded)")
        return emit_expr(node.value, ctx)          # loads are float32 views already
    if kind == "FloatImm":
        return Value("scalar", f"{float(node.value)!r}f".replace("inff", "INFINITY"))
    if kind == "IntImm":
        return Value("scalar", f"{int(node.value)}")
    if kind in ("Var", "SizeVar"):
        if node.name not in ctx.sizes:
            raise EmitError(f"unknown variable {node.name}")
        return Value("scalar", f"static_cast<float>({ctx.sizes[node.name]})")
    if kind == "Call":
        return _call(node, ctx)
    raise EmitError(f"no AscendC pattern for {kind}: {node}")


REDUCERS = {"Add": "sum", "Max": "max", "Min": "min"}


def reduction_of(store) -> tuple[str, object]:
    """("sum" | "max" | "min", E) of a reduction's update ``acc[...] = acc[...] op E``."""
    value = store.value
    kind = _kind(value)
    if kind in REDUCERS and _kind(value.a) in LOADS and load_name(value.a) == store.buffer.name:
        return REDUCERS[kind], value.b
    raise EmitError(f"no AscendC pattern for the reduction {store.buffer.name} = {value}")


def reduction_body(store) -> object:
    """E of a sum reduction's update ``acc[...] = acc[...] + E`` (refuses other reductions)."""
    kind, body = reduction_of(store)
    if kind != "sum":
        raise EmitError(f"only sum reductions have an AscendC pattern here: {store.buffer.name} ({kind})")
    return body


def stored_value(store) -> tuple[object, str]:
    """(float32 expression, output dtype) of an elementwise store (a final Cast is the rounding)."""
    value = store.value
    if _kind(value) == "Cast" and dtype_of(value) != "float32":
        return value.value, dtype_of(value)
    return value, str(store.buffer.dtype)


def sync(*events: str) -> str:
    """One SetFlag/WaitFlag pair per HardEvent name ("V_S": the scalar pipe waits for the
    vector pipe's earlier work): the printed kernels synchronise exactly the pipes that
    depend on each other (OpgenSync is defined in every kernel file, targets/ascend/emitter.py)."""
    return " ".join(f"OpgenSync<HardEvent::{e}>();" for e in events)


# Before a row reduction: per-row values the scalar pipe set are read by vector code after it
# (the PipeBarrier<PIPE_V> for the tile computed by earlier vector ops goes right before the
# reduction itself: targets/ascend/vector_order.py).
BEFORE_REDUCE = "OpgenSync<HardEvent::S_V>();"


def row_extremes(tile: str, kind: str, fold) -> list[str]:
    """Like row_sums for max/min: one ReduceMax/ReduceMin per row (the value at [0] of
    reduce_work_t_, its index unused; partials in reduce_work_t_[8..])."""
    api = "ReduceMax" if kind == "max" else "ReduceMin"
    return [BEFORE_REDUCE,
            "for (int32_t i = 0; i < n; ++i) {",
            f"    {api}<float>(reduce_work_t_, {tile}[i * P], reduce_work_t_[8], len);",
            f"    {sync('V_S')}   // the scalar pipe reads the result",
            f"    {fold('i', 'reduce_work_t_.GetValue(0)')}",
            f"    {sync('S_V')}   // the next reduction overwrites what the scalar pipe read",
            "}"]


def row_sums(tile: str, add_to) -> list[str]:
    """Lines that add the sum of the first ``len`` elements of each of the ``n`` rows (pitch
    ``P``) of ``tile`` to a per-row accumulator; ``add_to(i, v)`` is the C++ statement adding
    value ``v`` to row ``i``'s accumulator. Rows of one repeat (P <= 64 floats) go through
    WholeReduceSum, one repeat per row and at most 255 repeats per call; longer rows through
    ReduceSum, one call per row (its per-repeat partials in reduce_work_t_[8..])."""
    return [
        BEFORE_REDUCE,
        "if (P * 4 <= 256) {",
        "    for (int32_t r0 = 0; r0 < n; r0 += 255) {",
        "        const int32_t m = n - r0 < 255 ? n - r0 : 255;",
        f"        WholeReduceSum<float>(reduce_work_t_, {tile}[r0 * P], len, m, 1, 1, P / 8);",
        f"        {sync('V_S')}   // the scalar pipe reads the sums",
        f"        for (int32_t j = 0; j < m; ++j) {{ {add_to('r0 + j', 'reduce_work_t_.GetValue(j)')} }}",
        f"        {sync('S_V')}   // the next reduction overwrites what the scalar pipe read",
        "    }",
        "} else {",
        "    for (int32_t i = 0; i < n; ++i) {",
        f"        ReduceSum<float>(reduce_work_t_, {tile}[i * P], reduce_work_t_[8], len);",
        f"        {sync('V_S')}   // the scalar pipe reads the sum",
        f"        {add_to('i', 'reduce_work_t_.GetValue(0)')}",
        f"        {sync('S_V')}   // the next reduction overwrites what the scalar pipe read",
        "    }",
        "}",
    ]
