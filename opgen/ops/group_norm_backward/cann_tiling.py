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


def group_norm_grad(n: int, c: int, hxw: int, g: int, item: int, cores: int, ub: int = UB_BYTES) -> dict:
    """GroupNormGradTiling::Init (non-regbase path)."""
    dtype_bytes = 4 if item == 4 else item + 4          # fp16/bf16 budget their fp32 copies
    epb = 32 // (4 if item == 4 else item)
    rnd = lambda a, b: _ceil_div(a, b) * b               # noqa: E731  (CANN's Ceil)
    cpg, nxg = c // g, n * g
    reserve = 1024 + rnd(cpg, epb) * dtype_bytes * 3
    per_core = _ceil_div(nxg, cores)
    used = _ceil_div(nxg, per_core)
    extra = 0 if (hxw % 8 == 0 or cpg == 1) else 2 * rnd(hxw, epb) * 4
    cap_g = max(ub - reserve - extra, 0) // (rnd(cpg * hxw, epb) * dtype_bytes * 3)
    cap_c = (ub - reserve) // (rnd(hxw, epb) * dtype_bytes * 3)
    unit = rnd(hxw, epb) * dtype_bytes * 3
    if hxw == 1:
        mode, chans, elems, ub_bytes = "hw1 (5)", cpg, 1, reserve + rnd(cpg, epb) * dtype_bytes * 3
    elif cap_g > 0:
        mode, chans, elems, ub_bytes = "group (0)", cpg, hxw, reserve + extra + rnd(cpg * hxw, epb) * dtype_bytes * 3
    elif cap_c == 1:
        mode, chans, elems, ub_bytes = "channel (1)", 1, hxw, reserve + unit
    elif cap_c > 1:
        mode, chans, elems, ub_bytes = "channels (2)", cap_c, hxw, reserve + cap_c * unit
    else:
        cap_e = (ub - reserve) // (dtype_bytes * 3) // (epb * 8) * (epb * 8)
        mode, chans, elems, ub_bytes = "hw-chunk (3)", 1, cap_e, reserve + cap_e * dtype_bytes * 3
    deterministic = n > 2
    workspace = 2 * _ceil_div(n, 2) * c * 4 if deterministic else 0
    reread = 1 if mode.startswith(("group", "hw1")) else 2
    elems_total = n * c * hxw
    gm = reread * 2 * elems_total * item + elems_total * item + 2 * nxg * item + nxg * cpg * item
    gm += 2 * nxg * cpg * 4 + (2 * workspace if deterministic else 0) + 2 * c * item
    return dict(mode=mode, cores=used, per_core=per_core, per_pass=f"{chans} x {elems}", ub_bytes=ub_bytes,
                gm_bytes=gm, sums="deterministic" if deterministic else "atomic", workspace=workspace)
