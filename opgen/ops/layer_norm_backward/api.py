"""aclnnLayerNormBackward: the aclnn face: parameters in the document's order, rules with their status
codes and example violations, how a call maps onto the kernel.

Specification: docs/specs/aclnnLayerNormBackward.md (the digest of CANN's document and of
hicann/ops-nn's op_api, "op_api" below: norm/layer_norm_grad_v3/op_host/op_api/
aclnn_layer_norm_backward.cpp @ e5c3fa9). Rules run in the op_api's order (digest L14):
161001 for required nulls, 161002 for outputMask's length, 161001 for a null output its
mask asks for, then 161002 for dtypes and for shapes (CheckShape's order). Decisions on
the digest's open points are in docs/validation-vs-cann.md, section aclnnLayerNormBackward:
* L4: input's trailing dims must equal normalizedShape in full (the document's l.315), on
  every product, in phase 1; the op_api's loop compares only some indices and leaves the
  rest to the kernel tiling (phase 2, 561103 on A2/A3/950).
* L7: gradWeightOut/gradBiasOut are shaped like normalizedShape (any 1-element shape when
  N == 1); a same-count other shape passes CANN's phase 1 but is never written.
* L8: the dtype relations the op_api does not check (it casts) are checked here: opgen's
  kernels take the document's table rows (kernel.py) and the executor does not cast.
* L11: biasOptional is validated and never read (``Param.validated_only``): every rule on it
  stays (dtype range, bias == weight's dtype, X or FLOAT32 without a weight, rank, shape), but
  it has no kernel tensor and takes no part in choosing the dtype row.
"""
from __future__ import annotations

import math
import operator

import numpy as np

from opgen.apispec import (ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR, ATTR, INPUT, MASK, OUTPUT, ApiSpec,
                           Param, Pythonic, Rule, Violation, cast_args, dtype_message, first, null_message,
                           other_float, set_args, shape_str)
from opgen.dtypes import BFLOAT16, FLOAT16, FLOAT32
from opgen.lazy import ml_dtypes
from opgen.ops.layer_norm_backward.kernel import Problem, kernel_shapes

_INPUTS = ("gradOut", "input", "mean", "rstd", "weightOptional", "biasOptional")
_OUTPUTS = ("gradInputOut", "gradWeightOut", "gradBiasOut")
_REQUIRED = ("gradOut", "input", "normalizedShape", "mean", "rstd", "outputMask")
_NO_BF16 = ("AtlasInference", "AtlasTraining")
_BITS = {FLOAT32: 32, FLOAT16: 16, BFLOAT16: 16}


def _doc(line: str, source: str = "") -> str:
    """A rule's seed text: the document's error line and where the code checks it."""
    return f"{line} (aclnnLayerNormBackward.md {source})" if source else line


def _present(call, names) -> list:
    """The named tensors that are given and (outputs) asked for by outputMask."""
    return [n for n in names if call[n] is not None and (n not in _OUTPUTS or call.wanted(call.api.param(n)))]


def _norm(call) -> tuple:
    return call["normalizedShape"]


def _begin_axis(call) -> int:
    return call["input"].ndim - len(_norm(call))


def _m(call) -> int:
    """M: the product of input's axes before normalizedShape (op_api l.279-290)."""
    return math.prod(call["input"].shape[: _begin_axis(call)])


def _n(call) -> int:
    """N: the product of input's normalized axes (op_api l.288-290)."""
    return math.prod(call["input"].shape[_begin_axis(call):])


# ---- nulls and the mask -----------------------------------------------------------------

def _check_mask_length(call) -> str | None:
    n = len(call["outputMask"])
    return None if n == 3 else f"outputMask has {n} elements; expected 3 (gradInputOut, gradWeightOut, gradBiasOut)"


def _masked_null(bit: int, name: str):
    def check(call) -> str | None:
        if call["outputMask"][bit] and call[name] is None:
            return f"outputMask[{bit}] is true but {name} is a null pointer"
        return None
    return check


