"""CPU benchmark: opgen kernels next to numpy, torch (when installed) and memcpy.

Prints, per case, the median time of each contender over interleaved repeats (A B C A B C
..., so machine noise hits all alike), the effective bandwidth of the opgen kernel
(minimum bytes: inputs read once, outputs written once) and the same-run memcpy
bandwidth as the roofline. Optional --csv FILE writes the rows.

    python benchmarks/bench_cpu.py [--repeats 15] [--csv out.csv]
"""
from __future__ import annotations

import argparse
import csv
import os
import statistics
import time

# Interleaved contenders share 2 cores: OpenMP threads (torch's) that spin after a
# parallel region steal the core TVM's next kernel needs (GroupNorm measured 1.3 ms alone,
# 4-5 ms right after torch). Passive waiting keeps each contender's time its own. It must
# be set before torch loads, and importing TVM loads torch.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np

from opgen import kernels
from opgen.dtypes import numpy_dtype
from opgen.ops import get_op
from opgen.ops.group_norm_backward import Problem as GroupNormProblem
from opgen.ops.rms_norm_grad import Problem as RmsProblem

CASES = [
    ("rms_norm_grad", "f32-f32", RmsProblem((4096, 4096), 1)),
    ("rms_norm_grad", "bf16-bf16", RmsProblem((4096, 4096), 1)),
    ("rms_norm_grad", "f16-f32", RmsProblem((4096, 4096), 1)),
    ("group_norm_backward", "f32-f32", GroupNormProblem(2, 320, 64 * 64, 32)),
]


def numpy_rms_norm_grad(a: dict) -> None:
    """The same math in float32 numpy, a fair vectorized baseline (it materialises temporaries)."""
    dy, x = a["dy"].astype(np.float32, copy=False), a["x"].astype(np.float32, copy=False)
    g = a["gamma"].astype(np.float32, copy=False)
    rstd = a["rstd"].astype(np.float32).reshape(-1, 1)
    dyg = dy * g
    coef = np.einsum("ij,ij->i", dyg, x)[:, None] * rstd ** 3 / x.shape[1]
    a["dx"][...] = rstd * dyg - x * coef
    a["dgamma"][...] = np.einsum("ij,ij,i->j", dy, x, rstd[:, 0])


def numpy_group_norm_backward(a: dict) -> None:
    dy, x = a["dy"].astype(np.float32, copy=False), a["x"].astype(np.float32, copy=False)
    mean, rstd, gamma = (a[k].astype(np.float32, copy=False) for k in ("mean", "rstd", "gamma"))
    n, g, d, hw = x.shape
    ds = np.einsum("ngdh,ngdh->ngd", dy, x)
    db = dy.sum(axis=3)
    sum_ds = np.einsum("ngd,gd->ng", ds, gamma)
    sum_db = np.einsum("ngd,gd->ng", db, gamma)
    c2 = (sum_db * mean - sum_ds) * rstd ** 3 / (d * hw)
    c3 = -c2 * mean - sum_db * rstd / (d * hw)
    a["dx"][...] = (rstd[..., None] * gamma)[..., None] * dy + c2[..., None, None] * x + c3[..., None, None]
    a["dgamma"][...] = ((ds - db * mean[..., None]) * rstd[..., None]).sum(axis=0)
    a["dbeta"][...] = db.sum(axis=0)


NUMPY = {"rms_norm_grad": numpy_rms_norm_grad, "group_norm_backward": numpy_group_norm_backward}


