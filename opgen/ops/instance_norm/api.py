"""aclnnInstanceNorm: the aclnn face: parameters in the document's order, rules with their status
codes and example violations, how a call maps onto the kernel.

The document is hicann/ops-nn norm/instance_norm_v3/docs/aclnnInstanceNorm.md; the checks are
its error table's lines in the order the op_api (op_host/op_api/aclnn_instance_norm.cpp,
aclnnInstanceNormGetWorkspaceSize) runs them: null pointers (dataFormat included), dataFormat,
dtypes, x's rank (at most 8), the product, x 4-D and gamma/beta 1-D, gamma/beta of C elements;
then the copies of the results into y, mean and variance.
Interpretations (docs/validation-vs-cann.md, aclnnInstanceNorm):
* The product: offered on Atlas inference alone (kernel.PRODUCTS); opgen's generic product
  check refuses every other product first (161002), before the null checks CANN runs first.
* dataFormat: the op_api compares the first four characters with strncmp, so "NCHWxyz" is
  NCHW there; opgen takes exactly "NCHW" or "NHWC".
* NHWC: the kernel reads NCHW (the grouped pattern's (N, C, 1, HW)); an NHWC x and y are
  staged transposed through the workspace (ApiSpec.kernel_axes), as CANN transposes them to
  NCHW and back (two copies); mean and variance are (N, 1, 1, C), the op_api's reshape.
* "x, y's C axis or H*W less than 32 bytes" (561103): not checked. The op_api does not check
  it, and its unit test case_nchw_float_small_shape_normal expects success for x (1, 1, 1, 1)
  float32 on 310P; it describes CANN's kernel (not public), and opgen's computes any size.
* Empty tensors: the op_api returns success for any empty x, gamma, beta, y, mean or variance
  and runs nothing; opgen checks y, mean and variance against x first, and an empty x runs
  the kernel over no element (H * W = 0 with N * C > 0 writes nan statistics: the mean of
  nothing).
* y, mean and variance must have the shapes the op_api's ViewCopy copies into (x's; (N, C, 1,
  1), (N, 1, 1, C) for NHWC): its failure is the op_api's 561103 (CHECK_RET on ViewCopy's
  result).
* The variance is the biased one (divided by H * W), the one the normalization uses.
* eps is read as float32 by the kernel (the document's double, the l0 op's float attribute).
"""
from __future__ import annotations

import numpy as np

from opgen.apispec import (ACLNN_ERR_INNER_NULLPTR, ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR, ATTR, INPUT,
                           OUTPUT, ApiSpec, Param, Pythonic, Rule, Violation, cast_args, dtype_message, first,
                           null_message, set_args, shape_str)
from opgen.ops.instance_norm.kernel import Problem, kernel_axes, kernel_shapes

_KERNEL = {"x": "x", "gamma": "gamma", "beta": "beta", "y": "y", "mean": "mean", "variance": "variance"}
_REQUIRED = (*_KERNEL, "dataFormat")
_FORMATS = ("NCHW", "NHWC")
_CODE = ACLNN_ERR_PARAM_INVALID


def _check_format(call) -> str | None:
    fmt = call["dataFormat"]
    return None if fmt in _FORMATS else f"dataFormat is {fmt!r}; expected 'NCHW' or 'NHWC'"


def _check_dtypes(call) -> str | None:
    x = call["x"].dtype
    bad = dtype_message("x", x, ("float32", "float16"))
    if bad:
        return bad
    return first(f"{p} has dtype {call[p].dtype}; expected x's {x}" for p in _KERNEL if call[p].dtype != x)


def _check_rank(call) -> str | None:
    rank = call["x"].ndim
    return f"x has {rank} dimensions; at most 8 are supported" if rank > 8 else None


def _check_ranks(call) -> str | None:
    if call["x"].ndim != 4:
        return f"x has {call['x'].ndim} dimensions; expected 4"
    return first(f"{p} has {call[p].ndim} dimensions; expected 1" for p in ("gamma", "beta") if call[p].ndim != 1)


def _channels(call) -> int:
    """x's C axis: dim 3 in NHWC, else dim 1 (the op_api's needTranspose)."""
    return call["x"].shape[3 if call["dataFormat"] == "NHWC" else 1]


def _check_channels(call) -> str | None:
    c = _channels(call)
    return first(f"{p} has shape {shape_str(call[p].shape)}; expected ({c},): x's C axis ({call['dataFormat']})"
                 for p in ("gamma", "beta") if call[p].shape[0] != c)


def _check_outputs(call) -> str | None:
    x = call["x"].shape
    if call["y"].shape != x:
        return f"y has shape {shape_str(call['y'].shape)}; expected x's {shape_str(x)}"
    stat, form = _problem(call).stat_shape, "(N, 1, 1, C)" if call["dataFormat"] == "NHWC" else "(N, C, 1, 1)"
    return first(f"{p} has shape {shape_str(call[p].shape)}; expected {form} = {shape_str(stat)}"
                 for p in ("mean", "variance") if call[p].shape != stat)


