"""aclnnGroupNormBackward: the aclnn face: parameters in the document's order, rules with their status
codes and example violations, how a call maps onto the kernel.
"""
from __future__ import annotations

import math

import numpy as np

from opgen.apispec import (ACLNN_ERR_INNER_NULLPTR, ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR, ATTR, INPUT,
                           MASK, OUTPUT, ApiSpec, ArgError, Param, Pythonic, Rule, Violation, cast_args, dtype_message, first,
                           null_message, other_float, set_args, shape_str)
from opgen.lazy import ml_dtypes
from opgen.ops.group_norm_backward.kernel import Problem, kernel_shapes

# ---- the aclnn API, as seed 002 documents it -------------------------------------------
# Interpretations (each quoted in the report; docs/validation-vs-cann.md lists every place
# where CANN's public sources, hicann/ops-nn, decided against or beyond the seed):
# * "Supports empty tensors": gamma may be null (ones, as CANN); gradOut, input, mean and
#   rstd are required (161001), an output only when its mask bit is true.
# * A null outputMask, an outputMask whose length is not 3, and a null output whose mask bit
#   is true are 161002, not the seed's 161001: CANN checks all three in CheckMaskNotNull under
#   CHECK_RET(..., ACLNN_ERR_PARAM_INVALID) (ops-nn aclnn_group_norm_backward.cpp CheckParams).
#   The mask's null and length come first: the mask must be readable to know which outputs
#   are required.
# * "gradBetaOut ... Dimension 2" contradicts "The shape is the same as that of gamma":
#   gradBetaOut is shaped like gamma. With gamma null, gamma's shape is taken as (C,)
#   (CheckShape's orginGammaShape = op::Shape({C})).
# * "Dimension 0-8" has no line in the error table: ranks over 8 are 161002, like every
#   other Parameters constraint in this table (CANN's CheckShape checks gradOut's rank with
#   OP_CHECK_MAX_DIM; the seed's 0-8 stands for the others). Output dtypes ("same data type
#   as gradOut / mean") belong to "do not meet the constraints specified in Parameters" (161002).
# * N, C, HxW < 0 cannot describe an element count: 161002 under the input-count line; the
#   gradOut count is checked with input's ("The number of elements must equal NCHxW").
# * Atlas A2/A3 (NpuArch DAV_2201) also refuse C / group > 8000 and C > 240000 (CheckAttr,
#   161002). The Ascend 950's kernel tiling refuses C / group > 8000 too, which its op_api
#   reports as 561103 (ACLNN_ERR_INNER_NULLPTR); Atlas training products have no such limit.
# * On the Ascend 950 an empty call (no elements in gradOut/input, C > 0) runs the kernel's
#   empty tiling on gradOut as given, which needs it shaped (N, C, ...) like input: 561103.

_INPUTS = ("gradOut", "input", "mean", "rstd", "gamma")
_OUTPUTS = ("gradInput", "gradGammaOut", "gradBetaOut")


def _present(call, names):
    return [n for n in names if call[n] is not None and (n not in _OUTPUTS or call.wanted(call.api.param(n)))]


def _check_mask_length(call) -> str | None:
    n = len(call["outputMask"])
    return None if n == 3 else f"outputMask has {n} elements; expected 3 (gradInput, gradGammaOut, gradBetaOut)"


def _masked_null(bit: int, name: str):
    def check(call) -> str | None:
        if call["outputMask"][bit] and call[name] is None:
            return f"outputMask[{bit}] is true but {name} is a null pointer"
        return None
    return check


def _check_grad_out_dtype(call) -> str | None:
    allowed = tuple(dict.fromkeys(c["dy"] for c in call.combos()))
    return dtype_message("gradOut", call["gradOut"].dtype, allowed, f" on {call.product}")


def _check_dtypes(call) -> str | None:
    dy = call["gradOut"].dtype
    pairs = {(c["dy"], c["mean"]) for c in call.combos()}
    means = tuple(sorted(m for d, m in pairs if d == dy))
    mean = call["mean"].dtype
    same = (("input", "gradOut"), ("rstd", "mean"), ("gamma", "mean"), ("gradInput", "gradOut"),
            ("gradGammaOut", "mean"), ("gradBetaOut", "mean"))
    return first([dtype_message("mean", mean, means, f" with gradOut {dy} on {call.product}")] + [
        dtype_message(a, call[a].dtype, (call[b].dtype,), f" (the same data type as {b})")
        for a, b in same if a in _present(call, (a,))])


