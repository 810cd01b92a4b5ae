"""Data-parallel training of a small CNN whose BatchNorms are opgen.torch.SyncBatchNorm, on
CPU processes joined by torch.distributed's gloo backend (torch's own SyncBatchNorm refuses
CPU tensors). Run it with two processes on one machine:

    python -m torch.distributed.run --nproc-per-node 2 --standalone examples/sync_batch_norm_ddp.py

(``torchrun --nproc-per-node 2 --standalone ...`` is the same). Each process trains on its own
share of every batch; the SyncBatchNorm layers normalize with the statistics of the whole batch
(all ranks), DistributedDataParallel averages the gradients, so every rank ends with the same
parameters and running statistics. Rank 0 prints each step's loss (the mean over the ranks).
``--steps N`` sets the number of steps; ``--out DIR`` writes each rank's final state_dict and
losses to DIR/rank<r>.pt (the test tests/test_torch_sync_batch_norm.py reads them).
"""
from __future__ import annotations

import argparse
import datetime
import os

import torch
import torch.distributed as dist
from torch import nn

import opgen.torch


CLASSES = 4


def small_cnn() -> nn.Module:
    """conv + BatchNorm + relu, twice, then a linear classifier: torch.nn's BatchNorm2d, turned
    into opgen's SyncBatchNorm by convert_sync_batchnorm below."""
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.Conv2d(16, 32, 3, padding=1, stride=2), nn.BatchNorm2d(32), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, CLASSES))


def batch(step: int, rank: int, world_size: int, per_rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's share of a synthetic classification batch: fixed class prototypes (16x16
    images) plus noise; every rank draws the same global batch and keeps its slice."""
    prototypes = torch.randn(CLASSES, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(1 + step % 4)          # four batches, seen in turn
    labels = torch.randint(0, CLASSES, (per_rank * world_size,), generator=g)
    images = prototypes[labels] + 0.5 * torch.randn(per_rank * world_size, 3, 16, 16, generator=g)
    share = slice(rank * per_rank, (rank + 1) * per_rank)
    return images[share], labels[share]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--per-rank", type=int, default=8, help="samples per rank and step")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds a collective may wait on a peer")
    parser.add_argument("--out", help="folder for each rank's final state_dict and losses")
    args = parser.parse_args()

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))  # torchrun's env
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)                                     # the same initial weights on every rank
    model = opgen.torch.SyncBatchNorm.convert_sync_batchnorm(small_cnn())
    model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for step in range(args.steps):
        images, labels = batch(step, rank, world_size, args.per_rank)
        loss = nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss)
        losses.append(mean_loss.item() / world_size)
        if rank == 0:
            print(f"step {step}: loss {losses[-1]:.4f}", flush=True)
    if args.out:
        torch.save({"state": model.module.state_dict(), "losses": losses}, os.path.join(args.out, f"rank{rank}.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