def torch_baseline(op_name: str, a: dict):
    """torch on the same arrays: its native kernel where the CPU build has one
    (aten.native_group_norm_backward), else the same math in torch's eager ops (RmsNorm:
    aten._fused_rms_norm_backward has no CPU kernel in torch 2.13). None without torch."""
    try:
        import torch
    except Exception:
        return None
    t = {k: torch.from_numpy(np.ascontiguousarray(a[k]).astype(np.float32, copy=False))
         for k in ("dy", "x", "gamma", "rstd", "mean") if k in a}
    if op_name == "group_norm_backward":
        n, g, d, hw = a["x"].shape
        dy, x = t["dy"].reshape(n, g * d, hw), t["x"].reshape(n, g * d, hw)

        def run():
            torch.ops.aten.native_group_norm_backward(dy, x, t["mean"], t["rstd"], t["gamma"].reshape(-1),
                                                      n, g * d, hw, g, [True, True, True])
        return run
    dy, x, gamma, rstd = t["dy"], t["x"], t["gamma"], t["rstd"].reshape(-1, 1)

    def run_rms():
        dyg = dy * gamma
        coef = (dyg * x).sum(dim=1, keepdim=True) * rstd ** 3 / x.shape[1]
        return rstd * dyg - x * coef, (dy * x * rstd).sum(dim=0)
    return run_rms


def bytes_moved(arrays: dict) -> int:
    return sum(a.nbytes for a in arrays.values())


def measure(contenders: dict, repeats: int) -> dict:
    """Interleaved timing: each round runs every contender once; returns name -> median seconds."""
    for run in contenders.values():
        run()  # warm up: page-in, caches, thread pool
    times = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, run in contenders.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


def case_contenders(op_name: str, tag: str, problem, rng):
    op = get_op(op_name)
    combo = op.combo(tag)
    kernel = kernels.get_kernel(op, combo)
    inputs = op.random_inputs(problem, combo, rng)
    reference_shapes = {name: ref.shape for name, ref in op.reference(problem, inputs).items()}
    outputs = {name: np.zeros(reference_shapes[name], numpy_dtype(combo[name])) for name in op.outputs}
    arrays = op.kernel_args(problem, {**inputs, **outputs})
    tensors, _ = kernel.prepare(arrays)  # aligned numpy arrays: zero-copy, nothing to write back
    fn = kernel.module[kernel.symbol]
    contenders = {"opgen": lambda: fn(*tensors)}
    np_arrays = {n: arrays[n].copy() for n in arrays}
    contenders["numpy"] = lambda: NUMPY[op_name](np_arrays)
    torch_run = torch_baseline(op_name, arrays)
    if torch_run is not None:
        contenders["torch"] = torch_run
    src = np.ones(arrays["x"].nbytes // 4, np.float32)
    dst = np.empty_like(src)
    contenders["memcpy"] = lambda: np.copyto(dst, src)
    return contenders, bytes_moved(arrays), 2 * src.nbytes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--csv", help="also write the rows to this CSV file")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    rows = []
    header = f"{'op':<20} {'dtypes':<10} {'problem':<28} {'opgen ms':>9} {'GB/s':>6} {'numpy ms':>9} {'x numpy':>8} {'torch ms':>9} {'memcpy GB/s':>12}"
    print(header)
    for op_name, tag, problem in CASES:
        contenders, nbytes, copy_bytes = case_contenders(op_name, tag, problem, rng)
        t = measure(contenders, args.repeats)
        row = {
            "op": op_name, "dtypes": tag, "problem": str(problem),
            "opgen_ms": t["opgen"] * 1e3, "opgen_gbs": nbytes / t["opgen"] / 1e9,
            "numpy_ms": t["numpy"] * 1e3, "speedup_vs_numpy": t["numpy"] / t["opgen"],
            "torch_ms": t["torch"] * 1e3 if "torch" in t else float("nan"),
            "memcpy_gbs": copy_bytes / t["memcpy"] / 1e9,
        }
        rows.append(row)
        print(f"{op_name:<20} {tag:<10} {str(problem):<28} {row['opgen_ms']:9.2f} {row['opgen_gbs']:6.1f} "
              f"{row['numpy_ms']:9.2f} {row['speedup_vs_numpy']:7.1f}x {row['torch_ms']:9.2f} {row['memcpy_gbs']:12.1f}")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
