"""aclnnRmsNormGradQuant: the aclnn face: parameters in the document's order, rules with their
status codes and example violations, how a call maps onto the kernel.

Sources (hicann/ops-nn @ e5c3fa9327ea95ba26d06227e746923580d10921, norm/rms_norm_grad_quant/):
the document's two error lines (161001 null, 161002 dtype), op_api/aclnn_rms_norm_grad_quant.cpp
(CheckNotNull on every tensor but offsetXOptional; a gamma with a 0 dimension returns success
before any kernel; no dtype or shape check of its own) and the Ascend 950 tiling
op_host/rms_norm_grad_quant_regbase_tiling.cpp (CheckInputsShape, CheckInputsDtype, the
quant_mode attribute), whose refusals opgen reports as rms_norm_grad does its tiling's
(ACLNN_ERR_INNER_TILING_ERROR). docs/validation-vs-cann.md lists where opgen departs.
"""
from __future__ import annotations

import numpy as np

from opgen.apispec import (ACLNN_ERR_INNER_TILING_ERROR, ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR, ATTR,
                           INPUT, OUTPUT, ApiSpec, Param, Pythonic, Rule, Violation, cast_args, dtype_message, first,
                           null_message, set_args, shape_str)
from opgen.dtypes import CANN_NAMES
from opgen.ops.rms_norm_grad_quant.kernel import Problem, kernel_shapes

_SHAPE_DOC = "ops-nn rms_norm_grad_quant_regbase_tiling.cpp CheckInputsShape"
_REQUIRED = ("dy", "x", "rstd", "gamma", "scalesX", "dxOut", "dgammaOut")
_TENSORS = ("dy", "x", "rstd", "gamma", "scalesX", "offsetXOptional", "dxOut", "dgammaOut")
_FLOATS = ("float32", "float16", "bfloat16")


def _check_dtypes(call) -> str | None:
    """The document's table (= the OpDef's rows = CheckInputsDtype): dy float, x = dy, rstd
    float32, gamma and scalesX float32 or dy's, offsetXOptional int32, dxOut int8 (HIFLOAT8:
    not offered), dgammaOut float32."""
    dy = call["dy"].dtype
    allowed = {"dy": _FLOATS, "x": (dy,), "rstd": ("float32",), "gamma": ("float32", dy), "scalesX": ("float32", dy),
               "offsetXOptional": ("int32",), "dxOut": ("int8",), "dgammaOut": ("float32",)}
    return first(dtype_message(p, call[p].dtype, allowed[p]) for p in _TENSORS if call[p] is not None)


def _check_ranks(call) -> str | None:
    """dy, x and dxOut 2-8 dims (MIN/MAX_DIMS_DY_X_DX); rstd and gamma 1-7 (the document)."""
    bounds = {"dy": (2, 8), "x": (2, 8), "dxOut": (2, 8), "rstd": (1, 7), "gamma": (1, 7), "dgammaOut": (1, 7)}
    return first(f"{p} has {call[p].ndim} dimensions; expected {lo} to {hi}"
                 for p, (lo, hi) in bounds.items() if not lo <= call[p].ndim <= hi)


def _same_shape(name: str, like: str):
    def check(call) -> str | None:
        got, want = call[name].shape, call[like].shape
        return None if got == want else f"{name} has shape {shape_str(got)}; expected {like}'s {shape_str(want)}"
    return check


def _check_split(call) -> str | None:
    """x's dims = rstd's dims + gamma's dims, rstd a prefix of x's shape, gamma a suffix."""
    x, rstd, gamma = call["x"].shape, call["rstd"].shape, call["gamma"].shape
    if len(x) == len(rstd) + len(gamma) and x[:len(rstd)] == rstd and x[len(rstd):] == gamma:
        return None
    return (f"x has shape {shape_str(x)}, rstd {shape_str(rstd)}, gamma {shape_str(gamma)}; expected "
            f"x = rstd's shape followed by gamma's (rstd_shape = x_shape[0:n], gamma_shape = x_shape[n:])")


