"""aclnnBatchNormBackward: the aclnn face: parameters in the document's order, rules with their status
codes and example violations, how a call maps onto the kernel.

Interpretations (docs/validation-vs-cann.md "aclnnBatchNormBackward" lists each with its source and
decision; the digest is docs/specs/aclnnBatchNormBackward.md):
* The rules follow the op_api's CheckParams order (ops-nn aclnn_batch_norm_backward.cpp
  l.361-392): nulls and the mask (161001), dtypes, formats, shapes (161002), then what the
  Ascend 950's kernel tiling refuses (561103).
* An empty input or gradOut succeeds right after the gradOut/input null check, with nothing
  else checked and nothing written (B5): such a call runs the kernel over no elements.
* The outputMask: null or empty is 161001 everywhere (B1); on the 950 a size other than 3
  is 161001 (B2); elsewhere sizes 1-2 are 161002 (the doc's line, B3) and longer masks are
  read by their first 3 bits. A set bit with a null output is 161001.
* dtypes: the 950's rows (weight, the running pair and the save pair each in gradOut's
  dtype or float32, gradWeight/gradBias in weight's or float32) are opgen's kernels, and
  every product offering the op accepts them (B6, adopted as far as kernels exist).
* An untagged tensor (numpy, torch, aclCreateTensor's ND) is read by rank (NC, NCL, NCHW,
  NCDHW, ND); the channel is the last axis only for NHWC/NDHWC tensors on the 950.
* Statistics the mode does not read (runningMean/runningVar in training, saveMean/
  saveInvstd in eval) are never handed to the kernel: ``unread_statistics`` names them
  (ApiSpec.unread), so the plan fills their constants as for null ones (a zero-length
  saveMean in eval, or a garbage one, cannot reach it) while the rules still check them
  as given.
"""
from __future__ import annotations

import numpy as np

from opgen import acl
from opgen.apispec import (ACLNN_ERR_INNER_NULLPTR, ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR, ATTR, INPUT,
                           MASK, OUTPUT, ApiSpec, Param, Pythonic, Rule, Violation, cast_args, null_message, set_args)
from opgen.ops.batch_norm_backward import checks as C
from opgen.ops.batch_norm_backward.kernel import Problem, kernel_shapes
from opgen.ops.batch_norm_backward.reference import NULL_FILL

NON_950 = ("AtlasA3", "AtlasA2", "AtlasTraining")
DATA = ("gradOut", "input", "gradInput")
_ACL_DTYPES = {"float32": acl.ACL_FLOAT, "float16": acl.ACL_FLOAT16, "bfloat16": acl.ACL_BF16}   # by dtype name
_FORMATS = {"ND": acl.ACL_FORMAT_ND, "NCHW": acl.ACL_FORMAT_NCHW, "NHWC": acl.ACL_FORMAT_NHWC,
            "NCDHW": acl.ACL_FORMAT_NCDHW, "NDHWC": acl.ACL_FORMAT_NDHWC, "FRACTAL_NZ": acl.ACL_FORMAT_FRACTAL_NZ}


def tagged(array, fmt: str):
    """An aclTensor holding a copy of ``array`` with storage format ``fmt`` (numpy arrays
    carry no format: a format rule needs a tensor that says one)."""
    a = np.ascontiguousarray(array)
    _, buffer = acl.aclrtMalloc(max(a.nbytes, 1))
    if a.nbytes:
        acl.aclrtMemcpy(buffer, a.nbytes, a, a.nbytes, acl.ACL_MEMCPY_HOST_TO_DEVICE)
    return acl.aclCreateTensor(a.shape, _ACL_DTYPES[a.dtype.name], None, 0, _FORMATS[fmt], a.shape, buffer)


def retagged(fmt: str, shape=None, names=DATA):
    """A mutate function: gradOut, input and gradInput (or ``names``) as ``fmt`` aclTensors,
    reshaped to ``shape`` first when given."""
    def mutate(args):
        for n in names:
            a = np.asarray(args[n])
            args[n] = tagged(a if shape is None else a.reshape(shape(a)), fmt)
    return mutate


def reshaped(shape, names=DATA):
    return set_args(**{n: (lambda n: lambda a: np.asarray(a[n]).reshape(shape(a[n])))(n) for n in names})


