"""Schedules: how each stage pattern runs on each target, never what it computes.

A schedule module ``schedules/<target>.py`` holds ``RULES``: ``ScheduleRule`` objects
with ``apply(func, target, knobs) -> s_tir.Schedule | None`` (TVM dlight's protocol; a
``PatternRule`` supplies it from its ``match`` and ``schedule``). Rules are tried in
order; ``None`` means "this rule does not match this function". Rules recognise stages by
pattern (row reduction + elementwise, column reduction) using ``blocks()`` below, never by
op name, so a new op written in the same patterns needs no schedule code.

The protocol, stated once (``ScheduleRule`` gives every method its default):
  * ``matches(func, target) -> bool``: whether the rule's pattern is in ``func``, without
    scheduling it (a PatternRule only reads the blocks);
  * ``knobs(target) -> tuple[Knob, ...]``: the tuner's search space, each knob's domain in
    the order a search should try it, and its default (used when the knob is not given);
  * ``check_knobs(knobs, target, shapes=None, func=None) -> str | None``: why a full point
    of that space is invalid for this target and, when ``shapes`` (the kernel's tensor
    shapes) and ``func`` name a problem, for that problem (UB budget, threads per block,
    divisibility), so the tuner prunes it before building anything. None means valid;
  * ``knobs_for_shapes(target, shapes) -> dict``: defaults that depend on the problem
    (e.g. no thread launch for a tiny one).

Which knobs a kernel is built with is decided in one place, ``resolve``: the matching
rule's defaults, overlaid by its problem-size defaults, overlaid by the best tuned record
that is a valid point of the rule's space (records come in as data, best first; invalid
ones are returned with the reason, never built). ``schedule`` then applies the rule once.
Adding a target's knobs to the tuner is only the declaration: ``opgen.tune`` reads it here.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

from opgen.lazy import s_tir, tvm


# Block annotation a rule may set on a block that writes an output: "this output is written
# once and not read again by the kernel; write it around the caches". A target that can
# (targets/llvm_stream.py) uses non-temporal stores for it; the others ignore it.
STREAMED_OUTPUT = "opgen.streamed_output"


# Root-block annotation a vector variant sets (schedules/gpu.py, schedules/llvm.py): {"lanes":
# n, "axis": the name of a parameter whose innermost extent is the vectorized row length} and
# optionally "align" (bytes, default 16) and "params" (the names of the parameters that must
# have it; default: every parameter whose innermost extent is the row length). The kernel's
# buffers then declare the alignment that variant needs (opgen.kernels.declare_vector_alignment)
# and the PrimFunc carries the lane count under the same name, which a target reads to build
# it (targets/cuda.py: common-subexpression elimination off, see there).
VECTOR_LANES = "opgen.vector_lanes"
DEFAULT_VECTOR_ALIGN = 16


@dataclass(frozen=True)
class VectorPromise:
    """What a vector variant's schedule recorded on its root block (VECTOR_LANES)."""

    lanes: int = 0
    axis: object = None          # the row-length size variable
    align: int = DEFAULT_VECTOR_ALIGN
    params: frozenset | None = None   # names of the aligned parameters; None: every row tensor


def vector_promise(func) -> VectorPromise:
    """The promise a vector variant's schedule recorded on ``func``'s root block (lanes 0:
    none)."""
    root = getattr(func.body, "block", None)
    promise = root.annotations.get(VECTOR_LANES) if root is not None else None
    if promise is None:
        return VectorPromise()
    by_name = {p.name: p for p in func.params}
    params = promise.get("params")
    return VectorPromise(int(promise["lanes"]), by_name[str(promise["axis"])].shape[-1],
                         int(promise.get("align", DEFAULT_VECTOR_ALIGN)),
                         None if params is None else frozenset(str(n) for n in params))


class NoScheduleRule(LookupError):
    """No rule of the target's schedule module matched the function."""


class InvalidKnobs(ValueError):
    """A knob the matched rule does not declare, a value outside its domain, or a point
    its constraints refuse."""


