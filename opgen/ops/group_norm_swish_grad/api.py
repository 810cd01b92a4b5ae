"""aclnnGroupNormSwishGrad: the aclnn face: parameters in the document's order, rules with their
status codes and example violations, how a call maps onto the kernel.

Sources (docs/validation-vs-cann.md "aclnnGroupNormSwishGrad" lists each decision, S1-S19): the CANN
document norm/group_norm_swish_grad/docs/aclnnGroupNormSwishGrad.md ("doc"), and, since its
aclnn layer is generated from the op definition (no op_api), the definition
(group_norm_swish_grad_def.cpp, "def") and the tiling (group_norm_swish_grad_tiling.cpp,
"tiling") of hicann/ops-nn e5c3fa9327ea. Interpretations:
* Every tensor is required, dgammaOut/dbetaOut too whatever their IsRequire flag (def
  l.21-74 REQUIRED; doc l.297 lists all nine): a null one is 161001.
* One dtype for all nine tensors (def: three columns): any other is 161002, dgammaOut and
  dbetaOut included (S6: the doc's table omits them, the generated layer checks them).
* Formats: ND and those nnopbase treats as ND (NCL, NCDHW, DHWCN, NHWC, NCHW); any other,
  NDHWC among them, is 161002 (S7).
* Every shape relation lives in the tiling, whose entry point discards Init()'s result (S1):
  a real call reports nothing in phase one. opgen refuses each with 561002 (the tiling
  error a propagated failure gives), never running a kernel on inconsistent arrays: dy of
  2-8 dims, x like dy, numGroups > 0, mean and rstd (N, numGroups), gamma and beta (C,),
  N, C / numGroups and HxW not 0 (the document: empty tensors are not supported), C %
  numGroups == 0, C / numGroups <= 4000, dxOut like x, dgammaOut/dbetaOut C elements.
* dataFormatOptional is any str or None, never read (S11); swishScale is rounded to
  float32 (S12).
* The IsRequire flags ask for dgammaOut and dbetaOut (Param.flag, read like a mask bit by
  every generic layer; S13): a false flag leaves that output untouched, never computed into
  it nor written (CANN zero-fills float32 and leaves float16/bfloat16 alone; opgen leaves
  every dtype alone). The output stays required (null: 161001, def REQUIRED) and is still
  checked (dtype, format, C elements); the Pythonic function returns None for it and
  torch.ops.opgen an empty tensor.
"""
from __future__ import annotations

import math

import numpy as np

from opgen import acl
from opgen.apispec import (ACLNN_ERR_INNER_TILING_ERROR, ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR, ATTR,
                           INPUT, OUTPUT, ApiSpec, Param, Pythonic, Rule, Violation, cast_args, dtype_message, first,
                           null_message, other_float, set_args, shape_str)
from opgen.ops.group_norm_swish_grad.kernel import Problem, kernel_shapes

_INPUTS = ("dy", "mean", "rstd", "x", "gamma", "beta")
_OUTPUTS = ("dxOut", "dgammaOut", "dbetaOut")
_ND_LIKE = ("ND", "NCL", "NCDHW", "DHWCN", "NHWC", "NCHW")   # nnopbase FormatsLikeND + ND
CARRY = 4000                                                  # UPPER_CARRYING_LIMIT (tiling l.50)
_S1 = ("group_norm_swish_grad_tiling.cpp l.623-628 discards Init()'s result, so a real call is not refused in phase "
       "one; opgen reports the check as the tiling error (S1)")


# ---- dtypes and formats (161002) --------------------------------------------------------

def _check_dy_dtype(call) -> str | None:
    allowed = tuple(dict.fromkeys(c["dy"] for c in call.combos()))
    return dtype_message("dy", call["dy"].dtype, allowed, f" on {call.product}")


def _same_dtype_as_dy(names):
    def check(call) -> str | None:
        return first(dtype_message(n, call[n].dtype, (call["dy"].dtype,), " (the same data type as dy)")
                     for n in names)
    return check


