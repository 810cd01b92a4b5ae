"""Launch plans read from disk (docs/launch-plan.md), checked, and run through a backend.

Everything here is shared by every backend, so replaying a plan on an OpenCL device tests
the logic a GPU run uses: which launches are made (the guards, empty grids), their grid and
block sizes, their arguments, the workspace, the check that the caller's arrays have the
shapes, dtypes and C-contiguous layout the kernels index with (a wrong one would be read
out of bounds or misread, not refused by the kernel), and which variant of a kernel runs:
a plan with ``requires`` (the 128-bit variant) runs only on calls its conditions admit, and
``choose`` picks among a kernel's plans (``load_family``) as the library's per-call choice
does (the same rule, written by opgen.export from the schedule rule's ``call_variants``).

The array checks read only ``.shape``, ``.dtype`` and the strides (``.strides`` in bytes as
numpy and CuPy have them, or torch's ``.stride()`` in elements) and the data address, so
numpy, CuPy and torch arrays (CPU or CUDA) are all checked the same way.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from opgen.runtime.expr import Expr, PlanError

FORMAT = "opgen-launch-plan/2"     # /2: ``requires`` and ``variants`` (an old reader would run a
                                    # variant plan on calls it does not admit)
ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int8": 1, "uint8": 1}
SCALARS = ("int32", "int64", "float32", "float64")
ROLES = ("input", "output", "workspace")
# What an array's dtype may be called for a parameter's dtype: its own name, and bfloat16 as
# its uint16 bits too (CuPy has no bfloat16); never another dtype of the same size.
DTYPE_NAMES = {"bfloat16": ("bfloat16", "uint16")}
WORKSPACE_ALIGN = 256    # bytes: each workspace buffer starts at a multiple of this


@dataclass(frozen=True)
class Param:
    name: str
    role: str
    dtype: str
    shape: tuple          # Expr per axis


@dataclass(frozen=True)
class Kernel:
    name: str
    guard: Expr
    grid: tuple           # Expr per axis (x, y, z)
    block: tuple
    args: tuple           # ("param", index) or ("scalar", dtype, Expr)


@dataclass(frozen=True)
class Plan:
    """A checked plan; ``folder``: where its code files are; ``doc``: the JSON as read."""

    folder: Path
    doc: dict
    params: tuple
    shape_vars: tuple     # (name, param index, axis)
    binds: tuple          # (name, Expr) in order
    kernels: tuple
    requires: tuple = ()  # Expr per condition the call's sizes must meet (a variant plan)
    aligned: tuple = ()   # (parameter index, bytes) each caller address must be a multiple of
    variants: tuple = ()  # sub-folder names of the kernel's variant plans, in the order tried

    @property
    def code(self) -> dict:
        return self.doc["code"]

    def code_file(self, name) -> Path:
        """A code file named by the plan: a plain file name in the plan's own folder."""
        if not isinstance(name, str) or not name or Path(name).name != name or name in (".", ".."):
            raise PlanError(f"code file {name!r} is not a plain file name beside the plan")
        return self.folder / name

    def caller_params(self) -> list:
        """The parameters the caller passes (inputs, then outputs), in order."""
        return [p for p in self.params if p.role != "workspace"]


def _field(doc: dict, name: str, kind):
    value = doc.get(name)
    if not isinstance(value, kind):
        raise PlanError(f"plan field {name!r} missing or not a {getattr(kind, '__name__', kind)}")
    return value


def _name(value) -> str:
    if not isinstance(value, str) or not value.isidentifier() or value.startswith("_") or \
            value in ("min", "max", "int", "float", "f32"):
        raise PlanError(f"bad variable name {value!r}")
    return value


def _params(doc: dict, names) -> tuple:
    params = []
    for p in _field(doc, "params", list):
        if not isinstance(p, dict) or p.get("role") not in ROLES or p.get("dtype") not in ITEMSIZE:
            raise PlanError(f"bad parameter {p!r}")
        shape = tuple(Expr(e, names) for e in _field(p, "shape", list))
        params.append(Param(str(p.get("name", "")), p["role"], p["dtype"], shape))
    return tuple(params)