def _rules_nulls() -> tuple:
    nulls = tuple(Violation(f"{n} is None", set_args(**{n: lambda a: None})) for n in _REQUIRED)
    masked = tuple(
        Rule(ACLNN_ERR_PARAM_NULLPTR, _doc(f"outputMask[{bit}] is true and {name} is a null pointer.", line),
             _masked_null(bit, name), (Violation(f"{name} is None", set_args(**{name: lambda a: None})),))
        for bit, name, line in ((0, "gradInputOut", "l.280"), (1, "gradWeightOut", "l.283"),
                                (2, "gradBiasOut", "l.286")))
    return (
        Rule(ACLNN_ERR_PARAM_NULLPTR, _doc("The passed gradOut, input, normalizedShape, mean, rstd or outputMask "
                                           "is a null pointer.", "l.277; op_api CheckNotNull l.53-64"),
             lambda call: null_message(call, _REQUIRED), nulls),
        Rule(ACLNN_ERR_PARAM_INVALID, _doc("The length of outputMask is not 3.", "l.318; op_api l.264-268, checked "
                                                                                  "before the masked outputs"),
             _check_mask_length, (Violation("outputMask of 2", set_args(outputMask=lambda a: [True, True])),
                                  Violation("outputMask of 4", set_args(outputMask=lambda a: [True] * 4)))),
    ) + masked


# ---- dtypes -----------------------------------------------------------------------------

def _floats(product: str) -> tuple:
    return (FLOAT32, FLOAT16) if product in _NO_BF16 else (FLOAT32, FLOAT16, BFLOAT16)


def _check_dtype_range(call) -> str | None:
    """op_api CheckDtype l.78-106: every non-null tensor, outputs whatever their mask bit."""
    allowed = _floats(call.product)
    why = f" on {call.product} (no BFLOAT16 there)" if call.product in _NO_BF16 else ""
    return first(dtype_message(n, call[n].dtype, allowed, why) for n in _INPUTS + _OUTPUTS if call[n] is not None)


def _check_grad_out_dtype(call) -> str | None:
    return dtype_message("gradOut", call["gradOut"].dtype, (call["input"].dtype,), " (the same data type as input)")


def _check_weight_dtype(call) -> str | None:
    weight, x = call["weightOptional"], call["input"].dtype
    if weight is None:
        return None
    return dtype_message("weightOptional", weight.dtype, tuple(dict.fromkeys((x, FLOAT32))),
                         " (input's data type or FLOAT32)")


def _weight_dtype(call) -> str:
    """The dtype gradWeightOut/gradBiasOut follow: weight's, else input's (the ones CANN
    builds for a null weight are in input's dtype)."""
    weight = call["weightOptional"]
    return weight.dtype if weight is not None else call["input"].dtype


def _relation_broken(call) -> str | None:
    """The first of the document's dtype relations (digest 5a) the call breaks, in words."""
    x, mean, rstd = call["input"].dtype, call["mean"].dtype, call["rstd"].dtype
    if rstd != mean:
        return f"rstd has dtype {rstd}; expected mean's {mean} (the same data type as mean)"
    if _BITS[mean] < _BITS[x]:
        return f"mean has dtype {mean}; expected a bit width not lower than input's {x}"
    w = _weight_dtype(call)
    names = [("gradInputOut", x, "input's")] + [(n, w, "weightOptional's (input's when it is null)")
                                                 for n in ("gradWeightOut", "gradBiasOut")]
    return first(dtype_message(n, call[n].dtype, (want,), f" ({whose})") for n, want, whose in names
                 if n in _present(call, (n,)))


def _check_bias_dtype(call) -> str | None:
    """doc l.180 (digest 5a): biasOptional has weightOptional's dtype when there is a weight;
    without one, input's or FLOAT32 (the "same as weight" clause applies only when the weight
    exists). The kernel never reads the bias, so this relation is checked here, not by the
    table of kernel rows."""
    bias, weight = call["biasOptional"], call["weightOptional"]
    if bias is None:
        return None
    if weight is not None:
        return dtype_message("biasOptional", bias.dtype, (weight.dtype,), " (weightOptional's)")
    x = call["input"].dtype
    return dtype_message("biasOptional", bias.dtype, tuple(dict.fromkeys((x, FLOAT32))),
                         " (input's or FLOAT32 when weightOptional is null)")


def _check_dtype_table(call) -> str | None:
    """The present kernel tensors' dtypes are a row of the product's table (what the kernels
    take), then the bias's relation (it is no kernel tensor: Param.validated_only)."""
    present = [n for n in _present(call, _INPUTS + _OUTPUTS) if not call.api.param(n).validated_only]
    given = {call.api.param(n).kernel: call[n].dtype for n in present}
    if any(all(combo[k] == v for k, v in given.items()) for combo in call.combos()):
        return _check_bias_dtype(call)
    reason = _relation_broken(call) or f"the dtypes {given} are not a row of the table"
    rows = ", ".join(c.tag for c in call.combos())
    return (f"{reason}; opgen's kernels take the document's rows on {call.product} (data-stats[-weight]: {rows}) "
            f"and do not cast as CANN's op_api does")