def _half(args) -> None:
    """Every tensor float16 and runningMean null: B15's combination."""
    for name in C.SMALL + C.OUTPUTS + ("gradOut", "input"):
        args[name] = np.asarray(args[name]).astype(np.float16)
    args["runningMean"] = None


def nulled(*names):
    return set_args(**{n: (lambda a: None) for n in names})


def _rules_nulls() -> tuple:
    masked = tuple(
        Rule(ACLNN_ERR_PARAM_NULLPTR, f"When outputMask[{bit}] is true, the passed {name} is a null pointer. "
             f"(doc l.{319 + 3 * bit}; CheckMaskNotNull l.92-100)", C.with_elements(C.masked_null(bit)),
             (Violation(f"{name} is None", nulled(name)),))
        for bit, name in enumerate(C.OUTPUTS))
    return (
        Rule(ACLNN_ERR_PARAM_NULLPTR, "The passed gradOut or input is a null pointer. (doc l.316; CheckInputNotNull)",
             lambda call: null_message(call, ("gradOut", "input")),
             (Violation("gradOut is None", nulled("gradOut")), Violation("input is None", nulled("input")))),
        Rule(ACLNN_ERR_PARAM_NULLPTR, "outputMask is a null pointer or has no elements (CheckMaskNotNull l.79-83 "
             "under CHECK_RET(..., ACLNN_ERR_PARAM_NULLPTR) l.366; UT l2_batch_norm_backward_empty_mask)",
             C.with_elements(C.check_mask_present), (Violation("outputMask is None", set_args(outputMask=lambda a: None)),
                                                     Violation("outputMask is empty", set_args(outputMask=lambda a: [])))),
        Rule(ACLNN_ERR_PARAM_NULLPTR, "The length of outputMask is not 3. (doc l.336: 161002; the Ascend950 op_api "
             "returns 161001: CheckMaskNotNull l.84-90 under l.366)", C.with_elements(C.check_mask_size_950),
             (Violation("outputMask of 2", set_args(outputMask=lambda a: [True, True])),
              Violation("outputMask of 4", set_args(outputMask=lambda a: [True] * 4))), products=("Ascend950",)),
        Rule(ACLNN_ERR_PARAM_INVALID, "The length of outputMask is not 3. (doc l.336; off the 950 the op_api reads "
             "bits 1 and 2 unchecked, so 1-2 bits stand as the doc says and longer masks are read by their first 3)",
             C.with_elements(C.check_mask_size_short),
             (Violation("outputMask of 2", set_args(outputMask=lambda a: [True, True])),
              Violation("outputMask of 1", set_args(outputMask=lambda a: [True]))), products=NON_950),
    ) + masked


def _rules_dtypes() -> tuple:
    return (
        Rule(ACLNN_ERR_PARAM_INVALID, "input or gradOut: dtype outside the supported range; input, gradOut: dtypes "
             "differ. (doc l.330, l.354; CheckDtypeValid l.114-122)", C.with_elements(C.check_data_dtypes), (
                 Violation("float64 gradOut", cast_args(("gradOut",), np.float64)),
                 Violation("input float16, gradOut float32", cast_args(("input",), np.float16)),
                 Violation("bfloat16 data on Atlas training", cast_args(DATA, "bfloat16"),
                           ("AtlasTraining",)))),
        Rule(ACLNN_ERR_PARAM_INVALID, "When outputMask[0..2] is true, gradInput's/gradWeight's/gradBias's dtype is "
             "outside the supported range. (doc l.339-345; CheckGradDtypeValid l.124-139)",
             C.with_elements(C.check_output_dtypes), (
                 Violation("float64 gradInput", cast_args(("gradInput",), np.float64)),
                 Violation("float64 gradWeight and gradBias", cast_args(("gradWeight", "gradBias"), np.float64)))),
        Rule(ACLNN_ERR_PARAM_INVALID, "weight, runningMean, runningVar, saveMean, saveInvstd (when non-null): dtype "
             "outside the supported range. (doc l.333; CheckOtherDtypeValid l.141-161)",
             C.with_elements(C.check_small_dtypes), tuple(
                 Violation(f"float64 {n}", cast_args((n,), np.float64)) for n in ("weight", "runningVar", "saveMean"))),
        Rule(ACLNN_ERR_PARAM_INVALID, "Ascend 950: weight, runningMean, runningVar, saveMean, saveInvstd F32 or "
             "gradOut's dtype; runningVar as runningMean, saveInvstd as saveMean; gradWeight/gradBias F32 or weight's, "
             "and alike; gradInput as gradOut. (doc l.283-292; RegbaseCheckDtypeSame l.320-359)",
             C.with_elements(C.check_regbase_dtypes), (
                 Violation("float16 weight with float32 gradOut", cast_args(("weight",), np.float16)),
                 Violation("float16 saveInvstd with float32 gradOut", cast_args(("saveInvstd",), np.float16)),
                 Violation("float16 gradInput with float32 gradOut", cast_args(("gradInput",), np.float16)),
                 Violation("float16 gradWeight with float32 weight", cast_args(("gradWeight",), np.float16)),
                 Violation("gradWeight (masked off) float16, gradBias float32",
                           lambda a: (a.update(outputMask=[True, False, True]),
                                      cast_args(("gradWeight",), np.float16)(a)))),
             products=("Ascend950",)),
        Rule(ACLNN_ERR_PARAM_INVALID, "input, gradOut, gradInput (when non-null): dtypes differ. (doc l.354; the "
             "non-950 op_api does not compare gradInput, whose ViewCopy needs its dtype: the doc stands, B7)",
             C.with_elements(C.check_grad_input_dtype),
             (Violation("float16 gradInput with float32 gradOut", cast_args(("gradInput",), np.float16)),),
             products=NON_950),
    )


