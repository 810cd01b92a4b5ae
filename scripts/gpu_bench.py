"""GPU benchmark for a machine with an NVIDIA GPU (scripts/gpu_check.sh runs it).

opgen's cuda kernels next to torch eager, torch.compile and Liger-Kernel's RMSNorm (when
it imports), same process, same tensors, medians of CUDA-event timings. Printed per row:
milliseconds, GB/s of the ideal traffic (read dy and x, write dx, once each) and its
percentage of the HBM peak (4.8 TB/s, an H200; ``--peak`` for another GPU). Two opgen
numbers: ``opgen kernel`` (the compiled kernel on device tensors, what a framework would
launch) and ``opgen aclnn`` (the whole two-phase aclnn call on torch CUDA tensors).

Written without a GPU (none was lent to the session that wrote it): ``--dry-run`` checks
the plan and the arithmetic on the CPU; every baseline that fails is reported and skipped.
A time budget (``--budget`` seconds) skips what would not fit, so a short GPU loan ends
with a table instead of a timeout.
"""
from __future__ import annotations

import argparse
import statistics
import time


RMS_SHAPES = [(4096, 4096), (8192, 5120), (16384, 1024), (2048, 8192), (32768, 8192)]
RMS_TAGS = ("bf16-bf16", "f32-f32")
# opgen's CPU benchmark shapes (opgen.bench.GN_SHAPES) plus the (32, 1280, 32x32, 32).
GN_SHAPES = [(2, 320, 64 * 64, 32), (2, 640, 32 * 32, 32), (2, 1280, 16 * 16, 32), (8, 256, 56 * 56, 32),
             (16, 64, 112 * 112, 32), (32, 1280, 32 * 32, 32)]
GN_TAGS = ("bf16-bf16", "f32-f32")
ITEMSIZE = {"bf16-bf16": 2, "f32-f32": 4}
# --smoke runs the same code on the CPU (torch CPU tensors, the llvm target, tiny shapes) to
# check the glue without a GPU; a GPU run uses "cuda" for both.
SETUP = {"device": "cuda", "target": "cuda"}


def ideal_bytes(op: str, shape, tag: str) -> int:
    """dy and x read once, dx written once (the per-row/per-channel vectors are noise)."""
    elements = shape[0] * shape[1] if op == "rms_norm_grad" else shape[0] * shape[1] * shape[2]
    return 3 * elements * ITEMSIZE[tag]


def row(label: str, seconds: float | None, nbytes: int, peak: float, note: str = "") -> str:
    if seconds is None:
        return f"  {label:<16} {'-':>9} {'-':>9} {'-':>7}  {note}"
    gbs = nbytes / seconds / 1e9
    return f"  {label:<16} {seconds * 1e3:9.3f} {gbs:9.1f} {100 * gbs * 1e9 / peak:6.1f}%  {note}"


