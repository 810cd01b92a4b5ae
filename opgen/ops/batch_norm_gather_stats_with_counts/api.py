"""aclnnBatchNormGatherStatsWithCounts: the aclnn face: parameters in the document's order, rules
with their status codes and example violations, how a call maps onto the kernel.

Sources: the document norm/sync_batch_norm_gather_stats_with_counts/docs/aclnnBatchNormGatherStatsWithCounts.md
("doc") and its op_api op_host/op_api/aclnn_batch_norm_gather_stats_with_counts.cpp ("op_api") at
hicann/ops-nn e5c3fa932; docs/validation-vs-cann.md "aclnnBatchNormGatherStatsWithCounts" lists each
decision (G1-G6).
* The rules follow the op_api's CheckBatchNormGatherStatsWithCountsParams (l.166-179): nulls
  (161001), dtypes, formats, shapes (161002).
* input is read for its channel axis only (C = dim 1): checked, never handed to the kernel.
* runningMean/runningVar are in-out tensors: CANN updates them in place (l.279-342). opgen's
  ApiSpec has no in-out parameter (a tensor is an input or an output) and opgen writes no
  tensor it does not treat as an output, so, as aclnnBatchNorm does, a call giving either
  with a momentum other than 0 (the one update that leaves them as they are) is refused
  (161002; the message says how to update them from meanAll/invstdAll). G1.
* dtypes: the op_api casts every tensor to float32 on its own; opgen's kernels take mean,
  invstd and counts in one dtype and meanAll/invstdAll in one, the statistics' or float32 (G3).
* An empty mean (no rank, W = 0) writes 0 to meanAll and NaN to invstdAll, as the op_api does
  (l.438-446) although the document says empty tensors are not supported (G4).
"""
from __future__ import annotations

import numpy as np

from opgen.apispec import (ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR, ATTR, INPUT, OUTPUT, ApiSpec, Param,
                           Pythonic, Rule, Violation, cast_args, dtype_message, first, null_message, set_args,
                           shape_str)
from opgen.ops.batch_norm_gather_stats_with_counts.kernel import Problem, kernel_shapes
from opgen.ops.batch_norm_reduce_backward.api import _tag

REQUIRED = ("input", "mean", "invstd", "counts", "meanAll", "invstdAll")
RUNNING = ("runningMean", "runningVar")
_KERNEL = {"mean": "mean", "invstd": "invstd", "counts": "counts", "meanAll": "mean_all", "invstdAll": "invstd_all"}
_PRIVATE = ("NC1HWC0", "FRACTAL_Z", "FRACTAL_NZ", "NDC1HWC0", "FRACTAL_Z_3D")
_CODE = ACLNN_ERR_PARAM_INVALID


def _supported(call) -> tuple:
    """DTYPE_SUPPORT_910_LIST on Atlas training, DTYPE_SUPPORT_910B_LIST elsewhere (l.62-65, l.93-97)."""
    return ("float32", "float16") if call.product == "AtlasTraining" else ("float32", "float16", "bfloat16")


def _given(call) -> tuple:
    return tuple(n for n in REQUIRED + RUNNING if call[n] is not None)


def _check_dtypes(call) -> str | None:
    return first(dtype_message(n, call[n].dtype, _supported(call), f" on {call.product}") for n in _given(call))


def _check_kernel_row(call) -> str | None:
    """opgen's rows (G3): mean, invstd, counts alike; meanAll, invstdAll alike (the statistics' or float32)."""
    got = {n: call[n].dtype for n in _KERNEL}
    if any(all(c[_KERNEL[n]] == d for n, d in got.items()) for c in call.combos()):
        return None
    rows = "; ".join(f"mean/invstd/counts {c['mean']} with meanAll/invstdAll {c['mean_all']}" for c in call.combos())
    given = ", ".join(f"{n} {d}" for n, d in got.items())
    return f"the dtypes ({given}) are not one of opgen's kernels on {call.product}: {rows}"


def _check_formats(call) -> str | None:
    return first(f"{n} has the private format {call[n].format}; expected ND, NCHW, NCL or NCDHW"
                 for n in ("input", "mean", "invstd", "counts") if call[n].format in _PRIVATE)


