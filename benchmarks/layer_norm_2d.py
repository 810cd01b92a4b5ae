"""opgen.torch.LayerNorm2d against torch's channels-first LayerNorm (permute, F.layer_norm,
permute back: what timm's LayerNorm2d and ConvNeXt's channels_first LayerNorm run), float32
on the CPU, forward + backward and forward alone, interleaved, median of ``--repeats``.

    python benchmarks/layer_norm_2d.py [--repeats 9] [8x96x56x56 8x384x14x14 ...]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import opgen.torch as ot


def _torch_channels_first(x, weight, bias, eps):
    return torch.nn.functional.layer_norm(x.permute(0, 2, 3, 1), (x.shape[1],), weight, bias, eps).permute(0, 3, 1, 2)


def _contenders(shape):
    torch.manual_seed(0)
    ours = ot.LayerNorm2d(shape[1])
    weight, bias = (torch.nn.Parameter(p.detach().clone()) for p in (ours.weight, ours.bias))
    x, dy = torch.randn(shape), torch.randn(shape)

    def train(forward):
        def run():
            xi = x.detach().requires_grad_(True)
            forward(xi).backward(dy)
        return run

    def infer(forward):
        def run():
            with torch.no_grad():
                forward(x)
        return run
    theirs = lambda t: _torch_channels_first(t, weight, bias, ours.eps)  # noqa: E731
    return {"opgen fwd+bwd": train(ours), "torch fwd+bwd": train(theirs), "opgen fwd": infer(ours),
            "torch fwd": infer(theirs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shapes", nargs="*", default=["8x96x56x56", "8x384x14x14"])
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    for text in args.shapes:
        shape = tuple(int(v) for v in text.split("x"))
        runs = _contenders(shape)
        for run in runs.values():   # build, warm
            run(), run()
        times = {name: [] for name in runs}
        for _ in range(args.repeats):
            for name, run in runs.items():
                start = time.perf_counter()
                run()
                times[name].append((time.perf_counter() - start) * 1e3)
        med = {name: statistics.median(t) for name, t in times.items()}
        train, infer = med["torch fwd+bwd"] / med["opgen fwd+bwd"], med["torch fwd"] / med["opgen fwd"]
        print(f"{text}: " + ", ".join(f"{name} {ms:.2f} ms" for name, ms in med.items())
              + f"; fwd+bwd {train:.2f}x, fwd {infer:.2f}x")


if __name__ == "__main__":
    main()
