"""LayerNormChannels: the call face: parameters, rules with their status codes and example
violations, how a call maps onto the kernel.

An opgen extension, not a CANN operator: CANN's aclnnLayerNorm normalizes input's trailing
dims only (normalizedShape), and no aclnn function normalizes axis 1 of NCHW data. The face
follows aclnnLayerNorm's (its parameter names, dtype rows and status codes: 161001 for a null
required tensor, 161002 for the rest) with the channel axis instead of normalizedShape:
input is [N, C, spatial...] (2 to 8 dims), weightOptional and biasOptional are [C],
meanOut and rstdOut input's shape with C = 1. It serves the Pythonic layer and opgen.torch's
LayerNorm2d (ConvNeXt's channels-first LayerNorm) without a permute copy.
"""
from __future__ import annotations

import numpy as np

from opgen.apispec import (ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR, ATTR, INPUT, OUTPUT, ApiSpec, Param,
                           Pythonic, Rule, Violation, cast_args, dtype_message, first, other_float, set_args,
                           shape_str)
from opgen.dtypes import BFLOAT16, FLOAT16, FLOAT32
from opgen.ops.layer_norm_channels.kernel import Problem, kernel_shapes

_TENSORS = ("input", "weightOptional", "biasOptional", "out", "meanOut", "rstdOut")
_KERNEL = dict(zip(_TENSORS, ("x", "gamma", "beta", "y", "mean", "rstd")))
_REQUIRED = ("input", "out", "meanOut", "rstdOut")
_STATS = ("meanOut", "rstdOut")
_CODE = ACLNN_ERR_PARAM_INVALID
_NO_BF16 = ("AtlasTraining",)


def _given(call, names=_TENSORS) -> list:
    return [n for n in names if call[n] is not None]


def _check_nulls(call) -> str | None:
    return first(f"{p} is a null pointer" for p in _REQUIRED if call[p] is None)


def _check_ranks(call) -> str | None:
    rank = call["input"].ndim
    if not 2 <= rank <= 8:
        return f"input has {rank} dimensions; expected 2 to 8 ([N, C, spatial...])"
    return first(f"{p} has {call[p].ndim} dimensions; expected at most 8" for p in _given(call) if call[p].ndim > 8)


def _check_dtype_range(call) -> str | None:
    floats = (FLOAT32, FLOAT16) if call.product in _NO_BF16 else (FLOAT32, FLOAT16, BFLOAT16)
    why = f" on {call.product} (no BFLOAT16 there)" if call.product in _NO_BF16 else ""
    return first(dtype_message(p, call[p].dtype, floats, why) for p in _given(call))


def _check_dtype_table(call) -> str | None:
    """The given tensors' dtypes are a row of the product's table (aclnnLayerNorm's rows)."""
    names = _given(call)
    if any(all(c[_KERNEL[p]] == call[p].dtype for p in names) for c in call.combos()):
        return None
    rows = ", ".join(c.tag for c in call.combos())
    given = "/".join(f"{p}={call[p].dtype}" for p in names)
    return (f"the dtypes {given} are not a row of {call.product}'s table (data-stats[-weight]: {rows}): out in "
            f"input's dtype, meanOut/rstdOut input's or FLOAT32, weight and bias input's or FLOAT32 and the same")


def _per_channel(name: str):
    def check(call) -> str | None:
        t, c = call[name], call["input"].shape[1]
        if t is None or tuple(t.shape) == (c,):
            return None
        return f"{name} has shape {shape_str(t.shape)}; expected [C] = [{c}] (input's axis 1)"
    return check


def _check_out(call) -> str | None:
    got, want = call["out"].shape, call["input"].shape
    return None if got == want else f"out has shape {shape_str(got)}; expected input's {shape_str(want)}"


def _stat_shape(shape: tuple) -> tuple:
    return tuple(shape[:1]) + (1,) + tuple(shape[2:])


def _check_stats(call) -> str | None:
    want = _stat_shape(tuple(call["input"].shape))
    return first(f"{p} has shape {shape_str(call[p].shape)}; expected input's with C = 1: {shape_str(want)}"
                 for p in _STATS if tuple(call[p].shape) != want)


