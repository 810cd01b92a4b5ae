"""LayerNormChannelsBackward: the call face: parameters, rules with their status codes and
example violations, how a call maps onto the kernel.

An opgen extension like LayerNormChannels (no CANN operator normalizes axis 1 of NCHW
data). The face follows aclnnLayerNormBackward's (names, the outputMask, its dtype rows,
161001 for a null required tensor or a null output its mask asks for, 161002 for the rest)
with the channel axis instead of normalizedShape: gradOut and input [N, C, spatial...],
mean and rstd input's shape with C = 1 (what LayerNormChannels writes), weightOptional,
gradWeightOut and gradBiasOut [C]. There is no bias parameter: no output depends on it.
"""
from __future__ import annotations

import numpy as np

from opgen.apispec import (ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR, INPUT, MASK, OUTPUT, ApiSpec, Param,
                           Pythonic, Rule, Violation, cast_args, dtype_message, first, null_message, other_float,
                           set_args, shape_str)
from opgen.dtypes import BFLOAT16, FLOAT16, FLOAT32
from opgen.ops.layer_norm_channels_backward.kernel import Problem, kernel_shapes

_INPUTS = ("gradOut", "input", "mean", "rstd", "weightOptional")
_OUTPUTS = ("gradInputOut", "gradWeightOut", "gradBiasOut")
_REQUIRED = ("gradOut", "input", "mean", "rstd", "outputMask")
_NO_BF16 = ("AtlasInference", "AtlasTraining")
_CODE = ACLNN_ERR_PARAM_INVALID


def _present(call, names) -> list:
    """The named tensors that are given and (outputs) asked for by outputMask."""
    return [n for n in names if call[n] is not None and (n not in _OUTPUTS or call.wanted(call.api.param(n)))]


def _check_mask_length(call) -> str | None:
    n = len(call["outputMask"])
    return None if n == 3 else f"outputMask has {n} elements; expected 3 (gradInputOut, gradWeightOut, gradBiasOut)"


def _check_masked_nulls(call) -> str | None:
    return first(f"outputMask[{bit}] is true but {name} is a null pointer" for bit, name in enumerate(_OUTPUTS)
                 if call["outputMask"][bit] and call[name] is None)


def _check_ranks(call) -> str | None:
    rank = call["input"].ndim
    if not 2 <= rank <= 8:
        return f"input has {rank} dimensions; expected 2 to 8 ([N, C, spatial...])"
    return first(f"{p} has {call[p].ndim} dimensions; expected at most 8" for p in _present(call, _INPUTS + _OUTPUTS)
                 if call[p].ndim > 8)


def _check_dtype_range(call) -> str | None:
    allowed = (FLOAT32, FLOAT16) if call.product in _NO_BF16 else (FLOAT32, FLOAT16, BFLOAT16)
    why = f" on {call.product} (no BFLOAT16 there)" if call.product in _NO_BF16 else ""
    return first(dtype_message(n, call[n].dtype, allowed, why) for n in _INPUTS + _OUTPUTS if call[n] is not None)


def _check_dtype_table(call) -> str | None:
    """The present tensors' dtypes are a row of the product's table (aclnnLayerNormBackward's)."""
    given = {call.api.param(n).kernel: call[n].dtype for n in _present(call, _INPUTS + _OUTPUTS)}
    if any(all(combo[k] == v for k, v in given.items()) for combo in call.combos()):
        return None
    rows = ", ".join(c.tag for c in call.combos())
    return (f"the dtypes {given} are not a row of {call.product}'s table (data-stats[-weight]: {rows}): gradOut and "
            f"gradInputOut in input's dtype, mean and rstd one dtype at least as wide, weightOptional input's or "
            f"FLOAT32, gradWeightOut and gradBiasOut weightOptional's (input's without one)")


def _stat_shape(shape: tuple) -> tuple:
    return tuple(shape[:1]) + (1,) + tuple(shape[2:])


def _same_shape(name: str, bit: int | None = None):
    def check(call) -> str | None:
        if bit is not None and not call["outputMask"][bit]:
            return None
        got, want = tuple(call[name].shape), tuple(call["input"].shape)
        return None if got == want else f"{name} has shape {shape_str(got)}; expected input's {shape_str(want)}"
    return check


def _check_stats(call) -> str | None:
    want = _stat_shape(tuple(call["input"].shape))
    return first(f"{p} has shape {shape_str(call[p].shape)}; expected input's with C = 1: {shape_str(want)}"
                 for p in ("mean", "rstd") if tuple(call[p].shape) != want)


def _per_channel(name: str, bit: int | None = None):
    def check(call) -> str | None:
        t, c = call[name], call["input"].shape[1]
        if t is None or (bit is not None and not call["outputMask"][bit]) or tuple(t.shape) == (c,):
            return None
        return f"{name} has shape {shape_str(t.shape)}; expected [C] = [{c}] (input's axis 1)"
    return check


def _flat(name: str):
    return set_args(**{name: lambda a: a[name].reshape(-1)})


