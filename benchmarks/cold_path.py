"""Where a cold GroupNorm call's time goes: the kernel, and opgen's Python around it.

`opgen bench` times whole public calls. This script splits them, on the GroupNorm shapes
of the benchmark, f32 and bf16, torch tensors, every call right after a 256 MB torch op
that evicts the caches (the state a call finds inside a model), interleaved, medians:

  * api:    GetWorkspaceSize + run through the aclnn API (what users call);
  * kernel: the compiled kernel alone, on the arguments the binder made for that call;
  * stream: opgen.bench.same_bytes_stream, torch's add over exactly the op's dy, x and dx
            bytes (integer views): what moving the op's minimal bytes costs;
  * aten:   ``aten.native_group_norm_backward`` on the same tensors.

"kernel/stream" near 1 means the kernel moves its bytes as fast as a plain stream does;
"api - kernel" is what opgen's Python costs in that cold state.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/cold_path.py [--rounds 21]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

SHAPES = ((2, 320, 64, 64, 32), (2, 640, 32, 32, 32), (2, 1280, 16, 16, 32), (8, 256, 56, 56, 32),
          (16, 64, 112, 112, 32))


def contenders(torch, n, c, h, w, g, dtype) -> dict:
    """name -> a call of the four contenders on one case."""
    from opgen import aclnn, launch
    from opgen.bench import same_bytes_stream
    from opgen.executor import _recipes

    hw = h * w
    x = torch.randn(n, c, h, w).to(dtype)
    dy = torch.randn_like(x)
    mean, rstd = torch.randn(n, g).to(dtype), (torch.rand(n, g) + 0.5).to(dtype)
    gamma = torch.ones(c, dtype=dtype)
    args = (dy, x, mean, rstd, gamma, n, c, hw, g, [True] * 3, torch.empty_like(x), torch.empty(c, dtype=dtype),
            torch.empty(c, dtype=dtype))
    phase_one, phase_two = aclnn.aclnnGroupNormBackwardGetWorkspaceSize, aclnn.aclnnGroupNormBackward
    status, size, executor = phase_one(*args)
    if status or not executor.plan.binds_directly:
        raise SystemExit(f"{(n, c, h, w, g)}: no direct plan (status {status})")
    kernel = executor.plan.kernel.function
    kernel_args = launch.binders.get(executor.plan, executor.kinds, _recipes)(executor.arguments)

    def api():
        _, size, ex = phase_one(*args)
        phase_two(None, size, ex, None)

    return {"api": api, "kernel": lambda: kernel(*kernel_args), "stream": same_bytes_stream([dy, x], [args[10]]),
            "aten": lambda: torch.ops.aten.native_group_norm_backward(dy, x, mean, rstd, gamma, n, c, hw, g,
                                                                      [True] * 3)}


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    rounds = parser.parse_args().rounds
    evict = torch.empty(64 << 20)
    print(f"{'(N,C,H,W,G)':<22} {'dtype':<9} {'api ms':>8} {'kernel':>8} {'stream':>8} {'aten':>8} "
          f"{'kernel/stream':>14} {'api-kernel us':>14} {'aten/api':>9}")
    for shape in SHAPES:
        for dtype in (torch.float32, torch.bfloat16):
            calls = contenders(torch, *shape, dtype)
            for call in calls.values():
                call()
            times = {name: [] for name in calls}
            for _ in range(rounds):
                for name, call in calls.items():
                    evict.add_(1.0)
                    start = time.perf_counter()
                    call()
                    times[name].append(time.perf_counter() - start)
            ms = {name: float(np.median(t)) * 1e3 for name, t in times.items()}
            print(f"{str(shape):<22} {str(dtype)[6:]:<9} {ms['api']:8.3f} {ms['kernel']:8.3f} {ms['stream']:8.3f} "
                  f"{ms['aten']:8.3f} {ms['kernel'] / ms['stream']:13.2f}x {(ms['api'] - ms['kernel']) * 1e3:13.0f} "
                  f"{ms['aten'] / ms['api']:8.2f}x")


if __name__ == "__main__":
    main()
