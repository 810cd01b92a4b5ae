"""``opgen export``: GPU kernels as files that run without TVM (docs/launch-plan.md).

Per op x dtype combo, under ``<out>/<target>/<op>/<dtypes>/``, the default kernel, and in a
sub-folder per variant the call path can choose instead (the schedule rule's
``call_variants``: the 128-bit ``vector/`` of the row rules), the same files:
  * the device code the target writes (``TargetSpec.export_code``: OpenCL C, or CUDA C with
    PTX and cubin per architecture);
  * ``plan.json``: the launch plan, read from the host code TVM generated
    (targets/gpu_launch.py) with its expressions made plain (``v3``, not ``e['v3']``), and
    checked by the runner's own parser before it is written, so a plan opgen writes is one
    the runner accepts;
  * ``cases.json`` + ``cases.npz``: golden cases, inputs in the kernel's shapes and the
    float64 reference with the allowed error per element (opgen.verify's rule), so a machine
    without TVM (scripts/gpu_check.sh) checks the kernels against the reference;
  * ``bench.json``: the caller shapes of the op's benchmark problems (scripts/export_bench.py).

A variant's plan carries its selection rule (``requires``: conditions over the sizes and the
alignment of the caller's addresses, rendered from the same requirement object the library's
per-call choice applies), and the default plan lists its variants, so the runner
(opgen.runtime.plan.choose) picks as the library does.
"""
from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import numpy as np

from opgen import kernels, verify
from opgen.dtypes import numpy_dtype
from opgen.runtime import plan as runtime_plan

CASE_ELEMENTS = 4096     # golden cases: sample problems whose largest tensor is at most this
RAGGED_ROWS = 37         # a leading axis ragged against every power-of-two block count


class _PlainNames(ast.NodeTransformer):
    """``e['v3']`` (gpu_launch's compiled form) -> ``v3``."""

    def visit_Subscript(self, node):
        if isinstance(node.value, ast.Name) and node.value.id == "e" and isinstance(node.slice, ast.Constant):
            return ast.copy_location(ast.Name(node.slice.value, ast.Load()), node)
        return self.generic_visit(node)


def plain(code: str) -> str:
    """A launch expression in the plan's form: variable names, no environment lookups."""
    return ast.unparse(_PlainNames().visit(ast.parse(code, mode="eval")))


def _params(op, combo, func) -> list:
    """The kernel's parameters: inputs, outputs, then the workspace (hoisted scratch)."""
    names, n_inputs = op.kernel_tensors(combo), len(op.kernel_inputs(combo))
    return [{"name": names[i] if i < len(names) else str(buf.name),
             "role": "input" if i < n_inputs else "output" if i < len(names) else "workspace",
             "dtype": combo[names[i]] if i < len(names) else str(buf.dtype)}
            for i, buf in enumerate(func.params)]


def plan_document(op, combo, target, variant: str, knobs: dict, func, launch_plan, code: dict,
                  requirement=None, variants=()) -> dict:
    """The JSON launch plan of one kernel (format: opgen.runtime.plan.FORMAT); a variant's
    ``requirement`` (schedules' ``call_variants``) becomes its ``requires``, and the default
    kernel's plan lists the ``variants`` its folder holds."""
    params = _params(op, combo, func)
    for param, shape in zip(params, launch_plan.shapes):
        param["shape"] = [plain(e) for e in shape]
    extra = {"variants": list(variants)} if variants else {}
    if requirement is not None:
        extra["requires"] = {"when": requirement.conditions(params[requirement.row_param]["shape"]),
                             "aligned": [{"param": i, "bytes": requirement.align} for i in requirement.column_params]}
    kernels_ = [{"name": launch.kernel, "guard": plain(launch.condition),
                 "grid": [plain(e) for e in launch.grid], "block": [plain(e) for e in launch.block],
                 "args": [{"param": a[1]} if a[0] == "tensor" else {"scalar": a[1], "expr": plain(a[2])}
                          for a in launch.args]}
                for launch in launch_plan.launches]
    return {"format": runtime_plan.FORMAT, "op": op.name, "dtypes": combo.tag, "variant": variant,
            "target": target.name, "knobs": knobs, "code": code, "params": params,
            "shape_vars": [{"name": n, "param": i, "axis": a} for n, i, a in launch_plan.shape_vars],
            "binds": [{"name": n, "expr": plain(e)} for n, e in launch_plan.binds],
            "kernels": kernels_, **extra}


