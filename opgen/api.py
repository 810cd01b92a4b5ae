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

What a call derives and how it allocates depend only on the inputs' shapes and dtypes,
the attributes, which outputs are given and the product, so that decision is cached per
such signature (``_Prepared``); a warm call of a small op spent most of its Python time
remaking it. Validation is not part of it: every call still goes through both aclnn
phases, whose plan cache is keyed by all the tensors' metadata.

Importing this module generates the functions from the op registry and builds nothing:
the machinery a call runs on (the aclnn layer, the binder, the bound calls, and through
them the kernels, TVM and its FFI: seconds to import) is imported by the first call
(``_load_runtime``), so ``import opgen.torch`` does not pay for it.
"""
from __future__ import annotations

import keyword
import operator
import threading

import numpy as np

from opgen import acl, config
from opgen.apispec import INPUT, OUTPUT, STATUS_NAMES, ArgError, python_name
from opgen.dtypes import dtype_name, numpy_dtype
from opgen.ops import all_ops

# The call machinery, imported by the first call (see the module docstring).
aclnn = bound = NumpyKind = TorchKind = value_key = describe = None


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
        try:
            return TensorInfo.of_torch(obj)
        except RuntimeError:   # no sizes to read (a nested tensor): the full reader says why
            pass
    try:
        return describe(name, obj)
    except ArgError as err:
        raise AclnnError(err.status, err.message) from None


def _run_phases(phases: tuple, arguments: tuple):
    """Both phases of an op (opgen.aclnn.phases: the bodies of its generated aclnn
    functions, with the same reading, checks and statuses) on GetWorkspaceSize's
    arguments, in its order; returns the executor it ran, raises AclnnError on a
    non-zero status."""
    phase_one, phase_two = phases
    status, size, executor = phase_one(arguments)
    if status:
        raise AclnnError(status, acl.aclGetRecentErrMsg())
    workspace = None
    if size:
        ret, workspace = acl.aclrtMalloc(size, acl.ACL_MEM_MALLOC_HUGE_FIRST)
        if ret:
            raise AclnnError(ret, acl.aclGetRecentErrMsg())
    try:
        status = phase_two(workspace, size, executor, None)
    finally:
        if workspace is not None:
            acl.aclrtFree(workspace)
    if status:
        raise AclnnError(status, acl.aclGetRecentErrMsg())
    return executor


def _derive(pythonic, infos: dict, args: dict) -> None:
    """The attributes the function computes from the tensors, into ``args``."""
    for name, derive in pythonic.derived.items():
        try:
            args[name] = derive(infos)
        except ArgError as err:
            raise AclnnError(err.status, err.message) from None


class _Prepared:
    """What a call of the Python function decides before the aclnn call, from its metadata
    alone: the derived attributes' values, how to make each output the caller did not give
    (by _alloc, _zeros or _placeholder; one not asked for and not required is not made: null),
    which outputs are asked for, and, once a call like it has run, its bound call.

    ``_prepare`` computes it from the inputs' shapes and dtypes (TensorInfo), the
    attributes' values, which outputs the caller gave, the library of the first input
    (torch or numpy outputs) and the product (allocation rules may read it); those are
    what ``_signature`` keys it by, so a cached one is the one ``_prepare`` would make.
    It holds no tensor of the caller's.

    ``bound`` (opgen.aclnn.bindable: the plan and argument kinds of a successful call with
    this signature, or None) lets a call skip both aclnn phases' reading and checks. Only
    calls that give no output get one: then the signature fixes the phase-one key in full
    (each input's dtype, shape, strides, device and element alignment are in it; the
    outputs are fresh allocations of fixed shape and dtype, overlapping nothing), so the
    plan is the one phase one would find in its cache; opgen.bound then writes the whole
    call out as straight-line code for later calls of the signature. Any other call runs
    both phases, which validate every argument. Measured, bound calls alone (2 cores, warm,
    torch tensors, medians of 15 rounds, benchmarks/tiny_modules.py): opgen.group_norm
    (2,8,4x4) 24.3 -> 15.1 us, opgen.layer_norm (4,16) 24.7 -> 15.6; the GroupNorm module's
    forward 46.4 -> 30.9 and backward 74.0 -> 56.6."""

    __slots__ = ("derived", "new", "wanted", "bound", "rewrites")

    def __init__(self, derived: tuple, new: tuple, wanted: tuple):
        self.derived, self.new, self.wanted = derived, new, wanted
        self.bound = None
        self.rewrites = _REWRITES

    def outputs(self, given: tuple) -> tuple:
        """The call's outputs: the given ones, and new ones made as decided (``new`` lists
        (output index, maker: a _MAKERS name, library, shape, dtype, device) of those to make)."""
        if not self.new:
            return given
        made = list(given)
        for index, maker, library, shape, dtype, device in self.new:
            made[index] = _MAKERS[maker](library, shape, dtype, device)
        return tuple(made)


def _library(template, dtype: str) -> tuple:
    """(torch module or None for numpy, the library's dtype, the device) of outputs like
    ``template``: a torch output goes on the template's device (a CUDA input's outputs on
    its GPU, not on torch's default device)."""
    if _is_torch(template):
        import torch

        return torch, getattr(torch, dtype), template.device
    try:
        return None, numpy_dtype(dtype), None
    except KeyError:
        return None, np.dtype(dtype), None


def _alloc(torch, shape: tuple, dtype, device=None):
    """An output for the kernel to fill: a torch tensor (``torch`` given) or a numpy array.

    torch's is uninitialized (torch.empty): the kernel writes every element of an output
    the call asks for, and zeroing it first is a full extra write of the output through
    fresh pages (measured on 2 busy cores: torch.zeros of 64 MiB 73-90 ms against 0.01 ms
    for torch.empty; RmsNorm's forward through its custom op on 4096x4096 f32 108-120 ms,
    its kernel alone 14-20 ms). numpy's np.zeros is calloc's lazily zeroed pages: no pass."""
    if torch is not None:
        return torch.empty(shape, dtype=dtype, device=device)
    return np.zeros(shape, dtype)


def _zeros(torch, shape: tuple, dtype, device=None):
    """An output of a call whose data has no elements (see _no_data): zeroed, since such a
    call may run no kernel at all."""
    if torch is not None:
        return torch.zeros(shape, dtype=dtype, device=device)
    return np.zeros(shape, dtype)


def _placeholder(torch, shape: tuple, dtype, device=None):
    """A stand-in for an output not asked for that the op still requires as a tensor
    (Param.required_when_off): one zero broadcast to ``shape`` (no allocation of its size).
    The aclnn layer never writes an output not asked for, so a read-only view serves."""
    if torch is not None:
        return torch.zeros((), dtype=dtype, device=device).expand(shape)
    return np.broadcast_to(np.zeros((), dtype), shape)


def _failed(status: int):
    """Raise the AclnnError of a call that returned ``status``."""
    raise AclnnError(status, acl.aclGetRecentErrMsg())


_MAKERS = {"alloc": _alloc, "zeros": _zeros, "placeholder": _placeholder, "failed": _failed}   # opgen.bound too
# A written call guards each tensor's exact type, a signature does not: a module passes its
# Parameters where a functional call of the same signature passed plain tensors, and took the
# bound path for good (measured: GroupNorm's module forward ran run_bound's frames every call
# once the custom op had been called first). A bound call that no written call took writes
# one for its values' types, this many times a signature at most (a value with no guard,
# a nan, would otherwise try on every call).
_REWRITES = 2


def _prepare(op, infos: dict, args: dict, given: tuple, template) -> _Prepared:
    """The call's _Prepared (see there); ``args`` are the attributes and masks by aclnn
    name (no tensors: what the rules read of those is in ``infos``)."""
    api, pythonic = op.api, op.api.pythonic
    _derive(pythonic, infos, args)
    new, wanted = [], []
    asked_maker = "zeros" if _no_data(infos) else "alloc"
    for index, (param, out_given) in enumerate(zip(api.tensors(OUTPUT), given)):
        want = api.wanted(param, args)
        if not out_given and (want or param.required_when_off):
            shape_dtype = pythonic.allocate[param.name](infos, args)
            if shape_dtype is not None:
                library, dtype, device = _library(template, shape_dtype[1])
                new.append((index, asked_maker if want else "placeholder", library, tuple(shape_dtype[0]), dtype,
                            device))
        wanted.append(want)
    return _Prepared(tuple(args[name] for name in pythonic.derived), tuple(new), tuple(wanted))


def _no_data(infos: dict) -> bool:
    """Whether the call's data, its first tensor input, has no elements. Such a call may
    run no kernel (aclnnBatchNorm and aclnnBatchNormBackward write nothing for an empty
    input, as CANN's do), and _alloc's torch.empty would hand back whatever its memory held
    (opgen.torch's BatchNorm2d returned such a weight gradient for an empty batch): its
    outputs are zeroed, as numpy's np.zeros outputs already are, which is also what a sum
    over nothing is (a weight gradient). Those outputs are per-channel or per-column, the
    others as empty as the data: zeroing them costs nothing."""
    first = next((info for info in infos.values() if info is not None), None)
    return first is not None and 0 in first.shape


class _Layout:
    """Where an op's Python arguments go: the positions of its tensor inputs among the
    positional values, and the order that puts (values, derived, outputs) into
    GetWorkspaceSize's argument order, and the op's aclnn phases (made once per op)."""

    def __init__(self, op):
        self.op = op
        self.phases = aclnn.phases(op)
        params = positional(op)
        names = [p.name for p in params] + list(op.api.pythonic.derived) + list(op.api.names(OUTPUT))
        self.permutation = tuple(names.index(p.name) for p in op.api.params)
        self.params = tuple(params)
        self.names = tuple(p.name for p in params)
        self.inputs = tuple(i for i, p in enumerate(params) if p.role == INPUT)
        self.is_input = tuple(p.role == INPUT for p in params)
        self.order = operator.itemgetter(*self.permutation)


_LAYOUTS: dict = {}
_PREPARED: dict = {}
_MAX_PREPARED = 4096
_LIST_ITEMS = frozenset((int, bool))   # a list's items compare exactly by type and ==
_RUNTIME_LOCK = threading.Lock()


def _load_runtime() -> None:
    """Import the call machinery into this module's names, once (the first call's)."""
    global aclnn, bound, NumpyKind, TorchKind, value_key, describe
    with _RUNTIME_LOCK:
        if bound is not None:
            return
        from opgen import aclnn
        from opgen.binding import NumpyKind, TorchKind, value_key
        from opgen.tensorarg import describe
        aclnn.on_plan_cache_clear(_PREPARED.clear)   # a bound call must not outlive its plan
        _KEY_READERS[np.ndarray] = NumpyKind.key
        from opgen import bound                      # last: call_op takes it as the sign of the rest


def _layout(op) -> _Layout:
    layout = _LAYOUTS.get(op.name)
    if layout is None or layout.op is not op:
        if bound is None:
            _load_runtime()
        layout = _LAYOUTS[op.name] = _Layout(op)
    return layout


def _signature(op, layout: _Layout, values: tuple, outputs: tuple):
    """The key of a call's _Prepared: op, product and target, per tensor input what phase
    one's plan key holds of it (opgen.binding's ``key``: library, dtype, shape, strides,
    device, alignment), per other value its type and value (a float by its bits, a list of
    ints or bools with its items' types: opgen.binding.value_key), which outputs are given.
    None when a value is something else (an aclTensor, a numpy subclass, a numpy
    integer, a list of floats, a tensor without memory to read): that call prepares
    afresh, uncached."""
    key = [op.name, *config.context()]
    append = key.append
    for is_input, value in zip(layout.is_input, values):
        kind = type(value)
        if value is None:
            append(None)
        elif is_input:
            reader = _key_reader(kind)
            if reader is None:
                return None
            try:
                append(reader(value))
            except RuntimeError:   # a torch tensor without storage (a fake one): no data_ptr
                return None
        elif kind is int or kind is bool or kind is str:
            append((kind, value))
        elif kind is float or ((kind is list or kind is tuple) and all(type(v) in _LIST_ITEMS for v in value)):
            append(value_key(value))
        else:
            return None
    append(tuple(o is not None for o in outputs))
    return tuple(key)


_KEY_READERS: dict = {}   # type -> its key reader, or None (numpy's: _load_runtime)


def _key_reader(kind):
    """The binding key of values of type ``kind`` for numpy arrays (not a subclass) and
    torch tensors (what _info reads as a TensorInfo), None for anything else; remembered
    per type."""
    if kind not in _KEY_READERS:
        torch_like = kind.__module__.startswith("torch") and hasattr(kind, "dtype")
        _KEY_READERS[kind] = TorchKind.key if torch_like else None
    return _KEY_READERS[kind]


def _prepared(op, layout: _Layout, values: tuple, outputs: tuple) -> _Prepared:
    """The call's _Prepared: cached under its _signature, made by _prepare on a miss (a
    failure, an AclnnError from a derivation, is never cached)."""
    key = _signature(op, layout, values, outputs)
    prepared = None if key is None else _PREPARED.get(key)
    if prepared is None:
        args = {p.name: v for p, v in zip(layout.params, values) if p.role != INPUT}
        infos = {name: _info(name, values[i]) for i, name in ((i, layout.names[i]) for i in layout.inputs)}
        template = next((values[i] for i in layout.inputs if values[i] is not None), None)
        prepared = _prepare(op, infos, args, tuple(o is not None for o in outputs), template)
        if key is not None:
            if len(_PREPARED) >= _MAX_PREPARED:
                _PREPARED.clear()
            _PREPARED[key] = prepared
    return prepared


def call_op(op, values: tuple, outputs: tuple) -> tuple:
    """Run ``op`` on the Python function's positional ``values`` (in signature order) and
    its output arguments; returns the outputs (None where not asked for). A call like one
    that ran before with no output given runs its bound call (see _Prepared), written out
    (opgen.bound) when its values allow."""
    if bound is None:
        _load_runtime()
    fresh = all(o is None for o in outputs)   # every output made here: a call that can be bound
    if fresh:
        for written in bound.calls_of(op.name):
            made = written(values)
            if made is not None:
                return made
    layout = _layout(op)
    prepared = _prepared(op, layout, values, outputs)
    made = prepared.outputs(outputs)
    arguments = layout.order(values + prepared.derived + made)
    if prepared.bound is not None:
        status = aclnn.run_bound(op, prepared.bound, arguments)
        if status:
            raise AclnnError(status, acl.aclGetRecentErrMsg())
        if fresh and prepared.rewrites:   # no written call took these values (see _REWRITES)
            prepared.rewrites -= 1
            bound.remember(op, layout, values, prepared, _MAKERS)
    else:
        executor = _run_phases(layout.phases, arguments)
        if fresh:
            prepared.bound = aclnn.bindable(executor)
            bound.remember(op, layout, values, prepared, _MAKERS)
    return tuple(out if want else None for out, want in zip(made, prepared.wanted))


def positional(op) -> list:
    """The aclnn parameters the Python function takes positionally: all but the outputs and
    the derived attributes, in the document's order."""
    derived = op.api.pythonic.derived
    return [p for p in op.api.params if p.role != OUTPUT and p.name not in derived]


class _Required:
    """The default of a required parameter that follows one with a default (GroupNorm's
    ``group`` after its optional gamma and beta): Python allows no required parameter
    there, so it gets this one and the function checks it (``_source``)."""

    def __repr__(self) -> str:
        return "<required>"


REQUIRED = _Required()


def signature_defaults(op) -> dict:
    """Python name -> default of the function's positional parameters: None for every
    optional input (Param.optional: a user leaves it out, as aclnn takes a null pointer),
    then what the op's ``Pythonic.defaults`` declares (which may override it)."""
    defaults = {python_name(p): None for p in positional(op) if p.role == INPUT and p.optional}
    defaults.update(op.api.pythonic.defaults)
    return defaults


def _source(op) -> str:
    """The function's ``def`` line and body: a real signature (introspection, and a TypeError
    for a wrong argument list) at no per-call cost, save one ``is`` test for each required
    parameter that follows a default (``REQUIRED``)."""
    defaults = signature_defaults(op)
    params_in, outputs = positional(op), op.api.tensors(OUTPUT)
    params, checks, seen_default = [], [], False
    for p in params_in:
        name = python_name(p)
        if name in defaults:
            params.append(f"{name}=_defaults[{name!r}]")
            seen_default = True
        elif seen_default:
            params.append(f"{name}=_REQUIRED")
            checks.append(f"    if {name} is _REQUIRED:\n"
                          f"        raise TypeError(\"{op.name}() missing required argument: '{name}'\")\n")
        else:
            params.append(name)
    names = [python_name(p) for p in params_in + list(outputs)]
    bad = [n for n in names if not n.isidentifier() or keyword.iskeyword(n) or len(set(names)) != len(names)]
    if bad:
        raise ValueError(f"{op.name}: Python parameter names {bad} are not usable")
    keywords = ", ".join(f"{python_name(p)}=None" for p in outputs)
    values = ", ".join(python_name(p) for p in params_in)
    outs = ", ".join(python_name(p) for p in outputs)
    return (f"def {op.name}({', '.join(params)}, *, {keywords}):\n" + "".join(checks) +
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
    namespace = {"_call": call_op, "_op": op, "_defaults": signature_defaults(op), "_REQUIRED": REQUIRED}
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
