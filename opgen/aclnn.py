"""The aclnn two-phase API, generated from each registered op's spec.

For every op whose OpSpec has an ``api`` (opgen.apispec.ApiSpec) this module defines
``<aclnn_name>GetWorkspaceSize(<params in the seed's order>)`` and ``<aclnn_name>(workspace,
workspaceSize, executor, stream)``, with real signatures and docstrings built from the
spec's parameter table and error lines. C's out-parameters come back as a tuple:

    status, workspace_size, executor = aclnnRmsNormGradGetWorkspaceSize(dy, x, rstd, gamma, dxOut, dgammaOut)
    status = aclnnRmsNormGrad(workspace, workspace_size, executor, stream)

Bad input never raises: it returns a status and ``opgen.acl.aclGetRecentErrMsg()`` says
which parameter, what was expected and what was given. (A wrong number of arguments is a
TypeError, as it would be a compile error in C.) Second-phase statuses, decided here since
the seeds document none:
  * executor None -> ACLNN_ERR_PARAM_NULLPTR; not an executor, another op's, or already
    run (executors are single-use) -> ACLNN_ERR_PARAM_INVALID;
  * workspace None, shorter than the executor needs, or workspaceSize smaller than that
    or past any address space (> 2**63 - 1) -> ACLNN_ERR_PARAM_INVALID; such argument
    errors leave the executor unused, so the caller may retry with a proper workspace;
  * a tensor changed after phase one (resized, re-pointed, another dtype, its memory
    freed) so that the plan cannot serve it -> ACLNN_ERR_PARAM_INVALID, before the kernel
    runs or any output is written;
  * the kernel failing -> ACLNN_ERR_RUNTIME_ERROR (the executor is then spent).
"""
from __future__ import annotations

import dataclasses
import functools
import keyword
import math
import operator
from dataclasses import dataclass

import numpy as np

from opgen import acl, config, selection
from opgen.apispec import (ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR, ACLNN_ERR_RUNTIME_ERROR,
                           ACLNN_ERR_INNER_TILING_ERROR, ACLNN_SUCCESS, ATTR, INPUT, INT64_MAX, INT64_MIN, MASK,
                           OUTPUT, STATUS_NAMES, ArgError, Call)
from opgen.binding import KINDS, NotReadable, aliased_outputs, kind_of, no_overlap, overlapping_outputs, value_key
from opgen.executor import Executor, kernel_alignments, make_plan
from opgen.memory import is_host
from opgen.ops import all_ops
from opgen.targets import get_target
from opgen.tensorarg import TensorArg, describe
from opgen.tune import lookup

__all__ = ["ACLNN_SUCCESS", "ACLNN_ERR_PARAM_NULLPTR", "ACLNN_ERR_PARAM_INVALID", "ACLNN_ERR_RUNTIME_ERROR",
           "ACLNN_ERR_INNER_TILING_ERROR", "STATUS_NAMES"]


def _integer(name: str, value, what: str = "an integer") -> int:
    """An int64_t argument: an integer (never a bool) that an int64 holds. A Python int
    past that range is a value no C caller could pass, so it is the caller's mistake
    (161002 naming it), not a rule of the op that happens to catch it later."""
    try:
        if isinstance(value, (bool, np.bool_)):
            raise TypeError("a bool")
        number = operator.index(value)
    except TypeError:
        raise ArgError(ACLNN_ERR_PARAM_INVALID, f"{name} must be {what}, got {value!r}") from None
    if not INT64_MIN <= number <= INT64_MAX:
        raise ArgError(ACLNN_ERR_PARAM_INVALID, f"{name} is {_short(number)}, outside the int64 range the document "
                                                f"types it as ([-2**63, 2**63 - 1])")
    return number


