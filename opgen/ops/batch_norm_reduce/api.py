"""aclnnBatchNormReduce: the aclnn face: parameters in the document's order, rules with their
status codes and example violations, how a call maps onto the kernel.

Sources: the document norm/bn_training_reduce/docs/aclnnBatchNormReduce.md ("doc") and its
op_api op_api/aclnn_batch_norm_reduce.cpp ("op_api") at hicann/ops-nn e5c3fa932;
docs/validation-vs-cann.md "aclnnBatchNormReduce" lists each decision (BR1-BR4).
* The rules follow the op_api's order: nulls (161001, CheckNotNull l.46-52), then CheckParams
  (l.119-130): dtypes, formats, shapes (161002).
* x's format: NCHW or NHWC (CheckFormat l.67-71; the doc's table says NCHW only, BR1). A
  numpy array or torch tensor carries no format: a 4-D one is read as NCHW (CANN's harness
  tags tensors by rank, opgen.ops.batch_norm_backward.checks.format_of). An NHWC x has its
  channel last (CheckShape l.102-105).
* An empty x, sum or squareSum: the op_api fills sum and squareSum with zeros before any check
  (l.186-194); opgen checks first, then its kernel writes the zeros (BR2).
"""
from __future__ import annotations

import numpy as np

from opgen.apispec import (ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR, INPUT, OUTPUT, ApiSpec, Param,
                           Pythonic, Rule, Violation, cast_args, dtype_message, first, null_message, set_args,
                           shape_str)
from opgen.ops.batch_norm_backward.api import tagged
from opgen.ops.batch_norm_backward.checks import format_of
from opgen.ops.batch_norm_reduce.kernel import Problem, kernel_shapes

OUTPUTS = ("sum", "squareSum")
_X_FORMATS = ("NCHW", "NHWC")


def _channel_axis(x) -> int:
    """NHWC: the channel is the last axis (CheckShape l.102-105); otherwise axis 1."""
    return 3 if x.format == "NHWC" else 1


def _check_dtypes(call) -> str | None:
    """CheckDtypeValid (l.54-60): x FLOAT32/FLOAT16/BFLOAT16, sum and squareSum FLOAT32."""
    return (dtype_message("x", call["x"].dtype, ("float32", "float16", "bfloat16"))
            or first(dtype_message(n, call[n].dtype, ("float32",)) for n in OUTPUTS))


def _check_formats(call) -> str | None:
    """CheckFormat (l.62-84): x NCHW or NHWC, sum and squareSum ND."""
    fmt = format_of(call["x"])
    if fmt not in _X_FORMATS:
        how = " (an untagged tensor is read by its rank)" if call["x"].format == "ND" else ""
        return f"x has format {fmt}{how}; expected NCHW or NHWC"
    return first(f"{n} has format {call[n].format}; expected ND" for n in OUTPUTS if call[n].format != "ND")


def _check_shapes(call) -> str | None:
    """CheckShape (l.86-117): x 4-D, sum and squareSum 1-D of x's channel count."""
    x = call["x"]
    if x.ndim != 4:
        return f"x has {x.ndim} dimensions; expected 4"
    bad = first(f"{n} has {call[n].ndim} dimensions; expected 1" for n in OUTPUTS if call[n].ndim != 1)
    if bad:
        return bad
    axis = _channel_axis(x)
    c = x.shape[axis]
    return first(f"{n} has shape {shape_str(call[n].shape)}; expected ({c},), x's channel axis (axis {axis})"
                 for n in OUTPUTS if tuple(call[n].shape) != (c,))


def _null(name):
    return set_args(**{name: lambda a: None})


def _tag(fmt: str, *names):
    """A mutate function: the named arrays as aclTensors tagged ``fmt`` (numpy arrays carry no format)."""
    return set_args(**{n: (lambda n: lambda a: tagged(a[n], fmt))(n) for n in names})


def _rules() -> tuple:
    return (
        Rule(ACLNN_ERR_PARAM_NULLPTR, "x, sum or squareSum is a null pointer. (doc l.160: 161001, a required input or "
             "output is a null pointer; CheckNotNull l.46-52)", lambda call: null_message(call, ("x",) + OUTPUTS),
             tuple(Violation(f"{n} is None", _null(n)) for n in ("x",) + OUTPUTS)),
        Rule(ACLNN_ERR_PARAM_INVALID, "An input or output dtype is outside the supported range: x FLOAT32, "
             "FLOAT16 or BFLOAT16, sum and squareSum FLOAT32. (doc l.165; CheckDtypeValid l.54-60)",
             _check_dtypes, (
                 Violation("float64 x", cast_args(("x",), np.float64)),
                 Violation("float16 sum", cast_args(("sum",), np.float16)),
                 Violation("bfloat16 squareSum", cast_args(("squareSum",), "bfloat16")))),
        Rule(ACLNN_ERR_PARAM_INVALID, "An input or output format is outside the supported range: x NCHW or NHWC, "
             "sum and squareSum ND. (doc l.168, l.91: NCHW only, BR1; CheckFormat l.62-84)", _check_formats, (
                 Violation("x NCDHW", _tag("NCDHW", "x")),
                 Violation("x FRACTAL_NZ", _tag("FRACTAL_NZ", "x")),
                 Violation("sum NCHW", _tag("NCHW", "sum")))),
        Rule(ACLNN_ERR_PARAM_INVALID, "The shapes of input and outputs do not relate as expected: x not 4-D, sum or "
             "squareSum not 1-D of x's channel count. (doc l.171, l.99, l.109; CheckShape l.86-117)", _check_shapes, (
                 Violation("3-D x", set_args(x=lambda a: np.asarray(a["x"]).reshape(a["x"].shape[:2] + (-1,)))),
                 Violation("sum one longer", set_args(sum=lambda a: np.zeros(a["sum"].size + 1, np.float32))),
                 Violation("squareSum (1, C)", set_args(squareSum=lambda a: np.asarray(a["squareSum"])[None])))),
    )


def _problem(call) -> Problem:
    return Problem(tuple(call["x"].shape), _channel_axis(call["x"]) != 1)


def _per_channel(tensors: dict, attrs: dict):
    """sum / squareSum: (C,) FLOAT32, C from x's channel axis (the last for an NHWC-tagged x)."""
    x = tensors["x"]
    if x is None or x.ndim != 4:
        return None
    return (x.shape[3 if getattr(x, "format", "ND") == "NHWC" else 1],), "float32"


API = ApiSpec(
    params=(
        Param("x", INPUT, "The data to sum: 4-D, NCHW (or NHWC: the channel last); may be empty.", "x",
              "FLOAT32, FLOAT16, BFLOAT16", "4"),
        Param("sum", OUTPUT, "sum of x per channel over N, H and W: (C,).", "sum", "FLOAT32", "1"),
        Param("squareSum", OUTPUT, "sum of x^2 per channel over N, H and W: (C,).", "square_sum", "FLOAT32", "1"),
    ),
    rules=_rules(),
    problem=_problem,
    kernel_shapes=kernel_shapes,
    description="The statistics half of SyncBatchNorm's forward: per-channel sum and squareSum of x.",
    pythonic=Pythonic(allocate={n: _per_channel for n in OUTPUTS}),
)
