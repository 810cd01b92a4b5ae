"""What synchronizing costs: opgen.torch.SyncBatchNorm's forward and backward per rank (every
rank's statistics gathered over gloo) against torch.nn.BatchNorm2d and opgen.torch.BatchNorm2d
on the rank's own batch alone (no synchronization), training mode, float32, CPU.

    python -m torch.distributed.run --nproc-per-node 2 --standalone benchmarks/sync_batch_norm.py
    python -m torch.distributed.run --nproc-per-node 2 --standalone benchmarks/sync_batch_norm.py \
        --repeats 21 --threads 1

Each repeat starts after a barrier (the ranks enter the timed call together, so a rank's time
is its own call's plus the wait its collective has on the slower rank, which is the cost of
synchronizing), then times the three modules in a random order on the same tensors: the forward
``module(x)`` (parameters requiring grad, the graph recorded) and the backward
``torch.autograd.grad(y, (x, weight, bias), dy)`` on that graph; and the two collectives alone
(all_gather of 2C + 1 floats, all_reduce of 2C), what synchronizing adds at least. Prints each rank's medians and
ranges in ms over the repeats, and the median of the per-repeat ratios to torch.nn.BatchNorm2d.
"""
from __future__ import annotations

import argparse
import datetime
import random
import time

import numpy as np
import torch
import torch.distributed as dist

import opgen.torch as ot

SHAPES = ((16, 64, 56, 56), (8, 256, 14, 14))


def _modules(channels: int) -> dict:
    made = {"opgen SyncBatchNorm": ot.SyncBatchNorm(channels), "torch BatchNorm2d": torch.nn.BatchNorm2d(channels),
            "opgen BatchNorm2d": ot.BatchNorm2d(channels)}
    for module in made.values():
        module.train()
    return made


def _time_one(module, x: torch.Tensor, dy: torch.Tensor) -> tuple[float, float]:
    """(forward, backward) seconds of one training call; the ranks start it together."""
    dist.barrier()
    start = time.perf_counter()
    y = module(x)
    middle = time.perf_counter()
    dist.barrier()
    middle_again = time.perf_counter()
    torch.autograd.grad(y, (x, module.weight, module.bias), dy)
    end = time.perf_counter()
    return middle - start, end - middle_again


class _Collectives:
    """The collectives alone, as SyncBatchNorm calls them for C channels: the forward's
    all_gather of 2C + 1 floats, the backward's all_reduce of 2C (timed like a module: its
    "forward" and "backward")."""

    def __init__(self, channels: int):
        self.combined, self.sums = torch.zeros(2 * channels + 1), torch.zeros(2 * channels)
        self.gathered = [torch.empty_like(self.combined) for _ in range(dist.get_world_size())]

    def forward(self) -> None:
        dist.all_gather(self.gathered, self.combined)

    def backward(self) -> None:
        dist.all_reduce(self.sums)


def _time_collectives(c: _Collectives) -> tuple[float, float]:
    dist.barrier()
    start = time.perf_counter()
    c.forward()
    middle = time.perf_counter()
    dist.barrier()
    middle_again = time.perf_counter()
    c.backward()
    return middle - start, time.perf_counter() - middle_again


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--threads", type=int, default=1, help="torch (and opgen) threads per rank")
    args = parser.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank()
    torch.set_num_threads(args.threads)
    rows = []
    for shape in SHAPES:
        torch.manual_seed(rank)
        x = (torch.randn(shape) * 2 + 0.5).requires_grad_(True)
        dy = torch.randn(shape)
        modules = _modules(shape[1])
        for module in modules.values():      # warm-up: kernels built, allocator warm
            _time_one(module, x, dy)
        collectives = _Collectives(shape[1])
        times = {name: [] for name in list(modules) + ["gloo collectives alone"]}
        order = list(times)
        rng = random.Random(1)    # the same order on every rank: their collectives must match
        for _ in range(args.repeats):
            rng.shuffle(order)
            for name in order:
                times[name].append(_time_collectives(collectives) if name not in modules else
                                   _time_one(modules[name], x, dy))
        rows.append((shape, times))
    for r in range(dist.get_world_size()):
        dist.barrier()
        if r == rank:
            _report(rank, rows)
    dist.destroy_process_group()


def _report(rank: int, rows) -> None:
    for shape, times in rows:
        base = np.array(times["torch BatchNorm2d"])
        for name, values in times.items():
            v = np.array(values) * 1e3
            ratio = np.median(np.array(values) / base, axis=0)
            print(f"rank {rank} {str(shape):18} {name:20} forward {np.median(v[:, 0]):7.2f} ms "
                  f"[{v[:, 0].min():.2f}-{v[:, 0].max():.2f}] ({ratio[0]:.2f}x)  backward {np.median(v[:, 1]):7.2f} ms "
                  f"[{v[:, 1].min():.2f}-{v[:, 1].max():.2f}] ({ratio[1]:.2f}x)", flush=True)


if __name__ == "__main__":
    main()
