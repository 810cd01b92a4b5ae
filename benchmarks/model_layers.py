"""Per layer, at the shapes ``opgen bench --models`` trains (its ``bench`` size: ResNet's
BatchNorm2d, UNet2DModel's GroupNorm), opgen.torch's module against torch.nn's: where a
model's step time goes (issue 39: no model slower than torch's).

For each distinct norm shape of the families asked for (found by running the family's
forward once with hooks on its norm layers), in µs, medians of ``--rounds`` interleaved
rounds (contenders in a random order each round, ``--batch`` calls each):

* ``fwd``: the module's forward in training mode on an input that requires grad (the
  autograd graph recorded, the running statistics updated, as in a training step);
* ``bwd``: the backward node alone (torch_forward.NodeTime: the layer's share of a step's
  backward, where the engine is entered once for the whole model);
* ``kernel fwd`` / ``kernel bwd``: opgen's forward and backward ops through
  ``opgen.torch.calls`` (the module's own way to its kernels: the written bound call,
  outputs allocated, no autograd), and ATen's native kernels for torch.

opgen's module time minus its kernel time is its per-call overhead (the autograd
Function, the refusals, the running-statistics update, the dtype casts). Run with
2 threads, as the benchmark does:

    python benchmarks/model_layers.py --model resnet --model unet2d --rounds 15
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
import torch

import opgen.torch as ot
from opgen import model_families

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from tiny_modules import interleaved_samples  # noqa: E402
from torch_forward import NodeTime  # noqa: E402


def norm_shapes(family: str) -> list:
    """(class name, input shape, groups) of each norm layer call in one forward, in order."""
    built = model_families.build(family, "bench", 0)
    seen: list = []
    for module in built.model.modules():
        if "Norm" in type(module).__name__:
            module.register_forward_hook(lambda m, i, o: seen.append(
                (type(m).__name__, tuple(i[0].shape), getattr(m, "num_groups", None))))
    built.loss(built.model)
    return seen


def interleaved(contenders: dict, rounds: int, batch: int) -> dict:
    """(median, min) µs per call of each contender (tiny_modules' interleaved rounds)."""
    samples = interleaved_samples(contenders, rounds, batch, warmup=3)
    return {name: (float(np.median(t)), float(np.min(t))) for name, t in samples.items()}


def _module_contenders(side: str, module, x, dy) -> dict:
    module.train()
    params = [x, *module.parameters()]
    y = module(x)
    return {f"{side} fwd": lambda: module(x),
            f"{side} bwd": NodeTime(lambda: torch.autograd.grad(y, params, dy, retain_graph=True), y.grad_fn)}


def batch_norm_case(shape: tuple) -> dict:
    channels = shape[1]
    ours, theirs = ot.BatchNorm2d(channels), torch.nn.BatchNorm2d(channels)
    theirs.load_state_dict(ours.state_dict())
    x, dy = torch.randn(shape).requires_grad_(), torch.randn(shape)
    xd, w, b = x.detach(), ours.weight.detach(), ours.bias.detach()
    _, mean, invstd = ot.calls.batch_norm(xd, w, b, None, None, True, 0.0, 1e-5)
    rm, rv = torch.zeros(channels), torch.ones(channels)
    _, amean, ainvstd = torch.native_batch_norm(xd, w, b, rm, rv, True, 0.1, 1e-5)
    mask = [True, True, True]
    return {**_module_contenders("opgen", ours, x, dy), **_module_contenders("torch", theirs, x, dy),
            "opgen kernel fwd": lambda: ot.calls.batch_norm(xd, w, b, None, None, True, 0.0, 1e-5),
            "opgen kernel bwd": lambda: ot.calls.batch_norm_backward(dy, xd, w, None, None, mean, invstd, True,
                                                                     1e-5, mask),
            "aten kernel fwd": lambda: torch.native_batch_norm(xd, w, b, rm, rv, True, 0.1, 1e-5),
            "aten kernel bwd": lambda: torch.ops.aten.native_batch_norm_backward(
                dy, xd, w, rm, rv, amean, ainvstd, True, 1e-5, mask)}


def group_norm_case(shape: tuple, groups: int) -> dict:
    channels, n = shape[1], shape[0]
    hw = int(np.prod(shape[2:]))
    ours, theirs = ot.GroupNorm(groups, channels), torch.nn.GroupNorm(groups, channels)
    theirs.load_state_dict(ours.state_dict())
    x, dy = torch.randn(shape).requires_grad_(), torch.randn(shape)
    xd, w, b = x.detach(), ours.weight.detach(), ours.bias.detach()
    _, mean, rstd = ot.calls.group_norm(xd, w, b, groups, 1e-5)
    _, amean, arstd = torch.ops.aten.native_group_norm(xd, w, b, n, channels, hw, groups, 1e-5)
    mask = [True, True, True]
    return {**_module_contenders("opgen", ours, x, dy), **_module_contenders("torch", theirs, x, dy),
            "opgen kernel fwd": lambda: ot.calls.group_norm(xd, w, b, groups, 1e-5),
            "opgen kernel bwd": lambda: ot.calls.group_norm_backward(dy, xd, mean, rstd, w, groups, mask),
            "aten kernel fwd": lambda: torch.ops.aten.native_group_norm(xd, w, b, n, channels, hw, groups, 1e-5),
            "aten kernel bwd": lambda: torch.ops.aten.native_group_norm_backward(
                dy, xd, amean, arstd, w, n, channels, hw, groups, mask)}


def case(kind: str, shape: tuple, groups):
    if kind.startswith("BatchNorm"):
        return batch_norm_case(shape)
    if kind == "GroupNorm":
        return group_norm_case(shape, groups)
    return None


COLUMNS = ("fwd", "bwd", "kernel fwd", "kernel bwd")


def _row(label: str, count: int, side: dict) -> str:
    cells = [f"{side['opgen'][c]:.0f} / {side['torch'][c]:.0f} ({side['opgen'][c] / side['torch'][c]:.2f}x)"
             for c in COLUMNS]
    overhead = side["opgen"]["fwd"] + side["opgen"]["bwd"] - side["opgen"]["kernel fwd"] - side["opgen"]["kernel bwd"]
    return f"| {label} | {count} | {' | '.join(cells)} | {overhead:.0f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", choices=list(model_families.FAMILIES))
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rows: dict = {"median": [], "min": []}
    for family in args.model or ["resnet", "unet2d"]:
        calls = norm_shapes(family)
        totals = {stat: {"opgen": 0.0, "torch": 0.0} for stat in rows}
        for (kind, shape, groups) in dict.fromkeys(calls):
            contenders = case(kind, shape, groups)
            if contenders is None:
                continue
            measured = interleaved(contenders, args.rounds, args.batch)
            count = calls.count((kind, shape, groups))
            label = f"{kind} {shape}" + (f" G={groups}" if groups else "")
            for pick, stat in enumerate(rows):
                t = {name.replace("aten kernel", "torch kernel"): v[pick] for name, v in measured.items()}
                side = {s: {c: t[f"{s} {c}"] for c in COLUMNS} for s in ("opgen", "torch")}
                for s in ("opgen", "torch"):
                    totals[stat][s] += count * (side[s]["fwd"] + side[s]["bwd"])
                rows[stat].append(_row(label, count, side))
            print(rows["median"][-1], flush=True)
        for stat in rows:
            o, t = totals[stat]["opgen"], totals[stat]["torch"]
            rows[stat].append(f"| {family}: fwd+bwd over a step's calls | | {o / 1e3:.2f} / {t / 1e3:.2f} ms "
                              f"({o / t:.2f}x) | | | | {(o - t) / 1e3:+.2f} ms |")
    for stat, lines in rows.items():
        print(f"\ntorch {torch.__version__}, {torch.get_num_threads()} threads; µs, {stat} of {args.rounds} "
              f"interleaved rounds of {args.batch} calls each")
        print(f"| layer | calls/step | {' | '.join(f'{c}: opgen / torch' for c in COLUMNS)} | opgen overhead "
              "(fwd+bwd - kernels) |")
        print("|---|---|" + "---|" * len(COLUMNS) + "---|")
        print("\n".join(lines))


if __name__ == "__main__":
    main()
