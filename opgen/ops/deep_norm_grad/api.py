"""aclnnDeepNormGrad: the aclnn face: parameters in the document's order, rules with their status
codes and example violations, how a call maps onto the kernel.

Sources (docs/specs/aclnnDeepNormGrad.md, the digest; docs/validation-vs-cann.md "aclnnDeepNormGrad", the
decisions): "doc" is hicann/ops-nn norm/deep_norm_grad/docs/aclnnDeepNormGrad.md, "t22" and
"t35" its arch22 (Atlas A2/A3/inference) and arch35 (Ascend 950) tilings, "def" the op
definition, at ops-nn e5c3fa9327ea. The aclnn layer is generated from the def, so nulls are
161001, dtypes outside the def's rows 161002, and every shape check, being the tiling's,
561002 (D2). CANN runs no tiling when every output is empty; opgen keeps the shape rules
then (D5, as R14) and only the zero-dim rule stands aside (D4).
The mean/rstd rule is the 950's on every product (D3): keepdim (dy's leading dims, then 1s),
mean == rstd. Outputs may be strided views (D6: CANN does not check; opgen writes them right).
"""
from __future__ import annotations

import math

import numpy as np

from opgen.apispec import (ACLNN_ERR_INNER_TILING_ERROR, ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR, ATTR,
                           INPUT, OUTPUT, ApiSpec, Param, Pythonic, Rule, Violation, cast_args, dtype_message, first,
                           null_message, other_float, set_args, shape_str)
from opgen.ops.deep_norm_grad.kernel import Problem, kernel_shapes

_INPUTS = ("dy", "x", "gx", "gamma", "mean", "rstd")
_OUTPUTS = ("dxOut", "dgxOut", "dbetaOut", "dgammaOut")
_TENSORS = _INPUTS + _OUTPUTS
_KERNEL = dict(zip(_TENSORS, ("dy", "x", "gx", "gamma", "mean", "rstd", "dx", "dgx", "dbeta", "dgamma")))
_LIKE_DY = ("x", "gx", "dxOut", "dgxOut")          # the data tensors: dy's dtype and shape
_STATS = ("mean", "rstd")
_SHAPE_LINE = ("Input and output shapes do not match, or are outside the supported rank range (doc l.292: "
               "161002; CANN's tiling returns 561002, D2)")


def _n(call) -> int:
    return call["dy"].ndim - call["gamma"].ndim


# ---- dtypes (161002) ----------------------------------------------------------------------

def _check_dtype_range(call) -> str | None:
    """Each tensor's dtype among those some row of the product's table gives it."""
    return first(dtype_message(p, call[p].dtype, tuple(dict.fromkeys(c[_KERNEL[p]] for c in call.combos())),
                               f" on {call.product}") for p in _TENSORS)


def _check_dtype_relations(call) -> str | None:
    """x, gx, gamma, dxOut and dgxOut have dy's dtype (every row of the table says so)."""
    dy = call["dy"].dtype
    return first(dtype_message(p, call[p].dtype, (dy,), " (dy's: every row of the table gives dy, x, gx, gamma, "
                                                        "dxOut and dgxOut one dtype)")
                 for p in ("x", "gx", "gamma", "dxOut", "dgxOut"))


# ---- shapes (561002, in the order of t35 CheckShapes) ---------------------------------------

def _check_ranks(call) -> str | None:
    dy, gamma = call["dy"].ndim, call["gamma"].ndim
    if not 2 <= dy <= 8:
        return f"dy has {dy} dimensions; expected 2 to 8"
    if not 1 <= gamma <= 7:
        return f"gamma has {gamma} dimensions; expected 1 to 7"
    if dy <= gamma:
        return (f"dy has {dy} dimensions and gamma {gamma}; expected dy to have more (gamma covers dy's trailing "
                f"dimensions, and at least one leading dimension remains)")
    return None


def _check_like_dy(call) -> str | None:
    want = call["dy"].shape
    return first(f"{p} has shape {shape_str(call[p].shape)}; expected dy's {shape_str(want)}"
                 for p in _LIKE_DY if call[p].shape != want)


def _check_stat_ranks(call) -> str | None:
    dy = call["dy"]
    return first(f"{p} has {call[p].ndim} dimensions; expected dy's {dy.ndim} (dy's first {_n(call)} dimensions, "
                 f"then 1s: {shape_str(_stat_shape(call))})" for p in _STATS if call[p].ndim != dy.ndim)


def _check_stats_alike(call) -> str | None:
    mean, rstd = call["mean"].shape, call["rstd"].shape
    return None if mean == rstd else f"rstd has shape {shape_str(rstd)}; expected mean's {shape_str(mean)}"


