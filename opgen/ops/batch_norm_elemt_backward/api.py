"""aclnnBatchNormElemtBackward: the aclnn face: parameters in the document's order, rules with
their status codes and example violations, how a call maps onto the kernel.

Sources: the document norm/sync_batch_norm_backward_elemt/docs/aclnnBatchNormElemtBackward.md
("doc") and its op_api aclnn_batch_norm_elemt_backward.cpp ("op_api") at hicann/ops-nn
e5c3fa932; docs/validation-vs-cann.md "aclnnBatchNormElemtBackward" lists each decision (BE1-BE5).
* The rules follow the op_api's CheckParams order (l.204-233): nulls (161001), dtypes,
  formats, shapes (161002); opgen's own kernel-row rule comes last.
* weight is optional (the op_api fills ones when null, l.312-315).
* The counter may have any shape of up to 8 dimensions (CheckShape l.130: a maximum only;
  the doc's "1-8", BE1); the op_api sums all of it (MeanByCounter l.246-283).
* dtypes: the op_api takes any supported dtype per tensor and computes in float32 unless
  every float tensor is float16 (GetPromoteType l.191-202); opgen's kernels are the rows of
  ATen's batch_norm_backward_elemt: gradOut, input and gradInput in one dtype, the five
  per-channel tensors in one dtype, gradOut's or float32, float32 math (BE2, BE3); the counter
  INT32, FLOAT16 or FLOAT32 with any of them (BE4).
* An empty gradOut/input (C > 0) returns success and writes nothing (l.305-309).
"""
from __future__ import annotations

import numpy as np

from opgen import acl
from opgen.apispec import (ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR, INPUT, OUTPUT, ApiSpec, Param,
                           Pythonic, Rule, Violation, cast_args, dtype_message, first, null_message, set_args,
                           shape_str)
from opgen.ops.batch_norm_elemt_backward.kernel import Problem, kernel_shapes

DATA = ("gradOut", "input", "gradInput")
PER_CHANNEL = ("mean", "invstd", "weight", "sumDy", "sumDyXmu")
REQUIRED = ("gradOut", "input", "mean", "invstd", "sumDy", "sumDyXmu", "counter", "gradInput")
_KERNEL = {"gradOut": "dy", "input": "x", "mean": "mean", "invstd": "invstd", "weight": "weight", "sumDy": "sum_dy",
           "sumDyXmu": "sum_dy_xmu", "counter": "counter", "gradInput": "dx"}
_ACL_DTYPES = {"float32": acl.ACL_FLOAT, "float16": acl.ACL_FLOAT16, "bfloat16": acl.ACL_BF16}
_FORMATS = {"NCHW": acl.ACL_FORMAT_NCHW, "FRACTAL_NZ": acl.ACL_FORMAT_FRACTAL_NZ}
_PRIVATE = ("NC1HWC0", "FRACTAL_Z", "FRACTAL_NZ", "NDC1HWC0", "FRACTAL_Z_3D")
_COUNTER_DTYPES = ("float32", "float16", "int32")


def _floats(call) -> tuple:
    """The op_api's support list: DTYPE_SUPPORT_LIST on Atlas training, the BF16 list on A2/A3/950."""
    return ("float32", "float16") if call.product == "AtlasTraining" else ("float32", "float16", "bfloat16")


def _check_dtypes(call) -> str | None:
    """CheckDtypeValid / Check910B*DtypeValid (l.63-102), in their order."""
    for name in ("gradOut", "input", "mean", "invstd", "weight", "sumDy", "sumDyXmu", "counter", "gradInput"):
        if call[name] is None:
            continue
        allowed = _COUNTER_DTYPES if name == "counter" else _floats(call)
        message = dtype_message(name, call[name].dtype, allowed, f" on {call.product}")
        if message:
            return message
    return None


