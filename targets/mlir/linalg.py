"""TE stages as MLIR linalg-on-tensors: one ``linalg.generic`` per stage (IREE's input).

Each stage of the stage graph (``stages.py``) becomes one ``linalg.generic`` whose loop
dimensions are the block's iterators in order (``parallel`` or ``reduction``):
  * a load whose indices are iterators or constants becomes an input operand with the
    affine map those indices spell (``mean[a, b]`` in an (a, b, c, i) stage reads through
    ``(d0, d1, d2, d3) -> (d0, d1)``); any other index (``c // D``) is a ``tensor.extract``
    at indices computed from ``linalg.index``;
  * the stage's own buffer read at its store's indices is the running value: the output
    block argument, which a reduction starts from its init (``linalg.fill`` of a constant,
    else a parallel ``linalg.generic`` computing it);
  * the stored value is printed by ``exprs.ExprPrinter`` on scalars and yielded.
Sizes are ``tensor.dim`` of the inputs where they are whole extents; intermediates stay
SSA tensors (IREE decides what to fuse and what to keep in memory). The function takes the
op's inputs and returns its outputs in parameter order: IREE allocates the results.
"""
from __future__ import annotations

from opgen.targets.mlir.exprs import ExprPrinter, Values
from opgen.targets.mlir.stages import StageGraph, UnsupportedStage, kind, loaded, loads, stage_graph, whole_extents
from opgen.targets.mlir.text import INDEX_ARITH, VARS, Body, dtype_of, element_type, float_literal, tensor_type

PARALLEL, REDUCTION = "parallel", "reduction"


def buffer_type(buf) -> str:
    return tensor_type(buf.shape, element_type(buf.dtype))


def _affine_index(index, dims: dict) -> str | None:
    """``index`` as an affine result over the loop dims, or None when it is not one."""
    if kind(index) in VARS and index.name in dims:
        return f"d{dims[index.name]}"
    if kind(index) == "IntImm":
        return str(int(index.value))
    return None


def affine_map(indices, dims: dict) -> str | None:
    results = [_affine_index(i, dims) for i in indices]
    if None in results:
        return None
    names = ", ".join(f"d{k}" for k in range(len(dims)))
    return f"affine_map<({names}) -> ({', '.join(results)})>"


class _StageValues(Values):
    """Leaves inside one generic's region: block arguments, gathered elements, sizes and
    iterator positions."""

    def __init__(self, arguments: dict, dims: dict, tensors: dict):
        self.arguments, self.dims, self.tensors = arguments, dims, tensors

    def load(self, node, body: Body) -> str:
        key = _load_key(node)
        if key in self.arguments:
            return self.arguments[key]
        indices = [self._index(i, body) for i in node.indices]
        source = self.tensors[loaded(node).name]
        return body.op(f"tensor.extract {source}[{', '.join(indices)}] : {buffer_type(loaded(node))}")

    def _index(self, expr, body: Body) -> str:
        if kind(expr) in VARS and expr.name in self.dims:
            return body.op(f"linalg.index {self.dims[expr.name]} : index", "i")
        if kind(expr) in VARS or kind(expr) == "IntImm":
            return body.index(expr)
        if kind(expr) in INDEX_ARITH:
            a, b = self._index(expr.a, body), self._index(expr.b, body)
            return body.op(f"{INDEX_ARITH[kind(expr)]} {a}, {b} : index")
        raise UnsupportedStage(f"no index lowering for {expr}")

    def size(self, var, body: Body) -> str:
        return body.op(f"arith.index_cast {body.index(var)} : index to {element_type(dtype_of(var))}")

    def iterator(self, var, body: Body) -> str | None:
        if var.name not in self.dims:
            return None
        position = body.op(f"linalg.index {self.dims[var.name]} : index", "i")
        return body.op(f"arith.index_cast {position} : index to {element_type(dtype_of(var))}")


def _load_key(node) -> tuple:
    return loaded(node).name, tuple(str(i) for i in node.indices)