def _check_ranks(call) -> str | None:
    return first(f"{n} has {call[n].ndim} dimensions; expected 0 to 8"
                 for n in _present(call, _INPUTS + _OUTPUTS) if call[n].ndim > 8)


def _gamma_shape(call) -> tuple:
    return call["gamma"].shape if call["gamma"] is not None else (call["C"],)


def _output_shape(bit: int, name: str, like: str):
    def check(call) -> str | None:
        if not call["outputMask"][bit]:
            return None
        want = call[like].shape if like == "input" else _gamma_shape(call)
        got = call[name].shape
        return None if got == want else f"{name} has shape {shape_str(got)}; expected {like}'s {shape_str(want)}"
    return check


def _check_input_count(call) -> str | None:
    n, c, hw = call["N"], call["C"], call["HxW"]
    if min(n, c, hw) < 0:
        return f"N, C and HxW must be >= 0, got N={n}, C={c}, HxW={hw}"
    return first(f"{t} has {call[t].size} elements; expected N * C * HxW = {n} * {c} * {hw} = {n * c * hw}"
                 for t in ("input", "gradOut") if call[t].size != n * c * hw)


def _count(name: str, what: str, value):
    def check(call) -> str | None:
        if call[name] is None or call[name].size == value(call):
            return None
        return f"{name} has {call[name].size} elements; expected {what} = {value(call)}"
    return check


def _bf16_everywhere(args) -> None:
    for name in _INPUTS + _OUTPUTS:
        args[name] = args[name].astype(ml_dtypes.bfloat16)


def _mixed(args) -> None:
    for name in ("gradOut", "input", "gradInput"):
        args[name] = args[name].astype(np.float16)


_CARRY, _MAX_C = 8000, 240000   # UPPER_CARRYING_LIMIT, MAX_C_SIZE (ops-nn aclnn_group_norm_backward.cpp)


def _check_dav2201_limits(call) -> str | None:
    c, g = call["C"], call["group"]
    if c // g > _CARRY:
        return f"C / group = {c} / {g} = {c // g}; {call.product} takes at most {_CARRY} channels per group"
    if c > _MAX_C:
        return f"C = {c}; {call.product} takes at most {_MAX_C} channels"
    return None


def _check_950_empty_layout(call) -> str | None:
    n, c, dy, x = call["N"], call["C"], call["gradOut"].shape, call["input"].shape
    if c <= 0 or call["gradOut"].size:
        return None  # C = 0: the op_api returns before any kernel; elements: the regular path reshapes
    if len(dy) < 2 or dy[:2] != (n, c):
        return (f"gradOut has shape {shape_str(dy)}; a call without elements runs the Ascend950 kernel's empty "
                f"tiling on gradOut as given, which needs at least 2 dimensions, (N, C, ...) = ({n}, {c}, ...)")
    if x != dy:
        return f"input has shape {shape_str(x)}; a call without elements on Ascend950 needs gradOut's {shape_str(dy)}"
    return None


def _check_950_carry(call) -> str | None:
    c, g = call["C"], call["group"]
    if c // g <= _CARRY or (call["gradOut"].size and not any(call["outputMask"])):
        return None  # nothing asked for: the op_api never looks at the refused kernel's outputs
    return (f"C / group = {c} / {g} = {c // g}; the Ascend950 kernel's tiling takes at most {_CARRY} channels "
            f"per group")


def _sized(n: int, c: int, hw: int, group: int):
    """A mutate function: a consistent call of other sizes (every tensor rebuilt, dtypes kept)."""
    shapes = {"gradOut": (n, c, hw), "input": (n, c, hw), "gradInput": (n, c, hw), "mean": (n, group),
              "rstd": (n, group), "gamma": (c,), "gradGammaOut": (c,), "gradBetaOut": (c,)}

    def mutate(args):
        args.update({k: np.ones(v, args[k].dtype) for k, v in shapes.items() if args[k] is not None})
        args.update(N=n, C=c, HxW=hw, group=group)
    return mutate


