"""aclnnGemmaRmsNorm: the aclnn face: parameters in the document's order, rules with their status
codes and example violations, how a call maps onto the kernel.

The document is hicann/ops-nn norm/gemma_rms_norm/docs/aclnnGemmaRmsNorm.md ("doc"); its digest,
with the sources behind each decision, is docs/specs/aclnnGemmaRmsNorm.md. The aclnn layer is
generated from the OpDef (op_host/CMakeLists.txt l.12 ``ACLNNTYPE aclnn``), and its shape checks
are aclnnRmsNorm's tiling (``Tiling4GemmaRmsNorm`` calls ``CheckInputShape4RmsNorm``,
norm/rms_norm/op_host/rms_norm_tiling.cpp l.649-653). The doc's error table has three lines: a
required tensor null (161001), a dtype outside the table (161002), and "the parameters do not
meet the Parameters table" (561002), which covers x 1-8 dims, gamma = x_shape[n:] with
n < x.dims(), yOut like x, rstdOut x's first n dims. Interpretations (the digest's §11):
* gamma may cover all of x (n = 0): the doc's "n < x_shape.dims()" holds for n = 0, and the
  tiling and the infershape refuse only gamma.dims() > x.dims().
* rstdOut: the doc's text says x's first n dims, its C example passes the keepdim form (x's
  first n dims, then 1s), as CANN's infershape makes it; both hold the rows the kernel writes,
  so both are accepted.
* Empty tensors: the doc allows them on every tensor; the tiling refuses any zero dim, and
  the runtime skips the tiling only when every output is empty. So a zero in gamma's shape
  is refused while rstdOut has elements (x (2, 0), rstdOut (2, 1)); a zero in x's leading
  dims empties both outputs and succeeds.
* epsilon: any double; the kernel reads it as float32 (CANN's attribute is a Float). CANN's
  negative-epsilon check logs but never fails (``setEpsTiling`` returns GRAPH_FAILED from a
  bool function), so no status refuses one here either.
"""
from __future__ import annotations

import numpy as np

from opgen.apispec import (ACLNN_ERR_INNER_TILING_ERROR, ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR, ATTR,
                           INPUT, OUTPUT, ApiSpec, Param, Pythonic, Rule, Violation, cast_args, dtype_message, first,
                           null_message, other_float, set_args, shape_str)
from opgen.ops.gemma_rms_norm.kernel import Problem, kernel_shapes
# aclnnRmsNorm's parameters, names and rank rule are this op's too (the document says "compared
# with RmsNorm, gamma gets +1"): its tensor table and shared checks, not copies of them.
from opgen.ops.rms_norm.api import _KERNEL, _SHAPE_DOC, _TENSORS, _check_ranks, _n


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
    return (f"the dtypes of x/gamma/yOut/rstdOut ({given}) are not a row of {call.product}'s table: {rows} "
            f"(gamma and yOut in x's dtype, rstdOut float32)")


def _check_gamma(call) -> str | None:
    x, gamma = call["x"].shape, call["gamma"].shape
    if len(gamma) <= len(x) and x[len(x) - len(gamma):] == gamma:
        return None
    return (f"gamma has shape {shape_str(gamma)}; expected x's trailing dimensions x_shape[n:] with "
            f"n < x.dims() (x has shape {shape_str(x)}, so e.g. {shape_str(x[-1:])} or {shape_str(x)})")


def _check_gamma_empty(call) -> str | None:
    """CANN's tiling refuses a zero in gamma's shape whenever it runs; the runtime runs it
    unless every output is empty, and with a zero normalized dim yOut is empty already."""
    gamma, rstd = call["gamma"].shape, call["rstdOut"].shape
    if call["gamma"].size or not call["rstdOut"].size:
        return None
    return (f"gamma has shape {shape_str(gamma)}: an empty gamma is refused while rstdOut {shape_str(rstd)} has "
            f"elements (zero columns to normalize; an empty call is one whose every output is empty)")


def _check_y(call) -> str | None:
    got, want = call["yOut"].shape, call["x"].shape
    return None if got == want else f"yOut has shape {shape_str(got)}; expected x's {shape_str(want)}"


def _rstd_forms(call) -> tuple:
    """The rstdOut shapes the doc gives: x's first n dims (its text), then 1s on gamma's
    axes (its C example and CANN's infershape); the text's form only where it has a rank."""
    x, n = call["x"].shape, _n(call)
    keepdim = x[:n] + (1,) * (len(x) - n)
    return (keepdim, x[:n]) if n else (keepdim,)