def _check_like_gamma(call) -> str | None:
    want = call["gamma"].shape
    return first(f"{p} has shape {shape_str(call[p].shape)}; expected gamma's {shape_str(want)}"
                 for p in ("dbetaOut", "dgammaOut") if call[p].shape != want)


def _all_outputs_empty(call) -> bool:
    """CANN's runtime skips tiling and kernel when every output is empty (opbase
    indv_executor.cpp l.1073-1082): then nothing of the tiling's is checked (D4)."""
    return all(call[p].size == 0 for p in _OUTPUTS)


def _check_no_zero_dim(call) -> str | None:
    dy = call["dy"].shape
    if _all_outputs_empty(call) or 0 not in dy:
        return None
    return (f"dy has shape {shape_str(dy)}, with a dimension of 0; expected none (the tilings refuse empty dy while "
            f"dbetaOut and dgammaOut have {call['dbetaOut'].size} elements to write; only a call whose every "
            f"output is empty succeeds)")


def _stat_shape(call) -> tuple:
    dy = call["dy"].shape
    n = max(_n(call), 0)
    return dy[:n] + (1,) * (len(dy) - n)


def _check_stat_leading(call) -> str | None:
    n, dy = _n(call), call["dy"].shape
    return first(f"{p} has shape {shape_str(call[p].shape)}; expected dy's first {n} dimensions {shape_str(dy[:n])} "
                 f"first (keepdim: {shape_str(_stat_shape(call))})" for p in _STATS if call[p].shape[:n] != dy[:n])


def _check_stat_trailing(call) -> str | None:
    n, k = _n(call), call["gamma"].ndim
    return first(f"{p} has shape {shape_str(call[p].shape)}; expected its last {k} dimensions (the normalized ones) "
                 f"to be 1: {shape_str(_stat_shape(call))}" for p in _STATS if any(d != 1 for d in call[p].shape[n:]))


def _check_gamma(call) -> str | None:
    n, dy, gamma = _n(call), call["dy"].shape, call["gamma"].shape
    if dy[n:] == gamma:
        return None
    return (f"gamma has shape {shape_str(gamma)}; expected dy's last {len(gamma)} dimensions {shape_str(dy[n:])} "
            f"(dy has shape {shape_str(dy)})")


# ---- example violations --------------------------------------------------------------------

def _reshape(names, shape_of):
    """A mutate function giving each named array the shape ``shape_of(args, array)`` (values kept
    where the count allows, else ones)."""
    def mutate(args):
        for name in names:
            a = args[name]
            shape = shape_of(args, a)
            args[name] = a.reshape(shape) if math.prod(shape) == a.size else np.ones(shape, a.dtype)
    return mutate


def _lead(args) -> int:
    return args["dy"].ndim - args["gamma"].ndim


def _resized_rows(rows: int):
    """dy, x, gx, dxOut, dgxOut, mean and rstd with ``rows`` in their first dimension."""
    return _reshape(_LIKE_DY + ("dy",) + _STATS, lambda args, a: (rows,) + a.shape[1:])


def _more_rows(args) -> None:
    _resized_rows(args["dy"].shape[0] + 1)(args)


def _padded_dims(total: int):
    """dy-like tensors and mean/rstd with leading 1s up to ``total`` dimensions."""
    return _reshape(_LIKE_DY + ("dy",) + _STATS, lambda args, a: (1,) * (total - a.ndim) + a.shape)


def _gamma_covering(ndim):
    """gamma, dbetaOut and dgammaOut 0-d (``ndim`` 0) or shaped like dy (None), with mean and
    rstd as the leading dims that leaves would make them: only the rank rule is broken."""
    def mutate(args):
        dy = args["dy"].shape
        gamma = () if ndim == 0 else dy
        _reshape(("gamma", "dbetaOut", "dgammaOut"), lambda a, t: gamma)(args)
        _reshape(_STATS, lambda a, t: dy if ndim == 0 else (1,) * len(dy))(args)
    return mutate


def _stats_last(size: int):
    """mean and rstd with a last dimension of ``size``."""
    return _reshape(_STATS, lambda args, a: a.shape[:-1] + (size,))


