"""aclnnBatchNormElemt: the aclnn face: parameters in the document's order, rules with their
status codes and example violations, how a call maps onto the kernel.

Sources: the document norm/batch_norm_elemt/docs/aclnnBatchNormElemt.md ("doc") and its op_api
op_host/op_api/aclnn_batch_norm_elemt.cpp ("op_api") at hicann/ops-nn e5c3fa932;
docs/validation-vs-cann.md "aclnnBatchNormElemt" lists each decision (EL1-EL6).
* The rules follow the op_api's CheckBatchNormElemtParams order (l.116-124): nulls, dtypes,
  formats, shapes; opgen's kernel-row rule (the doc's "dtypes inconsistent" line) comes last.
* A null input, mean, invstd or output is 161002, not the doc's 161001: CheckNotNull's false
  is mapped to ACLNN_ERR_PARAM_INVALID (l.119; EL1).
* weight and bias are optional (the op_api fills ones and zeros when null, l.160-169; the
  doc's C example passes both null).
* eps is read and never used by the kernel: CANN's variance 1/invstd^2 - eps gets eps added back
  (l.174-201), so y = (x - mean) * invstd * weight + bias (EL3).
* An empty input (C > 0) returns success and writes nothing (l.138-142).
"""
from __future__ import annotations

import numpy as np

from opgen.apispec import (ACLNN_ERR_PARAM_INVALID, ATTR, INPUT, OUTPUT, ApiSpec, Param, Pythonic, Rule,
                           Violation, cast_args, dtype_message, first, null_message, set_args, shape_str)
from opgen.ops.batch_norm_backward.api import tagged
from opgen.ops.batch_norm_backward.checks import format_of
from opgen.ops.batch_norm_elemt.kernel import Problem, kernel_shapes

DATA = ("input", "output")
PER_CHANNEL = ("weight", "bias", "mean", "invstd")
REQUIRED = ("input", "mean", "invstd", "output")
_KERNEL = {"input": "x", "weight": "weight", "bias": "bias", "mean": "mean", "invstd": "invstd", "output": "y"}
_FORMATS = ("NC", "NCL", "NCHW", "NCDHW", "ND")


def _floats(call) -> tuple:
    """The op_api's support list: ASCEND910_DTYPE_SUPPORT_LIST on Atlas training, the BF16 list
    on A2/A3/950 (CheckDtypeValid l.48-68)."""
    return ("float32", "float16") if call.product == "AtlasTraining" else ("float32", "float16", "bfloat16")


def _check_dtypes(call) -> str | None:
    """CheckDtypeValid (l.48-68): each given tensor, in the op_api's order."""
    return first(dtype_message(n, call[n].dtype, _floats(call), f" on {call.product}")
                 for n in ("input", "weight", "bias", "mean", "invstd", "output") if call[n] is not None)


def _check_formats(call) -> str | None:
    """CheckFormat (l.70-83): input's and output's formats equal and not private; the doc's
    list (NC, NCL, NCHW, NCDHW, ND) also refuses NHWC/NDHWC (EL4). An untagged tensor is read
    by its rank (format_of), so an untagged output matches a tagged input of that rank."""
    x, out = call["input"], call["output"]
    bad = first(f"{n} has format {call[n].format}; expected NC, NCL, NCHW, NCDHW or ND"
                for n in DATA if call[n].format not in _FORMATS)
    if bad:
        return bad
    if not (x.format == out.format or format_of(x) == format_of(out)):
        return f"output has format {out.format}; expected input's {x.format}"
    return None


def _check_ranks(call) -> str | None:
    """CheckShape l.87-90: input and output 2 to 8 dimensions."""
    return first(f"{n} has {call[n].ndim} dimensions; expected 2 to 8" for n in DATA if not 2 <= call[n].ndim <= 8)


def _check_same_shape(call) -> str | None:
    got, want = call["output"].shape, call["input"].shape
    return None if got == want else f"output has shape {shape_str(got)}; expected input's {shape_str(want)}"


def _check_channels(call) -> str | None:
    return "input's channel axis (axis 1) has size 0; expected at least 1" if call["input"].shape[1] == 0 else None


def _check_per_channel(call) -> str | None:
    c = call["input"].shape[1]
    return first(f"{n} has shape {shape_str(call[n].shape)}; expected ({c},), input's channel axis"
                 for n in PER_CHANNEL if call[n] is not None and tuple(call[n].shape) != (c,))


def _check_kernel_row(call) -> str | None:
    """The doc's line: the six tensors' dtypes consistent. opgen's rows (EL2): output in input's
    dtype; the given per-channel tensors in one dtype, input's or float32."""
    got = {n: call[n].dtype for n in DATA + PER_CHANNEL if call[n] is not None}
    if any(all(c[_KERNEL[n]] == d for n, d in got.items()) for c in call.combos()):
        return None
    rows = "; ".join(f"input/output {c['x']} with weight/bias/mean/invstd {c['mean']}" for c in call.combos())
    given = ", ".join(f"{n} {d}" for n, d in got.items())
    return f"the dtypes ({given}) are not consistent: opgen's kernels on {call.product} are {rows}"


def _null(*names):
    return set_args(**{n: (lambda a: None) for n in names})


def _tag(fmt: str, *names):
    """A mutate function: the named arrays as aclTensors tagged ``fmt`` (numpy arrays carry no format)."""
    return set_args(**{n: (lambda n: lambda a: tagged(a[n], fmt))(n) for n in names})


def _reshaped(shape):
    return set_args(**{n: (lambda n: lambda a: np.asarray(a[n]).reshape(shape(a[n])))(n) for n in DATA})


