"""aclnnAddLayerNormGrad: the aclnn face: parameters in the document's order, rules with their status
codes and example violations, how a call maps onto the kernel.

Sources (docs/specs/aclnnAddLayerNormGrad.md, the digest; docs/validation-vs-cann.md
"aclnnAddLayerNormGrad", the decisions A1-A6): "doc" is hicann/ops-nn
norm/add_layer_norm_grad/docs/aclnnAddLayerNormGrad.md, "def" the op definition
(op_host/add_layer_norm_grad_def.cpp) and "tiling" op_host/add_layer_norm_grad_tiling.cpp
(arch35's CheckInputOutputShape is the same code), at ops-nn e5c3fa9327ea. There is no
op_api: the aclnn layer is generated from the def, so a null required tensor is 161001 and
a dtype outside the def's columns 161002 (the document's two error lines), and every shape
check, being the tiling's, 561002 (A1). dsumOptional's shape is not checked by CANN's tiling
(it reads dsum by dy's offsets); opgen checks it (A2). A null dsumOptional selects the
kernel variant without the dsum term (OpSpec.optional_terms): no tensor of zeros is made.
"""
from __future__ import annotations

import math

import numpy as np

from opgen.apispec import (ACLNN_ERR_INNER_TILING_ERROR, ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR, INPUT,
                           OUTPUT, ApiSpec, Param, Pythonic, Rule, Violation, cast_args, dtype_message, first,
                           null_message, other_float, set_args, shape_str)
from opgen.ops.add_layer_norm_grad.kernel import Problem, kernel_shapes

_INPUTS = ("dy", "x1", "x2", "rstd", "mean", "gamma", "dsumOptional")
_OUTPUTS = ("dxOut", "dgammaOut", "dbetaOut")
_TENSORS = _INPUTS + _OUTPUTS
_REQUIRED = tuple(n for n in _TENSORS if n != "dsumOptional")
_KERNEL = dict(zip(_TENSORS, ("dy", "x1", "x2", "rstd", "mean", "gamma", "dsum", "dx", "dgamma", "dbeta")))
_LIKE_DY = ("x1", "x2", "dxOut")                  # dy's shape (tiling CheckInputOutputShape)
_DATA = ("x1", "x2", "gamma", "dsumOptional", "dxOut")   # dy's dtype (one column of the def)
_STATS = ("rstd", "mean")
_SHAPE_LINE = "Input and output shapes do not match (CANN's tiling: 561002, A1)"


def _n(call) -> int:
    return call["dy"].ndim - call["gamma"].ndim


def _given(call, names) -> list:
    return [n for n in names if call[n] is not None]


# ---- dtypes (161002) ----------------------------------------------------------------------

def _check_dtype_range(call) -> str | None:
    """Each given tensor's dtype among those some column of the product's def gives it."""
    return first(dtype_message(p, call[p].dtype, tuple(dict.fromkeys(c[_KERNEL[p]] for c in call.combos()
                                                                      if c.has(_KERNEL[p]))), f" on {call.product}")
                 for p in _given(call, _TENSORS))


def _check_dtype_relations(call) -> str | None:
    """x1, x2, gamma, dsumOptional and dxOut have dy's dtype (every column of the def)."""
    dy = call["dy"].dtype
    return first(dtype_message(p, call[p].dtype, (dy,), " (dy's: the op definition gives dy, x1, x2, gamma, "
                                                        "dsumOptional and dxOut one dtype)")
                 for p in _given(call, _DATA))


# ---- shapes (561002, in the order of the tiling's CheckInputOutputShape) -------------------

def _check_ranks(call) -> str | None:
    dy, gamma = call["dy"].ndim, call["gamma"].ndim
    if not 1 <= call["x1"].ndim <= 8:
        return f"x1 has {call['x1'].ndim} dimensions; expected 1 to 8"
    if not 1 <= gamma <= 8:
        return f"gamma has {gamma} dimensions; expected 1 to 8"
    ranks = {p: call[p].ndim for p in ("dy",) + _STATS}
    if len(set(ranks.values())) > 1:
        return f"dy, rstd and mean have {ranks} dimensions; expected one number (dy's first dims, then 1s)"
    ranks = {p: call[p].ndim for p in ("gamma", "dgammaOut", "dbetaOut")}
    if len(set(ranks.values())) > 1:
        return f"gamma, dgammaOut and dbetaOut have {ranks} dimensions; expected one number"
    if dy < gamma:
        return f"dy has {dy} dimensions and gamma {gamma}; expected gamma to cover dy's trailing dimensions"
    return None