class ScheduleRule:
    """The rule protocol, with the defaults a rule without knobs needs."""

    def apply(self, func, target, knobs):
        raise NotImplementedError

    def matches(self, func, target) -> bool:
        """Whether this rule schedules ``func`` (generic: by trying; PatternRule reads blocks)."""
        return self.apply(func, target, default_knobs(self, target)) is not None

    def knobs(self, target) -> tuple:
        return ()

    def check_knobs(self, knobs: dict, target, shapes: dict | None = None, func=None) -> str | None:
        return None

    def knobs_for_shapes(self, target, shapes: dict) -> dict:
        return {}

    def knobs_for_call(self, target, shapes: dict, func=None, alignments: dict | None = None) -> dict:
        """Defaults for one call: ``knobs_for_shapes``, plus what depends on the call's
        dtypes (``func``, the unscheduled PrimFunc) and on where its tensors lie
        (``alignments``: tensor name -> the largest power of two up to 64 dividing the
        address the kernel is handed; None: unknown, which must select nothing that needs
        alignment). How a variant is chosen per call: the CPU's size defaults and the GPU's
        vector variant alike."""
        return self.knobs_for_shapes(target, shapes)

    def call_knobs(self, target) -> tuple:
        """Names of the knobs the call alone decides (``knobs_for_call``): a tuned record
        never overrides them (a record tuned on aligned data must not vectorize a call on
        misaligned data)."""
        return ()

    def alignment_matters(self, target, shapes: dict, func=None) -> bool:
        """Whether the call's addresses can change what ``knobs_for_call`` chooses for these
        shapes (then the aclnn plan cache keys the call on them, and opgen.api does not bind
        it); default: whenever the rule has ``call_knobs``."""
        return bool(self.call_knobs(target))

    def call_variants(self, target, func) -> tuple:
        """The kernels ``knobs_for_call`` can choose besides the default one, each as (name,
        knobs, requirement): the requirement's ``admits(shapes, alignments)`` (per parameter
        of ``func``, in order) is the rule ``knobs_for_call`` applies, and its
        ``conditions(shape)`` the same rule as expressions (what opgen.export writes into a
        launch plan, so a runner without TVM chooses as the library does)."""
        return ()


class PatternRule(ScheduleRule):
    """Base of the rules that match a stage pattern: ``match(infos)`` returns what the
    pattern found in the function's blocks (None: not this pattern) and ``schedule(sch,
    matched, target, knobs)`` schedules it and returns ``sch``. ``apply`` (dlight's
    protocol) opens the schedule and ties the two, once for every rule."""

    def match(self, infos: list):
        raise NotImplementedError

    def schedule(self, sch, matched, target, knobs):
        raise NotImplementedError

    def matches(self, func, target) -> bool:
        return self.match(blocks(pattern_schedule(func))) is not None

    def keeps_prologues(self, knobs: dict) -> bool:
        """Whether ``schedule`` wants the prologues the pattern's stages read as blocks of
        their own (``pattern_schedule(func, keep_prologues=True)``) instead of inlined into
        every reader. Matching always sees them inlined."""
        return False

    def apply(self, func, target, knobs):
        sch = pattern_schedule(func)
        matched = self.match(blocks(sch))
        if matched is None:
            return None
        if self.keeps_prologues(knobs):
            sch = pattern_schedule(func, keep_prologues=True)
        return self.schedule(sch, matched, target, knobs)


@dataclass(frozen=True)
class Knob:
    """One tunable decision of a schedule rule: a finite domain and the default.

    ``values`` is the domain in the order an exhaustive search tries it; ``default`` is
    one of them and is what the rule uses when the knob is not given.
    """

    name: str
    values: tuple
    default: object
    doc: str = ""

    def __post_init__(self):
        if not self.values or self.default not in self.values:
            raise ValueError(f"knob {self.name}: default {self.default!r} not in its domain {self.values!r}")


@dataclass(frozen=True)
class Block:
    """What a rule needs to know about one block: its iterators and its buffers."""

    name: str
    kinds: str                     # one letter per iterator: S spatial, R reduction
    extents: tuple                 # PrimExpr extent of each iterator
    reads: frozenset               # names of buffers read
    writes: frozenset              # names of buffers written
    writes_output: bool            # writes a function parameter (not a scratch buffer)
    order: int = 0                 # position in program order among the root's blocks


