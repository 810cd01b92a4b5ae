"""aclnnFastBatchNormBackward: the aclnn face: parameters in the document's order (BatchNormBackward's
plus ``version``), rules with their status codes and example violations.

The checks are BatchNormBackward's (opgen.ops.batch_norm_backward.checks), chosen and
ordered by this op's op_api (ops-nn norm/batch_norm_grad_v3/op_host/op_api/
aclnn_fast_batch_norm_backward.cpp, CheckParams l.243-260), each rule quoting this op's
document (docs/specs/aclnnFastBatchNormBackward.md section 8; the departures are
docs/validation-vs-cann.md "aclnnFastBatchNormBackward"):
* The one product that offers it is Atlas A2 (doc l.5-24), so none of BatchNormBackward's
  Ascend 950 rules (regbase dtypes, NHWC/NDHWC, the 950's kernel tilings) apply.
* ``version`` (doc l.218-221: "0 or 1, default 0") is never read by the op_api: it is logged
  (L2_DFX_PHASE_1, l.599-601) and handed to nothing, so every value computes the same and
  none is refused (F1).
* The outputMask: null or empty is 161001 (CheckMaskNotNull l.88-107: size < 1 under
  CHECK_RET(..., ACLNN_ERR_PARAM_NULLPTR) l.248); the op_api then reads bits 1 and 2
  unchecked, so 1-2 bits get the doc's 161002 (l.328) and longer masks are read by their
  first 3 (F2, as BatchNormBackward's B3).
* An empty input or gradOut succeeds after the gradOut/input null check, nothing else
  checked (l.608-614).
* dtypes: the op_api checks each tensor against the support list alone and casts weight and
  the statistics to float32 (F3): opgen takes every row it has kernels for, as
  BatchNormBackward does on the A2 (its B6), not the note's "all in gradOut's dtype".
"""
from __future__ import annotations

import numpy as np

from opgen.apispec import (ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR, ATTR, INPUT, MASK, OUTPUT, ApiSpec,
                           Param, Pythonic, Rule, Violation, cast_args, null_message, set_args)
from opgen.ops.batch_norm_backward import api as bnb
from opgen.ops.batch_norm_backward import checks as C
from opgen.ops.batch_norm_backward.api import nulled, reshaped, retagged
from opgen.ops.batch_norm_backward.kernel import kernel_shapes

SOURCE = "aclnn_fast_batch_norm_backward.cpp"


def _rules_nulls() -> tuple:
    masked = tuple(
        Rule(ACLNN_ERR_PARAM_NULLPTR, f"When outputMask[{bit}] is true, the passed {name} is a null pointer. "
             f"(doc l.{311 + 3 * bit}; CheckMaskNotNull l.97-105)", C.with_elements(C.masked_null(bit)),
             (Violation(f"{name} is None", nulled(name)),))
        for bit, name in enumerate(C.OUTPUTS))
    return (
        Rule(ACLNN_ERR_PARAM_NULLPTR, "The passed gradOut or input is a null pointer. (doc l.308; CheckInputNotNull "
             "l.72-78, l.608)", lambda call: null_message(call, ("gradOut", "input")),
             (Violation("gradOut is None", nulled("gradOut")), Violation("input is None", nulled("input")))),
        Rule(ACLNN_ERR_PARAM_NULLPTR, "outputMask is a null pointer or has no elements (CheckMaskNotNull l.91-96 "
             "under CHECK_RET(..., ACLNN_ERR_PARAM_NULLPTR) l.248)", C.with_elements(C.check_mask_present),
             (Violation("outputMask is None", set_args(outputMask=lambda a: None)),
              Violation("outputMask is empty", set_args(outputMask=lambda a: [])))),
        Rule(ACLNN_ERR_PARAM_INVALID, "The length of outputMask is not 3. (doc l.328; the op_api reads bits 1 and 2 "
             "unchecked, so 1-2 bits stand as the doc says and longer masks are read by their first 3, F2)",
             C.with_elements(C.check_mask_size_short),
             (Violation("outputMask of 2", set_args(outputMask=lambda a: [True, True])),
              Violation("outputMask of 1", set_args(outputMask=lambda a: [True])))),
    ) + masked


