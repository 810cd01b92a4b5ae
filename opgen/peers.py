"""What op packages describe their torch peers with: torch on demand, backward closures.

An op's ``peers.py`` (opgen.ops.<op>.peers) declares the implementations ``opgen compare``
and ``opgen bench`` set opgen against (opgen.ops.spec.Peer): ATen's native backward,
eager autograd of a torch forward, its torch.compile. They all come down to the closures
made here. torch stays optional for opgen's core: only these functions import it, and
they say so with ``TorchMissing``.
"""
from __future__ import annotations

import warnings


class TorchMissing(RuntimeError):
    """A baseline needs torch and it is not installed."""


def import_torch():
    try:
        import torch
    except ImportError as err:  # torch stays optional for the core
        raise TorchMissing("this baseline needs torch: pip install 'opgen[torch]'") from err
    return torch


def backward_closure(forward, leaves: list, dy, names: tuple, compiled: bool):
    """Eager: run ``forward`` once and return a closure rerunning only its backward
    (retain_graph), returning the gradients of ``leaves`` by ``names``. Compiled: ``(before,
    run)`` with a fresh forward before each backward (a compiled backward donates its
    buffers, so each backward needs a fresh graph; a ``run`` without ``before`` does both)."""
    torch = import_torch()
    leaves = [leaf.detach().requires_grad_(True) for leaf in leaves]
    pending = {}

    def before():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Mismatch dtype between input and weight": expected for f32 gamma
            pending["y"] = forward(*leaves)

    def run():
        if not compiled:
            return dict(zip(names, torch.autograd.grad(pending["y"], leaves, dy, retain_graph=True)))
        if "y" not in pending:
            before()
        return dict(zip(names, torch.autograd.grad(pending.pop("y"), leaves, dy)))
    if compiled:
        return before, run
    before()
    return run


def autograd_peer(forward, leaves: list, dy, names: tuple, compiled: bool):
    """``backward_closure`` of ``forward``, compiled by torch.compile when asked: on fresh
    dynamo caches, since every case makes a new closure of the same code and dynamo counts
    their recompilations against one limit (8), after which it silently runs them eagerly
    (seen in a full benchmark run)."""
    if compiled:
        torch = import_torch()
        torch._dynamo.reset()
        forward = torch.compile(forward)
    return backward_closure(forward, leaves, dy, names, compiled)
