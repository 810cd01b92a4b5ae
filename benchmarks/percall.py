"""Warm per-call cost of the aclnn API on tiny shapes, next to ATen's native kernels.

`opgen bench` times tiny shapes interleaved with other contenders (cold calls: every call
wakes thread pools and refills caches). This script times what issue 10 asks for, warm
calls back to back: GetWorkspaceSize + run (with aclrtMalloc/aclrtFree of the workspace
when one is asked for) on plain numpy arrays and on torch tensors, against ``aten.native_group_norm_backward`` and ``aten.native_layer_norm_backward``
on torch tensors of the same sizes. Medians of 2000 calls after 200 warm-up calls, and
the same for phase one alone.

    python benchmarks/percall.py            # run it with the OMP_WAIT_POLICY you use:
    OMP_WAIT_POLICY=PASSIVE python benchmarks/percall.py   # ATen then wakes its threads every call
"""
from __future__ import annotations

import time

import numpy as np

from opgen import acl, aclnn


def median_us(fn, calls: int = 2000, warmup: int = 200) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e6


def group_norm_case(rng):
    n, c, hw, g = 1, 32, 4, 8
    x = rng.standard_normal((n, c, 2, 2)).astype(np.float32)
    args = (rng.standard_normal(x.shape).astype(np.float32), x, rng.standard_normal((n, g)).astype(np.float32),
            (rng.random((n, g)) + 0.5).astype(np.float32), np.ones(c, np.float32), n, c, hw, g, [True] * 3,
            np.empty_like(x), np.empty(c, np.float32), np.empty(c, np.float32))
    return "GroupNormBackward (1,32,2x2,G=8)", aclnn.aclnnGroupNormBackwardGetWorkspaceSize, \
        aclnn.aclnnGroupNormBackward, args


def rms_norm_case(rng):
    x = rng.standard_normal((4, 64)).astype(np.float32)
    args = (rng.standard_normal(x.shape).astype(np.float32), x, np.ones(4, np.float32), np.ones(64, np.float32),
            np.empty_like(x), np.empty(64, np.float32))
    return "RmsNormGrad (4,64)", aclnn.aclnnRmsNormGradGetWorkspaceSize, aclnn.aclnnRmsNormGrad, args


def opgen_call(phase_one, phase_two, args):
    def call():
        status, size, executor = phase_one(*args)
        workspace = acl.aclrtMalloc(size)[1] if size else None
        phase_two(workspace, size, executor, None)
        if workspace is not None:
            acl.aclrtFree(workspace)
    status = phase_one(*args)[0]
    if status:
        raise SystemExit(f"phase one failed: {acl.aclGetRecentErrMsg()}")
    return call


def aten_calls():
    """ATen's native backward kernels on the same sizes (None without torch)."""
    try:
        import torch
    except ImportError:
        return {}
    x = torch.randn(1, 32, 2, 2)
    dy, mean, rstd, w = torch.randn_like(x), torch.randn(1, 8), torch.rand(1, 8) + 0.5, torch.ones(32)
    gn = torch.ops.aten.native_group_norm_backward
    xr = torch.randn(4, 64)
    dyr, mu, rs, wr, br = torch.randn_like(xr), torch.randn(4, 1), torch.rand(4, 1), torch.ones(64), torch.zeros(64)
    ln = torch.ops.aten.native_layer_norm_backward
    return {"GroupNormBackward (1,32,2x2,G=8)": lambda: gn(dy, x, mean, rstd, w, 1, 32, 4, 8, [True] * 3),
            "RmsNormGrad (4,64)": lambda: ln(dyr, xr, [64], mu, rs, wr, br, [True, True, True])}


def as_torch(args: tuple) -> tuple | None:
    """The same call on torch tensors from torch's allocator (None without torch)."""
    try:
        import torch
    except ImportError:
        return None
    return tuple(torch.from_numpy(a).clone() if isinstance(a, np.ndarray) else a for a in args)


def main() -> None:
    rng = np.random.default_rng(0)
    peers = aten_calls()
    print(f"{'case':<34} {'opgen numpy':>11} {'opgen torch':>11} {'phase one':>10} {'ATen':>8} "
          f"{'numpy/ATen':>11} {'torch/ATen':>11}")
    for name, phase_one, phase_two, args in (group_norm_case(rng), rms_norm_case(rng)):
        whole = median_us(opgen_call(phase_one, phase_two, args))
        torch_args = as_torch(args)
        on_torch = median_us(opgen_call(phase_one, phase_two, torch_args)) if torch_args else float("nan")
        first = median_us(lambda: phase_one(*args))
        aten = median_us(peers[name]) if name in peers else float("nan")
        print(f"{name:<34} {whole:9.1f}us {on_torch:9.1f}us {first:8.1f}us {aten:6.1f}us "
              f"{whole / aten:10.2f}x {on_torch / aten:10.2f}x")


if __name__ == "__main__":
    main()