# ---- golden cases ------------------------------------------------------------------------------

def _largest(op, problem) -> int:
    return max(a.size for a in op.random_inputs(problem, op.combos[0], np.random.default_rng(0)).values())


def _valid(op, problem) -> bool:
    """Whether the op can make inputs, a reference and kernel arrays for ``problem``."""
    try:
        with np.errstate(all="ignore"):
            arrays = op.random_inputs(problem, op.combos[0], np.random.default_rng(0))
            op.reference(problem, arrays)
            op.kernel_args(problem, dict(arrays))
        return True
    except Exception:   # noqa: BLE001 -- a variant the op does not define (group 0, ...)
        return False


def _stretched(problem):
    """``problem`` with its leading size RAGGED_ROWS: the first axis of its first tuple field,
    else its first int field (GroupNorm's N); None when it has neither."""
    fields = [(f.name, getattr(problem, f.name)) for f in dataclasses.fields(problem)]
    for name, value in fields:
        if isinstance(value, tuple) and value:
            return dataclasses.replace(problem, **{name: (RAGGED_ROWS,) + value[1:]})
    for name, value in fields:
        if isinstance(value, int) and not isinstance(value, bool):
            return dataclasses.replace(problem, **{name: RAGGED_ROWS})
    return None


def zeroed(problem) -> list:
    """``problem`` with one size set to 0 at a time: each axis of a tuple field and each int
    field (bools and floats are attributes, not sizes). Shared with the race tests."""
    out = []
    for field in dataclasses.fields(problem):
        value = getattr(problem, field.name)
        if isinstance(value, tuple):
            out += [dataclasses.replace(problem, **{field.name: value[:i] + (0,) + value[i + 1:]})
                    for i in range(len(value))]
        elif isinstance(value, int) and not isinstance(value, bool):
            out.append(dataclasses.replace(problem, **{field.name: 0}))
    return out


def _variants(problem) -> list:
    """``problem`` stretched to ragged rows, and with each size set to 0 in turn."""
    return [p for p in [_stretched(problem)] if p is not None] + zeroed(problem)


def case_problems(op) -> list:
    """Small problems for golden cases: the sample problems up to CASE_ELEMENTS, and the
    smallest one stretched to ragged rows and with each size 0 (the valid ones)."""
    small = [p for p in op.problems if _largest(op, p) <= CASE_ELEMENTS]
    smallest = min(op.problems, key=lambda p: _largest(op, p))
    extra = [p for p in _variants(smallest) if _valid(op, p) and _largest(op, p) <= CASE_ELEMENTS]
    return list(dict.fromkeys(small + extra))


def _raw(array: np.ndarray) -> np.ndarray:
    """C-contiguous storage that .npz holds without pickling (bfloat16 as its uint16 bits)."""
    array = np.ascontiguousarray(array)
    return array.view(np.uint16) if array.dtype.name == "bfloat16" else array


def golden_cases(op, combo, rng, problems=None) -> tuple[list, dict]:
    """(case descriptions, arrays for cases.npz): per problem (default: ``case_problems``)
    the inputs in kernel shapes, and per output the float64 reference and the allowed
    absolute error per element."""
    rtol, atol = verify.TOLERANCES[combo[op.inputs[0]]]
    meta, arrays = [], {}
    for i, problem in enumerate(case_problems(op) if problems is None else problems):
        inputs = op.random_inputs(problem, combo, rng)
        with np.errstate(all="ignore"):
            ref = op.reference(problem, inputs)
        allowed = {n: atol + rtol * np.abs(ref[n]) + 0.5 * verify.ulp(ref[n], combo[n]) for n in op.outputs}
        as_kernel = lambda outs: op.kernel_args(problem, {**inputs, **outs})   # noqa: E731
        kernel_in, kernel_ref, kernel_allowed = as_kernel(ref), as_kernel(ref), as_kernel(allowed)
        for j, name in enumerate(op.kernel_inputs(combo)):
            arrays[f"c{i}_in{j}"] = _raw(kernel_in[name].astype(numpy_dtype(combo[name]), copy=False))
        for k, name in enumerate(op.outputs):
            arrays[f"c{i}_ref{k}"] = np.ascontiguousarray(kernel_ref[name], np.float64)
            arrays[f"c{i}_allowed{k}"] = np.ascontiguousarray(kernel_allowed[name], np.float64)
        meta.append({"problem": str(problem), "inputs": len(op.kernel_inputs(combo)), "outputs": list(op.outputs)})
    return meta, arrays


