"""aclnnRmsNormGrad: the aclnn face: parameters in the document's order, rules with their status
codes and example violations, how a call maps onto the kernel.
"""
from __future__ import annotations

import math

import numpy as np

from opgen.apispec import (ACLNN_ERR_INNER_TILING_ERROR, ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR, INPUT,
                           OUTPUT, ApiSpec, Param, Pythonic, Rule, Violation, cast_args, dtype_message, first, null_message,
                           other_float, set_args, shape_str)
from opgen.ops.rms_norm_grad.kernel import INPUTS, OUTPUTS, Problem, kernel_shapes

# ---- the aclnn API, as seed 000 documents it -------------------------------------------
# Interpretations (each quoted in the report; docs/validation-vs-cann.md lists every place
# where CANN's public sources, hicann/ops-nn, decided against or beyond the seed):
# * "Supports null Tensor" in the Parameters table renders 支持空Tensor, "supports EMPTY
#   tensors"; the return-code table makes every tensor required, so a null one is 161001.
# * rstd: "rstd_shape = x_shape[0:n]" is read as CANN's tiling reads it (CheckRstdShape and
#   Tiling4RmsNormGrad's rstd_shape != row_val in ops-nn rms_norm_grad_tiling.cpp), with
#   n = x.dims() - gamma.dims() and r = rstd.dims():
#     r < n:  rstd's dims are x's first r dims and x's dims r..n-1 are 1 (the seed example's
#             rstd (2,) for x (2, 1, 16); rstd () whenever x's first n dims are all 1);
#     r >= n: rstd's first n dims are x's first n dims and rstd holds prod(x_shape[0:n])
#             elements, so any further dims are 1 (the keepdim form (2, 1, 1)) unless x has
#             no rows at all.
#   The element count alone is not enough: rstd (6, 4) for x (4, 6, 8), gamma (8,) is 561002.
#   rstd's rank is therefore 0-8 (the tiling has no rank check of its own; 8 is aclTensor's).
# * The Chinese edition (003) says ranks 2-8 and no empty tensors; the English one (000)
#   stands: ranks 1-8, and empty tensors succeed (dgamma of zero rows is zeros), except
#   where the tiling refuses them on a real call: Atlas A2/A3 and Atlas inference have no
#   empty-tensor tiling (Tiling4RmsNormGrad: "Parameter dy does not support empty tensor"
#   when x has no rows but dgammaOut has elements to write). Only the Ascend 950's tiling
#   (regbase) handles zero rows. When every output is empty, CANN's runtime (nnopbase) runs
#   no tiling at all, so its "last axis can not be 0" never fires: such calls succeed.

_SHAPE_DOC = "The parameter does not meet the requirements in Parameters."
_TENSORS = ("dy", "x", "rstd", "gamma", "dxOut", "dgammaOut")


def _n(call) -> int:
    return call["x"].ndim - call["gamma"].ndim


def _check_dtypes(call) -> str | None:
    floats = ("float32", "float16", "bfloat16")
    bad = first(dtype_message(p, call[p].dtype, floats) for p in _TENSORS)
    if bad:
        return bad
    got = {p: call[p].dtype for p in _TENSORS}
    kernel = dict(zip(_TENSORS, INPUTS + OUTPUTS))
    if any(all(c[kernel[p]] == got[p] for p in _TENSORS) for c in call.combos()):
        return None
    rows = "; ".join("/".join(c[kernel[p]] for p in _TENSORS) for c in call.combos())
    given = "/".join(got[p] for p in _TENSORS)
    return (f"the dtypes of dy/x/rstd/gamma/dxOut/dgammaOut ({given}) are not a row of "
            f"{call.product}'s table: {rows}")


def _check_ranks(call) -> str | None:
    """Ranks 1-8 (CheckInputDim: x and gamma in [1, 8]); rstd 0-8, its shape rule decides."""
    def lowest(p):
        return 0 if p == "rstd" else 1
    return first(f"{p} has {call[p].ndim} dimensions; expected {lowest(p)} to 8"
                 for p in _TENSORS if not lowest(p) <= call[p].ndim <= 8)


def _check_gamma(call) -> str | None:
    x, gamma = call["x"].shape, call["gamma"].shape
    if len(gamma) <= len(x) and x[len(x) - len(gamma):] == gamma:
        return None
    return (f"gamma has shape {shape_str(gamma)}; expected x's trailing dimensions "
            f"x_shape[n:] with n < x.dims() (x has shape {shape_str(x)}, so e.g. {shape_str(x[-1:])})")


def _check_rstd(call) -> str | None:
    """CheckRstdShape + the rstd_shape != row_val check (ops-nn rms_norm_grad_tiling.cpp)."""
    x, rstd = call["x"].shape, call["rstd"].shape
    n, r = _n(call), len(rstd)
    if r < n:
        if rstd == x[:r] and all(d == 1 for d in x[r:n]):
            return None
        want = (f"with {r} < n dimensions rstd must be x's first {r} {shape_str(x[:r])} and x's dimensions "
                f"{r} to {n - 1} {shape_str(x[r:n])} must all be 1")
    else:
        rows = math.prod(x[:n])
        if rstd[:n] == x[:n] and math.prod(rstd) == rows:
            return None
        want = (f"with {r} >= n dimensions rstd's first {n} must be x's {shape_str(x[:n])} and any further ones "
                f"1 ({rows} elements; rstd has {math.prod(rstd)})")
    return (f"rstd has shape {shape_str(rstd)}; expected x_shape[0:n] = {shape_str(x[:n])} with n = x.dims() - "
            f"gamma.dims() = {n} (x has shape {shape_str(x)}): {want}")


