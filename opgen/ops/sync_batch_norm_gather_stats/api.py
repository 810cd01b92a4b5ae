"""aclnnSyncBatchNormGatherStats: the aclnn face: parameters in the document's order, rules with
their status codes and example violations, how a call maps onto the kernel.

Sources: the document norm/sync_batch_norm_gather_stats/docs/aclnnSyncBatchNormGatherStats.md ("doc")
and its op_api op_api/aclnn_sync_batch_norm_gather_stats.cpp ("op_api") at hicann/ops-nn e5c3fa932;
docs/validation-vs-cann.md "aclnnSyncBatchNormGatherStats" lists each decision (S1-S5).
* The rules follow the op_api's CheckParams (l.179-191): nulls (161001), dtypes, formats,
  shapes (161002), then no rank (W = 0: 161002, l.271-274); no channel (C = 0) succeeds with
  nothing to write (l.275-279).
* mean and variance (the running statistics) are in-out tensors: CANN writes the updated ones
  back (l.241-249). opgen's ApiSpec has no in-out parameter and opgen writes no tensor it does
  not treat as an output, so a momentum other than 0 (the one update that leaves them as they
  are) is refused (161002; the message says how to update them from batchMean/batchInvstd).
  With momentum 0 they are checked and never read (S1).
* dtypes: totalSum, totalSquareSum, mean and variance alike, batchMean and batchInvstd alike
  (the op_api's OP_CHECK_DTYPE_NOT_SAME, l.84-87); opgen's kernels take batchMean in the sums'
  dtype or float32 and sampleCount INT32 or FLOAT32 (S3).
"""
from __future__ import annotations

import numpy as np

from opgen.apispec import (ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR, ATTR, INPUT, OUTPUT, ApiSpec, Param,
                           Pythonic, Rule, Violation, cast_args, dtype_message, first, null_message, set_args)
from opgen.ops.batch_norm_reduce_backward.api import _tag
from opgen.ops.sync_batch_norm_gather_stats.kernel import Problem, kernel_shapes

SUMS = ("totalSum", "totalSquareSum")
RUNNING = ("mean", "variance")
OUTS = ("batchMean", "batchInvstd")
TENSORS = SUMS + ("sampleCount",) + RUNNING + OUTS
_KERNEL = {"totalSum": "total_sum", "totalSquareSum": "total_square_sum", "sampleCount": "sample_count",
           "batchMean": "batch_mean", "batchInvstd": "batch_invstd"}
_PRIVATE = ("NC1HWC0", "FRACTAL_Z", "FRACTAL_NZ", "NDC1HWC0", "FRACTAL_Z_3D")
_CODE = ACLNN_ERR_PARAM_INVALID
_RANKS = {"totalSum": 2, "totalSquareSum": 2, "sampleCount": 1, "mean": 1, "variance": 1, "batchMean": 1,
          "batchInvstd": 1}


def _floats(call) -> tuple:
    """ASCEND950_DTYPE_SUPPORT_LIST where IsRegbase (the Ascend 950), ASCEND910_ elsewhere (l.40-44, l.71-74)."""
    return ("float32", "float16", "bfloat16") if call.product == "Ascend950" else ("float32", "float16")


def _check_dtypes(call) -> str | None:
    where = f" on {call.product}"
    bad = first(dtype_message(n, call[n].dtype, _floats(call), where) for n in TENSORS if n != "sampleCount")
    return bad or dtype_message("sampleCount", call["sampleCount"].dtype, _floats(call) + ("int32",), where)


def _check_same_dtypes(call) -> str | None:
    bad = first(dtype_message(n, call[n].dtype, (call["totalSum"].dtype,), " (totalSum's)")
                for n in ("totalSquareSum",) + RUNNING)
    return bad or dtype_message("batchInvstd", call["batchInvstd"].dtype, (call["batchMean"].dtype,), " (batchMean's)")