def _check_formats(call) -> str | None:
    return first(f"{n} has format {call[n].format}; expected ND (or {', '.join(_ND_LIKE[1:])}, which CANN "
                 f"treats as ND)" for n in _INPUTS + _OUTPUTS if call[n].format not in _ND_LIKE)


def _with_format(name: str, fmt: int):
    """A mutate function: ``name`` as an aclTensor of the same shape and dtype in format ``fmt``."""
    types = {np.dtype(np.float32): acl.ACL_FLOAT, np.dtype(np.float16): acl.ACL_FLOAT16}

    def mutate(args):
        a = np.asarray(args[name])
        _, buf = acl.aclrtMalloc(max(a.nbytes, 1))
        args[name] = acl.aclCreateTensor(a.shape, types.get(a.dtype, acl.ACL_BF16), None, 0, fmt, a.shape, buf)
    return mutate


def _rules_nulls_dtypes() -> tuple:
    tensors = _INPUTS + _OUTPUTS
    others = ("mean", "rstd", "x", "gamma", "beta")
    return (
        Rule(ACLNN_ERR_PARAM_NULLPTR, "The passed dy, mean, rstd, x, gamma, beta, dxOut, dgammaOut or dbetaOut is a "
             "null pointer. (doc l.297; every one is REQUIRED in the op definition, the outputs whatever their "
             "IsRequire flag)", lambda call: null_message(call, tensors),
             tuple(Violation(f"{n} is None", set_args(**{n: lambda a: None})) for n in tensors)),
        Rule(ACLNN_ERR_PARAM_INVALID, "The data type of dy is not within the supported range. (doc l.302)",
             _check_dy_dtype, (Violation("float64 dy", cast_args(("dy",), np.float64)),
                               Violation("int32 dy", cast_args(("dy",), np.int32)))),
        Rule(ACLNN_ERR_PARAM_INVALID, "The data type of mean, rstd, x, gamma or beta differs from that of dy. "
             "(doc l.305)", _same_dtype_as_dy(others),
             tuple(Violation(f"{n}'s dtype differs from dy's", other_float(n)) for n in others)),
        Rule(ACLNN_ERR_PARAM_INVALID, "The data type of dxOut differs from that of dy. (doc l.308)",
             _same_dtype_as_dy(("dxOut",)), (Violation("dxOut's dtype differs from dy's", other_float("dxOut")),)),
        Rule(ACLNN_ERR_PARAM_INVALID, "group_norm_swish_grad_def.cpp l.63-74: dgammaOut and dbetaOut take the "
             "column's dtype too (the document's table omits them; S6)", _same_dtype_as_dy(("dgammaOut", "dbetaOut")),
             (Violation("dgammaOut's dtype differs from dy's", other_float("dgammaOut")),
              Violation("dbetaOut's dtype differs from dy's", other_float("dbetaOut")))),
        Rule(ACLNN_ERR_PARAM_INVALID, "Format ND (doc l.113-252); nnopbase also takes NCL, NCDHW, DHWCN, NHWC and "
             "NCHW as ND and refuses any other (indv_executor_tensor.cpp l.19-20, l.284-309; S7)", _check_formats,
             (Violation("dy in NDHWC", _with_format("dy", acl.ACL_FORMAT_NDHWC)),
              Violation("dgammaOut in FRACTAL_NZ", _with_format("dgammaOut", acl.ACL_FORMAT_FRACTAL_NZ)))),
    )


# ---- shapes and attributes (the tiling's checks: 561002) --------------------------------

def _check_dy_rank(call) -> str | None:
    ndim = call["dy"].ndim
    return None if 2 <= ndim <= 8 else f"dy has {ndim} dimensions; expected 2 to 8 ((N, C, ...))"


def _check_x_shape(call) -> str | None:
    x, dy = call["x"].shape, call["dy"].shape
    return None if x == dy else f"x has shape {shape_str(x)}; expected dy's {shape_str(dy)}"


def _check_groups(call) -> str | None:
    g = call["numGroups"]
    return None if g > 0 else f"numGroups is {g}; expected a value greater than 0"


