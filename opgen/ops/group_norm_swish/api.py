"""aclnnGroupNormSwish: the aclnn face: parameters in the document's order, rules with their
status codes and example violations, how a call maps onto the kernel.

The document is hicann/ops-nn norm/group_norm_swish/docs/aclnnGroupNormSwish.md. Its error
table has two lines (161001: a null x, gamma, beta, yOut, meanOut or rstdOut; 161002: a dtype
out of range); the parameter table's constraints are enforced with 161002 too, as ops-nn's
op_api does for every invalid parameter. Interpretations:
* "x does not support empty tensors; dims 0 and 1 > 0": any x with no elements is refused.
* gamma and beta: one dtype, x's or FLOAT; yOut in x's dtype; meanOut and rstdOut in gamma's.
* dataFormatOptional ("recommended NCHW") is any str or None and not read: the layout is
  always (N, C, ...), as for aclnnGroupNormSwishGrad.
* eps and swishScale are read as float32 by the kernel (the document's doubles); eps has no
  documented range and is not checked.
"""
from __future__ import annotations

import math

import numpy as np

from opgen.apispec import (ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR, ATTR, INPUT, OUTPUT, ApiSpec,
                           Param, Pythonic, Rule, Violation, cast_args, dtype_message, first, null_message, set_args,
                           shape_str)
from opgen.ops.group_norm_swish.kernel import Problem, kernel_shapes

_KERNEL = {"x": "x", "gamma": "gamma", "beta": "beta", "yOut": "y", "meanOut": "mean", "rstdOut": "rstd"}
_REQUIRED = tuple(_KERNEL)
_CODE = ACLNN_ERR_PARAM_INVALID


def _check_dtypes(call) -> str | None:
    bad = first(dtype_message(p, call[p].dtype, ("float32", "float16", "bfloat16")) for p in _KERNEL)
    if bad:
        return bad
    if any(all(c[k] == call[p].dtype for p, k in _KERNEL.items()) for c in call.combos()):
        return None
    rows = "; ".join("/".join(c[k] for k in _KERNEL.values()) for c in call.combos())
    given = "/".join(call[p].dtype for p in _KERNEL)
    return (f"the dtypes of {'/'.join(_KERNEL)} ({given}) are not a row of {call.product}'s table (gamma and beta "
            f"one dtype, x's or float32; yOut x's; meanOut and rstdOut gamma's): {rows}")


def _n_c_hw(x_shape) -> tuple:
    return x_shape[0], x_shape[1], math.prod(x_shape[2:])


def _check_shapes(call) -> str | None:
    x, group = call["x"].shape, call["numGroups"]
    if not 2 <= len(x) <= 8:
        return f"x has {len(x)} dimensions; expected 2 to 8"
    if math.prod(x) == 0:
        return f"x has shape {shape_str(x)}; the op does not take empty tensors"
    n, c, _ = _n_c_hw(x)
    if group <= 0:
        return f"numGroups is {group}; expected > 0"
    if c % group:
        return f"x's C = {c} is not divisible by numGroups = {group}"
    if call["yOut"].shape != x:
        return f"yOut has shape {shape_str(call['yOut'].shape)}; expected x's {shape_str(x)}"
    wrong = first(f"{p} has {math.prod(call[p].shape)} elements; expected C = {c}"
                  for p in ("gamma", "beta") if math.prod(call[p].shape) != c)
    if wrong:
        return wrong
    return first(f"{p} has shape {shape_str(call[p].shape)}; expected (N, numGroups) = ({n}, {group})"
                 for p in ("meanOut", "rstdOut") if call[p].shape != (n, group))


