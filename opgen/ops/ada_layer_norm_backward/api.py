"""aclnnAdaLayerNormBackward: the aclnn face: parameters in the document's order, rules with their
status codes and example violations, how a call maps onto the kernel.

Specification: docs/specs/aclnnAdaLayerNormBackward.md (the digest of CANN's document and of
hicann/ops-nn's op_api, "op_api" below: norm/ada_layer_norm_grad/op_host/op_api/
aclnn_ada_layer_norm_backward.cpp @ e5c3fa9). Rules run in the op_api's order: 161001 for
the required nulls (CheckNotNull), then 161002 for dtypes (CheckDtype) and for shapes
(CheckShape's order). Where opgen departs from the op_api (docs/validation-vs-cann.md,
section aclnnAdaLayerNormBackward):
* weightOptional/biasOptional must be [H] (the document's line); the op_api checks only
  their rank and drops CheckShapeEqual's result (l.307-308).
* a null gradInputOut, gradScaleOut or gradShiftOut is declined (not computed), as the
  document says of all five outputs; the op_api dereferences it (GenOutWithMask with mask
  true, l.450-452).
* gradWeightOut and gradBiasOut share one dtype when both are given: the kernel rounds
  both from one dtype row; the op_api casts each.
"""
from __future__ import annotations

import math

import numpy as np

from opgen.apispec import (ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR, ATTR, INPUT, OUTPUT, ApiSpec, Param,
                           Pythonic, Rule, Violation, cast_args, dtype_message, first, null_message, other_float,
                           set_args, shape_str)
from opgen.dtypes import BFLOAT16, FLOAT16, FLOAT32
from opgen.ops.ada_layer_norm_backward.kernel import Problem, kernel_shapes

_REQUIRED = ("gradOut", "input", "normalizedShape", "rstd", "mean", "scale", "shift")
_DATA = ("input", "rstd", "mean", "scale", "shift")          # gradOut's dtype (op_api l.102-106)
_WEIGHTS = ("weightOptional", "biasOptional")
_OUTPUTS = ("gradInputOut", "gradScaleOut", "gradShiftOut", "gradWeightOut", "gradBiasOut")
_FLOATS = (FLOAT32, FLOAT16, BFLOAT16)
_SOURCE = "op_api aclnn_ada_layer_norm_backward.cpp"


def _doc(line: str, source: str) -> str:
    """A rule's seed text: the document's error line and where the op_api checks it."""
    return f"{line} (aclnnAdaLayerNormBackward.md, 返回值; {_SOURCE} {source})"


def _given(call, names) -> list:
    return [n for n in names if call[n] is not None]


def _hidden(call) -> int:
    return call["input"].shape[-1]


def _scale_shapes(call) -> tuple:
    """The two shapes scale and shift may have: [B..., 1, H] and [B..., H]."""
    x = call["input"].shape
    return tuple(x[:-2]) + (1, x[-1]), tuple(x[:-2]) + (x[-1],)


# ---- dtypes (op_api CheckDtype l.96-138) ------------------------------------------------

def _check_dtype_range(call) -> str | None:
    return first(dtype_message(n, call[n].dtype, _FLOATS) for n in ("gradOut",) + _WEIGHTS if call[n] is not None)


def _check_data_dtypes(call) -> str | None:
    want = call["gradOut"].dtype
    return first(dtype_message(n, call[n].dtype, (want,), " (gradOut's)") for n in _DATA)


def _check_weight_dtypes(call) -> str | None:
    """FLOAT32 or input's dtype each (l.108-119), and one dtype for both (l.120-122)."""
    x = call["input"].dtype
    wrong = first(dtype_message(n, call[n].dtype, tuple(dict.fromkeys((x, FLOAT32))), " (input's or FLOAT32)")
                  for n in _given(call, _WEIGHTS))
    if wrong or len(_given(call, _WEIGHTS)) < 2:
        return wrong
    return dtype_message("biasOptional", call["biasOptional"].dtype, (call["weightOptional"].dtype,),
                         " (weightOptional's)")


