"""CANN's Ascend tiling of GroupNormBackward, for ``opgen tiling`` to set beside opgen's.

Transcribed from ops-nn's norm/group_norm_grad/op_host/group_norm_grad_tiling.cpp
(GroupNormGradTiling::Init, its non-regbase Atlas A2/A3 path: PlanStepCoreUsage,
CalStage1TilingInfo, CalStage2TilingInfo), with the shapes of its tiling tests. ``plan``
returns the fields of a report line (see opgen.targets.ascend.tiling_report); UB bytes are
what the formulas budget, GM bytes opgen's traffic model applied to CANN's plan.
"""
from __future__ import annotations

LABEL = "GroupNormGrad"
CASES = (("12,64,128x128,32", "f32-f32"), ("1,2130,1664,71", "f32-f32"), ("32,64,1,64", "f32-f32"))
UB_BYTES = 196608           # the UB size of ops-nn's tiling tests (Atlas A2)
# ops-nn's tiling tests inline CORE_NUM 48 (tests/ut/op_host/test_group_norm_grad_tiling.cpp).
TEST_CORES = 48
# Where CANN runs these formulas: GroupNormGradTiling's non-regbase path.
PRODUCTS = ("AtlasA2", "AtlasA3")
ELSEWHERE = {
    "Ascend950": "CANN: regbase kernels on Ascend950 (op_host/group_norm_grad_tiling_arch35.cpp, "
                 "op_kernel/arch35/), another tiling: not transcribed",
    "AtlasTraining": "CANN: ops-nn has no GroupNormGrad kernel for Ascend910 (op_host/config: "
                     "ascend910b, ascend910_93, ascend950)",
    "AtlasInference": "CANN: ops-nn has no GroupNormGrad kernel for Ascend310P (op_host/config: "
                      "ascend910b, ascend910_93, ascend950)",
}


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def plan(problem, item: int, cores: int) -> dict:
    return group_norm_grad(problem.N, problem.C, problem.HxW, problem.group, item, cores)


RESERVE = 1024              # RESERVE_SAPCE
UB_COPIES = 3               # UB_COPIES_1


def _capacities(cpg: int, hxw: int, dtype_bytes: int, epb: int, ub: int) -> dict:
    """GroupNormGradTiling::Init's UB arithmetic, shared by the report line and the full
    tiling data: the reserve, the ragged-HxW extra, the groups / channels that fit a pass
    (cap_g, cap_c), one channel's bytes, and the stage-1 mode they choose (0 group, 1 channel,
    2 channels, 3 hw-chunk with cap_e elements a pass, 5 HxW == 1)."""
    rnd = lambda a, b: _ceil_div(a, b) * b               # noqa: E731  (CANN's Ceil)
    reserve = RESERVE + rnd(cpg, epb) * dtype_bytes * UB_COPIES
    extra = 0 if (hxw % 8 == 0 or cpg == 1) else 2 * rnd(hxw, epb) * 4
    cap_g = 0 if ub < reserve + extra else (ub - reserve - extra) // (rnd(cpg * hxw, epb) * dtype_bytes * UB_COPIES)
    unit = rnd(hxw, epb) * dtype_bytes * UB_COPIES
    cap_c = (ub - reserve) // unit if unit else 0
    cap_e = 0
    if hxw == 1:
        mode = 5
    elif cap_g > 0:
        mode = 0
    elif cap_c == 1:
        mode = 1
    elif cap_c > 1:
        mode = 2
    else:
        mode = 3
        cap_e = (ub - reserve) // (dtype_bytes * UB_COPIES) // (epb * 8) * (epb * 8)
    return dict(reserve=reserve, extra=extra, cap_g=cap_g, cap_c=cap_c, unit=unit, cap_e=cap_e, mode=mode)


MODE_NAMES = {5: "hw1 (5)", 0: "group (0)", 1: "channel (1)", 2: "channels (2)", 3: "hw-chunk (3)"}


def deterministic(n: int) -> bool:
    """Whether CANN's GroupNormGrad sums dgamma/dbeta deterministically (through its
    workspace, tiling key + 10) rather than atomically: N > 2."""
    return n > 2