def _check_ranks(call) -> str | None:
    x = call["input"]
    if x.ndim > 8:
        return f"input has {x.ndim} dimensions; expected at most 8"
    if x.ndim < 2:
        return f"input has {x.ndim} dimensions; expected at least 2 (the channel is axis 1)"
    return first(f"{n} has {call[n].ndim} dimensions; expected 2 (ranks, channels)" for n in ("mean", "invstd")
                 if call[n].ndim != 2)


def _check_counts(call) -> str | None:
    counts, mean, invstd = call["counts"], call["mean"], call["invstd"]
    if counts.ndim != 1:
        return f"counts has {counts.ndim} dimensions; expected 1 (one count per rank)"
    if not mean.shape[0] == invstd.shape[0] == counts.shape[0]:
        return (f"the first dimensions of mean {shape_str(mean.shape)}, invstd {shape_str(invstd.shape)} and counts "
                f"{shape_str(counts.shape)} differ; expected one size (the ranks)")
    return None


def _check_channels(call) -> str | None:
    c = call["input"].shape[1]
    bad = first(f"{n} has shape {shape_str(call[n].shape)}; its second dimension should be {c}, input's channel "
                f"axis" for n in ("mean", "invstd") if call[n].shape[1] != c)
    return bad or first(f"{n} has shape {shape_str(call[n].shape)}; expected ({c},), input's channel axis"
                        for n in RUNNING + ("meanAll", "invstdAll")
                        if call[n] is not None and tuple(call[n].shape) != (c,))


def _check_running_update(call) -> str | None:
    if call["momentum"] == 0:
        return None
    return first(f"{n} is given with momentum {call['momentum']}: CANN updates it in place, which opgen does not do "
                 f"(no in-out parameters; opgen writes no tensor it does not treat as an output): pass null (or "
                 f"momentum 0) and update it from meanAll and invstdAll (runningVar with the unbiased variance "
                 f"(1/invstdAll^2 - eps) * n / (n - 1), n = the sum of counts)" for n in RUNNING if call[n] is not None)


def _null(*names):
    return set_args(**{n: (lambda a: None) for n in names})


def _rules() -> tuple:
    return (
        Rule(ACLNN_ERR_PARAM_NULLPTR, "input, mean, invstd, counts, meanAll or invstdAll is a null pointer. "
             "(doc l.253; CheckNotNull l.78-88)", lambda call: null_message(call, REQUIRED),
             tuple(Violation(f"{n} is None", _null(n)) for n in REQUIRED)),
        Rule(_CODE, "input, meanAll, invstdAll, mean, invstd, runningMean, runningVar or counts: dtype outside the "
             "supported range (no BFLOAT16 on Atlas training). (doc l.258, l.228; CheckDtypeValid l.90-113)",
             _check_dtypes, (
                 Violation("float64 input", cast_args(("input",), np.float64)),
                 Violation("int32 counts", cast_args(("counts",), np.int32)),
                 Violation("float64 runningVar", set_args(runningVar=lambda a: np.ones(a["mean"].shape[1]))),
                 Violation("bfloat16 statistics on Atlas training",
                           cast_args(("mean", "invstd", "counts", "meanAll", "invstdAll"), "bfloat16"),
                           ("AtlasTraining",)))),
        Rule(_CODE, "opgen's kernels: mean, invstd and counts in one dtype, meanAll and invstdAll in one (the "
             "statistics' or float32; the op_api casts any supported dtype per tensor, G3)", _check_kernel_row, (
                 Violation("float16 invstd with float32 mean", cast_args(("invstd",), np.float16)),
                 Violation("float16 meanAll with float32 invstdAll", cast_args(("meanAll",), np.float16)))),
        Rule(_CODE, "input, mean, invstd or counts in a private format. (CheckFormat l.115-123: Format only support "
             "ND, NCHW, NCL, NCDHW, l.119)", _check_formats,
             (Violation("FRACTAL_NZ mean", _tag("FRACTAL_NZ", ("mean",))),)),
        Rule(_CODE, "input has more than 8 or fewer than 2 dimensions; mean or invstd does not have 2. (doc "
             "l.261-267; CheckShape l.129-132)", _check_ranks, (
                 Violation("9-D input", set_args(input=lambda a: a["input"].reshape((1,) * 7 + a["input"].shape))),
                 Violation("1-D input", set_args(input=lambda a: a["input"].reshape(-1)[:1])),
                 Violation("3-D mean", set_args(mean=lambda a: a["mean"][None])))),
        Rule(_CODE, "counts is not 1-D; counts, mean and invstd differ in their first dimension. (doc l.270, l.282; "
             "CheckShape l.133-140, l.157-160)", _check_counts, (
                 Violation("counts (W, 1)", set_args(counts=lambda a: a["counts"][:, None])),
                 Violation("counts one longer", set_args(counts=lambda a: np.concatenate([a["counts"],
                                                                                          a["counts"][:1]]))))),
        Rule(_CODE, "mean or invstd's second dimension, runningMean, runningVar (when not null), meanAll or "
             "invstdAll differ from input's channel axis. (doc l.273-285; CheckShape l.141-162)",
             _check_channels, (
                 Violation("input of one more channel", set_args(input=lambda a: np.ones(
                     (2, a["mean"].shape[1] + 1), a["input"].dtype))),
                 Violation("runningMean one longer", set_args(runningMean=lambda a: np.zeros(
                     a["mean"].shape[1] + 1, a["mean"].dtype))),
                 Violation("invstdAll (1, C)", set_args(invstdAll=lambda a: a["invstdAll"][None])))),
        Rule(_CODE, "opgen: runningMean or runningVar given with a momentum other than 0 (CANN updates them in place; "
             "opgen has no in-out parameters, G1).", _check_running_update, (
                 Violation("runningMean with momentum 0.1", set_args(
                     runningMean=lambda a: np.zeros(a["mean"].shape[1], a["mean"].dtype), momentum=lambda a: 0.1)),)),
    )


