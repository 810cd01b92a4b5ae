"""Time exported CUDA plans through opgen.runtime (no TVM) next to torch and Liger-Kernel.

    python3 scripts/export_bench.py EXPORT_DIR/cuda [--case OP:DTYPES:PROBLEM ...] [--budget 120]
        [--compile-seconds 90] [--repeats 20] [--warmup 3] [--copy-mib 512]

The device first: its name, its memory's peak from the spec (clock x bus width, from the
CUDA device properties or NVML; "unknown" where neither says) and the practical peak, a
device-to-device copy's bytes read + written per second, which the "% copy" column divides
by. Then per case (default: issue 40's, ``GOALS``; PROBLEM must be in the plan's bench.json,
``opgen export --bench OP=PROBLEM`` adds one) the rows

  opgen generic      the default plan              opgen 128-bit   its ``vector/`` variant (a row
  torch eager        autograd of the torch forward                 saying why where there is none
  torch.compile      the same, compiled (dynamic=False)            or the shape is not admitted)
  Liger              Liger-Kernel's RMSNorm (RMSNorm only; where liger_kernel imports)

each as the median milliseconds of CUDA-event pairs around the call alone, GB/s of the
minimal traffic (every caller array's bytes once) and % of the copy's rate. An opgen plan
is evaluated once, outside the loop (opgen.runtime.plan.prepare): a timed call only
enqueues its kernels, no Python plan evaluation, no synchronization. Between timed calls
(outside the events) a buffer of twice the L2 cache is cleared, so each call reads its
inputs from memory (the UNet GroupNorm shapes would fit in an H100's L2 otherwise).
Each row's outputs are compared with torch's float64 autograd at the same shape ("err":
worst |out - ref| / max |ref| over the outputs; MISMATCH over 2^-5 for 16-bit outputs, 1e-4
for float32): the golden cases (python -m opgen.runtime.check) are the judge of the
kernels; this catches a variant or a peer that goes wrong only at benchmark size.

torch.compile's rows run in a child process with ``--compile-seconds`` in all: its
compilations cannot eat the budget, and the cases it did not reach say "compile timed out".

Exit 1 when a row fails to run or mismatches; 2 without CuPy or a device.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # opgen.runtime from the tree

from opgen.runtime import backends, plan as plans   # noqa: E402

RMS_EPS, GROUP_EPS = 1e-6, 1e-5
GOALS = tuple((op, tags, problem) for op, problems in (
    ("rms_norm_grad", ("8192x4096", "16384x1024")),
    ("group_norm_backward", ("2,320,64x64,32", "2,640,32x32,32", "2,1280,16x16,32")))
    for tags in ("bf16-bf16", "f32-f32") for problem in problems)
TOLERANCE = {2: 2.0 ** -5, 4: 1e-4}     # output element bytes -> allowed err / max|ref|
ROWS = ("opgen generic", "opgen 128-bit", "torch eager", "torch.compile", "Liger")


# ---- inputs ----------------------------------------------------------------------------------

def bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 as uint16 bits, rounded to nearest even."""
    bits = values.astype(np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def from_bits(raw: np.ndarray, dtype: str) -> np.ndarray:
    return (raw.astype(np.uint32) << 16).view(np.float32) if dtype == "bfloat16" else raw.astype(np.float32)


def host_inputs(params, shapes, seed: int = 0) -> dict:
    """name -> host array in the kernel's dtype: x, dy, gamma normal; mean and rstd the
    statistics of x over the axes they lack (rstd of the centred x where there is a mean,
    RMSNorm's otherwise), so torch's forward, which recomputes them, sees the same ones."""
    rng, out, values = np.random.default_rng(seed), {}, {}
    inputs = [(p, s) for p, s in zip(params, shapes) if p.role == "input"]
    for p, shape in inputs:
        if p.name not in ("mean", "rstd"):
            v = rng.standard_normal(shape, dtype=np.float32) * (0.25 if p.name == "gamma" else 1.0)
            v += 1.0 if p.name == "gamma" else 0.0
            out[p.name] = bf16_bits(v) if p.dtype == "bfloat16" else v.astype(p.dtype)
            values[p.name] = from_bits(out[p.name], p.dtype)
    x = values["x"]           # float32 values, statistics accumulated in float64
    stats = [(p, s) for p, s in inputs if p.name in ("mean", "rstd")]
    axes = tuple(range(len(stats[0][1]), x.ndim))
    mean = x.mean(axis=axes, dtype=np.float64) if any(p.name == "mean" for p, _ in stats) else None
    eps = RMS_EPS if mean is None else GROUP_EPS
    centred = x if mean is None else x - mean.astype(np.float32).reshape(mean.shape + (1,) * len(axes))
    computed = {"mean": mean, "rstd": 1.0 / np.sqrt(np.square(centred).mean(axis=axes, dtype=np.float64) + eps)}
    for p, shape in stats:
        v = computed[p.name].reshape(shape).astype(np.float32)
        out[p.name] = bf16_bits(v) if p.dtype == "bfloat16" else v.astype(p.dtype)
    return out


def device_arrays(cupy, params, shapes, host: dict) -> list:
    """Caller arrays on the device, inputs from ``host``, outputs uninitialized."""
    arrays = []
    for p, shape in zip(params, shapes):
        np_dtype = np.uint16 if p.dtype == "bfloat16" else np.dtype(p.dtype)
        arrays.append(cupy.asarray(host[p.name]) if p.role == "input" else cupy.empty(tuple(shape), np_dtype))
    return arrays


# ---- torch and Liger -------------------------------------------------------------------------

def to_torch(torch, array, dtype: str):
    """A torch tensor on the array's memory (CUDA), or a host copy (the stand-in's dry run)."""
    if dtype == "bfloat16":
        array = array.view(np.int16)
    t = torch.as_tensor(array, device="cuda") if torch.cuda.is_available() else torch.from_numpy(array.get())
    return t.view(torch.bfloat16) if dtype == "bfloat16" else t


def _rms_forward(torch, kind):
    if kind == "Liger":
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        return lambda x, gamma: LigerRMSNormFunction.apply(x, gamma, RMS_EPS, 0.0, "llama", False)
    forward = lambda x, gamma: torch.nn.functional.rms_norm(x, gamma.shape, gamma, RMS_EPS)   # noqa: E731
    return torch.compile(forward, dynamic=False) if kind == "torch.compile" else forward


def _rms_peer(torch, t: dict, kind: str):
    """RmsNormGrad's peer: backward of the RMSNorm forward (rstd recomputed from x, as torch does)."""
    x, gamma = t["x"].detach().requires_grad_(), t["gamma"].detach().requires_grad_()
    out = _rms_forward(torch, kind)(x, gamma)
    return lambda: torch.autograd.grad(out, (x, gamma), t["dy"], retain_graph=True)


def _group_norm_peer(torch, t: dict, kind: str):
    """GroupNormBackward's peer: backward of F.group_norm with a bias (so dbeta is made too),
    on the kernel's (N, G, C/G, HW) arrays seen as (N, C, HW)."""
    if kind == "Liger":
        return None
    n, g, cg, hw = t["x"].shape
    x = t["x"].reshape(n, g * cg, hw).detach().requires_grad_()
    gamma = t["gamma"].reshape(g * cg).detach().requires_grad_()
    beta = torch.zeros_like(gamma, requires_grad=True)
    forward = lambda x, gamma, beta: torch.nn.functional.group_norm(x, g, gamma, beta, GROUP_EPS)   # noqa: E731
    out = (torch.compile(forward, dynamic=False) if kind == "torch.compile" else forward)(x, gamma, beta)
    dy = t["dy"].reshape(n, g * cg, hw)
    return lambda: tuple(r.reshape(s.shape) for r, s in zip(
        torch.autograd.grad(out, (x, gamma, beta), dy, retain_graph=True), (t["x"], t["gamma"], t["gamma"])))


PEERS = {"rms_norm_grad": _rms_peer, "group_norm_backward": _group_norm_peer}


def reference(torch, op: str, t: dict) -> list:
    """The outputs in the kernel's order from torch's autograd in float64 (host arrays)."""
    t64 = {k: v.to(torch.float64) for k, v in t.items()}
    return [r.detach().cpu().numpy() for r in PEERS[op](torch, t64, "torch eager")()]


def error(got: list, ref: list) -> float:
    """Worst |got - ref| / max|ref| over the outputs (inf where a NaN appears)."""
    worst = 0.0
    for g, r in zip(got, ref):
        g = np.asarray(g, np.float64).reshape(r.shape)
        if not np.isfinite(g).all():
            return math.inf
        worst = max(worst, float(np.abs(g - r).max() / max(np.abs(r).max(), 1e-30)))
    return worst


# ---- timing ----------------------------------------------------------------------------------

def device_ms(cupy, call, warmup: int, repeats: int, flush=None) -> float:
    """Median milliseconds between a CUDA event pair around ``call`` alone, after ``warmup``
    calls; ``flush`` (a device array) is cleared before each timed call, outside the pair."""
    for _ in range(warmup):
        call()
    pairs = []
    for _ in range(repeats):
        if flush is not None:
            flush.data.memset_async(0, flush.nbytes)
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        call()
        stop.record()
        pairs.append((start, stop))
    pairs[-1][1].synchronize()
    return statistics.median(cupy.cuda.get_elapsed_time(a, b) for a, b in pairs)


def spec_peak(cupy) -> tuple:
    """(device name, the spec's peak bytes/s or None): 2 x memory clock x bus width, from the
    CUDA device properties, else NVML (CUDA 13 dropped the clock from cudaDeviceProp)."""
    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    clock_khz, bus_bits = props.get("memoryClockRate", 0), props.get("memoryBusWidth", 0)
    if not (clock_khz and bus_bits):
        try:
            import pynvml
            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            clock_khz = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM) * 1000
            bus_bits = pynvml.nvmlDeviceGetMemoryBusWidth(handle)
        except Exception:   # noqa: BLE001 -- no NVML (the stand-in): the spec stays unknown
            return name, None
    return name, 2.0 * clock_khz * 1e3 * bus_bits / 8