def cuda_time(torch, fn, min_seconds: float = 0.3, max_reps: int = 200) -> float:
    """Median seconds of ``fn`` over CUDA events, after a warm-up call."""
    fn()
    if SETUP["device"] != "cuda":
        return cpu_time(fn)
    torch.cuda.synchronize()
    times, start_all = [], time.perf_counter()
    while len(times) < max_reps and (len(times) < 5 or time.perf_counter() - start_all < min_seconds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def cpu_time(fn, reps: int = 5) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# ---- inputs and baselines ---------------------------------------------------------------

def torch_dtype(torch, tag: str):
    return torch.bfloat16 if tag.startswith("bf16") else torch.float32


def rms_inputs(torch, shape, tag):
    rows, cols = shape
    dt = torch_dtype(torch, tag)
    g = torch.Generator(device=SETUP["device"]).manual_seed(0)
    x = torch.randn(rows, cols, device=SETUP["device"], generator=g).to(dt)
    dy = torch.randn(rows, cols, device=SETUP["device"], generator=g).to(dt)
    gamma = (torch.rand(cols, device=SETUP["device"], generator=g) + 0.5).to(dt)
    rstd = torch.rsqrt(x.float().pow(2).mean(1) + 1e-6)
    return {"dy": dy, "x": x, "rstd": rstd, "gamma": gamma}


def rms_eager(dy, x, rstd, gamma):
    """The backward in torch ops, float32 math (what opgen computes)."""
    dyg = dy.float() * gamma.float()
    xf, r = x.float(), rstd[:, None]
    dot = (dyg * xf).sum(1, keepdim=True)
    dx = (r * dyg - xf * dot * r * r * r / x.shape[1]).to(dy.dtype)
    return dx, (dy.float() * xf * r).sum(0)


def liger_rms_backward(torch, t):
    """Liger-Kernel's RMSNorm backward through autograd (its forward saved the state)."""
    from liger_kernel.transformers.rms_norm import LigerRMSNorm

    norm = LigerRMSNorm(t["x"].shape[1]).to(device=SETUP["device"], dtype=t["x"].dtype)
    x = t["x"].detach().clone().requires_grad_(True)
    y = norm(x)
    return lambda: torch.autograd.grad(y, (x, norm.weight), t["dy"], retain_graph=True)


def gn_inputs(torch, shape, tag):
    n, c, hw, g_ = shape
    dt = torch_dtype(torch, tag)
    gen = torch.Generator(device=SETUP["device"]).manual_seed(0)
    x = (torch.randn(n, c, hw, device=SETUP["device"], generator=gen) * 2 + 0.5).to(dt)
    dy = torch.randn(n, c, hw, device=SETUP["device"], generator=gen).to(dt)
    gamma = (torch.rand(c, device=SETUP["device"], generator=gen) + 0.5).to(dt)
    xg = x.float().view(n, g_, -1)
    mean, rstd = xg.mean(2), torch.rsqrt(xg.var(2, unbiased=False) + 1e-5)
    return {"dy": dy, "x": x, "mean": mean.to(dt), "rstd": rstd.to(dt), "gamma": gamma}


def gn_native(torch, shape, t):
    n, c, hw, g_ = shape
    return lambda: torch.ops.aten.native_group_norm_backward(t["dy"], t["x"], t["mean"], t["rstd"], t["gamma"],
                                                              n, c, hw, g_, [True, True, True])


# ---- opgen ------------------------------------------------------------------------------

def opgen_kernel_call(torch, op_name, tag, kernel_views: dict):
    """The compiled cuda kernel on device tensors (DLPack views of torch tensors)."""
    import tvm

    from opgen import kernels

    kernel = kernels.get_kernel(op_name, tag, SETUP["target"])
    shapes = {k: tuple(v.shape) for k, v in kernel_views.items()}
    scratch = {b.name: torch.empty(s, dtype=torch.float32, device=SETUP["device"])
               for b, s in zip(kernel.scratch, kernel.scratch_shapes(shapes).values())}
    tensors = {**kernel_views, **scratch}
    args = [tvm.runtime.from_dlpack(tensors[name]) for name in kernel.tensor_names]
    fn = kernel.module[kernel.symbol]
    return lambda: fn(*args)


def rms_kernel_views(torch, t, tag):
    out = {"dx": torch.empty_like(t["x"]), "dgamma": torch.empty(t["x"].shape[1], device=SETUP["device"])}
    return {**t, **out}


def gn_kernel_views(torch, shape, t):
    n, c, hw, g_ = shape
    big, stat, chan = (n, g_, c // g_, hw), (n, g_), (g_, c // g_)
    views = {"dy": t["dy"].view(big), "x": t["x"].view(big), "mean": t["mean"].view(stat),
             "rstd": t["rstd"].view(stat), "gamma": t["gamma"].view(chan)}
    views.update(dx=torch.empty_like(views["x"]), dgamma=torch.empty(chan, dtype=t["gamma"].dtype, device=SETUP["device"]),
                 dbeta=torch.empty(chan, dtype=t["gamma"].dtype, device=SETUP["device"]))
    return views


def opgen_aclnn_call(op_name, shape, t, outs):
    """The whole two-phase aclnn call on torch CUDA tensors (what users call)."""
    from opgen import acl, aclnn, config

    config.set_target(SETUP["target"])

    def call():
        if op_name == "rms_norm_grad":
            status, size, ex = aclnn.aclnnRmsNormGradGetWorkspaceSize(t["dy"], t["x"], t["rstd"], t["gamma"],
                                                                      outs["dx"], outs["dgamma"])
        else:
            n, c, hw, g_ = shape
            status, size, ex = aclnn.aclnnGroupNormBackwardGetWorkspaceSize(
                t["dy"], t["x"], t["mean"], t["rstd"], t["gamma"], n, c, hw, g_, [True, True, True],
                outs["dx"], outs["dgamma"], outs["dbeta"])
        assert status == 0, acl.aclGetRecentErrMsg()
        workspace = acl.aclrtMalloc(size, 0)[1] if size else None
        run = aclnn.aclnnRmsNormGrad if op_name == "rms_norm_grad" else aclnn.aclnnGroupNormBackward
        assert run(workspace, size, ex, None) == 0, acl.aclGetRecentErrMsg()
    return call


# ---- the table ----------------------------------------------------------------------------

class Budget:
    def __init__(self, seconds: float):
        self.deadline = time.perf_counter() + seconds

    def left(self) -> float:
        return self.deadline - time.perf_counter()


def measure(torch, label, make, nbytes, peak, budget: Budget, needs: float = 5.0) -> float | None:
    """Print one contender's row; None (with the reason) when it fails or time is short."""
    if budget.left() < needs:
        print(row(label, None, nbytes, peak, "SKIPPED: time budget spent"))
        return None
    try:
        seconds = cuda_time(torch, make())
    except Exception as err:  # a baseline that does not install/compile here: say so, go on
        print(row(label, None, nbytes, peak, f"unavailable: {type(err).__name__}: {str(err)[:90]}"))
        return None
    print(row(label, seconds, nbytes, peak))
    return seconds


def check_against_eager(torch, got, want, tag) -> str:
    tol = 2e-2 if tag.startswith("bf16") else 1e-4
    err = ((got.float() - want.float()).abs() / (want.float().abs() + 1)).max().item()
    return f"max rel err vs eager {err:.2e} ({'ok' if err <= tol else 'MISMATCH'})"


def bench_rms(torch, shape, tag, peak, budget, compiled):
    nbytes = ideal_bytes("rms_norm_grad", shape, tag)
    print(f"rms_norm_grad {tag} {shape[0]}x{shape[1]}  ({nbytes / 1e6:.0f} MB ideal traffic)")
    t = rms_inputs(torch, shape, tag)
    views = rms_kernel_views(torch, t, tag)
    results = {"opgen kernel": measure(torch, "opgen kernel", lambda: opgen_kernel_call(
        torch, "rms_norm_grad", tag, views), nbytes, peak, budget)}
    if results["opgen kernel"] is not None:
        print("  " + check_against_eager(torch, views["dx"], rms_eager(**t)[0], tag))
    outs = {"dx": torch.empty_like(t["x"]), "dgamma": torch.empty(shape[1], device=SETUP["device"])}
    results["opgen aclnn"] = measure(torch, "opgen aclnn", lambda: opgen_aclnn_call("rms_norm_grad", shape, t, outs),
                                     nbytes, peak, budget)
    results["torch eager"] = measure(torch, "torch eager", lambda: (lambda: rms_eager(**t)), nbytes, peak, budget)
    results["torch.compile"] = measure(torch, "torch.compile", lambda: (lambda f=compiled: f(**t)), nbytes, peak,
                                       budget, needs=60.0)
    results["liger"] = measure(torch, "Liger-Kernel", lambda: liger_rms_backward(torch, t), nbytes, peak, budget)
    return results


def bench_gn(torch, shape, tag, peak, budget):
    nbytes = ideal_bytes("group_norm_backward", shape, tag)
    n, c, hw, g_ = shape
    print(f"group_norm_backward {tag} N={n} C={c} HxW={hw} G={g_}  ({nbytes / 1e6:.0f} MB ideal traffic)")
    t = gn_inputs(torch, shape, tag)
    views = gn_kernel_views(torch, shape, t)
    results = {"opgen kernel": measure(torch, "opgen kernel", lambda: opgen_kernel_call(
        torch, "group_norm_backward", tag, views), nbytes, peak, budget)}
    if results["opgen kernel"] is not None:
        want = gn_native(torch, shape, t)()[0]
        print("  " + check_against_eager(torch, views["dx"].reshape(want.shape), want, tag))
    outs = {"dx": torch.empty_like(t["x"]), "dgamma": torch.empty_like(t["gamma"]),
            "dbeta": torch.empty_like(t["gamma"])}
    results["opgen aclnn"] = measure(torch, "opgen aclnn", lambda: opgen_aclnn_call(
        "group_norm_backward", shape, t, outs), nbytes, peak, budget)
    results["torch native"] = measure(torch, "torch native", lambda: gn_native(torch, shape, t), nbytes, peak, budget)
    return results


def ratios(label: str, results: dict, baseline: str) -> None:
    ours, theirs = results.get("opgen kernel"), results.get(baseline)
    if ours and theirs:
        print(f"  opgen kernel vs {baseline}: {theirs / ours:.2f}x")


def dry_run(peak: float) -> None:
    """The plan and the arithmetic, without a GPU."""
    for shape in RMS_SHAPES:
        for tag in RMS_TAGS:
            nbytes = ideal_bytes("rms_norm_grad", shape, tag)
            print(f"rms_norm_grad {tag} {shape}: {nbytes / 1e6:.0f} MB;",
                  row("at 1 ms", 1e-3, nbytes, peak).strip())
    for shape in GN_SHAPES:
        for tag in GN_TAGS:
            print(f"group_norm_backward {tag} {shape}: {ideal_bytes('group_norm_backward', shape, tag) / 1e6:.0f} MB")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peak", type=float, default=4.8e12, help="HBM bytes/s (default 4.8e12: H200)")
    parser.add_argument("--budget", type=float, default=300.0, help="seconds for the whole table")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and arithmetic; no GPU needed")
    parser.add_argument("--smoke", metavar="TARGET", help="run the glue on the CPU with this opgen target "
                        "(llvm, opencl) on tiny shapes: checks the script without a GPU")
    args = parser.parse_args(argv)
    if args.dry_run:
        dry_run(args.peak)
        return 0
    import torch

    rms_shapes, gn_shapes = RMS_SHAPES, GN_SHAPES
    if args.smoke:
        SETUP.update(device="cpu", target=args.smoke)
        rms_shapes, gn_shapes = [(64, 96), (7, 33)], [(2, 64, 7 * 7, 8), (1, 32, 33, 4)]
    elif not torch.cuda.is_available():
        print("torch sees no CUDA GPU: nothing to benchmark (torch", torch.__version__, ")")
        return 2
    name = torch.cuda.get_device_name(0) if not args.smoke else f"smoke run on the CPU ({args.smoke})"
    print(f"GPU: {name}; peak {args.peak / 1e12:.2f} TB/s; torch {torch.__version__}")
    print(f"  {'contender':<16} {'ms':>9} {'GB/s':>9} {'%peak':>7}")
    budget = Budget(args.budget)
    compiled = torch.compile(rms_eager)
    for tag in RMS_TAGS:
        for shape in rms_shapes:
            results = bench_rms(torch, shape, tag, args.peak, budget, compiled)
            ratios("rms", results, "torch.compile")
            ratios("rms", results, "liger")
    for tag in GN_TAGS:
        for shape in gn_shapes:
            ratios("gn", bench_gn(torch, shape, tag, args.peak, budget), "torch native")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