def _rules_formats() -> tuple:
    return (
        Rule(ACLNN_ERR_PARAM_INVALID, "input, gradOut, gradInput (when non-null): formats differ. (doc l.351; "
             "CheckFormat l.166-178; an ND tag is read by rank)", C.with_elements(C.check_formats_equal), (
                 Violation("gradOut NHWC, input untagged", retagged("NHWC", names=("gradOut",))),
                 Violation("gradInput NHWC, gradOut untagged", retagged("NHWC", names=("gradInput",))))),
        Rule(ACLNN_ERR_PARAM_INVALID, "Ascend 950: a 5-D input or gradInput that is not NCDHW or NDHWC. (doc l.121, "
             "l.330; CheckFormat l.180-192)", C.with_elements(C.check_5d_format),
             (Violation("5-D tensors tagged NCHW", retagged("NCHW", lambda a: a.shape + (1,))),),
             products=("Ascend950",)),
        Rule(ACLNN_ERR_PARAM_INVALID, "input or gradOut: format outside the supported range. (doc l.330; CheckFormat "
             "l.195-198: private formats)", C.with_elements(C.check_private_format),
             (Violation("FRACTAL_NZ data tensors", retagged("FRACTAL_NZ")),)),
        Rule(ACLNN_ERR_PARAM_INVALID, "Atlas training, Atlas A2/A3: gradOut, input and gradInput do not support the "
             "NHWC or NDHWC formats. (doc l.274, l.280; the op_api does not refuse them: the doc stands, B10)",
             C.with_elements(C.check_channel_last_absent), (Violation("NHWC data tensors", retagged("NHWC")),),
             products=NON_950),
        Rule(ACLNN_ERR_PARAM_INVALID, "Ascend 950: NHWC is 4-D, NDHWC 5-D. (doc l.121's pairing of shapes and "
             "formats, B9)", C.with_elements(C.check_channel_last_rank),
             (Violation("4-D tensors tagged NDHWC", retagged("NDHWC")),), products=("Ascend950",)),
    )