def copy_peak(cupy, mib: int, warmup: int, repeats: int) -> float:
    """Bytes/s of a device-to-device copy of ``mib`` MiB, read + written."""
    n = mib << 20
    src, dst = cupy.empty(n, cupy.uint8), cupy.empty(n, cupy.uint8)
    ms = device_ms(cupy, lambda: dst.data.copy_from_device_async(src.data, n), warmup, repeats)
    return 2 * n / ms * 1e3


def flush_buffer(cupy):
    l2 = int(cupy.cuda.Device().attributes.get("L2CacheSize", 0))
    return cupy.empty(2 * l2, cupy.uint8) if l2 else None


# ---- one case --------------------------------------------------------------------------------

class Case:
    """One (op, dtypes, problem): its plans, host inputs, device arrays and torch tensors."""

    def __init__(self, cupy, torch, folder: Path, op: str, tags: str, problem: str):
        self.op, self.tags, self.problem = op, tags, problem
        self.key = f"{op} {tags} {problem}"
        self.family = plans.load_family(folder / op / tags / "plan.json")
        self.base = self.family[-1]
        bench = json.loads(self.base.code_file("bench.json").read_text())
        shapes = next((b["shapes"] for b in bench if b["problem"] == problem), None)
        if shapes is None:
            raise plans.PlanError(f"{problem} is not in {self.base.folder}/bench.json (opgen export "
                                  f"--bench {op}={problem} adds it)")
        self.params = self.base.caller_params()
        self.host = host_inputs(self.params, shapes)
        self.arrays = device_arrays(cupy, self.params, shapes, self.host)
        self.nbytes = sum(a.nbytes for a in self.arrays)
        self.outputs = [i for i, p in enumerate(self.params) if p.role == "output"]
        self.tensors = None if torch is None else \
            {p.name: to_torch(torch, a, p.dtype) for p, a in zip(self.params, self.arrays) if p.role == "input"}

    def opgen_rows(self, cupy, timing) -> list:
        """(row, ms or None, outputs or the reason there is no number) for both opgen rows."""
        rows = []
        variants = [p for p in self.family[:-1] if p.doc.get("variant") == "vector"]
        for row, plan in (("opgen generic", self.base), ("opgen 128-bit", variants[0] if variants else None)):
            if plan is None:
                rows.append((row, None, "no 128-bit variant exported for this kernel"))
                continue
            why = plans.refusal(plan, self.arrays)
            if why:
                rows.append((row, None, f"not admitted: {why}"))
                continue
            call = plans.prepare(plan, self.arrays, backends.for_plan(plan))   # evaluated once, here
            ms = timing(call.launch)
            for i in self.outputs:    # NaN (all bits set) in every output, then one more call to judge:
                self.arrays[i].data.memset_async(0xFF, self.arrays[i].nbytes)   # an element left unwritten
            call.launch()                                                       # shows, not the last row's
            call.finish()
            rows.append((row, ms, [from_bits(self.arrays[i].get(), self.params[i].dtype) for i in self.outputs]))
        return rows

    def peer_rows(self, torch, timing, kinds) -> list:
        rows = []
        for kind in kinds:
            try:
                call = PEERS[self.op](torch, self.tensors, kind)
            except ImportError as err:
                rows.append((kind, None, f"not installed ({err.name})"))
                continue
            if call is None:
                rows.append((kind, None, "has no kernel for this op"))
                continue
            ms = timing(call)
            rows.append((kind, ms, [r.detach().float().cpu().numpy() for r in call()]))
        return rows


