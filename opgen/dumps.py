"""Golden dumps: inputs and outputs written out of a real aclnn library, read back exactly.

A dump is a directory holding the tensors as ``.npy`` or raw ``.bin`` files and a
``manifest.json`` (docs/compare-and-bench.md, "Golden dump format", shows one)::

    {"library": "free text: where the outputs came from",
     "cases": [{"op": "rms_norm_grad",           # or the aclnn name, aclnnRmsNormGrad
                "attributes": {},                # the aclnn attributes the tensors do not give
                                                 # (group_norm_backward: {"group": G})
                "tensors": [{"file": "dy.bin", "role": "dy", "shape": [8, 64], "dtype": "float16"},
                            ...]}]}

``role`` is the aclnn parameter name (dy, x, rstd, gamma, dxOut, dgammaOut; gradOut, input,
mean, rstd, gamma, gradInput, gradGammaOut, gradBetaOut) or opgen's kernel name (dy, x, ...,
dx, dgamma, dbeta). ``dtype`` is float32/float16/bfloat16 (CANN's FLOAT32/FLOAT16/BFLOAT16
and ACL_FLOAT/ACL_FLOAT16/ACL_BF16 too). A ``.bin`` is the tensor's bytes, C order, little
endian, exactly prod(shape) * itemsize long: a CANN user writes it with
``aclrtMemcpy`` + ``fwrite``. The reader checks every size, because a wrong shape in a
manifest would otherwise compare garbage and report a precision failure.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from opgen.apispec import ATTR, INPUT, ArgError, Call
from opgen.dtypes import BFLOAT16, FLOAT16, FLOAT32, dtype_name, numpy_dtype
from opgen.ops import all_ops, get_op
from opgen.tensorarg import describe

MANIFEST = "manifest.json"
DTYPE_ALIASES = {"float32": FLOAT32, "float": FLOAT32, "acl_float": FLOAT32,
                 "float16": FLOAT16, "half": FLOAT16, "acl_float16": FLOAT16,
                 "bfloat16": BFLOAT16, "bf16": BFLOAT16, "acl_bf16": BFLOAT16}


class DumpError(ValueError):
    """A dump that cannot be read as its manifest describes; the message says where."""


@dataclass
class GoldenCase:
    """One op call of a dump: its op, combo tag, problem, inputs and the library's outputs,
    all by opgen's kernel names, in the user's shapes."""

    op: str
    tag: str
    problem: object
    inputs: dict
    outputs: dict
    attributes: dict = field(default_factory=dict)


def _op_of(name: str):
    for op in all_ops():
        if name in (op.name, op.aclnn_name):
            return op
    raise DumpError(f"unknown op {name!r}; known: {', '.join(o.name for o in all_ops())}")


def _kernel_name(op, role: str) -> str | None:
    """The kernel tensor of a manifest role (an aclnn or kernel name); None for an input
    the kernel never reads (Param.validated_only), which a dump may hold and opgen skips."""
    names = {p.name: p.kernel for p in op.api.tensors()} if op.api is not None else {}
    if role in names:
        return names[role]
    if role in op.inputs + op.outputs:
        return role
    known = sorted(names) or list(op.inputs + op.outputs)
    raise DumpError(f"{op.name}: unknown role {role!r}; expected one of {known}")


def _dtype(text: str) -> str:
    try:
        return DTYPE_ALIASES[str(text).lower()]
    except KeyError:
        raise DumpError(f"unknown dtype {text!r}; expected float32, float16 or bfloat16") from None


def read_tensor(directory: Path, entry: dict) -> np.ndarray:
    """One manifest entry's array, checked against its declared shape and dtype."""
    for key in ("file", "role", "shape", "dtype"):
        if key not in entry:
            raise DumpError(f"manifest entry {entry} has no {key!r}")
    path, shape, dtype = directory / entry["file"], tuple(int(d) for d in entry["shape"]), _dtype(entry["dtype"])
    npdt = numpy_dtype(dtype)
    if not path.is_file():
        raise DumpError(f"{path}: no such file (named in {MANIFEST})")
    if path.suffix == ".npy":
        array = np.load(path, allow_pickle=False)
        if dtype == BFLOAT16 and array.dtype in (np.uint16, np.dtype("V2")):
            array = array.view(npdt)
        if array.dtype != npdt or array.shape != shape:
            raise DumpError(f"{path}: holds {array.dtype} {list(array.shape)}; {MANIFEST} says {dtype} {list(shape)}")
        return array
    want = math.prod(shape) * npdt.itemsize
    size = path.stat().st_size
    if size != want:
        raise DumpError(f"{path}: {MANIFEST} says shape {list(shape)} {dtype} = {want} bytes, "
                        f"but the file has {size} bytes ({size / npdt.itemsize:g} {dtype} elements)")
    return np.fromfile(path, dtype=npdt.newbyteorder("<")).astype(npdt).reshape(shape)


