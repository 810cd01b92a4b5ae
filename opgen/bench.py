"""``opgen bench`` (and benchmarks/bench_cpu.py): opgen as users call it, next to its peers.

What is timed: one complete two-phase aclnn call (GetWorkspaceSize, aclrtMalloc of the
workspace, the run, aclrtFree) on arrays made the way users make them: once plain numpy
(``rng.standard_normal``, ``np.empty``: 16-byte aligned, nothing special) and once torch
tensors. Next to it, interleaved round by round (A B C, B C A, C A B ..., so the machine's
drifts hit all alike; medians of the rounds; on the large shapes every timed call follows
a pass over 192 MiB, so each starts with none of the op's data cached, and every peer has
its own copies of the inputs): ATen's
``native_group_norm_backward``; for RmsNorm, which has no CPU backward kernel in ATen,
the eager autograd of ``F.rms_norm``, its torch.compile, and
ATen's nearest native kernel ``native_layer_norm_backward`` (issue 10's per-call reference);
a triad ``a = b + s*c`` over 64 MiB arrays (torch's one-pass multithreaded add; numpy's
single-threaded copy without torch) as the same-run bandwidth; a "stream (same bytes)": the
same add over exactly the op's dy, x and dx, the time of moving the op's minimal bytes
with ordinary stores (a peer's time over it estimates the speedup any kernel could show
over that peer in the run; on small shapes torch's own call costs make it a loose floor);
and "opgen after torch": the opgen call timed right
after a torch op, the situation of a PyTorch user.

GB/s counts minimal bytes: every input read once, every output written once. Tiny shapes
measure the per-call cost (µs) instead.

OMP_WAIT_POLICY (``--omp-wait``): with the default policy torch's OpenMP threads spin after
each op and take the cores that TVM's pool needs next (and TVM's workers spin too, see
TVM_THREAD_POOL_SPIN_COUNT), so interleaved timings measure the fight, not the kernels.
``passive`` (the default here) sets PASSIVE; ``default`` unsets it, to measure what a
PyTorch user with default settings sees (compare the "after torch" rows); ``inherit`` keeps
the environment. OpenMP reads the variable once, when it loads (importing torch or TVM), so
when it is already loaded with another value the benchmark reruns itself in a fresh process.
"""
from __future__ import annotations

import csv
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from opgen import baselines as B
from opgen import config
from opgen.ops import all_ops, get_op, unknown_op
from opgen.peers import import_torch

DATA_DTYPES = ("f32", "bf16")    # the data dtypes benchmarked: each op's combo with that data dtype
FIXED_CONTENDERS = ("after-torch", "stream")   # --skip names besides the ops' peers
TRIAD_FLOATS = 16 << 20                                               # 64 MiB per array
POLICIES = {"passive": "PASSIVE", "default": None}


@dataclass(frozen=True)
class Case:
    op: str
    tag: str
    shape: str
    tiny: bool = False


@dataclass
class Record:
    """One contender on one case."""

    op: str
    dtypes: str
    shape: str
    contender: str
    ms: float
    gbs: float | None = None          # minimal bytes / time
    pct_bandwidth: float | None = None
    vs_opgen_numpy: float | None = None   # this contender's time / opgen-numpy's (>1: opgen faster)
    vs_opgen_torch: float | None = None
    tiny: bool = False


def cases(quick: bool, ops=None, tags=None, shapes=None, tiny: bool = True) -> list[Case]:
    """Every op's benchmark shapes (or --quick's one shape per op; OpSpec.cases), then the
    tiny per-call cases; dtype combos an op lacks are left out for it."""
    chosen = [op for op in all_ops() if op.cases.bench and (not ops or op.name in ops)]
    if shapes:
        plan = [(op, s) for op in chosen for s in shapes.get(op.name, ())]
    elif quick:
        plan = [(op, op.cases.quick) for op in chosen if op.cases.quick]
    else:
        plan = [(op, s) for op in chosen for s in op.cases.bench]
    data = DATA_DTYPES[:1] if quick else DATA_DTYPES
    tags_of = lambda op: [t for t in (tags or benchmarked_tags(op, data)) if t in {c.tag for c in op.combos}]  # noqa: E731
    result = [Case(op.name, tag, s) for op, s in plan for tag in tags_of(op)]
    if tiny:
        result += [Case(op.name, tag, op.cases.tiny, True) for op in chosen if op.cases.tiny
                   for tag in benchmarked_tags(op, DATA_DTYPES[:1])]
    return result


