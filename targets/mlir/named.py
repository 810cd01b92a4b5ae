"""TE stages as the named ops bishengir (Huawei's AscendNPU-IR compiler) accepts, split into
the kernels it can fuse.

bishengir's HFusion does not legalize a fused ``linalg.generic`` nor arith/math ops on
tensors; it takes whole-tensor named ops: ``linalg.elemwise_binary``/``elemwise_unary``
(one operand may be a scalar), ``linalg.broadcast``, ``linalg.transpose``, ``linalg.reduce``,
``linalg.fill`` and ``hfusion.cast``. So each stage is printed over its whole iteration
domain:
  * the domain's axes are ordered like the stage's widest load (the data's layout: a
    column sum over ``dy[j, c]`` iterates (j, c) and reduces axis 0, with no transpose);
  * a load indexed by iterators is brought to the domain with ``linalg.transpose`` (only
    when its order differs) and ``linalg.broadcast`` (the axes it lacks);
  * a guarded load ``if_then_else(N * HW > 0, x[0, c, 0], 0)`` (a condition on sizes) is a
    sum over a window of one element where the condition holds and none where it does not
    (bishengir has no branch in a fused kernel): the load stays unread where it is false;
  * any other select is ``hfusion.select`` of an ``hfusion.compare``, both sides computed;
  * an 8-bit integer output of rank >= 2 is stored by a kernel of its own that collapses
    its float value to rank 1 (``split_narrow_stores``: bishengir 1.2.0 takes no other form);
  * a subexpression that no iterator reaches (``1 / (D*HW)``, ``eps[0]``) is a scalar,
    printed with arith and passed as the scalar operand of the named op using it;
  * a reduction ``acc = acc op E`` is E over the domain, then ``linalg.reduce`` over the
    reduced axes from its init.

bishengir cannot fuse a reduction over some axes with one over others into one kernel
(measured: "Unknown kernel fusion kind"), so ``kernels`` splits the stage list by pattern:
a kernel is a run of stages whose reductions all reduce the same axes of their data (all
the trailing axes: a row pass; or the same leading ones: a column sum); an elementwise
stage joins the run it follows. Values crossing a split travel through function results
and arguments, which on the device is GM. Nothing here names an op.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from opgen.targets.mlir.exprs import MATH_CALLS, ExprPrinter, Values
from opgen.targets.mlir.stages import LOADS, StageGraph, UnsupportedStage, kind, loaded, loads, whole_extents
from opgen.targets.mlir.text import VARS, Body, bits, dtype_of, element_type, float_literal, is_float, tensor_type

BINARY_FN = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Max": "max_signed", "Min": "min_signed"}
# Unary functions by dialect: linalg's where bishengir lowers them, HFusion's where it lowers
# only its own (linalg's rsqrt aborted bishengir: "unsupported linalg unary operation kind").
UNARY_FN = {"math.exp": "linalg.exp", "math.log": "linalg.log", "math.absf": "linalg.abs",
            "math.sqrt": "hfusion.sqrt", "math.rsqrt": "hfusion.rsqrt", "math.tanh": "hfusion.tanh",
            "math.erf": "hfusion.erf", "math.floor": "linalg.floor", "math.ceil": "linalg.ceil"}
# Rounding to an integer in the same float type: hfusion.cast float -> float in that round_mode
# (hfusion's unary_fn has no rint; bishengir 1.2.0 lowers this cast to HIVM's
# vcast_float_to_float with the mode, as it lowers linalg's floor).
ROUNDING_MODES = {"tirx.nearbyint": "rint"}
COMBINERS = {"Add": "arith.addf", "Max": "arith.maximumf", "Min": "arith.minimumf"}
# TIR comparisons as hfusion.compare's functions (an i1 tensor, the condition of hfusion.select).
COMPARE_FN = {"LT": "vlt", "LE": "vle", "GT": "vgt", "GE": "vge", "EQ": "veq", "NE": "vne"}
DEVICE_ENTRY = "attributes {hacc.entry, hacc.function_kind = #hacc.function_kind<DEVICE>}"


# ---- which axes a stage iterates, in data order, and which it reduces ------------------

def _iterator_names(indices) -> list | None:
    names = [i.name if kind(i) in VARS else None for i in indices]
    return None if None in names or len(set(names)) != len(names) else names


def domain_order(stage) -> list:
    """The stage's iterators in the order of its widest load covering them all (the data's
    layout), else in the block's order."""
    by_name = {it.var.name: it for it in stage.iterators}
    for load in sorted(loads(stage.value), key=lambda n: -len(n.indices)):
        names = _iterator_names(load.indices)
        if names and set(names) == set(by_name):
            return [by_name[n] for n in names]
    return list(stage.iterators)


def reduced_axes(stage) -> tuple:
    """Positions of the reduced iterators in the stage's domain order ((): elementwise)."""
    return tuple(k for k, it in enumerate(domain_order(stage)) if it.kind == "R")