def _rules_nulls_dtypes() -> tuple:
    nulls = tuple(Violation(f"{p} is None", set_args(**{p: lambda a: None})) for p in _TENSORS)
    data = ("dy", "x", "gx", "gamma", "dxOut", "dgxOut")
    range_ = (
        Violation("float64 data (dy, x, gx, gamma, dxOut, dgxOut)", cast_args(data, np.float64)),
        Violation("int32 data", cast_args(data, np.int32)),
        Violation("mean is float16", cast_args(("mean",), np.float16)),
        Violation("rstd is bfloat16", cast_args(("rstd",), "bfloat16")),
        Violation("dbetaOut is float16", cast_args(("dbetaOut",), np.float16)),
        Violation("dgammaOut is bfloat16", cast_args(("dgammaOut",), "bfloat16")),
        Violation("bfloat16 data on Atlas inference", cast_args(data, "bfloat16"), ("AtlasInference",)),
    )
    relations = tuple(Violation(f"{p}'s dtype differs from dy's", other_float(p))
                      for p in ("x", "gx", "gamma", "dxOut", "dgxOut"))
    return (
        Rule(ACLNN_ERR_PARAM_NULLPTR, "If an argument is a required input, output or required attribute and is a "
             "null pointer, 161001 is returned. (doc l.284; every tensor is required)",
             lambda call: null_message(call, _TENSORS), nulls),
        Rule(ACLNN_ERR_PARAM_INVALID, "The dtype of an input or output is not in the supported range. (doc l.289; "
             "Atlas inference: no BFLOAT16, doc l.258-260)", _check_dtype_range, range_),
        Rule(ACLNN_ERR_PARAM_INVALID, "Input and output dtypes do not satisfy the constraints in the parameter "
             "description. (doc l.295: x, gx, gamma, dxOut, dgxOut have dy's dtype; def l.22-144)",
             _check_dtype_relations, relations),
    )


