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
    GetDeterministic(), 0 by default), as a report line: read off ``tiling_data``, the one
    transcription of CANN's formulas."""
    t, key, workspace = tiling_data(rows, cols, item, False, cores)
    col_align, block_dim = t["chunk_size"], t["block_dim"]
    small = key == 1 and col_align <= SMALLD_THRESHOLD
    mode = "split-D" if key == 2 else "small-D" if small else "split-N"
    ub_rows, ub_cols, reread = (1, SPLIT_D_BUFFER, 2) if key == 2 else (t["ub_factor"], cols, 1)
    ub_bytes = t["ub_factor"] * (col_align * SMALLD_BYTES + SMALLD_FIXED) + col_align * 10 if small else None
    gm = reread * 2 * rows * cols * item + rows * cols * item + rows * 4
    gm += (block_dim if mode != "split-D" else reread * rows) * cols * item + block_dim * cols * 4
    return dict(mode=mode, cores=block_dim, per_core=t["block_factor"], per_pass=f"{ub_rows} x {ub_cols}",
                ub_bytes=ub_bytes, gm_bytes=gm, sums="atomic", workspace=workspace)


# ---- the whole RmsNormGradTilingData, for running CANN's own kernel (opgen compare --against cann-src)
SPLIT_N_BUFFER = 6080       # BUFFER_SIZE_SPLIT_N_HIGH_PRECISION
SPLIT_D_BUFFER = 4096       # BUFFER_SIZE_SPLIT_D_HIGH_PRECISION
SMALLD_THRESHOLD = 640
SMALLD_BYTES, SMALLD_FIXED = 24, 268   # CalcSmallDBufferSize: UB bytes per aligned column and per row
USED_UB = 195584            # (192 - 1) * 1024
DATA_TYPE = {4: 0, 2: 1}    # tiling's data_type: dtype_key - 1 (0 float32, 1 float16, 2 bfloat16)


def _core_split(rows: int, cores: int) -> dict:
    """LargeNSmallD/LargeNLargeD's block split: ceil(rows / cores) rows per core, the rest on the last."""
    block_factor = _ceil_div(rows, cores)
    block_dim = _ceil_div(rows, block_factor)
    tail = rows - (block_dim - 1) * block_factor if rows % block_factor else 0
    return dict(block_factor=block_factor, core_calc_num=block_factor, core_calc_tail=tail, block_dim=block_dim)


def _loops(total: int, factor: int) -> tuple[int, int, int]:
    """(per pass, tail pass or 0, passes) of ``total`` in passes of ``factor``."""
    loops = _ceil_div(total, factor)
    return factor, (total - (loops - 1) * factor if total % factor else 0), loops


def tiling_data(rows: int, cols: int, dtype_bytes: int, bf16: bool, cores: int) -> tuple[dict, int, int]:
    """(RmsNormGradTilingData fields, tiling key, user workspace bytes) of Tiling4RmsNormGrad's
    non-regbase path with fixed_output 0 (GetDeterministic() off, atomic dgamma): LargeNSmallD
    for cols <= 6080 (key 1, its ub_factor from CalcSmallDBufferSize when the aligned columns are
    <= 640), else LargeNLargeD (key 2); SetTilingDataAndWorkspace's chunk fields and workspace.
    ``cols`` is the product of gamma's dims, ``rows`` the rest (UpdateShapeInfo)."""
    if rows < 1 or cols < 1:
        raise ValueError(f"CANN's non-regbase RmsNormGrad tiling refuses rows={rows}, cols={cols} (empty tensors)")
    align = 8 if dtype_bytes == 4 else 16
    col_align = _ceil_div(cols, align) * align
    t = dict(row=rows, col=cols, avg_factor=1.0 / cols, data_type=2 if bf16 else DATA_TYPE[dtype_bytes],
             **_core_split(rows, cores))
    if cols <= SPLIT_N_BUFFER:
        key, buffer = 1, SPLIT_N_BUFFER
        if col_align <= SMALLD_THRESHOLD:
            buffer = (USED_UB - col_align * 10) // (col_align * SMALLD_BYTES + SMALLD_FIXED) * col_align
        ub_factor = min(buffer // col_align, t["block_factor"])
        num, tail, loop = _loops(t["block_factor"], ub_factor)
        t.update(ub_split_dim=0, ub_factor=ub_factor, ub_calc_num=num, ub_calc_tail=tail, ub_calc_loop=loop)
        if t["core_calc_tail"]:
            num, tail, loop = _loops(t["core_calc_tail"], ub_factor)
        else:
            num, tail, loop = 0, 0, 0
    else:
        key = 2
        num, tail, loop = _loops(cols, SPLIT_D_BUFFER)
        t.update(ub_split_dim=1, ub_factor=SPLIT_D_BUFFER, ub_calc_num=num, ub_calc_tail=tail, ub_calc_loop=loop)
        if not t["core_calc_tail"]:
            num, tail, loop = 0, 0, 0
    t.update(ub_calc_tail_num=num, ub_calc_tail_tail=tail, ub_calc_tail_loop=loop, fixed_output=0,
             chunk_size=col_align, chunk_num=1, chunk_tail=0, need_chunk=0)
    return t, key, 8 * t["block_dim"] * 4


def kernel_tiling(problem, combo, cores: int) -> tuple[dict, int, int]:
    """``tiling_data`` for a Problem and dtype combo (the tiling reads dy's dtype)."""
    item = 4 if combo["dy"] == "float32" else 2
    return tiling_data(problem.rows, problem.cols, item, combo["dy"] == "bfloat16", cores)


# CANN's kernel of this op in an ops-nn checkout, for opgen compare --against cann-src
# (opgen.targets.ascend.cann_src): sources, tiling struct, GM arguments before workspace and
# tiling, dtype macros (by the combo's tensor), the tiling above, and the default shapes:
# split-N (4 rows per core, a row per pass), split-N with a tail core, small-D (BroadCast and
# WholeReduceSum with the mask register), split-D (4096-column chunks and a 2-column tail).
KERNEL = dict(
    kernel="norm/rms_norm_grad/op_kernel/rms_norm_grad.cpp",
    tiling_header="norm/rms_norm_grad/op_host/rms_norm_grad_tiling.h",
    struct="RmsNormGradTilingData",
    symbol="rms_norm_grad",
    entry=("dy", "x", "rstd", "gamma", "dx", "dgamma"),
    dtype_macros={"DTYPE_DY": "dy", "DTYPE_GAMMA": "gamma"},
    tiling=kernel_tiling,
    shapes=("192x1024", "100x3000", "130x16", "16x12290"),
)