def _flat_empty(args) -> None:
    """N = 0 with gradOut, input, gradInput, mean and rstd all of shape (0,)."""
    for name in ("gradOut", "input", "gradInput", "mean", "rstd"):
        args[name] = np.zeros((0,), args[name].dtype)
    args["N"] = 0


def _flat_empty_2d(args) -> None:
    """N = 0 with gradOut, input and gradInput of shape (0, C * HxW)."""
    _flat_empty(args)
    for name in ("gradOut", "input", "gradInput"):
        args[name] = np.zeros((0, args["C"] * args["HxW"]), args[name].dtype)


_MASK_CHECK = ("CANN returns 161002, not the seed's 161001: CheckMaskNotNull runs under CHECK_RET(..., "
               "ACLNN_ERR_PARAM_INVALID) in ops-nn aclnn_group_norm_backward.cpp CheckParams")


def _rules_nulls() -> tuple:
    required = ("gradOut", "input", "mean", "rstd")
    nulls = tuple(Violation(f"{n} is None", set_args(**{n: lambda a: None})) for n in required)
    masked = tuple(
        Rule(ACLNN_ERR_PARAM_INVALID, f"outputMask[{bit}] is true and the passed {name} is a null pointer. "
             f"({_MASK_CHECK})", _masked_null(bit, name),
             (Violation(f"{name} is None", set_args(**{name: lambda a: None})),))
        for bit, name in enumerate(_OUTPUTS))
    return (
        Rule(ACLNN_ERR_PARAM_NULLPTR, "The passed gradOut, input, mean, and rstd are null pointers.",
             lambda call: null_message(call, required), nulls),
        Rule(ACLNN_ERR_PARAM_INVALID, f"outputMask is a null pointer ({_MASK_CHECK}: OP_CHECK_NULL(outputMask))",
             lambda call: None if call["outputMask"] is not None else "outputMask is a null pointer; expected 3 "
             "bools (gradInput, gradGammaOut, gradBetaOut)", (Violation("outputMask is None",
                                                                   set_args(outputMask=lambda a: None)),)),
        Rule(ACLNN_ERR_PARAM_INVALID, "The length of outputMask is not 3.", _check_mask_length, (
            Violation("outputMask of 2", set_args(outputMask=lambda a: [True, True])),
            Violation("outputMask of 4", set_args(outputMask=lambda a: [True] * 4)))),
    ) + masked


def _rules_dtypes() -> tuple:
    return (
        Rule(ACLNN_ERR_PARAM_INVALID, "The data type of gradOut is not within the supported range.",
             _check_grad_out_dtype, (Violation("float64 gradOut", cast_args(("gradOut",), np.float64)),
                                     Violation("bfloat16 everywhere on Atlas training", _bf16_everywhere,
                                               ("AtlasTraining",)))),
        Rule(ACLNN_ERR_PARAM_INVALID, "The data types of input, mean, gamma, rstd, and gradOut do not meet the "
             "constraints specified in Parameters.", _check_dtypes, (
                 Violation("input's dtype differs from gradOut's", other_float("input")),
                 Violation("rstd's dtype differs from mean's", other_float("rstd")),
                 Violation("gamma's dtype differs from mean's", other_float("gamma")),
                 Violation("gradInput's dtype differs from gradOut's", other_float("gradInput")),
                 Violation("gradGammaOut's dtype differs from mean's", other_float("gradGammaOut")),
                 Violation("gradBetaOut's dtype differs from mean's", other_float("gradBetaOut")),
                 Violation("float16 gradOut with float32 mean off the 950", _mixed,
                           ("AtlasA2", "AtlasA3", "AtlasTraining")))),
        Rule(ACLNN_ERR_PARAM_INVALID, "Dimension (shape): 0-8", _check_ranks, (
            Violation("9-d input and gradOut", set_args(**{n: (lambda n: lambda a: a[n].reshape((1,) * 8 + (-1,)))(n)
                                                     for n in ("input", "gradOut")})),)),
    )


