"""aclnnBatchNorm: the aclnn face: parameters in the document's order, rules with their status
codes and example violations, how a call maps onto the kernel.

The document is hicann/ops-nn norm/batch_norm_v3/docs/aclnnBatchNorm.md. Its error table:
161001 for a null pointer; 161002 for dtypes or formats outside the range, shapes outside
the range, weight/bias/runningMean/runningVar/saveMean/saveInvstd (training) not of the
channel axis' length, input and output of different formats, shapes or ranks outside
2-8. Interpretations:
* runningMean/runningVar are non-const: CANN updates them in place in training
  (r = (1 - momentum) * r + momentum * batch statistic). opgen's ApiSpec has no in-out
  parameter yet (a tensor is an input or an output), and opgen never writes a tensor it
  does not treat as an output, so a training call with a runningMean or runningVar and a
  momentum other than 0 (the one update that leaves them as they are) is refused (161002,
  the message says how to update them from saveMean/saveInvstd, as opgen.torch.BatchNorm2d
  does); in eval they are read. The kernel never reads momentum.
* saveMean/saveInvstd are outputs in training only (``flag="training"``): in eval they are
  not written (nor needed: they may be null).
* saveInvstd is 1/sqrt(var + eps) on every product: the Ascend 950's meaning, and what
  aclnnBatchNormBackward reads on every product (the document says A2/A3/training write
  the variance there; opgen's backward would misread it).
* Dtypes: kernel.COMBOS (weight and bias alike, the data's or float32; the four statistics
  alike, the data's or float32); no BFLOAT16 on Atlas training/inference.
* Formats as aclnnBatchNormBackward reads them (an untagged tensor by rank; NHWC/NDHWC, the
  channel last, on the Ascend 950 only).
* An empty input: every rule is checked, then the kernel runs over no channel (nothing is
  written: CANN's kernels do not run either).
"""
from __future__ import annotations

import numpy as np

from opgen.apispec import (ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR, ATTR, INPUT, OUTPUT, ApiSpec, Param,
                           Pythonic, Rule, Violation, cast_args, dtype_message, first, set_args, shape_str)
from opgen.ops.batch_norm.kernel import PRODUCTS, Problem, kernel_shapes
from opgen.ops.batch_norm.reference import NULL_FILL
from opgen.ops.batch_norm_backward import checks as C

_SMALL = ("weight", "bias", "runningMean", "runningVar")
_SAVE = ("saveMean", "saveInvstd")
_KERNEL = {"input": "x", "weight": "weight", "bias": "bias", "runningMean": "running_mean",
           "runningVar": "running_var", "output": "y", "saveMean": "save_mean", "saveInvstd": "save_invstd"}
_CODE = ACLNN_ERR_PARAM_INVALID
_NO_BF16 = ("AtlasTraining", "AtlasInference")


def _present(call) -> list:
    """The given tensors the call uses (saveMean/saveInvstd in training only)."""
    return [n for n in _KERNEL if call[n] is not None and (n not in _SAVE or call["training"])]


def _channel_axis(call) -> int:
    x = call["input"]
    return x.ndim - 1 if call.product == C.REGBASE and x.format in C.CHANNEL_LAST else 1


def _check_nulls(call) -> str | None:
    bad = first(f"{p} is a null pointer" for p in ("input", "output") if call[p] is None)
    if bad or not call["training"]:
        return bad
    return first(f"{p} is a null pointer; it is an output in training" for p in _SAVE if call[p] is None)


def _check_dtype_range(call) -> str | None:
    floats = ("float32", "float16") if call.product in _NO_BF16 else ("float32", "float16", "bfloat16")
    why = f" on {call.product} (no BFLOAT16 there)" if call.product in _NO_BF16 else ""
    return first(dtype_message(p, call[p].dtype, floats, why) for p in _present(call))


def _check_dtype_table(call) -> str | None:
    names = _present(call)
    if any(all(c[_KERNEL[p]] == call[p].dtype for p in names) for c in call.combos()):
        return None
    rows = ", ".join(c.tag for c in call.combos())
    given = "/".join(f"{p}={call[p].dtype}" for p in names)
    return (f"the dtypes {given} are not a row of opgen's kernels on {call.product} (data-weight-statistics: {rows}): "
            f"output in input's dtype, weight and bias alike (input's or FLOAT32), runningMean, runningVar, saveMean "
            f"and saveInvstd alike (input's or FLOAT32)")


