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
from pathlib import Path

import numpy as np
import pytest
import torch

import opgen.api
import opgen.torch as ot
from opgen.verify import compare

from distributed import run_ranks, succeeded

ROOT = Path(__file__).resolve().parents[1]
CHANNELS, HW = 5, (3, 4)
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _global_batch(step: int, sizes: tuple, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The step's global batch and output gradient, the same in every process (a seeded
    generator), rounded to ``dtype``: per-channel offsets so that the mean matters."""
    g = torch.Generator().manual_seed(1000 + step)
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


def sync_worker(rank: int, world_size: int, sizes: tuple, dtype_name: str, kwargs: dict, modes: tuple) -> dict:
    """One rank of the equality test: opgen's SyncBatchNorm over this rank's share of each
    step's global batch (``sizes[rank]`` samples), forward and backward; returns what it saw."""
    dtype = DTYPES[dtype_name]
    calls = _counting_calls()
    module = ot.SyncBatchNorm(CHANNELS, dtype=dtype, **kwargs)
    _initial_parameters(module)
    start, stop = sum(sizes[:rank]), sum(sizes[:rank + 1])
    steps = []
    for step, mode in enumerate(modes):
        module.train(mode == "train")
        x, dy = _global_batch(step, sizes, dtype)
        x = x[start:stop].clone().requires_grad_(True)
        module.zero_grad(set_to_none=True)
        y = module(x)
        y.backward(dy[start:stop])
        steps.append({"y": y.detach(), "dx": x.grad,
                      "dweight": None if module.weight is None else module.weight.grad,
                      "dbias": None if module.bias is None else module.bias.grad,
                      "buffers": {n: b.clone() for n, b in module.named_buffers()}})
    return {"steps": steps, "calls": calls}


def _reference(sizes: tuple, kwargs: dict, modes: tuple, dtype: torch.dtype) -> list[dict]:
    """torch.nn.BatchNorm2d in float64 over each step's global batch (the same rounded
    values), and each rank's share of the parameter gradients (the sums over its samples)."""
    module = torch.nn.BatchNorm2d(CHANNELS, dtype=torch.float64, **kwargs)
    _initial_parameters(module)
    steps = []
    for step, mode in enumerate(modes):
        module.train(mode == "train")
        x, dy = (t.double() for t in _global_batch(step, sizes, dtype))
        x.requires_grad_(True)
        y = module(x)
        y.backward(dy)
        if mode == "train":
            mean, var = x.detach().mean((0, 2, 3), keepdim=True), x.detach().var((0, 2, 3), unbiased=False, keepdim=True)
        else:
            mean, var = module.running_mean.view(1, -1, 1, 1), module.running_var.view(1, -1, 1, 1)
        xhat = (x.detach() - mean) / (var + module.eps).sqrt()
        bounds = np.cumsum((0,) + sizes)
        shares = [(dy[a:b] * xhat[a:b]).sum((0, 2, 3)) for a, b in zip(bounds[:-1], bounds[1:])]
        steps.append({"y": y.detach(), "dx": x.grad, "dweight_shares": shares,
                      "dbias_shares": [dy[a:b].sum((0, 2, 3)) for a, b in zip(bounds[:-1], bounds[1:])],
                      "buffers": {n: b.clone() for n, b in module.named_buffers()}})
        module.zero_grad(set_to_none=True)
    return steps


def _assert_within(name: str, got: torch.Tensor, want: torch.Tensor, dtype_name: str) -> None:
    """Within opgen.verify's tolerance of the float64 value for data of ``dtype_name``."""
    assert got.shape == want.shape, (name, got.shape, want.shape)
    c = compare(name, got.double().numpy(), want.double().numpy(), dtype_name, str(got.dtype).replace("torch.", ""))
    assert c.passed, c


def _check_against_one_process(results: list[dict], sizes: tuple, dtype_name: str, kwargs: dict,
                               modes: tuple) -> None:
    reference = _reference(sizes, kwargs, modes, DTYPES[dtype_name])
    for step, want in enumerate(reference):
        got = [r["steps"][step] for r in results]
        _assert_within(f"y[{step}]", torch.cat([g["y"] for g in got]), want["y"], dtype_name)
        for rank, g in enumerate(got):
            if sizes[rank]:
                _assert_within(f"dx[{step}] rank {rank}", g["dx"], want["dx"][sum(sizes[:rank]):sum(sizes[:rank + 1])],
                               dtype_name)
            if kwargs.get("affine", True):
                if sizes[rank]:
                    _assert_within(f"dweight[{step}] rank {rank}", g["dweight"], want["dweight_shares"][rank], dtype_name)
                    _assert_within(f"dbias[{step}] rank {rank}", g["dbias"], want["dbias_shares"][rank], dtype_name)
                else:     # an empty batch: no parameter gradient (zeros), as torch's SyncBatchNorm
                    assert g["dweight"] is None and g["dbias"] is None
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
    statistics equal one process's BatchNorm2d over the 8 samples; the backward ran on opgen's
    kernels on every rank."""
    results = _run_and_check(2, (3, 5))
    for r in results:
        assert r["calls"].get("batch_norm_reduce_backward") == 2 and r["calls"].get("batch_norm_elemt_backward") == 2


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