def benchmarked_tags(op, data_dtypes) -> list[str]:
    """For each data dtype (the first key tensor's, e.g. ``bf16``), the op's combo that
    benchmarks it: the uniform one (``bf16-bf16``) when the op has it, else the first
    documented (``bf16-f32``: statistics kept in float32). Each op's own combos decide, so
    no tag list names what one op happens to call its combos."""
    tags = [c.tag for c in op.combos]
    chosen = []
    for data in data_dtypes:
        fits = [t for t in tags if t.split("-")[0] == data]
        fits.sort(key=lambda t: len(set(t.split("-"))) != 1)      # stable: uniform first
        chosen += fits[:1]
    return chosen


def measure(contenders: dict, repeats: int, flush=None) -> dict:
    """Interleaved timing, the order rotated every round; a contender is ``run`` or
    ``(before, run)`` where only ``run`` is timed. ``flush``, when given, runs untimed
    before every contender's turn, so that each finds the caches in the same state.
    Returns name -> median seconds.

    Why the flush: rotating the order changes who goes first in a round, not who follows
    whom, so without it one contender always runs right after the cache-evicting triad and
    the others after a contender on other data, with part of their own inputs still cached
    from the round before. Measured on GroupNorm (2,640,32x32) bf16: the same opgen call
    took 0.472 ms in the slot after the triad and 0.375 ms in the next one."""
    steps = {name: c if isinstance(c, tuple) else (None, c) for name, c in contenders.items()}
    for before, run in steps.values():  # warm-up: page-in, thread pools, compilation
        if before:
            before()
        run()
    times = {name: [] for name in steps}
    order = list(steps)
    for round_ in range(repeats):
        # Rotated each round, so the machine's drifts (its memory bandwidth changes by 2x
        # within minutes here) hit every contender alike.
        for name in order[round_ % len(order):] + order[:round_ % len(order)]:
            before, run = steps[name]
            if flush:
                flush()
            if before:
                before()
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


def triad():
    """(run, bytes): the same-run bandwidth probe."""
    try:
        import torch
    except ImportError:
        import numpy as np

        src, dst = np.ones(TRIAD_FLOATS, np.float32), np.zeros(TRIAD_FLOATS, np.float32)
        return (lambda: np.copyto(dst, src)), 2 * src.nbytes
    a, b, c = (torch.full((TRIAD_FLOATS,), v, dtype=torch.float32) for v in (0.0, 1.0, 2.0))
    return (lambda: torch.add(b, c, alpha=0.5, out=a)), 3 * a.numel() * 4


def same_bytes_stream(inputs: list, outputs: list):
    """A stream over the op's elementwise tensors only: read each full-size input once,
    write each full-size output once, as integer adds of their bits (torch's multithreaded
    add; the arithmetic is free, the bytes are the op's): what moving the op's minimal
    bytes with ordinary stores costs, so a peer's time over this one estimates the largest
    speedup over that peer a kernel that reads each input once and writes each output once
    could show in this run (a loose floor on small shapes, where torch's own call costs
    count). Output j is written from inputs j, j + k, j + 2k, ... (k outputs). An op with no
    full-size output (a reduction: BatchNormReduceBackward's per-channel sums) reads each
    input once into an integer sum."""
    torch = import_torch()
    bits = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    ins = [t.detach().clone().view(bits[t.element_size()]) for t in inputs]
    outs = [t.view(bits[t.element_size()]) for t in outputs]
    if not outs:
        return lambda: [t.sum() for t in ins]
    plan = [(out, ins[j::len(outs)]) for j, out in enumerate(outs)]

    def run():
        for out, sources in plan:
            if len(sources) == 1:
                out.copy_(sources[0])
                continue
            torch.add(sources[0], sources[1], out=out)
            for more in sources[2:]:
                out.add_(more)
    return run


def _elementwise(tensors: dict, size: int | None = None) -> list:
    """The tensors of the op's largest shape (its elementwise data: dy, x, dx, ...), or of
    ``size`` elements: the outputs of the inputs' largest shape, none for a reduction."""
    largest = max(t.numel() for t in tensors.values()) if size is None else size
    return [t for t in tensors.values() if t.numel() == largest and t.dtype.is_floating_point]


def _all_targets() -> list:
    from opgen.targets import all_targets

    return all_targets()


def peer_compilers(skip=()) -> list:
    """Targets that are second compilers of the same formulas (``TargetSpec.peer_name``)
    and run here, unless skipped by their peer name."""
    return [t for t in _all_targets() if t.peer_name and t.peer_name not in skip and t.can_run()]


