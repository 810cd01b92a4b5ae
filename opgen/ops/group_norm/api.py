"""aclnnGroupNorm: the aclnn face: parameters in the document's order, rules with their status
codes and example violations, how a call maps onto the kernel.

The document is hicann/ops-nn norm/group_norm/docs/aclnnGroupNorm.md; the checks are its
error table's lines, in the order ops-nn's op_api (aclnn_group_norm.cpp CheckParams) runs
them. Interpretations:
* gamma and beta may be null (ones and zeros): the op_api checks each only when given.
* "meanOut and rstdOut's shape is not (N, group)": the shape itself, not the element count.
* Dtypes: every tensor in self's dtype, as documented, plus opgen's float32-statistics rows
  (half self, float32 meanOut/rstdOut) on the products whose aclnnGroupNormBackward takes
  float32 statistics with half data (kernel.PRODUCTS), so a module's forward feeds that
  backward with no cast. CANN would refuse those rows (161002).
* eps is read as float32 by the kernel (the document's double, CANN's float attribute).
"""
from __future__ import annotations

import functools
import math

import numpy as np

from opgen.apispec import (ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR, ATTR, INPUT, OUTPUT, ApiSpec, ArgError,
                           Param, Pythonic, Rule, Violation, cast_args, dtype_message, first, null_message, set_args,
                           shape_str)
from opgen import config
from opgen.ops.group_norm.kernel import PRODUCTS, Problem, kernel_shapes

_REQUIRED = ("self", "out", "meanOut", "rstdOut")
_KERNEL = {"self": "x", "gamma": "gamma", "beta": "beta", "out": "y", "meanOut": "mean", "rstdOut": "rstd"}
_CODE = ACLNN_ERR_PARAM_INVALID


def _given(call, names):
    return [n for n in names if call[n] is not None]


def _check_dtypes(call) -> str | None:
    names = _given(call, tuple(_KERNEL))
    floats = ("float32", "float16", "bfloat16")
    bad = first(dtype_message(p, call[p].dtype, floats) for p in names)
    if bad:
        return bad
    if any(all(c[_KERNEL[p]] == call[p].dtype for p in names) for c in call.combos()):
        return None
    rows = "; ".join("/".join(c[_KERNEL[p]] for p in names) for c in call.combos())
    given = "/".join(call[p].dtype for p in names)
    return (f"the dtypes of {'/'.join(names)} ({given}) are not a row of {call.product}'s table "
            f"(gamma, beta and out in self's dtype): {rows}")


def _check_attrs(call) -> str | None:
    c, group, eps = call["C"], call["group"], call["eps"]
    if group <= 0:
        return f"group is {group}; expected > 0"
    if c % group:
        return f"C = {c} is not divisible by group = {group}"
    if not eps > 0:
        return f"eps is {eps}; expected > 0"
    return None


def _check_shapes(call) -> str | None:
    x, n, c, hw, group = call["self"].shape, call["N"], call["C"], call["HxW"], call["group"]
    if not 2 <= len(x) <= 8:
        return f"self has {len(x)} dimensions; expected 2 to 8"
    if call["out"].shape != x:
        return f"out has shape {shape_str(call['out'].shape)}; expected self's {shape_str(x)}"
    for name in ("meanOut", "rstdOut"):
        if call[name].shape != (n, group):
            return f"{name} has shape {shape_str(call[name].shape)}; expected (N, group) = ({n}, {group})"
    if x[0] != n or x[1] != c or math.prod(x[2:]) != hw:
        return (f"self has shape {shape_str(x)}; expected N = {n}, C = {c} and the product of the dimensions "
                f"after them HxW = {hw}")
    return first(f"{p} has shape {shape_str(call[p].shape)}; expected ({c},) (1-d, C elements)"
                 for p in _given(call, ("gamma", "beta")) if call[p].shape != (c,))


