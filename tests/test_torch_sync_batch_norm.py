"""opgen.torch.SyncBatchNorm across processes (gloo, CPU tensors; tests/distributed.py spawns
the ranks, every run bounded by a timeout): outputs, running statistics and gradients equal
one process's BatchNorm over the global batch (float64 torch.nn.BatchNorm2d on the same
values, within opgen.verify's tolerances), with uneven and empty per-rank batches; the
unsynchronized paths (eval, no process group) and convert_sync_batchnorm in this process; a
DDP training loop launched by torchrun (examples/sync_batch_norm_ddp.py); a rank that dies
mid-forward.

Tiers: one 2-process case in the default tier; the other multi-process cases are ``full``.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import opgen.api
import opgen.torch as ot
from opgen.verify import compare

from distributed import free_port, run_ranks, succeeded

ROOT = Path(__file__).resolve().parents[1]
CHANNELS, HW = 5, (3, 4)
SYNCHRONIZED_OPS = ("batch_norm_reduce", "sync_batch_norm_gather_stats", "batch_norm_elemt",
                    "batch_norm_reduce_backward", "batch_norm_elemt_backward")
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _global_batch(step: int, sizes: tuple, dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The step's global batch and output gradient, the same in every process (a seeded
    generator), rounded to ``dtype``: per-channel offsets so that the mean matters."""
    g = torch.Generator().manual_seed(1000 + seed + step)
    shape = (sum(sizes), CHANNELS) + HW
    offsets = torch.arange(CHANNELS, dtype=torch.float32).view(1, -1, 1, 1) - 2
    x = torch.randn(shape, generator=g) * 2 + offsets
    return x.to(dtype), torch.randn(shape, generator=g).to(dtype)


def _initial_parameters(module) -> None:
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.rand(p.shape, generator=g) + 0.5)


def _counting_calls() -> dict:
    """Counts the calls reaching opgen's Pythonic layer, by op (what ran on opgen's kernels)."""
    counts: dict = {}
    real = opgen.api.call_op

    def counted(op, *a, **k):
        counts[op.name] = counts.get(op.name, 0) + 1
        return real(op, *a, **k)
    opgen.api.call_op = counted
    return counts


def sync_worker(rank: int, world_size: int, sizes: tuple, dtype_name: str, kwargs: dict, modes: tuple,
                groups: int = 1) -> dict:
    """One rank of the equality test: opgen's SyncBatchNorm over this rank's share of each
    step's global batch (``sizes[rank]`` samples), forward and backward; returns what it saw.
    With ``groups`` > 1 the ranks form that many process groups of consecutive ranks (the
    module's ``process_group``), each with a global batch of its own (``sizes`` per group)."""
    dtype = DTYPES[dtype_name]
    calls = _counting_calls()
    per_group = world_size // groups
    made = [torch.distributed.new_group(list(range(g * per_group, (g + 1) * per_group))) for g in range(groups)]
    group, rank = rank // per_group, rank % per_group
    module = ot.SyncBatchNorm(CHANNELS, dtype=dtype, process_group=made[group] if groups > 1 else None, **kwargs)
    _initial_parameters(module)
    start, stop = sum(sizes[:rank]), sum(sizes[:rank + 1])
    steps = []
    for step, mode in enumerate(modes):
        module.train(mode == "train")
        x, dy = _global_batch(step, sizes, dtype, seed=100 * group)
        x = x[start:stop].clone().requires_grad_(True)
        module.zero_grad(set_to_none=True)
        y = module(x)
        y.backward(dy[start:stop])
        steps.append({"y": y.detach(), "dx": x.grad,
                      "dweight": None if module.weight is None else module.weight.grad,
                      "dbias": None if module.bias is None else module.bias.grad,
                      "buffers": {n: b.clone() for n, b in module.named_buffers()}})
    return {"steps": steps, "calls": calls}