def contenders(case: Case, rng, skip=()) -> tuple[dict, int]:
    """The timed calls of one case and its minimal byte count."""
    op = get_op(case.op)
    problem = B.parse_problem(case.op, case.shape)
    inputs = B.random_inputs(case.op, case.tag, problem, rng)
    np_args = {**inputs, **B.output_buffers(case.op, case.tag, problem, "numpy")}
    nbytes = sum(a.nbytes for a in np_args.values())
    runs = {"opgen-numpy": B.aclnn_call(case.op, problem, np_args)}
    if case.tiny:  # split the per-call cost: the validation/plan phase alone
        runs["opgen-numpy GetWorkspaceSize"] = B.aclnn_call(case.op, problem, np_args, phase1_only=True)
    for target in peer_compilers(skip):   # the same formulas from another compiler, same public call
        own = {**{k: v.copy() for k, v in inputs.items()}, **B.output_buffers(case.op, case.tag, problem, "numpy")}
        runs[f"{target.peer_name} (numpy)"] = B.on_target(B.aclnn_call(case.op, problem, own), target.name)
    try:
        tensors = {k: B.to_torch(v) for k, v in inputs.items()}
    except B.TorchMissing:
        return runs, nbytes
    torch_outputs = B.output_buffers(case.op, case.tag, problem, "torch")
    runs["opgen-torch"] = B.aclnn_call(case.op, problem, {**tensors, **torch_outputs})
    peers = [peer for peer in op.peers if peer.bench and "cpu" in peer.devices and peer.name not in skip]
    for peer in peers:   # its own copies: no contender reads inputs another one just warmed
        runs[peer.name] = peer.make(problem, {k: B.to_torch(v) for k, v in inputs.items()})
    if not case.tiny and "stream" not in skip:
        data = _elementwise(tensors)
        full_size = data[0].numel() if data else None
        runs["stream (same bytes)"] = same_bytes_stream(data, _elementwise(torch_outputs, full_size))
    first_peer = runs[peers[0].name] if peers else None
    if isinstance(first_peer, tuple):  # compiled: (forward, backward), both are the torch op here
        forward, backward = first_peer
        first_peer = lambda: (forward(), backward())  # noqa: E731
    if first_peer is not None and "after-torch" not in skip:
        runs["opgen-torch after torch op"] = (first_peer, runs["opgen-torch"])
    return runs, nbytes


def records(case: Case, times: dict, nbytes: int, triad_gbs: float | None) -> list[Record]:
    """Rows of one case from its median times."""
    rows = []
    base_np, base_pt = times.get("opgen-numpy"), times.get("opgen-torch")
    for name, seconds in times.items():
        gbs = None if case.tiny else nbytes / seconds / 1e9
        pct = 100 * gbs / triad_gbs if gbs and triad_gbs else None
        rel_np = seconds / base_np if base_np and name != "opgen-numpy" else None
        rel_pt = seconds / base_pt if base_pt and name != "opgen-torch" and name != "opgen-numpy" else None
        rows.append(Record(case.op, case.tag, case.shape, name, seconds * 1e3, gbs, pct, rel_np, rel_pt, case.tiny))
    return rows


def run(case_list: list[Case], repeats: int, skip=(), seed: int = 0, progress: bool = True):
    """Measure every case (triad interleaved with each large one). Returns (records,
    failures): a case whose call raises is reported and skipped, the others still run."""
    import numpy as np

    rng = np.random.default_rng(seed)
    probe, probe_bytes = triad()
    rows, failures = [], []
    bar = _progress(len(case_list), progress)
    for case in case_list:
        bar.set_description(f"{case.op} {case.tag} {case.shape}")
        try:
            # on a product that offers the op (config.product_for): the current one if it does
            with config.using_product(config.product_for(get_op(case.op))):
                rows += _one_case(case, rng, skip, repeats, probe, probe_bytes)
        except Exception as err:  # keep measuring the other cases; the exit status says it
            failures.append(f"{case.op} {case.tag} {case.shape}: {type(err).__name__}: {err}")
            print(f"opgen bench: FAILED {failures[-1]}", file=sys.stderr)
        bar.update(1)
    bar.close()
    return rows, failures