def _rules_shapes() -> tuple:
    flat = lambda a: (a.size,)  # noqa: E731
    return (
        Rule(ACLNN_ERR_PARAM_INVALID, "input, gradOut, gradInput: rank > 8 or < 2. (doc l.357; CheckShape "
             "l.202-218)", C.with_elements(C.check_ranks), (
                 Violation("9-D data tensors", reshaped(lambda a: (1,) * 5 + a.shape)),
                 Violation("1-D data tensors", reshaped(flat)))),
        Rule(ACLNN_ERR_PARAM_INVALID, "input, gradOut, gradInput (when non-null): shapes differ. (doc l.357; "
             "CheckShape l.210, l.215)", C.with_elements(C.check_same_shapes), (
                 Violation("input one longer on the last axis", set_args(input=lambda a: np.concatenate(
                     [a["input"], a["input"][..., :1]], axis=-1))),
                 Violation("gradInput flattened after C", set_args(gradInput=lambda a: a["gradInput"].reshape(
                     a["gradInput"].shape[:2] + (-1,)))))),
        Rule(ACLNN_ERR_PARAM_INVALID, "weight, runningMean, runningVar: shape length differs from input's channel "
             "axis. (doc l.348; CheckOtherShape l.220-244)", C.with_elements(C.check_running_shapes), (
                 Violation("weight one longer", set_args(weight=lambda a: np.ones(a["weight"].size + 1, a["weight"].dtype))),
                 Violation("runningMean (1, C)", set_args(runningMean=lambda a: a["runningMean"][None])))),
        Rule(ACLNN_ERR_PARAM_INVALID, "saveMean, saveInvstd: shape length differs from input's channel axis (0 "
             "allowed when training is false). (doc l.171, l.181, l.348; the 950's CheckSaveMeanSaveInvstdShape "
             "l.246-266, on every product: the doc stands, B11)", C.with_elements(C.check_save_shapes), (
                 Violation("saveInvstd one shorter", set_args(saveInvstd=lambda a: a["saveInvstd"][:-1])),
                 Violation("saveMean of length 0 in training", set_args(saveMean=lambda a: a["saveMean"][:0])))),
        Rule(ACLNN_ERR_PARAM_INVALID, "gradWeight (outputMask[1]), gradBias (outputMask[2]): shape length differs "
             "from input's channel axis. (doc l.342-348; CheckGradWeightGradBiasShape l.268-289, every product: B11)",
             C.with_elements(C.check_grad_shapes), (
                 Violation("gradWeight (1, C)", set_args(gradWeight=lambda a: a["gradWeight"][None])),
                 Violation("gradBias one longer", set_args(gradBias=lambda a: np.zeros(a["gradBias"].size + 1,
                                                                                         a["gradBias"].dtype))))),
    )


def _rules_950_kernel() -> tuple:
    """What the Ascend 950's kernel tilings refuse; the op_api returns it as 561103."""
    return (
        Rule(ACLNN_ERR_INNER_NULLPTR, "Ascend 950 kernel tiling: a 4-D tensor must be NCHW or NHWC (batch_norm_grad_v3"
             "_tiling.cpp CheckBigShapesValid l.284-307, _tiling_infer_base.cpp GetDyInfo l.146-186; op_api "
             "CHECK_RET(bnGradInput/bnGradWeight/bnGradBias != nullptr, ACLNN_ERR_INNER_NULLPTR); B8: an ND tag is "
             "read as NCHW)", C.with_elements(C.check_4d_format_950),
             (Violation("4-D tensors tagged NCDHW", retagged("NCDHW")),), products=("Ascend950",)),
        Rule(ACLNN_ERR_INNER_NULLPTR, "Ascend 950 training kernel tiling: a null runningMean or runningVar (filled "
             "float32) with the other one and weight 16-bit is no valid dtype combination (batch_norm_grad_v3_tiling"
             ".cpp l.87-101, l.159-179; B15)", C.with_elements(C.check_running_pair_950),
             (Violation("float16 call with runningMean null", _half),), products=("Ascend950",)),
        Rule(ACLNN_ERR_PARAM_INVALID, "opgen's kernels: the Ascend 950's dtype rows on every product (A2/A3/training's "
             "op_api accepts any supported dtype per tensor and casts; opgen offers the rows it has kernels for, B6)",
             C.with_elements(C.check_kernel_dtypes), (
                 Violation("float16 weight with float32 data", cast_args(("weight",), np.float16), NON_950),
                 Violation("bfloat16 gradWeight/gradBias, weight null", lambda a: (
                     a.update(weight=None), cast_args(("gradWeight", "gradBias"), "bfloat16")(a)),
                     ("Ascend950", "AtlasA3", "AtlasA2")))),
    )


def problem_of(call) -> Problem:
    """The kernel problem of a valid call. An empty call (B5) is a kernel over no elements:
    nothing is read or written."""
    if C.is_empty(call):
        return Problem((0, 0), call["training"], call["eps"])
    x = call["input"]
    return Problem(tuple(x.shape), call["training"], call["eps"], C.channel_axis(call) != 1)


def unread_statistics(call) -> tuple:
    """The statistics the mode does not read (ApiSpec.unread): the plan fills their constants
    instead of handing the caller's memory to the kernel, whose arithmetic blend would turn a
    nan there into a nan result (0 * nan)."""
    return ("runningMean", "runningVar") if call["training"] else ("saveMean", "saveInvstd")