def blocks(sch: s_tir.Schedule) -> list[Block]:
    """The root's child blocks in program order, described for pattern matching."""
    root = sch.get_sblock("root")
    scratch = {buf.name for buf in sch.get(root).alloc_buffers}
    result = []
    for order, rv in enumerate(sch.get_child_blocks(root)):
        blk = sch.get(rv)
        kinds = "".join("R" if iv.iter_type == 2 else "S" for iv in blk.iter_vars)
        writes = frozenset(r.source.name for r in blk.writes)
        result.append(Block(
            name=blk.name_hint,
            kinds=kinds,
            extents=tuple(iv.dom.extent for iv in blk.iter_vars),
            reads=frozenset(r.source.name for r in blk.reads),
            writes=writes,
            writes_output=bool(writes - scratch),
            order=order,
        ))
    return result


def prologues(infos: list[Block]) -> list[Block]:
    """The elementwise prologues among ``infos``: blocks computing a whole intermediate
    tensor element by element (no reduction, not an output) at the rank of the op's data
    (GroupNormSwish's y and its dy after the swish derivative). Per-row and per-group
    scalars have a lower rank: not prologues."""
    data_rank = max((len(b.kinds) for b in infos if b.writes_output), default=0)
    return [b for b in infos if not b.writes_output and "R" not in b.kinds and len(b.kinds) == data_rank]


def pattern_schedule(func, keep_prologues: bool = False) -> s_tir.Schedule:
    """A Schedule of ``func`` as the patterns see it: its elementwise prologues inlined.

    Inlined into its consumers, a prologue leaves the op in the pattern its other stages
    form; each consumer then recomputes it (a few flops per element against a round trip
    of the tensor through memory). With ``keep_prologues``, the prologues the other stages
    read stay blocks (those feeding only other prologues are inlined into them): a rule
    that computes them once per task and reads them from cache asks for it
    (``PatternRule.keeps_prologues``), when they cost more than a reread (a sigmoid)."""
    sch = s_tir.Schedule(func)
    infos = blocks(sch)
    inline = prologues(infos)
    if keep_prologues:
        inline = [b for b in inline
                  if not any(b.writes & other.reads for other in infos if other not in inline)]
    for info in inline:
        try:
            sch.compute_inline(sch.get_sblock(info.name))
        except s_tir.schedule.ScheduleError:   # not inlinable: the patterns decide without it
            pass
    return sch


def same_extent(a, b) -> bool:
    """Whether two (possibly symbolic) extents are provably equal."""
    return bool(tvm.sym.analyzer.Analyzer().can_prove_equal(a, b))


def rules_of(target) -> list:
    """The ordered schedule rules of ``target`` (its ``schedules/<name>.py``; none for a
    target whose compiler schedules for itself)."""
    if target.schedule_module is None:
        return []
    return importlib.import_module(f"{__name__}.{target.schedule_module}").RULES


def match(func, target):
    """The first rule of ``target`` that matches ``func`` (pattern matching only)."""
    for rule in rules_of(target):
        if rule.matches(func, target):
            return rule
    names = [type(rule).__name__ for rule in rules_of(target)]
    symbol = func.attrs["global_symbol"] if func.attrs and "global_symbol" in func.attrs else "the function"
    raise NoScheduleRule(f"no {target.name} schedule rule matches {symbol}; tried {names}")


def rule_knobs(rule, target) -> tuple:
    """The knobs ``rule`` declares for ``target``."""
    return tuple(rule.knobs(target))


def default_knobs(rule, target) -> dict:
    return {k.name: k.default for k in rule_knobs(rule, target)}


def _outside_space(rule, knobs, target) -> str | None:
    """Why ``knobs`` names a knob ``rule`` lacks or a value outside its domain (None: inside)."""
    if not isinstance(knobs, dict):
        return f"knobs must be a mapping of knob names to values, got {type(knobs).__name__}"
    declared = {k.name: k for k in rule_knobs(rule, target)}
    for name, value in knobs.items():
        if name not in declared:
            return f"{type(rule).__name__} has no knob {name!r} (it has {sorted(declared) or 'none'})"
        if not any(type(value) is type(v) and value == v for v in declared[name].values):
            return f"{type(rule).__name__}: {name}={value!r} is outside its domain {declared[name].values!r}"
    return None


