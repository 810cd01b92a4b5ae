"""aclnnBatchNormReduceBackward: the aclnn face: parameters in the document's order, rules with
their status codes and example violations, how a call maps onto the kernel.

Sources: the document norm/sync_batch_norm_backward_reduce/docs/aclnnBatchNormReduceBackward.md
("doc") and its op_api aclnn_batch_norm_backward_reduce.cpp ("op_api") at hicann/ops-nn
e5c3fa932; docs/validation-vs-cann.md "aclnnBatchNormReduceBackward" lists each decision (R1-R7).
* The rules follow the op_api's CheckParams order (l.236-268): nulls (161001), dtypes,
  formats, shapes (161002). An output whose flag (inputG for sumDy and sumDyXmu, weightG,
  biasG) is false may be null and is not checked (CheckOutputNotNull, the masked checks).
* weight is optional (the op_api fills ones when null, l.483-486) and never read: gradWeight
  is sumDyXmu * invstd. The doc's dtype and length lines for it stand (R1: the op_api does
  not check weight at all).
* gradOut's shape must be input's and mean/invstd hold C elements (doc's table; the op_api
  checks neither, R2): opgen's kernel reads exactly those.
* dtypes: the op_api takes any supported dtype per tensor and casts to float32 (InputParamContiguousAndCast l.270-309);
  opgen's kernels are the rows of ATen's batch_norm_backward_reduce: mean, invstd and the
  four outputs in one dtype, gradOut's or float32 (R3).
* An empty gradOut/input (C > 0) writes zeros to the asked outputs, as the Ascend 950's
  op_api does (l.432-446, l.473-480); elsewhere CANN writes nothing (R4).
"""
from __future__ import annotations

import numpy as np

from opgen import acl
from opgen.apispec import (ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR, ATTR, INPUT, OUTPUT, ApiSpec, Param,
                           Pythonic, Rule, Violation, cast_args, dtype_message, first, null_message, set_args,
                           shape_str)
from opgen.ops.batch_norm_reduce_backward.kernel import Problem, kernel_shapes

DATA = ("gradOut", "input")
STATS = ("mean", "invstd")
OUTPUTS = ("sumDy", "sumDyXmu", "gradWeight", "gradBias")
FLAG = {"sumDy": "inputG", "sumDyXmu": "inputG", "gradWeight": "weightG", "gradBias": "biasG"}
_KERNEL = {"gradOut": "dy", "input": "x", "mean": "mean", "invstd": "invstd", "sumDy": "sum_dy",
           "sumDyXmu": "sum_dy_xmu", "gradWeight": "grad_weight", "gradBias": "grad_bias"}
_ACL_DTYPES = {"float32": acl.ACL_FLOAT, "float16": acl.ACL_FLOAT16, "bfloat16": acl.ACL_BF16}
_FORMATS = {"NCHW": acl.ACL_FORMAT_NCHW, "NHWC": acl.ACL_FORMAT_NHWC, "FRACTAL_NZ": acl.ACL_FORMAT_FRACTAL_NZ}
_PRIVATE = ("NC1HWC0", "FRACTAL_Z", "FRACTAL_NZ", "NDC1HWC0", "FRACTAL_Z_3D")


def _asked(call) -> tuple:
    """The outputs the call's flags ask for, in the document's order."""
    return tuple(n for n in OUTPUTS if call[FLAG[n]])


def _supported(call) -> tuple:
    return ("float32", "float16") if call.product == "AtlasTraining" else ("float32", "float16", "bfloat16")


def _check_dtypes(names):
    def check(call) -> str | None:
        return first(dtype_message(n, call[n].dtype, _supported(call), f" on {call.product}")
                     for n in names(call) if call[n] is not None)
    return check


def _check_same_dtype(call) -> str | None:
    return dtype_message("gradOut", call["gradOut"].dtype, (call["input"].dtype,), " (input's data type)")


def _check_kernel_row(call) -> str | None:
    """opgen's rows (R3): mean, invstd and the asked outputs share one dtype, gradOut's or float32."""
    got = {n: call[n].dtype for n in ("gradOut", "input") + STATS + _asked(call)}
    if any(all(c[_KERNEL[n]] == d for n, d in got.items()) for c in call.combos()):
        return None
    rows = "; ".join(f"gradOut {c['dy']} with mean/invstd/outputs {c['mean']}" for c in call.combos())
    given = ", ".join(f"{n} {d}" for n, d in got.items())
    return f"the dtypes ({given}) are not one of opgen's kernels on {call.product}: {rows}"


def _check_formats(call) -> str | None:
    if call["gradOut"].format != call["input"].format:
        return f"gradOut has format {call['gradOut'].format}, input {call['input'].format}; expected the same"
    return first(f"{n} has the private format {call[n].format}; expected ND, NCHW, NHWC, HWCN, NDHWC or NCDHW"
                 for n in DATA + STATS + _asked(call) if call[n].format in _PRIVATE)