def _per_channel_output(tensors: dict, attrs: dict):
    """A (C,) output in float32: a row of every statistics dtype (what SyncBatchNorm's
    elementwise half reads best), as aclnnLayerNorm's Pythonic statistics."""
    x = tensors["input"]
    if x is None or x.ndim < 2:
        return None
    return (x.shape[1],), "float32"


def _problem(call) -> Problem:
    return Problem(call["mean"].shape[0], call["input"].shape[1], call["eps"])


def _kernel_eps(call) -> float:
    with np.errstate(over="ignore"):
        return float(np.float32(call["eps"]))


_DT = "FLOAT32, FLOAT16, BFLOAT16 (no BFLOAT16 on Atlas training)"
API = ApiSpec(
    params=(
        Param("input", INPUT, "The data the statistics are of: 2-8 dims, the channel on axis 1; read for C only.",
              None, _DT, "2-8", validated_only=True),
        Param("mean", INPUT, "Every rank's per-channel mean: (W, C).", "mean", _DT, "2"),
        Param("invstd", INPUT, "Every rank's per-channel 1/sqrt(var + eps): (W, C), positive.", "invstd", _DT, "2"),
        Param("runningMean", INPUT, "The running mean, (C,); may be null; with momentum 0 only (opgen does not "
              "update it in place).", None, _DT, "1", optional=True, validated_only=True),
        Param("runningVar", INPUT, "The running variance, (C,); may be null; with momentum 0 only.", None, _DT, "1",
              optional=True, validated_only=True),
        Param("momentum", ATTR, "The running statistics' update factor: 0 when either is given (see runningMean).",
              value_type="float"),
        Param("eps", ATTR, "Added to the variance; each rank's variance is 1/invstd^2 - eps (read as float32).",
              value_type="float"),
        Param("counts", INPUT, "Every rank's element count: (W,), in mean's dtype.", "counts", _DT, "1"),
        Param("meanAll", OUTPUT, "The global mean per channel: (C,).", "mean_all", _DT, "1"),
        Param("invstdAll", OUTPUT, "The global 1/sqrt(var + eps) per channel: (C,).", "invstd_all", _DT, "1"),
    ),
    rules=_rules(),
    problem=_problem,
    kernel_shapes=kernel_shapes,
    description="SyncBatchNorm's gather: the global mean and invstd per channel from every rank's mean, invstd "
                "and element count.",
    attribute_inputs={"eps": _kernel_eps},
    pythonic=Pythonic(
        allocate={"meanAll": _per_channel_output, "invstdAll": _per_channel_output},
        defaults={"momentum": 0.0, "eps": 1e-5}),
)