def _rules() -> tuple:
    nulls = tuple(Violation(f"{p} is None", set_args(**{p: lambda a: None})) for p in _REQUIRED)
    dtypes = (
        Violation("self is float64", cast_args(("self",), np.float64)),
        Violation("out is int32", cast_args(("out",), np.int32)),
        Violation("gamma in another dtype than self", set_args(gamma=lambda a: a["gamma"].astype(
            np.float16 if a["gamma"].dtype != np.float16 else np.float32))),
        Violation("bfloat16 everywhere on Atlas training", cast_args(tuple(_KERNEL), "bfloat16"),
                  ("AtlasTraining",)),
    )
    return (
        Rule(ACLNN_ERR_PARAM_NULLPTR, "A required input, output or attribute is a null pointer "
             "(self, out, meanOut, rstdOut; gamma and beta may be null).",
             lambda call: null_message(call, _REQUIRED), nulls),
        Rule(_CODE, "The dtypes of self, gamma, beta, out, meanOut, rstdOut are not supported, or gamma, beta, out, "
             "meanOut, rstdOut differ from self's (opgen: plus the float32-statistics rows, see api.py).",
             _check_dtypes, dtypes),
        Rule(_CODE, "group is not greater than 0; C is not divisible by group; eps is not greater than 0.",
             _check_attrs, (Violation("group 0", set_args(group=lambda a: 0)),
                            Violation("C not divisible by group", set_args(group=lambda a: a["C"] + 1)),
                            Violation("eps 0", set_args(eps=lambda a: 0.0)))),
        Rule(_CODE, "self has fewer than 2 or more than 8 dimensions; out's shape differs from self's; meanOut and "
             "rstdOut are not (N, group); self's dims are not N, C, HxW; gamma or beta is not 1-d with C elements.",
             _check_shapes, (
                 Violation("out flattened", set_args(out=lambda a: a["out"].reshape(-1))),
                 Violation("meanOut flattened", set_args(meanOut=lambda a: a["meanOut"].reshape(-1))),
                 Violation("N one more than self's", set_args(N=lambda a: a["N"] + 1)),
                 Violation("gamma one element short", set_args(gamma=lambda a: a["gamma"][:-1])),
                 Violation("self 9-d", set_args(**{n: (lambda n: lambda a: a[n].reshape(a[n].shape + (1,) * 7))(n)
                                                  for n in ("self", "out")})))),
    )


def _nc_hw(tensors: dict) -> tuple:
    """N, C and HxW from self's (N, C, ...) shape (all 0 without self: 161001 follows)."""
    x = tensors["self"]
    if x is None:
        return 0, 0, 0
    if x.ndim < 2:
        raise ArgError(ACLNN_ERR_PARAM_INVALID, f"self has shape {shape_str(x.shape)}; expected (N, C, ...)")
    return x.shape[0], x.shape[1], math.prod(x.shape[2:])


def _kernel_eps(call) -> float:
    with np.errstate(over="ignore"):
        return float(np.float32(call["eps"]))


def _statistics(tensors: dict, attrs: dict):
    """meanOut/rstdOut: (N, group), float32 where the current product has a float32-statistics
    row for self's dtype (the Ascend 950: more precise statistics, and what its
    aclnnGroupNormBackward takes with half data), else self's dtype (the document's rows).
    A torch trace reads the product when it traces, as the real call does when it runs."""
    x = tensors["self"]
    if x is None:
        return None
    rows = _statistics_rows(config.get_product())
    return (attrs["N"], attrs["group"]), "float32" if (x.dtype, "float32") in rows else x.dtype


@functools.lru_cache(maxsize=None)
def _statistics_rows(product: str) -> frozenset:
    """(x dtype, statistics dtype) of the product's rows (read per call: cached)."""
    return frozenset((c["x"], c["mean"]) for c in PRODUCTS.get(product, ()))


_DT = "FLOAT32, FLOAT16, BFLOAT16"
API = ApiSpec(
    params=(
        Param("self", INPUT, "The input (`x`), (N, C, ...).", "x", _DT, "2-8"),
        Param("gamma", INPUT, "Per-channel scale, C elements, self's dtype; may be null (ones).", "gamma", _DT, "1",
              optional=True),
        Param("beta", INPUT, "Per-channel shift, C elements, self's dtype; may be null (zeros).", "beta", _DT, "1",
              optional=True),
        Param("N", ATTR, "Size of self's first dimension."),
        Param("C", ATTR, "Size of self's second dimension."),
        Param("HxW", ATTR, "The product of self's dimensions after N and C (1 if none)."),
        Param("group", ATTR, "Number of groups C is divided into; > 0 and dividing C."),
        Param("eps", ATTR, "Added to the variance; > 0 (read as float32).", value_type="float"),
        Param("out", OUTPUT, "The normalized output; self's shape and dtype.", "y", _DT, "2-8"),
        Param("meanOut", OUTPUT, "Each group's mean, (N, group).", "mean", _DT, "2"),
        Param("rstdOut", OUTPUT, "Each group's 1 / sqrt(var + eps), (N, group), meanOut's dtype.", "rstd", _DT, "2"),
    ),
    rules=_rules(),
    problem=lambda call: Problem(call["N"], call["C"], call["HxW"], call["group"], call["eps"]),
    kernel_shapes=kernel_shapes,
    description="GroupNorm: out = (self - mean) * rstd * gamma + beta per group, with meanOut and rstdOut.",
    fill={"gamma": 1.0, "beta": 0.0},
    attribute_inputs={"eps": _kernel_eps},
    pythonic=Pythonic(
        derived={"N": lambda t: _nc_hw(t)[0], "C": lambda t: _nc_hw(t)[1], "HxW": lambda t: _nc_hw(t)[2]},
        allocate={"out": lambda t, attrs: None if t["self"] is None else (t["self"].shape, t["self"].dtype),
                  "meanOut": _statistics, "rstdOut": _statistics},
        defaults={"eps": 1e-5}),
)