def _rules_dtypes() -> tuple:
    return (
        Rule(ACLNN_ERR_PARAM_INVALID, "input or gradOut: dtype outside the supported range; input, gradOut: dtypes "
             "differ. (doc l.322, l.346; CheckDtypeValid l.119-127)", C.with_elements(C.check_data_dtypes), (
                 Violation("float64 gradOut", cast_args(("gradOut",), np.float64)),
                 Violation("input float16, gradOut float32", cast_args(("input",), np.float16)))),
        Rule(ACLNN_ERR_PARAM_INVALID, "When outputMask[0..2] is true, gradInput's/gradWeight's/gradBias's dtype is "
             "outside the supported range. (doc l.331-337; CheckGradDtypeValid l.129-144)",
             C.with_elements(C.check_output_dtypes), (
                 Violation("float64 gradInput", cast_args(("gradInput",), np.float64)),
                 Violation("float64 gradWeight and gradBias", cast_args(("gradWeight", "gradBias"), np.float64)))),
        Rule(ACLNN_ERR_PARAM_INVALID, "weight, runningMean, runningVar, saveMean, saveInvstd (when non-null): dtype "
             "outside the supported range. (doc l.325; CheckOtherDtypeValid l.146-166)",
             C.with_elements(C.check_small_dtypes), tuple(
                 Violation(f"float64 {n}", cast_args((n,), np.float64)) for n in ("weight", "runningVar", "saveMean"))),
        Rule(ACLNN_ERR_PARAM_INVALID, "input, gradOut, gradInput (when non-null): dtypes differ. (doc l.346; the "
             "op_api does not compare gradInput, whose ViewCopy needs its dtype: the doc stands, F4)",
             C.with_elements(C.check_grad_input_dtype),
             (Violation("float16 gradInput with float32 gradOut", cast_args(("gradInput",), np.float16)),)),
    )


def _rules_formats() -> tuple:
    return (
        Rule(ACLNN_ERR_PARAM_INVALID, "input, gradOut, gradInput (when non-null): formats differ. (doc l.343; "
             "CheckFormat l.170-183; an ND tag is read by rank)", C.with_elements(C.check_formats_equal), (
                 Violation("gradOut tagged NCDHW, input untagged 4-D", retagged("NCDHW", names=("gradOut",))),
                 Violation("gradInput tagged NCDHW, gradOut untagged 4-D", retagged("NCDHW", names=("gradInput",))))),
        Rule(ACLNN_ERR_PARAM_INVALID, "input or gradOut: format outside the supported range. (doc l.322; CheckFormat "
             "l.185-189: private formats)", C.with_elements(C.check_private_format),
             (Violation("FRACTAL_NZ data tensors", retagged("FRACTAL_NZ")),)),
        Rule(ACLNN_ERR_PARAM_INVALID, "gradOut, input and gradInput: NHWC or NDHWC is outside the supported range "
             "(NC, NCL, NCHW, NCDHW, ND). (doc l.104-128's format column, l.322; the op_api does not refuse them: the "
             "doc stands, F5)", C.with_elements(C.check_channel_last_absent),
             (Violation("NHWC data tensors", retagged("NHWC")),)),
    )


def _rules_shapes() -> tuple:
    flat = lambda a: (a.size,)  # noqa: E731
    return (
        Rule(ACLNN_ERR_PARAM_INVALID, "input, gradOut, gradInput: rank > 8 or < 2. (doc l.349; CheckShape "
             "l.193-209)", C.with_elements(C.check_ranks), (
                 Violation("9-D data tensors", reshaped(lambda a: (1,) * 5 + a.shape)),
                 Violation("1-D data tensors", reshaped(flat)))),
        Rule(ACLNN_ERR_PARAM_INVALID, "input, gradOut, gradInput (when non-null): shapes differ. (doc l.349; "
             "CheckShape l.201, l.206)", C.with_elements(C.check_same_shapes), (
                 Violation("input one longer on the last axis", set_args(input=lambda a: np.concatenate(
                     [a["input"], a["input"][..., :1]], axis=-1))),
                 Violation("gradInput flattened after C", set_args(gradInput=lambda a: a["gradInput"].reshape(
                     a["gradInput"].shape[:2] + (-1,)))))),
        Rule(ACLNN_ERR_PARAM_INVALID, "weight, runningMean, runningVar: shape length differs from input's channel "
             "axis. (doc l.340; CheckOtherShape l.211-235)", C.with_elements(C.check_running_shapes), (
                 Violation("weight one longer", set_args(weight=lambda a: np.ones(a["weight"].size + 1,
                                                                                   a["weight"].dtype))),
                 Violation("runningMean (1, C)", set_args(runningMean=lambda a: a["runningMean"][None])))),
        Rule(ACLNN_ERR_PARAM_INVALID, "saveMean, saveInvstd: shape length differs from input's channel axis. (doc "
             "l.340; the op_api checks neither: the doc stands, with BatchNormBackward's (0,) in eval, F6)",
             C.with_elements(C.check_save_shapes), (
                 Violation("saveInvstd one shorter", set_args(saveInvstd=lambda a: a["saveInvstd"][:-1])),
                 Violation("saveMean of length 0 in training", set_args(saveMean=lambda a: a["saveMean"][:0])))),
        Rule(ACLNN_ERR_PARAM_INVALID, "gradWeight (outputMask[1]), gradBias (outputMask[2]): shape length differs "
             "from input's channel axis. (doc l.340; the op_api checks neither: the doc stands, F6)",
             C.with_elements(C.check_grad_shapes), (
                 Violation("gradWeight (1, C)", set_args(gradWeight=lambda a: a["gradWeight"][None])),
                 Violation("gradBias one longer", set_args(gradBias=lambda a: np.zeros(a["gradBias"].size + 1,
                                                                                         a["gradBias"].dtype))))),
    )