def _all_outputs_empty(call) -> bool:
    """CANN's runtime skips tiling and kernel when every output is empty (opbase
    indv_executor.cpp l.1073-1082, as for DeepNormGrad): then no shape of the tiling's is
    checked (A3)."""
    return all(call[p].size == 0 for p in _OUTPUTS)


def _check_no_zero_dim(call) -> str | None:
    if _all_outputs_empty(call):
        return None
    return first(f"{p} has shape {shape_str(call[p].shape)}, with a dimension of 0; expected none (doc: no empty "
                 f"tensors; tiling HasNoZero)" for p in ("x1", "mean") if 0 in call[p].shape)


def _check_like_dy(call) -> str | None:
    want = call["dy"].shape
    mismatch = first(f"{p} has shape {shape_str(call[p].shape)}; expected dy's {shape_str(want)}"
                     for p in _LIKE_DY if call[p].shape != want)
    if mismatch:
        return mismatch
    mean, rstd = call["mean"].shape, call["rstd"].shape
    return None if mean == rstd else f"rstd has shape {shape_str(rstd)}; expected mean's {shape_str(mean)}"


def _stat_shape(call) -> tuple:
    dy = call["dy"].shape
    return dy[:_n(call)] + (1,) * call["gamma"].ndim


def _check_dy_gamma_mean(call) -> str | None:
    n, dy, gamma, mean = _n(call), call["dy"].shape, call["gamma"].shape, call["mean"].shape
    if dy[n:] != gamma:
        return f"gamma has shape {shape_str(gamma)}; expected dy's last {len(gamma)} dimensions {shape_str(dy[n:])}"
    if mean != _stat_shape(call):
        return (f"mean and rstd have shape {shape_str(mean)}; expected dy's first {n} dimensions, then 1s: "
                f"{shape_str(_stat_shape(call))}")
    return None


def _check_like_gamma(call) -> str | None:
    want = call["gamma"].shape
    return first(f"{p} has shape {shape_str(call[p].shape)}; expected gamma's {shape_str(want)}"
                 for p in ("dgammaOut", "dbetaOut") if call[p].shape != want)


def _check_dsum_shape(call) -> str | None:
    dsum, want = call["dsumOptional"], call["dy"].shape
    if dsum is None or dsum.shape == want:
        return None
    return f"dsumOptional has shape {shape_str(dsum.shape)}; expected dy's {shape_str(want)}"


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


def _resized_rows(rows: int):
    """dy, x1, x2, dxOut, dsumOptional, rstd and mean with ``rows`` in their first dimension."""
    names = ("dy",) + _LIKE_DY + _STATS
    return _reshape(names, lambda args, a: (rows,) + a.shape[1:])


def _with_dsum(mutate=None):
    """A mutate function giving the call a dsumOptional like dy (then ``mutate`` on it)."""
    def edit(args):
        args["dsumOptional"] = np.zeros_like(args["dy"]) if args["dsumOptional"] is None else args["dsumOptional"]
        if mutate is not None:
            mutate(args)
    return edit