def _weight_grad_dtypes(call) -> tuple:
    """The dtypes gradWeightOut/gradBiasOut may have (op_api CheckOptionalOutDtype l.66-94):
    weightOptional's, else biasOptional's, else FLOAT32 or input's."""
    for name in _WEIGHTS:
        if call[name] is not None:
            return (call[name].dtype,), f" ({name}'s)"
    return tuple(dict.fromkeys((FLOAT32, call["input"].dtype))), " (FLOAT32 or input's, without weight and bias)"


def _check_output_dtypes(call) -> str | None:
    like = {"gradInputOut": "input", "gradScaleOut": "scale", "gradShiftOut": "shift"}
    wrong = first(dtype_message(n, call[n].dtype, (call[src].dtype,), f" ({src}'s)")
                  for n, src in like.items() if call[n] is not None)
    if wrong:
        return wrong
    allowed, why = _weight_grad_dtypes(call)
    grads = _given(call, ("gradWeightOut", "gradBiasOut"))
    wrong = first(dtype_message(n, call[n].dtype, allowed, why) for n in grads)
    if wrong or len(grads) < 2:
        return wrong
    return dtype_message("gradBiasOut", call["gradBiasOut"].dtype, (call["gradWeightOut"].dtype,),
                         " (gradWeightOut's: opgen's kernels round both from one dtype row; CANN casts each)")


def _rules_dtypes() -> tuple:
    return (
        Rule(ACLNN_ERR_PARAM_INVALID, _doc("gradOut, weightOptional (when not null) or biasOptional (when not null) "
                                           "has a data type outside the supported range.", "l.101, l.109, l.115"),
             _check_dtype_range, (
                 Violation("float64 gradOut", cast_args(("gradOut",), np.float64)),
                 Violation("int32 weightOptional", cast_args(("weightOptional",), np.int32)),
                 Violation("float64 biasOptional", cast_args(("biasOptional",), np.float64)))),
        Rule(ACLNN_ERR_PARAM_INVALID, _doc("input, mean, rstd, scale or shift has a data type other than "
                                           "gradOut's.", "l.102-106"), _check_data_dtypes, tuple(
                 Violation(f"{n}'s dtype differs from gradOut's", other_float(n)) for n in _DATA)),
        Rule(ACLNN_ERR_PARAM_INVALID, _doc("weightOptional and biasOptional (when not null) differ in data type, or "
                                           "one of them is neither FLOAT32 nor input's data type.", "l.108-122"),
             _check_weight_dtypes, (
                 Violation("float16 weight and bias with float32 data", cast_args(_WEIGHTS, np.float16)),
                 Violation("float16 bias with a float32 weight", cast_args(("biasOptional",), np.float16)))),
        Rule(ACLNN_ERR_PARAM_INVALID, _doc("gradInputOut, gradScaleOut, gradShiftOut, gradWeightOut or gradBiasOut "
                                           "(when not null) has a data type other than the parameter table's.",
                                           "l.124-135, CheckOptionalOutDtype l.66-94"), _check_output_dtypes, (
                 Violation("gradInputOut's dtype differs from input's", other_float("gradInputOut")),
                 Violation("gradScaleOut's dtype differs from scale's", other_float("gradScaleOut")),
                 Violation("gradShiftOut's dtype differs from shift's", other_float("gradShiftOut")),
                 Violation("gradWeightOut's dtype differs from weightOptional's", other_float("gradWeightOut")),
                 Violation("gradBiasOut's dtype differs from weightOptional's", other_float("gradBiasOut")))),
    )


# ---- shapes (op_api CheckShape l.275-328, in its order) -----------------------------------

def _check_max_dims(call) -> str | None:
    names = _REQUIRED[:2] + _REQUIRED[3:] + _WEIGHTS + _OUTPUTS
    return first(f"{n} has {call[n].ndim} dimensions; expected at most 8" for n in _given(call, names)
                 if call[n].ndim > 8)


def _same_shape(name: str, like: str):
    def check(call) -> str | None:
        if call[name] is None:
            return None
        got, want = call[name].shape, call[like].shape
        return None if got == want else f"{name} has shape {shape_str(got)}; expected {like}'s {shape_str(want)}"
    return check