def _tagged(fmt: str, *names: str):
    """A mutate function: ``names`` as aclTensors in format ``fmt`` (numpy arrays carry no
    format; the rule needs tensors that say one)."""
    from opgen.ops.batch_norm_backward.api import tagged

    def mutate(args):
        for name in names:
            args[name] = tagged(args[name], fmt)
    return mutate


def _check_formats(call) -> str | None:
    x, out = call["input"], call["output"]
    if x.format not in C.acl.PLAIN_FORMATS:
        return f"input has the private format {x.format}; expected NC, NCL, NCHW, NHWC, NCDHW, NDHWC or ND"
    if not (x.format == out.format or C.format_of(x) == C.format_of(out)):
        return f"output has format {out.format}; expected input's {x.format}"
    if x.format in C.CHANNEL_LAST and call.product != C.REGBASE:
        return f"input has format {x.format}; {call.product} does not support NHWC or NDHWC"
    ranks = {"NHWC": 4, "NDHWC": 5}
    if x.format in ranks and x.ndim != ranks[x.format]:
        return f"input has format {x.format} with {x.ndim} dimensions; expected {ranks[x.format]}"
    return None


def _check_shapes(call) -> str | None:
    x, out = call["input"], call["output"]
    if not 2 <= x.ndim <= 8:
        return f"input has {x.ndim} dimensions; expected 2 to 8"
    if out.shape != x.shape:
        return f"output has shape {shape_str(out.shape)}; expected input's {shape_str(x.shape)}"
    axis = _channel_axis(call)
    c = x.shape[axis]
    return first(f"{p} has shape {shape_str(call[p].shape)}; expected ({c},): the length of input's channel axis "
                 f"(axis {axis} of {shape_str(x.shape)})" for p in _present(call)
                 if p in _SMALL + _SAVE and tuple(call[p].shape) != (c,))


def _check_training_running(call) -> str | None:
    if not call["training"] or call["momentum"] == 0:
        return None
    return first(f"{p} is given in training with momentum {call['momentum']}: CANN updates it in place, which "
                 f"opgen does not do yet (no in-out parameters; opgen writes no tensor it does not treat as an "
                 f"output): pass null (or momentum 0) and update it from saveMean/saveInvstd, as "
                 f"opgen.torch.BatchNorm2d does" for p in ("runningMean", "runningVar") if call[p] is not None)


def _rules() -> tuple:
    nulls = (Violation("input is None", set_args(input=lambda a: None)),
             Violation("output is None", set_args(output=lambda a: None)),
             Violation("saveMean is None in training", set_args(saveMean=lambda a: None, training=lambda a: True)))
    return (
        Rule(ACLNN_ERR_PARAM_NULLPTR, "A pointer argument is a null pointer (input, output; saveMean and saveInvstd "
             "in training).", _check_nulls, nulls),
        Rule(_CODE, "The dtype of an input or output is outside the supported range (no BFLOAT16 on Atlas "
             "training/inference).", _check_dtype_range, (
                 Violation("float64 input", cast_args(("input",), np.float64)),
                 Violation("int32 weight", cast_args(("weight",), np.int32)),
                 Violation("bfloat16 data on Atlas training", cast_args(("input", "output"), "bfloat16"),
                           _NO_BF16))),
        Rule(_CODE, "The dtypes are not a row of opgen's kernels (kernel.COMBOS: output as input; weight and bias "
             "alike; the statistics alike).", _check_dtype_table, (
                 Violation("float16 output with float32 input", cast_args(("output",), np.float16)),
                 Violation("float16 bias with float32 weight", cast_args(("bias",), np.float16)))),
        Rule(_CODE, "The formats of input and output differ or are outside the range (NHWC/NDHWC on the Ascend 950 "
             "only).", _check_formats, (
                 Violation("input and output FRACTAL_NZ", _tagged("FRACTAL_NZ", "input", "output")),
                 Violation("output NCDHW, input untagged (read as NCHW)", _tagged("NCDHW", "output")),
                 Violation("NHWC data off the Ascend 950", _tagged("NHWC", "input", "output"),
                           tuple(p for p in PRODUCTS if p != "Ascend950")))),
        Rule(_CODE, "input and output shapes differ, or have fewer than 2 or more than 8 dimensions; weight, bias, "
             "runningMean, runningVar, saveMean, saveInvstd (training) are not of the channel axis' length.",
             _check_shapes, (
                 Violation("output flattened", set_args(output=lambda a: a["output"].reshape(-1))),
                 Violation("weight one longer", set_args(weight=lambda a: np.ones(a["weight"].size + 1,
                                                                                  a["weight"].dtype))),
                 Violation("1-D input and output", set_args(input=lambda a: a["input"].reshape(-1),
                                                            output=lambda a: a["output"].reshape(-1))))),
        Rule(_CODE, "opgen: runningMean/runningVar given in training with a momentum other than 0 (CANN updates them "
             "in place; opgen has no in-out parameters yet, see api.py).", _check_training_running, (
                 Violation("momentum 0.1 in training", set_args(momentum=lambda a: 0.1, training=lambda a: True)),)),
    )


