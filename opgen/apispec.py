"""What an op's spec says about its aclnn API, and the vocabulary its rules are written in.

An op file declares an ``ApiSpec``: the parameters in the seed's order (the generated
functions take exactly these), the documented error lines as ``Rule`` objects (the seed's
line quoted, its status code, a check that explains a violation in words, and example
violations the tests replay), and how a validated call maps onto the kernel. The generic
machinery (opgen.aclnn, opgen.executor) reads only this; it has no per-op code.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from opgen.dtypes import numpy_dtype

ACLNN_SUCCESS = 0
ACLNN_ERR_PARAM_NULLPTR = 161001
ACLNN_ERR_PARAM_INVALID = 161002
ACLNN_ERR_RUNTIME_ERROR = 361001
ACLNN_ERR_INNER_TILING_ERROR = 561002
ACLNN_ERR_INNER_NULLPTR = 561103   # what CANN's op_api returns when an l0 kernel's tiling refuses
# The most an int64_t holds: the document's type of integer attributes, of aclIntArray
# items, and the bound on any byte count (a tensor's, a workspace's) a real call can have.
INT64_MAX = 2**63 - 1
INT64_MIN = -2**63
STATUS_NAMES = {
    ACLNN_SUCCESS: "ACLNN_SUCCESS",
    ACLNN_ERR_PARAM_NULLPTR: "ACLNN_ERR_PARAM_NULLPTR",
    ACLNN_ERR_PARAM_INVALID: "ACLNN_ERR_PARAM_INVALID",
    ACLNN_ERR_RUNTIME_ERROR: "ACLNN_ERR_RUNTIME_ERROR",
    ACLNN_ERR_INNER_TILING_ERROR: "ACLNN_ERR_INNER_TILING_ERROR",
    ACLNN_ERR_INNER_NULLPTR: "ACLNN_ERR_INNER_NULLPTR",
}

INPUT, OUTPUT, ATTR, MASK = "input", "output", "attr", "mask"
VALUE_TYPES = ("int", "float", "bool", "ints", "str")


class ArgError(Exception):
    """A bad argument found while reading the call: becomes (status, message), never escapes."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


@dataclass(frozen=True)
class Param:
    """One parameter of GetWorkspaceSize, in the seed's order.

    ``kernel`` names the kernel tensor it feeds (tensors only); ``optional`` inputs may be
    null: the spec's ``fill`` says what the kernel gets instead, or, for a kernel tensor in
    the OpSpec's ``optional_terms``, the plan takes the combo's variant without it
    (DtypeCombo.absent). OpSpec checks that each optional input has one or the other.

    What asks for an output: ``mask_bit``, the index of the outputMask element (GroupNorm's
    gradGammaOut), or ``flag``, the name of a bool attribute (aclnnGroupNormSwishGrad's
    dgammaIsRequire: CANN's generated ops say it with attributes, not an outputMask). The
    generic layers read both alike (ApiSpec.wanted): an output not asked for is computed
    into scratch, never into the caller's memory, which is neither read nor written, and
    the generic format and writability checks pass it over. Whether it may then be null is
    the op's rules' decision; ``required_when_off`` says that it may not (CANN's generated
    ops keep such an output REQUIRED whatever the flag), so the Pythonic layer passes a
    placeholder for it instead of None.

    ``optional`` on an output: a null pointer is how a caller declines it (CANN's "when the
    pointer is not null, the gradient is written", aclnnAdaLayerNormBackward's five outputs):
    ApiSpec.wanted reads a null optional output as not asked for, as a false mask bit. The
    Pythonic layer and opgen.torch pass no outputs by aclnn name, so they ask for it.

    ``validated_only``: an input the op's math never reads (LayerNormBackward's
    biasOptional): it has no kernel tensor (``kernel`` None, said explicitly so that a
    forgotten kernel name still fails here), the op's rules and the generic checks see it
    like any tensor, and the plan never stages, fills or hands it to the kernel. It takes
    no part in choosing the dtype combo, so its dtype relation to the others is a Rule.
    """

    name: str
    role: str
    doc: str
    kernel: str | None = None
    dtypes: str = "-"
    ranks: str = "-"
    optional: bool = False
    mask_bit: int | None = None
    value_type: str = "int"     # an attribute's C type: int (int64_t), float (double), bool, ints
                                # (aclIntArray: a list/tuple of ints), str (char*: a str or None)
    flag: str | None = None     # an output: the bool attribute asking for it (instead of a mask bit)
    required_when_off: bool = False   # an output: still a tensor (not null) when not asked for
    validated_only: bool = False      # an input: checked, never read by the kernel (no kernel tensor)

    def __post_init__(self):
        if self.role not in (INPUT, OUTPUT, ATTR, MASK):
            raise ValueError(f"{self.name}: unknown role {self.role!r}")
        if self.value_type not in VALUE_TYPES:
            raise ValueError(f"{self.name}: unknown value type {self.value_type!r}; known: {VALUE_TYPES}")
        if self.validated_only:
            if self.role != INPUT or self.kernel is not None:
                raise ValueError(f"{self.name}: only an input without a kernel tensor is validated_only")
        elif self.role in (INPUT, OUTPUT) and not self.kernel:
            raise ValueError(f"{self.name}: a tensor parameter needs its kernel tensor name (or, for an input "
                             f"the kernel never reads, validated_only=True)")
        asked = (self.mask_bit is not None) + (self.flag is not None)
        if asked and self.role != OUTPUT:
            raise ValueError(f"{self.name}: only an output has a mask bit or a flag")
        if asked > 1:
            raise ValueError(f"{self.name}: an output is asked for by a mask bit or by a flag, not both")
        if self.required_when_off and not asked:
            raise ValueError(f"{self.name}: required_when_off needs a mask bit or a flag that can turn it off")