def _check_norm_length(call) -> str | None:
    n = len(call["normalizedShape"])
    return None if n == 1 else f"normalizedShape has {n} elements; expected 1 ([H])"


def _check_input_rank(call) -> str | None:
    n = call["input"].ndim
    return None if n >= 2 else f"input has {n} dimensions; expected at least 2 ([B..., S, H])"


def _check_hidden(call) -> str | None:
    h, norm = _hidden(call), call["normalizedShape"][0]
    return None if norm == h else f"normalizedShape is [{norm}]; expected input's last dimension [{h}]"


def _check_weight_shapes(call) -> str | None:
    """[H] each: the op_api checks the rank (l.161-173, l.304) and drops the value check (l.307-308)."""
    want = (_hidden(call),)
    return first(f"{n} has shape {shape_str(call[n].shape)}; expected normalizedShape {shape_str(want)}"
                 for n in _given(call, _WEIGHTS) if tuple(call[n].shape) != want)


def _check_scale_shift(call) -> str | None:
    """No empty input (l.190-193), then scale and shift [B..., 1, H] or [B..., H] (l.195-208)."""
    x = call["input"].shape
    if math.prod(x) == 0:
        return f"input has shape {shape_str(x)}; expected every size greater than 0 (no empty tensors)"
    shapes = _scale_shapes(call)
    return first(f"{n} has shape {shape_str(call[n].shape)}; expected {shape_str(shapes[0])} or "
                 f"{shape_str(shapes[1])}" for n in ("scale", "shift") if tuple(call[n].shape) not in shapes)


def _check_stat_shape(call) -> str | None:
    """mean (rstd: the same, checked before) is input's shape with the last dimension 1
    (op_api l.315-323; the document's line says only the element count)."""
    want = tuple(call["input"].shape[:-1]) + (1,)
    got = tuple(call["mean"].shape)
    return None if got == want else f"mean has shape {shape_str(got)}; expected {shape_str(want)} ([B..., S, 1])"


def _check_grad_shapes(call) -> str | None:
    """gradScaleOut/gradShiftOut like scale/shift; gradWeightOut/gradBiasOut H elements in
    any shape (op_api CheckOutputShapes l.243-273 compares element counts)."""
    wrong = first(_same_shape(n, src)(call) for n, src in (("gradScaleOut", "scale"), ("gradShiftOut", "shift")))
    if wrong:
        return wrong
    h = _hidden(call)
    return first(f"{n} has shape {shape_str(call[n].shape)} ({call[n].size} elements); expected H = {h} elements"
                 for n in _given(call, ("gradWeightOut", "gradBiasOut")) if call[n].size != h)


def _nine_dims(*names):
    return set_args(**{n: (lambda n: lambda a: a[n].reshape((1,) * (9 - a[n].ndim) + a[n].shape))(n) for n in names})


def _flat(name: str):
    return set_args(**{name: lambda a: a[name].reshape(-1)})