def _rules() -> tuple:
    nulls = tuple(Violation(f"{p} is None", set_args(**{p: lambda a: None})) for p in _REQUIRED)
    return (
        Rule(ACLNN_ERR_PARAM_NULLPTR, "The input x, gamma, beta or the output y, mean, variance is a null pointer "
             "(the op_api's CheckNotNull: dataFormat too).", lambda call: null_message(call, _REQUIRED), nulls),
        Rule(_CODE, "dataFormat is not set to NCHW or NHWC.", _check_format,
             (Violation("dataFormat 'NC'", set_args(dataFormat=lambda a: "NC")),
              Violation("dataFormat 'nchw'", set_args(dataFormat=lambda a: "nchw")))),
        Rule(_CODE, "The dtypes of x, gamma, beta, y, mean, variance are not supported (FLOAT32, FLOAT16; every "
             "one x's).", _check_dtypes,
             (Violation("x is float64", cast_args(tuple(_KERNEL), np.float64)),
              Violation("every tensor bfloat16", cast_args(tuple(_KERNEL), "bfloat16")),
              Violation("gamma in another dtype than x", cast_args(("gamma",), np.float16)),
              Violation("variance in another dtype than x", cast_args(("variance",), np.float16)))),
        Rule(_CODE, "The op_api's CheckShape: x has more than 8 dimensions.", _check_rank,
             (Violation("x 9-d", set_args(x=lambda a: a["x"].reshape(a["x"].shape + (1,) * 5))),)),
        Rule(_CODE, "x's dimension is not 4, or gamma/beta's dimension is not 1.", _check_ranks,
             (Violation("x 3-d", set_args(x=lambda a: a["x"].reshape(a["x"].shape[:2] + (-1,)))),
              Violation("gamma 2-d", set_args(gamma=lambda a: a["gamma"].reshape(1, -1))))),
        Rule(_CODE, "gamma, beta's shape is not x's C axis.", _check_channels,
             (Violation("beta one element short", set_args(beta=lambda a: a["beta"][:-1])),
              Violation("NHWC reads C from dim 3", set_args(dataFormat=lambda a: "NHWC")))),
        Rule(ACLNN_ERR_INNER_NULLPTR, "The op_api's ViewCopy of the results into y, mean, variance fails (y not "
             "x's shape; mean, variance not (N, C, 1, 1)).", _check_outputs,
             (Violation("y flattened", set_args(y=lambda a: a["y"].reshape(-1))),
              Violation("mean (N, C)", set_args(mean=lambda a: a["mean"].reshape(a["mean"].shape[:2]))),
              Violation("variance (N, 1, 1, C)",
                        set_args(variance=lambda a: a["variance"].reshape(a["variance"].shape[0], 1, 1, -1))))),
    )


def _kernel_eps(call) -> float:
    with np.errstate(over="ignore"):
        return float(np.float32(call["eps"]))


def _problem(call) -> Problem:
    if call["dataFormat"] == "NHWC":
        n, h, w, c = call["x"].shape
    else:
        n, c, h, w = call["x"].shape
    return Problem(n, c, h, w, call["eps"], call["dataFormat"])


def _statistics(tensors: dict, attrs: dict):
    """mean and variance: (N, C, 1, 1) in x's dtype, (N, 1, 1, C) for NHWC (None without x:
    161001 follows)."""
    x = tensors["x"]
    if x is None or x.ndim != 4:
        return None if x is None else ((), x.dtype)    # a wrong rank: the rules say so
    if attrs.get("dataFormat") == "NHWC":
        return (x.shape[0], 1, 1, x.shape[3]), x.dtype
    return (x.shape[0], x.shape[1], 1, 1), x.dtype


_DT = "FLOAT32, FLOAT16"
API = ApiSpec(
    params=(
        Param("x", INPUT, "The input, 4-D: (N, C, H, W) for dataFormat NCHW, (N, H, W, C) for NHWC.", "x", _DT,
              "4"),
        Param("gamma", INPUT, "Per-channel scale, C elements, x's dtype.", "gamma", _DT, "1"),
        Param("beta", INPUT, "Per-channel shift, C elements, x's dtype.", "beta", _DT, "1"),
        Param("dataFormat", ATTR, "x's layout: 'NCHW' or 'NHWC' (NHWC x and y are staged transposed).",
              value_type="str"),
        Param("eps", ATTR, "Added to the variance (read as float32).", value_type="float"),
        Param("y", OUTPUT, "The normalized output; x's shape and dtype.", "y", _DT, "4"),
        Param("mean", OUTPUT, "Each (n, c)'s mean over H and W, (N, C, 1, 1) ((N, 1, 1, C) for NHWC), x's dtype.",
              "mean", _DT, "4"),
        Param("variance", OUTPUT, "Each (n, c)'s biased variance over H and W, mean's shape, x's dtype.",
              "variance", _DT, "4"),
    ),
    rules=_rules(),
    problem=_problem,
    kernel_shapes=kernel_shapes,
    kernel_axes=kernel_axes,
    description="InstanceNorm: y = (x - mean) / sqrt(variance + eps) * gamma + beta per (n, c) over H and W, with "
                "mean and variance.",
    attribute_inputs={"eps": _kernel_eps},
    pythonic=Pythonic(
        allocate={"y": lambda t, attrs: None if t["x"] is None else (t["x"].shape, t["x"].dtype),
                  "mean": _statistics, "variance": _statistics},
        defaults={"data_format": "NCHW", "eps": 1e-5}),
)