def _check_kernel_row(call) -> str | None:
    """opgen's rows (BE3): gradOut, input, gradInput in one dtype; the per-channel tensors in
    one dtype, gradOut's or float32; the counter any of its three dtypes."""
    got = {n: call[n].dtype for n in REQUIRED + ("weight",) if call[n] is not None}
    if any(all(c[_KERNEL[n]] == d for n, d in got.items()) for c in call.combos()):
        return None
    rows = "; ".join(sorted({f"gradOut/input/gradInput {c['dy']} with the per-channel tensors {c['mean']}"
                             for c in call.combos()}))
    given = ", ".join(f"{n} {d}" for n, d in got.items())
    return f"the dtypes ({given}) are not one of opgen's kernels on {call.product}: {rows}"


def _check_formats(call) -> str | None:
    return first(f"{n} has the private format {call[n].format}; expected ND, NCHW, NCL or NCDHW"
                 for n in DATA if call[n].format in _PRIVATE)


def _check_ranks(call) -> str | None:
    if call["input"].ndim < 2:
        return f"input has {call['input'].ndim} dimensions; expected at least 2"
    return first(f"{n} has {call[n].ndim} dimensions; expected at most 8"
                 for n in ("input", "gradOut", "gradInput", "counter") if call[n].ndim > 8)


def _check_channels(call) -> str | None:
    return "input's channel axis (axis 1) has size 0; expected at least 1" if call["input"].shape[1] == 0 else None


def _check_same_shape(call) -> str | None:
    want = call["input"].shape
    return first(f"{n} has shape {shape_str(call[n].shape)}; expected input's {shape_str(want)}"
                 for n in ("gradOut", "gradInput") if call[n].shape != want)


def _check_per_channel(call) -> str | None:
    c = call["input"].shape[1]
    return first(f"{n} has shape {shape_str(call[n].shape)}; expected ({c},), input's channel axis"
                 for n in PER_CHANNEL if call[n] is not None and tuple(call[n].shape) != (c,))


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


def _reshaped(names, shape):
    return set_args(**{n: (lambda n: lambda a: np.asarray(a[n]).reshape(shape(a[n])))(n) for n in names})


def _longer(name):
    return set_args(**{name: lambda a: np.ones(np.asarray(a[name]).size + 1, np.asarray(a[name]).dtype)})


def _rules() -> tuple:
    return (
        Rule(ACLNN_ERR_PARAM_NULLPTR, "gradOut, input, mean, invstd, sumDy, sumDyXmu, counter or gradInput is a null "
             "pointer. (doc l.227; CheckNotNull l.48-61)", lambda call: null_message(call, REQUIRED),
             tuple(Violation(f"{n} is None", _null(n)) for n in REQUIRED)),
        Rule(ACLNN_ERR_PARAM_INVALID, "gradOut, input, mean, invstd, sumDy, sumDyXmu, counter, gradInput, and weight "
             "when non-null: dtype outside the supported range. (doc l.232, l.235; CheckDtypeValid l.63-102)",
             _check_dtypes, (
                 Violation("float64 gradOut", cast_args(("gradOut",), np.float64)),
                 Violation("float64 sumDyXmu", cast_args(("sumDyXmu",), np.float64)),
                 Violation("int32 weight", cast_args(("weight",), np.int32)),
                 Violation("int64 counter", cast_args(("counter",), np.int64)),
                 Violation("bfloat16 gradInput on Atlas training", cast_args(("gradInput",), "bfloat16"),
                           ("AtlasTraining",)))),
        Rule(ACLNN_ERR_PARAM_INVALID, "gradOut, input or gradInput has a format outside the range (a private "
             "format). (doc l.238; CheckFormat l.104-120)", _check_formats,
             (Violation("FRACTAL_NZ gradOut", _tag("FRACTAL_NZ", ("gradOut",))),)),
        Rule(ACLNN_ERR_PARAM_INVALID, "input has fewer than 2 dimensions; input, gradOut, gradInput or counter more "
             "than 8. (doc l.241, l.244; CheckShape l.126-130)", _check_ranks, (
                 Violation("1-D data", _reshaped(DATA, lambda a: (a.size,))),
                 Violation("9-D data", _reshaped(DATA, lambda a: (1,) * 7 + a.shape[:2] + (-1,))),
                 Violation("9-D counter", _reshaped(("counter",), lambda a: (1,) * 8 + (-1,))))),
        Rule(ACLNN_ERR_PARAM_INVALID, "input's channel axis has size 0. (doc l.247; CheckShape l.131-134)",
             _check_channels, (Violation("no channels", set_args(
                 **{n: (lambda n: lambda a: np.zeros((a[n].shape[0], 0) + a[n].shape[2:], a[n].dtype))(n)
                    for n in DATA})),)),
        Rule(ACLNN_ERR_PARAM_INVALID, "gradOut's or gradInput's shape differs from input's. (doc l.250; "
             "CheckShape l.135-136)", _check_same_shape, (
                 Violation("gradOut one longer on axis 0", set_args(gradOut=lambda a: np.concatenate(
                     [a["gradOut"], a["gradOut"][:1]]))),
                 Violation("gradInput one longer on axis 0", set_args(gradInput=lambda a: np.concatenate(
                     [a["gradInput"], a["gradInput"][:1]]))))),
        Rule(ACLNN_ERR_PARAM_INVALID, "mean, invstd, sumDy or sumDyXmu, and weight when non-null: shape not "
             "(C,). (doc l.253, l.256; CheckShape l.138-145)", _check_per_channel, (
                 Violation("mean one longer", _longer("mean")),
                 Violation("invstd (1, C)", set_args(invstd=lambda a: a["invstd"][None])),
                 Violation("weight one longer", _longer("weight")),
                 Violation("sumDy one longer", _longer("sumDy")),
                 Violation("sumDyXmu one longer", _longer("sumDyXmu")))),
        Rule(ACLNN_ERR_PARAM_INVALID, "opgen's kernels: gradOut, input and gradInput in one dtype, the per-channel "
             "tensors in one dtype, gradOut's or float32 (the op_api casts any supported dtype per tensor: BE3)",
             _check_kernel_row, (
                 Violation("float16 mean with float32 data", cast_args(("mean",), np.float16)),
                 Violation("float16 gradInput with float32 data", cast_args(("gradInput",), np.float16)))),
    )


