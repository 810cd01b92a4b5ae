"""Module forward (and the backward of GroupNorm, LayerNorm, BatchNorm2d): opgen.torch's
RMSNorm / GroupNorm / LayerNorm / BatchNorm2d / GroupNormSwish against torch.nn's (for
GroupNormSwish: torch.nn.GroupNorm then F.silu), same process.

Issue 21 measured opgen's modules' forward (then a chain of eager torch ops) at up to 22x
ATen's native_group_norm. This times what a training step calls: ``module(x)`` with
parameters that require grad (the autograd graph is recorded, as in training), opgen's and
torch's modules on the same tensors, interleaved (one call of each per repeat, in a random
order) so the machine's load hits both alike; also the forward kernel alone through
its custom op (``torch.ops.opgen.*``), ``x.clone()`` (a fresh output and the same bytes
read and written: the bandwidth bound of a one-pass forward, allocation included) and, for
GroupNorm, LayerNorm and BatchNorm2d, ATen's native forward (native_group_norm,
native_layer_norm, native_batch_norm).
Backward: the module's whole ``torch.autograd.grad`` call, and its node alone (NodeTime:
what one layer adds to a model's backward), beside the backward kernel through its custom op
and the aclnn API, ATen's native backward and ``dy + x`` (a one-pass backward's bytes).
Reports the median and the range over the repeats, in ms, and the median of the per-repeat
ratios to torch's module (each ratio from one repeat, under the same background load: the
robust figure on a shared machine).

    python benchmarks/torch_forward.py                 # 21 repeats
    python benchmarks/torch_forward.py --repeats 41
    python benchmarks/torch_forward.py --only LayerNorm --only BatchNorm2d
    python benchmarks/torch_forward.py --evict         # each call right after touching 64 MB

``--evict`` times every call in the state a call finds inside a model, right after an op
(a convolution) has moved more bytes than the caches hold: then every Python function and
dict a call touches is a cache miss too, and a Python call path costs several times its
warm time (torch.nn's module path too).
"""
from __future__ import annotations

import argparse
import itertools
import time

import numpy as np
import torch

import opgen
import opgen.torch as ot
from opgen import acl, aclnn


