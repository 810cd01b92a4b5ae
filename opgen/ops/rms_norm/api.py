"""aclnnRmsNorm: the aclnn face: parameters in the document's order, rules with their status
codes and example violations, how a call maps onto the kernel.

The document is hicann/ops-nn norm/rms_norm/docs/aclnnRmsNorm.md. Its error table has three
lines: a required tensor null (161001), a dtype outside the product's table (161002), and
"the parameters do not meet the Parameters table" (561002), which covers the shape lines:
x 1-8 dims, gamma = x_shape[n:] with n < x.dims(), yOut like x, rstdOut with x's rank, x's
leading n dims then 1s. Interpretations:
* epsilon: any double; the kernel reads it as float32 (CANN's kernel attribute is a float).
* Atlas inference: "x and gamma's last axis must be at least 32 bytes" (constraints).
* Empty tensors: x and yOut may be empty (the table says so); gamma may not ("不支持空Tensor").
"""
from __future__ import annotations

import numpy as np

from opgen.apispec import (ACLNN_ERR_INNER_TILING_ERROR, ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR, ATTR,
                           INPUT, OUTPUT, ApiSpec, Param, Pythonic, Rule, Violation, cast_args, dtype_message, first,
                           null_message, other_float, set_args, shape_str)
from opgen.ops.rms_norm.kernel import Problem, kernel_shapes

_TENSORS = ("x", "gamma", "yOut", "rstdOut")
_KERNEL = dict(zip(_TENSORS, ("x", "gamma", "y", "rstd")))
_SHAPE_DOC = "The parameters do not meet the requirements in Parameters."


def _n(call) -> int:
    return call["x"].ndim - call["gamma"].ndim


def _check_dtypes(call) -> str | None:
    floats = ("float32", "float16", "bfloat16")
    bad = first(dtype_message(p, call[p].dtype, floats) for p in _TENSORS)
    if bad:
        return bad
    got = {p: call[p].dtype for p in _TENSORS}
    if any(all(c[_KERNEL[p]] == got[p] for p in _TENSORS) for c in call.combos()):
        return None
    rows = "; ".join("/".join(c[_KERNEL[p]] for p in _TENSORS) for c in call.combos())
    given = "/".join(got[p] for p in _TENSORS)
    return f"the dtypes of x/gamma/yOut/rstdOut ({given}) are not a row of {call.product}'s table: {rows}"


def _check_ranks(call) -> str | None:
    return first(f"{p} has {call[p].ndim} dimensions; expected 1 to 8" for p in _TENSORS
                 if not 1 <= call[p].ndim <= 8)


def _check_gamma(call) -> str | None:
    x, gamma = call["x"].shape, call["gamma"].shape
    if len(gamma) <= len(x) and x[len(x) - len(gamma):] == gamma:    # n = 0 too: doc and tiling allow it (N1)
        return None
    return (f"gamma has shape {shape_str(gamma)}; expected x's trailing dimensions x_shape[n:] with "
            f"n < x.dims() (x has shape {shape_str(x)}, so e.g. {shape_str(x[-1:])})")


def _check_gamma_not_empty(call) -> str | None:
    return None if call["gamma"].size else f"gamma has shape {shape_str(call['gamma'].shape)}: no empty gamma"


def _check_y(call) -> str | None:
    got, want = call["yOut"].shape, call["x"].shape
    return None if got == want else f"yOut has shape {shape_str(got)}; expected x's {shape_str(want)}"


def _check_rstd(call) -> str | None:
    x, n = call["x"].shape, _n(call)
    want = x[:n] + (1,) * (len(x) - n)
    got = call["rstdOut"].shape
    return None if got == want else (f"rstdOut has shape {shape_str(got)}; expected x's first n = {n} dims then "
                                     f"1s: {shape_str(want)}")


def _check_last_axis(call) -> str | None:
    return first(f"{p}'s last axis is {call[p].shape[-1]} x {call[p].itemsize} bytes; Atlas inference "
                 f"products need at least 32 bytes" for p in ("x", "gamma")
                 if call[p].ndim and call[p].shape[-1] * call[p].itemsize < 32)


def _resized(last: int):
    """Every tensor rebuilt with a last axis of ``last`` elements (dtypes kept)."""
    def mutate(args):
        lead = args["x"].shape[:-1]
        for name in ("x", "yOut"):
            args[name] = np.ones(lead + (last,), args[name].dtype)
        args["gamma"] = np.ones((last,), args["gamma"].dtype)
        args["rstdOut"] = np.ones(lead + (1,), args["rstdOut"].dtype)
    return mutate