def _check_stat_ranks(call) -> str | None:
    return first(f"{n} has shape {shape_str(call[n].shape)}; expected 2 dimensions (N, numGroups)"
                 for n in ("mean", "rstd") if call[n].ndim != 2)


def _check_mean_n(call) -> str | None:
    n, mean = call["dy"].shape[0], call["mean"].shape
    return None if mean[0] == n else f"mean has shape {shape_str(mean)}; expected (N, numGroups) with N = dy's {n}"


def _check_mean_groups(call) -> str | None:
    g, mean = call["numGroups"], call["mean"].shape
    return None if mean[1] == g else f"mean has shape {shape_str(mean)}; expected (N, numGroups) with numGroups = {g}"


def _check_rstd(call) -> str | None:
    rstd, mean = call["rstd"].shape, call["mean"].shape
    return None if rstd == mean else f"rstd has shape {shape_str(rstd)}; expected mean's {shape_str(mean)}"


def _per_channel(name: str):
    def check(call) -> str | None:
        c, shape = call["dy"].shape[1], call[name].shape
        return None if shape == (c,) else f"{name} has shape {shape_str(shape)}; expected (C,) = ({c},) with C = dy's"
    return check


def _check_batch(call) -> str | None:
    n = call["dy"].shape[0]
    return None if n > 0 else f"dy has shape {shape_str(call['dy'].shape)}: N = 0 (empty tensors are not supported)"


def _check_divisible(call) -> str | None:
    c, g = call["dy"].shape[1], call["numGroups"]
    if c % g:
        return f"C = {c} is not divisible by numGroups = {g}"
    return None if c // g else f"C = {c}: no channels per group (empty tensors are not supported)"


def _check_spatial(call) -> str | None:
    shape = call["dy"].shape
    return None if math.prod(shape[2:]) else (f"dy has shape {shape_str(shape)}: HxW = 0 (empty tensors are not "
                                              f"supported)")


def _check_carry(call) -> str | None:
    c, g = call["dy"].shape[1], call["numGroups"]
    return None if c // g <= CARRY else f"C / numGroups = {c} / {g} = {c // g}; at most {CARRY} channels per group"


def _check_dx_shape(call) -> str | None:
    dx, x = call["dxOut"].shape, call["x"].shape
    return None if dx == x else f"dxOut has shape {shape_str(dx)}; expected x's {shape_str(x)}"


def _check_per_channel_outputs(call) -> str | None:
    c = call["dy"].shape[1]
    for n in ("dgammaOut", "dbetaOut"):
        t = call[n]
        if t.size != c or t.ndim > 8:
            return (f"{n} has shape {shape_str(t.shape)}; expected C = {c} elements in at most 8 dimensions "
                    f"(gamma's (C,) or the document example's (C, 1))")
    return None


def _sized(x_shape: tuple, groups: int):
    """A mutate function: a consistent call of other sizes (every tensor rebuilt, dtypes kept)."""
    n, c = x_shape[0], x_shape[1]
    shapes = {"dy": x_shape, "x": x_shape, "dxOut": x_shape, "mean": (n, groups), "rstd": (n, groups),
              "gamma": (c,), "beta": (c,), "dgammaOut": (c,), "dbetaOut": (c,)}

    def mutate(args):
        args.update({k: np.ones(v, np.asarray(args[k]).dtype) for k, v in shapes.items()})
        args["numGroups"] = groups
    return mutate


def _reshaped(name: str, shape_of):
    """A mutate function: ``name`` replaced by zeros of ``shape_of(its shape)`` (its dtype kept)."""
    return set_args(**{name: lambda a: np.zeros(shape_of(a[name].shape), a[name].dtype)})


def _rule(seed: str, check, *violations) -> Rule:
    return Rule(ACLNN_ERR_INNER_TILING_ERROR, f"{seed} ({_S1})", check, tuple(violations))