def _rules_nulls_dtypes() -> tuple:
    nulls = tuple(Violation(f"{p} is None", set_args(**{p: lambda a: None})) for p in _REQUIRED)
    data = ("dy", "x1", "x2", "gamma", "dxOut")
    range_ = (
        Violation("float64 data (dy, x1, x2, gamma, dxOut)", cast_args(data, np.float64)),
        Violation("int32 data", cast_args(data, np.int32)),
        Violation("mean is float16", cast_args(("mean",), np.float16)),
        Violation("rstd is bfloat16", cast_args(("rstd",), "bfloat16")),
        Violation("dgammaOut is float16", cast_args(("dgammaOut",), np.float16)),
        Violation("dbetaOut is bfloat16", cast_args(("dbetaOut",), "bfloat16")),
        Violation("float64 dsumOptional", _with_dsum(cast_args(("dsumOptional",), np.float64))),
        Violation("bfloat16 data on Atlas inference", cast_args(data, "bfloat16"), ("AtlasInference",)),
    )
    relations = tuple(Violation(f"{p}'s dtype differs from dy's", other_float(p)) for p in ("x1", "x2", "gamma",
                                                                                           "dxOut"))
    relations += (Violation("dsumOptional's dtype differs from dy's", _with_dsum(other_float("dsumOptional"))),)
    return (
        Rule(ACLNN_ERR_PARAM_NULLPTR, "If an argument is a required input, output or required attribute and is a "
             "null pointer, 161001 is returned. (doc l.313; every tensor but dsumOptional is required, def "
             "l.21-82)", lambda call: null_message(call, _REQUIRED), nulls),
        Rule(ACLNN_ERR_PARAM_INVALID, "The dtype of a required input or output is not in the supported range. "
             "(doc l.318; dsumOptional too when given, def l.58-63; Atlas inference: no BFLOAT16, doc l.287-289)",
             _check_dtype_range, range_),
        Rule(ACLNN_ERR_PARAM_INVALID, "x1, x2, gamma, dsumOptional and dxOut have dy's dtype (doc l.178, l.188, "
             "l.218, l.228, l.238; the generated layer takes one column of the def, l.21-82)",
             _check_dtype_relations, relations),
    )


def _rules_shapes() -> tuple:
    code = ACLNN_ERR_INNER_TILING_ERROR
    return (
        Rule(code, f"{_SHAPE_LINE}: x1 and gamma 1-8 dims, dy/rstd/mean one rank, gamma/dgammaOut/dbetaOut one "
             "rank, dy at least gamma's (doc l.171-262 '1-8'; tiling l.226-234, l.314-320)", _check_ranks, (
                 Violation("dy-like tensors, rstd and mean with 9 dims",
                           _reshape(("dy",) + _LIKE_DY + _STATS, lambda args, a: (1,) * (9 - a.ndim) + a.shape)),
                 Violation("mean and rstd as dy's leading dims only",
                           _reshape(_STATS, lambda args, a: args["dy"].shape[:-args["gamma"].ndim])),
                 Violation("dgammaOut with a leading 1", _reshape(("dgammaOut",), lambda args, a: (1,) + a.shape)),
                 Violation("gamma, dgammaOut and dbetaOut with more dims than dy",
                           _reshape(("gamma", "dgammaOut", "dbetaOut"),
                                    lambda args, a: (1,) * args["dy"].ndim + a.shape)))),
        Rule(code, f"{_SHAPE_LINE}: no dimension of x1 or mean is 0 while an output has elements (doc: 'no empty "
             "tensors'; tiling l.321-323; opbase skips the tiling when every output is empty, A3)",
             _check_no_zero_dim, (Violation("zero rows (gamma and its outputs keep their elements)",
                                            _resized_rows(0)),)),
        Rule(code, f"{_SHAPE_LINE}: x1, x2, dxOut have dy's shape, rstd mean's (doc l.178, l.188, l.238; tiling "
             "l.324-327)", _check_like_dy, (
                 Violation("x1 has one row more", set_args(x1=lambda a: np.concatenate([a["x1"], a["x1"][:1]]))),
                 Violation("x2 flattened", _reshape(("x2",), lambda args, a: (a.size,))),
                 Violation("dxOut one column more", set_args(dxOut=lambda a: np.zeros(
                     a["dxOut"].shape[:-1] + (a["dxOut"].shape[-1] + 1,), a["dxOut"].dtype))),
                 Violation("rstd's last dim 2", _reshape(("rstd",), lambda args, a: a.shape[:-1] + (2,))))),
        Rule(code, f"{_SHAPE_LINE}: gamma is dy's last dims; rstd and mean are dy's first dims, then 1s (doc "
             "l.198, l.208, l.218; tiling CheckDyGammaMean l.271-289)", _check_dy_gamma_mean, (
                 Violation("gamma, dgammaOut and dbetaOut one element short", _reshape(
                     ("gamma", "dgammaOut", "dbetaOut"), lambda args, a: a.shape[:-1] + (a.shape[-1] - 1,))),
                 Violation("mean and rstd one row more", _reshape(
                     _STATS, lambda args, a: (a.shape[0] + 1,) + a.shape[1:])),
                 Violation("mean and rstd with a last dim of 2", _reshape(
                     _STATS, lambda args, a: a.shape[:-1] + (2,))))),
        Rule(code, f"{_SHAPE_LINE}: dgammaOut and dbetaOut have gamma's shape (doc l.248, l.258; tiling "
             "l.328-338)", _check_like_gamma, (
                 Violation("dbetaOut one element more", _reshape(("dbetaOut",), lambda args, a: (a.size + 1,))),)),
        Rule(code, "dsumOptional has dy's shape (doc l.228; CANN's tiling does not check it and reads dsum at dy's "
             "offsets: opgen refuses, A2)", _check_dsum_shape, (
                 Violation("dsumOptional one row short", _with_dsum(_reshape(
                     ("dsumOptional",), lambda args, a: (a.shape[0] - 1,) + a.shape[1:] if a.shape[0] > 1 else
                     (2,) + a.shape[1:]))),)),
    )