def row_text(case: Case, row: str, ms, result, peak: float, spec) -> tuple:
    """(text, failed) of one row."""
    label = f"{case.key:<46} {row:<14}"
    if ms is None:
        return f"{label} {result}", False
    gbs = case.nbytes / ms / 1e6
    spec_pct = f"{100 * gbs * 1e9 / spec:6.1f}%" if spec else "      -"
    err = result if isinstance(result, float) else None
    verdict = ""
    if err is not None:
        allowed = max(TOLERANCE[plans.ITEMSIZE[case.params[i].dtype]] for i in case.outputs)   # the loosest output
        verdict = f" err {err:.1e}" + (" MISMATCH" if not err <= allowed else "")
    return f"{label} {ms:9.4f} {gbs:8.1f} {100 * gbs * 1e9 / peak:6.1f}% {spec_pct}{verdict}", "MISMATCH" in verdict


# ---- main ------------------------------------------------------------------------------------

def parse_case(text: str) -> tuple:
    op, tags, problem = (text.split(":", 2) + ["", ""])[:3]
    if not (op and tags and problem):
        raise argparse.ArgumentTypeError(f"{text!r}: OP:DTYPES:PROBLEM, e.g. rms_norm_grad:bf16-bf16:8192x4096")
    return op, tags, problem