@dataclass(frozen=True)
class Violation:
    """An example call that breaks a rule: ``mutate(args)`` edits a valid call's arguments
    (param name -> numpy array / int / list) in place. ``products`` limits where it breaks."""

    description: str
    mutate: Callable[[dict], None]
    products: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Rule:
    """One documented error line: ``check(call)`` returns None or what is wrong, in words."""

    code: int
    seed: str
    check: Callable[["Call"], str | None]
    violations: tuple[Violation, ...] = ()
    products: tuple[str, ...] | None = None    # None: applies on every product

    def __post_init__(self):
        if self.code not in STATUS_NAMES or self.code == ACLNN_SUCCESS:
            raise ValueError(f"rule code {self.code} is not an aclnn error status")


@dataclass(frozen=True)
class Pythonic:
    """How the op reads as a Python function; opgen.api generates ``opgen.<op name>`` from it.

    Python names are the aclnn names in snake_case, an input's "Optional" suffix and an
    output's "Out" suffix dropped (gradOut -> grad_out, gradGammaOut -> grad_gamma).
      * ``derived``: aclnn attribute -> f(inputs) giving its value from the read input
        tensors (aclnn name -> TensorArg or None); such attributes leave the signature
        (GroupNorm's N, C and HxW come from input's shape). f may raise ArgError;
      * ``allocate``: aclnn output -> f(inputs, attrs) giving (shape, dtype) of the output
        made when the caller passes none (one not asked for, by its mask bit or flag, is
        neither made nor returned: None, or a one-element placeholder broadcast to that
        shape where the op requires a tensor, Param.required_when_off);
      * ``defaults``: Python name -> default value (outputMask: all True). Optional
        inputs (Param.optional) default to None without being named here; output
        arguments are keyword-only and default to None (allocated). A required parameter
        after one with a default (GroupNorm's group after gamma) stays required: a call
        without it is a TypeError, as Python's own.
    """

    allocate: Mapping[str, Callable]
    derived: Mapping[str, Callable] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)


def python_name(param: Param) -> str:
    """gradGammaOut -> grad_gamma, weightOptional -> weight, outputMask -> output_mask."""
    name = param.name
    for suffix, roles in (("Optional", (INPUT, ATTR)), ("Out", (OUTPUT,))):
        if param.role in roles and name.endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
    snake = "".join(f"_{ch.lower()}" if ch.isupper() and i and (name[i - 1].islower() or name[i - 1].isdigit())
                    else ch.lower() for i, ch in enumerate(name))
    return snake


