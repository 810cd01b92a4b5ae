"""Time exported CUDA plans through opgen.runtime (no TVM), next to torch where it has a peer.

    python3 scripts/export_bench.py EXPORT_DIR/cuda [--budget 60] [--peak 4.8e12]

Per plan whose data inputs are float32 or bfloat16 (each variant a kernel can choose, e.g. the
128-bit ``vector/`` one, on its own row; a variant the shape's selection rule refuses is a row
saying so), at the first benchmark problem the export wrote (bench.json): the runner's whole call (plan evaluation + launches) on CuPy
device arrays, median of CUDA-event timings, GB/s of the minimal traffic (every caller
array's bytes once) and % of the HBM peak. torch eager and torch.compile (autograd of the
forward) join where torch has CUDA and TORCH_PEERS has the plan's op: torch's formula cannot
be exported as data, and the op packages' peers need TVM to import, so the peers are here.
Exit 1 when a plan fails to run; 2 without CuPy or a device.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # opgen.runtime from the tree

from opgen.runtime import backends, plan as plans   # noqa: E402

EPS = 1e-6


def _rms_norm_peer(torch, arrays, compiled):
    """RmsNormGrad's torch peer: backward of F.rms_norm (dy, x, rstd, gamma in kernel shapes)."""
    dy, x, _, gamma = arrays[:4]
    x, gamma = x.detach().requires_grad_(), gamma.detach().requires_grad_()
    forward = torch.compile(torch.nn.functional.rms_norm) if compiled else torch.nn.functional.rms_norm
    out = forward(x, gamma.shape, gamma, EPS)
    return lambda: torch.autograd.grad(out, (x, gamma), dy, retain_graph=True)


TORCH_PEERS = {"rms_norm_grad": _rms_norm_peer}


def cuda_ms(cupy, run, repeats: int = 20) -> float:
    """Median milliseconds of ``run`` between CUDA events, after 3 warm-up calls."""
    for _ in range(3):
        run()
    times = []
    for _ in range(repeats):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        run()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop))
    return statistics.median(times)


def random_device(cupy, shape, dtype: str):
    """Device array of ``shape`` (bfloat16 as uint16 bits of float32 normals)."""
    values = cupy.random.standard_normal(shape, dtype=cupy.float32)
    if dtype == "bfloat16":
        return (values.view(cupy.uint32) >> 16).astype(cupy.uint16)
    return values.astype(dtype)


def bench_plan(cupy, torch, path: Path, peak: float) -> list:
    """Rows (label, ms, GB/s, % peak) for one plan at its first benchmark problem."""
    plan = plans.load(path)
    case = json.loads(plan.code_file("bench.json").read_text())[0]
    params = plan.caller_params()
    arrays = [random_device(cupy, s, p.dtype) for p, s in zip(params, case["shapes"])]
    label = f"{plan.doc['op']} {plan.doc['dtypes']} {case['problem']}"
    if plan.doc.get("variant", "default") != "default":
        label = f"{label} [{plan.doc['variant']}]"
    why = plans.refusal(plan, arrays)
    if why:      # a variant whose rule this shape does not meet: the library would not run it here
        return [(f"{label} not admitted: {why}", *[float("nan")] * 3)]
    backend = backends.for_plan(plan)
    nbytes = sum(a.nbytes for a in arrays)
    rows = [(f"{label} opgen runner", cuda_ms(cupy, lambda: plans.run(plan, arrays, backend)))]
    peer = TORCH_PEERS.get(plan.doc["op"])
    if torch is not None and peer is not None and params[0].dtype == "float32" and not plan.requires:
        t = [torch.as_tensor(a, device="cuda") for a in arrays]
        for name, compiled in (("torch eager", False), ("torch.compile", True)):
            rows.append((f"{label} {name}", cuda_ms(cupy, peer(torch, t, compiled))))
    return [(name, ms, nbytes / ms / 1e6, 100 * nbytes / ms / 1e-3 / peak) for name, ms in rows]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--budget", type=float, default=60.0, help="seconds; plans that would not fit are skipped")
    parser.add_argument("--peak", type=float, default=4.8e12, help="HBM bytes/s (H200: 4.8e12)")
    args = parser.parse_args(argv)
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
    except Exception as err:   # noqa: BLE001
        print(f"export_bench: the CUDA runtime cannot load: {err}", file=sys.stderr)
        return 2
    try:
        import torch
        torch = torch if torch.cuda.is_available() else None
    except ImportError:
        torch = None
    start, failed = time.monotonic(), 0
    print(f"{'case':<64} {'ms':>9} {'GB/s':>8} {'% peak':>7}")
    paths = sorted(Path(args.folder).rglob("plan.json"), key=lambda p: (json.loads(p.read_text())["op"] not in TORCH_PEERS, p))
    for path in paths:     # plans with a torch peer first: the budget may not reach the rest
        if json.loads(path.read_text())["params"][0]["dtype"] not in ("float32", "bfloat16"):
            continue
        if time.monotonic() - start > args.budget:
            print(f"budget spent: {path.parent} and later plans not timed")
            break
        try:
            for name, ms, gbs, pct in bench_plan(cupy, torch, path, args.peak):
                print(f"{name:<64} {ms:9.4f} {gbs:8.1f} {pct:6.1f}%")
        except Exception as err:   # noqa: BLE001 -- a row, not the end of the table
            failed += 1
            print(f"FAILED {path.parent}: {type(err).__name__}: {err}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