def _kernel(k: dict, names, n_params: int) -> Kernel:
    if not isinstance(k, dict):
        raise PlanError(f"bad kernel {k!r}")
    args = []
    for a in _field(k, "args", list):
        if isinstance(a, dict) and isinstance(a.get("param"), int) and not isinstance(a["param"], bool) \
                and 0 <= a["param"] < n_params:
            args.append(("param", a["param"]))
        elif isinstance(a, dict) and a.get("scalar") in SCALARS:
            args.append(("scalar", a["scalar"], Expr(_field(a, "expr", (str, int)), names)))
        else:
            raise PlanError(f"kernel {k.get('name')!r}: bad argument {a!r}")
    grid, block = _field(k, "grid", list), _field(k, "block", list)
    if len(grid) != 3 or len(block) != 3:
        raise PlanError(f"kernel {k.get('name')!r}: grid and block need 3 axes")
    return Kernel(_field(k, "name", str), Expr(k.get("guard", "1"), names), tuple(Expr(e, names) for e in grid),
                  tuple(Expr(e, names) for e in block), tuple(args))


def parse(doc: dict, folder: Path) -> Plan:
    """Check a plan document (PlanError naming what is wrong); every expression is parsed
    and checked here, before anything runs."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise PlanError(f"not a launch plan of format {FORMAT!r} (format: "
                        f"{doc.get('format') if isinstance(doc, dict) else None!r})")
    n_params = len(_field(doc, "params", list))
    shape_vars, names = [], []
    for v in _field(doc, "shape_vars", list):
        if not isinstance(v, dict) or not all(isinstance(v.get(k), int) for k in ("param", "axis")) \
                or not 0 <= v["param"] < n_params:
            raise PlanError(f"bad shape variable {v!r}")
        shape_vars.append((_name(v.get("name")), v["param"], v["axis"]))
        names.append(shape_vars[-1][0])
    binds = []
    for b in _field(doc, "binds", list):
        if not isinstance(b, dict):
            raise PlanError(f"bad bind {b!r}")
        binds.append((_name(b.get("name")), Expr(_field(b, "expr", (str, int)), names)))  # earlier names only
        names.append(binds[-1][0])
    params = _params(doc, names)
    kernels = tuple(_kernel(k, names, n_params) for k in _field(doc, "kernels", list))
    requires, aligned = _requires(doc, names, params)
    plan = Plan(Path(folder), doc, params, tuple(shape_vars), tuple(binds), kernels, requires, aligned,
                _variants(doc))
    _code_files(plan)
    return plan


def _requires(doc: dict, names, params) -> tuple:
    """(conditions, alignments) of a variant plan's ``requires``; ((), ()) without one."""
    requires = doc.get("requires", {})
    if not isinstance(requires, dict) or set(requires) - {"when", "aligned"}:
        raise PlanError(f"bad requires {requires!r}")
    when = requires.get("when", [])
    if not isinstance(when, list):
        raise PlanError(f"bad requires conditions {when!r}")
    when = tuple(Expr(e, names) for e in when)
    aligned = []
    for a in requires.get("aligned", []):
        ok = isinstance(a, dict) and all(isinstance(a.get(k), int) and not isinstance(a.get(k), bool)
                                         for k in ("param", "bytes"))
        if not ok or not 0 <= a["param"] < len(params) or params[a["param"]].role == "workspace" or a["bytes"] < 1:
            raise PlanError(f"bad alignment requirement {a!r}")
        aligned.append((a["param"], a["bytes"]))
    return when, tuple(aligned)


def _variants(doc: dict) -> tuple:
    """The plain sub-folder names ``variants`` lists (PlanError otherwise)."""
    variants = doc.get("variants", [])
    if not isinstance(variants, list) or not all(isinstance(v, str) and v.isidentifier() for v in variants):
        raise PlanError(f"bad variants {variants!r}: plain sub-folder names")
    return tuple(variants)


def _code_files(plan: Plan) -> None:
    """Every file the code section names is a plain name beside the plan (PlanError)."""
    code = _field(plan.doc, "code", dict)
    if "source" in code:
        plan.code_file(code["source"])
    archs = code.get("archs", {})
    if not isinstance(archs, dict) or not all(isinstance(f, dict) for f in archs.values()):
        raise PlanError(f"bad code architectures {archs!r}")
    for files in archs.values():
        for name in files.values():
            plan.code_file(name)