def fusion_class(stage) -> str | None:
    """What bishengir must not mix in one kernel: "rows/<rank>" for a reduction over the
    trailing axes of its rank-``rank`` data, "axes <k..>/<rank>" for one over others; None
    for an elementwise stage. (Two row reductions of different ranks in one kernel:
    measured "Unknown kernel fusion kind".)"""
    axes = reduced_axes(stage)
    if not axes:
        return None
    rank = len(stage.iterators)
    if axes == tuple(range(rank - len(axes), rank)):
        return f"rows/{rank}"
    return f"axes {','.join(map(str, axes))}/{rank}"


def is_rows(cls: str | None) -> bool:
    return cls is not None and cls.startswith("rows/")


def emit_reduce(body, name_hint: str, source: tuple, start: tuple, axes: list, element: str, combiner: str) -> str:
    """A ``linalg.reduce`` of ``source`` (value, type) over ``axes`` into ``start`` (value,
    type), combining with ``combiner`` (arith.addf, arith.maxnumf, ...); returns its name."""
    a, b, combined = body.fresh("in"), body.fresh("acc"), body.fresh("r")
    name = body.fresh(name_hint)
    body.emit(f"{name} = linalg.reduce ins({source[0]} : {source[1]}) outs({start[0]} : {start[1]}) "
              f"dimensions = {axes}")
    body.emit(f"  ({a}: {element}, {b}: {element}) {{")
    body.emit(f"    {combined} = {combiner} {a}, {b} : {element}")
    body.emit(f"    linalg.yield {combined} : {element}")
    body.emit("  }")
    return name


@dataclass(frozen=True)
class Kernel:
    stages: tuple
    fusion: str | None


@dataclass
class _Group:
    stages: list
    fusion: str | None = None
    reduced: set = field(default_factory=set)     # its buffers that carry one of its reductions
    output_rank: int | None = None                # the rank of the op outputs it makes
    alone: bool = False                           # a flat store's kernel: no other stage joins

    def fits(self, stage, cls: str | None, is_output: bool) -> bool:
        if self.alone or is_flat_store(stage):
            return False
        reads_reduction = bool(_reads(stage) & self.reduced)
        if is_output and self.output_rank not in (None, len(stage.buffer.shape)):
            return False
        if cls is not None:
            second_wide_column_sum = not is_rows(cls) and self.fusion == cls and len(stage.iterators) > 2
            return self.fusion in (None, cls) and not reads_reduction and not second_wide_column_sum
        return self.fusion is None or is_rows(self.fusion) or not reads_reduction

    def add(self, stage, cls: str | None, is_output: bool) -> None:
        if cls is not None or _reads(stage) & self.reduced:
            self.reduced.add(stage.buffer.name)
        self.stages.append(stage)
        self.fusion = self.fusion or cls
        if is_output:
            self.output_rank = len(stage.buffer.shape)


def kernels(graph: StageGraph) -> list[Kernel]:
    """The stages split into kernels bishengir can fuse. Each stage, in program order,
    joins the earliest kernel at or after those of the stages it reads where it fits,
    else starts a new one. It does not fit a kernel when:
      * it is a reduction of another class than the kernel's (rows vs other axes, or
        another rank: measured "Unknown kernel fusion kind");
      * it is a reduction reading a reduction result of the kernel (a chain: measured
        "Unknown kernel fusion kind" and "operand does not dominate this use");
      * the kernel reduces other axes than the rows and the stage reads its result (a
        broadcast back over a column sum; the row pattern's broadcast back is fine);
      * it makes an op output of another rank than the kernel's outputs (measured
        "Failed to create and apply schedule" for a dx beside per-channel dweight);
      * it is a second reduction over leading axes of rank-3+ data (GroupNorm's dgamma
        and dbeta sums over N each reach HIVM alone, and fail to schedule together);
      * either it or the kernel is a flat store (``split_narrow_stores``): one stage alone.
    Last, a kernel that would return tensors of several ranks is one kernel per stage
    (``_mixed_results``).
    """
    outputs = {b.name for b in graph.outputs}
    groups: list[_Group] = []
    home: dict = {}                       # buffer name -> index of the kernel making it
    for stage in graph.stages:
        cls, is_output = fusion_class(stage), stage.buffer.name in outputs
        earliest = max((home[n] for n in _reads(stage) if n in home), default=0)
        chosen = next((k for k in range(earliest, len(groups)) if groups[k].fits(stage, cls, is_output)), None)
        if chosen is None:
            groups.append(_Group([], alone=is_flat_store(stage)))
            chosen = len(groups) - 1
        groups[chosen].add(stage, cls, is_output)
        home[stage.buffer.name] = chosen
    parts = [Kernel(tuple(g.stages), g.fusion) for g in groups]
    return [piece for k, part in enumerate(parts)
            for piece in (one_stage_each(part) if _mixed_results(graph, parts, k) else [part])]