def _rules_shapes() -> tuple:
    return (
        Rule(ACLNN_ERR_PARAM_INVALID, _doc("A tensor (optional ones when not null) has more than 8 dimensions.",
                                           "CheckAllTensorsMaxDim l.211-241, l.165, l.169"), _check_max_dims, (
            Violation("9-d gradOut, input, gradInputOut", _nine_dims("gradOut", "input", "gradInputOut")),
            Violation("9-d scale", _nine_dims("scale")),
            Violation("9-d gradWeightOut", _nine_dims("gradWeightOut")))),
        Rule(ACLNN_ERR_PARAM_INVALID, _doc("The shape of gradOut differs from input's.", "l.287"),
             _same_shape("gradOut", "input"), (Violation("gradOut flattened", _flat("gradOut")),)),
        Rule(ACLNN_ERR_PARAM_INVALID, _doc("mean's and rstd's shapes differ (their element counts must be input's "
                                           "rows).", "l.288"), _same_shape("rstd", "mean"),
             (Violation("rstd flattened", _flat("rstd")),)),
        Rule(ACLNN_ERR_PARAM_INVALID, _doc("The length of normalizedShape is not 1.", "l.291-295"),
             _check_norm_length, (Violation("normalizedShape [S, H]", set_args(
                 normalizedShape=lambda a: list(a["input"].shape[-2:]))),
                 Violation("empty normalizedShape", set_args(normalizedShape=lambda a: [])))),
        Rule(ACLNN_ERR_PARAM_INVALID, _doc("input has fewer than 2 dimensions.", "l.298"), _check_input_rank, (
            Violation("1-d gradOut and input", set_args(gradOut=lambda a: a["gradOut"][0, 0],
                                                        input=lambda a: a["input"][0, 0])),)),
        Rule(ACLNN_ERR_PARAM_INVALID, _doc("input's shape, right-aligned with normalizedShape, differs from it.",
                                           "CheckShapeEqual l.140-159, l.301"), _check_hidden, (
            Violation("normalizedShape one more than H", set_args(normalizedShape=lambda a: [a["input"].shape[-1] + 1])),
            Violation("a negative normalizedShape", set_args(normalizedShape=lambda a: [-a["input"].shape[-1]])))),
        Rule(ACLNN_ERR_PARAM_INVALID, _doc("weightOptional or biasOptional is not null and its shape differs from "
                                           "normalizedShape.", "CheckShapeCompatibility l.161-173; the values' "
                                           "check l.307-308 is computed and ignored: opgen checks it"),
             _check_weight_shapes, (
                 Violation("weightOptional [1, H]", set_args(weightOptional=lambda a: a["weightOptional"][None])),
                 Violation("biasOptional one element short", set_args(biasOptional=lambda a: a["biasOptional"][:-1])))),
        Rule(ACLNN_ERR_PARAM_INVALID, _doc("scale's or shift's shape is neither [B..., 1, H] nor [B..., H] (and "
                                           "input is not empty).", "ValidateScaleShiftShapes l.175-209"),
             _check_scale_shift, (
                 Violation("scale flattened", _flat("scale")),
                 Violation("shift [B..., S, H]", set_args(shift=lambda a: np.zeros_like(a["input"]))),
                 Violation("empty gradOut and input", set_args(gradOut=lambda a: a["gradOut"][:, :0],
                                                               input=lambda a: a["input"][:, :0])))),
        Rule(ACLNN_ERR_PARAM_INVALID, _doc("mean's (rstd's) shape is not input's with the last dimension 1 (the "
                                           "document says the element count; the op_api compares shapes).",
                                           "l.315-323"), _check_stat_shape, (
            Violation("mean and rstd flattened", set_args(mean=lambda a: a["mean"].reshape(-1),
                                                          rstd=lambda a: a["rstd"].reshape(-1))),)),
        Rule(ACLNN_ERR_PARAM_INVALID, _doc("gradInputOut's shape differs from input's.", "CheckOutputShapes "
                                           "l.243-273"), _same_shape("gradInputOut", "input"),
             (Violation("gradInputOut flattened", _flat("gradInputOut")),)),
        Rule(ACLNN_ERR_PARAM_INVALID, _doc("gradScaleOut's (gradShiftOut's) shape differs from scale's (shift's), or "
                                           "gradWeightOut/gradBiasOut has other than H elements.",
                                           "CheckOutputShapes l.243-273"), _check_grad_shapes, (
            Violation("gradScaleOut flattened", _flat("gradScaleOut")),
            Violation("gradShiftOut [B..., H] for shift [B..., 1, H]", set_args(
                gradShiftOut=lambda a: a["gradShiftOut"].reshape(a["shift"].shape[:-2] + a["shift"].shape[-1:]))),
            Violation("gradBiasOut one element short", set_args(gradBiasOut=lambda a: a["gradBiasOut"][:-1])))),
    )


# ---- the Pythonic face --------------------------------------------------------------------

def _like(name: str):
    return lambda t, attrs: None if t[name] is None else (t[name].shape, t[name].dtype)