def group_norm_grad(n: int, c: int, hxw: int, g: int, item: int, cores: int, ub: int = UB_BYTES) -> dict:
    """GroupNormGradTiling::Init (non-regbase path), as a report line."""
    dtype_bytes = 4 if item == 4 else item + 4          # fp16/bf16 budget their fp32 copies
    epb = 32 // (4 if item == 4 else item)
    rnd = lambda a, b: _ceil_div(a, b) * b               # noqa: E731  (CANN's Ceil)
    cpg, nxg = c // g, n * g
    per_core = _ceil_div(nxg, cores)
    used = _ceil_div(nxg, per_core)
    k = _capacities(cpg, hxw, dtype_bytes, epb, ub)
    reserve, mode = k["reserve"], k["mode"]
    chans, elems, ub_bytes = {
        5: (cpg, 1, reserve + rnd(cpg, epb) * dtype_bytes * UB_COPIES),
        0: (cpg, hxw, reserve + k["extra"] + rnd(cpg * hxw, epb) * dtype_bytes * UB_COPIES),
        1: (1, hxw, reserve + k["unit"]),
        2: (k["cap_c"], hxw, reserve + k["cap_c"] * k["unit"]),
        3: (1, k["cap_e"], reserve + k["cap_e"] * dtype_bytes * UB_COPIES)}[mode]
    det = deterministic(n)
    workspace = 2 * _ceil_div(n, 2) * c * 4 if det else 0
    reread = 1 if mode in (0, 5) else 2
    elems_total = n * c * hxw
    gm = reread * 2 * elems_total * item + elems_total * item + 2 * nxg * item + nxg * cpg * item
    gm += 2 * nxg * cpg * 4 + (2 * workspace if det else 0) + 2 * c * item
    return dict(mode=MODE_NAMES[mode], cores=used, per_core=per_core, per_pass=f"{chans} x {elems}",
                ub_bytes=ub_bytes, gm_bytes=gm, sums="deterministic" if det else "atomic",
                workspace=workspace)


# ---- the whole GroupNormGradTilingData, for running CANN's own kernel (opgen compare --against cann-src)
STEP_SIZE = 64
UPPER_CARRYING_LIMIT = 8000
DTYPE_KEY = {"float32": 0, "float16": 1, "bfloat16": 2}   # FP32_MODE, FP16_MODE, BF16_MODE