def _longer(name):
    return set_args(**{name: lambda a: np.ones(np.asarray(a[name]).size + 1, np.asarray(a[name]).dtype)})


def _rules() -> tuple:
    return (
        Rule(ACLNN_ERR_PARAM_INVALID, "input, mean, invstd or output is a null pointer: 161002, not the doc's 161001 "
             "(doc l.217-218; CheckNotNull l.38-46 under CHECK_RET(..., ACLNN_ERR_PARAM_INVALID) l.119: EL1)",
             lambda call: null_message(call, REQUIRED), tuple(Violation(f"{n} is None", _null(n)) for n in REQUIRED)),
        Rule(ACLNN_ERR_PARAM_INVALID, "input, output, and weight, bias, mean, invstd: dtype outside the supported "
             "range (no BFLOAT16 on Atlas training). (doc l.223, l.193; CheckDtypeValid l.48-68)", _check_dtypes, (
                 Violation("float64 input and output", cast_args(DATA, np.float64)),
                 Violation("float64 invstd", cast_args(("invstd",), np.float64)),
                 Violation("int32 weight", cast_args(("weight",), np.int32)),
                 Violation("bfloat16 data on Atlas training", cast_args(DATA, "bfloat16"), ("AtlasTraining",)))),
        Rule(ACLNN_ERR_PARAM_INVALID, "input or output format outside the range, or input's and output's formats "
             "differ. (doc l.223, l.235; CheckFormat l.70-83; NHWC: EL4)", _check_formats, (
                 Violation("FRACTAL_NZ input and output", _tag("FRACTAL_NZ", *DATA)),
                 Violation("NHWC input and output", _tag("NHWC", *DATA)),
                 Violation("output NCDHW, input untagged (read as NCHW)", _tag("NCDHW", "output")))),
        Rule(ACLNN_ERR_PARAM_INVALID, "input or output has fewer than 2 or more than 8 dimensions. (doc l.226; "
             "CheckShape l.87-90)", _check_ranks, (
                 Violation("1-D data", _reshaped(lambda a: (a.size,))),
                 Violation("9-D data", _reshaped(lambda a: (1,) * 7 + a.shape[:2] + (-1,))))),
        Rule(ACLNN_ERR_PARAM_INVALID, "output's shape differs from input's. (doc l.241; CheckShape l.92)",
             _check_same_shape, (Violation("output one longer on axis 0", set_args(output=lambda a: np.concatenate(
                 [a["output"], a["output"][:1]]))),)),
        Rule(ACLNN_ERR_PARAM_INVALID, "input's channel axis has size 0. (doc l.229; CheckShape l.94-97)",
             _check_channels, (Violation("no channels", set_args(
                 **{n: (lambda n: lambda a: np.zeros((a[n].shape[0], 0) + a[n].shape[2:], a[n].dtype))(n)
                    for n in DATA})),)),
        Rule(ACLNN_ERR_PARAM_INVALID, "weight, bias (when non-null), mean or invstd not 1-D of input's channel "
             "count. (doc l.232; CheckShape l.99-112)", _check_per_channel, (
                 Violation("mean one longer", _longer("mean")),
                 Violation("invstd (1, C)", set_args(invstd=lambda a: a["invstd"][None])),
                 Violation("weight one longer", _longer("weight")),
                 Violation("bias one longer", _longer("bias")))),
        Rule(ACLNN_ERR_PARAM_INVALID, "The dtypes of input, weight, bias, mean, invstd and output are not "
             "consistent: output in input's dtype, the per-channel tensors in one dtype, input's or float32. "
             "(doc l.238; the op_api checks no relation: EL2)", _check_kernel_row, (
                 Violation("float16 output with float32 input", cast_args(("output",), np.float16)),
                 Violation("float16 mean with float32 invstd", cast_args(("mean",), np.float16)))),
    )


def _output(tensors: dict, attrs: dict):
    """output: input's shape and dtype (ATen's batch_norm_elemt)."""
    x = tensors["input"]
    return None if x is None else (x.shape, x.dtype)


_DT = "FLOAT32, FLOAT16, BFLOAT16"
API = ApiSpec(
    params=(
        Param("input", INPUT, "The data (`x`): 2-8 dims, the channel on axis 1.", "x", _DT, "2-8"),
        Param("weight", INPUT, "Per-channel scale: C elements; may be null (ones).", "weight", _DT, "1",
              optional=True),
        Param("bias", INPUT, "Per-channel shift: C elements; may be null (zeros).", "bias", _DT, "1",
              optional=True),
        Param("mean", INPUT, "The (all-reduced) mean `E[x]`: C elements.", "mean", _DT, "1"),
        Param("invstd", INPUT, "The (all-reduced) 1/sqrt(Var(x) + eps): C elements.", "invstd", _DT, "1"),
        Param("eps", ATTR, "The eps invstd was formed with (CANN adds it back to 1/invstd^2 - eps: no effect on "
              "y).", value_type="float"),
        Param("output", OUTPUT, "y = (x - mean) * invstd * weight + bias: input's shape.", "y", _DT, "2-8"),
    ),
    rules=_rules(),
    problem=lambda call: Problem(tuple(call["input"].shape)),
    kernel_shapes=kernel_shapes,
    description="The elementwise half of SyncBatchNorm's forward: y from the all-reduced mean and invstd.",
    fill={"weight": 1.0, "bias": 0.0},
    pythonic=Pythonic(allocate={"output": _output}, defaults={"eps": 1e-5}),
)