def _rules_shapes() -> tuple:
    code = ACLNN_ERR_INNER_TILING_ERROR
    return (
        Rule(code, f"{_SHAPE_LINE}: dy 2-8 dims, gamma 1-7, dy more than gamma (t22 l.356-365, l.383-386; t35 "
             "l.162-168)", _check_ranks, (
                 Violation("dy-like tensors, mean and rstd with 9 dims", _padded_dims(9)),
                 Violation("gamma, dbetaOut and dgammaOut 0-d (mean and rstd shaped like dy, as n = dy.dim "
                           "would have them)", _gamma_covering(0)),
                 Violation("gamma, dbetaOut and dgammaOut shaped like dy (dy.dim == gamma.dim; mean and rstd "
                           "all 1s, as n = 0 would have them)", _gamma_covering(None)))),
        Rule(code, f"{_SHAPE_LINE}: dy, x, gx, dxOut, dgxOut one shape (doc l.129, l.149, l.199, l.209: 'the same "
             "as x'; t22 l.368-372, l.405-415; t35 l.169-172)", _check_like_dy, (
                 Violation("x has one row more", set_args(x=lambda a: np.concatenate([a["x"], a["x"][:1]]))),
                 Violation("gx flattened", _reshape(("gx",), lambda args, a: (a.size,))),
                 Violation("dxOut with a leading 1", _reshape(("dxOut",), lambda args, a: (1,) + a.shape)),
                 Violation("dgxOut one column more", set_args(dgxOut=lambda a: np.zeros(
                     a["dgxOut"].shape[:-1] + (a["dgxOut"].shape[-1] + 1,), a["dgxOut"].dtype))))),
        Rule(code, f"{_SHAPE_LINE}: mean and rstd have dy's rank (doc l.172 '2-8' with l.169; t22 l.373-377; t35 "
             "l.173-176)", _check_stat_ranks, (
                 Violation("mean and rstd as dy's leading dims only", _reshape(
                     _STATS, lambda args, a: args["dy"].shape[:_lead(args)])),
                 Violation("mean and rstd with a trailing 1 more", _reshape(_STATS, lambda args, a: a.shape + (1,))))),
        Rule(code, f"{_SHAPE_LINE}: rstd's shape is mean's (doc l.179; t35 l.177-180; adopted on every product, D3)",
             _check_stats_alike, (Violation("rstd's last dim 2 (so also not 1)", _reshape(
                 ("rstd",), lambda args, a: a.shape[:-1] + (2,))),)),
        Rule(code, f"{_SHAPE_LINE}: dbetaOut and dgammaOut have gamma's shape (doc l.219, l.229; t22 l.378-382, "
             "l.458-468; t35 l.181-184)", _check_like_gamma, (
                 Violation("dgammaOut with a leading 1", _reshape(("dgammaOut",), lambda args, a: (1,) + a.shape)),
                 Violation("dbetaOut one element more", set_args(dbetaOut=lambda a: np.zeros(
                     a["dbetaOut"].size + 1, np.float32))))),
        Rule(code, "No dimension of dy is 0 while an output has elements (t22 l.401-404, t35 l.186-191 'Input dy "
             "shape can not be 0'; skipped when every output is empty, opbase indv_executor.cpp l.1073-1082; the "
             "doc's 'supports empty tensors' holds only then, D4)", _check_no_zero_dim,
             (Violation("zero rows (gamma and the column outputs keep their elements)", _resized_rows(0)),)),
        Rule(code, f"{_SHAPE_LINE}: mean's and rstd's first n = dy.dim - gamma.dim dims are dy's (doc l.169; t22 "
             "l.420-439; t35 l.195-201)", _check_stat_leading,
             (Violation("mean and rstd one row more", _reshape(
                 _STATS, lambda args, a: (a.shape[0] + 1,) + a.shape[1:])),)),
        Rule(code, f"{_SHAPE_LINE}: mean's and rstd's last gamma.dim dims are 1 (doc l.169 read as the forward's "
             "keepdim; t35 l.202-207, adopted on every product: t22 does not check, then reads by flat offset, D3)",
             _check_stat_trailing, (
                 Violation("mean and rstd with a last dim of 2", _stats_last(2)),
                 Violation("mean and rstd with a last dim of 0", _stats_last(0)))),
        Rule(code, f"{_SHAPE_LINE}: gamma is dy's last gamma.dim dims (doc l.159; t22 l.452-457; t35 l.209-217)",
             _check_gamma, (
                 Violation("gamma, dbetaOut and dgammaOut one element short", _reshape(
                     ("gamma", "dbetaOut", "dgammaOut"), lambda args, a: a.shape[:-1] + (a.shape[-1] - 1,))),
                 Violation("gamma, dbetaOut and dgammaOut (2, 2) for dy's (1, 4)", _reshape(
                     ("gamma", "dbetaOut", "dgammaOut"), lambda args, a: (2, a.size // 2))))),
    )


def _kernel_alpha(call) -> float:
    """The kernel's alpha: the double rounded to float32 as CANN's Float attribute (def l.78), an
    out-of-range value becoming inf as a C cast does (quietly: it is a valid call)."""
    with np.errstate(over="ignore"):
        return float(np.float32(call["alpha"]))


def _like(tensors: dict, name: str, dtype=None):
    """(shape, dtype) of an output allocated like input ``name`` (None without it: 161001 follows)."""
    t = tensors[name]
    return None if t is None else (t.shape, dtype or t.dtype)


_DATA = "FLOAT32, FLOAT16, BFLOAT16 (Atlas inference: FLOAT32, FLOAT16)"
API = ApiSpec(
    params=(
        Param("dy", INPUT, "The main gradient (`dy`); x's dtype and shape.", "dy", _DATA, "2-8"),
        Param("x", INPUT, "The forward's input `x`.", "x", _DATA, "2-8"),
        Param("gx", INPUT, "The forward's input `gx` (x' = alpha * x + gx); x's dtype and shape.", "gx", _DATA, "2-8"),
        Param("gamma", INPUT, "The forward's scale; x's dtype; its shape is x's last dims, the normalized ones.",
              "gamma", _DATA, "1-7"),
        Param("mean", INPUT, "The forward's mean of x' per row: x's first dims, then 1s (keepdim); used as given.",
              "mean", "FLOAT32", "2-8"),
        Param("rstd", INPUT, "The forward's 1/sqrt(var(x') + eps) per row; mean's shape; used as given.", "rstd",
              "FLOAT32", "2-8"),
        Param("alpha", ATTR, "The weight of x in x' (a double; the kernel uses it as float32, as CANN's); any "
              "value, no range check.", value_type="float"),
        Param("dxOut", OUTPUT, "The gradient of x (alpha * dgx); x's dtype and shape (CANN: contiguous only; "
              "opgen also writes strided views).", "dx", _DATA, "2-8"),
        Param("dgxOut", OUTPUT, "The gradient of gx; x's dtype and shape.", "dgx", _DATA, "2-8"),
        Param("dbetaOut", OUTPUT, "The gradient of beta (the sum of dy over rows); gamma's shape.", "dbeta",
              "FLOAT32", "1-7"),
        Param("dgammaOut", OUTPUT, "The gradient of gamma; gamma's shape.", "dgamma", "FLOAT32", "1-7"),
    ),
    rules=_rules_nulls_dtypes() + _rules_shapes(),
    problem=lambda call: Problem(tuple(call["dy"].shape), call["gamma"].ndim, call["alpha"]),
    kernel_shapes=kernel_shapes,
    description="Backward of DeepNorm: dx, dgx, dbeta and dgamma from dy, x, gx, gamma, mean, rstd and alpha.",
    attribute_inputs={"alpha": _kernel_alpha},
    pythonic=Pythonic(allocate={
        "dxOut": lambda t, attrs: _like(t, "dy"),
        "dgxOut": lambda t, attrs: _like(t, "dy"),
        "dbetaOut": lambda t, attrs: _like(t, "gamma", "float32"),
        "dgammaOut": lambda t, attrs: _like(t, "gamma", "float32"),
    }),
)