def _reference(sizes: tuple, kwargs: dict, modes: tuple, dtype: torch.dtype, seed: int = 0) -> list[dict]:
    """torch.nn.BatchNorm2d in float64 over each step's global batch (the same rounded
    values), and each rank's share of the parameter gradients (the sums over its samples).
    Eval without running statistics normalizes each rank's batch alone, as torch's
    SyncBatchNorm does (it synchronizes in training only)."""
    module = torch.nn.BatchNorm2d(CHANNELS, dtype=torch.float64, **kwargs)
    _initial_parameters(module)
    bounds = np.cumsum((0,) + sizes)
    ranks = list(zip(bounds[:-1], bounds[1:]))
    steps = []
    for step, mode in enumerate(modes):
        module.train(mode == "train")
        x, dy = (t.double() for t in _global_batch(step, sizes, dtype, seed))
        local = mode == "eval" and module.running_mean is None
        y, dx, xhat = torch.empty_like(x), torch.empty_like(x), torch.empty_like(x)
        for a, b in (ranks if local else [(0, len(x))]):
            if a == b:
                continue
            part = x[a:b].clone().requires_grad_(True)
            out = module(part)
            out.backward(dy[a:b])
            y[a:b], dx[a:b] = out.detach(), part.grad
            if module.training or local:
                data = part.detach()
                mean, var = data.mean((0, 2, 3), True), data.var((0, 2, 3), unbiased=False, keepdim=True)
            else:
                mean, var = module.running_mean.view(1, -1, 1, 1), module.running_var.view(1, -1, 1, 1)
            xhat[a:b] = (part.detach() - mean) / (var + module.eps).sqrt()
        steps.append({"y": y, "dx": dx, "dweight_shares": [(dy[a:b] * xhat[a:b]).sum((0, 2, 3)) for a, b in ranks],
                      "dbias_shares": [dy[a:b].sum((0, 2, 3)) for a, b in ranks],
                      "buffers": {n: b.clone() for n, b in module.named_buffers()}})
        module.zero_grad(set_to_none=True)
    return steps


def _assert_within(name: str, got: torch.Tensor, want: torch.Tensor, dtype_name: str) -> None:
    """Within opgen.verify's tolerance of the float64 value for data of ``dtype_name``."""
    assert got.shape == want.shape, (name, got.shape, want.shape)
    c = compare(name, got.double().numpy(), want.double().numpy(), dtype_name, str(got.dtype).replace("torch.", ""))
    assert c.passed, c


def _check_against_one_process(results: list[dict], sizes: tuple, dtype_name: str, kwargs: dict,
                               modes: tuple, seed: int = 0) -> None:
    reference = _reference(sizes, kwargs, modes, DTYPES[dtype_name], seed)
    for step, want in enumerate(reference):
        got = [r["steps"][step] for r in results]
        _assert_within(f"y[{step}]", torch.cat([g["y"] for g in got]), want["y"], dtype_name)
        for rank, g in enumerate(got):
            if sizes[rank]:
                _assert_within(f"dx[{step}] rank {rank}", g["dx"], want["dx"][sum(sizes[:rank]):sum(sizes[:rank + 1])],
                               dtype_name)
            if kwargs.get("affine", True):
                if not sizes[rank] and modes[step] == "train":   # no gradient (zeros), as torch's SyncBatchNorm
                    assert g["dweight"] is None and g["dbias"] is None
                else:     # eval: BatchNorm's backward, zeros for an empty batch
                    _assert_within(f"dweight[{step}] rank {rank}", g["dweight"], want["dweight_shares"][rank],
                                   dtype_name)
                    _assert_within(f"dbias[{step}] rank {rank}", g["dbias"], want["dbias_shares"][rank], dtype_name)
            for name, buffer in want["buffers"].items():
                if name == "num_batches_tracked":
                    assert int(g["buffers"][name]) == int(buffer), (step, rank)
                else:
                    _assert_within(f"{name}[{step}] rank {rank}", g["buffers"][name], buffer, dtype_name)


def _run_and_check(world_size: int, sizes: tuple, dtype_name: str = "float32", kwargs: dict | None = None,
                   modes: tuple = ("train", "train", "eval")) -> list[dict]:
    kwargs = kwargs or {}
    results = succeeded(run_ranks(world_size, sync_worker, sizes, dtype_name, kwargs, modes, timeout=240))
    _check_against_one_process(results, sizes, dtype_name, kwargs, modes)
    return results


