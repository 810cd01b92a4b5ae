"""The other side of every comparison: problems, inputs and the hand-written implementations.

``opgen compare`` and ``opgen bench`` judge opgen against the same libraries, so both take
them from here: ATen's native kernels (``native_group_norm_backward``; for RmsNorm, which
has no CPU backward kernel in torch 2.13, the autograd of ``F.rms_norm``), eager autograd,
and ``torch.compile``. opgen itself is always called through its public API (never Kernel
internals), with the arrays a user makes. torch is optional: every function that needs it
says so with ``TorchMissing``.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from opgen.dtypes import BFLOAT16, numpy_dtype
from opgen.ops import get_op
from opgen.ops.group_norm_backward import Problem as GroupNormProblem
from opgen.ops.rms_norm_grad import Problem as RmsProblem

RMS_EPS = 1e-6    # opgen.ops.rms_norm_grad.random_inputs computes rstd with this eps


class TorchMissing(RuntimeError):
    """A baseline needs torch and it is not installed."""


def import_torch():
    try:
        import torch
    except ImportError as err:  # torch stays optional for the core
        raise TorchMissing("this baseline needs torch: pip install 'opgen[torch]'") from err
    return torch


def parse_problem(op_name: str, text: str):
    """A problem from its command-line spelling.

    rms_norm_grad: x's shape, dims joined by 'x' (``4096x4096``, ``2x1x16``); gamma covers
    the last dim. group_norm_backward: ``N,C,HxW,G`` where HxW is a number or ``64x64``.
    """
    try:
        if op_name == "rms_norm_grad":
            return RmsProblem(tuple(int(d) for d in text.lower().split("x")), 1)
        if op_name == "group_norm_backward":
            n, c, hw, g = text.split(",")
            return GroupNormProblem(int(n), int(c), math.prod(int(d) for d in hw.lower().split("x")), int(g))
    except ValueError:
        pass
    spelling = {"rms_norm_grad": "ROWSxCOLS (e.g. 4096x4096)", "group_norm_backward": "N,C,HxW,G (e.g. 2,320,64x64,32)"}
    if op_name not in spelling:
        raise ValueError(f"unknown op {op_name!r}")
    raise ValueError(f"{op_name}: cannot read shape {text!r}; expected {spelling[op_name]}")


def problem_label(problem) -> str:
    """Short stable text of a problem for tables and file names."""
    if isinstance(problem, GroupNormProblem):
        side = math.isqrt(problem.HxW)
        hw = f"{side}x{side}" if side * side == problem.HxW else str(problem.HxW)
        return f"({problem.N},{problem.C},{hw},{problem.group})"
    return "x".join(str(d) for d in problem.x_shape)


def random_inputs(op_name: str, tag: str, problem, rng: np.random.Generator) -> dict:
    """Numpy inputs in the user's shapes (the op's own generator: realistic rstd/mean)."""
    op = get_op(op_name)
    return op.random_inputs(problem, op.combo(tag), rng)


def to_torch(array: np.ndarray, device: str = "cpu"):
    """A torch tensor in torch's own allocator (bfloat16 through a uint16 view: numpy's
    ml_dtypes arrays do not export DLPack)."""
    torch = import_torch()
    if array.dtype == numpy_dtype(BFLOAT16):
        tensor = torch.from_numpy(np.ascontiguousarray(array).view(np.uint16)).view(torch.bfloat16)
    else:
        tensor = torch.from_numpy(np.ascontiguousarray(array))
    return tensor.to(device=device, copy=True)


def to_float64(value) -> np.ndarray:
    """Any output (numpy of any float dtype, torch tensor on any device) as float64 numpy."""
    if type(value).__module__.startswith("torch"):
        return value.detach().to("cpu").double().numpy()
    return np.asarray(value).astype(np.float64)


def opgen_call(op_name: str, problem, args: dict):
    """A closure running opgen's Pythonic API on ``args`` (numpy arrays or torch tensors);
    it returns the outputs by kernel name."""
    import opgen

    if op_name == "rms_norm_grad":
        def run():
            dx, dgamma = opgen.rms_norm_grad(args["dy"], args["x"], args["rstd"], args["gamma"])
            return {"dx": dx, "dgamma": dgamma}
        return run

    def run_gn():
        dx, dgamma, dbeta = opgen.group_norm_backward(args["dy"], args["x"], args["mean"], args["rstd"],
                                                      args.get("gamma"), problem.group)
        return {"dx": dx, "dgamma": dgamma, "dbeta": dbeta}
    return run_gn


def aten_call(op_name: str, problem, tensors: dict):
    """A closure running ATen's hand-written backward on torch ``tensors`` (any device).

    GroupNorm: ``aten.native_group_norm_backward``. RmsNorm: autograd of ``F.rms_norm``
    (forward once, then only the backward is rerun): ATen recomputes rstd from x with the
    same eps as the inputs' rstd, so both sides see the same statistics up to f32 rounding.
    """
    torch = import_torch()
    t = tensors
    if op_name == "group_norm_backward":
        p = problem
        gamma = t.get("gamma")

        def run_gn():
            dx, dgamma, dbeta = torch.ops.aten.native_group_norm_backward(
                t["dy"], t["x"], t["mean"], t["rstd"], gamma, p.N, p.C, p.HxW, p.group, [True, True, True])
            return {"dx": dx, "dgamma": dgamma, "dbeta": dbeta}
        return run_gn
    return _autograd_rms(torch, t, compiled=False)


def layer_norm_call(op_name: str, problem, tensors: dict):
    """ATen's closest native CPU kernel to RmsNorm's backward: ``native_layer_norm_backward``
    over the same rows (its statistics from ``native_layer_norm`` once, outside the timed
    call). It does slightly more work (the mean term); issue 10's per-call reference."""
    torch = import_torch()
    x, gamma = tensors["x"], tensors["gamma"].to(tensors["x"].dtype)
    shape = list(gamma.shape)
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, shape, gamma, None, RMS_EPS)
    dy = tensors["dy"]

    def run():
        dx, dgamma, _ = torch.ops.aten.native_layer_norm_backward(dy, x, shape, mean, rstd, gamma, None,
                                                                   [True, True, False])
        return {"dx": dx, "dgamma": dgamma}
    return run