def _rules_shapes() -> tuple:
    what = ("the shape of gradInput differs from the shape of input", "the shape of gradGammaOut differs from "
            "the shape of gamma", "the shape of gradBetaOut differs from the shape of gamma")
    shapes = tuple(
        Rule(ACLNN_ERR_PARAM_INVALID, f"When outputMask[{bit}] is true, {what[bit]}.",
             _output_shape(bit, name, "input" if bit == 0 else "gamma"),
             (Violation(f"{name} flattened with one more element", set_args(**{name: (lambda n: lambda a: np.zeros(
                 a[n].size + 1, a[n].dtype))(name)})),))
        for bit, name in enumerate(_OUTPUTS))
    group = lambda v: set_args(group=lambda a: v(a))  # noqa: E731
    return shapes + (
        Rule(ACLNN_ERR_PARAM_INVALID, "group is not greater than 0.", lambda call: None if call["group"] > 0 else
             f"group is {call['group']}; expected a value greater than 0", (Violation("group 0", group(lambda a: 0)),
                                                                          Violation("group -1", group(lambda a: -1)))),
        Rule(ACLNN_ERR_PARAM_INVALID, "C is not divisible by group.", lambda call: None if call["C"] % call["group"] == 0
             else f"C = {call['C']} is not divisible by group = {call['group']}",
             (Violation("group C + 1", group(lambda a: a["C"] + 1)),)),
        Rule(ACLNN_ERR_PARAM_INVALID, "ops-nn aclnn_group_norm_backward.cpp CheckAttr on NpuArch DAV_2201 (Atlas "
             "A2/A3): C / group <= 8000 (UPPER_CARRYING_LIMIT) and C <= 240000 (MAX_C_SIZE); CANN's current "
             "table: \"C is not divisible by group, or C/group > 8000\", \"... or C is greater than 240000\"",
             _check_dav2201_limits, (Violation("C / group = 8001", _sized(1, _CARRY + 1, 1, 1)),
                                     Violation("C = 240032 in groups of 7501", _sized(1, 240032, 1, 32))),
             products=("AtlasA3", "AtlasA2")),
        Rule(ACLNN_ERR_PARAM_INVALID, "The number of elements in input is not equal to N * C * HxW.",
             _check_input_count, (Violation("HxW one more", set_args(HxW=lambda a: a["HxW"] + 1)),
                                  Violation("N negative", set_args(N=lambda a: -a["N"], C=lambda a: -a["C"])))),
        Rule(ACLNN_ERR_PARAM_INVALID, "The number of elements in mean is not equal to N * group.",
             _count("mean", "N * group", lambda c: c["N"] * c["group"]),
             (Violation("mean one element more", set_args(mean=lambda a: np.zeros(a["mean"].size + 1, a["mean"].dtype))),)),
        Rule(ACLNN_ERR_PARAM_INVALID, "The number of elements in rstd is not equal to N * group.",
             _count("rstd", "N * group", lambda c: c["N"] * c["group"]),
             (Violation("rstd one element more", set_args(rstd=lambda a: np.ones(a["rstd"].size + 1, a["rstd"].dtype))),)),
        Rule(ACLNN_ERR_PARAM_INVALID, "gamma is not a null pointer and the number of elements in gamma is not C.",
             _count("gamma", "C", lambda c: c["C"]), (Violation("gamma and both gradients one longer", set_args(**{
                 n: (lambda n: lambda a: np.ones(a[n].size + 1, a[n].dtype))(n)
                 for n in ("gamma", "gradGammaOut", "gradBetaOut")})),)),
    ) + _rules_950()


def _rules_950() -> tuple:
    """The Ascend 950's kernel tilings, whose refusal its op_api returns as 561103."""
    return (
        Rule(ACLNN_ERR_INNER_NULLPTR, "ops-nn group_norm_grad_empty_tiling_arch35.cpp (InputCheck, "
             "GetShapeAttrsInfo, CheckInputAndOutput, CheckShapeAndType) on gradOut as given, reached from "
             "aclnn_group_norm_backward.cpp ComputeGroupNormBackwardEmptyInput; CHECK_RET(dgamma != nullptr, "
             "ACLNN_ERR_INNER_NULLPTR)", _check_950_empty_layout,
             (Violation("empty gradOut, input and gradInput flattened", _flat_empty),
              Violation("empty gradOut (0, C * HxW)", _flat_empty_2d)), products=("Ascend950",)),
        Rule(ACLNN_ERR_INNER_NULLPTR, "ops-nn group_norm_grad_tiling_arch35.cpp ParamsCheck: C / G > "
             "UPPER_CARRYING_LIMIT (8000) fails the tiling; aclnn_group_norm_backward.cpp: CHECK_RET(dx != nullptr, "
             "ACLNN_ERR_INNER_NULLPTR) (likewise dgamma, dbeta) for each output asked for", _check_950_carry,
             (Violation("C / group = 8001", _sized(1, _CARRY + 1, 1, 1)),), products=("Ascend950",)),
    )


