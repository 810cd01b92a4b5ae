"""SyncBatchNorm's forward halves on the CPU: opgen's public API with numpy arrays (outputs
given) against the torch composite of each op (the CPU peers in opgen/ops/batch_norm_reduce/
peers.py and opgen/ops/batch_norm_elemt/peers.py: ATen's batch_norm_stats and batch_norm_elemt
have no CPU kernel), the minimum of 40 calls in 4 interleaved rounds per side: a minimum, not
opgen bench's median, so that a machine shared with other work still gives a comparable row.

    python benchmarks/bn_forward_min.py                                   # default threads
    TVM_NUM_THREADS=1 TORCH_THREADS=1 taskset -c 1 python benchmarks/bn_forward_min.py   # one core
"""
import os
import time
import numpy as np
import torch
import opgen

torch.set_num_threads(int(os.environ.get("TORCH_THREADS", torch.get_num_threads())))

def tmin(f, n):
    best = 1e9
    for _ in range(n):
        t = time.perf_counter(); f(); best = min(best, time.perf_counter() - t)
    return best

def run(op, shape, dt, n=40):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 2 + 0.5).astype(dt)
    c = shape[1]
    tx = torch.from_numpy(x)
    axes = [0] + list(range(2, len(shape)))
    view = [1, c] + [1] * (len(shape) - 2)
    if op == "reduce":
        s, q = np.empty(c, np.float32), np.empty(c, np.float32)
        ours = lambda: opgen.batch_norm_reduce(x, sum=s, square_sum=q)
        def comp():
            xf = tx.float(); return xf.sum(axes), (xf * xf).sum(axes)
    else:
        st = np.float32
        m, iv, w, b = (rng.standard_normal(c).astype(st), rng.uniform(0.5, 2, c).astype(st),
                       rng.uniform(0.5, 1.5, c).astype(st), rng.standard_normal(c).astype(st))
        y = np.empty_like(x)
        ours = lambda: opgen.batch_norm_elemt(x, w, b, m, iv, 1e-5, output=y)
        tm, ti, tw, tb = (torch.from_numpy(a).view(view) for a in (m, iv, w, b))
        comp = lambda: ((tx.float() - tm) * (ti * tw) + tb).to(tx.dtype)
    ours(); comp()
    a = b_ = 1e9
    for _ in range(4):
        a = min(a, tmin(ours, n // 4)); b_ = min(b_, tmin(comp, n // 4))
    print(f"{op:7s} {np.dtype(dt).name:8s} {'x'.join(map(str, shape)):14s} opgen {a*1e3:8.3f} ms  composite {b_*1e3:8.3f} ms  composite/opgen {b_/a:6.2f}x", flush=True)

for op in ("reduce", "elemt"):
    for shape in ((32, 64, 56, 56), (32, 256, 14, 14), (16, 512, 7, 7), (8, 128, 28, 28)):
        for dt in (np.float32, np.float16):
            run(op, shape, dt)