def _same_shape(name: str, like: str):
    def check(call) -> str | None:
        got, want = call[name].shape, call[like].shape
        return None if got == want else f"{name} has shape {shape_str(got)}; expected {like}'s {shape_str(want)}"
    return check


def _check_last_axis(call) -> str | None:
    return first(f"{p}'s last axis is {call[p].shape[-1]} x {call[p].itemsize} bytes; Atlas inference "
                 f"products need at least 32 bytes" for p in ("x", "dy", "gamma")
                 if call[p].ndim and call[p].shape[-1] * call[p].itemsize < 32)


def _resized(last: int):
    """Every tensor rebuilt with a last axis of ``last`` elements (x keeps its dtype)."""
    def mutate(args):
        lead = args["x"].shape[:-1]
        for name in ("dy", "x", "dxOut"):
            args[name] = np.ones(lead + (last,), args[name].dtype)
        for name in ("gamma", "dgammaOut"):
            args[name] = np.ones((last,), args[name].dtype)
    return mutate


def _nine_dims(args) -> None:
    """dy, x and dxOut get 9 dimensions (x's rows spread over leading ones); gamma still fits."""
    for name in ("dy", "x", "dxOut"):
        a = args[name]
        args[name] = a.reshape((1,) * 7 + (-1,) + a.shape[-1:])


def _check_empty_rows(call) -> str | None:
    """Tiling4RmsNormGrad, non-regbase products: no rows is an empty tensor it refuses."""
    x, n = call["x"].shape, _n(call)
    if math.prod(x[:n]) or not math.prod(x[n:]):
        return None  # rows to compute, or nothing to write at all (every output empty)
    return (f"x has shape {shape_str(x)}, so no rows (x_shape[0:n] = {shape_str(x[:n])}); expected at least one "
            f"row on {call.product}, whose tiling has no empty-tensor path (only Ascend950's has) while dgammaOut "
            f"has {math.prod(x[n:])} elements to write")


def _no_rows(args) -> None:
    """dy, x, dxOut and rstd with a leading 0: zero rows, gamma and dgammaOut unchanged."""
    for name in ("dy", "x", "dxOut", "rstd"):
        a = args[name]
        args[name] = np.zeros((0,) + a.shape[1:], a.dtype)


def _scalar(a: np.ndarray) -> np.ndarray:
    """A 0-d array holding ``a``'s first element (an array, not a numpy scalar)."""
    return a.reshape(-1)[:1].reshape(())


def _n_args(args) -> int:
    return np.ndim(args["x"]) - np.ndim(args["gamma"])


def _rules_shapes() -> tuple:
    """The Parameters table's shape lines (561002), as CANN's tiling checks them."""
    rstd = (
        Violation("rstd one element more", set_args(rstd=lambda a: np.ones(a["rstd"].size + 1, np.float32))),
        Violation("rstd (1, rows): the right element count in other dims",
                  set_args(rstd=lambda a: np.ones((1, a["rstd"].size), np.float32))),
        Violation("rstd 0-d while x's leading dims are not all 1", set_args(rstd=lambda a: np.ones((), np.float32))),
        Violation("rstd keepdim with a further dim of 2",
                  set_args(rstd=lambda a: np.ones(a["x"].shape[:_n_args(a)] + (2,), np.float32))),
    )
    return (
        Rule(ACLNN_ERR_INNER_TILING_ERROR, _SHAPE_DOC + " (Dimension 1-8; rstd 0-8: CheckInputDim in ops-nn "
             "rms_norm_grad_tiling.cpp bounds x and gamma only)", _check_ranks, (
                 Violation("gamma and dgammaOut 0-d", set_args(gamma=lambda a: _scalar(a["gamma"]),
                                                              dgammaOut=lambda a: _scalar(a["dgammaOut"]))),
                 Violation("9-d rstd", set_args(rstd=lambda a: a["rstd"].reshape((1,) * 8 + (-1,)))),
                 Violation("9-d dy/x/dxOut", _nine_dims),
             )),
        Rule(ACLNN_ERR_INNER_TILING_ERROR, _SHAPE_DOC + " (x: the shape remains consistent with dy)",
             _same_shape("x", "dy"),
             (Violation("x has one row more", set_args(x=lambda a: np.concatenate([a["x"], a["x"][:1]]))),)),
        Rule(ACLNN_ERR_INNER_TILING_ERROR, _SHAPE_DOC + " (gamma_shape = x_shape[n:], n < x_shape.dims())",
             _check_gamma, (Violation("gamma one element short", set_args(gamma=lambda a: a["gamma"][..., :-1])),
                            Violation("gamma has more dims than x", set_args(
                                gamma=lambda a: a["gamma"].reshape((1,) * a["x"].ndim + a["gamma"].shape))))),
        Rule(ACLNN_ERR_INNER_TILING_ERROR, _SHAPE_DOC + " (rstd_shape = x_shape[0:n], read as ops-nn "
             "rms_norm_grad_tiling.cpp CheckRstdShape + Tiling4RmsNormGrad's rstd_shape != row_val)", _check_rstd,
             rstd),
        Rule(ACLNN_ERR_INNER_TILING_ERROR, _SHAPE_DOC + " (dxOut: the shape remains consistent with dy)",
             _same_shape("dxOut", "dy"),
             (Violation("dxOut flattened", set_args(dxOut=lambda a: a["dxOut"].reshape(-1))),)),
        Rule(ACLNN_ERR_INNER_TILING_ERROR, _SHAPE_DOC + " (dgammaOut: the shape remains consistent with gamma)",
             _same_shape("dgammaOut", "gamma"),
             (Violation("dgammaOut (1, cols)", set_args(dgammaOut=lambda a: a["dgammaOut"][None])),)),
        Rule(ACLNN_ERR_INNER_TILING_ERROR, "Atlas inference products: The last axis length of the x, dy, and gamma "
             "inputs must be greater than or equal to 32 bytes.", _check_last_axis,
             (Violation("last axis of 4 elements", _resized(4)),), products=("AtlasInference",)),
        Rule(ACLNN_ERR_INNER_TILING_ERROR, "ops-nn rms_norm_grad_tiling.cpp Tiling4RmsNormGrad (non-regbase "
             "products): \"Parameter dy does not support empty tensor\" when x has no rows",
             _check_empty_rows, (Violation("x with zero rows", _no_rows),),
             products=("AtlasA3", "AtlasA2", "AtlasInference")),
    )