def _one_case(case: Case, rng, skip, repeats: int, probe, probe_bytes: int) -> list[Record]:
    runs, nbytes = contenders(case, rng, skip)
    if not case.tiny:
        runs["triad"] = probe
    # Large cases: every call starts with the caches holding none of the op's data (a pass
    # over the triad's 192 MiB first), the state of an op inside a model whose inputs were
    # written long before. Tiny cases measure the per-call cost: no flush.
    times = measure(runs, repeats, flush=None if case.tiny else probe)
    triad_s = times.pop("triad", None)
    triad_gbs = probe_bytes / triad_s / 1e9 if triad_s else None
    rows = records(case, times, nbytes, triad_gbs)
    if triad_gbs:
        rows.append(Record(case.op, case.tag, case.shape, "triad", triad_s * 1e3, triad_gbs, 100.0))
    return rows


def _progress(total: int, enabled: bool):
    """tqdm on stderr (it turns itself off when stderr is not a terminal); a no-op without it."""
    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
        if enabled and sys.stderr.isatty():   # where tqdm would have drawn the bar
            print("opgen bench: no progress bar without tqdm (pip install 'opgen[bench]')", file=sys.stderr)
    if tqdm is None or not enabled:
        class Quiet:
            def set_description(self, _):
                pass

            def update(self, _):
                pass

            def close(self):
                pass
        return Quiet()
    return tqdm(total=total, file=sys.stderr, disable=None, leave=False, unit="case")


def _num(value, spec: str, suffix: str = "") -> str:
    return "-" if value is None else format(value, spec) + suffix


def print_table(rows: list[Record], stream=None) -> None:
    """One line per case x contender; 'x opgen' columns are the contender's time over opgen's."""
    stream = stream or sys.stdout
    head = (f"{'op':<19} {'dtypes':<9} {'shape':<17} {'contender':<27} {'ms':>9} {'GB/s':>7} {'% triad':>8} "
            f"{'x opgen-np':>11} {'x opgen-pt':>11}")
    print(head, file=stream)
    print("-" * len(head), file=stream)
    last = None
    for r in rows:
        key = (r.op, r.dtypes, r.shape)
        lead = f"{r.op:<19} {r.dtypes:<9} {r.shape:<17}" if key != last else " " * 47
        last = key
        ms = f"{r.ms * 1e3:7.1f}us" if r.tiny else f"{r.ms:9.3f}"
        print(f"{lead} {r.contender:<27} {ms:>9} {_num(r.gbs, '7.1f'):>7} {_num(r.pct_bandwidth, '7.0f', '%'):>8} "
              f"{_num(r.vs_opgen_numpy, '10.2f', 'x'):>11} {_num(r.vs_opgen_torch, '10.2f', 'x'):>11}", file=stream)
    meta = ", ".join(f"{k}={v}" for k, v in environment().items())
    print(f"medians of interleaved rounds; GB/s from minimal bytes; 'x opgen' > 1 means opgen is faster "
          f"(after-torch row: its slowdown)\n{meta}", file=stream)


def environment() -> dict:
    """What the numbers depend on besides the code: printed under the table, kept in JSON."""
    import platform

    import numpy as np

    from opgen.config import get_target
    from opgen.targets import get_target as target_spec

    versions = {"numpy": np.__version__}
    try:
        import torch

        versions["torch"] = torch.__version__
    except ImportError:
        pass
    built_for = target_spec(get_target()).hardware_summary()        # llvm: the CPU and its features
    return {"target": get_target(), **({"built for": built_for} if built_for else {}),
            "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "unset"),
            "cpus": os.cpu_count(), "machine": platform.machine(), "python": platform.python_version(), **versions}


def write_rows(rows: list[Record], path) -> None:
    """JSON (list of records) or CSV, by extension."""
    path = Path(path)
    data = [asdict(r) for r in rows]
    if path.suffix == ".json":
        path.write_text(json.dumps({"environment": environment(), "rows": data}, indent=1))
        return
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(data[0]) if data else ["op"])
        writer.writeheader()
        writer.writerows(data)