def _check_kernel_row(call) -> str | None:
    """opgen's rows (S3): batchMean in the sums' dtype or float32; sampleCount INT32 or FLOAT32."""
    got = {n: call[n].dtype for n in _KERNEL}
    if any(all(c[_KERNEL[n]] == d for n, d in got.items()) for c in call.combos()):
        return None
    rows = "; ".join(f"sums {c['total_sum']}, outputs {c['batch_mean']}, sampleCount {c['sample_count']}"
                     for c in call.combos())
    given = ", ".join(f"{n} {d}" for n, d in got.items())
    return f"the dtypes ({given}) are not one of opgen's kernels on {call.product}: {rows}"


def _check_formats(call) -> str | None:
    return first(f"{n} has the private format {call[n].format}; expected ND, NCL, NCHW or NCDHW"
                 for n in SUMS + ("sampleCount",) + RUNNING if call[n].format in _PRIVATE)


def _check_shapes(call) -> str | None:
    bad = first(f"{n} has {call[n].ndim} dimensions; expected {r}" for n, r in _RANKS.items() if call[n].ndim != r)
    if bad:
        return bad
    w, c = call["totalSum"].shape
    want = {"totalSquareSum": (w, c), "sampleCount": (w,)}
    want.update({n: (c,) for n in RUNNING + OUTS})
    return first(f"{n} has shape {tuple(call[n].shape)}; expected {want[n]} (totalSum's {(w, c)})"
                 for n in want if tuple(call[n].shape) != want[n])


def _check_ranks(call) -> str | None:
    if call["totalSum"].shape[0] == 0:
        return "totalSum's first dimension (the ranks) is 0; expected at least 1"
    return None


def _check_running_update(call) -> str | None:
    if call["momentum"] == 0:
        return None
    return (f"momentum is {call['momentum']}: CANN updates mean and variance in place, which opgen does not do (no "
            f"in-out parameters; opgen writes no tensor it does not treat as an output): pass momentum 0 and update "
            f"them from batchMean and batchInvstd (variance with the unbiased (1/batchInvstd^2 - eps) * n / (n - 1), "
            f"n = the sum of sampleCount)")


def _null(*names):
    return set_args(**{n: (lambda a: None) for n in names})


def _rules() -> tuple:
    return (
        Rule(ACLNN_ERR_PARAM_NULLPTR, "totalSum, totalSquareSum, sampleCount, mean, variance, batchMean or "
             "batchInvstd is a null pointer. (doc l.246; CheckNotNull l.52-63)",
             lambda call: null_message(call, TENSORS),
             tuple(Violation(f"{n} is None", _null(n)) for n in TENSORS)),
        Rule(_CODE, "a dtype outside the supported range (BFLOAT16 on the Ascend 950 only; sampleCount INT32 too). "
             "(doc l.251, l.221; CheckDtypeValid l.65-83)", _check_dtypes, (
                 Violation("float64 totalSum", cast_args(("totalSum",), np.float64)),
                 Violation("int64 sampleCount", cast_args(("sampleCount",), np.int64)),
                 Violation("bfloat16 batchMean and batchInvstd off the Ascend 950", cast_args(OUTS, "bfloat16"),
                           ("AtlasA3", "AtlasA2")))),
        Rule(_CODE, "totalSum, totalSquareSum, mean, variance not of one dtype; batchMean and batchInvstd not of "
             "one. (doc l.254; OP_CHECK_DTYPE_NOT_SAME l.84-87)", _check_same_dtypes, (
                 Violation("float16 variance", cast_args(("variance",), np.float16)),
                 Violation("float16 batchInvstd", cast_args(("batchInvstd",), np.float16)))),
        Rule(_CODE, "opgen's kernels: batchMean in the sums' dtype or float32, sampleCount INT32 or FLOAT32 (the "
             "op_api casts any supported dtype, S3)", _check_kernel_row, (
                 Violation("float16 outputs with float32 sums", cast_args(OUTS, np.float16)),
                 Violation("float16 sampleCount", cast_args(("sampleCount",), np.float16)))),
        Rule(_CODE, "totalSum, totalSquareSum, sampleCount, mean or variance in a private format. (CheckFormat "
             "l.91-120)", _check_formats, (Violation("FRACTAL_NZ totalSum", _tag("FRACTAL_NZ", ("totalSum",))),)),
        Rule(_CODE, "a shape outside the range: totalSum/totalSquareSum not (W, C), sampleCount not (W,), mean, "
             "variance, batchMean, batchInvstd not (C,). (doc l.257, l.111-191; CheckShape l.122-177)",
             _check_shapes, (
                 Violation("1-D totalSum", set_args(totalSum=lambda a: a["totalSum"].reshape(-1))),
                 Violation("sampleCount one longer", set_args(sampleCount=lambda a: np.concatenate(
                     [a["sampleCount"], a["sampleCount"][:1]]))),
                 Violation("variance one longer", set_args(variance=lambda a: np.concatenate(
                     [a["variance"], a["variance"][:1]]))),
                 Violation("batchInvstd (1, C)", set_args(batchInvstd=lambda a: a["batchInvstd"][None])))),
        Rule(_CODE, "totalSum's first dimension is 0 (doc l.111: it must be greater than 0; op_api l.271-274)",
             _check_ranks, (Violation("no rank", set_args(
                 totalSum=lambda a: a["totalSum"][:0], totalSquareSum=lambda a: a["totalSquareSum"][:0],
                 sampleCount=lambda a: a["sampleCount"][:0])),)),
        Rule(_CODE, "opgen: a momentum other than 0 (CANN updates mean and variance in place; opgen has no in-out "
             "parameters, S1).", _check_running_update, (Violation("momentum 0.1", set_args(momentum=lambda a: 0.1)),)),
    )