def _check_ranks(call) -> str | None:
    return first(f"{n} has {call[n].ndim} dimensions; expected 2 to 8" for n in DATA if not 2 <= call[n].ndim <= 8)


def _check_channels(call) -> str | None:
    return "input's channel axis (axis 1) has size 0; expected at least 1" if call["input"].shape[1] == 0 else None


def _check_same_shape(call) -> str | None:
    got, want = call["gradOut"].shape, call["input"].shape
    return None if got == want else f"gradOut has shape {shape_str(got)}; expected input's {shape_str(want)}"


def _check_per_channel(names):
    def check(call) -> str | None:
        c = call["input"].shape[1]
        return first(f"{n} has shape {shape_str(call[n].shape)}; expected ({c},), input's channel axis"
                     for n in names(call) if call[n] is not None and tuple(call[n].shape) != (c,))
    return check


def _null(*names):
    return set_args(**{n: (lambda a: None) for n in names})


def _tag(fmt: str, names):
    """A mutate function: the named arrays as aclTensors tagged ``fmt`` (numpy arrays carry no format)."""
    def mutate(args):
        for n in names:
            a = np.ascontiguousarray(args[n])
            _, buffer = acl.aclrtMalloc(max(a.nbytes, 1))
            if a.nbytes:
                acl.aclrtMemcpy(buffer, a.nbytes, a, a.nbytes, acl.ACL_MEMCPY_HOST_TO_DEVICE)
            args[n] = acl.aclCreateTensor(a.shape, _ACL_DTYPES[a.dtype.name], None, 0, _FORMATS[fmt], a.shape, buffer)
    return mutate


def _reshaped(shape):
    return set_args(**{n: (lambda n: lambda a: np.asarray(a[n]).reshape(shape(a[n])))(n) for n in DATA})


def _longer(name):
    return set_args(**{name: lambda a: np.ones(np.asarray(a[name]).size + 1, np.asarray(a[name]).dtype)})


def _rules_nulls() -> tuple:
    return (
        Rule(ACLNN_ERR_PARAM_NULLPTR, "gradOut, input, mean or invstd is a null pointer. (doc l.278; "
             "CheckInputNotNull l.90-99)", lambda call: null_message(call, DATA + STATS),
             tuple(Violation(f"{n} is None", _null(n)) for n in DATA + STATS)),
        Rule(ACLNN_ERR_PARAM_NULLPTR, "When inputG is true, sumDy or sumDyXmu is a null pointer; when weightG is "
             "true, gradWeight; when biasG is true, gradBias. (doc l.281-287; CheckOutputNotNull l.101-116)",
             lambda call: null_message(call, _asked(call)),
             tuple(Violation(f"{n} is None", _null(n)) for n in OUTPUTS)),
    )


def _rules_dtypes() -> tuple:
    return (
        Rule(ACLNN_ERR_PARAM_INVALID, "gradOut, input, mean, invstd, weight: dtype outside the supported range. "
             "(doc l.292, l.253; CheckDtypeValid l.133-137; weight: R1)",
             _check_dtypes(lambda call: DATA + STATS + ("weight",)), (
                 Violation("float64 gradOut and input", cast_args(DATA, np.float64)),
                 Violation("float64 invstd", cast_args(("invstd",), np.float64)),
                 Violation("int32 weight", cast_args(("weight",), np.int32)),
                 Violation("bfloat16 data on Atlas training", cast_args(DATA, "bfloat16"), ("AtlasTraining",)))),
        Rule(ACLNN_ERR_PARAM_INVALID, "gradOut's dtype differs from input's. (doc l.295; OP_CHECK_DTYPE_NOT_MATCH "
             "l.140-141)", _check_same_dtype, (Violation("float16 gradOut", cast_args(("gradOut",), np.float16)),)),
        Rule(ACLNN_ERR_PARAM_INVALID, "When inputG/weightG/biasG is true, sumDy/sumDyXmu, gradWeight, gradBias: "
             "dtype outside the supported range. (doc l.298-304; CheckDtypeValid l.142-147)",
             _check_dtypes(_asked), (
                 Violation("float64 sumDyXmu", cast_args(("sumDyXmu",), np.float64)),
                 Violation("float64 gradWeight", cast_args(("gradWeight",), np.float64)),
                 Violation("float64 gradBias", cast_args(("gradBias",), np.float64)))),
        Rule(ACLNN_ERR_PARAM_INVALID, "opgen's kernels: mean, invstd and the asked outputs in one dtype, gradOut's "
             "or float32 (the op_api casts any supported dtype per tensor; R3)", _check_kernel_row, (
                 Violation("float16 mean with float32 data", cast_args(("mean",), np.float16)),
                 Violation("float16 gradBias with float32 data", cast_args(("gradBias",), np.float16)))),
    )