def compiled_call(op_name: str, problem, tensors: dict):
    """torch.compile's backward: AOT autograd's compiled backward graph of F.rms_norm /
    F.group_norm. Returns ``(before, run)``: ``before`` runs the compiled forward (a compiled
    backward donates its buffers, so each backward needs a fresh graph), ``run`` only the
    backward (a ``run`` without ``before`` does both)."""
    torch = import_torch()
    if op_name == "rms_norm_grad":
        return _autograd_rms(torch, tensors, compiled=True)
    return _autograd_group_norm(torch, problem, tensors, compiled=True)


def eager_call(op_name: str, problem, tensors: dict):
    """Eager autograd of the torch forward (F.rms_norm / F.group_norm), backward only."""
    torch = import_torch()
    if op_name == "rms_norm_grad":
        return _autograd_rms(torch, tensors, compiled=False)
    return _autograd_group_norm(torch, problem, tensors, compiled=False)


def _backward_closure(torch, forward, leaves: list, dy, names: tuple, compiled: bool):
    """Eager: run ``forward`` once and return a closure rerunning only its backward
    (retain_graph). Compiled: ``(before, run)`` with a fresh forward before each backward."""
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


def _compile(torch, forward):
    """torch.compile of ``forward``, on fresh dynamo caches: every case makes a new closure of
    the same code, and dynamo counts their recompilations against one limit (8), after which
    it silently runs them eagerly (seen in a full benchmark run)."""
    torch._dynamo.reset()
    return torch.compile(forward)


def _autograd_rms(torch, t: dict, compiled: bool):
    import torch.nn.functional as F

    shape = tuple(t["gamma"].shape)

    def forward(x, gamma):
        return F.rms_norm(x, shape, gamma, RMS_EPS)
    return _backward_closure(torch, _compile(torch, forward) if compiled else forward, [t["x"], t["gamma"]], t["dy"],
                             ("dx", "dgamma"), compiled)


def _autograd_group_norm(torch, problem, t: dict, compiled: bool):
    import torch.nn.functional as F

    def forward(x, gamma):
        return F.group_norm(x, problem.group, gamma, None, 1e-5)
    return _backward_closure(torch, _compile(torch, forward) if compiled else forward, [t["x"], t["gamma"]], t["dy"],
                             ("dx", "dgamma"), compiled)


def torch_devices() -> list[str]:
    """Where ATen runs here: the CPU, and CUDA when a GPU is present."""
    torch = import_torch()
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def output_buffers(op_name: str, tag: str, problem, like: str = "numpy", device: str = "cpu") -> dict:
    """Preallocated outputs by kernel name, as an aclnn user makes them (np.empty or
    torch.empty): the two-phase API writes into the caller's outputs."""
    op = get_op(op_name)
    combo = op.combo(tag)
    if op_name == "rms_norm_grad":
        n = len(problem.x_shape) - problem.gamma_ndim
        shapes = {"dx": problem.x_shape, "dgamma": problem.x_shape[n:]}
    else:
        shapes = {"dx": problem.x_shape, "dgamma": (problem.C,), "dbeta": (problem.C,)}
    if like == "numpy":
        return {name: np.empty(shape, numpy_dtype(combo[name])) for name, shape in shapes.items()}
    torch = import_torch()
    return {name: torch.empty(shape, dtype=getattr(torch, combo[name]), device=device)
            for name, shape in shapes.items()}


def aclnn_call(op_name: str, problem, args: dict, phase1_only: bool = False):
    """A closure making one complete two-phase aclnn call on ``args`` (inputs and
    preallocated outputs by kernel name, numpy arrays or torch tensors): GetWorkspaceSize,
    aclrtMalloc of the workspace, the run, aclrtFree, as the seed examples do.
    ``phase1_only``: GetWorkspaceSize alone (the executor is dropped unrun), to split the
    per-call cost."""
    from opgen import acl, aclnn

    a = args
    if op_name == "rms_norm_grad":
        get, run = aclnn.aclnnRmsNormGradGetWorkspaceSize, aclnn.aclnnRmsNormGrad
        params = (a["dy"], a["x"], a["rstd"], a["gamma"], a["dx"], a["dgamma"])
    else:
        p = problem
        get, run = aclnn.aclnnGroupNormBackwardGetWorkspaceSize, aclnn.aclnnGroupNormBackward
        params = (a["dy"], a["x"], a["mean"], a["rstd"], a.get("gamma"), p.N, p.C, p.HxW, p.group,
                  [True, True, True], a["dx"], a["dgamma"], a["dbeta"])

    def phase1():
        status, _, _ = get(*params)
        if status:
            raise RuntimeError(f"{op_name}: aclnn status {status}: {acl.aclGetRecentErrMsg()}")

    def call():
        status, size, executor = get(*params)
        workspace = None
        if status == 0 and size:
            status, workspace = acl.aclrtMalloc(size, acl.ACL_MEM_MALLOC_HUGE_FIRST)
        if status == 0:
            status = run(workspace, size, executor, None)
        if workspace is not None:
            acl.aclrtFree(workspace)
        if status:
            raise RuntimeError(f"{op_name}: aclnn status {status}: {acl.aclGetRecentErrMsg()}")
    return phase1 if phase1_only else call