def _like(tensors: dict, name: str, dtype=None):
    """(shape, dtype) of an output allocated like input ``name`` (None without it: 161001 follows)."""
    t = tensors[name]
    return None if t is None else (t.shape, dtype or t.dtype)


_DATA_DTYPES = "FLOAT32, FLOAT16, BFLOAT16 (Atlas inference: FLOAT32, FLOAT16)"
API = ApiSpec(
    params=(
        Param("dy", INPUT, "The main gradient (`inputdy`).", "dy", _DATA_DTYPES, "1-8"),
        Param("x1", INPUT, "The forward's first addend; dy's dtype and shape.", "x1", _DATA_DTYPES, "1-8"),
        Param("x2", INPUT, "The forward's second addend; dy's dtype and shape.", "x2", _DATA_DTYPES, "1-8"),
        Param("rstd", INPUT, "1/sqrt(var(x1 + x2) + eps) per row: dy's first dims, then 1s; used as given.", "rstd",
              "FLOAT32", "1-8"),
        Param("mean", INPUT, "The mean of x1 + x2 per row; rstd's shape; used as given.", "mean", "FLOAT32", "1-8"),
        Param("gamma", INPUT, "The forward's scale; dy's dtype; its shape is dy's last dims, the normalized ones.",
              "gamma", _DATA_DTYPES, "1-8"),
        Param("dsumOptional", INPUT, "A gradient added to dxOut (dy's dtype and shape); null: nothing is added and "
              "the kernel variant without it runs.", "dsum", _DATA_DTYPES, "1-8", optional=True),
        Param("dxOut", OUTPUT, "The gradient of x1 and of x2 (one tensor, the Add's input gradient); dy's dtype and "
              "shape.", "dx", _DATA_DTYPES, "1-8"),
        Param("dgammaOut", OUTPUT, "The gradient of gamma; gamma's shape.", "dgamma", "FLOAT32", "1-8"),
        Param("dbetaOut", OUTPUT, "The gradient of beta (the sum of dy over rows); gamma's shape.", "dbeta", "FLOAT32",
              "1-8"),
    ),
    rules=_rules_nulls_dtypes() + _rules_shapes(),
    problem=lambda call: Problem(tuple(call["dy"].shape), call["gamma"].ndim),
    kernel_shapes=kernel_shapes,
    description="Backward of Add + LayerNorm: dx (x1's and x2's gradient, plus dsum), dgamma and dbeta.",
    pythonic=Pythonic(allocate={
        "dxOut": lambda t, attrs: _like(t, "dy"),
        "dgammaOut": lambda t, attrs: _like(t, "gamma", "float32"),
        "dbetaOut": lambda t, attrs: _like(t, "gamma", "float32"),
    }),
)