def _rules_shapes() -> tuple:
    return (
        _rule("dy: 2 to 8 dimensions, the 1st N, the 2nd C (doc l.117-120; S17)", _check_dy_rank,
              Violation("1-d dy", set_args(dy=lambda a: a["dy"].reshape(-1))),
              Violation("9-d dy", set_args(dy=lambda a: a["dy"].reshape((1,) * 8 + (-1,))))),
        _rule("x: shape equal to dy's (doc l.147; tiling CheckInputShape l.167-170)", _check_x_shape,
              Violation("x of dy's size in another shape", set_args(x=lambda a: a["x"].reshape(a["x"].shape[0], -1)))),
        _rule("numGroups must be greater than 0 (doc l.177, l.361)", _check_groups,
              Violation("numGroups 0", set_args(numGroups=lambda a: 0)),
              Violation("numGroups -1", set_args(numGroups=lambda a: -1))),
        _rule("mean and rstd: 2 dimensions (doc l.130, l.140; tiling l.189-192; S2)", _check_stat_ranks,
              Violation("flat mean of N * numGroups", set_args(mean=lambda a: a["mean"].reshape(-1))),
              Violation("rstd (N, numGroups, 1)", set_args(rstd=lambda a: a["rstd"][..., None]))),
        _rule("mean: its N equals dy's dimension 0 (doc l.127; tiling l.179-184)", _check_mean_n,
              Violation("mean and rstd of N + 1 rows", set_args(**{k: (lambda k: lambda a: np.zeros(
                  (a[k].shape[0] + 1, a[k].shape[1]), a[k].dtype))(k) for k in ("mean", "rstd")}))),
        _rule("mean: (N, numGroups) (doc l.364; tiling l.174-178)", _check_mean_groups,
              Violation("numGroups 3 with mean (N, 1)", set_args(numGroups=lambda a: 3))),
        _rule("rstd: the shape of mean (doc l.137, l.365; tiling l.185-188)", _check_rstd,
              Violation("rstd (N, numGroups + 1)", set_args(rstd=lambda a: np.ones(
                  (a["rstd"].shape[0], a["rstd"].shape[1] + 1), a["rstd"].dtype)))),
        _rule("gamma: 1 dimension of C elements (doc l.157-160, l.366; tiling l.193-196; S3)", _per_channel("gamma"),
              Violation("gamma one longer", _reshaped("gamma", lambda s: (s[0] + 1,))),
              Violation("gamma (C, 1)", _reshaped("gamma", lambda s: (s[0], 1)))),
        _rule("beta: 1 dimension of C elements (doc l.167-170, l.367; tiling l.197-200; S3)", _per_channel("beta"),
              Violation("beta one shorter", _reshaped("beta", lambda s: (s[0] - 1,)))),
        _rule("Empty tensors are not supported: N x G should not be 0 (doc l.117; tiling l.201-205; S9)",
              _check_batch, Violation("N = 0", _sized((0, 3, 4), 1))),
        _rule("C must be divisible by numGroups, with at least one channel per group (doc l.177, l.362; tiling "
              "l.206-210)", _check_divisible, Violation("C = 3, numGroups 2", _sized((2, 3, 4), 2)),
              Violation("C = 0", _sized((2, 0, 4), 1))),
        _rule("Empty tensors are not supported: HxW should not be 0 (doc l.117; tiling l.211-218; S9)", _check_spatial,
              Violation("HxW = 0", _sized((2, 3, 0), 1)), Violation("a 0 among 3 spatial dims", _sized((2, 3, 2, 0, 5), 1))),
        _rule(f"C / numGroups must not exceed {CARRY} (doc l.177, l.369; tiling Init l.506-513)", _check_carry,
              Violation(f"C / numGroups = {CARRY + 1}", _sized((1, CARRY + 1, 1), 1)),
              Violation(f"C / numGroups = {CARRY + 1} in 2 groups", _sized((1, 2 * CARRY + 2, 1), 2))),
        _rule("dxOut: shape equal to x's (doc l.227; S5)", _check_dx_shape,
              Violation("dxOut flattened", set_args(dxOut=lambda a: a["dxOut"].reshape(-1)))),
        _rule("dgammaOut and dbetaOut: gamma's C elements (doc l.237, l.247: gamma's shape, rank 2, and the "
              "document example's (C, 1); S4)", _check_per_channel_outputs,
              Violation("dgammaOut one longer", _reshaped("dgammaOut", lambda s: (s[0] + 1,))),
              Violation("dbetaOut of 9 dims", _reshaped("dbetaOut", lambda s: (1,) * 8 + s))),
    )


