"""Per-call overhead of opgen.torch's GroupNorm and LayerNorm modules on tiny tensors, where the
kernels take about a microsecond and everything else is the Python call path (issue 21).

Times, in µs (median of many calls after a warm-up), the module forward with parameters that
require grad (the autograd graph is recorded, as in training), the backward alone
(``torch.autograd.grad`` on a graph kept alive; and its node alone, torch_forward.NodeTime:
a layer's share of a model's backward), and torch.nn's modules on the same tensors;
also the functional ``opgen.group_norm`` / ``opgen.layer_norm`` with outputs allocated, and
the backward kernel called through the aclnn API on the same tensors (both phases, fresh
outputs each call as a backward makes them: the module backward's bar is that call plus 30 µs).
The contenders are interleaved (one batch of calls each per round, rounds in a random
order) so background load hits them alike. Pin it to get stable figures:

    OMP_NUM_THREADS=1 taskset -c 1 python benchmarks/tiny_modules.py
    OMP_NUM_THREADS=1 taskset -c 1 python benchmarks/tiny_modules.py --rounds 40 --batch 200
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import opgen
import opgen.torch as ot
from torch_forward import NodeTime, aclnn_call   # (run from the repository root: benchmarks/ is on sys.path)


def _batch_us(fn, batch: int) -> float:
    if isinstance(fn, NodeTime):
        return fn.measure_ms(batch) / batch * 1e3
    start = time.perf_counter()
    for _ in range(batch):
        fn()
    return (time.perf_counter() - start) / batch * 1e6


def interleaved_samples(contenders: dict, rounds: int, batch: int, warmup: int = 50) -> dict:
    """µs per call of each contender, one sample per batch of ``batch`` calls, ``rounds``
    samples each, the contenders in a fresh random order every round."""
    for fn in contenders.values():
        for _ in range(warmup):
            fn()
    times = {name: [] for name in contenders}
    names = list(contenders)
    order = np.random.default_rng(0)
    for _ in range(rounds):
        for i in order.permutation(len(names)):
            times[names[i]].append(_batch_us(contenders[names[i]], batch))
    return times


def interleaved(contenders: dict, rounds: int, batch: int) -> dict:
    """Median µs per call of each contender over ``rounds`` batches of ``batch`` calls."""
    return {name: float(np.median(t)) for name, t in interleaved_samples(contenders, rounds, batch).items()}


def _fresh(*likes):
    """Outputs like ``likes``, made per call (as a module's backward makes its gradients)."""
    return lambda: tuple(torch.empty_like(t) for t in likes)


def _module_pair(ours, theirs, x, dy, functional: tuple, aten: tuple, backward: tuple) -> dict:
    """Forward and backward of opgen's and torch's module on ``x`` (torch's loaded with
    opgen's parameters), the functional call, ATen's native forward and the backward kernel
    through the aclnn API, as contenders."""
    theirs.load_state_dict(ours.state_dict())
    y_ours, y_theirs = ours(x), theirs(x)
    p_ours, p_theirs = [x, *ours.parameters()], [x, *theirs.parameters()]
    hooked_ours, hooked_theirs = ours(x), theirs(x)     # NodeTime's hooks on graphs of their own
    (f_name, f_call), (a_name, a_call), (b_name, b_call) = functional, aten, backward
    return {"opgen forward": lambda: ours(x), "torch forward": lambda: theirs(x),
            "opgen backward": lambda: torch.autograd.grad(y_ours, p_ours, dy, retain_graph=True),
            "torch backward": lambda: torch.autograd.grad(y_theirs, p_theirs, dy, retain_graph=True),
            "opgen backward, its node": NodeTime(lambda: torch.autograd.grad(hooked_ours, p_ours, dy, retain_graph=True),
                                                 hooked_ours.grad_fn),
            "torch backward, its node": NodeTime(
                lambda: torch.autograd.grad(hooked_theirs, p_theirs, dy, retain_graph=True), hooked_theirs.grad_fn),
            f_name: f_call, a_name: a_call, b_name: b_call}


def cases():
    torch.manual_seed(0)
    x, dy = torch.randn(2, 8, 4, 4).requires_grad_(), torch.randn(2, 8, 4, 4)
    ours = ot.GroupNorm(4, 8)
    xd, w, b = x.detach(), ours.weight.detach(), ours.bias.detach()
    _, mean, rstd = opgen.group_norm(xd, w, b, 4, 1e-5)
    grads = _fresh(xd, w, b)
    yield "GroupNorm (2,8,4x4) G=4 f32", _module_pair(
        ours, torch.nn.GroupNorm(4, 8), x, dy,
        ("opgen.group_norm", lambda: opgen.group_norm(xd, w, b, 4, 1e-5)),
        ("aten native_group_norm", lambda: torch.ops.aten.native_group_norm(xd, w, b, 2, 8, 16, 4, 1e-5)),
        ("aclnnGroupNormBackward", aclnn_call("aclnnGroupNormBackward", dy, xd, mean, rstd, w, 2, 8, 16, 4,
                                          [True, True, True], outputs=grads)))
    x, dy = torch.randn(4, 16).requires_grad_(), torch.randn(4, 16)
    ours = ot.LayerNorm(16)
    xd, w, b = x.detach(), ours.weight.detach(), ours.bias.detach()
    _, mean, rstd = opgen.layer_norm(xd, [16], w, b, 1e-5)
    grads = _fresh(xd, w, b)
    yield "LayerNorm (4,16) f32", _module_pair(
        ours, torch.nn.LayerNorm(16), x, dy,
        ("opgen.layer_norm", lambda: opgen.layer_norm(xd, [16], w, b, 1e-5)),
        ("aten native_layer_norm", lambda: torch.native_layer_norm(xd, [16], w, b, 1e-5)),
        ("aclnnLayerNormBackward", aclnn_call("aclnnLayerNormBackward", dy, xd, [16], mean, rstd, w, b,
                                          [True, True, True], outputs=grads)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--batch", type=int, default=200)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; median us per call over "
          f"{args.rounds} interleaved rounds of {args.batch} calls")
    for label, contenders in cases():
        print(label)
        for name, us in interleaved(contenders, args.rounds, args.batch).items():
            print(f"  {name:24s} {us:8.2f} us")


if __name__ == "__main__":
    main()
