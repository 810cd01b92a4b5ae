"""GPU benchmark for a machine with an NVIDIA GPU and TVM (scripts/gpu_check.sh runs the exported
kernels without TVM instead: scripts/export_bench.py).

Every registered op with benchmark shapes (``OpSpec.cases.bench``), in its f32 and bf16
data combos (opgen.bench.benchmarked_tags), on each shape: opgen's cuda kernel next to the
op's own peers (``OpSpec.peers`` with ``bench`` and ``"cuda"`` in ``devices``: torch eager,
torch.compile, ATen's kernels, Liger-Kernel's RMSNorm ...), same process, same inputs (the
op's ``random_inputs``, each contender with its own device copies), medians of CUDA-event
timings. Two opgen numbers: ``opgen kernel`` (the compiled kernel on device tensors viewed
in its kernel shapes, what a framework would launch) and ``opgen aclnn`` (the whole
two-phase aclnn call on torch CUDA tensors, what users call).

Printed per row: milliseconds, GB/s of the minimal traffic (every input read once, every
output written once: the arrays' bytes, as ``opgen bench`` counts them), its percentage of
the HBM peak (4.8 TB/s, an H200; ``--peak`` for another GPU) and the contender's time over
opgen's kernel (> 1: opgen faster). opgen's kernel output is checked against the op's
float64 reference with opgen.verify's tolerance table (``ok`` / ``MISMATCH``).

Nothing here names an op: a new op package with benchmark cases is picked up as it is.
A time budget (``--budget`` seconds) skips what would not fit, so a short GPU loan ends
with a table instead of a timeout; a contender that fails to import or compile is reported
as unavailable and the rest goes on. Without a GPU: ``--dry-run`` prints the plan and the
byte arithmetic (no torch needed), ``--smoke llvm`` runs this same code on the CPU with
torch CPU tensors and an opgen CPU target on each op's tiny and compare shapes.

Exit status: 0, or 1 when a kernel output mismatched or a case failed, 2 without a GPU.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from dataclasses import dataclass

DATA_DTYPES = ("f32", "bf16")   # each op's combos with these data dtypes (opgen.bench.benchmarked_tags)
NEEDS = 5.0                     # seconds a contender needs left in the budget to be timed
COMPILED_NEEDS = 60.0           # a compiled peer ((before, run): torch.compile) warms up for long
CASE_NEEDS = 10.0               # a case: its inputs, the float64 reference, the rows


@dataclass(frozen=True)
class Setup:
    """Where a run happens: torch's device for the tensors, opgen's target for its kernels."""

    device: str = "cuda"
    target: str = "cuda"


@dataclass(frozen=True)
class Case:
    op: str
    tag: str
    shape: str


# ---- the plan -------------------------------------------------------------------------------

def plan(ops=None, shapes: dict | None = None, smoke: bool = False) -> list[Case]:
    """Per op (registered, with benchmark cases or a --shape), per data dtype, per shape: the
    op's benchmark shapes, or its tiny and compare shapes for a smoke run, or the --shape ones."""
    from opgen.bench import benchmarked_tags
    from opgen.ops import all_ops

    shapes = shapes or {}
    chosen = [op for op in all_ops() if (op.cases.bench or op.name in shapes) and (not ops or op.name in ops)]
    result = []
    for op in chosen:
        if shapes:
            texts = shapes.get(op.name, ())
        elif smoke:
            texts = tuple(dict.fromkeys(t for t in (op.cases.tiny, *op.cases.compare) if t))
        else:
            texts = op.cases.bench
        result += [Case(op.name, tag, text) for tag in benchmarked_tags(op, DATA_DTYPES) for text in texts]
    return result


def peers_for(op, device: str, skip=()) -> list:
    """The op's peers that are benchmark contenders on ``device`` (Peer.bench, Peer.devices)."""
    return [p for p in op.peers if p.bench and device in p.devices and p.name not in skip]


def array_bytes(op, arrays: dict) -> int:
    """Minimal traffic: every kernel input read once, every output written once (an aclnn
    input the kernel never reads is not traffic: an op may take one only to check it)."""
    kernel_tensors = set(op.inputs + op.outputs)
    return sum(a.nbytes for name, a in arrays.items() if name in kernel_tensors)


