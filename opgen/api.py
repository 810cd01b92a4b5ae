"""The Pythonic layer: call an op like a function, get its outputs, or an AclnnError.

One function per registered op with an aclnn face, generated from its ApiSpec's
``Pythonic`` description (no per-op code here): ``opgen.rms_norm_grad(dy, x, rstd,
gamma)``, ``opgen.group_norm_backward(grad_out, input, mean, rstd, gamma, group)``. Built
on the aclnn layer (same validation, same kernels): it derives what the aclnn signature
wants from the tensors (GroupNorm's N, C, HxW), allocates the outputs that are not given
(numpy arrays, or torch tensors when the data input is one) and runs both phases with a
workspace from aclrtMalloc. Outputs that are given are written in place; an output not
asked for (its outputMask bit or its flag attribute false, Param.mask_bit / Param.flag) is
None and nothing is allocated for it.
"""
from __future__ import annotations

import keyword

import numpy as np

from opgen import acl, aclnn
from opgen.apispec import INPUT, OUTPUT, STATUS_NAMES, ArgError, python_name
from opgen.dtypes import dtype_name, numpy_dtype
from opgen.ops import all_ops
from opgen.tensorarg import describe


class AclnnError(RuntimeError):
    """An aclnn call returned ``status`` (non-zero); ``message`` says why."""

    def __init__(self, status: int, message: str):
        super().__init__(f"{STATUS_NAMES.get(status, status)} ({status}): {message}")
        self.status = status
        self.message = message


class TensorInfo:
    """What the op's derivation and allocation rules read of a tensor: shape, ndim and the
    dtype's name. Read straight off numpy arrays and torch tensors (fake ones included,
    which have no memory to describe): ``describe`` reads a tensor through DLPack, about
    10 us an input, and the aclnn layer validates every tensor again when the call runs."""

    __slots__ = ("shape", "ndim", "dtype")

    def __init__(self, shape, dtype: str):
        self.shape = tuple(shape)
        self.ndim = len(self.shape)
        self.dtype = dtype

    @classmethod
    def of_torch(cls, tensor) -> "TensorInfo":
        return cls(tensor.shape, str(tensor.dtype).replace("torch.", ""))


def _is_torch(obj) -> bool:
    """Whether ``obj`` is a torch tensor (torch is not imported to ask: it stays optional)."""
    return type(obj).__module__.startswith("torch")


def _info(name: str, obj):
    if type(obj) is np.ndarray:
        return TensorInfo(obj.shape, dtype_name(obj.dtype) or str(obj.dtype))
    if _is_torch(obj) and hasattr(obj, "dtype"):
        return TensorInfo.of_torch(obj)
    try:
        return describe(name, obj)
    except ArgError as err:
        raise AclnnError(err.status, err.message) from None


def _alloc(template, shape, dtype: str):
    """An output in the template's library (torch or numpy) for the kernel to fill.

    torch's is uninitialized (torch.empty): the kernel writes every element of an output
    the call asks for, and zeroing it first is a full extra write of the output through
    fresh pages (measured on 2 busy cores: torch.zeros of 64 MiB 73-90 ms against 0.01 ms
    for torch.empty; RmsNorm's forward through its custom op on 4096x4096 f32 108-120 ms,
    its kernel alone 14-20 ms). numpy's np.zeros is calloc's lazily zeroed pages: no pass."""
    if _is_torch(template):
        import torch

        return torch.empty(tuple(shape), dtype=getattr(torch, dtype))
    try:
        return np.zeros(shape, numpy_dtype(dtype))
    except KeyError:
        return np.zeros(shape, np.dtype(dtype))


def run_aclnn(aclnn_name: str, **args) -> None:
    """Both phases of ``aclnn_name`` with ``args``; raises AclnnError on a non-zero status."""
    status, size, executor = getattr(aclnn, f"{aclnn_name}GetWorkspaceSize")(**args)
    if status:
        raise AclnnError(status, acl.aclGetRecentErrMsg())
    workspace = None
    if size:
        ret, workspace = acl.aclrtMalloc(size, acl.ACL_MEM_MALLOC_HUGE_FIRST)
        if ret:
            raise AclnnError(ret, acl.aclGetRecentErrMsg())
    try:
        status = getattr(aclnn, aclnn_name)(workspace, size, executor, None)
    finally:
        if workspace is not None:
            acl.aclrtFree(workspace)
    if status:
        raise AclnnError(status, acl.aclGetRecentErrMsg())


def _placeholder(template, shape, dtype: str):
    """A stand-in for an output not asked for that the op still requires as a tensor
    (Param.required_when_off): one zero broadcast to ``shape`` (no allocation of its size).
    The aclnn layer never writes an output not asked for, so a read-only view serves."""
    if _is_torch(template):
        import torch

        return torch.zeros((), dtype=getattr(torch, dtype)).expand(tuple(shape))
    try:
        dt = numpy_dtype(dtype)
    except KeyError:
        dt = np.dtype(dtype)
    return np.broadcast_to(np.zeros((), dt), tuple(shape))