def test_two_processes_equal_one_process_over_the_global_batch():
    """The default tier's multi-process case: 2 ranks with uneven batches (3 and 5 samples),
    two training steps then eval: outputs, gradients (input, weight, bias) and running
    statistics equal one process's BatchNorm2d over the 8 samples; every step ran on opgen's
    kernels on every rank (two synchronized training steps, then eval: BatchNorm's kernels)."""
    results = _run_and_check(2, (3, 5))
    for r in results:
        assert {op: r["calls"].get(op) for op in SYNCHRONIZED_OPS} == dict.fromkeys(SYNCHRONIZED_OPS, 2), r["calls"]
        assert r["calls"]["batch_norm"] == 1 and r["calls"]["batch_norm_backward"] == 1


_FULL_CASES = [
    (4, (2, 3, 1, 5), "float32", {}),
    (4, (2, 0, 5, 1), "float32", {}),                                  # an empty rank, a rank of one sample
    (2, (4, 3), "float16", {}),
    (4, (3, 2, 2, 4), "float32", {"momentum": None}),                  # the cumulative average
    (2, (3, 4), "float32", {"affine": False}),
    (2, (3, 4), "float32", {"track_running_stats": False}),
]


@pytest.mark.full
@pytest.mark.parametrize("world_size,sizes,dtype_name,kwargs", _FULL_CASES,
                         ids=[f"{w}ranks-{'-'.join(map(str, s))}-{d}-{'-'.join(k) or 'default'}"
                              for w, s, d, k in _FULL_CASES])
def test_processes_equal_one_process_over_the_global_batch(world_size, sizes, dtype_name, kwargs):
    _run_and_check(world_size, sizes, dtype_name, kwargs)


@pytest.mark.full
def test_each_process_group_synchronizes_its_own_ranks():
    """``process_group``: 4 ranks in two groups of 2 ({0, 1}, {2, 3}), each group with a batch
    of its own; each group's outputs, gradients and statistics are its own batch's alone."""
    sizes, modes = (3, 5), ("train", "train", "eval")
    results = succeeded(run_ranks(4, sync_worker, sizes, "float32", {}, modes, 2, timeout=240))
    for group in range(2):
        _check_against_one_process(results[2 * group:2 * group + 2], sizes, "float32", {}, modes, seed=100 * group)


def test_without_a_process_group_it_is_batch_norm_on_this_batch():
    """No torch.distributed process group (this process): training and eval are
    torch.nn.BatchNorm2d's on this batch (torch's SyncBatchNorm falls back to F.batch_norm
    so), on opgen's BatchNorm kernels; 3-d input too (SyncBatchNorm takes 2-d and more)."""
    assert not torch.distributed.is_initialized()
    for shape in ((4, CHANNELS, 3, 4), (4, CHANNELS, 7)):
        ours, theirs = ot.SyncBatchNorm(CHANNELS), torch.nn.BatchNorm2d(CHANNELS)
        _initial_parameters(ours)
        theirs.load_state_dict(ours.state_dict())
        calls = _counting_calls_in_this_process()
        try:
            for mode in ("train", "train", "eval"):
                ours.train(mode == "train")
                theirs.train(mode == "train")
                x, dy = torch.randn(shape) * 2 + 0.5, torch.randn(shape)
                xa, xb = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
                ya, yb = ours(xa), torch.nn.functional.batch_norm(
                    xb, theirs.running_mean, theirs.running_var, theirs.weight, theirs.bias, theirs.training,
                    theirs.momentum, theirs.eps)
                ya.backward(dy)
                yb.backward(dy)
                for a, b in ((ya, yb), (xa.grad, xb.grad), (ours.weight.grad, theirs.weight.grad),
                             (ours.bias.grad, theirs.bias.grad), (ours.running_mean, theirs.running_mean),
                             (ours.running_var, theirs.running_var)):
                    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
                ours.zero_grad()
                theirs.zero_grad()
        finally:
            opgen.api.call_op = calls.pop("real")
        assert calls == {"batch_norm": 3, "batch_norm_backward": 3}