def add_arguments(parser) -> None:
    parser.add_argument("--quick", action="store_true", help="one shape per op, f32 (under a minute)")
    parser.add_argument("--op", action="append", metavar="OP",   # checked: one line names an unknown op
                        help="only this op (repeatable)")
    parser.add_argument("--dtypes", action="append", help="dtype combo, e.g. bf16-bf16 (repeatable)")
    parser.add_argument("--shape", action="append", metavar="OP=SHAPE",
                        help="OP=SHAPE with the shape in the op's Problem spelling (fields joined by commas, "
                             "dims by 'x'), e.g. an op's benchmark shape (repeatable)")
    parser.add_argument("--repeats", type=int, help="interleaved rounds, median taken (default 15; --quick 5)")
    parser.add_argument("--no-tiny", action="store_true", help="leave out the per-call cost rows")
    parser.add_argument("--skip", action="append", default=[],
                        choices=sorted({p.name for op in all_ops() for p in op.peers} | set(FIXED_CONTENDERS)
                                       | {t.peer_name for t in _all_targets() if t.peer_name}),
                        help="leave out a baseline (repeatable)")
    parser.add_argument("--omp-wait", choices=("passive", "default", "inherit"), default="passive",
                        help="OMP_WAIT_POLICY for the run (see the module doc)")
    parser.add_argument("--out", help="also write the rows to FILE.json or FILE.csv")
    parser.add_argument("--plot", help="draw GB/s per shape and a roofline panel to FILE.png (matplotlib)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target", help="opgen target to run on (opgen.set_target; default: the configured one)")
    parser.add_argument("--training", action="store_true",
                        help="train small models with torch's norm modules and with opgen's instead "
                             "(opgen.bench_training; --quick: CI's sizes)")
    parser.add_argument("--models", action="store_true",
                        help="train real transformers/diffusers models with torch's norms and with "
                             "opgen.torch.apply's, interleaved (opgen.bench_models; --quick: tiny configs)")
    parser.add_argument("--model", action="append", choices=TRAINING_MODELS + MODEL_FAMILIES,
                        help="with --training or --models: only this model or family (repeatable)")
    parser.add_argument("--steps", type=int,
                        help="with --training: SGD steps per model (default 10; --quick 20); with --models: "
                             "AdamW steps per family (default 10; --quick 4)")
    parser.add_argument("--compile", choices=("off", "on", "both"), default="both",
                        help="with --models: eager, under torch.compile, or both (default)")


def to_argv(args) -> list[str]:
    """The command line that reproduces ``args`` (for the rerun in a fresh process)."""
    argv = ["--quick"] * args.quick + ["--no-tiny"] * args.no_tiny + ["--training"] * args.training
    argv += ["--models", "--compile", args.compile] if args.models else []
    argv += ["--steps", str(args.steps)] if args.steps is not None else []
    for flag, values in (("--op", args.op), ("--dtypes", args.dtypes), ("--shape", args.shape), ("--skip", args.skip),
                         ("--model", args.model)):
        for value in values or ():
            argv += [flag, value]
    argv += ["--repeats", str(args.repeats)] if args.repeats is not None else []
    argv += ["--omp-wait", args.omp_wait, "--seed", str(args.seed)]
    for flag, value in (("--out", args.out), ("--plot", args.plot), ("--target", args.target)):
        if value:
            argv += [flag, str(value)]
    return argv


def _openmp_loaded() -> bool:
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return "torch" in sys.modules or "tvm" in sys.modules
    return any(lib in maps for lib in ("libgomp", "libiomp", "libomp"))


def apply_policy(args, module: str = "opgen.bench", argv: list[str] | None = None) -> int | None:
    """Make OMP_WAIT_POLICY what --omp-wait asks; returns the exit code of a rerun
    (``python -m module argv``) in a fresh process when OpenMP is already loaded with
    another value, else None."""
    if args.omp_wait == "inherit":
        return None
    want = POLICIES[args.omp_wait]
    if os.environ.get("OMP_WAIT_POLICY") == want:
        return None
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    if want is not None:
        env["OMP_WAIT_POLICY"] = want
    if not _openmp_loaded():  # not read yet: setting it here is enough
        os.environ.pop("OMP_WAIT_POLICY", None)
        os.environ.update({} if want is None else {"OMP_WAIT_POLICY": want})
        return None
    argv = to_argv(args) if argv is None else argv
    env["PYTHONSAFEPATH"] = "1"     # -m would put the current folder first on the import path
    return subprocess.run([sys.executable, "-m", module, *argv], env=env).returncode


TORCH_EXTRA = "pip install 'opgen[torch]'"
# --model's choices: bench_training's models and model_families' families (named here, not
# imported: importing them would import torch before apply_policy sets OpenMP's wait policy).
TRAINING_MODELS = ["unet", "transformer"]
MODEL_FAMILIES = ["llama", "gemma", "convnext", "vit", "resnet", "unet2d"]