def planned_bytes(op, tag: str, problem) -> int:
    """The same count from the shapes alone, no arrays made (the dry run): each tensor's
    kernel shape (the elements of the user's) times its dtype's size. An op without an
    aclnn face (no kernel_shapes) makes its arrays."""
    import numpy as np

    from opgen import baselines as B
    from opgen.dtypes import numpy_dtype

    combo = op.combo(tag)
    if op.api is None:
        inputs = B.random_inputs(op.name, tag, problem, np.random.default_rng(0))
        return array_bytes(op, {**inputs, **B.output_buffers(op.name, tag, problem)})
    shapes = op.api.kernel_shapes(problem)
    return sum(math.prod(shapes[name]) * numpy_dtype(combo[name]).itemsize for name in op.kernel_tensors(combo))


# ---- timing ---------------------------------------------------------------------------------

class Budget:
    def __init__(self, seconds: float):
        self.deadline = time.perf_counter() + seconds

    def left(self) -> float:
        return self.deadline - time.perf_counter()


def steps(contender):
    """(before, run) of a contender: a plain closure, or a compiled peer's pair (only ``run``
    is timed; ``before`` runs the fresh forward its backward needs)."""
    return contender if isinstance(contender, tuple) else (None, contender)


def cuda_time(torch, contender, min_seconds: float = 0.3, max_reps: int = 200) -> float:
    """Median seconds of ``run`` over CUDA events, after a warm-up call."""
    before, run = steps(contender)
    for _ in range(2):          # warm-up: compilation, autotuning, allocator
        if before:
            before()
        run()
    torch.cuda.synchronize()
    times, start_all = [], time.perf_counter()
    while len(times) < max_reps and (len(times) < 5 or time.perf_counter() - start_all < min_seconds):
        if before:
            before()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def cpu_time(torch, contender, reps: int = 5) -> float:
    """The smoke run's timer: median wall seconds after a warm-up call."""
    before, run = steps(contender)
    if before:
        before()
    run()
    times = []
    for _ in range(reps):
        if before:
            before()
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# ---- opgen's contenders -----------------------------------------------------------------------

def kernel_call(torch, setup: Setup, op, tag: str, problem, inputs: dict):
    """The compiled kernel on device tensors viewed in the op's kernel shapes (op.kernel_args
    of the numpy arrays gives them), scratch buffers on the device. Returns (run, outputs
    by kernel name, as the kernel writes them)."""
    import numpy as np
    import tvm

    from opgen import baselines as B
    from opgen import kernels

    kernel = kernels.get_kernel(op, tag, setup.target)
    viewed = op.kernel_args(problem, {**inputs, **B.output_buffers(op.name, tag, problem)})
    tensors = {name: B.to_torch(a, setup.device) for name, a in inputs.items()}
    tensors.update(B.output_buffers(op.name, tag, problem, "torch", setup.device))
    views = {name: t.view(tuple(viewed[name].shape)) for name, t in tensors.items() if name in viewed}
    # kernel_args may add a tensor made from the problem (an attribute the kernel reads as data)
    views.update({name: B.to_torch(np.asarray(a), setup.device) for name, a in viewed.items() if name not in views})
    shapes = {name: tuple(views[name].shape) for name in op.kernel_tensors(op.combo(tag))}
    sizes = kernel.scratch_shapes(shapes)
    views.update({b.name: torch.empty(sizes[b.name], dtype=getattr(torch, b.dtype), device=setup.device)
                  for b in kernel.scratch})
    args = [tvm.runtime.from_dlpack(views[name]) for name in kernel.tensor_names]
    function = kernel.function
    return (lambda: function(*args)), {name: views[name] for name in op.outputs}


def aclnn_call(torch, setup: Setup, op, tag: str, problem, inputs: dict):
    """The whole two-phase aclnn call (opgen.baselines.aclnn_call) on device tensors; opgen's
    target and product are the run's (main holds opgen.config.using_target around the table
    and using_product around each case: a product that offers the op)."""
    from opgen import baselines as B

    tensors = {name: B.to_torch(a, setup.device) for name, a in inputs.items()}
    outputs = B.output_buffers(op.name, tag, problem, "torch", setup.device)
    return B.aclnn_call(op.name, problem, {**tensors, **outputs})