def _per_hidden(tensors: dict, attrs: dict):
    """gradWeightOut/gradBiasOut: [H] in weightOptional's dtype, else biasOptional's, else
    FLOAT32 (the dtype the op_api's infer_dtype gives the ones and zeros it fills)."""
    x = tensors["input"]
    if x is None or len(x.shape) < 1:
        return None
    dtype = next((tensors[n].dtype for n in _WEIGHTS if tensors[n] is not None), FLOAT32)
    return (x.shape[-1],), dtype


_DT = "FLOAT32, FLOAT16, BFLOAT16"
API = ApiSpec(
    params=(
        Param("gradOut", INPUT, "The gradient (`dy`) of out, [B..., S, H]; input's shape and dtype.", "dy", _DT, "2-8"),
        Param("input", INPUT, "The forward input (`x`), [B..., S, H] (B: 0 to 6 axes), no empty tensor.", "x", _DT,
              "2-8"),
        Param("normalizedShape", ATTR, "[H]: one value, input's last dimension (aclIntArray or list of ints).",
              value_type="ints"),
        Param("rstd", INPUT, "The forward's 1/sqrt(var + eps), [B..., S, 1]; gradOut's dtype.", "rstd", _DT, "2-8"),
        Param("mean", INPUT, "The forward's mean, [B..., S, 1]; gradOut's dtype.", "mean", _DT, "2-8"),
        Param("scale", INPUT, "The adaptive scale, [B..., 1, H] or [B..., H]; gradOut's dtype.", "scale", _DT, "1-8"),
        Param("shift", INPUT, "The adaptive shift, [B..., 1, H] or [B..., H]; gradOut's dtype; validated, never read "
              "(no gradient depends on it).", None, _DT, "1-8", validated_only=True),
        Param("weightOptional", INPUT, "The LayerNorm weight, [H], input's dtype or FLOAT32; null: ones.", "gamma",
              _DT, "1", optional=True),
        Param("biasOptional", INPUT, "The LayerNorm bias, [H], weightOptional's dtype; null: zeros.", "beta", _DT,
              "1", optional=True),
        Param("gradInputOut", OUTPUT, "The gradient of input; input's shape and dtype; null: not computed.", "dx", _DT,
              "2-8", optional=True),
        Param("gradScaleOut", OUTPUT, "The gradient of scale; scale's shape and dtype; null: not computed.",
              "dscale", _DT, "1-8", optional=True),
        Param("gradShiftOut", OUTPUT, "The gradient of shift; shift's shape and dtype; null: not computed.",
              "dshift", _DT, "1-8", optional=True),
        Param("gradWeightOut", OUTPUT, "The gradient of weight; H elements in weightOptional's dtype (without one: "
              "biasOptional's, else FLOAT32 or input's); null: not computed.", "dgamma", _DT, "1", optional=True),
        Param("gradBiasOut", OUTPUT, "The gradient of bias; like gradWeightOut; null: not computed.", "dbeta", _DT,
              "1", optional=True),
    ),
    rules=(Rule(ACLNN_ERR_PARAM_NULLPTR, _doc("gradOut, input, normalizedShape, mean, rstd, scale or shift is a null "
                                              "pointer.", "CheckNotNull l.51-64"),
                lambda call: null_message(call, _REQUIRED),
                tuple(Violation(f"{n} is None", set_args(**{n: lambda a: None})) for n in _REQUIRED)),)
    + _rules_dtypes() + _rules_shapes(),
    problem=lambda call: Problem(tuple(call["input"].shape), int(call["scale"].ndim == call["input"].ndim)),
    kernel_shapes=kernel_shapes,
    description="Backward of AdaLayerNorm (LayerNorm(x) * (1 + scale) + shift): the gradients of input, scale, "
                "shift, weight and bias, each written when its pointer is not null.",
    fill={"gamma": 1.0, "beta": 0.0},
    pythonic=Pythonic(allocate={"gradInputOut": _like("input"), "gradScaleOut": _like("scale"),
                                "gradShiftOut": _like("shift"), "gradWeightOut": _per_hidden,
                                "gradBiasOut": _per_hidden}),
)