def check_knobs(rule, knobs: dict, target, shapes: dict | None = None, func=None) -> str | None:
    """Why ``knobs`` (a full point or part of one) is not a valid point of ``rule``'s space
    on ``target`` (and for the problem ``shapes``/``func`` when given); None if it is."""
    problem = _outside_space(rule, knobs, target)
    if problem:
        return problem
    return rule.check_knobs({**default_knobs(rule, target), **knobs}, target, shapes, func)


def full_point(rule, target, knobs: dict | None = None) -> dict:
    """Every declared knob of ``rule``: its default unless ``knobs`` gives it. Raises
    InvalidKnobs for a knob the rule lacks, a value outside a domain or a point the rule's
    constraints refuse, so a misspelt knob is an error instead of a silent default."""
    problem = check_knobs(rule, dict(knobs or {}), target)
    if problem:
        raise InvalidKnobs(problem)
    return {**default_knobs(rule, target), **(knobs or {})}


# Where a resolved knob's value came from (Resolution.sources).
FROM_DEFAULT, FROM_SHAPE, FROM_TUNED = "default", "shape default", "tuned"


@dataclass(frozen=True)
class Resolution:
    """The rule that schedules a function and the full point of knobs it is built with.

    ``sources`` says where each knob's value came from: "default", "shape default" (the
    rule's ``knobs_for_shapes``) or "tuned <file>:<line>"; ``record`` is the tuned record
    used (None: untuned); ``refused`` lists (record, reason) for better-ranked records that
    are not valid points here (stale knob names, values outside a domain, infeasible)."""

    rule: object
    knobs: dict
    sources: dict
    record: dict | None = None
    refused: tuple = ()
    by_alignment: bool = False   # the call's addresses could change the choice (ScheduleRule.alignment_matters)


def resolve(func, target, shapes: dict | None = None, tuned=(), alignments: dict | None = None) -> Resolution:
    """The one knob resolver: the matching rule and the knobs to build ``func`` with.

    ``tuned``: tuning records for this function's key, best first (dicts with ``knobs``
    and optionally ``_source``, "file:line"). The first whose knobs are a valid point of the
    rule's space for ``shapes`` wins; the others before it are reported in ``refused``.
    ``alignments``: see ``ScheduleRule.knobs_for_call``; the rule's ``call_knobs`` come
    from the call alone.
    """
    rule = match(func, target)
    knobs = default_knobs(rule, target)
    sources = dict.fromkeys(knobs, FROM_DEFAULT)
    if shapes is not None:
        for name, value in rule.knobs_for_call(target, shapes, func, alignments).items():
            knobs[name], sources[name] = value, FROM_SHAPE
    fixed = set(rule.call_knobs(target))
    by_alignment = shapes is not None and bool(fixed) and rule.alignment_matters(target, shapes, func)
    refused = []
    for record in tuned:
        given = record.get("knobs") if isinstance(record, dict) else None
        if isinstance(given, dict) and fixed & set(given):
            given = {n: v for n, v in given.items() if n not in fixed}
        problem = check_knobs(rule, {**knobs, **given} if isinstance(given, dict) else given, target, shapes, func)
        if problem:
            refused.append((record, problem))
            continue
        where = f"{FROM_TUNED} {record['_source']}" if record.get("_source") else FROM_TUNED
        knobs.update(given)
        sources.update(dict.fromkeys(given, where))
        return Resolution(rule, knobs, sources, record, tuple(refused), by_alignment)
    return Resolution(rule, knobs, sources, None, tuple(refused), by_alignment)


def schedule(func, target, knobs: dict | None = None, rule=None) -> s_tir.Schedule:
    """Schedule ``func`` for ``target`` (a TargetSpec) once: with ``rule`` (else the first
    matching one) at the point ``knobs`` (validated; missing knobs take their defaults)."""
    rule = rule if rule is not None else match(func, target)
    sch = rule.apply(func, target, full_point(rule, target, knobs))
    if sch is None:
        raise NoScheduleRule(f"{type(rule).__name__} does not match the function it was chosen for")
    return sch


def schedule_with_rule(func, target, knobs: dict | None = None):
    """(the matching rule, its Schedule of ``func`` at ``knobs``): ``schedule`` that also
    says which rule it used."""
    rule = match(func, target)
    return rule, schedule(func, target, knobs, rule=rule)