def _problem(call) -> Problem:
    x = call["input"]
    if x.size == 0:
        return Problem((0, 0), call["training"], call["eps"], momentum=call["momentum"])   # no channel: no write
    return Problem(tuple(x.shape), call["training"], call["eps"], _channel_axis(call) != 1, call["momentum"])


def _unread(call) -> tuple:
    """Training reads no running statistics (none may be given); eval reads them."""
    return ("runningMean", "runningVar") if call["training"] else ()


def _kernel_eps(call) -> float:
    with np.errstate(over="ignore"):
        return float(np.float32(call["eps"]))


def _channels(t: dict) -> int:
    x = t["input"]
    last = getattr(x, "format", "ND") in C.CHANNEL_LAST and x.ndim in (4, 5)
    return x.shape[-1] if last else (x.shape[1] if x.ndim >= 2 else 0)


def _save(tensors: dict, attrs: dict):
    """saveMean/saveInvstd: (C,), in float32 (what aclnnBatchNormBackward takes with any data
    dtype), or in runningMean's dtype when one is given (the statistics share a dtype)."""
    x = tensors["input"]
    if x is None:
        return None
    running = tensors.get("runningMean") or tensors.get("runningVar")
    return (_channels(tensors),), running.dtype if running is not None else "float32"


_DT = "FLOAT32, FLOAT16, BFLOAT16 (no BFLOAT16 on Atlas training/inference)"
_CH = "; length C (input's channel axis); may be null ({})."
API = ApiSpec(
    params=(
        Param("input", INPUT, "The input (`x`): 2-8 dims, NC/NCL/NCHW/NCDHW/ND, or NHWC/NDHWC on Ascend 950.", "x",
              _DT, "2-8"),
        Param("weight", INPUT, "Per-channel scale" + _CH.format("ones"), "weight", _DT, "1", optional=True),
        Param("bias", INPUT, "Per-channel shift, weight's dtype" + _CH.format("zeros"), "bias", _DT, "1",
              optional=True),
        Param("runningMean", INPUT, "The running mean, read in eval; in training null or momentum 0 (opgen does not "
              "update it in place)" + _CH.format("zeros"), "running_mean", _DT, "1", optional=True),
        Param("runningVar", INPUT, "The running variance, read in eval; in training null or momentum 0" +
              _CH.format("ones"), "running_var", _DT, "1", optional=True),
        Param("training", ATTR, "true: batch statistics (saveMean/saveInvstd written), false: running ones.",
              value_type="bool"),
        Param("momentum", ATTR, "The running statistics' update factor: with runningMean/runningVar in training, "
              "only 0 (no in-place update in opgen: see runningMean).", value_type="float"),
        Param("eps", ATTR, "Added to the variance (read as float32).", value_type="float"),
        Param("output", OUTPUT, "The normalized output: input's shape, dtype and format.", "y", _DT, "2-8"),
        Param("saveMean", OUTPUT, "The batch mean (C,), written in training.", "save_mean", _DT, "1",
              flag="training"),
        Param("saveInvstd", OUTPUT, "The batch's 1/sqrt(var + eps) (C,), written in training (on every product: "
              "what aclnnBatchNormBackward reads).", "save_invstd", _DT, "1", flag="training"),
    ),
    rules=_rules(),
    problem=_problem,
    unread=_unread,
    kernel_shapes=kernel_shapes,
    description="BatchNorm: output = (input - mean) / sqrt(var + eps) * weight + bias per channel, with the batch's "
                "statistics (training: saveMean, saveInvstd) or the running ones (eval).",
    fill=dict(NULL_FILL),
    attribute_inputs={"eps": _kernel_eps, "training": lambda call: float(call["training"])},
    pythonic=Pythonic(
        allocate={"output": lambda t, attrs: None if t["input"] is None else (t["input"].shape, t["input"].dtype),
                  "saveMean": _save, "saveInvstd": _save},
        defaults={"training": True, "momentum": 0.1, "eps": 1e-5}),
)
