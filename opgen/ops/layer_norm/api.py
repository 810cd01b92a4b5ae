"""aclnnLayerNorm: the aclnn face: parameters in the document's order, rules with their status
codes and example violations, how a call maps onto the kernel.

The document is hicann/ops-nn norm/layer_norm_v4/docs/aclnnLayerNorm&aclnnLayerNormWithImplMode.md
(aclnnLayerNorm only: no implMode). Its error table: 161001 for a null input,
normalizedShape or out; 161002 for more than 8 dims, a dtype outside the range,
normalizedShape shorter than 1, weight/bias not shaped like normalizedShape, input's rank
below normalizedShape's length, input's trailing dims not normalizedShape, out not shaped
like input. Interpretations:
* meanOutOptional and rstdOutOptional: opgen's kernel writes both, and opgen's generic
  layers have no "null output" that is neither masked nor flagged, so a null one is
  refused (161001, the message says why) rather than computed into scratch.
* Their shape: [A1..Ai, 1..1] (the Parameters table), checked here (161002) as out's is.
* Dtypes: the document's rows (statistics in input's dtype; weight and bias input's or
  FLOAT32, the same when both are given) plus opgen's float32-statistics rows for half
  data (kernel.COMBOS), which aclnnLayerNormBackward takes on every product; CANN would
  refuse those rows (161002). A null weight/bias is ones/zeros (the document builds them).
* eps: any double, read as float32 by the kernel.
"""
from __future__ import annotations

import operator

import numpy as np

from opgen.apispec import (ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR, ATTR, INPUT, OUTPUT, ApiSpec, Param,
                           Pythonic, Rule, Violation, cast_args, dtype_message, first, other_float, set_args,
                           shape_str)
from opgen.dtypes import BFLOAT16, FLOAT16, FLOAT32
from opgen.ops.layer_norm.kernel import Problem, kernel_shapes

_TENSORS = ("input", "weightOptional", "biasOptional", "out", "meanOutOptional", "rstdOutOptional")
_KERNEL = dict(zip(_TENSORS, ("x", "gamma", "beta", "y", "mean", "rstd")))
_REQUIRED = ("input", "normalizedShape", "out")
_STATS = ("meanOutOptional", "rstdOutOptional")
_CODE = ACLNN_ERR_PARAM_INVALID
_NO_BF16 = ("AtlasTraining",)


def _given(call, names=_TENSORS) -> list:
    return [n for n in names if call[n] is not None]


def _norm(call) -> tuple:
    return tuple(call["normalizedShape"])


def _check_nulls(call) -> str | None:
    bad = first(f"{p} is a null pointer" for p in _REQUIRED if call[p] is None)
    if bad:
        return bad
    return first(f"{p} is a null pointer: opgen's kernel writes the statistics, so opgen requires the tensor "
                 f"(CANN allows null)" for p in _STATS if call[p] is None)


def _check_ranks(call) -> str | None:
    bad = first(f"{p} has {call[p].ndim} dimensions; expected at most 8" for p in _given(call) if call[p].ndim > 8)
    if bad:
        return bad
    return None if len(_norm(call)) <= 8 else f"normalizedShape has {len(_norm(call))} elements; expected at most 8"


def _check_dtype_range(call) -> str | None:
    floats = (FLOAT32, FLOAT16) if call.product in _NO_BF16 else (FLOAT32, FLOAT16, BFLOAT16)
    why = f" on {call.product} (no BFLOAT16 there)" if call.product in _NO_BF16 else ""
    return first(dtype_message(p, call[p].dtype, floats, why) for p in _given(call))


def _check_dtype_table(call) -> str | None:
    """The given tensors' dtypes are a row of the product's table (the document's relations:
    out and the statistics input's dtype, weight/bias input's or FLOAT32 and alike; plus
    opgen's float32-statistics rows)."""
    names = _given(call)
    if any(all(c[_KERNEL[p]] == call[p].dtype for p in names) for c in call.combos()):
        return None
    rows = ", ".join(c.tag for c in call.combos())
    given = "/".join(f"{p}={call[p].dtype}" for p in names)
    return (f"the dtypes {given} are not a row of {call.product}'s table (data-stats[-weight]: {rows}): out in "
            f"input's dtype, meanOut/rstdOut input's (or FLOAT32: opgen's rows), weight and bias input's or "
            f"FLOAT32 and the same")