def _rules_formats_shapes() -> tuple:
    return (
        Rule(ACLNN_ERR_PARAM_INVALID, "gradOut and input formats differ; a private format. (doc l.292, l.307; "
             "CheckFormat l.165-203)", _check_formats, (
                 Violation("gradOut NHWC, input untagged", _tag("NHWC", ("gradOut",))),
                 Violation("FRACTAL_NZ data", _tag("FRACTAL_NZ", DATA)))),
        Rule(ACLNN_ERR_PARAM_INVALID, "gradOut or input has more than 8 or fewer than 2 dimensions. (doc l.310-313; "
             "CheckShape l.208-213)", _check_ranks, (
                 Violation("9-D data", _reshaped(lambda a: (1,) * 7 + a.shape[:2] + (-1,))),
                 Violation("1-D data", _reshaped(lambda a: (a.size,))))),
        Rule(ACLNN_ERR_PARAM_INVALID, "input's channel axis has size 0. (doc l.123, l.316; CheckShape l.215-220)",
             _check_channels, (Violation("no channels", set_args(
                 **{n: (lambda n: lambda a: np.zeros((a[n].shape[0], 0) + a[n].shape[2:], a[n].dtype))(n)
                    for n in DATA})),)),
        Rule(ACLNN_ERR_PARAM_INVALID, "gradOut's shape differs from input's. (doc l.113: the data type and shape "
             "as input's; the op_api does not check it, R2)", _check_same_shape,
             (Violation("gradOut one longer on axis 0", set_args(gradOut=lambda a: np.concatenate(
                 [a["gradOut"], a["gradOut"][:1]]))),)),
        Rule(ACLNN_ERR_PARAM_INVALID, "mean, invstd, weight: not C elements in one dimension. (doc l.133, l.143, "
             "l.153; the op_api does not check them, R2)", _check_per_channel(lambda call: STATS + ("weight",)), (
                 Violation("mean one longer", _longer("mean")),
                 Violation("invstd (1, C)", set_args(invstd=lambda a: a["invstd"][None])),
                 Violation("weight one longer", _longer("weight")))),
        Rule(ACLNN_ERR_PARAM_INVALID, "When inputG/weightG/biasG is true, sumDy or sumDyXmu, gradWeight, gradBias: "
             "size differs from input's channel axis. (doc l.319-325; CheckShape l.222-232)",
             _check_per_channel(_asked), tuple(Violation(f"{n} one longer", _longer(n)) for n in OUTPUTS)),
    )


def _per_channel_output(tensors: dict, attrs: dict):
    """A (C,) output in mean's dtype (ATen's batch_norm_backward_reduce: the statistics')."""
    x, mean = tensors["input"], tensors["mean"]
    if x is None or mean is None or x.ndim < 2:
        return None
    return (x.shape[1],), mean.dtype


_DT = "FLOAT32, FLOAT16, BFLOAT16"
API = ApiSpec(
    params=(
        Param("gradOut", INPUT, "The gradient (`dl/dy`): input's shape and dtype, 2-8 dims.", "dy", _DT, "2-8"),
        Param("input", INPUT, "The forward input (`x`): 2-8 dims, the channel on axis 1 (not 0).", "x", _DT, "2-8"),
        Param("mean", INPUT, "The (all-reduced) batch mean: C elements.", "mean", _DT, "1"),
        Param("invstd", INPUT, "The (all-reduced) 1/sqrt(var + eps): C elements.", "invstd", _DT, "1"),
        Param("weight", INPUT, "The forward's weight: C elements; may be null; not read (gradWeight is "
              "sumDyXmu * invstd).", None, _DT, "1", optional=True, validated_only=True),
        Param("inputG", ATTR, "Whether to output sumDy and sumDyXmu.", value_type="bool"),
        Param("weightG", ATTR, "Whether to output gradWeight.", value_type="bool"),
        Param("biasG", ATTR, "Whether to output gradBias.", value_type="bool"),
        Param("sumDy", OUTPUT, "sum of gradOut per channel: (C,); may be null when inputG is false.", "sum_dy", _DT,
              "1", flag="inputG"),
        Param("sumDyXmu", OUTPUT, "sum of gradOut * (input - mean) per channel: (C,); may be null when inputG is "
              "false.", "sum_dy_xmu", _DT, "1", flag="inputG"),
        Param("gradWeight", OUTPUT, "sumDyXmu * invstd: (C,); may be null when weightG is false.", "grad_weight",
              _DT, "1", flag="weightG"),
        Param("gradBias", OUTPUT, "sumDy: (C,); may be null when biasG is false.", "grad_bias", _DT, "1",
              flag="biasG"),
    ),
    rules=_rules_nulls() + _rules_dtypes() + _rules_formats_shapes(),
    problem=lambda call: Problem(tuple(call["input"].shape)),
    kernel_shapes=kernel_shapes,
    description="The reduce half of SyncBatchNorm's backward: per-channel sumDy, sumDyXmu, gradWeight, gradBias.",
    pythonic=Pythonic(
        allocate={n: _per_channel_output for n in OUTPUTS},
        defaults={"input_g": True, "weight_g": True, "bias_g": True}),
)