@dataclass(frozen=True)
class ApiSpec:
    """The aclnn face of an op. ``problem(call)`` gives the kernel Problem of a valid call,
    ``kernel_shapes(problem)`` the kernel's canonical shape of each tensor, ``fill`` the
    constant a null optional input stands for (GroupNorm's gamma: ones), ``pythonic`` how
    the op reads as a Python function (None: no Pythonic function), ``attribute_inputs``
    the kernel inputs an attribute fills, ``unread`` the inputs a valid call does not read."""

    params: tuple[Param, ...]
    rules: tuple[Rule, ...]
    problem: Callable[["Call"], Any]
    kernel_shapes: Callable[[Any], dict]
    description: str
    fill: Mapping[str, float] = field(default_factory=dict)
    pythonic: Pythonic | None = None
    # Kernel inputs that are no aclnn tensor but an attribute's value (DeepNorm's alpha, a
    # mode flag as 0.0/1.0): kernel tensor name -> f(call) giving the value every element
    # holds. The kernel is built per dtype combo over symbolic sizes, so a per-call number
    # reaches it as data; the plan (cached per attribute value) fills a workspace slot.
    attribute_inputs: Mapping[str, Callable[["Call"], float]] = field(default_factory=dict)
    # Inputs a valid call does not read: f(call) -> names of input parameters with a fill
    # value (BatchNorm's saved statistics in eval, its running ones in training). The plan fills
    # them like null inputs (``fill``), so the caller's memory there (nan, a zero-length
    # saveMean) never reaches the kernel, and they take no part in choosing the dtype
    # combo; the rules, which run first, see the caller's tensors as given, and
    # ``call.values`` is never changed. Like ``problem`` it may read only what the plan
    # cache keys on: the call's metadata and attributes, never tensor data.
    unread: Callable[["Call"], Any] | None = None
    # Tensors whose caller's layout is a transpose of the kernel's, not a reshape: f(problem) ->
    # kernel tensor name -> the caller's axes in the kernel's element order (InstanceNorm's NHWC
    # x and y: (0, 3, 1, 2)). The plan stages them (copies through the workspace, transposed on
    # the way in and out), never hands the caller's memory to the kernel. None: every tensor's
    # kernel shape is a reshape of the caller's. Like ``problem``, it reads only the call's key.
    kernel_axes: Callable[[Any], Mapping[str, tuple]] | None = None

    def __post_init__(self):
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate parameter names {names}")
        masks = [p.name for p in self.params if p.role == MASK]
        if len(masks) > 1:
            raise ValueError(f"more than one outputMask parameter: {masks}")
        for p in self.params:
            if not p.name.isidentifier():
                raise ValueError(f"parameter {p.name!r} is not an identifier")
            if p.mask_bit is not None and not masks:
                raise ValueError(f"{p.name} has a mask bit but the op has no outputMask parameter")
            if p.flag is not None and not any(q.name == p.flag and q.role == ATTR and q.value_type == "bool"
                                              for q in self.params):
                raise ValueError(f"{p.name}'s flag {p.flag!r} is not a bool attribute of the op")

    def param(self, name: str) -> Param:
        return next(p for p in self.params if p.name == name)

    def tensors(self, role: str | None = None) -> tuple[Param, ...]:
        roles = (INPUT, OUTPUT) if role is None else (role,)
        return tuple(p for p in self.params if p.role in roles)

    @functools.cached_property
    def tensor_names(self) -> frozenset:
        return frozenset(p.name for p in self.tensors())

    @functools.cached_property
    def _names_by_role(self) -> dict:
        return {role: tuple(p.name for p in self.params if p.role == role) for role in (INPUT, OUTPUT, ATTR, MASK)}

    def names(self, role: str) -> tuple[str, ...]:
        """Parameter names of one role, in order (computed once: it is on every call's path)."""
        return self._names_by_role[role]

    @functools.cached_property
    def mask_name(self) -> str | None:
        """The outputMask parameter's name (None: the op has none)."""
        return next((p.name for p in self.params if p.role == MASK), None)

    def wanted(self, param: Param, values: Mapping) -> bool:
        """Whether output ``param`` is asked for by ``values`` (aclnn name -> argument, as
        read into a Call or as a caller passes it): its flag or its mask bit is true, or
        it has neither; a null optional output (Param.optional) is not asked for. One
        reading for validation, the plan, the Pythonic layer and
        opgen.torch's fake outputs. An argument of the wrong kind (a null mask, a flag that
        is no bool) counts as asking: the op's rules report it, and no output is skipped
        on the strength of a bad argument."""
        if param.optional and param.role == OUTPUT and param.name in values and values[param.name] is None:
            return False        # a null optional output: not asked for (only where the values hold outputs)
        if param.flag is not None:
            value = values.get(param.flag)
            return not isinstance(value, (bool, np.bool_)) or bool(value)
        if param.mask_bit is None or self.mask_name is None:
            return True
        mask = values.get(self.mask_name)
        try:
            bits = tuple(bool(v) for v in mask)
        except TypeError:
            return True
        return param.mask_bit < len(bits) and bits[param.mask_bit]