def _double(name: str, value) -> float:
    """A double argument: any int or float that a double holds (inf and nan are doubles:
    the op's rules judge them). A Python int or a numpy long double past a double's range
    is no double at all: 161002 naming the parameter, never float()'s OverflowError."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ArgError(ACLNN_ERR_PARAM_INVALID, f"{name} must be a number (double), got {value!r}")
    try:
        with np.errstate(over="raise"):
            number = float(value)
        if math.isinf(number) and not np.isinf(value):
            raise OverflowError
    except (OverflowError, FloatingPointError):
        raise ArgError(ACLNN_ERR_PARAM_INVALID, f"{name} is {_short(value)}, beyond the range of the double the "
                                                f"document types it as (about 1.8e308)") from None
    return number


def _short(number) -> str:
    """A number for a message: its repr, or its magnitude where the repr is a screenful."""
    text = repr(number)
    if len(text) <= 40:
        return text
    digits = len(str(abs(int(number))))
    return f"a {'negative ' if number < 0 else ''}{digits}-digit integer"


def _read_attr(param, value):
    """An attribute by its C type (Param.value_type): int64 -> int, double -> float (ints
    too, never a bool), bool -> bool, aclIntArray -> tuple of ints (None for a null
    array: the op's rules decide), char* -> str or None."""
    kind, name = param.value_type, param.name
    if kind == "int":
        return _integer(name, value)
    if kind == "float":
        return _double(name, value)
    if kind == "bool":
        if not isinstance(value, (bool, np.bool_)):
            raise ArgError(ACLNN_ERR_PARAM_INVALID, f"{name} must be a bool, got {value!r}")
        return bool(value)
    if kind == "ints":
        if value is None:
            return None
        if not isinstance(value, (acl.aclIntArray, list, tuple)):
            raise ArgError(ACLNN_ERR_PARAM_INVALID, f"{name} must be an aclIntArray or a list of ints, "
                                                    f"got {type(value).__name__}")
        return tuple(_integer(name, v, "a sequence of integers") for v in value)
    if value is not None and not isinstance(value, str):
        raise ArgError(ACLNN_ERR_PARAM_INVALID, f"{name} must be a str or None, got {type(value).__name__}")
    return value


def _read_value(param, value):
    """Turn one argument into what the rules read: TensorArg, an attribute's value (see
    _read_attr), tuple of bools, None."""
    if param.role in (INPUT, OUTPUT):
        return describe(param.name, value)
    if param.role == ATTR:
        return _read_attr(param, value)
    if value is None:
        return None
    try:
        items = tuple(value)
    except TypeError:
        raise ArgError(ACLNN_ERR_PARAM_INVALID, f"{param.name} must be an aclBoolArray or a sequence of bools, "
                                                f"got {type(value).__name__}")
    if not all(isinstance(v, (bool, np.bool_)) for v in items):
        raise ArgError(ACLNN_ERR_PARAM_INVALID, f"{param.name} must hold bools, got {items!r}")
    return tuple(bool(v) for v in items)


def _check_call(call: Call):
    """(status, reason) of the first broken rule, or None; product support first."""
    op = call.op
    if call.product not in op.products:
        supported = ", ".join(op.products)
        return ACLNN_ERR_PARAM_INVALID, (f"{op.aclnn_name} is not supported on {call.product} (supported: "
                                         f"{supported})")
    for rule in call.api.rules:
        if rule.products is None or call.product in rule.products:
            reason = rule.check(call)
            if reason:
                return rule.code, reason
    return _check_generic(call)


def _check_generic(call: Call):
    """Constraints every op's Parameters table states alike: format ND, writable outputs
    (validated_only and unread inputs too; an output not asked for is never touched), and
    outputs whose elements each have memory of their own (an input may repeat elements:
    it is only read)."""
    for p in call.api.tensors():
        arg = call[p.name]
        if arg is None or (p.role == OUTPUT and not call.wanted(p)):
            continue
        if arg.format not in acl.PLAIN_FORMATS:
            return ACLNN_ERR_PARAM_INVALID, f"{p.name} has format {arg.format}; expected ND (a plain layout)"
        if p.role == OUTPUT and not arg.writeable:
            return ACLNN_ERR_PARAM_INVALID, f"{p.name} is read-only but is an output"
        if p.role == OUTPUT and arg.overlaps_itself:
            return ACLNN_ERR_PARAM_INVALID, (f"{p.name} is an output whose elements overlap in memory (shape "
                                             f"{tuple(arg.shape)}, byte strides {tuple(arg.byte_strides)}: a zero "
                                             f"stride, as from expand() or broadcast_to, or folded strides); each "
                                             f"element of an output needs memory of its own")
    return None


def _combo(call: Call):
    """The product's dtype combo that the dtypes of the tensors the kernel uses select: the
    inputs it reads (not null, not validated_only, not ApiSpec.unread) and the outputs asked
    for. The others' dtypes are the rules' business; the plan gives them the combo's. An
    input of OpSpec.optional_terms the call does not read selects the variant without it
    (DtypeCombo.absent): no fill of it is made, its term is not computed."""
    given = {p.kernel: call[p.name].dtype for p in call.api.tensors()
             if (call.reads(p) if p.role == INPUT else call[p.name] is not None and call.wanted(p))}
    absent = {p.kernel for p in call.api.tensors(INPUT) if p.kernel in call.op.optional_terms and not call.reads(p)}
    for combo in call.combos():
        if set(combo.absent) == absent and all(combo[k] == v for k, v in given.items()):
            return combo
    without = f" without {sorted(absent)}" if absent else ""
    raise ArgError(ACLNN_ERR_PARAM_INVALID, f"no {call.product} dtype combination{without} matches {given}")


def _kernel(op, combo, product: str, shapes: dict, call=None, aliased=frozenset()):
    """(kernel, device, selection) for this call, chosen by opgen.selection: the schedule
    rule's defaults and per-call defaults (problem size, and the alignment of the addresses
    the kernel will be handed: opgen.executor.kernel_alignments), overridden by the best
    valid tuned record of the call's shape bucket where the tuning database has one."""
    try:
        target = get_target(config.get_target()).for_product(product)
    except KeyError as exc:
        raise ArgError(ACLNN_ERR_RUNTIME_ERROR, f"the kernel target is unusable ({exc.args[0]})")
    if not target.can_run():
        raise ArgError(ACLNN_ERR_RUNTIME_ERROR,
                       f"target {target.name} cannot run kernels on this machine ({target.run_place()})")
    try:
        device = target.device()
        alignments = None if call is None else kernel_alignments(call, shapes, is_host(device), aliased)
        chosen = selection.select(op, combo, target, shapes, alignments)
        return chosen.kernel, device, chosen
    except Exception as exc:  # a schedule or compiler failure is ours, not the caller's
        raise ArgError(ACLNN_ERR_RUNTIME_ERROR, f"building the {op.name} {combo.tag} kernel for "
                                                f"{target.name} failed ({type(exc).__name__}: {exc})")


def _fail(func: str, status: int, reason: str) -> int:
    acl.set_error(f"{func} failed with {STATUS_NAMES[status]} ({status}): {reason}.")
    return status


# ---- the plan cache ----------------------------------------------------------------------
# Phase one decides its outcome from the call's metadata alone: the product, the target,
# and per parameter the dtype, shape, strides, format, writability, device and element
# alignment of a tensor (None for a null pointer), the type and value of an attribute or
# mask, plus which outputs overlap an input. opgen.binding reads exactly that from the raw
# arguments' attributes (no conversion: the kernel converts numpy arrays and torch tensors
# itself when it runs). A successful decision (the plan: combo, kernel, placements) is
# kept under that key, so a repeated call skips the rules, the kernel lookup and the
# planning. Any difference in the key is a different entry; failures are never cached
# (each bad call is checked, and reported, in full); arguments opgen.binding cannot read
# quickly take the full path, uncached.

_PLANS: dict = {}
_MAX_PLANS = 4096


@dataclass(frozen=True)
class _Positions:
    """Where an op's tensors, inputs, outputs and other values sit in GetWorkspaceSize's
    arguments (computed once per op: a warm call reads its arguments by these)."""

    tensors: tuple
    values: tuple
    inputs: tuple
    outputs: tuple
    output_names: tuple

    @classmethod
    def of(cls, api) -> "_Positions":
        roles = [p.role for p in api.params]
        def where(*wanted):
            return tuple(i for i, r in enumerate(roles) if r in wanted)
        outputs = where(OUTPUT)
        return cls(where(INPUT, OUTPUT), where(ATTR, MASK), where(INPUT), outputs,
                   tuple(api.params[i].name for i in outputs))


def _read_arguments(positions: _Positions, arguments: tuple):
    """(keys, kinds, indexes of the aliased outputs) of a call, read by opgen.binding;
    ``kinds`` is indexed like ``arguments``. Raises NotReadable when an argument needs
    the full path."""
    keys = [value_key(arguments[i]) for i in positions.values]
    kinds = [None] * len(arguments)
    anchors = []
    known_kinds = KINDS
    for i in positions.tensors:
        value = arguments[i]
        if value is None:
            keys.append(None)
            continue
        kind = kinds[i] = known_kinds.get(type(value)) or kind_of(value)
        key, anchor = kind.read(value)
        keys.append(key)
        anchors.append(anchor)
    if no_overlap(anchors):
        return tuple(keys), tuple(kinds), ()
    pairs = [[None if kinds[i] is None else (kinds[i], arguments[i]) for i in group]
             for group in (positions.inputs, positions.outputs)]
    return tuple(keys), tuple(kinds), aliased_outputs(*pairs)


def _aliased(op, values: dict) -> frozenset:
    """The outputs whose memory may overlap an input's (the full path's reading)."""
    def bounds(role):
        return [None if values[name] is None else values[name].bounds for name in op.api.names(role)]
    outputs = op.api.names(OUTPUT)
    return frozenset(outputs[i] for i in overlapping_outputs(bounds(INPUT), bounds(OUTPUT)))


_ON_CLEAR: list = []   # what else holds plans (opgen.api's bound calls), cleared with them


def clear_plan_cache() -> None:
    """Forget every cached plan (tests; after kernels were rebuilt or retuned), and every
    plan held elsewhere through ``on_plan_cache_clear``."""
    _PLANS.clear()
    for forget in _ON_CLEAR:
        forget()


def on_plan_cache_clear(forget) -> None:
    """Call ``forget()`` whenever the plan cache is cleared: a holder of plans (a bound
    call) must never outlive the decision that made them."""
    _ON_CLEAR.append(forget)


lookup.on_reload(clear_plan_cache)   # a new tuning database may choose other kernels


def _new_plan(op, product: str, values: dict, aliased: frozenset):
    """Validate, choose the kernel and plan: the slow path of phase one. None + status on failure."""
    call = Call(op, product, values)
    problem = _check_call(call)
    if problem is not None:
        return None, problem
    combo = _combo(call)
    problem = op.api.problem(call)
    kernel, device, chosen = _kernel(op, combo, product, op.kernel_shapes(problem, combo), call, aliased)
    plan = make_plan(call, kernel, problem, combo, device, aliased)
    return (dataclasses.replace(plan, by_alignment=True) if chosen.by_alignment else plan), None


def _describe_all(op, arguments: tuple) -> dict:
    """The full reading: parameter name -> TensorArg, int, tuple of bools or None."""
    return {p.name: _read_value(p, v) for p, v in zip(op.api.params, arguments)}


def _plan_call(op, positions: _Positions, arguments: tuple):
    """(plan, argument kinds, None) for a valid call, (None, None, (status, reason)) otherwise."""
    try:
        product, target = config.context()
    except ValueError as exc:                # an unknown OPGEN_PRODUCT
        raise ArgError(ACLNN_ERR_PARAM_INVALID, str(exc))
    try:
        keys, kinds, aliased = _read_arguments(positions, arguments)
    except NotReadable:                      # the full path, uncached
        values = _describe_all(op, arguments)
        plan, problem = _new_plan(op, product, values, _aliased(op, values))
        kinds = tuple(kind_of(a) if isinstance(v, TensorArg) else None for a, v in zip(arguments, values.values()))
        return plan, kinds, problem
    key = (op.name, product, target, keys, aliased)
    plan = _PLANS.get(key)
    if plan is _BY_ALIGNMENT:   # this call's plans differ by where its tensors lie
        key = (key, _alignment_key(positions, arguments, kinds))
        plan = _PLANS.get(key)
    if plan is None:
        names = frozenset(positions.output_names[i] for i in aliased)
        plan, problem = _new_plan(op, product, _describe_all(op, arguments), names)
        if problem is not None:
            return None, None, problem
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        if plan.by_alignment and _PLANS.get(key) is None and not isinstance(key[0], tuple):
            _PLANS[key] = _BY_ALIGNMENT
            key = (key, _alignment_key(positions, arguments, kinds))
        _PLANS[key] = plan
    return plan, kinds, None


# A plan-cache entry saying "look again, with the tensors' alignment in the key": put under
# a call's key when its kernel was chosen by alignment (opgen.selection.Selection.by_alignment:
# the GPU's vector variant, the CPU row rules' streamed one), so warm calls whose choice cannot
# depend on it (the other CPU rules') never read an address for it.
_BY_ALIGNMENT = object()
_KEY_ALIGNMENT = 64


def _alignment_key(positions: _Positions, arguments: tuple, kinds: tuple) -> tuple:
    """Per tensor argument, its lowest address modulo 64 (None for a null pointer)."""
    found = []
    for i in positions.tensors:
        value = arguments[i]
        found.append(None if value is None or kinds[i] is None else kinds[i].span(value)[0] % _KEY_ALIGNMENT)
    return tuple(found)


def get_workspace_size(op, positions: _Positions, func: str, arguments: tuple):
    """Phase one: read, validate, choose the kernel, plan. Returns (status, size, executor)."""
    try:
        plan, kinds, problem = _plan_call(op, positions, arguments)
    except ArgError as err:
        return _fail(func, err.status, err.message), 0, None
    except Exception as exc:  # a bug of ours: still a status, never a crash for the caller
        return _fail(func, ACLNN_ERR_RUNTIME_ERROR, f"internal error {type(exc).__name__}: {exc}"), 0, None
    if problem is not None:
        return _fail(func, *problem), 0, None
    return ACLNN_SUCCESS, plan.workspace_size, Executor(op.name, plan, kinds, arguments)


def _check_run_args(op, workspace, workspace_size, executor, stream):
    if executor is None:
        raise ArgError(ACLNN_ERR_PARAM_NULLPTR, "executor is a null pointer")
    if not isinstance(executor, Executor) or executor.op_name != op.name:
        owner = getattr(executor, "op_name", type(executor).__name__)
        raise ArgError(ACLNN_ERR_PARAM_INVALID, f"executor belongs to {owner}, not to {op.aclnn_name}")
    need = executor.workspace_size
    try:
        workspace_size = operator.index(workspace_size)
    except TypeError:
        pass
    if not isinstance(workspace_size, int) or workspace_size < need:
        raise ArgError(ACLNN_ERR_PARAM_INVALID, f"workspaceSize is {workspace_size!r}; the executor needs {need} bytes")
    if workspace_size > INT64_MAX:   # uint64 in the document, but no buffer of that size can exist
        raise ArgError(ACLNN_ERR_PARAM_INVALID, f"workspaceSize is {_short(workspace_size)}, past any address space "
                                                f"(at most 2**63 - 1 bytes); the executor needs {need} bytes")
    if need and workspace is None:
        raise ArgError(ACLNN_ERR_PARAM_INVALID, f"workspace is a null pointer; the executor needs {need} bytes")
    if stream is not None and (not isinstance(stream, acl.aclrtStream) or stream.destroyed):
        raise ArgError(ACLNN_ERR_PARAM_INVALID, f"stream must be None or a live aclrtStream, got {stream!r}")


def run(op, func: str, workspace, workspace_size, executor, stream) -> int:
    """Phase two: check the workspace and executor, run the plan once."""
    try:
        _check_run_args(op, workspace, workspace_size, executor, stream)
        memory = executor.open_workspace(workspace)   # a short buffer keeps the executor unused
        if not executor.claim():
            raise ArgError(ACLNN_ERR_PARAM_INVALID, "executor was already run; executors are single-use")
        executor.run(memory)
    except ArgError as err:
        return _fail(func, err.status, err.message)
    except Exception as exc:
        return _fail(func, ACLNN_ERR_RUNTIME_ERROR, f"internal error {type(exc).__name__}: {exc}")
    return ACLNN_SUCCESS


# ---- bound calls ----------------------------------------------------------------------
# A caller that can tell, from its own cheaper key, that a call's phase-one key is one it
# has already seen succeed may keep that call's plan and skip both phases' reading and
# checks (opgen.api does, for calls whose outputs it allocates itself: fresh outputs have
# keys fixed by their shape and dtype and overlap nothing). The kernel gets its arguments
# through a binder that takes the pointers of tensors whose keys the caller just read
# unchecked (opgen.binding's pointer_method) and checks any other it hands over by address.


def bindable(executor: Executor):
    """The (plan, kinds) of a successful phase one that a caller may keep and run again by
    ``run_bound``, or None: only plans that hand memory straight to the kernel (no
    workspace, no staging) and whose choice did not depend on the tensors' addresses."""
    plan = executor.plan
    if plan.binds_directly and not plan.workspace_size and not plan.by_alignment:
        return plan, executor.kinds
    return None


def run_bound(op, bound: tuple, arguments: tuple) -> int:
    """Phase two of a call whose phase one the caller knows gave ``bound`` (``bindable``):
    the kernel runs on ``arguments``; failures get phase two's statuses and messages."""
    plan, kinds = bound
    try:
        Executor(op.name, plan, kinds, arguments).run(None, keys_just_read=True)
    except ArgError as err:
        return _fail(op.aclnn_name, err.status, err.message)
    except Exception as exc:
        return _fail(op.aclnn_name, ACLNN_ERR_RUNTIME_ERROR, f"internal error {type(exc).__name__}: {exc}")
    return ACLNN_SUCCESS


# ---- generation ----------------------------------------------------------------------

_ROLE_DOC = {INPUT: "Input", OUTPUT: "Output", ATTR: "Input", MASK: "Input"}


def _param_table(api) -> str:
    rows = ["| Parameter | Input/Output | Description | Data Type | Dimension |", "|---|---|---|---|---|"]
    for p in api.params:
        rows.append(f"| {p.name} | {_ROLE_DOC[p.role]} | {p.doc} | {p.dtypes} | {p.ranks} |")
    return "\n".join(rows)


def _error_table(op) -> str:
    rows = ["| Status | Code | When (the seed's line) |", "|---|---|---|"]
    rows.append(f"| ACLNN_ERR_PARAM_INVALID | 161002 | The product is not one of: {', '.join(op.products)}. |")
    for rule in op.api.rules:
        where = f" ({', '.join(rule.products)} only)" if rule.products else ""
        rows.append(f"| {STATUS_NAMES[rule.code]} | {rule.code} | {rule.seed}{where} |")
    return "\n".join(rows)


def _docs(op) -> tuple[str, str]:
    head = f"{op.aclnn_name}GetWorkspaceSize: {op.api.description}"
    first = (f"{head}\n\nValidates against the current product's rules (opgen.set_product), chooses and builds "
             f"the kernel, plans the workspace.\nReturns (status, workspaceSize, executor).\n\n"
             f"{_param_table(op.api)}\n\nErrors:\n\n{_error_table(op)}\n")
    second = (f"{op.aclnn_name}: run an executor from {op.aclnn_name}GetWorkspaceSize once.\n\n"
              f"workspace: None when workspaceSize is 0, else aclrtMalloc's buffer or any writable buffer of at "
              f"least workspaceSize bytes. stream: None or an aclrtStream. Returns the status.\n")
    return first, second


def _function(name: str, params: tuple, body, doc: str, spread: bool = False):
    """A plain Python function ``name(*params)`` calling ``body(tuple of the arguments)``
    (``body(*arguments)`` when ``spread``).

    Written out with exec (as dataclasses does) so the signature is the real one, for
    introspection and for the caller's TypeError on a wrong argument list, at no per-call
    cost; ``inspect.Signature.bind`` cost more per call than a whole plan-cache hit.
    """
    bad = [p for p in params if not p.isidentifier() or keyword.iskeyword(p)]
    if bad:
        raise ValueError(f"{name}: parameter names {bad} cannot be Python parameters")
    passed = ", ".join(params) if spread else f"({', '.join(params)},)"
    source = f"def {name}({', '.join(params)}):\n    return _body({passed})\n"
    namespace = {"_body": body}
    exec(source, namespace)  # noqa: S102 (names checked above)
    fn = namespace[name]
    fn.__doc__ = doc
    fn.__module__ = __name__
    return fn


def _phase_one_body(op):
    """GetWorkspaceSize's body: phase one on a tuple of its arguments."""
    return functools.partial(get_workspace_size, op, _Positions.of(op.api), f"{op.aclnn_name}GetWorkspaceSize")


def _phase_two_body(op):
    """The second phase's body: run(workspace, workspaceSize, executor, stream)."""
    return functools.partial(run, op, op.aclnn_name)


def _make_phase_one(op):
    func = f"{op.aclnn_name}GetWorkspaceSize"
    params = tuple(p.name for p in op.api.params)
    return func, _function(func, params, _phase_one_body(op), _docs(op)[0])


def _make_phase_two(op):
    func = op.aclnn_name
    params = ("workspace", "workspaceSize", "executor", "stream")
    return func, _function(func, params, _phase_two_body(op), _docs(op)[1], spread=True)


def phases(op) -> tuple:
    """(phase one on a tuple of GetWorkspaceSize's arguments, phase two on its four): what
    the generated functions call, for opgen's own Pythonic layer, which has the arguments
    in order already (keywords and a getattr by name cost it 2 µs a call)."""
    return _phase_one_body(op), _phase_two_body(op)


def _generate() -> None:
    for op in all_ops():
        if op.api is None:
            continue
        for name, fn in (_make_phase_one(op), _make_phase_two(op)):
            globals()[name] = fn
            __all__.append(name)


_generate()