def _check_norm_length(call) -> str | None:
    return None if len(_norm(call)) >= 1 else "normalizedShape has 0 elements; expected at least 1"


def _like_norm(name: str):
    def check(call) -> str | None:
        t, norm = call[name], _norm(call)
        if t is None or tuple(t.shape) == norm:
            return None
        return f"{name} has shape {shape_str(t.shape)}; expected normalizedShape {shape_str(norm)}"
    return check


def _check_input_rank(call) -> str | None:
    x, n = call["input"].ndim, len(_norm(call))
    return None if x >= n else f"input has {x} dimensions; expected at least len(normalizedShape) = {n}"


def _check_trailing(call) -> str | None:
    shape, norm = tuple(call["input"].shape), _norm(call)
    tail = shape[len(shape) - len(norm):]
    return None if tail == norm else (f"input has shape {shape_str(shape)}, whose last {len(norm)} dimensions "
                                      f"{shape_str(tail)} differ from normalizedShape {shape_str(norm)}")


def _check_out(call) -> str | None:
    got, want = call["out"].shape, call["input"].shape
    return None if got == want else f"out has shape {shape_str(got)}; expected input's {shape_str(want)}"


def _stat_shape(call) -> tuple:
    x, j = tuple(call["input"].shape), len(_norm(call))
    return x[: len(x) - j] + (1,) * j


def _check_stats(call) -> str | None:
    want = _stat_shape(call)
    return first(f"{p} has shape {shape_str(call[p].shape)}; expected input's leading dims then a 1 per "
                 f"normalized dim: {shape_str(want)}" for p in _STATS if tuple(call[p].shape) != want)


def _nine_dims(*names):
    return set_args(**{n: (lambda n: lambda a: a[n].reshape((1,) * (9 - a[n].ndim) + a[n].shape))(n) for n in names})


def _rules() -> tuple:
    nulls = tuple(Violation(f"{p} is None", set_args(**{p: lambda a: None})) for p in _REQUIRED + _STATS)
    return (
        Rule(ACLNN_ERR_PARAM_NULLPTR, "The passed input, normalizedShape or out is a null pointer (opgen: "
             "meanOutOptional and rstdOutOptional too, see api.py).", _check_nulls, nulls),
        Rule(_CODE, "input, normalizedShape, weightOptional, biasOptional, out, meanOutOptional, rstdOutOptional "
             "have more than 8 dimensions.", _check_ranks, (
                 Violation("9-d input, out and statistics", _nine_dims("input", "out", *_STATS)),
                 Violation("normalizedShape of 9", set_args(normalizedShape=lambda a: [1] * 9)))),
        Rule(_CODE, "The data type of input, weightOptional, biasOptional, out, meanOutOptional or rstdOutOptional "
             "is not within the supported range (no BFLOAT16 on Atlas training).", _check_dtype_range, (
                 Violation("float64 input", cast_args(("input",), np.float64)),
                 Violation("int32 weightOptional", cast_args(("weightOptional",), np.int32)),
                 Violation("bfloat16 everywhere on Atlas training", cast_args(
                     ("input", "weightOptional", "biasOptional", "out"), "bfloat16"), _NO_BF16))),
        Rule(_CODE, "The dtypes do not meet the Parameters table: out, meanOut, rstdOut in input's dtype (opgen: "
             "float32 statistics too); weight and bias input's or FLOAT32, the same when both are given.",
             _check_dtype_table, (
                 Violation("out's dtype differs from input's", other_float("out")),
                 Violation("biasOptional's dtype differs from weightOptional's", other_float("biasOptional")),
                 Violation("float16 statistics for float32 data", cast_args(_STATS, np.float16)))),
        Rule(_CODE, "normalizedShape has fewer than 1 dimension.", _check_norm_length,
             (Violation("empty normalizedShape", set_args(normalizedShape=lambda a: [])),)),
        Rule(_CODE, "weightOptional is not null and its shape differs from normalizedShape.",
             _like_norm("weightOptional"), (
                 Violation("weightOptional with a leading 1",
                           set_args(weightOptional=lambda a: a["weightOptional"][None])),)),
        Rule(_CODE, "biasOptional is not null and its shape differs from normalizedShape.",
             _like_norm("biasOptional"), (
                 Violation("biasOptional one element short", set_args(biasOptional=lambda a: a["biasOptional"][..., :-1])),)),
        Rule(_CODE, "input's rank is smaller than the length of normalizedShape.", _check_input_rank,
             (Violation("normalizedShape longer than input's rank", set_args(
                 normalizedShape=lambda a: [1] * (a["input"].ndim + 1 - len(a["normalizedShape"]))
                 + list(a["normalizedShape"]))),)),
        Rule(_CODE, "input's shape, right-aligned with normalizedShape, differs in some dimension.", _check_trailing, (
            Violation("normalizedShape's last value one more", set_args(
                normalizedShape=lambda a: list(a["normalizedShape"][:-1]) + [a["normalizedShape"][-1] + 1])),)),
        Rule(_CODE, "The shapes of input and out differ.", _check_out,
             (Violation("out flattened", set_args(out=lambda a: a["out"].reshape(-1))),)),
        Rule(_CODE, "meanOutOptional/rstdOutOptional are not [A1..Ai, 1..1] (the Parameters table).", _check_stats, (
            Violation("meanOutOptional flattened", set_args(meanOutOptional=lambda a: a["meanOutOptional"].reshape(-1))),
            Violation("rstdOutOptional one row more", set_args(rstdOutOptional=lambda a: np.ones(
                (a["rstdOutOptional"].shape[0] + 1,) + a["rstdOutOptional"].shape[1:], a["rstdOutOptional"].dtype))))),
    )