def load_torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def compile_child(args, budget: float) -> dict:
    """key -> (ms, err or reason) of torch.compile's rows, from a child process given
    ``budget`` seconds; cases it did not reach are "compile timed out"."""
    command = [sys.executable, __file__, args.folder, "--peers", "torch.compile", "--jsonl", "--budget", str(budget),
               "--repeats", str(args.repeats), "--warmup", str(args.warmup),
               *[f"--case={':'.join(c)}" for c in args.case]]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=max(budget, 1))
        out, note = done.stdout, f"compile child exit {done.returncode}: {done.stderr.strip()[-300:]}"
    except subprocess.TimeoutExpired as err:
        out = err.stdout.decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
        note = f"compile timed out ({budget:.0f} s for every torch.compile row)"
    rows = {}
    for line in out.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            rows[r["key"]] = (r["ms"], r["result"])
    return {" ".join(c): rows.get(" ".join(c), (None, note)) for c in args.case}


def measure(args, cupy, torch, start: float, kinds, emit) -> int:
    """Time every case (the rows ``kinds`` names besides opgen's when torch is there); ``emit``
    gets (case, row, ms, result) per row. Returns the number of cases that raised."""
    flush = flush_buffer(cupy)
    timing = lambda call: device_ms(cupy, call, args.warmup, args.repeats, flush)   # noqa: E731
    failed = 0
    for spec in args.case:
        if time.monotonic() - start > args.budget:
            emit(None, " ".join(spec), None, f"budget spent ({args.budget:.0f} s): not timed")
            continue
        try:
            case = Case(cupy, torch, Path(args.folder), *spec)
            ref = reference(torch, case.op, case.tensors) if torch is not None else None
            rows = [] if args.jsonl else case.opgen_rows(cupy, timing)
            if torch is not None:
                rows += case.peer_rows(torch, timing, kinds)
            for row, ms, result in rows:
                if ms is not None:
                    result = error(result, ref) if ref is not None else "no float64 reference (no torch)"
                emit(case, row, ms, result)
        except Exception as err:   # noqa: BLE001 -- a row, not the end of the table
            failed += 1
            emit(None, " ".join(spec), None, f"FAILED: {type(err).__name__}: {err}")
    return failed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="EXPORT_DIR/cuda (opgen export --target cuda)")
    parser.add_argument("--case", action="append", type=parse_case, help="OP:DTYPES:PROBLEM (default: GOALS)")
    parser.add_argument("--budget", type=float, default=120.0, help="seconds; cases past it are not timed")
    parser.add_argument("--compile-seconds", type=float, default=90.0, help="torch.compile's rows, all of them")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--copy-mib", type=int, default=512, help="the practical peak's copy size")
    parser.add_argument("--peers", default="torch eager,Liger,torch.compile", help="peer rows, comma-separated")
    parser.add_argument("--jsonl", action="store_true", help=argparse.SUPPRESS)    # compile_child's own mode
    args = parser.parse_args(argv)
    args.case = args.case or list(GOALS)
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
    except Exception as err:   # noqa: BLE001
        print(f"export_bench: the CUDA runtime cannot load: {err}", file=sys.stderr)
        return 2
    torch, start = load_torch(), time.monotonic()
    kinds = [k for k in args.peers.split(",") if k]
    if args.jsonl:
        def emit_json(case, row, ms, result):    # a case that failed: row is its key
            key = row if case is None else case.key
            print(json.dumps({"key": key, "row": "torch.compile", "ms": ms, "result": result}), flush=True)
        return measure(args, cupy, torch, start, kinds, emit_json)

    name, spec = spec_peak(cupy)
    peak = copy_peak(cupy, args.copy_mib, args.warmup, max(args.repeats // 2, 3))
    print(f"device: {name}{' [STAND-IN: timings are the OpenCL host device, not a GPU]' if getattr(cupy, 'STANDIN', False) else ''}")
    print(f"peak: spec {'unknown' if spec is None else f'{spec / 1e9:.0f} GB/s'}; device-to-device copy "
          f"{peak / 1e9:.0f} GB/s (read + written, {args.copy_mib} MiB): '% copy' divides by this")
    print(f"torch: {'not installed' if torch is None else torch.__version__ + ('' if torch.cuda.is_available() else ' (no CUDA: host tensors)')}")
    print(f"{'case':<46} {'row':<14} {'ms':>9} {'GB/s':>8} {'% copy':>7} {'% spec':>7}")
    table, failed = {}, 0

    def emit(case, row, ms, result):
        nonlocal failed
        if case is None:
            print(f"{row:<61} {result}")
            return
        text, bad = row_text(case, row, ms, result, peak, spec)
        failed += bad
        table[(case.key, row)] = (case, ms, result)
        print(text, flush=True)

    failed += measure(args, cupy, torch, start, [k for k in kinds if k != "torch.compile"], emit)
    if torch is not None and "torch.compile" in kinds:
        left = min(args.compile_seconds, args.budget - (time.monotonic() - start))
        print(f"-- torch.compile rows ({left:.0f} s for their compilations and timings, in a child process)")
        cases = {c.key: c for c, _, _ in table.values()}
        for key, (ms, result) in compile_child(args, left).items():
            if key in cases:
                emit(cases[key], "torch.compile", ms, result)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