def _combo_tag(op, arrays: dict) -> str:
    given = {name: dtype_name(a.dtype) for name, a in arrays.items()}
    for combo in op.combos:
        if all(combo[name] == dt for name, dt in given.items()):
            return combo.tag
    raise DumpError(f"{op.name}: dtypes {given} are not one of opgen's combos {[c.tag for c in op.combos]}")


def _problem(op, arrays: dict, attributes: dict):
    """The case's Problem, read the way a call's is: the tensors by aclnn name, the
    manifest's attributes, the attributes the Pythonic layer derives from the tensors
    (GroupNorm's N, C, HxW), then the ApiSpec's own ``problem``."""
    values = {p.name: describe(p.name, arrays.get(p.kernel)) for p in op.api.tensors()}
    values.update(attributes)
    derived = op.api.pythonic.derived if op.api.pythonic is not None else {}
    try:
        for name, derive in derived.items():
            values.setdefault(name, derive(values))
        missing = [p.name for p in op.api.params if p.role == ATTR and p.name not in values]
        if missing:
            raise DumpError(f"{op.name}: attributes need {missing}")
        return op.api.problem(Call(op, "", values))
    except ArgError as err:
        raise DumpError(f"{op.name}: {err.message}") from None


def read_case(directory: Path, case: dict) -> GoldenCase:
    op = _op_of(case.get("op", ""))
    inputs, outputs = {}, {}
    for entry in case.get("tensors", []):
        name = _kernel_name(op, entry.get("role", ""))
        if name is None:
            continue
        (inputs if name in op.inputs else outputs)[name] = read_tensor(directory, entry)
    required = [p.kernel for p in op.api.tensors(INPUT) if not p.optional and p.kernel]
    missing = [n for n in required if n not in inputs] or ([] if outputs else ["any output"])
    if missing:
        raise DumpError(f"{directory}: {op.name} case lacks {missing}")
    attributes = dict(case.get("attributes", {}))
    return GoldenCase(op.name, _combo_tag(op, {**inputs, **outputs}), _problem(op, inputs, attributes),
                      inputs, outputs, attributes)


def read_dump(directory) -> tuple[str, list[GoldenCase]]:
    """(library description, cases) of the dump in ``directory``."""
    directory = Path(directory)
    path = directory / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise DumpError(f"{directory}: no {MANIFEST}") from None
    except json.JSONDecodeError as err:
        raise DumpError(f"{path}: not JSON ({err})") from None
    cases = manifest.get("cases", [manifest] if "op" in manifest else [])
    if not cases:
        raise DumpError(f"{path}: no cases")
    return str(manifest.get("library", "golden dump")), [read_case(directory, c) for c in cases]


def _entries(directory: Path, prefix: str, op, arrays: dict, fmt: str) -> list[dict]:
    roles = {p.kernel: p.name for p in op.api.tensors()}
    entries = []
    for name, array in arrays.items():
        array = np.ascontiguousarray(array)
        file = f"{prefix}{roles.get(name, name)}.{fmt}"
        if fmt == "npy":
            np.save(directory / file, array.view(np.uint16) if dtype_name(array.dtype) == BFLOAT16 else array)
        else:
            array.astype(array.dtype.newbyteorder("<")).tofile(directory / file)
        entries.append({"file": file, "role": roles.get(name, name), "shape": list(array.shape),
                        "dtype": dtype_name(array.dtype)})
    return entries


def write_dump(directory, cases: list[GoldenCase], library: str, fmt: str = "bin") -> Path:
    """Write ``cases`` as a dump (``fmt`` "bin" or "npy"); returns the manifest's path."""
    if fmt not in ("bin", "npy"):
        raise ValueError(f"fmt must be 'bin' or 'npy', not {fmt!r}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    manifest = {"library": library, "cases": []}
    for i, case in enumerate(cases):
        op = get_op(case.op)
        tensors = _entries(directory, f"case{i}_", op, {**case.inputs, **case.outputs}, fmt)
        manifest["cases"].append({"op": op.aclnn_name, "attributes": dict(case.attributes), "tensors": tensors})
    path = directory / MANIFEST
    path.write_text(json.dumps(manifest, indent=1) + "\n")
    return path