def load(path) -> Plan:
    """The plan in the JSON file ``path``, checked."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise PlanError(f"cannot read launch plan {path}: {err}") from None
    return parse(doc, path.parent)


def load_family(path) -> tuple:
    """The plans of one kernel in the order the library prefers them: each variant the plan
    at ``path`` lists (``<folder>/<variant>/plan.json``), then that plan itself, which
    requires nothing and so takes every call the variants refuse."""
    base = load(path)
    if base.requires or base.aligned:
        raise PlanError(f"{path} is a variant plan (it has requires); load its kernel's own plan")
    return tuple(load(base.folder / name / "plan.json") for name in base.variants) + (base,)


def choose(family, arrays: list) -> Plan:
    """The first plan of ``family`` (``load_family``) that admits ``arrays``: the library's
    per-call choice (schedules' ``call_variants``), made from the plans alone."""
    for plan in family:
        if refusal(plan, arrays) is None:
            return plan
    raise PlanError(f"no plan of the kernel admits the call: {refusal(family[-1], arrays)}")


# ---- the caller's arrays --------------------------------------------------------------------

def dtype_name(array) -> str:
    """numpy's name of an array's element type: ``float32`` for numpy, CuPy and torch
    (``torch.float32``) alike; ``bfloat16`` for ml_dtypes' and torch's."""
    dtype = array.dtype
    name = getattr(dtype, "name", None)
    return name if isinstance(name, str) else str(dtype).rpartition(".")[2]


def element_strides(array) -> tuple:
    """The strides in elements: torch's ``stride()``, else ``.strides`` (bytes) divided by
    the element size (PlanError when one is not a multiple of it)."""
    stride = getattr(array, "stride", None)
    if callable(stride):
        return tuple(int(s) for s in stride())
    size = ITEMSIZE.get(dtype_name(array)) or array.dtype.itemsize
    if any(s % size for s in array.strides):
        raise PlanError(f"strides {tuple(array.strides)} are not whole {dtype_name(array)} elements")
    return tuple(s // size for s in array.strides)


def is_contiguous(array) -> bool:
    """Whether the elements lie in C order with no gaps: each stride the product of the
    extents after it (axes of extent 1 and empty arrays excepted, as numpy's flag does)."""
    shape = tuple(int(e) for e in array.shape)
    if 0 in shape:
        return True
    expected = 1
    for extent, stride in reversed(list(zip(shape, element_strides(array)))):
        if extent != 1 and stride != expected:
            return False
        expected *= extent
    return True


def address(array) -> int:
    """The address of the array's first element: torch's ``data_ptr()``, else the CUDA or
    numpy array interface's (CuPy, numpy)."""
    data_ptr = getattr(array, "data_ptr", None)
    if callable(data_ptr):
        return int(data_ptr())
    interface = getattr(array, "__cuda_array_interface__", None) or getattr(array, "__array_interface__", None)
    if interface is None:
        raise PlanError(f"cannot read the address of a {type(array).__name__}")
    return int(interface["data"][0])


def array_refusal(param: Param, array) -> str | None:
    """Why ``array`` cannot be handed to the kernel as ``param``: a dtype other than the
    parameter's (by name: bfloat16 is not float16, though both are 2 bytes), or a layout
    other than C-contiguous (the kernel indexes as if it were); None when it can."""
    name = dtype_name(array)
    if name not in DTYPE_NAMES.get(param.dtype, (param.dtype,)):
        return f"{param.name}: {name} elements, the kernel takes {param.dtype}"
    if not is_contiguous(array):
        return f"{param.name}: not C-contiguous (shape {tuple(array.shape)}, element strides " \
               f"{element_strides(array)}); the runner takes C-contiguous arrays only"
    return None


def refusal(plan: Plan, arrays: list) -> str | None:
    """Why ``plan`` cannot run on ``arrays`` (inputs then outputs): their count, shapes,
    dtypes or layout, or a condition or alignment its ``requires`` names; None when it can."""
    caller = plan.caller_params()
    try:
        env = environment(plan, [tuple(int(e) for e in a.shape) for a in arrays])
    except PlanError as err:
        return str(err)
    for param, array in zip(caller, arrays):
        why = array_refusal(param, array)
        if why:
            return why
    for condition in plan.requires:
        if not condition(env):
            return f"variant {plan.doc.get('variant')!r} requires {condition.text}"
    for index, align in plan.aligned:
        array = arrays[sum(p.role != "workspace" for p in plan.params[:index])]
        if array_size(array) and address(array) % align:
            return f"variant {plan.doc.get('variant')!r} requires {plan.params[index].name} {align}-byte aligned"
    return None


def array_size(array) -> int:
    return math.prod(int(e) for e in array.shape)


# ---- one call ------------------------------------------------------------------------------

def environment(plan: Plan, shapes: list) -> dict:
    """Every name's value, given the caller's array shapes (inputs, then outputs)."""
    caller = plan.caller_params()
    if len(shapes) != len(caller):
        raise PlanError(f"the plan takes {len(caller)} arrays ({', '.join(p.name for p in caller)}), got {len(shapes)}")
    for param, shape in zip(caller, shapes):
        if len(shape) != len(param.shape):
            raise PlanError(f"{param.name}: {len(shape)} dimensions, the kernel takes {len(param.shape)}")
    env = {name: int(shapes[index][axis]) for name, index, axis in plan.shape_vars}
    for name, expr in plan.binds:
        env[name] = expr(env)
    for param, shape in zip(caller, shapes):
        wanted = tuple(e(env) for e in param.shape)
        if tuple(shape) != wanted:
            raise PlanError(f"{param.name}: shape {tuple(shape)}, the kernel's sizes need {wanted}")
    return env


def workspace(plan: Plan, env: dict) -> list:
    """(parameter index, byte offset, bytes) of each workspace buffer, laid out one after
    the other at WORKSPACE_ALIGN-byte offsets; the last offset + bytes is the total."""
    layout, offset = [], 0
    for index, param in enumerate(plan.params):
        if param.role == "workspace":
            size = math.prod(e(env) for e in param.shape) * ITEMSIZE[param.dtype]
            layout.append((index, offset, size))
            offset += -(-size // WORKSPACE_ALIGN) * WORKSPACE_ALIGN
    return layout


def launches(plan: Plan, env: dict) -> list:
    """(kernel, grid, block, args) of each launch made, in order: a launch whose guard is
    false, or with a 0 grid or block dimension, is not made (CUDA and OpenCL refuse empty
    launches; TVM's runtime would raise them to 1, which a kernel need not survive)."""
    made = []
    for k in plan.kernels:
        if not k.guard(env):
            continue
        grid, block = tuple(e(env) for e in k.grid), tuple(e(env) for e in k.block)
        if 0 in grid or 0 in block:
            continue
        if min(grid + block) < 0:
            raise PlanError(f"kernel {k.name}: negative launch size grid={grid} block={block}")
        args = [a if a[0] == "param" else ("scalar", a[1], a[2](env)) for a in k.args]
        made.append((k.name, grid, block, args))
    return made


class Prepared:
    """One call made ready: the arrays bound, the workspace allocated, every launch's grid,
    block and packed arguments computed, once. ``launch`` then only enqueues the kernels (no
    plan evaluation, no synchronization), which is what a timing loop must time
    (scripts/export_bench.py); ``finish`` makes the outputs visible to the caller."""

    def __init__(self, plan: Plan, arrays: list, backend):
        why = refusal(plan, arrays)
        if why:
            raise PlanError(why)
        caller = plan.caller_params()
        env = environment(plan, [tuple(a.shape) for a in arrays])
        self.backend, self.arrays = backend, arrays
        self.outputs = [p.role == "output" for p in caller]
        self.handles = backend.bind(arrays)
        buffers, caller_index = [], iter(range(len(arrays)))
        scratch = {index: size for index, _, size in workspace(plan, env)}
        for index, param in enumerate(plan.params):
            buffers.append(backend.alloc(scratch[index]) if param.role == "workspace"
                           else self.handles[next(caller_index)])
        self.buffers = buffers       # the workspace lives as long as the prepared call
        self.steps = [(name, grid, block, [buffers[a[1]] if a[0] == "param" else backend.scalar(a[1], a[2])
                                           for a in args])
                      for name, grid, block, args in launches(plan, env)]

    def launch(self) -> None:
        for name, grid, block, args in self.steps:
            self.backend.launch(name, grid, block, args)

    def finish(self) -> None:
        self.backend.finish(self.arrays, self.handles, self.outputs)


def prepare(plan: Plan, arrays: list, backend) -> Prepared:
    """``run``'s work up to the launches, done once (PlanError on a call ``refusal`` names)."""
    return Prepared(plan, arrays, backend)


def run(plan: Plan, arrays: list, backend) -> None:
    """Run ``plan`` on ``arrays`` (inputs then outputs, C-contiguous, kernel shapes and
    dtypes) through ``backend`` (opgen.runtime.backends): outputs are written in place. A
    call ``refusal`` names (a variant plan's requires included) is a PlanError before any
    launch."""
    call = prepare(plan, arrays, backend)
    call.launch()
    call.finish()
