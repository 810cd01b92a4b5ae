"""What an op is: its dtype combos, its problem sizes and its OpSpec (see opgen.ops for
the registry).

An OpSpec carries everything opgen knows about an op, so that the tools iterate over ops
instead of naming them: the TE compute, the aclnn ApiSpec, the float64 reference, the
sympy forward model, the peers to compare and bench against, FLOPs per element, and the
sample, compare and benchmark shapes. Op packages import these declarations from here
while the ``opgen.ops`` package discovers them, so the two never import each other.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import itertools
import math
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from opgen.products import PRODUCTS
from opgen.dtypes import ALL_DTYPES, short


@dataclass(frozen=True)
class DtypeCombo:
    """One supported assignment of dtypes to the kernel's tensors (inputs then outputs).

    ``absent``: optional inputs (kernel names) this combo's kernel goes without: its compute
    omits their term and the kernel has no parameter for them (OpSpec.optional_terms makes
    these variants; the plan picks one when the call passes those inputs as null). The tag
    says so (``f32-f32-nodsum``), so every cache key, symbol, export folder and test that
    loops over combos tells the variants apart."""

    dtypes: tuple[tuple[str, str], ...]
    key_tensors: tuple[str, ...]
    absent: tuple[str, ...] = ()

    def __post_init__(self):
        names = [n for n, _ in self.dtypes]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate tensor in dtype combo {names}")
        if set(self.absent) & set(names):
            raise ValueError(f"tensors {sorted(set(self.absent) & set(names))} both absent and in combo {names}")
        for name, dt in self.dtypes:
            if dt not in ALL_DTYPES:
                raise ValueError(f"tensor {name}: unsupported dtype {dt}")
        missing = set(self.key_tensors) - set(names)
        if missing:
            raise ValueError(f"key tensors {sorted(missing)} not in combo")

    def __getitem__(self, tensor: str) -> str:
        return dict(self.dtypes)[tensor]

    @property
    def tag(self) -> str:
        """Short stable name, e.g. ``f16-f32``: the key tensors' dtypes in order, then
        ``-no<name>`` per absent input (``f32-f32-nodsum``)."""
        return "-".join([short(self[t]) for t in self.key_tensors] + [f"no{name}" for name in self.absent])

    def without(self, names) -> "DtypeCombo":
        """This combo's variant whose kernel goes without the inputs ``names`` (their dtypes
        leave it; a key tensor among them cannot)."""
        names = tuple(n for n in dict(self.dtypes) if n in set(names))
        keys = set(names) & set(self.key_tensors)
        if keys:
            raise ValueError(f"key tensors {sorted(keys)} cannot be absent from combo {self.tag}")
        return DtypeCombo(tuple((n, d) for n, d in self.dtypes if n not in names), self.key_tensors,
                          self.absent + names)

    def has(self, tensor: str) -> bool:
        """Whether the kernel of this combo has ``tensor`` (it is not absent)."""
        return tensor not in self.absent


class ProblemBase:
    """Base of an op's Problem dataclass (one call's sizes): one spelling for every tool.

    ``parse`` reads the command-line spelling: fields in order, separated by commas; a tuple
    field takes ``AxBxC``, an int field a number or a product (``56x56``); missing trailing
    int fields are 1 (RmsNormGrad: ``4096x4096`` -> x (4096, 4096) with gamma over the last
    axis; GroupNorm: ``8,256,56x56,32`` -> N, C, HxW, group). ``label`` writes it back (a
    Problem may override it with a friendlier spelling that ``parse`` still reads).
    """

    @classmethod
    def parse(cls, text: str):
        fields = dataclasses.fields(cls)
        hints = typing.get_type_hints(cls)
        parts = [p.strip() for p in str(text).strip().strip("()").split(",") if p.strip()]
        if not parts or len(parts) > len(fields):
            raise ValueError(f"cannot read {text!r} as {cls.__name__}: expected up to {len(fields)} fields "
                             f"{[f.name for f in fields]}, separated by commas")
        values = {}
        for i, f in enumerate(fields):
            try:
                dims = tuple(int(d) for d in parts[i].lower().split("x")) if i < len(parts) else (1,)
            except ValueError:
                raise ValueError(f"cannot read {parts[i]!r} as {cls.__name__}.{f.name}: expected integers "
                                 f"joined by 'x'") from None
            is_tuple = typing.get_origin(hints[f.name]) is tuple
            values[f.name] = dims if is_tuple else math.prod(dims)
        return cls(**values)

    def label(self) -> str:
        fields = dataclasses.fields(self)
        values = [getattr(self, f.name) for f in fields]
        while len(values) > 1 and values[-1] == 1 and not isinstance(values[-1], tuple):
            values.pop()
        return ",".join("x".join(map(str, v)) if isinstance(v, tuple) else str(v) for v in values)


class ChannelProblem(ProblemBase):
    """Base of the Problem dataclasses whose first field is ``x_shape`` with a channel axis:
    axis 1, or the last one when the Problem has a true ``channel_last`` field (an NHWC/NDHWC
    tensor). The (N, C, HW) view every channel-pattern kernel takes (BatchNorm and its reduce
    and elementwise halves): ``N`` the elements before the channel axis, ``HW`` those after it.
    Spelt as ProblemBase spells it (``32x64x56x56``, then any other fields after commas); x
    needs at least (N, C)."""

    @property
    def channel_axis(self) -> int:
        return len(self.x_shape) - 1 if getattr(self, "channel_last", False) else 1

    @property
    def C(self) -> int:
        return self.x_shape[self.channel_axis]

    @property
    def N(self) -> int:
        """Elements before the channel axis (the kernel's N)."""
        return math.prod(self.x_shape[:self.channel_axis])

    @property
    def HW(self) -> int:
        """Elements after the channel axis (the kernel's HW; 1 for a channel-last x)."""
        return math.prod(self.x_shape[self.channel_axis + 1:])

    @classmethod
    def parse(cls, text: str):
        problem = super().parse(text)
        if len(problem.x_shape) < 2:
            raise ValueError(f"cannot read {text!r} as {cls.__name__}: input needs at least 2 dimensions (N, C)")
        return problem


class TrailingAxesProblem(ProblemBase):
    """Base of the Problem dataclasses whose fields are ``x_shape``, ``gamma_ndim`` (how many
    trailing axes of x gamma covers) and at most one attribute, typed by its annotation
    (float, int or bool; RmsNorm's ``epsilon``, DeepNorm's ``alpha``): the rows/cols view
    every such op's kernel takes, and the spelling ``X[,GAMMA_NDIM[,ATTRIBUTE]]``
    (``4096x4096``, ``4x8x64,2,1e-5``; a bool as 1/0/true/false). An attribute without a
    default must be spelt; one with a default may be left out."""

    @property
    def n(self) -> int:
        """The number of leading (not normalized) axes."""
        return len(self.x_shape) - self.gamma_ndim

    @property
    def rows(self) -> int:
        return math.prod(self.x_shape[: self.n])

    @property
    def cols(self) -> int:
        return math.prod(self.x_shape[self.n:])

    @property
    def gamma_shape(self) -> tuple[int, ...]:
        return self.x_shape[self.n:]

    @property
    def stat_shape(self) -> tuple[int, ...]:
        """A per-row statistic's shape: x's leading dims, then 1s (the keepdim form)."""
        return self.x_shape[: self.n] + (1,) * self.gamma_ndim

    @classmethod
    @functools.cache
    def _attribute(cls) -> "_Attribute | None":
        """The third field, its type read from its annotation (None: the op has no attribute);
        read once per class (label, parse and str ask on every call)."""
        fields = dataclasses.fields(cls)
        if len(fields) > 3:
            raise TypeError(f"{cls.__name__}: a TrailingAxesProblem has at most one attribute after x_shape "
                            f"and gamma_ndim, not {[f.name for f in fields[2:]]}")
        if len(fields) < 3:
            return None
        field_ = fields[2]
        kind = typing.get_type_hints(cls)[field_.name]
        if kind not in _ATTRIBUTE_READERS:
            raise TypeError(f"{cls.__name__}.{field_.name}: a {kind} attribute; the spelling reads float, int or bool")
        return _Attribute(field_.name, kind, field_.default)

    @classmethod
    def _expected(cls) -> str:
        """The spelling, for an error message: its form and an example."""
        attr = cls._attribute()
        if attr is None:
            return "X[,GAMMA_NDIM], e.g. 4096x4096 or 4x8x64,2"
        if attr.required:
            example = _spell(attr.type, _ATTRIBUTE_EXAMPLES[attr.type])
            return f"X,GAMMA_NDIM,{attr.name.upper()}, e.g. 4096x4096,1,{example}"
        return f"X[,GAMMA_NDIM[,{attr.name.upper()}]], e.g. 4096x4096 or 4x8x64,2,{_spell(attr.type, attr.default)}"

    @classmethod
    def parse(cls, text: str):
        """``4096x4096``, ``4x8x64,2`` or ``4x8x64,2,<attribute>`` (ValueError: what is wrong)."""
        attr = cls._attribute()
        parts = [p.strip() for p in str(text).strip().strip("()").split(",") if p.strip()]
        least, most = (3 if attr is not None and attr.required else 1), (2 if attr is None else 3)
        if not least <= len(parts) <= most:
            raise ValueError(f"cannot read {text!r} as {cls.__name__}: expected {cls._expected()}")
        try:
            shape = tuple(int(d) for d in parts[0].lower().split("x"))
            ndim = int(parts[1]) if len(parts) > 1 else 1
            value = () if attr is None else (
                (_ATTRIBUTE_READERS[attr.type](parts[2]),) if len(parts) > 2 else (attr.default,))
        except (ValueError, KeyError):
            what = "" if attr is None else f", {attr.name} {_ATTRIBUTE_WORDS[attr.type]}"
            raise ValueError(f"cannot read {text!r} as {cls.__name__}: x's dims are integers joined by 'x', "
                             f"gamma_ndim an integer{what}") from None
        return cls(shape, ndim, *value)

    def label(self) -> str:
        """The spelling ``parse`` reads back, without the defaults at the end."""
        attr = self._attribute()
        parts = ["x".join(map(str, self.x_shape)), str(self.gamma_ndim)]
        if attr is not None:
            value = getattr(self, attr.name)
            parts.append(_spell(attr.type, value))
            if not attr.required and value == attr.default:
                parts.pop()
        if len(parts) == 2 and self.gamma_ndim == 1:
            parts.pop()
        return ",".join(parts)

    def __str__(self) -> str:
        attr = self._attribute()
        text = f"x{list(self.x_shape)} gamma_ndim={self.gamma_ndim}"
        return text if attr is None else f"{text} {attr.name}={getattr(self, attr.name)}"


class _Attribute(typing.NamedTuple):
    """A TrailingAxesProblem's attribute: its field's name, annotated type and default."""

    name: str
    type: type
    default: Any

    @property
    def required(self) -> bool:
        """No default: the spelling must give it."""
        return self.default is dataclasses.MISSING


def _read_bool(text: str) -> bool:
    return {"1": True, "true": True, "0": False, "false": False}[text.lower()]


# How a TrailingAxesProblem's attribute is read from its spelling, by its annotation's type;
# what an error message says it is, and an example value when the field has no default.
_ATTRIBUTE_READERS = {float: float, int: int, bool: _read_bool}
_ATTRIBUTE_WORDS = {float: "a number", int: "an integer", bool: "1/0/true/false"}
_ATTRIBUTE_EXAMPLES = {float: 1e-5, int: 1, bool: True}


def _spell(kind: type, value) -> str:
    """An attribute value as ``parse`` reads it back: a float's repr, an int, a bool as 1/0."""
    if kind is bool:
        return str(int(bool(value)))
    return repr(float(value)) if kind is float else str(int(value))


@dataclass(frozen=True)
class CannAttr:
    """One attribute of CANN's OpDef: ``kind`` is the OpAttrDef setter (Int, Float, Bool,
    String, ListBool), ``default`` its value (None: REQUIRED). ``tensor``: the opgen kernel
    tensor that carries the same value (a GM scalar here, an attribute in CANN), if any."""

    name: str
    kind: str
    default: Any = None
    tensor: str | None = None

    def __post_init__(self):
        if self.kind not in ("Int", "Float", "Bool", "String", "ListBool"):
            raise ValueError(f"CANN attribute {self.name}: unknown kind {self.kind!r}")


@dataclass(frozen=True)
class CannOp:
    """CANN's own definition of the op (ops-nn norm/<op>/op_host/<op>_def.cpp): its OpDef
    name, its inputs and outputs in CANN's order and names, each as (CANN name, opgen tensor),
    and its attributes. What an Ascend project prints instead of opgen's own names."""

    name: str
    inputs: tuple[tuple[str, str], ...]
    outputs: tuple[tuple[str, str], ...]
    attrs: tuple[CannAttr, ...] = ()
    source: str = ""              # where the facts were read
    # How CANN's kernel rounds a float32 result into a narrower output: (dtype, RoundMode),
    # e.g. ("bfloat16", "CAST_ROUND"); unlisted dtypes round to nearest even (CAST_RINT).
    round_modes: tuple[tuple[str, str], ...] = ()
    # How the op's call (CANN input shapes, attributes) becomes the kernel's sizes
    # (opgen.kernel_view.KernelView): the Ascend host's TilingFunc is printed from it.
    view: Any = None

    def __post_init__(self):
        bad = [m for _, m in self.round_modes if m not in ("CAST_RINT", "CAST_ROUND", "CAST_NONE")]
        if bad:
            raise ValueError(f"CANN op {self.name}: unknown round mode(s) {bad}")
        if not self.name.isidentifier() or not self.name[0].isupper():
            raise ValueError(f"CANN op name {self.name!r} must be a CamelCase identifier")
        names = [n for n, _ in self.inputs + self.outputs] + [a.name for a in self.attrs]
        if len(set(names)) != len(names):
            raise ValueError(f"CANN op {self.name}: duplicate input/output/attribute name in {names}")

    def tensor_names(self) -> dict:
        """{opgen tensor: CANN name} of every input, output and tensor-carried attribute."""
        named = {t: n for n, t in self.inputs + self.outputs}
        named.update({a.tensor: a.name for a in self.attrs if a.tensor})
        return named

    def to_json(self, tensors: tuple = ()) -> str:
        """The facts as JSON; ``tensors``: the op's tensors in kernel parameter order (inputs
        then outputs), so that a target can map them onto the function's parameters."""
        import json
        # A combo's variant without an optional input (DtypeCombo.absent) has no kernel
        # tensor for it: its face leaves that CANN input out.
        inputs = tuple((n, t) for n, t in self.inputs if not tensors or t in tensors)
        return json.dumps({"name": self.name, "inputs": inputs, "outputs": self.outputs, "tensors": tensors, "round_modes": dict(self.round_modes),
                           "attrs": [dataclasses.asdict(a) for a in self.attrs], "source": self.source,
                           "view": self.view.to_json() if self.view is not None else None})


@dataclass(frozen=True)
class Peer:
    """Another implementation of the op's backward, to compare with and time against.

    ``make(problem, tensors)`` takes torch tensors by kernel name and returns a closure
    running only the backward and returning its outputs by kernel name (a compiled peer
    returns ``(before, run)``: ``before`` runs the forward a compiled backward needs fresh).
    ``compare``: the hand-written library ``opgen compare --against aten`` judges opgen by;
    ``bench``: a contender in ``opgen bench`` (the CPU) and ``scripts/gpu_bench.py`` (CUDA);
    ``devices``: the torch device types it runs on; a tool on another device leaves it out
    (a Triton kernel such as Liger-Kernel's: ``("cuda",)``, so ``opgen bench`` skips it)."""

    name: str
    doc: str
    make: Callable
    compare: bool = False
    bench: bool = True
    devices: tuple = ("cpu", "cuda")


@dataclass(frozen=True)
class Cases:
    """Shapes (in the Problem's spelling) the tools use: ``compare`` (opgen compare's
    defaults), ``bench`` (the benchmark list), ``quick`` (opgen bench --quick), ``tiny``
    (the per-call cost row)."""

    compare: tuple = ()
    bench: tuple = ()
    quick: str | None = None
    tiny: str | None = None


@dataclass(frozen=True)
class OpSpec:
    """Everything opgen knows about one operator, independent of any target.

    ``compute(combo)`` returns the TE tensors in kernel argument order (placeholders first,
    then outputs), all with symbolic extents so one kernel serves every shape.
    ``products`` maps a product name to the combos it documents; a product that is absent
    does not offer the op. ``problems`` are named problem sizes that ``opgen generate``
    verifies; ``random_inputs(problem, combo, rng)`` makes inputs in the user's shapes and
    ``kernel_args(problem, arrays)`` views them in the kernel's canonical shapes and
    ``reference(problem, arrays)`` gives the float64 outputs in the user's shapes.
    """

    name: str
    aclnn_name: str
    doc: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    combos: tuple[DtypeCombo, ...]
    products: Mapping[str, tuple[DtypeCombo, ...]]
    compute: Callable[[DtypeCombo], list]
    reference: Callable[..., dict]
    random_inputs: Callable[..., dict]
    kernel_args: Callable[..., dict]
    problems: tuple[Any, ...] = field(default=())
    # The aclnn face (opgen.apispec.ApiSpec): parameters in the seed's order, documented
    # error lines, how a call maps onto the kernel. None: no aclnn functions are generated.
    api: Any = None
    # Floating-point operations per element of the first input, counted from the TE stages:
    # the x axis of a roofline (opgen bench --plot). 0: not counted.
    flops_per_element: int = 0
    # problem -> {output kernel name: shape in the user's layout} (what a caller allocates).
    output_shapes: Callable[[Any], dict] | None = None
    peers: tuple = ()             # Peer: what opgen compare and opgen bench set opgen against
    cases: Cases = Cases()
    package: str = ""             # the op's package (__name__): where optional parts live, e.g.
                                  # torch_module.py, the torch.nn modules opgen.torch exports,
                                  # and model.py, its forward model (``model``)
    cann: CannOp | None = None    # CANN's OpDef of the op (Ascend projects print its names)
    # Optional inputs (kernel names) whose absence is a kernel variant rather than a fill:
    # every combo gets a variant without each subset of them (DtypeCombo.absent), whose
    # compute omits the term, and the plan picks it when the call passes them as null
    # (AddLayerNormGrad's dsum: no dsum-sized tensor of zeros is made). Added here, once,
    # so that every loop over ``combos`` and ``products`` sees the variants.
    optional_terms: tuple[str, ...] = ()

    def __post_init__(self):
        if not self.name.isidentifier():
            raise ValueError(f"op name {self.name!r} must be an identifier")
        self._add_variants()
        unknown = set(self.products) - set(PRODUCTS)
        if unknown:
            raise ValueError(f"{self.name}: unknown products {sorted(unknown)}")
        for product, combos in self.products.items():
            stray = [c.tag for c in combos if c not in self.combos]
            if stray:
                raise ValueError(f"{self.name}/{product}: combos {stray} not in the op's combos")
        tensors = self.inputs + self.outputs
        if self.cann is not None:
            stray = sorted(set(self.cann.tensor_names()) - set(tensors))
            if stray:
                raise ValueError(f"{self.name}: CANN op {self.cann.name} maps unknown tensors {stray}")
        self._check_null_inputs()
        for combo in self.combos:
            if tuple(n for n, _ in combo.dtypes) != self.kernel_tensors(combo):
                raise ValueError(f"{self.name}: combo {combo.tag} does not list {self.kernel_tensors(combo)}")

    def _check_null_inputs(self) -> None:
        """Each optional aclnn input the kernel reads has a fill value or a variant without it."""
        for p in () if self.api is None else self.api.params:
            if (p.optional and p.role == "input" and not p.validated_only and p.kernel not in self.api.fill
                    and p.kernel not in self.optional_terms):
                raise ValueError(f"{self.name}: optional input {p.name} needs a fill value (ApiSpec.fill) or "
                                 f"its kernel tensor in OpSpec.optional_terms")

    def _add_variants(self) -> None:
        """Expand ``combos`` and ``products`` by the variants without each nonempty subset of
        ``optional_terms`` (each after its full combo); a frozen field set once, here."""
        stray = sorted(set(self.optional_terms) - set(self.inputs))
        if stray:
            raise ValueError(f"{self.name}: optional_terms {stray} are not kernel inputs")
        if not self.optional_terms:
            return
        subsets = [names for k in range(1, len(self.optional_terms) + 1)
                   for names in itertools.combinations(self.optional_terms, k)]

        def expand(combos) -> tuple:
            return tuple(v for c in combos for v in (c, *(c.without(names) for names in subsets)))
        object.__setattr__(self, "combos", expand(self.combos))
        object.__setattr__(self, "products", {p: expand(cs) for p, cs in self.products.items()})

    def kernel_inputs(self, combo: DtypeCombo) -> tuple[str, ...]:
        """The inputs the kernel of ``combo`` takes, in parameter order (absent ones left out)."""
        return tuple(n for n in self.inputs if n not in combo.absent)

    def kernel_tensors(self, combo: DtypeCombo) -> tuple[str, ...]:
        """The kernel's tensor parameters for ``combo``: its inputs, then the outputs."""
        return self.kernel_inputs(combo) + self.outputs

    def kernel_shapes(self, problem, combo: DtypeCombo) -> dict:
        """Kernel tensor name -> its shape for ``problem``, in the kernel's parameter order
        (``kernel_tensors(combo)``). The schedule rules read shapes by position, as the
        kernel's parameters (``by_param``, ``bind_sizes``); ``api.kernel_shapes`` lists them
        in the op's own order, which differs for seven ops (a dict in that order made the
        GPU's 128-bit variant unreachable for RmsNormGradQuant)."""
        by_name = self.api.kernel_shapes(problem)
        return {name: by_name[name] for name in self.kernel_tensors(combo)}

    @property
    def model(self):
        """The sympy forward model opgen.derive proves the TE against (opgen.symbolic.ProofModel):
        ``MODEL`` of the op package's model.py, imported on first use (sympy and opgen.symbolic
        take a second to import, and only the proofs read them); None without one."""
        name = f"{self.package}.model"
        if not self.package or importlib.util.find_spec(name) is None:
            return None
        return importlib.import_module(name).MODEL

    @property
    def problem_type(self) -> type:
        return type(self.problems[0])

    def parse_problem(self, text: str):
        """The op's Problem from its command-line spelling (ValueError: what is wrong)."""
        return self.problem_type.parse(text)

    def combo(self, tag: str) -> DtypeCombo:
        for candidate in self.combos:
            if candidate.tag == tag:
                return candidate
        raise KeyError(f"{self.name} has no dtype combo {tag!r}; known: {[c.tag for c in self.combos]}")


def attribute_array(value: float) -> np.ndarray:
    """An aclnn float attribute as the (1,) float32 kernel input it fills (eps, epsilon, a
    swish scale): a C cast, quietly inf where the double is out of float32's range."""
    with np.errstate(over="ignore"):
        return np.array([value], np.float32)


def as_float32(expr):
    """Widen a TE expression to float32: the accumulation type of every op here."""
    return expr if expr.dtype == "float32" else expr.astype("float32")