def _check_one_element(call) -> str | None:
    """scalesX and offsetXOptional: shape [1] (CheckShapeBeSameWithOne)."""
    return first(f"{p} has shape {shape_str(call[p].shape)}; expected (1,)"
                 for p in ("scalesX", "offsetXOptional") if call[p] is not None and call[p].shape != (1,))


def _check_quant_mode(call) -> str | None:
    """Only "static"; a null quantMode is "static" (l0 rms_norm_grad_quant.cpp substitutes it)."""
    mode = call["quantMode"]
    return None if mode is None or mode == "static" else f"quantMode is {mode!r}; expected \"static\""


def _rules() -> tuple:
    null = lambda call: null_message(call, _REQUIRED)  # noqa: E731
    nulls = tuple(Violation(f"{p} is None", set_args(**{p: lambda a: None})) for p in _REQUIRED)
    dtypes = (
        Violation("dy is float64", cast_args(("dy", "x"), np.float64)),
        Violation("x's dtype differs from dy's", set_args(
            x=lambda a: a["x"].astype(np.float16 if a["x"].dtype != np.float16 else np.float32))),
        Violation("rstd is float16", cast_args(("rstd",), np.float16)),
        Violation("gamma is int32", cast_args(("gamma",), np.int32)),
        Violation("scalesX is float64", cast_args(("scalesX",), np.float64)),
        Violation("offsetXOptional is float32", cast_args(("offsetXOptional",), np.float32)),
        Violation("offsetXOptional is int8", cast_args(("offsetXOptional",), np.int8)),
        Violation("dxOut is float16 (no quantization)", cast_args(("dxOut",), np.float16)),
        Violation("dxOut is int32", cast_args(("dxOut",), np.int32)),
        Violation("dgammaOut is float16", cast_args(("dgammaOut",), np.float16)),
    )
    shapes = (
        Rule(ACLNN_ERR_INNER_TILING_ERROR, _SHAPE_DOC + " (CheckShapeDimNum: dy 2-8 dims; rstd, gamma 1-7)",
             _check_ranks, (
                 Violation("1-d dy/x/dxOut with 0-d rstd", set_args(
                     **{n: (lambda n: lambda a: a[n].reshape(-1)[: a["gamma"].size])(n) for n in ("dy", "x", "dxOut")},
                     rstd=lambda a: a["rstd"].reshape(-1)[:1].reshape(()))),
                 Violation("9-d dy/x/dxOut", set_args(**{n: (lambda n: lambda a: a[n].reshape((1,) * 8 + (-1,)))(n)
                                                         for n in ("dy", "x", "dxOut")})),
             )),
        Rule(ACLNN_ERR_INNER_TILING_ERROR, _SHAPE_DOC + " (x: the shape and dtype remain consistent with dy)",
             _same_shape("x", "dy"),
             (Violation("x has one row more", set_args(x=lambda a: np.concatenate([a["x"], a["x"][:1]]))),)),
        Rule(ACLNN_ERR_INNER_TILING_ERROR, _SHAPE_DOC + " (rstd_shape = x_shape[0:n], gamma_shape = x_shape[n:]: "
             "dimNum of x = rstd's + gamma's, CheckShapePrefixMatch, CheckShapeSuffixMatch)", _check_split, (
                 Violation("gamma one element short", set_args(gamma=lambda a: a["gamma"][..., :-1],
                                                               dgammaOut=lambda a: a["dgammaOut"][..., :-1])),
                 Violation("rstd keepdim (one dim too many)", set_args(rstd=lambda a: a["rstd"][..., None])),
                 Violation("rstd one element more", set_args(rstd=lambda a: np.ones(a["rstd"].size + 1, np.float32))),
             )),
        Rule(ACLNN_ERR_INNER_TILING_ERROR, _SHAPE_DOC + " (scalesX, offsetXOptional: shape [1])",
             _check_one_element, (
                 Violation("scalesX of two elements", set_args(scalesX=lambda a: np.repeat(a["scalesX"], 2))),
                 Violation("scalesX 0-d", set_args(scalesX=lambda a: a["scalesX"].reshape(()))),
                 Violation("offsetXOptional (1, 1)", set_args(offsetXOptional=lambda a: a["offsetXOptional"][None])),
             )),
        Rule(ACLNN_ERR_INNER_TILING_ERROR, _SHAPE_DOC + " (dxOut: the shape remains consistent with dy)",
             _same_shape("dxOut", "dy"),
             (Violation("dxOut flattened", set_args(dxOut=lambda a: a["dxOut"].reshape(-1))),)),
        Rule(ACLNN_ERR_INNER_TILING_ERROR, _SHAPE_DOC + " (dgammaOut: the shape remains consistent with gamma)",
             _same_shape("dgammaOut", "gamma"),
             (Violation("dgammaOut (1, cols)", set_args(dgammaOut=lambda a: a["dgammaOut"][None])),)),
        Rule(ACLNN_ERR_INNER_TILING_ERROR, "quantMode: only \"static\" is supported (the tiling's \"the attr of "
             "quant mode should be static\")", _check_quant_mode,
             (Violation("quantMode 'dynamic'", set_args(quantMode=lambda a: "dynamic")),)),
    )
    return (
        Rule(ACLNN_ERR_PARAM_NULLPTR, "If the input parameter is a required input, output, or required attribute "
             "and is a null pointer, 161001 is returned.", null, nulls),
        Rule(ACLNN_ERR_PARAM_INVALID, "The data type of the input or output is not within the supported range.",
             _check_dtypes, dtypes),
    ) + shapes