def _mixed_results(graph: StageGraph, parts: list, k: int) -> bool:
    """Whether kernel k, elementwise stages only, returns tensors of several ranks (op
    outputs, and values later kernels read). (A reduction kernel returning its per-row
    values beside others, the row pass's pattern, is taken on every run.) bishengir's verdict on such a kernel is a draw: BatchNorm's
    per-channel chain returning a per-channel value beside y passed 2 runs of 6 (f32; the
    others crashed or said "using value defined outside the region") and 0 of 10 for one
    bf16 combo, so whether it split depended on the run. Split here, it is one kernel per
    stage every time, each of which bishengir takes on every run."""
    if len(parts[k].stages) < 2 or parts[k].fusion is not None:
        return False
    _, _, returns = signature(graph, parts[k], later_reads(parts, k))
    buffers = {s.buffer.name: s.buffer for s in parts[k].stages}
    return len({len(buffers[n].shape) for n in returns}) > 1


# ---- 8-bit integer outputs: stored by a flat kernel of their own --------------------------
#
# bishengir 1.2.0 (Atlas A2/A3) rejects a dynamic-shape int8 result of rank 2 or more, cast
# from float in any round mode, alone or fused ("'hivm.hir.store' op only support store ub
# to gm currently!"; docs/bishengir/dynamic_shape_int8_store.mlir), and a result collapsed
# to rank 1 inside a kernel that also broadcasts (the collapse travels up to the broadcasts:
# "'tensor.expand_shape' op expected number of static shape dims ..."). It takes the cast
# when its kernel reads the float value as an argument and returns rank 1
# (docs/bishengir/flat_int8_store.mlir). So such an output's stage is split in two: its
# float value, an intermediate the kernels before compute, and the cast alone, printed on
# the collapsed tensor. On the device the rank-1 result is the same bytes in GM as the
# output's rank-2 buffer (row-major, contiguous); the value costs a float round trip in GM.

NARROW_BITS = 8


def _narrow_cast(stage):
    """The float expression an elementwise stage of rank >= 2 casts to an 8-bit integer
    output (``out[i..] = int8(E)``), else None."""
    element = element_type(stage.buffer.dtype)
    if (stage.init is not None or is_float(element) or bits(element) != NARROW_BITS or len(stage.iterators) < 2
            or kind(stage.value) != "Cast" or not is_float(element_type(dtype_of(stage.value.value)))):
        return None
    return stage.value.value


def split_narrow_stores(graph: StageGraph) -> StageGraph:
    """``graph`` with each stage ``out = int8(E)`` (``_narrow_cast``) as two stages: ``E`` into
    a new intermediate ``<out>_value``, then ``out = int8(<out>_value)`` (``is_flat_store``).
    A graph with none is returned as it is (its kernels print as before)."""
    from opgen.lazy import tvm

    tirx = tvm.tirx
    stages, intermediates = [], list(graph.intermediates)
    for stage in graph.stages:
        value = _narrow_cast(stage)
        if value is None:
            stages.append(stage)
            continue
        buffer = tirx.decl_buffer(stage.buffer.shape, dtype_of(value), f"{stage.buffer.name}_value")
        intermediates.append(buffer)
        load = tirx.BufferLoad(buffer, list(stage.store_indices))
        stages.append(replace(stage, name=f"{stage.name}_value", buffer=buffer, value=value))
        stages.append(replace(stage, value=tirx.Cast(stage.buffer.dtype, load)))
    if len(stages) == len(graph.stages):
        return graph
    return replace(graph, intermediates=tuple(intermediates), stages=tuple(stages))


def is_flat_store(stage) -> bool:
    """Whether ``stage`` is the cast half of ``split_narrow_stores``: an 8-bit integer output
    of rank >= 2 cast from one load of a float buffer at its own store indices."""
    value = _narrow_cast(stage)
    return (value is not None and kind(value) in LOADS and len(value.indices) == len(stage.store_indices)
            and all(a.same_as(b) for a, b in zip(value.indices, stage.store_indices)))


# ---- printing ---------------------------------------------------------------------------

class _ScalarValues(Values):
    """Leaves of a scalar subexpression: constants and sizes (no loads: see StagePrinter.load)."""

    def load(self, node, body: Body) -> str:
        raise UnsupportedStage(f"a scalar load {node} is printed as a tensor")

    def size(self, var, body: Body) -> str:
        return body.op(f"arith.index_cast {body.index(var)} : index to {element_type(dtype_of(var))}")


def _is_scalar(node, names: set) -> bool:
    """Whether ``node`` is the same for every point of the domain and reads no memory
    (a constant, a size): then it prints as an arith scalar. A load, even at constant
    indices, is a tensor: bishengir compiled a ``tensor.extract`` feeding vector ops
    nondeterministically (6 of 12 runs of one file failed "operand #0 does not dominate
    this use"; its broadcast failed 0 of 12)."""
    return not _reaches(node, names)