def _bias(args) -> np.ndarray:
    """The call's bias, or (a base call without one: no kernel tensor, so random_inputs makes
    none) a valid one: zeros shaped like normalizedShape in weightOptional's dtype."""
    if args["biasOptional"] is not None:
        return np.asarray(args["biasOptional"])
    weight = args["weightOptional"] if args["weightOptional"] is not None else args["input"]
    return np.zeros(tuple(args["normalizedShape"]), np.asarray(weight).dtype)


def _bias_as(dtype):
    """A mutate function giving the call a bias of ``dtype`` (None: another float than the weight's)."""
    def mutate(args) -> None:
        bias = _bias(args)
        want = dtype if dtype is not None else (np.float16 if bias.dtype != np.float16 else np.float32)
        args["biasOptional"] = bias.astype(want)
    return mutate


def _bf16_everywhere(args) -> None:
    args["biasOptional"] = _bias(args)
    for name in _INPUTS + _OUTPUTS:
        args[name] = args[name].astype(ml_dtypes.bfloat16)


def _mask_off_bias_float64(args) -> None:
    args["outputMask"] = [True, True, False]
    args["gradBiasOut"] = args["gradBiasOut"].astype(np.float64)


def _rules_dtypes() -> tuple:
    range_line = ("The data type of gradOut, input, mean, rstd, weightOptional (when not null) or biasOptional "
                  "(when not null) is not within the supported range.")
    relations = ("The data types do not meet the constraints in Parameters: mean and rstd of one dtype at least as "
                 "wide as input's, gradInputOut of input's, gradWeightOut/gradBiasOut of weightOptional's (input's "
                 "without one), biasOptional of weightOptional's (input's or FLOAT32 without one)")
    return (
        Rule(ACLNN_ERR_PARAM_INVALID, _doc(range_line, "l.291, l.249-253 (no BFLOAT16 on Atlas inference/training); "
                                           "op_api CheckDtype l.78-106 adds every non-null output, whatever its mask"),
             _check_dtype_range, (
                 Violation("float64 gradOut", cast_args(("gradOut",), np.float64)),
                 Violation("int32 mean", cast_args(("mean",), np.int32)),
                 Violation("float64 weightOptional", cast_args(("weightOptional",), np.float64)),
                 Violation("float64 biasOptional", _bias_as(np.float64)),
                 Violation("float64 gradInputOut", cast_args(("gradInputOut",), np.float64)),
                 Violation("float64 gradBiasOut whose mask bit is false", _mask_off_bias_float64),
                 Violation("bfloat16 everywhere on Atlas inference/training", _bf16_everywhere, _NO_BF16))),
        Rule(ACLNN_ERR_PARAM_INVALID, _doc("gradOut: the same data type as input.", "l.120; op_api l.86"),
             _check_grad_out_dtype, (Violation("input's dtype differs from gradOut's", other_float("input")),)),
        Rule(ACLNN_ERR_PARAM_INVALID, _doc("weightOptional: input's data type or FLOAT.", "l.170; op_api l.87-92"),
             _check_weight_dtype,
             (Violation("float16 weightOptional with float32 input", other_float("weightOptional")),)),
        Rule(ACLNN_ERR_PARAM_INVALID, _doc(relations, "l.150-220; the op_api casts instead of checking these "
                                           "(digest L8): opgen has no casting executor"), _check_dtype_table, (
                 Violation("rstd's dtype differs from mean's", other_float("rstd")),
                 Violation("float16 mean and rstd for float32 data", cast_args(("mean", "rstd"), np.float16)),
                 Violation("gradInputOut's dtype differs from input's", other_float("gradInputOut")),
                 Violation("gradWeightOut's dtype differs from weightOptional's", other_float("gradWeightOut")),
                 Violation("gradBiasOut's dtype differs from weightOptional's", other_float("gradBiasOut")),
                 Violation("biasOptional's dtype differs from weightOptional's", _bias_as(None)))),
    )


# ---- shapes (op_api CheckShape l.128-214, in its order) -----------------------------------

def _too_many_dims(names):
    def check(call) -> str | None:
        return first(f"{n} has {call[n].ndim} dimensions; expected at most 8" for n in _present(call, names)
                     if call[n].ndim > 8)
    return check


