"""``opgen bench --models``: real third-party models trained with torch's norms and with
``opgen.torch.apply``'s, side by side.

For each family of ``opgen.model_families`` (transformers' Llama, Gemma, ConvNeXt, ViT,
ResNet; diffusers' UNet2DModel) the model is built once from a seed and copied; ``apply``
swaps the copy's norms. Both copies train with AdamW on the same fixed batch, their steps
interleaved in one process (even steps torch first, odd steps opgen first, so that neither
always runs on the caches the other warmed). It prints, per family and mode (eager, and
under ``torch.compile``):

* what ``apply`` swapped and left;
* the largest loss difference over the steps, and the step-1 gradients' largest
  difference relative to each parameter's largest gradient (the copies differ only in the
  norms' kernels, so both must be within the norms' float32 tolerances);
* the step time of each (median of the steps after the first ``WARMUP``, which build
  kernels and compile graphs) and opgen's over torch's.

Speed is what a user sees: the whole training step through the public module path, not the
kernels alone (``opgen bench --training`` splits a step into its layers).
"""
from __future__ import annotations

import copy
import json
import statistics
import time
from dataclasses import asdict, dataclass, field

import torch

from opgen import model_families

MODES = ("eager", "compiled")
WARMUP = 2
LEARNING_RATE = 1e-3


@dataclass
class Row:
    """One family in one mode."""

    family: str
    mode: str
    swapped: int
    left: dict
    steps: int
    max_loss_difference: float
    max_gradient_difference: float
    torch_step_ms: float
    opgen_step_ms: float
    losses: dict = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        """opgen's step time over torch's (below 1: opgen's model trains faster)."""
        return self.opgen_step_ms / self.torch_step_ms


def _step(model, loss_of, optimizer) -> tuple[float, float]:
    start = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    loss = loss_of(model)
    loss.backward()
    optimizer.step()
    return loss.item(), time.perf_counter() - start


def _gradients(model) -> dict:
    return {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}


def _gradient_difference(ours: dict, theirs: dict) -> float:
    """The largest |ours - theirs| over every parameter, relative to that parameter's largest
    torch gradient (at least 1e-2, so that a parameter with near-zero gradients does not
    turn rounding into a large ratio)."""
    if ours.keys() != theirs.keys():
        return float("inf")
    return max(((ours[n] - theirs[n]).abs().max() / max(theirs[n].abs().max().item(), 1e-2)).item()
               for n in theirs)


def run_family(family: str, mode: str, size: str, steps: int, seed: int) -> Row:
    """Train ``family``'s two copies for ``steps`` interleaved AdamW steps in ``mode``."""
    import opgen.torch as ot

    built = model_families.build(family, size, seed)
    sides = {"torch": built.model, "opgen": copy.deepcopy(built.model)}
    report = ot.apply(sides["opgen"])
    runners = {side: (torch.compile(m) if mode == "compiled" else m) for side, m in sides.items()}
    optimizers = {side: torch.optim.AdamW(m.parameters(), lr=LEARNING_RATE) for side, m in sides.items()}
    losses = {side: [] for side in sides}
    seconds = {side: [] for side in sides}
    gradients = {}
    for step in range(steps):
        order = ("torch", "opgen") if step % 2 == 0 else ("opgen", "torch")
        for side in order:
            sides[side].train()
            loss, took = _step(runners[side], built.loss, optimizers[side])
            losses[side].append(loss)
            seconds[side].append(took)
            if step == 0:
                gradients[side] = _gradients(sides[side])
    timed = {side: values[WARMUP:] or values for side, values in seconds.items()}
    return Row(family, mode, len(report.swapped), dict(report.left), steps,
               max(abs(a - b) for a, b in zip(losses["torch"], losses["opgen"])),
               _gradient_difference(gradients["opgen"], gradients["torch"]),
               1e3 * statistics.median(timed["torch"]), 1e3 * statistics.median(timed["opgen"]), losses)


def print_row(row: Row) -> None:
    left = f", left {len(row.left)}" if row.left else ""
    print(f"{row.family:<9} {row.mode:<9} swapped {row.swapped:>2}{left:<9} "
          f"loss |diff| {row.max_loss_difference:8.1e}  grad rel diff {row.max_gradient_difference:8.1e}  "
          f"step torch {row.torch_step_ms:8.2f} ms  opgen {row.opgen_step_ms:8.2f} ms  ({row.ratio:.2f}x)", flush=True)
    for name, why in row.left.items():
        print(f"{'':<20}left {name}: {why}")


def main(args) -> int:
    """``opgen bench --models``: every family (or ``--model``), each mode of ``--compile``."""
    families = args.model or list(model_families.FAMILIES)
    size = "tiny" if args.quick else "bench"
    steps = args.steps or (4 if args.quick else 10)
    modes = {"off": ("eager",), "on": ("compiled",), "both": MODES}[args.compile]
    print(f"opgen bench --models: {size} configs, {steps} AdamW steps (lr {LEARNING_RATE}), f32, "
          f"{torch.get_num_threads()} threads, interleaved; step time = median after the first {WARMUP}")
    rows = []
    for family in families:
        for mode in modes:
            row = run_family(family, mode, size, steps, args.seed)
            print_row(row)
            rows.append(row)
    if args.out:
        with open(args.out, "w") as f:
            json.dump([asdict(r) | {"ratio": r.ratio} for r in rows], f, indent=1)
    return 0