def _reaches(node, names: set) -> bool:
    """Whether ``node`` reads memory or an iterator in ``names``."""
    if kind(node) in VARS:
        return node.name in names
    if kind(node) in LOADS:
        return True
    children = list(node.args) if kind(node) == "Call" else \
        [getattr(node, c) for c in ("a", "b", "value", "condition", "true_value", "false_value") if hasattr(node, c)]
    return any(_reaches(c, names) for c in children)


def _may_be_out_of_bounds(load) -> bool:
    """Whether ``load`` reads at a constant index of an axis whose extent is not a constant
    above it (``x[0, c]`` of an (N, C) tensor: none where N is 0)."""
    return any(kind(i) == "IntImm" and (kind(e) != "IntImm" or int(i.value) >= int(e.value))
               for i, e in zip(load.indices, loaded(load).shape))


def _guarded_load(value):
    """The load under ``value``'s casts (casts map 0 to 0), or ``value``."""
    while kind(value) == "Cast":
        value = value.value
    return value


def _constants_or_iterators(indices, position: dict) -> bool:
    """Whether each index is a constant or one of the domain's iterators."""
    return all(kind(i) == "IntImm" or (kind(i) in VARS and i.name in position) for i in indices)


class StagePrinter:
    """One stage as named ops on whole tensors of its domain."""

    def __init__(self, body: Body, tensors: dict, stage):
        self.body, self.tensors, self.stage = body, tensors, stage
        self.domain = domain_order(stage)
        self.position = {it.var.name: k for k, it in enumerate(self.domain)}
        self.scalars = ExprPrinter(body, _ScalarValues())
        self.printed: dict = {}      # expression text -> (ssa, is_tensor): each subexpression once

    def typed(self, element: str, iterators=None) -> str:
        return tensor_type([it.extent for it in (self.domain if iterators is None else iterators)], element)

    def empty(self, element: str, iterators=None) -> str:
        iterators = self.domain if iterators is None else iterators
        sizes = ", ".join(self.body.dynamic_sizes([it.extent for it in iterators]))
        return self.body.op(f"tensor.empty({sizes}) : {self.typed(element, iterators)}", "e")

    def value(self, node) -> tuple[str, bool]:
        """(SSA value, whether it is a tensor over the domain) of ``node``, printed once per
        stage: TE repeats subexpressions (a square is ``(x - m) * (x - m)``), and every
        named op is a whole-tensor buffer bishengir must fit in UB (GroupNorm's float16
        sum of squares overflowed it until its difference was computed once)."""
        key = str(node)
        if key not in self.printed:
            self.printed[key] = self._value(node)
        return self.printed[key]

    def _value(self, node) -> tuple[str, bool]:
        if _is_scalar(node, set(self.position)):
            return self.scalars.print(node), False
        what = kind(node)
        element = element_type(dtype_of(node))
        if what in LOADS:
            return self.load(node), True
        if what == "Cast":
            return self.cast(self.tensor(node.value), element_type(dtype_of(node.value)), element), True
        if what in BINARY_FN:
            return self.binary(BINARY_FN[what], node.a, node.b, element), True
        if what in COMPARE_FN:
            return self.compare(COMPARE_FN[what], node.a, node.b), True
        if what == "Select":
            return self.select(node.condition, node.true_value, node.false_value, element), True
        if what == "Call":
            return self.call(node, element), True
        raise UnsupportedStage(f"stage {self.stage.name}: no named-op lowering for {what} on tensors")

    def tensor(self, node) -> str:
        """``node`` over the whole domain (a scalar is filled in)."""
        value, is_tensor = self.value(node)
        if is_tensor:
            return value
        element = element_type(dtype_of(node))
        return self.body.op(f"linalg.fill ins({value} : {element}) outs({self.empty(element)} : "
                            f"{self.typed(element)}) -> {self.typed(element)}", "f")

    def load(self, node) -> str:
        buf = loaded(node)
        if all(kind(i) == "IntImm" for i in node.indices):
            return self.element_load(node)
        return self.place(node, self.tensors[buf.name], list(buf.shape), list(node.indices))

    def place(self, node, value: str, shape: list, indices: list) -> str:
        """``value`` (a tensor of ``shape``, indexed by the iterators ``indices``) over the
        whole domain: transposed into domain order, broadcast over the axes it lacks."""
        element = element_type(loaded(node).dtype)
        names = _iterator_names(indices)
        if names is None or any(n not in self.position for n in names):
            raise UnsupportedStage(f"stage {self.stage.name}: the load {node} is no broadcast of its domain")
        in_order = sorted(names, key=self.position.get)
        iterators = [self.domain[self.position[n]] for n in names]
        if names != in_order:   # a transpose into domain order first
            perm = [names.index(n) for n in in_order]
            iterators = [self.domain[self.position[n]] for n in in_order]
            out = self.empty(element, iterators)
            value = self.body.op(f"linalg.transpose ins({value} : {tensor_type(shape, element)}) outs({out} : "
                                 f"{self.typed(element, iterators)}) permutation = {perm}", "t")
        return self.broadcast(value, iterators, element)

    def guarded(self, node, element: str) -> str:
        """``if_then_else(c, E, 0)``: a guarded load, ``E`` a load (under casts) with constant
        indices on some axes, ``c`` a condition on sizes only, true where those indices are
        in bounds (BatchNorm's shift ``if_then_else(N * HW > 0, x[0, c, 0], 0)``: an empty
        channel has no first element). TIR's if_then_else is lazy: the load is made only
        where ``c`` holds. bishengir has no branch inside a fused kernel (an ``scf.if``:
        "Unknown kernel fusion kind"; a crash beside a reduction), so the load is a sum
        over a window of its buffer, on each constant-index axis one element wide where
        ``c`` holds and empty where it does not: the element itself, or 0 with nothing
        read. Any other if_then_else is a select (``select``)."""
        condition, taken, other = node.args
        load = _guarded_load(taken)
        window = self.window(load, self.scalars.print(condition))
        outer = self.printed
        self.printed = {**outer, str(load): (window, True)}   # E over the window's sum
        try:
            return self.tensor(taken)
        finally:
            self.printed = outer

    def is_guarded_load(self, node) -> bool:
        """Whether ``if_then_else`` ``node`` is a guarded load (see ``guarded``): a condition on
        sizes only, 0 otherwise, and a load (under casts) with constant indices on some axes."""
        condition, taken, other = node.args
        load = _guarded_load(taken)
        return (_is_scalar(condition, set(self.position)) and kind(other) in ("FloatImm", "IntImm")
                and other.value == 0 and kind(load) in LOADS and _constants_or_iterators(load.indices, self.position)
                and any(kind(i) == "IntImm" for i in load.indices))

    def eager_loads(self, node) -> list:
        """The loads of ``node`` a select computes over its whole domain: all but those inside
        a guarded load, which prints as a window reading one element or none (``guarded``)."""
        if kind(node) == "Call" and node.op.name.endswith("if_then_else") and self.is_guarded_load(node):
            return []
        if kind(node) in LOADS:
            return loads(node)
        children = list(node.args) if kind(node) == "Call" else \
            [getattr(node, c) for c in ("a", "b", "value", "condition", "true_value", "false_value") if hasattr(node, c)]
        return [load for child in children for load in self.eager_loads(child)]

    def select(self, condition, true_value, false_value, element: str) -> str:
        """``condition ? a : b`` over the domain: a condition that reads memory (a flag
        attribute passed as a tensor), or one on sizes choosing a computed value
        (``n > 0 ? sum / n : 0``). ``hfusion.select`` of the condition's i1 tensor
        (``hfusion.compare``). Eager, as arith.select: both sides are computed (0 / 0 on
        the side not chosen is harmless), so no side may read an element at a constant
        index of a dynamic axis, which an empty tensor lacks (a guarded load: ``guarded``)."""
        if any(_may_be_out_of_bounds(load) for side in (true_value, false_value) for load in self.eager_loads(side)):
            raise UnsupportedStage(f"stage {self.stage.name}: a select whose sides read an element of a "
                                   f"dynamic axis (read eagerly: out of bounds on an empty tensor)")
        c, a, b = self.tensor(condition), self.tensor(true_value), self.tensor(false_value)
        return self.body.op(f"hfusion.select ins({c}, {a}, {b} : {self.typed('i1')}, {self.typed(element)}, "
                            f"{self.typed(element)}) outs({self.empty(element)} : {self.typed(element)}) -> "
                            f"{self.typed(element)}", "sel")

    def compare(self, fn: str, a, b) -> str:
        """``a <fn> b`` over the domain as an i1 tensor (``hfusion.compare``)."""
        element = element_type(dtype_of(a))
        x, y = self.tensor(a), self.tensor(b)
        return self.body.op(f"hfusion.compare {{compare_fn = #hfusion.compare_fn<{fn}>}} ins({x}, {y} : "
                            f"{self.typed(element)}, {self.typed(element)}) outs({self.empty('i1')} : "
                            f"{self.typed('i1')}) -> {self.typed('i1')}", "cmp")

    def window(self, node, flag: str) -> str:
        """The load ``node`` over the domain, its constant-index axes summed over a window
        of ``select(flag, 1, 0)`` elements at those indices (see ``guarded``)."""
        buf = loaded(node)
        element = element_type(buf.dtype)
        fixed = [kind(i) == "IntImm" for i in node.indices]
        one, zero = self.body.index_constant(1), self.body.index_constant(0)
        width = self.body.op(f"arith.select {flag}, {one}, {zero} : index", "w")
        offsets = ", ".join(str(int(i.value)) if f else "0" for i, f in zip(node.indices, fixed))
        sizes = ", ".join(width if f else str(int(e.value)) if kind(e) == "IntImm" else self.body.index(e)
                          for e, f in zip(buf.shape, fixed))
        strides = ", ".join("1" for _ in fixed)
        source = tensor_type(buf.shape, element)
        dims = ["?" if f or kind(e) != "IntImm" else str(int(e.value)) for e, f in zip(buf.shape, fixed)]
        piece_type = f"tensor<{'x'.join(dims + [element])}>"
        piece = self.body.op(f"tensor.extract_slice {self.tensors[buf.name]}[{offsets}] [{sizes}] [{strides}] : "
                             f"{source} to {piece_type}", "s")
        kept = [k for k, f in enumerate(fixed) if not f]
        shape = [buf.shape[k] for k in kept]
        typed = tensor_type(shape, element)
        floating = is_float(element)
        zero_value = self.body.constant(float_literal(0.0, element) if floating else "0", element)
        empty = self.body.op(f"tensor.empty({', '.join(self.body.dynamic_sizes(shape))}) : {typed}", "e")
        start = self.body.op(f"linalg.fill ins({zero_value} : {element}) outs({empty} : {typed}) -> {typed}", "f")
        name = emit_reduce(self.body, "window", (piece, piece_type), (start, typed),
                           [k for k, f in enumerate(fixed) if f], element, "arith.addf" if floating else "arith.addi")
        return self.place(node, name, shape, [node.indices[k] for k in kept])

    def element_load(self, node) -> str:
        """One element (constant indices) over the whole domain: a one-element slice,
        collapsed to rank 0, broadcast."""
        buf = loaded(node)
        element, source = element_type(buf.dtype), tensor_type(buf.shape, element_type(buf.dtype))
        ones = ", ".join("1" for _ in node.indices)
        offsets = ", ".join(str(int(i.value)) for i in node.indices)
        piece = self.body.op(f"tensor.extract_slice {self.tensors[buf.name]}[{offsets}] [{ones}] [{ones}] : "
                             f"{source} to tensor<{ones.replace(', ', 'x')}x{element}>", "s")
        scalar = self.body.op(f"tensor.collapse_shape {piece} [] : tensor<{ones.replace(', ', 'x')}x{element}> "
                              f"into tensor<{element}>", "s")
        return self.broadcast(scalar, [], element)

    def broadcast(self, value: str, iterators: list, element: str) -> str:
        """``value`` (over ``iterators``, in domain order) over the whole domain."""
        if len(iterators) == len(self.domain):
            return value
        present = {it.var.name for it in iterators}
        missing = [k for k, it in enumerate(self.domain) if it.var.name not in present]
        out = self.empty(element)
        return self.body.op(f"linalg.broadcast ins({value} : {self.typed(element, iterators)}) outs({out} : "
                            f"{self.typed(element)}) dimensions = {missing}", "b")

    def cast(self, value: str, source: str, target: str) -> str:
        if source == target:
            return value
        if is_float(source) and is_float(target) and bits(source) == bits(target):   # bf16 <-> f16
            return self.cast(self.cast(value, source, "f32"), "f32", target)
        mode = " {round_mode = #hfusion.round_mode<rint>}" if bits(target) < bits(source) else ""
        return self.body.op(f"hfusion.cast{mode} ins({value} : {self.typed(source)}) outs({self.empty(target)} : "
                            f"{self.typed(target)}) -> {self.typed(target)}", "cast")

    def binary(self, fn: str, a, b, element: str) -> str:
        (x, x_tensor), (y, y_tensor) = self.value(a), self.value(b)
        types = [self.typed(element) if t else element for t in (x_tensor, y_tensor)]
        return self.body.op(f"linalg.elemwise_binary {{fun = #linalg.binary_fn<{fn}>}} ins({x}, {y} : "
                            f"{', '.join(types)}) outs({self.empty(element)} : {self.typed(element)}) -> "
                            f"{self.typed(element)}", "w")

    def unary(self, fn: str, value: str, element: str) -> str:
        dialect, _, fn = fn.rpartition(".")
        return self.body.op(f"{dialect}.elemwise_unary {{fun = #{dialect}.unary_fn<{fn}>}} ins({value} : "
                            f"{self.typed(element)}) outs({self.empty(element)} : {self.typed(element)}) -> "
                            f"{self.typed(element)}", "u")

    def call(self, node, element: str) -> str:
        name = node.op.name
        if name == "tirx.sigmoid" and len(node.args) == 1:   # 1 / (1 + exp(-x))
            one = self.body.constant(float_literal(1.0, element), element)
            e = self.unary("linalg.exp", self.unary("linalg.negf", self.tensor(node.args[0]), element), element)
            denominator = self.body.op(
                f"linalg.elemwise_binary {{fun = #linalg.binary_fn<add>}} ins({e}, {one} : {self.typed(element)}, "
                f"{element}) outs({self.empty(element)} : {self.typed(element)}) -> {self.typed(element)}", "w")
            return self.body.op(
                f"linalg.elemwise_binary {{fun = #linalg.binary_fn<div>}} ins({one}, {denominator} : {element}, "
                f"{self.typed(element)}) outs({self.empty(element)} : {self.typed(element)}) -> "
                f"{self.typed(element)}", "w")
        if name in ("tirx.if_then_else", "prim.if_then_else") and len(node.args) == 3:   # TVM 0.27: prim.
            if self.is_guarded_load(node):
                return self.guarded(node, element)
            return self.select(*node.args, element)
        if name in ROUNDING_MODES and len(node.args) == 1:
            return self.body.op(f"hfusion.cast {{round_mode = #hfusion.round_mode<{ROUNDING_MODES[name]}>}} ins("
                                f"{self.tensor(node.args[0])} : {self.typed(element)}) outs({self.empty(element)} : "
                                f"{self.typed(element)}) -> {self.typed(element)}", "round")
        fn = UNARY_FN.get(MATH_CALLS.get(name, ""))
        if fn is None or len(node.args) != 1:
            raise UnsupportedStage(f"stage {self.stage.name}: no named op for the call {name}")
        return self.unary(fn, self.tensor(node.args[0]), element)

    def flat_store(self) -> str:
        """A flat store's stage (``is_flat_store``) on its source collapsed to rank 1: the
        rank-1 SSA tensor of its buffer (``flat_type``). Rounds toward zero, as TIR's
        float-to-int Cast does (arith.fptosi)."""
        load, element = self.stage.value.value, element_type(self.stage.buffer.dtype)
        source = element_type(loaded(load).dtype)
        axes = ", ".join(str(k) for k in range(len(self.domain)))
        flat = self.body.op(f"tensor.collapse_shape {self.tensor(load)} [[{axes}]] : {self.typed(source)} into "
                            f"{flat_type(loaded(load))}", "flat")
        size = self.body.op(f"tensor.dim {flat}, {self.body.index_constant(0)} : {flat_type(loaded(load))}", "n")
        result = flat_type(self.stage.buffer)
        empty = self.body.op(f"tensor.empty({size}) : {result}" if "?" in result else f"tensor.empty() : {result}", "e")
        return self.body.op(f"hfusion.cast {{round_mode = #hfusion.round_mode<trunc>}} ins({flat} : "
                            f"{flat_type(loaded(load))}) outs({empty} : {result}) -> {result}", "cast")

    def print(self) -> str:
        """The SSA tensor of the stage's buffer."""
        stage, element = self.stage, element_type(self.stage.buffer.dtype)
        spatial = [it for it in self.domain if it.kind == "S"]
        store = _iterator_names(stage.store_indices)
        if store != [it.var.name for it in spatial]:
            raise UnsupportedStage(f"stage {stage.name}: stores in another order than its data's")
        if stage.init is None:
            value = self.tensor(stage.value)
            if value.startswith("%") and value[1:] in self.tensors:   # a bare copy of an argument:
                out = self.empty(element)                             # a kernel of no ops fails to schedule
                value = self.body.op(f"linalg.copy ins({value} : {self.typed(element)}) outs({out} : "
                                     f"{self.typed(element)}) -> {self.typed(element)}", "copy")
            return value
        combiner, update = self.reduction()
        init = self.scalars.print(stage.init) if _is_scalar(stage.init, set(self.position)) else None
        if init is None:
            raise UnsupportedStage(f"stage {stage.name}: an init that varies over the domain")
        start = self.body.op(f"linalg.fill ins({init} : {element}) outs({self.empty(element, spatial)} : "
                             f"{self.typed(element, spatial)}) -> {self.typed(element, spatial)}", "f")
        source = self.tensor(update)
        axes = [k for k, it in enumerate(self.domain) if it.kind == "R"]
        return emit_reduce(self.body, stage.name, (source, self.typed(element)),
                           (start, self.typed(element, spatial)), axes, element, combiner)

    def reduction(self) -> tuple[str, object]:
        """(combiner op, E) of the update ``acc = acc op E``."""
        value, stage = self.stage.value, self.stage
        what = kind(value)
        if what in COMBINERS:
            for acc, other in ((value.a, value.b), (value.b, value.a)):
                if kind(acc) in LOADS and loaded(acc).name == stage.buffer.name:
                    return COMBINERS[what], other
        raise UnsupportedStage(f"stage {stage.name}: no named reduction for the update {value}")