def _api_rules() -> tuple:
    null = lambda call: null_message(call, _TENSORS)  # noqa: E731
    nulls = tuple(Violation(f"{p} is None", set_args(**{p: lambda a: None})) for p in _TENSORS)
    dtypes = (
        Violation("dy is float64", cast_args(("dy",), np.float64)),
        Violation("x's dtype differs from dy's", other_float("x")),
        Violation("rstd is float16", cast_args(("rstd",), np.float16)),
        Violation("dgammaOut is float16", cast_args(("dgammaOut",), np.float16)),
        Violation("dxOut's dtype differs from dy's", other_float("dxOut")),
        Violation("int32 gamma", cast_args(("gamma",), np.int32)),
        Violation("bfloat16 data on Atlas inference", cast_args(("dy", "x", "gamma", "dxOut"), "bfloat16"),
                  ("AtlasInference",)),
        Violation("float16 data with float32 gamma on Atlas inference", cast_args(("dy", "x", "dxOut"), np.float16),
                  ("AtlasInference",)),
    )
    return (
        Rule(ACLNN_ERR_PARAM_NULLPTR, "If the input parameter is a required input, output, or required attribute "
             "and is a null pointer, 161001 is returned.", null, nulls),
        Rule(ACLNN_ERR_PARAM_INVALID, "The data type of the input or output is not within the supported range.",
             _check_dtypes, dtypes),
    ) + _rules_shapes()

API = ApiSpec(
    params=(
        Param("dy", INPUT, "The gradient returned from backward propagation (`dy`).", "dy", "FLOAT32, FLOAT16, BFLOAT16", "1-8"),
        Param("x", INPUT, "The forward input (`x`); same shape as dy.", "x", "FLOAT32, FLOAT16, BFLOAT16", "1-8"),
        Param("rstd", INPUT, "The forward's 1/Rms(x); rstd_shape = x_shape[0:n] as CANN's tiling reads it: x's "
              "first rstd.dims() dims with x's other dims before n all 1, or x's first n dims then 1s "
              "(keepdim).", "rstd", "FLOAT32", "0-8"),
        Param("gamma", INPUT, "The forward's weight (`g`); gamma_shape = x_shape[n:].", "gamma", "FLOAT32, FLOAT16, BFLOAT16", "1-8"),
        Param("dxOut", OUTPUT, "The gradient of x (`dx`); same shape as dy.", "dx", "FLOAT32, FLOAT16, BFLOAT16", "1-8"),
        Param("dgammaOut", OUTPUT, "The gradient of gamma (`dg`); same shape as gamma.", "dgamma", "FLOAT32", "1-8"),
    ),
    rules=_api_rules(),
    problem=lambda call: Problem(tuple(call["x"].shape), call["gamma"].ndim),
    kernel_shapes=kernel_shapes,
    description="Backward of RmsNorm: dx and dgamma from dy, x, rstd and gamma.",
    pythonic=Pythonic(allocate={
        "dxOut": lambda t, attrs: None if t["dy"] is None else (t["dy"].shape, t["dy"].dtype),
        "dgammaOut": lambda t, attrs: None if t["gamma"] is None else (t["gamma"].shape, "float32"),
    }),
)