def _rules() -> tuple:
    nulls = tuple(Violation(f"{n} is None", set_args(**{n: lambda a: None})) for n in _REQUIRED)
    masked = tuple(Violation(f"{n} is None", set_args(**{n: lambda a: None})) for n in _OUTPUTS)
    return (
        Rule(ACLNN_ERR_PARAM_NULLPTR, "gradOut, input, mean, rstd or outputMask is a null pointer.",
             lambda call: null_message(call, _REQUIRED), nulls),
        Rule(_CODE, "The length of outputMask is not 3.", _check_mask_length,
             (Violation("outputMask of 2", set_args(outputMask=lambda a: [True, True])),)),
        Rule(ACLNN_ERR_PARAM_NULLPTR, "An output whose outputMask bit is true is a null pointer.",
             _check_masked_nulls, masked),
        Rule(_CODE, "input has fewer than 2 or more than 8 dimensions, or another tensor more than 8.", _check_ranks,
             (Violation("1-d gradOut, input and gradInputOut", set_args(
                 **{n: (lambda n: lambda a: a[n].reshape(-1))(n) for n in ("gradOut", "input", "gradInputOut")})),)),
        Rule(_CODE, "The data type of a tensor is not FLOAT32, FLOAT16 or BFLOAT16 (no BFLOAT16 on Atlas inference "
             "and training).", _check_dtype_range, (
                 Violation("float64 gradOut", cast_args(("gradOut",), np.float64)),
                 Violation("int32 weightOptional", cast_args(("weightOptional",), np.int32)))),
        Rule(_CODE, "The dtypes are not a row of aclnnLayerNormBackward's table.", _check_dtype_table, (
            Violation("gradInputOut's dtype differs from input's", other_float("gradInputOut")),
            Violation("float16 statistics for float32 data", cast_args(("mean", "rstd"), np.float16)))),
        Rule(_CODE, "The shape of gradOut differs from input's.", _same_shape("gradOut"), (
            Violation("gradOut with one more pixel", set_args(gradOut=lambda a: np.ones(
                a["gradOut"].shape[:-1] + (a["gradOut"].shape[-1] + 1,), a["gradOut"].dtype))),)),
        Rule(_CODE, "mean or rstd is not input's shape with C = 1.", _check_stats,
             (Violation("mean flattened", _flat("mean")), Violation("rstd flattened", _flat("rstd")))),
        Rule(_CODE, "weightOptional is not null and its shape is not [C].", _per_channel("weightOptional"),
             (Violation("weightOptional one element short",
                        set_args(weightOptional=lambda a: a["weightOptional"][:-1])),)),
        Rule(_CODE, "outputMask[0] is true and gradInputOut's shape differs from input's.",
             _same_shape("gradInputOut", 0), (Violation("gradInputOut flattened", _flat("gradInputOut")),)),
        Rule(_CODE, "outputMask[1] is true and gradWeightOut's shape is not [C].", _per_channel("gradWeightOut", 1),
             (Violation("gradWeightOut with a leading 1", set_args(
                 gradWeightOut=lambda a: a["gradWeightOut"][None])),)),
        Rule(_CODE, "outputMask[2] is true and gradBiasOut's shape is not [C].", _per_channel("gradBiasOut", 2),
             (Violation("gradBiasOut one element short", set_args(gradBiasOut=lambda a: a["gradBiasOut"][:-1])),)),
    )


def _per_channel_out(tensors: dict, attrs: dict):
    """gradWeightOut/gradBiasOut: [C], weightOptional's dtype (input's without one)."""
    x = tensors["input"]
    if x is None or len(x.shape) < 2:
        return None
    weight = tensors["weightOptional"]
    return (x.shape[1],), (weight.dtype if weight is not None else x.dtype)


_DT = "FLOAT32, FLOAT16, BFLOAT16 (no BFLOAT16 on Atlas inference/training)"
API = ApiSpec(
    params=(
        Param("gradOut", INPUT, "The gradient (`dy`); input's shape and dtype.", "dy", _DT, "2-8"),
        Param("input", INPUT, "The forward input (`x`), [N, C, spatial...].", "x", _DT, "2-8"),
        Param("mean", INPUT, "The forward's mean, input's shape with C = 1, at least input's bit width.", "mean",
              _DT, "2-8"),
        Param("rstd", INPUT, "The forward's 1/sqrt(var + eps); mean's shape and dtype.", "rstd", _DT, "2-8"),
        Param("weightOptional", INPUT, "The weight (gamma), [C], input's dtype or FLOAT32; null: ones.", "gamma",
              _DT, "1", optional=True),
        Param("outputMask", MASK, "Three bools: whether to compute gradInputOut, gradWeightOut, gradBiasOut."),
        Param("gradInputOut", OUTPUT, "The gradient of input; input's shape and dtype.", "dx", _DT, "2-8",
              mask_bit=0),
        Param("gradWeightOut", OUTPUT, "The gradient of weight, [C], weight's dtype (input's without a weight).",
              "dgamma", _DT, "1", mask_bit=1),
        Param("gradBiasOut", OUTPUT, "The gradient of bias; like gradWeightOut.", "dbeta", _DT, "1", mask_bit=2),
    ),
    rules=_rules(),
    problem=lambda call: Problem(tuple(call["input"].shape)),
    kernel_shapes=kernel_shapes,
    description="Backward of LayerNormChannels: gradInputOut, gradWeightOut and gradBiasOut, each behind "
                "outputMask.",
    fill={"gamma": 1.0},
    pythonic=Pythonic(
        allocate={"gradInputOut": lambda t, attrs: None if t["input"] is None else (t["input"].shape, t["input"].dtype),
                  "gradWeightOut": _per_channel_out, "gradBiasOut": _per_channel_out},
        defaults={"output_mask": (True, True, True)}),
)