def _reads(stage) -> set:
    return {loaded(n).name for n in loads(stage.value)} | \
        ({loaded(n).name for n in loads(stage.init)} if stage.init is not None else set())


def signature(graph: StageGraph, kernel: Kernel, later_reads: set) -> tuple[list, list, list]:
    """(what a kernel's function takes: buffer names, then the size names no buffer of them
    holds; what it returns: the op outputs it makes plus what later kernels read)."""
    made = {s.buffer.name for s in kernel.stages}
    order = [b.name for b in graph.params + graph.intermediates]
    reads = sorted(set().union(*(_reads(s) for s in kernel.stages)) - made, key=order.index)
    buffers = {b.name: b for b in graph.params + graph.intermediates}
    readable = whole_extents([buffers[n] for n in reads])
    sizes = [name for name in graph.size_vars() if name not in readable]
    outputs = {b.name for b in graph.outputs}
    returns = [s.buffer.name for s in kernel.stages if s.buffer.name in outputs or s.buffer.name in later_reads]
    return reads, sizes, returns


def print_kernel(symbol: str, graph: StageGraph, kernel: Kernel, later_reads: set) -> str:
    """One kernel as a device function: it takes what it reads and earlier kernels (or the
    caller) made, and returns the op outputs it makes plus what later kernels read."""
    buffers = {b.name: b for b in graph.params + graph.intermediates}
    reads, _, names = signature(graph, kernel, later_reads)
    returns = [buffers[n] for n in names]
    body = Body("    ")
    args = [f"%{n}: {tensor_type(buffers[n].shape, element_type(buffers[n].dtype))}" for n in reads]
    _bind_sizes(body, [buffers[n] for n in reads], graph, args)
    tensors = {n: f"%{n}" for n in reads}
    flat = flat_results(kernel, later_reads)
    for stage in kernel.stages:
        printer = StagePrinter(body, tensors, stage)
        tensors[stage.buffer.name] = printer.flat_store() if stage.buffer.name in flat else printer.print()
    types = [flat_type(b) if b.name in flat else tensor_type(b.shape, element_type(b.dtype)) for b in returns]
    head = f"  func.func @{symbol}({', '.join(args)}) -> ({', '.join(types)}) {DEVICE_ENTRY} {{"
    ret = f"    return {', '.join(tensors[b.name] for b in returns)} : {', '.join(types)}"
    return "\n".join([head, *body.lines, ret, "  }"])