class FunctionPrinter:
    """One kernel as a ``func.func``: inputs in, outputs returned."""

    def __init__(self, symbol: str, graph: StageGraph, attributes: str = ""):
        self.symbol, self.graph, self.attributes = symbol, graph, attributes
        self.body = Body("    ")
        self.tensors: dict = {b.name: f"%{b.name}" for b in graph.inputs}   # buffer name -> SSA tensor

    def print(self) -> str:
        self._bind_sizes()
        for stage in self.graph.stages:
            self.tensors[stage.buffer.name] = self.stage(stage)
        outputs = self.graph.outputs
        args = ", ".join(f"%{b.name}: {buffer_type(b)}" for b in self.graph.inputs)
        results = ", ".join(buffer_type(b) for b in outputs)
        ret = f"    return {', '.join(self.tensors[b.name] for b in outputs)} : {results}"
        head = f"  func.func @{self.symbol}({args}) -> ({results}){self.attributes} {{"
        return "\n".join([head, *self.body.lines, ret, "  }"])

    def _bind_sizes(self) -> None:
        """Each size variable from ``tensor.dim`` of an input holding it as a whole extent
        (an output's size no input determines cannot be known before the call: refused)."""
        readable = whole_extents(self.graph.inputs)
        for name in self.graph.size_vars():
            if name not in readable:
                raise UnsupportedStage(f"size {name} appears in no input: the caller could not size the outputs")
            buf, axis = readable[name]
            dim = f"tensor.dim %{buf.name}, {self.body.index_constant(axis)} : {buffer_type(buf)}"
            self.body.bind_size(name, self.body.op(dim, name))

    def stage(self, stage) -> str:
        """The SSA tensor holding ``stage``'s buffer after it runs."""
        out_type = buffer_type(stage.buffer)
        sizes = ", ".join(self.body.dynamic_sizes(stage.buffer.shape))
        empty = self.body.op(f"tensor.empty({sizes}) : {out_type}", "e")
        start = empty if stage.init is None else self.initial(stage, empty)
        return self.generic(stage, stage.iterators, stage.value, start)

    def initial(self, stage, empty: str) -> str:
        """A reduction's starting tensor: a fill of a constant init, else its generic."""
        element = element_type(stage.buffer.dtype)
        if kind(stage.init) == "FloatImm":
            value = self.body.constant(float_literal(float(stage.init.value), element), element)
        elif kind(stage.init) == "IntImm":
            value = self.body.constant(str(int(stage.init.value)), element)
        else:
            return self.generic(stage, stage.spatial, stage.init, empty)
        return self.body.op(f"linalg.fill ins({value} : {element}) outs({empty} : {buffer_type(stage.buffer)}) "
                            f"-> {buffer_type(stage.buffer)}", "f")

    def generic(self, stage, iterators, value, outs: str) -> str:
        dims = {it.var.name: k for k, it in enumerate(iterators)}
        out_map = affine_map(stage.store_indices, dims)
        accumulator = (stage.buffer.name, tuple(str(i) for i in stage.store_indices))
        operands, maps, arguments = [], [], {}
        region = self.body.region()
        block_args = []
        for load in loads(value):
            key = _load_key(load)
            if key in arguments:
                continue
            if key == accumulator:
                continue
            if loaded(load).name == stage.buffer.name:
                raise UnsupportedStage(f"stage {stage.name} reads its own buffer at other indices")
            if loaded(load).name not in self.tensors:
                raise UnsupportedStage(f"stage {stage.name} reads {loaded(load).name} before any stage writes it")
            m = affine_map(load.indices, dims)
            if m is None:
                continue        # an index no affine map spells: gathered with tensor.extract
            arg = self.body.fresh("a")
            arguments[key] = arg
            operands.append((self.tensors[loaded(load).name], buffer_type(loaded(load))))
            maps.append(m)
            block_args.append(f"{arg}: {element_type(loaded(load).dtype)}")
        shape = self._shape_operand(iterators, [load.indices for load in loads(value)] + [stage.store_indices], dims)
        if shape is not None:
            operands.append(shape[:2])
            maps.append(shape[2])
            block_args.append(f"{self.body.fresh('unread')}: {shape[3]}")
        out_arg = self.body.fresh("acc")
        arguments[accumulator] = out_arg
        block_args.append(f"{out_arg}: {element_type(stage.buffer.dtype)}")
        values = _StageValues(arguments, dims, self.tensors)
        result = ExprPrinter(region, values).print(value)
        iterator_types = ", ".join(f'"{REDUCTION if it.kind == "R" else PARALLEL}"' for it in iterators)
        ins = (f"ins({', '.join(v for v, _ in operands)} : {', '.join(t for _, t in operands)}) "
               if operands else "")
        out_type = buffer_type(stage.buffer)
        name = self.body.fresh(stage.name)
        self.body.emit(f"{name} = linalg.generic {{indexing_maps = [{', '.join(maps + [out_map])}], "
                       f"iterator_types = [{iterator_types}]}}")
        self.body.emit(f"    {ins}outs({outs} : {out_type}) {{")
        self.body.emit(f"  ^bb0({', '.join(block_args)}):")
        self.body.lines.extend(region.lines)
        self.body.emit(f"    linalg.yield {result} : {element_type(stage.buffer.dtype)}")
        self.body.emit(f"}} -> {out_type}")
        return name

    def _shape_operand(self, iterators, index_lists, dims: dict):
        """(SSA value, type, map, element type) of an extra input carrying the extents of the
        loop dims no operand indexes, or None when every dim is indexed. linalg infers each
        loop's extent from the operands' shapes (its maps must be invertible): a reduction
        over an axis its body never reads (a per-channel sum of a per-rank count over N and
        HW, which reads no HW index) has none. The extra input is a kernel input whose every
        axis is one loop's whole extent, these loops among them (IREE's GPU codegen
        distributes such a generic; it fails to distribute one reading a ``tensor.empty``),
        else a ``tensor.empty`` of those extents, an i8 per element; the body reads neither."""
        used = {dims[i.name] for indices in index_lists for i in indices if kind(i) in VARS and i.name in dims}
        missing = [k for k in range(len(iterators)) if k not in used]
        if not missing:
            return None
        found = self._input_spanning(iterators, missing, dims)
        if found is not None:
            return found
        extents = [iterators[k].extent for k in missing]
        shape_type = tensor_type(extents, "i8")
        sizes = ", ".join(self.body.dynamic_sizes(extents))
        value = self.body.op(f"tensor.empty({sizes}) : {shape_type}", "shape")
        names = ", ".join(f"d{k}" for k in range(len(dims)))
        return value, shape_type, f"affine_map<({names}) -> ({', '.join(f'd{k}' for k in missing)})>", "i8"

    def _input_spanning(self, iterators, missing: list, dims: dict):
        """(SSA value, type, map, element type) of a kernel input each of whose axes is a
        loop's whole extent (one size variable, one loop), covering the ``missing`` loops;
        None if none is."""
        by_extent: dict = {}
        for k, it in enumerate(iterators):
            if kind(it.extent) in ("Var", "SizeVar"):
                by_extent.setdefault(it.extent.name, []).append(k)
        names = ", ".join(f"d{k}" for k in range(len(dims)))
        for buf in self.graph.inputs:
            axes = [by_extent.get(e.name, []) if kind(e) in ("Var", "SizeVar") else [] for e in buf.shape]
            if all(len(a) == 1 for a in axes) and set(missing) <= {a[0] for a in axes}:
                return (self.tensors[buf.name], buffer_type(buf),
                        f"affine_map<({names}) -> ({', '.join(f'd{a[0]}' for a in axes)})>", element_type(buf.dtype))
        return None


def print_function(symbol: str, func, attributes: str = "") -> str:
    return FunctionPrinter(symbol, stage_graph(func), attributes).print()


def print_module(mod) -> str:
    """Every PrimFunc of ``mod`` as one ``func.func`` in a module (MLIR text)."""
    funcs = [print_function(gvar.name_hint, func) for gvar, func in mod.functions.items()]
    return "module {\n" + "\n".join(funcs) + "\n}\n"