def _counting_calls_in_this_process() -> dict:
    """_counting_calls for the test process itself: the real call_op kept under "real", to put back."""
    real = opgen.api.call_op
    counts = _counting_calls()
    counts["real"] = real
    return counts


def test_one_process_group_takes_the_shortcut():
    """A process group of one process: nothing to synchronize with (torch's world-size-1
    shortcut): plain BatchNorm on opgen's kernels, no collective, no SyncBatchNorm kernels."""
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    calls = _counting_calls_in_this_process()
    try:
        module = ot.SyncBatchNorm(CHANNELS)
        x = (torch.randn(4, CHANNELS, 3, 4) * 2 + 0.5).requires_grad_(True)
        module(x).sum().backward()
        want = torch.nn.functional.batch_norm(x.detach(), None, None, training=True)
        torch.testing.assert_close(module(x.detach()), want, rtol=1e-4, atol=1e-5)
    finally:
        opgen.api.call_op = calls.pop("real")
        torch.distributed.destroy_process_group()
    assert calls == {"batch_norm": 2, "batch_norm_backward": 1}


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4, momentum=0.2),
                                            torch.nn.ReLU(), torch.nn.Sequential(torch.nn.BatchNorm2d(4, affine=False)))
        self.head = torch.nn.BatchNorm1d(4, eps=1e-3)


def test_convert_sync_batchnorm_keeps_the_layers_own_tensors():
    """convert_sync_batchnorm, as torch's: every BatchNorm layer, nested too, becomes opgen's
    SyncBatchNorm holding the layer's own Parameter and buffer objects, eps, momentum, affine
    flag, training flag and the process group; other layers are the same objects."""
    net = _Net()
    net.features[1].eval()
    before = {n: t for n, t in list(net.named_parameters()) + list(net.named_buffers())}
    conv = net.features[0]
    group = object()      # any object: it is only kept, as torch keeps it
    converted = ot.SyncBatchNorm.convert_sync_batchnorm(net, process_group=group)
    assert converted is net and net.features[0] is conv
    layers = [net.features[1], net.features[3][0], net.head]
    assert all(type(layer) is ot.SyncBatchNorm and layer.process_group is group for layer in layers)
    assert [(l.eps, l.momentum, l.affine, l.training) for l in layers] == \
        [(1e-5, 0.2, True, False), (1e-5, 0.1, False, True), (1e-3, 0.1, True, True)]
    after = {n: t for n, t in list(net.named_parameters()) + list(net.named_buffers())}
    assert after.keys() == before.keys() and all(after[n] is before[n] for n in before)
    assert type(ot.SyncBatchNorm.convert_sync_batchnorm(torch.nn.BatchNorm2d(3))) is ot.SyncBatchNorm


def dying_worker(rank: int, world_size: int) -> None:
    """Rank 1 exits (os._exit, no cleanup) in the middle of SyncBatchNorm's forward, after its
    local statistics and before the all_gather; the others run the forward as usual."""
    from opgen.ops.batch_norm_elemt_backward import torch_module as sync

    if rank == 1:
        real = sync._local_sums

        def die(*args):
            real(*args)
            os._exit(3)
        sync._local_sums = die
    ot.SyncBatchNorm(CHANNELS)(torch.randn(4, CHANNELS, 3, 4))


@pytest.mark.full
def test_a_rank_that_dies_mid_forward_fails_the_others_with_a_clear_error():
    """The survivors raise opgen's error naming the all_gather, their rank and the group's
    size (gloo's own error chained) within the process group's timeout (10 s here), never hang."""
    start = time.monotonic()
    outcomes = run_ranks(3, dying_worker, timeout=120, pg_timeout=10)
    seconds = time.monotonic() - start
    assert outcomes[1].exitcode == 3, outcomes[1]
    for rank in (0, 2):
        assert outcomes[rank].exitcode == 1, outcomes[rank]
        assert (f"RuntimeError: opgen SyncBatchNorm: all_gather of the batch statistics failed on rank {rank} of 3"
                in outcomes[rank].error), outcomes[rank].error
    assert seconds < 100, seconds     # the interpreters' start (about 20 s each on a loaded 2-core machine) + 10 s