def check(op, tag: str, problem, inputs: dict, outputs: dict) -> tuple[bool, str]:
    """opgen's kernel outputs against the op's float64 reference, opgen.verify's tolerances."""
    import numpy as np

    from opgen import baselines as B
    from opgen.verify import compare_outputs

    reference = op.reference(problem, inputs)
    got = {name: B.to_float64(t).reshape(np.shape(reference[name])) for name, t in outputs.items()
           if name in reference}
    results = compare_outputs(op, op.combo(tag), got, reference)
    passed = all(c.passed for c in results)
    detail = ", ".join(f"{c.name} {c.ratio:.2g}" + ("" if c.passed else f" at {tuple(map(int, c.worst_index))}")
                       for c in results)
    return passed, (f"  opgen kernel vs float64 reference: {'ok' if passed else 'MISMATCH'} "
                    f"(error / tolerance, worst per output: {detail})")


# ---- the table ---------------------------------------------------------------------------------

def row(label: str, seconds: float | None, nbytes: int, peak: float, base: float | None = None,
        note: str = "") -> str:
    if seconds is None:
        return f"  {label:<16} {'-':>9} {'-':>9} {'-':>7} {'-':>8}  {note}"
    gbs = nbytes / seconds / 1e9
    ratio = f"{seconds / base:7.2f}x" if base else f"{'-':>8}"
    return f"  {label:<16} {seconds * 1e3:9.3f} {gbs:9.1f} {100 * gbs * 1e9 / peak:6.1f}% {ratio}  {note}".rstrip()


def measure(torch, timer, label: str, make, nbytes: int, peak: float, budget: Budget,
            base: float | None = None) -> float | None:
    """Print one contender's row; None (with the reason) when it fails or time is short.
    ``make`` builds the contender inside the guard: a peer that does not import or compile
    here is reported, never fatal."""
    if budget.left() < NEEDS:
        print(row(label, None, nbytes, peak, note="SKIPPED: time budget spent"))
        return None
    try:
        contender = make()
        if isinstance(contender, tuple) and budget.left() < COMPILED_NEEDS:
            print(row(label, None, nbytes, peak, note=f"SKIPPED: a compiled peer needs {COMPILED_NEEDS:.0f} s "
                      f"to warm up, {max(budget.left(), 0):.0f} s left"))
            return None
        seconds = timer(torch, contender)
    except Exception as err:  # a baseline that does not install/compile here: say so, go on
        print(row(label, None, nbytes, peak, note=f"unavailable: {type(err).__name__}: {str(err)[:90]}"))
        return None
    print(row(label, seconds, nbytes, peak, base))
    return seconds


def bench_case(torch, setup: Setup, timer, case: Case, peak: float, budget: Budget, rng, skip=()) -> bool:
    """Every contender of one case; False when opgen's kernel output mismatched."""
    from opgen import baselines as B
    from opgen.ops import get_op

    op = get_op(case.op)
    problem = B.parse_problem(case.op, case.shape)
    peers = peers_for(op, setup.device, skip)
    labels = ["opgen kernel", "opgen aclnn"] + [p.name for p in peers]
    if budget.left() < CASE_NEEDS:
        print(f"{case.op} {case.tag} {case.shape}  ({planned_bytes(op, case.tag, problem) / 1e6:.1f} MB minimal "
              f"traffic)")
        for label in labels:
            print(row(label, None, 0, peak, note="SKIPPED: time budget spent"))
        return True
    inputs = B.random_inputs(case.op, case.tag, problem, rng)
    nbytes = array_bytes(op, {**inputs, **B.output_buffers(case.op, case.tag, problem)})
    print(f"{case.op} {case.tag} {case.shape}  ({nbytes / 1e6:.1f} MB minimal traffic)")
    kernel = {}

    def make_kernel():
        run, kernel["outputs"] = kernel_call(torch, setup, op, case.tag, problem, inputs)
        return run
    base = measure(torch, timer, "opgen kernel", make_kernel, nbytes, peak, budget)
    passed = True
    if base is not None:
        passed, text = check(op, case.tag, problem, inputs, kernel["outputs"])
        print(text)
    kernel.clear()
    measure(torch, timer, "opgen aclnn", lambda: aclnn_call(torch, setup, op, case.tag, problem, inputs), nbytes,
            peak, budget, base)
    for peer in peers:   # its own copies: no contender reads inputs another one just warmed
        measure(torch, timer, peer.name,
                lambda p=peer: p.make(problem, {k: B.to_torch(v, setup.device) for k, v in inputs.items()}),
                nbytes, peak, budget, base)
    return passed