def flat_results(kernel: Kernel, later_reads: set) -> set:
    """The buffers ``kernel`` returns collapsed to rank 1: a flat store's output that no later
    kernel reads (see ``split_narrow_stores``)."""
    return {s.buffer.name for s in kernel.stages if is_flat_store(s) and s.buffer.name not in later_reads}


def flat_type(buffer) -> str:
    """``buffer``'s tensor type collapsed to rank 1 (dynamic when any extent is)."""
    extents = [int(e.value) if kind(e) == "IntImm" else None for e in buffer.shape]
    size = "?" if None in extents else str(int(np.prod(extents)))
    return f"tensor<{size}x{element_type(buffer.dtype)}>"


def _bind_sizes(body: Body, arguments: list, graph: StageGraph, args: list) -> None:
    """Sizes from ``tensor.dim`` of the kernel's tensor arguments; a size none of them
    holds (a scalar stage dividing by D*HW) becomes an ``index`` argument of its own."""
    readable = whole_extents(arguments)
    for name in graph.size_vars():
        if name in readable:
            buf, axis = readable[name]
            body.bind_size(name, body.op(f"tensor.dim %{buf.name}, {body.index_constant(axis)} : "
                                         f"{tensor_type(buf.shape, element_type(buf.dtype))}", name))
        else:
            args.append(f"%size_{name}: index")
            body.bind_size(name, f"%size_{name}")