def stalling_worker(rank: int, world_size: int, stall: float) -> dict:
    """Rank 1 stalls ``stall`` seconds in the middle of SyncBatchNorm's forward (alive, its
    connections open), then exits; the others return how long their forward took to fail, and
    the error."""
    from opgen.ops.batch_norm_elemt_backward import torch_module as sync

    module, x = ot.SyncBatchNorm(CHANNELS), torch.randn(4, CHANNELS, 3, 4)
    module(x)      # the kernels built, before the timed call
    if rank == 1:
        real = sync._local_sums

        def stall_then_exit(*args):
            real(*args)
            time.sleep(stall)
            os._exit(4)
        sync._local_sums = stall_then_exit
    start = time.monotonic()
    try:
        module(x)
    except RuntimeError as err:
        return {"seconds": time.monotonic() - start, "error": str(err)}
    return {"seconds": time.monotonic() - start, "error": ""}


@pytest.mark.full
def test_a_rank_that_stalls_mid_forward_fails_the_others_within_the_timeout():
    """A rank alive but stuck (no closed connection to notice) makes the others raise opgen's
    error once the process group's timeout (5 s) has passed, not hang."""
    outcomes = run_ranks(3, stalling_worker, 30.0, timeout=150, pg_timeout=5)
    assert outcomes[1].exitcode == 4, outcomes[1]
    for rank in (0, 2):
        result = outcomes[rank].result
        assert outcomes[rank].exitcode == 0 and result is not None, outcomes[rank]
        assert result["error"].startswith(f"opgen SyncBatchNorm: all_gather of the batch statistics failed on rank "
                                          f"{rank} of 3"), result
        assert 4.5 < result["seconds"] < 25, result


@pytest.mark.full
def test_ddp_example_trains_under_torchrun(tmp_path):
    """examples/sync_batch_norm_ddp.py as its docstring runs it (torchrun, 2 processes,
    --standalone), 6 steps: it exits 0, the loss falls, and both ranks end with the same
    parameters and running statistics (synchronized statistics, averaged gradients)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone",
                          str(ROOT / "examples" / "sync_batch_norm_ddp.py"), "--steps", "6", "--timeout", "60",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=400, env=env, cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count(": loss ") == 6, run.stdout
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    losses = ranks[0]["losses"]
    assert ranks[1]["losses"] == losses and sum(losses[-2:]) / 2 < 0.8 * losses[0], losses
    states = [r["state"] for r in ranks]
    assert states[0].keys() == states[1].keys()
    for name, tensor in states[0].items():
        torch.testing.assert_close(states[1][name], tensor, rtol=0, atol=0, msg=name)
    assert int(states[0]["1.num_batches_tracked"]) == 6 and states[0]["1.running_mean"].abs().sum() > 0


def test_constructor_and_state_dict_are_torchs():
    """torch.nn.SyncBatchNorm's constructor (names and defaults), state_dict and repr."""
    import inspect

    def spelled(cls):
        return [(p.name, p.default, p.kind) for p in inspect.signature(cls).parameters.values()]
    assert spelled(ot.SyncBatchNorm) == spelled(torch.nn.SyncBatchNorm)
    theirs, ours = torch.nn.SyncBatchNorm(6, momentum=0.3), ot.SyncBatchNorm(6, momentum=0.3)
    ours.load_state_dict(theirs.state_dict())            # strict: same names and shapes
    assert repr(ours) == repr(theirs) and not isinstance(ours, torch.nn.SyncBatchNorm)


def test_apply_leaves_torchs_sync_batch_norm_and_names_the_converter():
    """opgen.torch.apply swaps single-process layers by probing them; torch's SyncBatchNorm is
    left, with the way to convert it."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1), torch.nn.SyncBatchNorm(4))
    report = ot.apply(model)
    assert type(model[1]) is torch.nn.SyncBatchNorm and "convert_sync_batchnorm" in report.left["1"]