def _check_norm_length(call) -> str | None:
    n = len(_norm(call))
    return None if 1 <= n <= 8 else f"normalizedShape has {n} elements; expected 1 to 8"


def _check_input_rank(call) -> str | None:
    x, n = call["input"].ndim, len(_norm(call))
    return None if x >= n else f"input has {x} dimensions; expected at least len(normalizedShape) = {n}"


def _check_trailing(call) -> str | None:
    """Decision L4: input's shape right-aligned with normalizedShape, every dimension."""
    shape, norm = call["input"].shape, _norm(call)
    if tuple(shape[len(shape) - len(norm):]) == tuple(norm):
        return None
    return (f"input has shape {shape_str(shape)}, whose last {len(norm)} dimensions "
            f"{shape_str(shape[len(shape) - len(norm):])} differ from normalizedShape {shape_str(norm)}")


def _like_norm(name: str):
    """weightOptional/biasOptional (when given): normalizedShape's rank and dims (l.171-184)."""
    def check(call) -> str | None:
        t, norm = call[name], tuple(_norm(call))
        if t is None or tuple(t.shape) == norm:
            return None
        return f"{name} has shape {shape_str(t.shape)}; expected normalizedShape {shape_str(norm)}"
    return check


def _same_shape(name: str, like: str, bit: int | None = None):
    def check(call) -> str | None:
        if bit is not None and not call["outputMask"][bit]:
            return None
        got, want = call[name].shape, call[like].shape
        return None if got == want else f"{name} has shape {shape_str(got)}; expected {like}'s {shape_str(want)}"
    return check


def _check_stats(call) -> str | None:
    """mean.shape == rstd.shape and prod(mean) == M (op_api l.189-195: any layout of M values)."""
    mean, rstd, m = call["mean"], call["rstd"], _m(call)
    if mean.shape != rstd.shape:
        return f"rstd has shape {shape_str(rstd.shape)}; expected mean's {shape_str(mean.shape)}"
    if mean.size != m:
        x = call["input"].shape
        return (f"mean and rstd have {mean.size} elements (shape {shape_str(mean.shape)}); expected M = the product "
                f"of input's dimensions before normalizedShape, {shape_str(x[: _begin_axis(call)])} = {m}")
    return None


def _per_norm_output(bit: int, name: str):
    """Decision L7: normalizedShape's shape; any 1-element shape when N == 1 (ViewCopy)."""
    def check(call) -> str | None:
        if not call["outputMask"][bit]:
            return None
        got, norm, n = call[name].shape, tuple(_norm(call)), _n(call)
        if got == norm or (n == 1 and call[name].size == 1):
            return None
        return f"{name} has shape {shape_str(got)}; expected normalizedShape {shape_str(norm)} ({n} elements)"
    return check


def _nine_dims(*names):
    return set_args(**{n: (lambda n: lambda a: a[n].reshape((1,) * (9 - a[n].ndim) + a[n].shape))(n) for n in names})


def _norm_of(*dims):
    return set_args(normalizedShape=lambda a: list(dims))


def _rules_ranks() -> tuple:
    ranks = "gradOut, input, mean, rstd, weightOptional/biasOptional/gradInputOut/gradWeightOut/gradBiasOut (when " \
            "not null) have more than 8 dimensions."
    return (
        Rule(ACLNN_ERR_PARAM_INVALID, _doc(ranks, "l.321; op_api l.134-137"), _too_many_dims(_INPUTS[:4]), (
            Violation("9-d gradOut, input and gradInputOut", _nine_dims("gradOut", "input", "gradInputOut")),
            Violation("9-d mean and rstd", _nine_dims("mean", "rstd")))),
        Rule(ACLNN_ERR_PARAM_INVALID, _doc("normalizedShape has fewer than 1 dimension.", "l.297; op_api l.156-161; "
                                           "more than 8: l.138-144"), _check_norm_length, (
            Violation("empty normalizedShape", set_args(normalizedShape=lambda a: [])),
            Violation("normalizedShape of 9", set_args(normalizedShape=lambda a: [1] * 9)))),
        Rule(ACLNN_ERR_PARAM_INVALID, _doc(ranks, "l.321; op_api l.145-153: outputs only when their mask bit is "
                                           "true"), _too_many_dims(_OUTPUTS), (
            Violation("9-d gradInputOut", _nine_dims("gradInputOut")),
            Violation("9-d gradBiasOut", _nine_dims("gradBiasOut")))),
        Rule(ACLNN_ERR_PARAM_INVALID, _doc("input's rank is smaller than the length of normalizedShape.",
                                           "l.312; op_api l.163"), _check_input_rank,
             (Violation("normalizedShape longer than input's rank", set_args(
                 normalizedShape=lambda a: [1] * (a["input"].ndim + 1 - len(a["normalizedShape"]))
                 + list(a["normalizedShape"]))),)),
    )