def _scale(call) -> float:
    """swishScale as the kernel reads it: float32 (def l.77 Float; tiling l.551), inf beyond its range."""
    with np.errstate(over="ignore"):
        return float(np.float32(call["swishScale"]))


def _problem(call) -> Problem:
    return Problem(tuple(call["x"].shape), call["numGroups"], call["swishScale"], call["dgammaIsRequire"],
                   call["dbetaIsRequire"], call["dataFormatOptional"])


def _like(name: str):
    """An allocation rule: an output shaped and typed like input ``name`` (None without it: 161001 follows)."""
    return lambda t, attrs: None if t[name] is None else (tuple(t[name].shape), t[name].dtype)


_DT = "FLOAT32, FLOAT16, BFLOAT16"
API = ApiSpec(
    params=(
        Param("dy", INPUT, "The gradient of the forward's output; (N, C, ...) with 2-8 dimensions.", "dy", _DT, "2-8"),
        Param("mean", INPUT, "The forward's per-group mean; (N, numGroups), dy's dtype.", "mean", _DT, "2"),
        Param("rstd", INPUT, "The forward's per-group 1/std; mean's shape, dy's dtype.", "rstd", _DT, "2"),
        Param("x", INPUT, "The forward's input; dy's shape and dtype.", "x", _DT, "2-8"),
        Param("gamma", INPUT, "Per-channel scale; (C,), dy's dtype.", "gamma", _DT, "1"),
        Param("beta", INPUT, "Per-channel offset; (C,), dy's dtype.", "beta", _DT, "1"),
        Param("numGroups", ATTR, "Groups C is divided into; > 0, dividing C, C / numGroups at most 4000."),
        Param("dataFormatOptional", ATTR, "Data format (recommended NCHW); any str or None, not read: the layout "
              "is always (N, C, ...).", value_type="str"),
        Param("swishScale", ATTR, "The swish's scale s in y * sigmoid(s*y); rounded to float32.", value_type="float"),
        Param("dgammaIsRequire", ATTR, "Whether dgamma is asked for; false: dgammaOut is still required but "
              "left untouched.", value_type="bool"),
        Param("dbetaIsRequire", ATTR, "Whether dbeta is asked for; false: dbetaOut is still required but left "
              "untouched.", value_type="bool"),
        Param("dxOut", OUTPUT, "The gradient of x; x's shape, dy's dtype.", "dx", _DT, "2-8"),
        Param("dgammaOut", OUTPUT, "The gradient of gamma; C elements (e.g. (C,) or (C, 1)), dy's dtype; written "
              "only when dgammaIsRequire is true, never null.", "dgamma", _DT, "1-8", flag="dgammaIsRequire",
              required_when_off=True),
        Param("dbetaOut", OUTPUT, "The gradient of beta; C elements (e.g. (C,) or (C, 1)), dy's dtype; written "
              "only when dbetaIsRequire is true, never null.", "dbeta", _DT, "1-8", flag="dbetaIsRequire",
              required_when_off=True),
    ),
    rules=_rules_nulls_dtypes() + _rules_shapes(),
    problem=_problem,
    kernel_shapes=kernel_shapes,
    description="Backward of GroupNorm followed by Swish (y * sigmoid(swishScale * y)): dxOut, and dgammaOut and "
                "dbetaOut each behind its IsRequire flag.",
    pythonic=Pythonic(
        allocate={"dxOut": _like("x"), "dgammaOut": _like("gamma"), "dbetaOut": _like("gamma")},
        defaults={"data_format": None, "swish_scale": 1.0, "dgamma_is_require": True, "dbeta_is_require": True}),
    attribute_inputs={"swish_scale": _scale},
)