def _rules_kernels() -> tuple:
    return (
        Rule(ACLNN_ERR_PARAM_INVALID, "opgen's kernels: weight and each statistics pair in gradOut's dtype or "
             "float32, gradWeight/gradBias alike in weight's or float32 (the op_api accepts any supported dtype per "
             "tensor and casts, F3; opgen offers the rows it has kernels for)",
             C.with_elements(C.check_kernel_dtypes), (
                 Violation("float16 weight with float32 data", cast_args(("weight",), np.float16)),
                 Violation("bfloat16 gradWeight/gradBias, weight null", lambda a: (
                     a.update(weight=None), cast_args(("gradWeight", "gradBias"), "bfloat16")(a))))),
    )


_DT = "FLOAT32, FLOAT16, BFLOAT16"
_STAT = "; length C (input's axis 1); may be null ({})."
API = ApiSpec(
    params=(
        Param("gradOut", INPUT, "The gradient (`gradOut`): 2-8 dims, NC/NCL/NCHW/NCDHW/ND (channel on axis 1).",
              "dy", _DT, "2-8"),
        Param("input", INPUT, "The forward input (`x`): gradOut's shape, dtype and format.", "x", _DT, "2-8"),
        Param("weight", INPUT, "Per-channel scale" + _STAT.format("ones"), "weight", _DT, "1", optional=True),
        Param("runningMean", INPUT, "The running mean, read in eval" + _STAT.format("zeros"), "running_mean", _DT,
              "1", optional=True),
        Param("runningVar", INPUT, "The running variance, read in eval (non-negative)" + _STAT.format("ones"),
              "running_var", _DT, "1", optional=True),
        Param("saveMean", INPUT, "The saved batch mean, read in training" + _STAT.format("zeros"), "save_mean", _DT,
              "1", optional=True),
        Param("saveInvstd", INPUT, "The saved 1/sqrt(var + eps), read in training" + _STAT.format("ones"),
              "save_invstd", _DT, "1", optional=True),
        Param("training", ATTR, "true: training (saveMean/saveInvstd), false: eval (runningMean/runningVar, eps).",
              value_type="bool"),
        Param("eps", ATTR, "Added to runningVar in eval (taken as float32).", value_type="float"),
        Param("outputMask", MASK, "Three bools: whether to compute gradInput, gradWeight, gradBias; required "
              "(null: 161001)."),
        Param("version", ATTR, "The algorithm version (the document: 0 or 1, default 0); CANN's op_api never reads "
              "it, so every value computes the same.", value_type="int"),
        Param("gradInput", OUTPUT, "The gradient of input: gradOut's shape, dtype and format; may be null when "
              "outputMask[0] is false.", "dx", _DT, "2-8", mask_bit=0),
        Param("gradWeight", OUTPUT, "The gradient of weight: (C,), weight's dtype or float32 (the Pythonic "
              "function's default); may be null when outputMask[1] is false.", "dweight", _DT, "1", mask_bit=1),
        Param("gradBias", OUTPUT, "The gradient of the bias: (C,), gradWeight's dtype; may be null when "
              "outputMask[2] is false.", "dbias", _DT, "1", mask_bit=2),
    ),
    rules=_rules_nulls() + _rules_dtypes() + _rules_formats() + _rules_shapes() + _rules_kernels(),
    problem=bnb.problem_of,
    unread=bnb.unread_statistics,
    kernel_shapes=kernel_shapes,
    description="Backward of BatchNorm (the high-performance variant): gradInput, gradWeight and gradBias, each "
                "behind outputMask.",
    fill=bnb.API.fill,
    attribute_inputs=bnb.API.attribute_inputs,
    pythonic=Pythonic(
        allocate=bnb.API.pythonic.allocate,
        defaults={"training": True, "eps": 1e-5, "output_mask": (True, True, True), "version": 0}),
)