def _nc_hw(tensors: dict) -> tuple:
    """N, C and HxW from input's (N, C, ...) shape (all 0 without an input: 161001 follows)."""
    x = tensors["input"]
    if x is None:
        return 0, 0, 0
    if x.ndim < 2:
        raise ArgError(ACLNN_ERR_PARAM_INVALID, f"input has shape {shape_str(x.shape)}; expected (N, C, ...)")
    return x.shape[0], x.shape[1], math.prod(x.shape[2:])


def _per_channel(tensors: dict, attrs: dict) -> tuple:
    """gradGammaOut/gradBetaOut: gamma's shape (C without gamma), mean's dtype."""
    gamma, mean = tensors["gamma"], tensors["mean"]
    return (gamma.shape if gamma is not None else (attrs["C"],)), (mean.dtype if mean is not None else "float32")


_DT = "FLOAT32, FLOAT16, BFLOAT16"
API = ApiSpec(
    params=(
        Param("gradOut", INPUT, "The gradient (`gradOut`); N*C*HxW elements, dtype of input (Ascend 950, no "
              "elements: shaped (N, C, ...) like input).", "dy", _DT, "0-8"),
        Param("input", INPUT, "The forward input (`x`); N*C*HxW elements.", "x", _DT, "0-8"),
        Param("mean", INPUT, "The forward's per-group mean; N*group elements.", "mean", _DT, "0-8"),
        Param("rstd", INPUT, "The forward's per-group 1/std; N*group elements, dtype of mean.", "rstd", _DT, "0-8"),
        Param("gamma", INPUT, "Per-channel scale; C elements, dtype of mean; may be null (ones).", "gamma", _DT,
              "0-8", optional=True),
        Param("N", ATTR, "Size of the N dimension."),
        Param("C", ATTR, "Size of the C dimension; at most 240000 on Atlas A2/A3."),
        Param("HxW", ATTR, "Size of the dimensions after N and C, multiplied."),
        Param("group", ATTR, "Number of groups C is divided into; > 0 and dividing C; C / group at most 8000 "
              "on Atlas A2/A3 and Ascend 950."),
        Param("outputMask", MASK, "Three bools: whether to output gradInput, gradGammaOut, gradBetaOut; "
              "required (null: 161002)."),
        Param("gradInput", OUTPUT, "The gradient of input; input's shape, gradOut's dtype; may be null when "
              "outputMask[0] is false.", "dx", _DT, "0-8", mask_bit=0),
        Param("gradGammaOut", OUTPUT, "The gradient of gamma; gamma's shape, mean's dtype; may be null when "
              "outputMask[1] is false.", "dgamma", _DT, "0-8", mask_bit=1),
        Param("gradBetaOut", OUTPUT, "The gradient of beta; gamma's shape, mean's dtype; may be null when "
              "outputMask[2] is false.", "dbeta", _DT, "0-8", mask_bit=2),
    ),
    rules=_rules_nulls() + _rules_dtypes() + _rules_shapes(),
    problem=lambda call: Problem(call["N"], call["C"], call["HxW"], call["group"]),
    kernel_shapes=kernel_shapes,
    description="Backward of GroupNorm: gradInput, gradGammaOut and gradBetaOut, each behind outputMask.",
    fill={"gamma": 1.0},
    pythonic=Pythonic(
        derived={"N": lambda t: _nc_hw(t)[0], "C": lambda t: _nc_hw(t)[1], "HxW": lambda t: _nc_hw(t)[2]},
        allocate={"gradInput": lambda t, attrs: None if t["gradOut"] is None else (t["gradOut"].shape,
                                                                                    t["gradOut"].dtype),
                  "gradGammaOut": lambda t, attrs: _per_channel(t, attrs),
                  "gradBetaOut": lambda t, attrs: _per_channel(t, attrs)},
        defaults={"output_mask": (True, True, True)}),
)