def _kernel_eps(call) -> float:
    with np.errstate(over="ignore"):
        return float(np.float32(call["eps"]))


def _norm_ndim(tensors: dict, attrs: dict) -> int | None:
    x, norm = tensors["input"], attrs.get("normalizedShape")
    if x is None or norm is None:
        return None
    try:
        return min(len([operator.index(d) for d in norm]), len(x.shape))
    except TypeError:
        return None


def _statistics(tensors: dict, attrs: dict):
    """meanOut/rstdOut: [A1..Ai, 1..1] in float32 (what aclnnLayerNormBackward takes, a row
    of every product's table for float32, float16 and bfloat16 data)."""
    j = _norm_ndim(tensors, attrs)
    if j is None:
        return None
    shape = tuple(tensors["input"].shape)
    return shape[: len(shape) - j] + (1,) * j, "float32"


def _problem(call) -> Problem:
    return Problem(tuple(call["input"].shape), len(_norm(call)), call["eps"])


_DT = "FLOAT32, FLOAT16, BFLOAT16 (no BFLOAT16 on Atlas training)"
API = ApiSpec(
    params=(
        Param("input", INPUT, "The input (`x`), [A1..Ai, R1..Rj].", "x", _DT, "1-8"),
        Param("normalizedShape", ATTR, "The normalized dims [R1..Rj]: 1 to 8 values equal to input's trailing dims.",
              value_type="ints"),
        Param("weightOptional", INPUT, "The weight, shaped like normalizedShape, input's dtype or FLOAT32; null: "
              "ones.", "gamma", _DT, "1-8", optional=True),
        Param("biasOptional", INPUT, "The bias, shaped like normalizedShape, weight's dtype; null: zeros.", "beta",
              _DT, "1-8", optional=True),
        Param("eps", ATTR, "Added to the variance (read as float32).", value_type="float"),
        Param("out", OUTPUT, "The normalized output; input's shape and dtype.", "y", _DT, "1-8"),
        Param("meanOutOptional", OUTPUT, "E[x] per row, [A1..Ai, 1..1]; input's dtype or FLOAT32 (opgen requires "
              "it).", "mean", _DT, "1-8"),
        Param("rstdOutOptional", OUTPUT, "1/sqrt(Var[x] + eps) per row, meanOut's shape and dtype (opgen requires "
              "it).", "rstd", _DT, "1-8"),
    ),
    rules=_rules(),
    problem=_problem,
    kernel_shapes=kernel_shapes,
    description="LayerNorm: out = (input - E[x]) / sqrt(Var[x] + eps) * weight + bias over normalizedShape, with "
                "meanOut and rstdOut.",
    fill={"gamma": 1.0, "beta": 0.0},
    attribute_inputs={"eps": _kernel_eps},
    pythonic=Pythonic(
        allocate={"out": lambda t, attrs: None if t["input"] is None else (t["input"].shape, t["input"].dtype),
                  "meanOutOptional": _statistics, "rstdOutOptional": _statistics},
        defaults={"eps": 1e-5}),
)
