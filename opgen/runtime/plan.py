"""Launch plans read from disk (docs/launch-plan.md), checked, and run through a backend.

Everything here is shared by every backend, so replaying a plan on an OpenCL device tests
the logic a GPU run uses: which launches are made (the guards, empty grids), their grid and
block sizes, their arguments, the workspace, and the check that the caller's arrays have
the shapes the kernels index with (a wrong shape would read out of bounds, not fail).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from opgen.runtime.expr import Expr, PlanError

FORMAT = "opgen-launch-plan/1"
ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int8": 1, "uint8": 1}
SCALARS = ("int32", "int64", "float32", "float64")
ROLES = ("input", "output", "workspace")
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
    plan = Plan(Path(folder), doc, params, tuple(shape_vars), tuple(binds), kernels)
    _code_files(plan)
    return plan


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


def run(plan: Plan, arrays: list, backend) -> None:
    """Run ``plan`` on ``arrays`` (inputs then outputs, C-contiguous, kernel shapes) through
    ``backend`` (opgen.runtime.backends): outputs are written in place."""
    caller = plan.caller_params()
    env = environment(plan, [tuple(a.shape) for a in arrays])
    for param, array in zip(caller, arrays):
        if array.dtype.itemsize != ITEMSIZE[param.dtype]:
            raise PlanError(f"{param.name}: {array.dtype} elements, the kernel takes {param.dtype}")
    handles = backend.bind(arrays)
    buffers, caller_index = [], iter(range(len(arrays)))
    scratch = {index: size for index, _, size in workspace(plan, env)}
    for index, param in enumerate(plan.params):
        buffers.append(backend.alloc(scratch[index]) if param.role == "workspace" else handles[next(caller_index)])
    for name, grid, block, args in launches(plan, env):
        backend.launch(name, grid, block, [buffers[a[1]] if a[0] == "param" else backend.scalar(a[1], a[2])
                                           for a in args])
    backend.finish(arrays, handles, [p.role == "output" for p in caller])