def _rules_shapes() -> tuple:
    trailing = ("input's shape, right-aligned with normalizedShape, differs in some dimension (every dimension: the "
                "op_api's loop, l.108-126, skips some and the kernel tiling refuses them in phase 2; digest L4)")
    return _rules_ranks() + (
        Rule(ACLNN_ERR_PARAM_INVALID, _doc(trailing, "l.315"), _check_trailing, (
            Violation("normalizedShape's last value one more", set_args(
                normalizedShape=lambda a: list(a["normalizedShape"][:-1]) + [a["normalizedShape"][-1] + 1])),
            Violation("normalizedShape flattened (an index the op_api does not compare)", set_args(
                normalizedShape=lambda a: [math.prod(a["normalizedShape"])])),
            Violation("a negative value in normalizedShape", set_args(
                normalizedShape=lambda a: [-d for d in a["normalizedShape"]])))),
        Rule(ACLNN_ERR_PARAM_INVALID, _doc("weightOptional is not null and its shape differs from normalizedShape.",
                                           "l.306; op_api l.171-175"), _like_norm("weightOptional"), (
            Violation("weightOptional flattened", set_args(weightOptional=lambda a: a["weightOptional"].reshape(-1))),
            Violation("weightOptional with a leading 1",
                      set_args(weightOptional=lambda a: a["weightOptional"][None])))),
        Rule(ACLNN_ERR_PARAM_INVALID, _doc("biasOptional is not null and its shape differs from normalizedShape.",
                                           "l.309; op_api l.178-184"), _like_norm("biasOptional"),
             (Violation("biasOptional one element short", set_args(biasOptional=lambda a: _bias(a)[..., :-1])),
              Violation("biasOptional with a leading 1", set_args(biasOptional=lambda a: _bias(a)[None])))),
        Rule(ACLNN_ERR_PARAM_INVALID, _doc("The shape of gradOut differs from the shape of input.", "l.294; op_api "
                                           "l.187"), _same_shape("gradOut", "input"),
             (Violation("gradOut flattened", set_args(gradOut=lambda a: a["gradOut"].reshape(-1))),)),
        Rule(ACLNN_ERR_PARAM_INVALID, _doc("The product of mean's (rstd's) shape differs from the product of input's "
                                           "axes before normalizedShape; mean and rstd have one shape.",
                                           "l.300, l.303, l.150, l.160; op_api l.189-195"), _check_stats, (
            Violation("mean and rstd one element more", set_args(
                mean=lambda a: np.ones(a["mean"].size + 1, a["mean"].dtype),
                rstd=lambda a: np.ones(a["rstd"].size + 1, a["rstd"].dtype))),
            Violation("mean flat, rstd keepdim", set_args(mean=lambda a: a["mean"].reshape(-1))),
            Violation("mean and rstd over input's axes inclusive of the first normalized one (l.300 read inclusive)",
                      set_args(mean=lambda a: np.ones(a["input"].shape[: a["input"].ndim - len(a["normalizedShape"])
                                                                        + 1], a["mean"].dtype),
                               rstd=lambda a: np.ones(a["input"].shape[: a["input"].ndim - len(a["normalizedShape"])
                                                                       + 1], a["rstd"].dtype))))),
        Rule(ACLNN_ERR_PARAM_INVALID, _doc("outputMask[0] is true and gradInputOut's shape differs from input's.",
                                           "l.200; op_api l.197-199"), _same_shape("gradInputOut", "input", 0),
             (Violation("gradInputOut flattened", set_args(gradInputOut=lambda a: a["gradInputOut"].reshape(-1))),)),
    ) + tuple(
        Rule(ACLNN_ERR_PARAM_INVALID, _doc(f"outputMask[{bit}] is true and {name}'s shape differs from "
                                           "normalizedShape [R1, ..., Rj].", f"{line}; op_api l.200-211 compares "
                                           "element counts, a same-count shape is never written (ViewCopy): "
                                           "digest L7"), _per_norm_output(bit, name), (
            Violation(f"{name} flattened", set_args(**{name: (lambda n: lambda a: a[n].reshape(-1))(name)})),
            Violation(f"{name} one element short", set_args(**{name: (lambda n: lambda a: a[n][..., :-1])(name)}))))
        for bit, name, line in ((1, "gradWeightOut", "l.210"), (2, "gradBiasOut", "l.220")))