def _grad_input(tensors: dict, attrs: dict):
    """gradInput: input's shape and dtype (ATen's batch_norm_backward_elemt)."""
    x = tensors["input"]
    return None if x is None else (x.shape, x.dtype)


def _problem(call) -> Problem:
    return Problem(tuple(call["input"].shape), tuple(call["counter"].shape))


_DT = "FLOAT32, FLOAT16, BFLOAT16"
API = ApiSpec(
    params=(
        Param("gradOut", INPUT, "The gradient (`dl/dy`): input's shape, 2-8 dims.", "dy", _DT, "2-8"),
        Param("input", INPUT, "The forward input (`x`): 2-8 dims, the channel on axis 1, not 0.", "x", _DT, "2-8"),
        Param("mean", INPUT, "The (all-reduced) batch mean: C elements.", "mean", _DT, "1"),
        Param("invstd", INPUT, "The (all-reduced) 1/sqrt(var + eps): C elements.", "invstd", _DT, "1"),
        Param("weight", INPUT, "The forward's weight: C elements; may be null (ones).", "weight", _DT, "1",
              optional=True),
        Param("sumDy", INPUT, "sum of gradOut per channel over every rank (aclnnBatchNormReduceBackward's, "
              "all-reduced): C elements.", "sum_dy", _DT, "1"),
        Param("sumDyXmu", INPUT, "sum of gradOut * (input - mean) per channel over every rank: C elements.",
              "sum_dy_xmu", _DT, "1"),
        Param("counter", INPUT, "Each rank's element count per channel, any shape of up to 8 dims; summed whole "
              "(in float32).", "counter", "INT32, FLOAT16, FLOAT32", "0-8"),
        Param("gradInput", OUTPUT, "The gradient of input: input's shape.", "dx", _DT, "2-8"),
    ),
    rules=_rules(),
    problem=_problem,
    kernel_shapes=kernel_shapes,
    description="The elementwise half of SyncBatchNorm's backward: gradInput from the all-reduced sums.",
    fill={"weight": 1.0},
    pythonic=Pythonic(allocate={"gradInput": _grad_input}),
)