def dry_run(cases: list[Case], setup: Setup, peak: float) -> None:
    """The plan and the byte arithmetic, without a GPU or torch."""
    from opgen import baselines as B
    from opgen.ops import get_op

    for case in cases:
        op = get_op(case.op)
        nbytes = planned_bytes(op, case.tag, B.parse_problem(case.op, case.shape))
        names = ", ".join(["opgen kernel", "opgen aclnn"] + [p.name for p in peers_for(op, setup.device)])
        print(f"{case.op} {case.tag} {case.shape}: {nbytes / 1e6:.1f} MB minimal traffic, "
              f"{nbytes / peak * 1e6:.1f} us at the peak; {names}")
    print(f"{len(cases)} cases")


def describe_peers(op, setup: Setup, skip=()) -> str:
    return "; ".join(f"{p.name}: {p.doc}" for p in peers_for(op, setup.device, skip)) or "none"


def parse_shapes(parser, items) -> dict:
    from opgen import baselines as B
    from opgen.ops import all_ops

    names = {op.name for op in all_ops()}
    shapes: dict = {}
    for item in items or ():
        name, _, text = item.partition("=")
        if name not in names or not text:
            parser.error(f"--shape {item!r}: expected OP=SHAPE with OP one of {sorted(names)}")
        try:
            B.parse_problem(name, text)
        except ValueError as err:
            parser.error(f"--shape {item!r}: {err}")
        shapes.setdefault(name, []).append(text)
    return shapes


def main(argv=None) -> int:
    from opgen.ops import all_ops

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peak", type=float, default=4.8e12, help="HBM bytes/s (default 4.8e12: H200)")
    parser.add_argument("--budget", type=float, default=300.0, help="seconds for the whole table")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the plan and arithmetic; no GPU or torch needed")
    parser.add_argument("--smoke", metavar="TARGET", help="run the same code on the CPU (torch CPU tensors) with this "
                        "opgen target (llvm, opencl) on each op's tiny and compare shapes: checks it without a GPU")
    parser.add_argument("--op", action="append", choices=[op.name for op in all_ops()],
                        help="only this op (repeatable)")
    parser.add_argument("--shape", action="append", metavar="OP=SHAPE",
                        help="OP=SHAPE in the op's Problem spelling, instead of its own shapes (repeatable)")
    parser.add_argument("--skip", action="append", default=[],
                        choices=sorted({p.name for op in all_ops() for p in op.peers}),
                        help="leave out a peer (repeatable)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    setup = Setup("cpu", args.smoke) if args.smoke else Setup()
    cases = plan(args.op, parse_shapes(parser, args.shape), smoke=bool(args.smoke))
    if args.dry_run:
        dry_run(cases, setup, args.peak)
        return 0
    import numpy as np
    import torch

    from opgen import config
    from opgen.ops import get_op

    if args.smoke:
        name, timer = f"smoke run on the CPU (opgen target {args.smoke})", cpu_time
    elif not torch.cuda.is_available():
        print("torch sees no CUDA GPU: nothing to benchmark (torch", torch.__version__, ")")
        return 2
    else:
        name, timer = torch.cuda.get_device_name(0), cuda_time
    print(f"GPU: {name}; peak {args.peak / 1e12:.2f} TB/s; torch {torch.__version__}; {len(cases)} cases")
    print(f"  {'contender':<16} {'ms':>9} {'GB/s':>9} {'%peak':>7} {'x kernel':>8}")
    budget, rng = Budget(args.budget), np.random.default_rng(args.seed)
    failures, last_op = [], None
    with config.using_target(setup.target):
        for case in cases:
            if case.op != last_op:
                last_op = case.op
                op = get_op(case.op)
                peers = describe_peers(op, setup, args.skip)
                print(f"== {op.name} ({op.aclnn_name}); peers on {setup.device}: {peers}")
            try:
                with config.using_product(config.product_for(op)):
                    passed = bench_case(torch, setup, timer, case, args.peak, budget, rng, args.skip)
                if not passed:
                    failures.append(f"{case.op} {case.tag} {case.shape}: opgen kernel MISMATCH")
            except Exception as err:  # the case's inputs or reference: report it, go on with the others
                failures.append(f"{case.op} {case.tag} {case.shape}: {type(err).__name__}: {str(err)[:200]}")
                print(f"  FAILED: {failures[-1]}")
    print("x kernel: the contender's time over opgen kernel's (> 1: opgen faster); GB/s of the minimal traffic")
    for failure in failures:
        print(f"FAILED {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