def _check_rstd(call) -> str | None:
    forms, got = _rstd_forms(call), call["rstdOut"].shape
    if got in forms:
        return None
    return (f"rstdOut has shape {shape_str(got)}; expected x's first n = {_n(call)} dims, "
            f"{' or '.join(shape_str(f) for f in forms)}")


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
        Violation("float16 x and yOut with a float32 gamma (not a row of the doc's table)",
                  cast_args(("x", "yOut"), np.float16)),
    )
    code = ACLNN_ERR_INNER_TILING_ERROR
    return (
        Rule(ACLNN_ERR_PARAM_NULLPTR, "A required input, output or attribute is a null pointer.",
             lambda call: null_message(call, _TENSORS), nulls),
        Rule(ACLNN_ERR_PARAM_INVALID, "The data type of an input or output is not within the supported range.",
             _check_dtypes, dtypes),
        Rule(code, _SHAPE_DOC + " (x, gamma, yOut, rstdOut: dimension 1-8)", _check_ranks, (
            Violation("9-d x, yOut and rstdOut", set_args(**{n: (lambda n: lambda a: a[n].reshape((1,) * 7 + (-1,) + a[n].shape[-1:]))(n)
                                                      for n in ("x", "yOut", "rstdOut")})),)),
        Rule(code, _SHAPE_DOC + " (gamma: gamma_shape = x_shape[n:], n < x_shape.dims())", _check_gamma, (
            Violation("gamma one element short", set_args(gamma=lambda a: a["gamma"][..., :-1])),
            Violation("gamma of more dims than x",
                      set_args(gamma=lambda a: np.ones((1,) + a["x"].shape, a["gamma"].dtype))))),
        Rule(code, _SHAPE_DOC + " (gamma: empty tensors supported; CANN's tiling refuses a zero dim in gamma "
                                "unless every output is empty)", _check_gamma_empty, (
            Violation("zero columns with rows to write", _resized(0)),)),
        Rule(code, _SHAPE_DOC + " (yOut: shape and dtype the same as x's)", _check_y,
             (Violation("yOut flattened", set_args(yOut=lambda a: a["yOut"].reshape(-1))),)),
        Rule(code, _SHAPE_DOC + " (rstdOut: shape the same as x's first dims, x's dims minus gamma's)", _check_rstd, (
            Violation("rstdOut one row more", set_args(rstdOut=lambda a: np.ones(
                (a["rstdOut"].shape[0] + 1,) + a["rstdOut"].shape[1:], np.float32))),
            Violation("rstdOut of x's shape", set_args(rstdOut=lambda a: np.ones(a["x"].shape, np.float32))),
            Violation("rstdOut missing a leading unit dim of x", set_args(rstdOut=lambda a: np.ones(
                a["x"].shape[:1], np.float32))))),
    )


def _kernel_eps(call) -> float:
    """The kernel's eps: the double rounded to float32 (a C cast: quietly inf if out of range)."""
    with np.errstate(over="ignore"):
        return float(np.float32(call["epsilon"]))


_DATA = "FLOAT32, FLOAT16, BFLOAT16"
API = ApiSpec(
    params=(
        Param("x", INPUT, "The input to normalize (`x`); empty allowed.", "x", _DATA, "1-8"),
        Param("gamma", INPUT, "The scale (`gamma`; the kernel multiplies by 1 + gamma); gamma_shape = x_shape[n:], "
              "n < x.dims(); x's dtype.", "gamma", _DATA, "1-8"),
        Param("epsilon", ATTR, "Added to mean(x^2) before the square root (recommended 1e-6); read as float32.",
              value_type="float"),
        Param("yOut", OUTPUT, "The normalized output (`GemmaRmsNorm(x)`); x's shape and dtype.", "y", _DATA, "1-8"),
        Param("rstdOut", OUTPUT, "1/Rms(x) per row: x's first n dims (then 1s on gamma's dims, the keepdim form).",
              "rstd", "FLOAT32", "1-8"),
    ),
    rules=_rules(),
    problem=lambda call: Problem(tuple(call["x"].shape), call["gamma"].ndim, call["epsilon"]),
    kernel_shapes=kernel_shapes,
    description="GemmaRmsNorm: y = x / sqrt(mean(x^2) + epsilon) * (1 + gamma), and "
                "rstd = 1 / sqrt(mean(x^2) + epsilon).",
    attribute_inputs={"eps": _kernel_eps},
    pythonic=Pythonic(
        allocate={
            "yOut": lambda t, attrs: None if t["x"] is None else (t["x"].shape, t["x"].dtype),
            "rstdOut": lambda t, attrs: None if t["x"] is None or t["gamma"] is None else (
                tuple(t["x"].shape[:t["x"].ndim - t["gamma"].ndim]) + (1,) * t["gamma"].ndim, "float32"),
        },
        defaults={"epsilon": 1e-6}),
)