def _time_ms(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


class NodeTime:
    """A backward call timed by what the autograd engine spends in one node of it: from the
    node's pre-hook to its post-hook, i.e. the node's backward plus the engine's checks of
    the gradients it returns. That is a layer's share of a training step's backward, where
    the engine is entered once for the whole model; ``torch.autograd.grad`` on one layer
    also pays that entry (its Python wrapper, the graph task, collecting the results), the
    same for every module (measured: 70-100 µs after a kernel that moved 24 MB, torch.nn's
    modules included)."""

    def __init__(self, call, node):
        self.call, self.elapsed_ms, self._start = call, 0.0, None
        node.register_prehook(self._enter)
        node.register_hook(self._leave)

    def _enter(self, grad_outputs):
        self._start = time.perf_counter()

    def _leave(self, grad_inputs, grad_outputs):
        self.elapsed_ms += (time.perf_counter() - self._start) * 1e3

    def __call__(self):
        return self.call()

    def measure_ms(self, calls: int = 1) -> float:
        """The node's milliseconds summed over ``calls`` calls."""
        self.elapsed_ms = 0.0
        for _ in range(calls):
            self.call()
        return self.elapsed_ms


def _timed_ms(fn) -> float:
    """Milliseconds of one call of ``fn``: the whole call, or its node's share (NodeTime)."""
    return fn.measure_ms() if isinstance(fn, NodeTime) else _time_ms(fn)


def aclnn_call(name: str, *inputs, outputs):
    """A zero-argument call of the aclnn op ``name``: GetWorkspaceSize on ``inputs`` and a
    fresh set of ``outputs()`` (as a module's backward must make its gradients), then the op."""
    phase_one, phase_two = getattr(aclnn, f"{name}GetWorkspaceSize"), getattr(aclnn, name)

    def call():
        status, size, executor = phase_one(*inputs, *outputs())
        workspace = acl.aclrtMalloc(size, acl.ACL_MEM_MALLOC_HUGE_FIRST)[1] if size else None
        assert status == 0 and phase_two(workspace, size, executor, None) == 0, acl.aclGetRecentErrMsg()
        if workspace is not None:
            acl.aclrtFree(workspace)
    return call


def interleaved(contenders: dict, repeats: int, evict=None) -> dict:
    """Milliseconds per call of each contender, one call each per repeat, in a new random
    order each repeat (alternating two orders left the first and last places slower on the
    shared machine, 2x in one run); ``evict()`` (untimed) before each call when given."""
    names = list(contenders)
    for fn in contenders.values():     # warm-up: kernels built, pools awake, memory touched
        fn()
        fn()
    times = {n: [] for n in names}
    order = np.random.default_rng(0)
    for _ in range(repeats):
        for i in order.permutation(len(names)):   # every contender in every position alike
            if evict is not None:
                evict()
            times[names[i]].append(_timed_ms(contenders[names[i]]))
    return times


def _cases():
    """(label, {contender: zero-argument callable}) per measured case."""
    torch.manual_seed(0)
    x = torch.randn(32, 32, 64, 64) * 2 + 0.5
    ours, theirs = ot.GroupNorm(8, 32), torch.nn.GroupNorm(8, 32)
    theirs.load_state_dict(ours.state_dict())
    yield "GroupNorm (32,32,64x64) G=8 f32", {
        "opgen module": lambda: ours(x), "torch module": lambda: theirs(x),
        "opgen kernel": lambda: torch.ops.opgen.group_norm(x, ours.weight.detach(), ours.bias.detach(), 8, 1e-5),
        "x.clone() (same bytes)": lambda: x.clone(),
        "aten native_group_norm": lambda: torch.ops.aten.native_group_norm(
            x, theirs.weight.detach(), theirs.bias.detach(), 32, 32, 64 * 64, 8, 1e-5)}
    for shape in ((32, 64, 32, 32), (32, 128, 16, 16)):
        x = torch.randn(shape) * 2 + 0.5
        ours, theirs = ot.GroupNorm(8, shape[1]), torch.nn.GroupNorm(8, shape[1])
        theirs.load_state_dict(ours.state_dict())
        w, b = ours.weight.detach(), ours.bias.detach()
        yield f"GroupNorm {tuple(shape)} G=8 f32", {
            "opgen module": lambda ours=ours, x=x: ours(x), "torch module": lambda theirs=theirs, x=x: theirs(x),
            "opgen kernel": lambda x=x, w=w, b=b: torch.ops.opgen.group_norm(x, w, b, 8, 1e-5),
            "aten native_group_norm": lambda x=x, w=w, b=b, s=shape: torch.ops.aten.native_group_norm(
                x, w, b, s[0], s[1], s[2] * s[3], 8, 1e-5)}
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(4096, 4096).to(dtype)
        ours = ot.RMSNorm(4096, eps=1e-6, dtype=dtype)
        theirs = torch.nn.RMSNorm(4096, eps=1e-6, dtype=dtype)
        theirs.load_state_dict(ours.state_dict())
        yield f"RMSNorm 4096x4096 {str(dtype).replace('torch.', '')}", {
            "opgen module": lambda ours=ours, x=x: ours(x), "torch module": lambda theirs=theirs, x=x: theirs(x),
            "opgen kernel": lambda ours=ours, x=x: torch.ops.opgen.rms_norm(x, ours.weight.detach(), 1e-6),
            "x.clone() (same bytes)": lambda x=x: x.clone()}
    for dtype in (torch.float32, torch.bfloat16):
        x = (torch.randn(8, 512, 1024) * 2 + 0.5).to(dtype)
        ours, theirs = ot.LayerNorm(1024, dtype=dtype), torch.nn.LayerNorm(1024, dtype=dtype)
        theirs.load_state_dict(ours.state_dict())
        yield f"LayerNorm (8,512,1024) {str(dtype).replace('torch.', '')}", {
            "opgen module": lambda ours=ours, x=x: ours(x), "torch module": lambda theirs=theirs, x=x: theirs(x),
            "opgen kernel": lambda ours=ours, x=x: torch.ops.opgen.layer_norm(
                x, [1024], ours.weight.detach(), ours.bias.detach(), 1e-5),
            "x.clone() (same bytes)": lambda x=x: x.clone(),
            "aten native_layer_norm": lambda theirs=theirs, x=x: torch.native_layer_norm(
                x, [1024], theirs.weight.detach(), theirs.bias.detach(), 1e-5)}
    for dtype in (torch.float32, torch.bfloat16):
        x = (torch.randn(32, 32, 64, 64) * 2 + 0.5).to(dtype)
        ours, theirs = ot.GroupNormSwish(8, 32, dtype=dtype), torch.nn.GroupNorm(8, 32, dtype=dtype)
        theirs.load_state_dict(ours.state_dict())
        yield f"GroupNormSwish (32,32,64x64) G=8 {str(dtype).replace('torch.', '')}", {
            "opgen module": lambda ours=ours, x=x: ours(x),
            "torch module": lambda theirs=theirs, x=x: torch.nn.functional.silu(theirs(x)),   # GroupNorm + SiLU
            "opgen kernel": lambda ours=ours, x=x: torch.ops.opgen.group_norm_swish(
                x, ours.weight.detach(), ours.bias.detach(), 8, None, 1e-5, True, 1.0),
            "x.clone() (same bytes)": lambda x=x: x.clone()}
    x = torch.randn(32, 64, 32, 32) * 2 + 0.5
    ours, theirs = ot.BatchNorm2d(64), torch.nn.BatchNorm2d(64)
    theirs.load_state_dict(ours.state_dict())
    rm, rv = torch.zeros(64), torch.ones(64)
    yield "BatchNorm2d (32,64,32x32) f32, training", {
        "opgen module": lambda: ours(x), "torch module": lambda: theirs(x),
        "opgen kernel": lambda: torch.ops.opgen.batch_norm(x, ours.weight.detach(), ours.bias.detach(), None, None,
                                                           True, 0.0, 1e-5),
        "x.clone() (same bytes)": lambda: x.clone(),
        "aten native_batch_norm": lambda: torch.native_batch_norm(x, theirs.weight.detach(), theirs.bias.detach(),
                                                                  rm, rv, True, 0.1, 1e-5)}


def _module_backward(ours, theirs, x, dy) -> dict:
    """Both modules' backward on ``x`` (a leaf that requires grad) and ``dy``: the whole
    ``torch.autograd.grad`` call on a kept graph (retain_graph: every call runs the
    backward once and nothing accumulates), its node alone (NodeTime, on a second graph so
    the hooks stay out of the whole call), and ``dy + x``: the bytes a backward that reads
    dy and x once and writes dx moves, at the copy's speed (its bandwidth bound)."""
    contenders = {}
    for side, module in (("opgen module", ours), ("torch module", theirs)):
        params = [x, *module.parameters()]
        y, y_hooked = module(x), module(x)
        contenders[side] = lambda y=y, p=params: torch.autograd.grad(y, p, dy, retain_graph=True)
        if _one_node(y_hooked):   # torch.nn.RMSNorm is a chain of ops: no one node is its backward
            contenders[f"{side}, its node"] = NodeTime(
                lambda y=y_hooked, p=params: torch.autograd.grad(y, p, dy, retain_graph=True), y_hooked.grad_fn)
    xd = x.detach()
    contenders["dy + x (same bytes)"] = lambda: torch.add(dy, xd)
    return contenders


def _one_node(y) -> bool:
    """Whether ``y``'s backward is one node: the node's inputs are all leaves (x and the
    parameters) or need no gradient."""
    return all(fn is None or type(fn).__name__ == "AccumulateGrad" for fn, _ in y.grad_fn.next_functions)


def _backward_cases():
    """(label, {contender: callable}) timing the backward alone (_module_backward); the
    opgen kernel through its custom op and through the aclnn API (both phases, fresh
    outputs each call: the module's bar is that call plus 30 µs) on the same tensors and
    statistics; ATen's native backward where it has one."""
    torch.manual_seed(1)
    x = (torch.randn(32, 32, 64, 64) * 2 + 0.5).requires_grad_()
    dy = torch.randn(32, 32, 64, 64)
    ours, theirs = ot.GroupNorm(8, 32), torch.nn.GroupNorm(8, 32)
    theirs.load_state_dict(ours.state_dict())
    _, mean, rstd = torch.ops.opgen.group_norm(x.detach(), ours.weight.detach(), ours.bias.detach(), 8, 1e-5)
    yield "GroupNorm (32,32,64x64) G=8 f32, backward", {
        **_module_backward(ours, theirs, x, dy),
        "opgen kernel": lambda: torch.ops.opgen.group_norm_backward(dy, x.detach(), mean, rstd, ours.weight.detach(),
                                                                    8, [True, True, True]),
        "opgen aclnn": aclnn_call("aclnnGroupNormBackward", dy, x.detach(), mean, rstd, ours.weight.detach(),
                                  32, 32, 64 * 64, 8, [True, True, True], outputs=_grads(x, ours.weight))}
    yield from _group_norm_backward_small()
    x = (torch.randn(8, 512, 1024) * 2 + 0.5).requires_grad_()
    dy = torch.randn(8, 512, 1024)
    ln_ours, ln_theirs = ot.LayerNorm(1024), torch.nn.LayerNorm(1024)
    ln_theirs.load_state_dict(ln_ours.state_dict())
    _, lmean, lrstd = torch.native_layer_norm(x.detach(), [1024], ln_theirs.weight.detach(), ln_theirs.bias.detach(),
                                              1e-5)
    _, omean, orstd = torch.ops.opgen.layer_norm(x.detach(), [1024], ln_ours.weight.detach(), ln_ours.bias.detach(),
                                                 1e-5)
    yield "LayerNorm (8,512,1024) f32, backward", {
        **_module_backward(ln_ours, ln_theirs, x, dy),
        "opgen kernel": lambda: torch.ops.opgen.layer_norm_backward(
            dy, x.detach(), [1024], omean, orstd, ln_ours.weight.detach(), ln_ours.bias.detach(), [True, True, True]),
        "opgen aclnn": aclnn_call("aclnnLayerNormBackward", dy, x.detach(), [1024], omean, orstd,
                                  ln_ours.weight.detach(), ln_ours.bias.detach(), [True, True, True],
                                  outputs=_grads(x, ln_ours.weight)),
        "aten native_layer_norm_backward": lambda: torch.ops.aten.native_layer_norm_backward(
            dy, x.detach(), [1024], lmean, lrstd, ln_theirs.weight.detach(), ln_theirs.bias.detach(),
            [True, True, True])}
    xb = (torch.randn(32, 64, 32, 32) * 2 + 0.5).requires_grad_()
    dyb = torch.randn(32, 64, 32, 32)
    bn_ours, bn_theirs = ot.BatchNorm2d(64), torch.nn.BatchNorm2d(64)
    bn_theirs.load_state_dict(bn_ours.state_dict())
    w, b = bn_theirs.weight.detach(), bn_theirs.bias.detach()
    _, bmean, binvstd = torch.ops.aten.native_batch_norm(xb.detach(), w, b, None, None, True, 0.0, 1e-5)
    _, omean, oinvstd = opgen.batch_norm(xb.detach(), w, b, None, None, True, 0.0, 1e-5)
    yield "BatchNorm2d (32,64,32x32) f32, training backward", {
        **_module_backward(bn_ours, bn_theirs, xb, dyb),
        "opgen aclnn": aclnn_call("aclnnBatchNormBackward", dyb, xb.detach(), w, None, None, omean, oinvstd, True,
                                  1e-5, [True, True, True], outputs=_grads(xb, bn_ours.weight)),
        "aten native_batch_norm_backward": lambda: torch.ops.aten.native_batch_norm_backward(
            dyb, xb.detach(), w, None, None, bmean, binvstd, True, 1e-5, [True, True, True])}
    x = torch.randn(8, 512, 1024).requires_grad_()
    dy = torch.randn(8, 512, 1024)
    rms_ours, rms_theirs = ot.RMSNorm(1024), torch.nn.RMSNorm(1024, eps=1e-6)
    rms_theirs.load_state_dict(rms_ours.state_dict())
    _, rrstd = torch.ops.opgen.rms_norm(x.detach(), rms_ours.weight.detach(), 1e-6)
    yield "RMSNorm (8,512,1024) f32, backward", {
        **_module_backward(rms_ours, rms_theirs, x, dy),
        "opgen kernel": lambda: torch.ops.opgen.rms_norm_grad(dy, x.detach(), rrstd, rms_ours.weight.detach())}


def _grads(x, weight):
    """Outputs for an aclnn backward call, made per call: dx like x, dweight and dbias like weight."""
    x, weight = x.detach(), weight.detach()
    return lambda: (torch.empty_like(x), torch.empty_like(weight), torch.empty_like(weight))


def _group_norm_backward_small():
    """GroupNorm backward at the UNet's deeper shapes (more, smaller groups)."""
    for shape in ((32, 64, 32, 32), (32, 128, 16, 16)):
        x = (torch.randn(shape) * 2 + 0.5).requires_grad_()
        dy = torch.randn(shape)
        ours, theirs = ot.GroupNorm(8, shape[1]), torch.nn.GroupNorm(8, shape[1])
        theirs.load_state_dict(ours.state_dict())
        w = ours.weight.detach()
        _, mean, rstd = torch.ops.opgen.group_norm(x.detach(), w, ours.bias.detach(), 8, 1e-5)
        _, amean, arstd = torch.ops.aten.native_group_norm(x.detach(), w, ours.bias.detach(), shape[0], shape[1],
                                                           shape[2] * shape[3], 8, 1e-5)
        yield f"GroupNorm {tuple(shape)} G=8 f32, backward", {
            **_module_backward(ours, theirs, x, dy),
            "opgen kernel": lambda dy=dy, x=x, mean=mean, rstd=rstd, w=w: torch.ops.opgen.group_norm_backward(
                dy, x.detach(), mean, rstd, w, 8, [True, True, True]),
            "opgen aclnn": aclnn_call("aclnnGroupNormBackward", dy, x.detach(), mean, rstd, w, shape[0], shape[1],
                                      shape[2] * shape[3], 8, [True, True, True], outputs=_grads(x, w)),
            "aten native_group_norm_backward": lambda dy=dy, x=x, m=amean, r=arstd, w=w, s=shape:
                torch.ops.aten.native_group_norm_backward(dy, x.detach(), m, r, w, s[0], s[1], s[2] * s[3], 8,
                                                          [True, True, True])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--only", action="append", default=[], help="cases whose label contains this (repeatable)")
    parser.add_argument("--evict", action="store_true", help="touch 64 MB before each call (untimed)")
    args = parser.parse_args()
    scratch = torch.empty(16 << 20) if args.evict else None
    evict = None if scratch is None else (lambda: scratch.add_(1.0))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.repeats} interleaved repeats"
          f"{', each call right after touching 64 MB' if args.evict else ''}")
    for label, contenders in itertools.chain(_cases(), _backward_cases()):   # lazily: closures see their case
        if args.only and not any(word in label for word in args.only):
            continue
        times = interleaved(contenders, args.repeats, evict)
        base = np.array(times["torch module"])
        aten = next((np.array(ms) for name, ms in times.items() if name.startswith("aten native")), None)
        print(label)
        for name, ms in times.items():
            paired = float(np.median(base / np.array(ms)))   # same repeat, same background load
            versus = "" if aten is None else f", {float(np.median(np.array(ms) / aten)):5.2f}x ATen's time"
            print(f"  {name:24s} {np.median(ms):8.3f} ms  [{min(ms):.3f} - {max(ms):.3f}]  "
                  f"{paired:5.2f}x torch module's speed{versus} (medians of per-repeat ratios)")


if __name__ == "__main__":
    main()