@dataclass
class Call:
    """A GetWorkspaceSize call after its arguments were read: TensorArgs, ints, a mask."""

    op: Any                    # the OpSpec
    product: str
    values: dict

    def __getitem__(self, name: str):
        return self.values[name]

    @property
    def api(self) -> ApiSpec:
        return self.op.api

    @property
    def mask(self) -> tuple | None:
        name = self.api.mask_name
        return self.values[name] if name else None

    def wanted(self, param: Param) -> bool:
        """Whether an output is asked for (no mask bit or flag, or a true one)."""
        return self.api.wanted(param, self.values)

    @functools.cached_property
    def unread(self) -> frozenset:
        """The input parameters this call does not read (ApiSpec.unread), checked once."""
        if self.api.unread is None:
            return frozenset()
        names = frozenset(self.api.unread(self))
        for name in names:
            p = next((q for q in self.api.params if q.name == name), None)
            if p is None or p.role != INPUT or p.kernel not in self.api.fill:
                raise ValueError(f"ApiSpec.unread named {name}: only an input with a fill value can go unread")
        return names

    def reads(self, param: Param) -> bool:
        """Whether the kernel reads this input parameter's tensor in this call: it is given,
        it feeds a kernel tensor (not validated_only) and the call does not leave it unread."""
        return self.values[param.name] is not None and param.kernel is not None and param.name not in self.unread

    def combos(self):
        return self.op.products.get(self.product, ())


# ---- vocabulary shared by the op files' rules ------------------------------------------

def shape_str(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def first(messages) -> str | None:
    """The first non-None message of an iterable: a rule reports one problem at a time."""
    return next((m for m in messages if m), None)


def null_message(call: Call, names) -> str | None:
    return first(f"{n} is a null pointer but is required" for n in names if call[n] is None)


def dtype_message(name: str, got: str, allowed, why: str = "") -> str | None:
    if got in allowed:
        return None
    return f"{name} has dtype {got}; expected {' or '.join(allowed)}{why}"


# ---- vocabulary of example violations (edits of a valid call's arguments) ---------------

def set_args(**changes):
    """A mutate function: each keyword's function of the args gives that argument's new value."""
    return lambda args: args.update({k: v(args) for k, v in changes.items()})


def cast_args(names, dtype):
    """A mutate function casting the named arrays to ``dtype``: a numpy dtype, or a dtype name
    of opgen.dtypes ("bfloat16": ml_dtypes', looked up when the mutation runs)."""
    def cast(a, n):
        return np.asarray(a[n]).astype(numpy_dtype(dtype) if isinstance(dtype, str) else dtype)
    return set_args(**{n: (lambda n: lambda a: cast(a, n))(n) for n in names})


def other_float(name: str):
    """A mutate function giving ``name`` a float dtype other than its own (but valid alone)."""
    return set_args(**{name: lambda a: a[name].astype(np.float16 if a[name].dtype != np.float16 else np.float32)})