def _models_problem(chosen) -> str | None:
    """Why --models cannot run, as one line, or None."""
    if not installed("torch"):
        return f"--models trains torch models: {TORCH_EXTRA}"
    absent = [name for name in ("transformers", "diffusers") if not installed(name)]
    if absent:
        return f"--models needs {' and '.join(absent)}: pip install 'opgen[models]'"
    if wrong := sorted(set(chosen or ()) - set(MODEL_FAMILIES)):
        return f"--model {wrong[0]}: --models has {', '.join(MODEL_FAMILIES)}"
    return None


def installed(module: str) -> bool:
    """Whether ``module`` can be imported, found without importing it: importing torch
    would load OpenMP before ``apply_policy`` sets its wait policy."""
    return importlib.util.find_spec(module) is not None


def not_run_note() -> str | None:
    """The line under the table when torch is missing: without it only opgen's numpy call,
    the peer compilers and the triad run, and a reader should not take the short table for
    the whole comparison."""
    if installed("torch"):
        return None
    return f"not run: opgen-torch and the torch baselines (torch is not installed: {TORCH_EXTRA})"


def check_arguments(args) -> str | None:
    """The first problem with the command line, as one line, or None: checked before any
    timing, so that a misspelt value costs a message, not a traceback or a silently empty
    table."""
    from opgen.targets import get_target

    for option, least in (("repeats", 1), ("steps", 1)):
        value = getattr(args, option)
        if value is not None and value < least:
            return f"--{option} wants a number >= {least}, got {value}"
    if args.op and (mistake := unknown_op(args.op)):
        return mistake
    if args.training and not installed("torch"):
        return f"--training trains torch models: {TORCH_EXTRA}"
    if args.training and args.models:
        return "--training and --models are two benchmarks: one at a time"
    if args.models and (mistake := _models_problem(args.model)):
        return mistake
    if args.training and (wrong := sorted(set(args.model or ()) - set(TRAINING_MODELS))):
        return f"--model {wrong[0]}: --training has {', '.join(TRAINING_MODELS)}"
    if args.plot and not installed("matplotlib"):
        return "--plot needs matplotlib: pip install 'opgen[bench]'"
    if args.target:
        try:
            get_target(args.target)
        except KeyError as err:
            return str(err.args[0])
    chosen = [op for op in all_ops() if op.cases.bench and (not args.op or op.name in args.op)]
    for item in args.shape or ():
        op_name, equals, shape = item.partition("=")
        if not equals:
            return f"--shape {item}: wants OP=SHAPE, e.g. rms_norm_grad=4096x4096"
        if op_name not in {op.name for op in chosen}:
            return f"--shape {item}: {op_name!r} is not a benchmarked op of this run " \
                   f"({', '.join(op.name for op in chosen)})"
        try:
            B.parse_problem(op_name, shape)
        except (ValueError, TypeError) as err:
            return f"--shape {item}: {err}"
    for tag in args.dtypes or ():
        if not any(tag in {c.tag for c in op.combos} for op in chosen):
            return f"--dtypes {tag}: no combo of {', '.join(op.name for op in chosen)}"
    return None


def main(args) -> int:
    """The ``opgen bench`` command."""
    problem = check_arguments(args)
    if problem is not None:
        print(f"opgen bench: {problem}", file=sys.stderr)
        return 2
    rerun = apply_policy(args)
    if rerun is not None:
        return rerun
    if args.target:
        from opgen.config import set_target

        set_target(args.target)
    if args.training:
        from opgen import bench_training

        return bench_training.main(args)
    if args.models:
        from opgen import bench_models

        return bench_models.main(args)
    shapes = {}
    for item in args.shape or ():
        op, _, shape = item.partition("=")
        shapes.setdefault(op, []).append(shape)
    case_list = cases(args.quick, args.op, args.dtypes, shapes, tiny=not args.no_tiny)
    repeats = args.repeats if args.repeats is not None else (5 if args.quick else 15)
    rows, failures = run(case_list, repeats, set(args.skip), args.seed)
    print_table(rows)
    if note := not_run_note():
        print(note)
    if args.out:
        write_rows(rows, args.out)
    if args.plot:
        try:
            from opgen.bench_plot import plot

            plot(rows, args.plot)
            print(f"plot: {args.plot}")
        except ImportError as err:
            failures.append(f"--plot needs matplotlib: pip install 'opgen[bench]' ({err})")
    for failure in failures:
        print(f"FAILED {failure}")
    return 1 if failures else 0


def cli(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="opgen bench", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return main(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(cli())