def bench_shapes(op, combo, extra=()) -> list:
    """The op's benchmark problems, then ``extra`` ones (``opgen export --bench``), as the
    kernel's caller shapes (inputs, then outputs, of ``combo``'s kernel): what a machine
    without TVM needs to time the plan at the sizes ``opgen bench`` uses, or others."""
    out = []
    for text in [*op.cases.bench, *(t for t in extra if t not in op.cases.bench)]:
        shapes = op.api.kernel_shapes(op.parse_problem(text))
        out.append({"problem": text, "shapes": [list(shapes[n]) for n in op.kernel_tensors(combo)]})
    return out


# ---- one kernel -------------------------------------------------------------------------------

def _admitted(op, combo, requirement, problem) -> bool:
    """Whether a call of ``problem`` (on aligned memory) takes the variant of ``requirement``
    (its positions are the kernel's parameters: ``op.kernel_tensors`` order, which
    ``api.kernel_shapes`` need not follow)."""
    by_name = op.api.kernel_shapes(problem)
    shapes = [by_name[name] for name in op.kernel_tensors(combo)]
    return requirement.admits([tuple(s) for s in shapes], [requirement.align] * len(shapes))


def _widened(problem, lanes: int):
    """``problem`` with the last axis of its first tuple field 2 * ``lanes`` long, or None."""
    for field in dataclasses.fields(problem):
        value = getattr(problem, field.name)
        if isinstance(value, tuple) and value:
            return dataclasses.replace(problem, **{field.name: value[:-1] + (2 * lanes,)})
    return None


def variant_problems(op, combo, requirement) -> list:
    """The golden-case problems of a variant: ``case_problems``, plus, when none of them is
    one the variant takes, the first of them widened to a row length it takes (so that every
    exported variant is checked against the reference on some case)."""
    problems = case_problems(op)
    if requirement is None or any(_admitted(op, combo, requirement, p) for p in problems):
        return problems
    for problem in problems:
        wider = _widened(problem, requirement.lanes)
        if wider is not None and _valid(op, wider) and _largest(op, wider) <= CASE_ELEMENTS \
                and _admitted(op, combo, requirement, wider):
            return problems + [wider]
    return problems


def call_variants(op, combo, target) -> tuple:
    """(name, knobs, requirement) of each kernel the call path can choose besides the
    default one (the schedule rule's ``call_variants``; none without rules)."""
    rule = kernels.matching_rule(op, combo, target)
    return () if rule is None else rule.call_variants(target, kernels.prim_func(op, combo))


def export_one(op, combo, target, out_root: Path, rng, variant: str = "default", cases: bool = True,
               knobs: dict | None = None, requirement=None, variants=(), bench=()) -> Path:
    """Write one kernel's device code, plan and golden cases; returns the plan's path."""
    out_dir = Path(out_root) / target.name / op.name / combo.tag / ("" if variant == "default" else variant)
    out_dir.mkdir(parents=True, exist_ok=True)
    knobs = kernels.kernel_point(op, combo, target, knobs)
    mod, symbol = kernels.scheduled_module(op, combo, target, variant, knobs)
    code, plans = target.export_code(mod, out_dir)
    doc = plan_document(op, combo, target, variant, knobs, mod[symbol], plans[symbol], code, requirement, variants)
    runtime_plan.parse(doc, out_dir)           # what the runner would refuse is never written
    path = out_dir / "plan.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    if cases:
        meta, arrays = golden_cases(op, combo, rng, variant_problems(op, combo, requirement))
        np.savez_compressed(out_dir / "cases.npz", **arrays)
        (out_dir / "cases.json").write_text(json.dumps(meta, indent=1) + "\n")
        (out_dir / "bench.json").write_text(json.dumps(bench_shapes(op, combo, bench)) + "\n")
    return path


def export_kernel(op, combo, target, out_root: Path, rng, cases: bool = True, bench=()) -> list:
    """Every kernel the call path of (op, combo) can choose on ``target``: the default one,
    whose plan lists the variants, and each variant with its selection rule in its plan
    (``<combo>/<variant>/plan.json``). Returns the plans' paths, the default one last."""
    chosen = call_variants(op, combo, target)
    paths = [export_one(op, combo, target, out_root, rng, name, cases, knobs, requirement, bench=bench)
             for name, knobs, requirement in chosen]
    return paths + [export_one(op, combo, target, out_root, rng, cases=cases, variants=[n for n, _, _ in chosen],
                               bench=bench)]
