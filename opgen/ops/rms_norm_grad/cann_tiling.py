"""CANN's Ascend tiling of RmsNormGrad, for ``opgen tiling`` to set beside opgen's.

Transcribed from ops-nn's norm/rms_norm_grad/op_host/rms_norm_grad_tiling.cpp
(Tiling4RmsNormGrad, its non-regbase Atlas A2/A3 path: LargeNSmallD, LargeNLargeD,
CalcSmallDBufferSize), with the shapes of its tiling tests. ``plan`` returns the fields of
a report line (see opgen.targets.ascend.tiling_report); GM bytes apply opgen's traffic
model to CANN's plan, so the two lines compare plans, not measurements.
"""
from __future__ import annotations

LABEL = "RmsNormGrad"
# ops-nn's tiling tests inline CORE_NUM 40 (tests/ut/op_host/test_rms_norm_grad_tiling.cpp):
# `opgen tiling --cores 40` reproduces their splits, e.g. (130, 16) -> 33 cores x 4 rows.
TEST_CORES = 40
# Where CANN runs these formulas: Tiling4RmsNormGrad's non-regbase path (isSoc910bc).
PRODUCTS = ("AtlasA2", "AtlasA3")
ELSEWHERE = {
    "Ascend950": "CANN: regbase kernels on Ascend950 (op_host/rms_norm_grad_regbase_tiling.cpp, "
                 "op_kernel/arch35/), another tiling: not transcribed",
    "AtlasTraining": "CANN: whole_reduce kernels on Ascend910 (op_kernel/rms_norm_grad_whole_reduce_n.h "
                     "and _d.h, __CCE_AICORE__ == 100): not transcribed",
    "AtlasInference": "CANN: on Ascend310P the split-N/split-D kernels with the tiling's 910B/910_93-only "
                      "workspace path off (rms_norm_grad_tiling.cpp, isSoc910bc): not transcribed",
}
CASES = (("16x16", "f16-f16"), ("16x12288", "f16-f16"), ("130x16", "bf16-bf16"), ("16x12290", "bf16-bf16"))


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def plan(problem, item: int, cores: int) -> dict:
    return rms_norm_grad(problem.rows, problem.cols, item, cores)


def rms_norm_grad(rows: int, cols: int, item: int, cores: int) -> dict:
    """Tiling4RmsNormGrad (non-regbase path), atomic dgamma (fixed_output =
    GetDeterministic(), 0 by default)."""
    align = 8 if item == 4 else 16
    col_align = _ceil_div(cols, align) * align
    block_factor = _ceil_div(rows, cores)
    block_dim = _ceil_div(rows, block_factor)
    if cols <= 6080:
        buffer_size, mode, ub_bytes = 6080, "split-N", None
        if col_align <= 640:
            ub_rows = (195584 - col_align * 10) // (col_align * 24 + 268)
            buffer_size, mode = ub_rows * col_align, "small-D"
            ub_bytes = min(ub_rows, block_factor) * (col_align * 24 + 268) + col_align * 10
        ub_rows, ub_cols, reread = min(buffer_size // col_align, block_factor), cols, 1
    else:
        mode, ub_rows, ub_cols, reread, ub_bytes = "split-D", 1, 4096, 2, None
    gm = reread * 2 * rows * cols * item + rows * cols * item + rows * 4
    gm += (block_dim if mode != "split-D" else reread * rows) * cols * item + block_dim * cols * 4
    return dict(mode=mode, cores=block_dim, per_core=block_factor, per_pass=f"{ub_rows} x {ub_cols}",
                ub_bytes=ub_bytes, gm_bytes=gm, sums="atomic", workspace=8 * block_dim * 4)