def later_reads(parts: list[Kernel], k: int) -> set:
    """What the kernels after ``parts[k]`` read (so kernel k must return it)."""
    return set().union(*(_reads(s) for p in parts[k + 1:] for s in p.stages)) if k + 1 < len(parts) else set()


def kernel_names(symbol: str, parts: list, labels=None) -> list[str]:
    return [f"{symbol}_k{k if labels is None else labels[k]}" for k in range(len(parts))]


def print_kernels(symbol: str, graph: StageGraph, parts: list[Kernel], labels=None) -> list[tuple[str, str]]:
    """[(kernel name, MLIR module text)] of ``graph`` split into ``parts`` (see ``kernels``):
    one module each, so that bishengir's verdict is per kernel. Kernel k is named
    ``{symbol}_k{labels[k]}`` (default: k), so a caller that splits one part can keep the
    others' names, and with them their texts and cached verdicts."""
    names = kernel_names(symbol, parts, labels)
    return [(name, "module {\n" + print_kernel(name, graph, kernel, later_reads(parts, k)) + "\n}\n")
            for k, (name, kernel) in enumerate(zip(names, parts))]


def one_stage_each(kernel: Kernel) -> list[Kernel]:
    """``kernel`` as one kernel per stage: what remains when bishengir cannot fuse a group."""
    return [Kernel((stage,), fusion_class(stage)) for stage in kernel.stages]