def _rules() -> tuple:
    nulls = tuple(Violation(f"{p} is None", set_args(**{p: lambda a: None})) for p in _REQUIRED)
    return (
        Rule(ACLNN_ERR_PARAM_NULLPTR, "input, out, meanOut or rstdOut is a null pointer.", _check_nulls, nulls),
        Rule(_CODE, "input has fewer than 2 or more than 8 dimensions, or another tensor more than 8.", _check_ranks, (
            Violation("1-d input and out", set_args(input=lambda a: a["input"].reshape(-1),
                                                    out=lambda a: a["out"].reshape(-1))),
            Violation("9-d weightOptional", set_args(
                weightOptional=lambda a: a["weightOptional"].reshape((1,) * 8 + a["weightOptional"].shape))))),
        Rule(_CODE, "The data type of a tensor is not FLOAT32, FLOAT16 or BFLOAT16 (no BFLOAT16 on Atlas "
             "training).", _check_dtype_range, (
                 Violation("float64 input", cast_args(("input",), np.float64)),
                 Violation("int32 weightOptional", cast_args(("weightOptional",), np.int32)),
                 Violation("bfloat16 everywhere on Atlas training", cast_args(
                     ("input", "weightOptional", "biasOptional", "out"), "bfloat16"), _NO_BF16))),
        Rule(_CODE, "The dtypes are not a row of aclnnLayerNorm's table: out in input's dtype; meanOut, rstdOut "
             "input's or FLOAT32; weight and bias input's or FLOAT32, the same when both are given.",
             _check_dtype_table, (
                 Violation("out's dtype differs from input's", other_float("out")),
                 Violation("biasOptional's dtype differs from weightOptional's", other_float("biasOptional")),
                 Violation("float16 statistics for float32 data", cast_args(_STATS, np.float16)))),
        Rule(_CODE, "weightOptional is not null and its shape is not [C].", _per_channel("weightOptional"), (
            Violation("weightOptional with a leading 1", set_args(weightOptional=lambda a: a["weightOptional"][None])),
            Violation("weightOptional one element short",
                      set_args(weightOptional=lambda a: a["weightOptional"][:-1])))),
        Rule(_CODE, "biasOptional is not null and its shape is not [C].", _per_channel("biasOptional"),
             (Violation("biasOptional one element short", set_args(biasOptional=lambda a: a["biasOptional"][:-1])),)),
        Rule(_CODE, "The shapes of input and out differ.", _check_out,
             (Violation("out flattened", set_args(out=lambda a: a["out"].reshape(-1))),)),
        Rule(_CODE, "meanOut/rstdOut are not input's shape with C = 1.", _check_stats, (
            Violation("meanOut flattened", set_args(meanOut=lambda a: a["meanOut"].reshape(-1))),
            Violation("rstdOut with input's C", set_args(rstdOut=lambda a: np.ones(
                a["input"].shape, a["rstdOut"].dtype))))),
    )


def _kernel_eps(call) -> float:
    with np.errstate(over="ignore"):
        return float(np.float32(call["eps"]))


def _statistics(tensors: dict, attrs: dict):
    """meanOut/rstdOut: input's shape with C = 1, float32 (what LayerNormChannelsBackward
    takes with any data dtype)."""
    x = tensors["input"]
    if x is None or len(x.shape) < 2:
        return None
    return _stat_shape(tuple(x.shape)), "float32"


_DT = "FLOAT32, FLOAT16, BFLOAT16 (no BFLOAT16 on Atlas training)"
API = ApiSpec(
    params=(
        Param("input", INPUT, "The input (`x`), [N, C, spatial...].", "x", _DT, "2-8"),
        Param("weightOptional", INPUT, "The weight, [C], input's dtype or FLOAT32; null: ones.", "gamma", _DT, "1",
              optional=True),
        Param("biasOptional", INPUT, "The bias, [C], weight's dtype; null: zeros.", "beta", _DT, "1", optional=True),
        Param("eps", ATTR, "Added to the variance (read as float32).", value_type="float"),
        Param("out", OUTPUT, "The normalized output; input's shape and dtype.", "y", _DT, "2-8"),
        Param("meanOut", OUTPUT, "E[x] over the channels of each pixel; input's shape with C = 1, input's dtype or "
              "FLOAT32.", "mean", _DT, "2-8"),
        Param("rstdOut", OUTPUT, "1/sqrt(Var[x] + eps) over the channels of each pixel; meanOut's shape and dtype.",
              "rstd", _DT, "2-8"),
    ),
    rules=_rules(),
    problem=lambda call: Problem(tuple(call["input"].shape), call["eps"]),
    kernel_shapes=kernel_shapes,
    description="LayerNorm over the channel axis (axis 1) of NCHW data: out = (input - E[x]) / sqrt(Var[x] + eps) "
                "* weight[c] + bias[c], E and Var over C for each (n, spatial) position, with meanOut and rstdOut.",
    fill={"gamma": 1.0, "beta": 0.0},
    attribute_inputs={"eps": _kernel_eps},
    pythonic=Pythonic(
        allocate={"out": lambda t, attrs: None if t["input"] is None else (t["input"].shape, t["input"].dtype),
                  "meanOut": _statistics, "rstdOut": _statistics},
        defaults={"eps": 1e-6}),
)