def _rules() -> tuple:
    nulls = tuple(Violation(f"{p} is None", set_args(**{p: lambda a: None})) for p in _REQUIRED)
    dtypes = (
        Violation("x is float64", cast_args(("x", "yOut"), np.float64)),
        Violation("yOut is int32", cast_args(("yOut",), np.int32)),
        Violation("gamma float16, beta float32", set_args(gamma=lambda a: a["gamma"].astype(np.float16),
                                                          beta=lambda a: a["beta"].astype(np.float32))),
        Violation("meanOut in another dtype than gamma", set_args(meanOut=lambda a: a["meanOut"].astype(
            np.float16 if a["meanOut"].dtype != np.float16 else np.float32))),
    )
    shapes = (
        Violation("x 1-d", set_args(x=lambda a: a["x"].reshape(-1), yOut=lambda a: a["yOut"].reshape(-1))),
        Violation("x empty", set_args(x=lambda a: a["x"][:0], yOut=lambda a: a["yOut"][:0])),
        Violation("numGroups 0", set_args(numGroups=lambda a: 0)),
        Violation("C not divisible by numGroups", set_args(numGroups=lambda a: a["x"].shape[1] + 1)),
        Violation("yOut flattened", set_args(yOut=lambda a: a["yOut"].reshape(-1))),
        Violation("gamma one element short", set_args(gamma=lambda a: a["gamma"][:-1])),
        Violation("meanOut flattened", set_args(meanOut=lambda a: a["meanOut"].reshape(-1))),
    )
    return (
        Rule(ACLNN_ERR_PARAM_NULLPTR, "x, gamma, beta, yOut, meanOut or rstdOut is a null pointer.",
             lambda call: null_message(call, _REQUIRED), nulls),
        Rule(_CODE, "The dtypes of x, gamma, beta, yOut, meanOut, rstdOut are out of range: x in FLOAT16, FLOAT, "
             "BFLOAT16; gamma and beta one dtype, x's or FLOAT; yOut x's; meanOut and rstdOut gamma's.",
             _check_dtypes, dtypes),
        Rule(_CODE, "The parameter table's constraints: x 2-8 dimensions and not empty; numGroups > 0 and dividing "
             "C; yOut x's shape; gamma and beta C elements; meanOut and rstdOut (N, numGroups).",
             _check_shapes, shapes),
    )


def _problem(call) -> Problem:
    n, c, hw = _n_c_hw(call["x"].shape)
    return Problem(n, c, hw, call["numGroups"], call["eps"], call["swishScale"], call["activateSwish"])


def _float32(name: str):
    def value(call) -> float:
        with np.errstate(over="ignore"):
            return float(np.float32(call[name]))
    return value


def _statistics(tensors: dict, attrs: dict):
    """meanOut/rstdOut: (N, numGroups) in gamma's dtype (x's when gamma is absent: the
    161001 check follows)."""
    x, gamma = tensors["x"], tensors["gamma"]
    if x is None or x.ndim < 2:
        return None
    return (x.shape[0], attrs["numGroups"]), (gamma if gamma is not None else x).dtype


_DT = "FLOAT32, FLOAT16, BFLOAT16"
API = ApiSpec(
    params=(
        Param("x", INPUT, "The input, (N, C, ...) with 2-8 dimensions, not empty.", "x", _DT, "2-8"),
        Param("gamma", INPUT, "Per-channel scale, C elements, x's dtype or float32.", "gamma", _DT, "1"),
        Param("beta", INPUT, "Per-channel shift, C elements, gamma's dtype.", "beta", _DT, "1"),
        Param("numGroups", ATTR, "Groups C is divided into; > 0 and dividing C."),
        Param("dataFormatOptional", ATTR, "Data format (recommended NCHW); any str or None, not read: the layout "
              "is always (N, C, ...).", value_type="str"),
        Param("eps", ATTR, "Added to the variance (read as float32).", value_type="float"),
        Param("activateSwish", ATTR, "Whether the swish follows the GroupNorm.", value_type="bool"),
        Param("swishScale", ATTR, "The swish's s in z * sigmoid(s * z) (read as float32).", value_type="float"),
        Param("yOut", OUTPUT, "The output; x's shape and dtype.", "y", _DT, "2-8"),
        Param("meanOut", OUTPUT, "Each group's mean, (N, numGroups), gamma's dtype.", "mean", _DT, "2"),
        Param("rstdOut", OUTPUT, "Each group's 1 / sqrt(var + eps), (N, numGroups), gamma's dtype.", "rstd", _DT,
              "2"),
    ),
    rules=_rules(),
    problem=_problem,
    kernel_shapes=kernel_shapes,
    description="GroupNorm then, when activateSwish, Swish: yOut = z * sigmoid(swishScale * z), with meanOut and "
                "rstdOut.",
    attribute_inputs={"eps": _float32("eps"), "swish_scale": _float32("swishScale"),
                      "swish_on": lambda call: 1.0 if call["activateSwish"] else 0.0},
    pythonic=Pythonic(
        allocate={"yOut": lambda t, attrs: None if t["x"] is None else (t["x"].shape, t["x"].dtype),
                  "meanOut": _statistics, "rstdOut": _statistics},
        defaults={"data_format": None, "eps": 1e-5, "activate_swish": True, "swish_scale": 1.0}),
)