def _per_channel_output(tensors: dict, attrs: dict):
    """A (C,) output in float32: a row of every sums dtype, as aclnnLayerNorm's Pythonic statistics."""
    s = tensors["totalSum"]
    if s is None or s.ndim != 2:
        return None
    return (s.shape[1],), "float32"


def _kernel_eps(call) -> float:
    with np.errstate(over="ignore"):
        return float(np.float32(call["eps"]))


_DT = "FLOAT32, FLOAT16, BFLOAT16 (BFLOAT16 on the Ascend 950 only)"
API = ApiSpec(
    params=(
        Param("totalSum", INPUT, "Every rank's per-channel sum: (W, C), W > 0.", "total_sum", _DT, "2"),
        Param("totalSquareSum", INPUT, "Every rank's per-channel sum of squares: totalSum's shape and dtype.",
              "total_square_sum", _DT, "2"),
        Param("sampleCount", INPUT, "Every rank's element count: (W,); INT32 or FLOAT32 in opgen's kernels.",
              "sample_count", _DT + ", INT32", "1"),
        Param("mean", INPUT, "The running mean: (C,), totalSum's dtype; with momentum 0 only (opgen does not update "
              "it in place).", None, _DT, "1", validated_only=True),
        Param("variance", INPUT, "The running variance: (C,), totalSum's dtype; with momentum 0 only.", None, _DT, "1",
              validated_only=True),
        Param("momentum", ATTR, "The running statistics' update factor: 0 (see mean).", value_type="float"),
        Param("eps", ATTR, "Added to the variance (read as float32).", value_type="float"),
        Param("batchMean", OUTPUT, "The global mean per channel: (C,).", "batch_mean", _DT, "1"),
        Param("batchInvstd", OUTPUT, "The global 1/sqrt(var + eps) per channel: (C,), batchMean's dtype.",
              "batch_invstd", _DT, "1"),
    ),
    rules=_rules(),
    problem=lambda call: Problem(call["totalSum"].shape[0], call["totalSum"].shape[1], call["eps"]),
    kernel_shapes=kernel_shapes,
    description="SyncBatchNorm's gather from sums: the global mean and invstd per channel from every rank's sum, "
                "square sum and element count.",
    attribute_inputs={"eps": _kernel_eps},
    pythonic=Pythonic(
        allocate={"batchMean": _per_channel_output, "batchInvstd": _per_channel_output},
        defaults={"momentum": 0.0, "eps": 1e-5}),
)