# ---- the Pythonic face --------------------------------------------------------------------

def _norm_dims(tensors: dict, attrs: dict) -> tuple | None:
    """normalizedShape as output dims; where it cannot be one (negative values, too long),
    input's trailing dims, so the call reaches the rule that says what is wrong."""
    x, norm = tensors["input"], attrs.get("normalizedShape")
    if x is None or norm is None:
        return None
    try:
        dims = tuple(operator.index(d) for d in norm)
    except TypeError:
        return None
    if any(d < 0 for d in dims) or len(dims) > len(x.shape):
        dims = tuple(x.shape[len(x.shape) - min(len(dims), len(x.shape)):])
    return dims


def _per_norm(tensors: dict, attrs: dict):
    """gradWeightOut/gradBiasOut: normalizedShape, weightOptional's dtype (input's without one)."""
    dims = _norm_dims(tensors, attrs)
    if dims is None:
        return None
    weight = tensors["weightOptional"]
    return dims, (weight.dtype if weight is not None else tensors["input"].dtype)


_DT = "FLOAT32, FLOAT16, BFLOAT16 (no BFLOAT16 on Atlas inference/training)"
API = ApiSpec(
    params=(
        Param("gradOut", INPUT, "The gradient (`dy`); input's shape and dtype.", "dy", _DT, "1-8"),
        Param("input", INPUT, "The forward input (`x`), [A1..Ai, R1..Rj]; at least len(normalizedShape) dims whose "
              "trailing ones are normalizedShape.", "x", _DT, "1-8"),
        Param("normalizedShape", ATTR, "The normalized axes [R1..Rj] (aclIntArray or list of ints), 1 to 8 values "
              "equal to input's trailing dims.", value_type="ints"),
        Param("mean", INPUT, "The forward's mean; M = A1*..*Ai elements in any layout ([A1..Ai, 1..1] as "
              "aclnnLayerNorm saves it), at least input's bit width.", "mean", _DT, "0-8"),
        Param("rstd", INPUT, "The forward's 1/sqrt(var + eps); mean's shape and dtype.", "rstd", _DT, "0-8"),
        Param("weightOptional", INPUT, "The weight (gamma), shaped like normalizedShape, input's dtype or FLOAT32; "
              "null: ones.", "gamma", _DT, "1-8", optional=True),
        Param("biasOptional", INPUT, "The bias (beta), shaped like normalizedShape, weight's dtype (input's or "
              "FLOAT32 without a weight); validated, never read (no output depends on it, no kernel tensor); may be "
              "null.", None, _DT, "1-8", optional=True, validated_only=True),
        Param("outputMask", MASK, "Three bools: whether to compute gradInputOut, gradWeightOut, gradBiasOut."),
        Param("gradInputOut", OUTPUT, "The gradient of input; input's shape and dtype; may be null when "
              "outputMask[0] is false.", "dx", _DT, "1-8", mask_bit=0),
        Param("gradWeightOut", OUTPUT, "The gradient of weight; normalizedShape, weight's dtype (input's without a "
              "weight); may be null when outputMask[1] is false.", "dgamma", _DT, "0-8", mask_bit=1),
        Param("gradBiasOut", OUTPUT, "The gradient of bias; like gradWeightOut; may be null when outputMask[2] is "
              "false.", "dbeta", _DT, "0-8", mask_bit=2),
    ),
    rules=_rules_nulls() + _rules_dtypes() + _rules_shapes(),
    problem=lambda call: Problem(tuple(call["input"].shape), len(call["normalizedShape"])),
    kernel_shapes=kernel_shapes,
    description="Backward of LayerNorm: gradInputOut, gradWeightOut and gradBiasOut, each behind outputMask.",
    fill={"gamma": 1.0},
    pythonic=Pythonic(
        allocate={"gradInputOut": lambda t, attrs: None if t["input"] is None else (t["input"].shape, t["input"].dtype),
                  "gradWeightOut": _per_norm, "gradBiasOut": _per_norm},
        defaults={"output_mask": (True, True, True)}),
)