def _problem(call) -> Problem:
    return Problem(tuple(call["x"].shape), call["gamma"].ndim, bool(call["divMode"]))


_FL = "FLOAT32, FLOAT16, BFLOAT16"
API = ApiSpec(
    params=(
        Param("dy", INPUT, "The gradient returned from backward propagation (`dy`): 2-8 dims.", "dy", _FL, "2-8"),
        Param("x", INPUT, "The forward input (`x`); dy's shape and dtype.", "x", _FL, "2-8"),
        Param("rstd", INPUT, "The forward's 1/Rms(x): x's leading dims, rstd_shape = x_shape[0:n].", "rstd",
              "FLOAT32", "1-7"),
        Param("gamma", INPUT, "The forward's weight (`g`), gamma_shape = x_shape[n:]; float32 or dy's dtype.",
              "gamma", _FL, "1-7"),
        Param("scalesX", INPUT, "The quantization scale (`scales_x`), shape [1]; float32 or dy's dtype.",
              "scales_x", _FL, "1"),
        Param("offsetXOptional", INPUT, "The quantization zero point (`offset_x`), shape [1]; null: 0.", "offset_x",
              CANN_NAMES["int32"], "1", optional=True),
        Param("quantMode", ATTR, "The quantization mode: only \"static\" (null reads as \"static\").",
              value_type="str"),
        Param("divMode", ATTR, "true: dx / scalesX + offset; false: dx * scalesX + offset.", value_type="bool"),
        Param("dxOut", OUTPUT, "The gradient of x, quantized: round half to even, saturated; dy's shape.", "dx",
              CANN_NAMES["int8"], "2-8"),
        Param("dgammaOut", OUTPUT, "The gradient of gamma (`dg`), float32; gamma's shape.", "dgamma", "FLOAT32",
              "1-7"),
    ),
    rules=_rules(),
    problem=_problem,
    kernel_shapes=kernel_shapes,
    description="Backward of RmsNorm with dx quantized to int8: dxOut = round(dx / scalesX + offsetX) (divMode) "
                "or round(dx * scalesX + offsetX), and dgammaOut.",
    fill={"offset_x": 0.0},
    attribute_inputs={"div_mode": lambda call: 1.0 if call["divMode"] else 0.0},
    pythonic=Pythonic(
        allocate={
            "dxOut": lambda t, attrs: None if t["dy"] is None else (t["dy"].shape, "int8"),
            "dgammaOut": lambda t, attrs: None if t["gamma"] is None else (t["gamma"].shape, "float32"),
        },
        defaults={"quant_mode": "static", "div_mode": True}),
)