def tiling_data(n: int, c: int, hxw: int, g: int, dtype: str, cores: int,
                ub: int = UB_BYTES) -> tuple[dict, int, int]:
    """(GroupNormGradTilingData fields, tiling key, user workspace bytes) of GroupNormGradTiling's
    non-regbase path (Init: PlanStepCoreUsage, CalStage1TilingInfo, CalStage2TilingInfo;
    SetKernelTiling). The tiling key is the dtype's (0 float32, 1 float16, 2 bfloat16) plus 10
    when N > 2 (deterministic dgamma/dbeta through the workspace); the field Tiling_key is the
    stage-1 mode (0 group, 1 channel, 2 channels, 3 hw-chunk, 5 HxW == 1). dx, dgamma and dbeta
    are all required (the attrs' defaults)."""
    if dtype not in DTYPE_KEY:
        raise ValueError(f"CANN's GroupNormGrad has no {dtype} kernel")
    if n * g == 0 or hxw == 0 or c % g or c // g == 0:
        raise ValueError(f"CANN's GroupNormGrad tiling refuses N={n}, C={c}, HxW={hxw}, G={g}")
    dtype_bytes = 4 if dtype == "float32" else 2 + 4
    epb = 8 if dtype == "float32" else 16
    rnd = lambda a, b: _ceil_div(a, b) * b               # noqa: E731  (CANN's Ceil)
    cpg, nxg = c // g, n * g
    if rnd(cpg, epb) > UPPER_CARRYING_LIMIT:
        raise ValueError(f"CANN's GroupNormGrad refuses C/G = {cpg} (over {UPPER_CARRYING_LIMIT})")
    per_core = _ceil_div(nxg, cores)
    used = (nxg - 1) // per_core + 1
    per_tail, tail_core = per_core, used
    if nxg % used:
        per_tail, tail_core = per_core - 1, nxg % used
    k = _capacities(cpg, hxw, dtype_bytes, epb, ub)
    cap_c, cap_e, mode = k["cap_c"], k["cap_e"], k["mode"]
    iter_c = tail_c = iter_e = tail_e = 0
    if cap_c > 0:
        iter_c = rnd(cpg, cap_c) // cap_c
        tail_c = cap_c if iter_c * cap_c == cpg else cpg - (iter_c - 1) * cap_c
    if mode == 3:
        iter_e = rnd(hxw, cap_e) // cap_e
        tail_e = cap_e if hxw == iter_e * cap_e else hxw - (iter_e - 1) * cap_e
    det = int(deterministic(n))
    ws = stage2 = cast = tail_cast = parts = parts_tail = repeat = 0
    user_ws = 0
    avail = (ub - RESERVE) // 2
    if det or dtype != "float32":
        split = used // 2 if (det and dtype == "float32") else used
        cast = rnd(_ceil_div(c, split), STEP_SIZE)
        stage2 = _ceil_div(c, cast)
        tail_cast = c if stage2 == 1 else c - (stage2 - 1) * cast
        ws = _ceil_div(n, 2) * c if det else c
        user_ws = 2 * ws * 4
    if det:
        if dtype == "float32":
            avail = avail - cast * 4 if avail > cast * 4 else 0
            batches = _ceil_div(_ceil_div(n, 2), 2)
        else:
            avail = avail - cast * (4 + 2)
            batches = _ceil_div(n, 2)
        parts = min(avail // (cast * 4), batches)
        if parts == 0:
            raise ValueError("CANN's GroupNormGrad tiling: no UB for stage 2 (coreBatchParts 0)")
        parts_tail = parts if batches % parts == 0 else batches % parts
        repeat = _ceil_div(batches, parts)
    values = dict(Tiling_key=mode, N=n, C=c, HXW=hxw, G=g, NXG=nxg, C_G=cpg, task_num_per_core=per_core,
                  task_num_per_tail_core=per_tail, tail_core=tail_core, mode1_ub_cap_C_num=cap_c,
                  mode1_ub_iter_C_num=iter_c, mode1_ub_tail_C_num=tail_c, mode2_ub_capacity_ele=cap_e,
                  mode2_ub_iteration_num=iter_e, mode2_ub_tail_num=tail_e, workSpaceSize=ws,
                  stage2CoreUsed=stage2, castEleNum=cast, tailCastNum=tail_cast, coreBatchParts=parts,
                  coreBatchPartsTailRepeat=parts_tail, repeatTime4Stage2=repeat, dx_is_require=1,
                  dgamma_is_require=1, dbeta_is_require=1, block_dim=used)
    return values, DTYPE_KEY[dtype] + 10 * det, user_ws


def kernel_tiling(problem, combo, cores: int) -> tuple[dict, int, int]:
    """``tiling_data`` for a Problem and dtype combo (CANN's kernel takes one dtype, dy's)."""
    return tiling_data(problem.N, problem.C, problem.HxW, problem.group, combo["dy"], cores)


# CANN's kernel of this op in an ops-nn checkout, for opgen compare --against cann-src
# (opgen.targets.ascend.cann_src): sources, tiling struct, GM arguments before workspace and
# tiling (group_norm_grad.cpp's order), no dtype macros (the tiling key picks the dtype), the
# tiling above, and default shapes, one per stage-1 mode that runs on the emulation: group (0,
# deterministic), channel (1 for float32, hw-chunk for 16-bit), channels (2), hw-chunk (3,
# deterministic). Not among them, as the emulation's hazard checks stop CANN's kernel there:
# HxW == 1 (mode 5: Compute_Mode_5 copies dgamma out on MTE3 right after the Mul writing it on
# V, with no V->MTE3 sync) and N == 1 with 16-bit dtypes (non_fp32_dgamma_dbeta2GM Casts the
# sums SetValue wrote on S with no S->V sync), e.g. CASES' 32,64,1,64 and 1,2130,1664,71 (f16).
KERNEL = dict(
    kernel="norm/group_norm_grad/op_kernel/group_norm_grad.cpp",
    tiling_header="norm/group_norm_grad/op_host/group_norm_grad_tiling.h",
    struct="GroupNormGradTilingData",
    symbol="group_norm_grad",
    entry=("dy", "mean", "rstd", "x", "gamma", "dx", "dgamma", "dbeta"),
    dtype_macros={},
    tiling=kernel_tiling,
    shapes=("4,32,64,8", "2,4,12000,2", "2,60,1664,2", "12,64,128x128,32"),
    kt_test=False,          # its __CCE_KT_TEST__ branches drop the SyncAll between stages
    sums=lambda problem: "deterministic" if deterministic(problem.N) else "atomic",
)