def _rules() -> tuple:
    nulls = tuple(Violation(f"{p} is None", set_args(**{p: lambda a: None})) for p in _TENSORS)
    dtypes = (
        Violation("x is float64", cast_args(("x",), np.float64)),
        Violation("yOut's dtype differs from x's", other_float("yOut")),
        Violation("rstdOut is float16", cast_args(("rstdOut",), np.float16)),
        Violation("int32 gamma", cast_args(("gamma",), np.int32)),
        Violation("bfloat16 data on Atlas inference", cast_args(("x", "gamma", "yOut"), "bfloat16"),
                  ("AtlasInference",)),
    )
    code = ACLNN_ERR_INNER_TILING_ERROR
    return (
        Rule(ACLNN_ERR_PARAM_NULLPTR, "A required input, output or attribute is a null pointer.",
             lambda call: null_message(call, _TENSORS), nulls),
        Rule(ACLNN_ERR_PARAM_INVALID, "The data type of an input or output is not within the supported range.",
             _check_dtypes, dtypes),
        Rule(code, _SHAPE_DOC + " (Dimension 1-8)", _check_ranks, (
            Violation("9-d x, yOut and rstdOut", set_args(**{n: (lambda n: lambda a: a[n].reshape((1,) * 7 + (-1,) + a[n].shape[-1:]))(n)
                                                      for n in ("x", "yOut", "rstdOut")})),)),
        Rule(code, _SHAPE_DOC + " (gamma_shape = x_shape[n:], n < x_shape.dims())", _check_gamma, (
            Violation("gamma one element short", set_args(gamma=lambda a: a["gamma"][..., :-1])),
            Violation("gamma longer than x", set_args(gamma=lambda a: np.ones((2,) + a["x"].shape,
                                                                              a["gamma"].dtype))))),
        Rule(code, _SHAPE_DOC + " (gamma: empty tensors not supported)", _check_gamma_not_empty, (
            Violation("zero columns", _resized(0)),)),
        Rule(code, _SHAPE_DOC + " (yOut: the shape is x's)", _check_y,
             (Violation("yOut flattened", set_args(yOut=lambda a: a["yOut"].reshape(-1))),)),
        Rule(code, _SHAPE_DOC + " (rstdOut: x's rank, the normalized dims 1)", _check_rstd, (
            Violation("rstdOut without its trailing 1s", set_args(rstdOut=lambda a: a["rstdOut"].reshape(
                a["x"].shape[:a["x"].ndim - a["gamma"].ndim]))),
            Violation("rstdOut one row more", set_args(rstdOut=lambda a: np.ones(
                (a["rstdOut"].shape[0] + 1,) + a["rstdOut"].shape[1:], np.float32))))),
        Rule(code, "Atlas inference products: the last axis of x and gamma must be at least 32 bytes.",
             _check_last_axis, (Violation("last axis of 4 elements", _resized(4)),), products=("AtlasInference",)),
    )


def _kernel_eps(call) -> float:
    """The kernel's eps: the double rounded to float32 (a C cast: quietly inf if out of range)."""
    with np.errstate(over="ignore"):
        return float(np.float32(call["epsilon"]))


_DATA = "FLOAT32, FLOAT16, BFLOAT16"
API = ApiSpec(
    params=(
        Param("x", INPUT, "The input to normalize (`x`).", "x", _DATA, "1-8"),
        Param("gamma", INPUT, "The scale (`gamma`); gamma_shape = x_shape[n:], n < x.dims(); not empty.", "gamma",
              _DATA, "1-8"),
        Param("epsilon", ATTR, "Added to mean(x^2) before the square root (default 1e-6); read as float32.",
              value_type="float"),
        Param("yOut", OUTPUT, "The normalized output (`RmsNorm(x)`); x's shape and dtype.", "y", _DATA, "1-8"),
        Param("rstdOut", OUTPUT, "1/Rms(x) per row: x's rank, the normalized (gamma's) dims 1.", "rstd", "FLOAT32",
              "1-8"),
    ),
    rules=_rules(),
    problem=lambda call: Problem(tuple(call["x"].shape), call["gamma"].ndim, call["epsilon"]),
    kernel_shapes=kernel_shapes,
    description="RmsNorm: y = x / sqrt(mean(x^2) + epsilon) * gamma, and rstd = 1 / sqrt(mean(x^2) + epsilon).",
    attribute_inputs={"eps": _kernel_eps},
    pythonic=Pythonic(
        allocate={
            "yOut": lambda t, attrs: None if t["x"] is None else (t["x"].shape, t["x"].dtype),
            "rstdOut": lambda t, attrs: None if t["x"] is None or t["gamma"] is None else (
                tuple(t["x"].shape[:t["x"].ndim - t["gamma"].ndim]) + (1,) * t["gamma"].ndim, "float32"),
        },
        defaults={"epsilon": 1e-6}),
)