def _derive(pythonic, infos: dict, args: dict) -> None:
    """The attributes the function computes from the tensors, into ``args``."""
    for name, derive in pythonic.derived.items():
        try:
            args[name] = derive(infos)
        except ArgError as err:
            raise AclnnError(err.status, err.message) from None


def _outputs(op, infos: dict, args: dict, given: tuple, template) -> tuple:
    """Each output: the caller's, else one allocated like the op says; one not asked for
    is not allocated (None, or a placeholder where the op requires a tensor there)."""
    api = op.api
    wanted = []
    for param, out in zip(api.tensors(OUTPUT), given):
        want = api.wanted(param, args)
        if out is None and (want or param.required_when_off):
            shape_dtype = op.api.pythonic.allocate[param.name](infos, args)
            make = _alloc if want else _placeholder
            out = None if shape_dtype is None else make(template, *shape_dtype)
        args[param.name] = out
        wanted.append(want)
    return tuple(wanted)


def call_op(op, values: tuple, outputs: tuple) -> tuple:
    """Run ``op`` on the Python function's positional ``values`` (in signature order) and
    its output arguments; returns the outputs (None where not asked for)."""
    names = positional(op)
    args = {p.name: v for p, v in zip(names, values)}
    infos = {p.name: _info(p.name, args.get(p.name)) for p in op.api.tensors(INPUT)}
    _derive(op.api.pythonic, infos, args)
    template = next((args[p.name] for p in op.api.tensors(INPUT) if args.get(p.name) is not None), None)
    wanted = _outputs(op, infos, args, outputs, template)
    run_aclnn(op.aclnn_name, **args)
    return tuple(args[p.name] if w else None for p, w in zip(op.api.tensors(OUTPUT), wanted))


def positional(op) -> list:
    """The aclnn parameters the Python function takes positionally: all but the outputs and
    the derived attributes, in the document's order."""
    derived = op.api.pythonic.derived
    return [p for p in op.api.params if p.role != OUTPUT and p.name not in derived]


def _source(op) -> str:
    """The function's ``def`` line and body: a real signature (introspection, and a TypeError
    for a wrong argument list) at no per-call cost."""
    pythonic = op.api.pythonic
    params_in, outputs = positional(op), op.api.tensors(OUTPUT)
    params, seen_default = [], False
    for p in params_in:
        name = python_name(p)
        if name in pythonic.defaults:
            params.append(f"{name}=_defaults[{name!r}]")
            seen_default = True
        elif seen_default:
            raise ValueError(f"{op.name}: {name} has no default but follows a parameter that has one")
        else:
            params.append(name)
    names = [python_name(p) for p in params_in + list(outputs)]
    bad = [n for n in names if not n.isidentifier() or keyword.iskeyword(n) or len(set(names)) != len(names)]
    if bad:
        raise ValueError(f"{op.name}: Python parameter names {bad} are not usable")
    keywords = ", ".join(f"{python_name(p)}=None" for p in outputs)
    values = ", ".join(python_name(p) for p in params_in)
    outs = ", ".join(python_name(p) for p in outputs)
    return (f"def {op.name}({', '.join(params)}, *, {keywords}):\n"
            f"    return _call(_op, ({values},), ({outs},))\n")


def _doc(op) -> str:
    outputs = ", ".join(python_name(p) for p in op.api.tensors(OUTPUT))
    lines = [f"{op.api.description}", "", f"Returns ({outputs}); outputs not given are allocated (numpy, or torch "
             f"when the first input is a torch tensor), given ones are written in place; an output not "
             f"asked for (its mask bit or flag false) is None. Raises opgen.AclnnError with "
             f"{op.aclnn_name}'s status on bad input.", ""]
    lines += [f"{python_name(p)}: {p.doc}" for p in positional(op) + list(op.api.tensors(OUTPUT))]
    return "\n".join(lines)


def make_function(op):
    """The Pythonic function of ``op``, written out with exec as dataclasses do."""
    namespace = {"_call": call_op, "_op": op, "_defaults": dict(op.api.pythonic.defaults)}
    exec(_source(op), namespace)  # noqa: S102 (names checked in _source)
    function = namespace[op.name]
    function.__doc__ = _doc(op)
    function.__module__ = __name__
    return function


def _generate() -> list[str]:
    made = []
    for op in all_ops():
        if op.api is not None and op.api.pythonic is not None:
            globals()[op.name] = make_function(op)
            made.append(op.name)
    return made


FUNCTIONS = _generate()
