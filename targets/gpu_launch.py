"""Launch plans for device kernels that opgen launches itself (OpenCL through pyopencl).

TVM splits a scheduled PrimFunc into device kernels plus host code that launches them in
order, with grid and block sizes that are expressions of the shapes (``ceil(cols / 256)``)
and extra scalar arguments that are too (``cse_v7``). The TVM runtime in the wheel cannot
launch OpenCL kernels without a vendor runtime, so opgen reads the host code instead: it
captures the module right after TVM's SplitHostDevice pass (during the ordinary
``tvm.compile``, through a pass instrument) and turns each ``call_ffi_kernel`` into a
``Launch``: kernel name, arguments (a tensor parameter, or a scalar computed from the
shapes) and the grid/block extents. The expressions are compiled to Python once, at build
time, so a call costs a few dict lookups, not TVM simplifier calls.

Only straight-line host code is supported (what the GPU schedules produce), plus the
``if`` that ``guard_empty_launches`` puts around each launch; anything else (a host loop,
another branch, a host allocation) is refused at build time with the reason.

Empty launches. TVM's runtime raises a 0 grid or block dimension to 1 before it launches
(``LaunchParamConfig::Extract``: "Dynamic shapes can result in 0 dim size"), and a kernel
bound to ``blockIdx`` over a loop of N*C rows has no guard on ``blockIdx.x < N*C`` (TVM
proves it away from the binding), so with N = 0 one block ran row 0 of an empty tensor:
invalid reads and writes, seen under Oclgrind for GroupNorm's kernels 0 and 1. The TVM
simplifier removes any guard written inside the kernel for the same reason, so
``guard_empty_launches`` puts it on the host side instead: every GPU target wraps each
kernel's loop nest in ``if <each symbolic thread extent> > 0`` before compiling, the
condition lands in the host code around the launch, and an empty kernel is not launched at
all, whichever runtime launches it (TVM's CUDA runtime, opgen's OpenCL launcher).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from opgen.lazy import s_tir, tirx, tvm, tvm_ffi


@functools.lru_cache(maxsize=None)
def _binary() -> dict:
    """TIR binary node type -> its Python template (made on first use: TVM's classes)."""
    table = {tirx.Add: "({} + {})", tirx.Sub: "({} - {})", tirx.Mul: "({} * {})",
             tirx.FloorDiv: "({} // {})", tirx.FloorMod: "({} % {})", tirx.Min: "min({}, {})",
             tirx.Max: "max({}, {})", tirx.LT: "({} < {})", tirx.LE: "({} <= {})",
             tirx.GT: "({} > {})", tirx.GE: "({} >= {})", tirx.EQ: "({} == {})", tirx.NE: "({} != {})",
             tirx.And: "({} and {})", tirx.Or: "({} or {})"}
    # Truncating division and modulo agree with floor ones on the non-negative sizes seen here.
    table[tirx.Div] = "({} // {})"
    table[tirx.Mod] = "({} % {})"
    return table


THREAD_AXES = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z")


class UnsupportedHostCode(NotImplementedError):
    """The host side of a scheduled function does more than launch kernels in sequence."""


class _Names:
    """Python names for TVM Vars (matched by identity, as TVM does)."""

    def __init__(self):
        self.vars: list = []

    def name(self, var) -> str | None:
        for i, known in enumerate(self.vars):
            if known.same_as(var):
                return f"v{i}"
        return None

    def add(self, var) -> str:
        self.vars.append(var)
        return f"v{len(self.vars) - 1}"


def _float32(value: float) -> float:
    """``value`` rounded to float32, as the host code TVM would run computes it."""
    with np.errstate(over="ignore"):
        return float(np.float32(value))


_NAMESPACE = {"min": min, "max": max, "f32": _float32}


def _is_float(expr) -> bool:
    return tvm.DataType(expr.ty.dtype).type_code in (tvm.DataTypeCode.FLOAT, tvm.DataTypeCode.BFLOAT)


def _float_result(expr, code: str) -> str:
    """A float32 expression's Python code, rounded after each operation (binary64 then
    binary32 rounding of +, -, *, / of float32 operands is float32 arithmetic, exactly)."""
    return f"f32({code})" if str(expr.ty.dtype) == "float32" else code


def python_expr(expr, names: _Names) -> str:
    """Python source computing a PrimExpr of the launch (an integer size, or a float scalar
    argument the host hoisted out of a kernel, e.g. ``1.0 / cols``) from the named variables."""
    if isinstance(expr, (tirx.IntImm, int)):
        return str(int(expr))
    if isinstance(expr, tirx.FloatImm):
        return _float_result(expr, repr(float(expr.value)))
    if isinstance(expr, tirx.Cast) and _is_float(expr):
        return _float_result(expr, f"float({python_expr(expr.value, names)})")
    if isinstance(expr, tirx.Cast) and _is_float(expr.value):
        return f"int({python_expr(expr.value, names)})"            # C's conversion truncates
    if isinstance(expr, (tirx.Div, tirx.Add, tirx.Sub, tirx.Mul)) and _is_float(expr):
        op = {tirx.Div: "/", tirx.Add: "+", tirx.Sub: "-", tirx.Mul: "*"}[type(expr)]
        return _float_result(expr, f"({python_expr(expr.a, names)} {op} {python_expr(expr.b, names)})")
    if isinstance(expr, tirx.Var):
        name = names.name(expr)
        if name is None:
            raise UnsupportedHostCode(f"launch expression uses unbound variable {expr.name}")
        return f"e[{name!r}]"
    if isinstance(expr, tirx.Cast):
        return python_expr(expr.value, names)
    if isinstance(expr, tirx.Not):
        return f"(not {python_expr(expr.a, names)})"
    if isinstance(expr, tirx.Select):
        return "({} if {} else {})".format(python_expr(expr.true_value, names), python_expr(expr.condition, names),
                                          python_expr(expr.false_value, names))
    template = _binary().get(type(expr))
    if template is None:
        raise UnsupportedHostCode(f"launch expression {expr} ({type(expr).__name__}) is not supported")
    return template.format(python_expr(expr.a, names), python_expr(expr.b, names))


@dataclass(frozen=True)
class Launch:
    """One device kernel launch. ``args``: ("tensor", parameter index) or ("scalar", dtype,
    python expression); ``grid``/``block``: python expressions per axis (x, y, z);
    ``condition``: the host code's guard (a python expression), "1" when it has none."""

    kernel: str
    args: tuple
    grid: tuple
    block: tuple
    condition: str = "1"


@dataclass(frozen=True)
class LaunchPlan:
    """The launches of one scheduled function, in order, and how to size them."""

    launches: tuple
    shape_vars: tuple        # (python name, parameter index, axis)
    binds: tuple             # (python name, python expression), in host program order
    shapes: tuple = ()       # per parameter, its shape: a python expression per axis (opgen export
                             # writes them: the runner checks the caller's arrays and sizes the workspace)

    def environment(self, shapes: list) -> dict:
        """Values of every name the launches use, given each parameter's shape."""
        env = {name: int(shapes[index][axis]) for name, index, axis in self.shape_vars}
        for name, code in self.binds:
            env[name] = eval(code, _NAMESPACE, {"e": env})  # noqa: S307 (our own generated code)
        return env

    @staticmethod
    def evaluate(code: str, env: dict):
        """An int (a size, an index) or a float (a hoisted float scalar argument)."""
        value = eval(code, _NAMESPACE, {"e": env})  # noqa: S307
        return value if isinstance(value, float) else int(value)


def _statements(stmt) -> list:
    """The host body flattened: SeqStmt and DeclBuffer are transparent, an ``if`` without
    ``else`` is kept whole (a guarded launch); others refused."""
    if isinstance(stmt, tirx.SeqStmt):
        return [s for child in stmt.seq for s in _statements(child)]
    if isinstance(stmt, (tirx.Bind, tirx.Evaluate, tirx.DeclBuffer)):
        return [stmt]
    if isinstance(stmt, tirx.IfThenElse) and stmt.else_case is None:
        return [stmt]
    raise UnsupportedHostCode(f"host code holds a {type(stmt).__name__}; opgen launches straight-line code only")


def _guarded_calls(stmt) -> list:
    """The kernel calls an ``if`` guards: nothing else may be inside."""
    body = _statements(stmt.then_case)
    if not all(isinstance(s, tirx.Evaluate) and _kernel_call(s) is not None for s in body):
        raise UnsupportedHostCode(f"host code branches on {stmt.condition} around more than kernel launches")
    return [_kernel_call(s) for s in body]


def _buffer_var(expr):
    """The buffer variable behind ``expr`` (TVM 0.27 writes a buffer's data pointer as
    ``tirx.buffer_data(buffer)``, a new Call object at every access)."""
    if isinstance(expr, tvm.ir.Call) and expr.op.name == "tirx.buffer_data":
        return expr.args[0]
    return expr


def _tensor_index(expr, tensors: list) -> int | None:
    var = _buffer_var(expr)
    return next((index for known, index in tensors if known.same_as(var)), None)


def _kernel_call(stmt):
    value = stmt.value
    if isinstance(value, tvm.ir.Call) and value.args and isinstance(value.args[0], tvm.ir.StringImm):
        return value
    return None


def _launch(call, device_funcs: dict, names: _Names, tensors: list, condition: str = "1") -> Launch:
    name = call.args[0].value
    func = device_funcs[name]
    params = list(func.params)
    launch_params = [str(p) for p in func.attrs["tirx.kernel_launch_params"]]
    unknown = [p for p in launch_params if p not in THREAD_AXES]
    if unknown:
        raise UnsupportedHostCode(f"kernel {name} needs launch parameters {unknown}")
    values = list(call.args[1:])
    args = []
    for param, value in zip(params, values[:len(params)]):
        if isinstance(param.ty, tvm.ir.PointerType):
            index = _tensor_index(value, tensors)
            if index is None:
                raise UnsupportedHostCode(f"kernel {name} takes a buffer that is not a parameter ({value})")
            args.append(("tensor", index))
        else:
            args.append(("scalar", str(param.ty.dtype), python_expr(value, names)))
    extents = dict(zip(launch_params, values[len(params):]))
    axis = lambda kind: tuple(python_expr(extents[f"{kind}.{d}"], names) if f"{kind}.{d}" in extents else "1"  # noqa: E731
                              for d in "xyz")
    return Launch(name, tuple(args), axis("blockIdx"), axis("threadIdx"), condition)


def launch_plan(split_mod, symbol: str) -> LaunchPlan:
    """The LaunchPlan of ``symbol`` in a module captured after SplitHostDevice."""
    host = split_mod[symbol]
    device_funcs = {gv.name_hint: f for gv, f in split_mod.functions.items()
                    if int(f.attrs.get("calling_conv", 0)) == 2}
    names = _Names()
    shape_vars = []
    for index, buf in enumerate(host.params):
        for axis, extent in enumerate(buf.shape):
            if isinstance(extent, tirx.Var) and names.name(extent) is None:
                shape_vars.append((names.add(extent), index, axis))
    tensors = [(buf, index) for index, buf in enumerate(host.params)]   # (buffer var, parameter)
    binds, launches = [], []
    for buf in host.params:
        # Buffers that declare an element offset (any-alignment parameters): the module
        # hands each kernel a buffer starting at the tensor's first element, so it is 0.
        if isinstance(buf.elem_offset, tirx.Var) and names.name(buf.elem_offset) is None:
            binds.append((names.add(buf.elem_offset), "0"))
    for stmt in _statements(host.body):
        if isinstance(stmt, tirx.DeclBuffer):     # a flattened view of a parameter
            index = _tensor_index(stmt.data, tensors)
            if index is None:
                raise UnsupportedHostCode(f"host code declares a buffer {stmt.buffer} that is not a parameter")
            tensors.append((stmt.buffer, index))
        elif isinstance(stmt, tirx.Bind):
            code = python_expr(stmt.value, names)
            binds.append((names.add(stmt.var), code))
        elif isinstance(stmt, tirx.IfThenElse):
            condition = python_expr(stmt.condition, names)
            launches += [_launch(call, device_funcs, names, tensors, condition) for call in _guarded_calls(stmt)]
        elif _kernel_call(stmt) is not None:
            launches.append(_launch(_kernel_call(stmt), device_funcs, names, tensors))
        else:
            raise UnsupportedHostCode(f"host code evaluates {stmt.value}; opgen only launches kernels")
    shapes = tuple(tuple(python_expr(extent, names) for extent in buf.shape) for buf in host.params)
    return LaunchPlan(tuple(launches), tuple(shape_vars), tuple(binds), shapes)


def config_for(mod, config: dict) -> dict:
    """The build config of ``mod``: ``config``, with TVM's common-subexpression elimination
    off for a module holding a vector variant (a PrimFunc with ``schedules.VECTOR_LANES``).
    CSE binds a vector access's index to a variable, and TVM 0.27's code generator then no
    longer sees the ramp it vectorizes: it gathered element by element (seen in the CUDA
    source: make_float4 of four loads). nvcc and the OpenCL compilers eliminate common
    subexpressions themselves."""
    return {**config, "tirx.disable_cse_tir": True} if vectorized(mod) else config


def vectorized(mod) -> bool:
    """Whether ``mod`` holds a vector variant (a PrimFunc with ``schedules.VECTOR_LANES``)."""
    from opgen.schedules import VECTOR_LANES
    return any(func.attrs is not None and VECTOR_LANES in func.attrs for func in mod.functions.values())


def with_32_bit_indices(mod):
    """``mod`` with its index arithmetic in int32 when it holds a vector variant (TVM's
    ForceNarrowIndexToInt32), else unchanged. The ops declare int64 sizes, and TVM keeps
    every address computation in int64 (NarrowDataType narrows only what it can bound, and a
    product of two symbolic sizes is unbounded): on sm_90, 64-bit index arithmetic was most
    of the elementwise loop. The vector variant is chosen only for problems whose index
    values fit in int32 (schedules/gpu.py, vector_defaults)."""
    import tvm.tirx.transform
    return tvm.tirx.transform.ForceNarrowIndexToInt32()(mod) if vectorized(mod) else mod


def compile_capturing_split(mod, target, config: dict):
    """``tvm.compile(mod, target)`` under ``config``; returns (executable, module right after
    SplitHostDevice)."""
    captured = {}

    @tvm.ir.instrument.pass_instrument
    class _Capture:
        def run_after_pass(self, module, info):
            if info.name == "tirx.SplitHostDevice":
                captured["mod"] = module

    with tvm.transform.PassContext(config=config_for(mod, config), instruments=[_Capture()]):
        executable = tvm.compile(with_32_bit_indices(mod), target=target)
    return executable, captured["mod"]


# ---- empty launches ------------------------------------------------------------------------

def _thread_loop(stmt) -> bool:
    return isinstance(stmt, tirx.For) and stmt.kind == tirx.ForKind.THREAD_BINDING


def _symbolic_thread_extents(nest) -> list:
    """The extents of the thread-bound loops in ``nest`` that are not constants."""
    found = []

    def visit(node):
        if _thread_loop(node) and not isinstance(node.extent, tirx.IntImm):
            found.append(node.extent)
        return node
    tvm_ffi.structural_map(nest, [(tirx.For, visit)], order="post")
    return found


def _guard_nests(stmt):
    """Each root-level loop nest bound to GPU threads, inside ``if`` every symbolic extent
    of its bindings is positive (a SeqStmt is walked; anything else is left alone)."""
    if isinstance(stmt, tirx.SeqStmt):
        return tirx.SeqStmt([_guard_nests(child) for child in stmt.seq])
    if not _thread_loop(stmt):
        return stmt
    extents = _symbolic_thread_extents(stmt)
    if not extents:
        return stmt
    condition = extents[0] > 0
    for extent in extents[1:]:
        condition = tirx.And(condition, extent > 0)
    return tirx.IfThenElse(condition, stmt, None)


def guard_empty_launches(mod):
    """``mod`` with every kernel launched only when none of its thread extents is 0 (see the
    module docstring). Takes scheduled PrimFuncs (their root block holds one loop nest per
    kernel); the condition ends up in the host code around the launch."""
    funcs = {}
    for gv, func in mod.functions.items():
        realize = func.body
        if not isinstance(realize, s_tir.stmt.SBlockRealize):
            funcs[gv] = func
            continue
        root = realize.block
        guarded = s_tir.stmt.SBlock(root.iter_vars, root.reads, root.writes, root.name_hint, _guard_nests(root.body),
                                    root.init, root.alloc_buffers, root.match_buffers, root.annotations)
        funcs[gv] = func.with_body(s_tir.stmt.SBlockRealize(realize.iter_values, realize.predicate, guarded))
    return tvm.IRModule(funcs, attrs=mod.attrs)