def per_channel_output(tensors: dict, attrs: dict):
    """gradWeight/gradBias: (C,) of input's channel axis, in float32: every row of every product
    allows it (doc l.287: float32 or weight's dtype), the kernel sums in float32, and so it is
    the most accurate answer (as RmsNormGrad's dgamma). Pass grad_weight/grad_bias for another."""
    x = tensors["input"]
    if x is None:
        return None
    last = getattr(x, "format", "ND") in C.CHANNEL_LAST and x.ndim in (4, 5)
    c = x.shape[-1] if last else (x.shape[1] if x.ndim >= 2 else 0)
    return (c,), "float32"


_DT = "FLOAT32, FLOAT16, BFLOAT16"
_STAT = "; length C (input's channel axis); may be null ({})."
API = ApiSpec(
    params=(
        Param("gradOut", INPUT, "The gradient (`gradOut`): 2-8 dims, NC/NCL/NCHW/NCDHW/ND, or NHWC/NDHWC on "
              "Ascend 950 (channel last).", "dy", _DT, "2-8"),
        Param("input", INPUT, "The forward input (`x`): gradOut's shape, dtype and format.", "x", _DT, "2-8"),
        Param("weight", INPUT, "Per-channel scale" + _STAT.format("ones"), "weight", _DT, "1", optional=True),
        Param("runningMean", INPUT, "The running mean, read in eval" + _STAT.format("zeros"), "running_mean", _DT,
              "1", optional=True),
        Param("runningVar", INPUT, "The running variance, read in eval (non-negative)" + _STAT.format("ones"),
              "running_var", _DT, "1", optional=True),
        Param("saveMean", INPUT, "The saved batch mean, read in training; length C, or 0 in eval; may be null "
              "(zeros).", "save_mean", _DT, "1", optional=True),
        Param("saveInvstd", INPUT, "The saved 1/sqrt(var + eps), read in training; length C, or 0 in eval; may be "
              "null (ones).", "save_invstd", _DT, "1", optional=True),
        Param("training", ATTR, "true: training (saveMean/saveInvstd), false: eval (runningMean/runningVar, eps).",
              value_type="bool"),
        Param("eps", ATTR, "Added to runningVar in eval (taken as float32).", value_type="float"),
        Param("outputMask", MASK, "Three bools: whether to compute gradInput, gradWeight, gradBias; required "
              "(null: 161001)."),
        Param("gradInput", OUTPUT, "The gradient of input: gradOut's shape, dtype and format; may be null when "
              "outputMask[0] is false.", "dx", _DT, "2-8", mask_bit=0),
        Param("gradWeight", OUTPUT, "The gradient of weight: (C,), weight's dtype or float32 (the Pythonic "
              "function's default); may be null when outputMask[1] is false.", "dweight", _DT, "1", mask_bit=1),
        Param("gradBias", OUTPUT, "The gradient of the bias: (C,), gradWeight's dtype; may be null when "
              "outputMask[2] is false.", "dbias", _DT, "1", mask_bit=2),
    ),
    rules=_rules_nulls() + _rules_dtypes() + _rules_formats() + _rules_shapes() + _rules_950_kernel(),
    problem=problem_of,
    unread=unread_statistics,
    kernel_shapes=kernel_shapes,
    description="Backward of BatchNorm: gradInput, gradWeight and gradBias, each behind outputMask.",
    fill={"weight": NULL_FILL["weight"], "running_mean": NULL_FILL["running_mean"],
          "running_var": NULL_FILL["running_var"], "save_mean": NULL_FILL["save_mean"],
          "save_invstd": NULL_FILL["save_invstd"]},
    # eps only matters in eval (the training kernel never reads it): in training the kernel
    # gets 0, so its unused eval term rsqrt(1 + 0) stays finite whatever eps the caller passed.
    attribute_inputs={"eps": lambda call: 0.0 if call["training"] else call["eps"],
                      "training": lambda call: float(call["training"])},
    pythonic=Pythonic(
        allocate={"gradInput": lambda t, attrs: None if t["gradOut"] is None else (t["gradOut"].shape,
                                                                                    t["gradOut"].dtype),
                  "gradWeight": per_channel_output, "gradBias": per_channel_output},
        defaults={"training": True, "eps": 1e-5, "output_mask": (True, True, True)}),
)
