"""The other side of every comparison, generic over ops: problems, arrays, calls.

``opgen compare`` and ``opgen bench`` judge opgen against the implementations each op
declares (``OpSpec.peers``: ATen's native kernels, eager autograd, torch.compile) and
call opgen through its public APIs with the arrays a user makes, never Kernel internals.
Nothing here names an op: shapes are read with the op's own Problem spelling, outputs
are allocated with its ``output_shapes``, and the aclnn arguments come from its ApiSpec.
torch is optional: every function that needs it says so with ``TorchMissing``.
"""
from __future__ import annotations

import numpy as np

from opgen.apispec import ATTR, INPUT, MASK, OUTPUT
from opgen.dtypes import BFLOAT16, numpy_dtype
from opgen.ops import get_op
from opgen.peers import TorchMissing, import_torch  # noqa: F401  (re-exported: the tools' torch gate)


def parse_problem(op_name: str, text: str):
    """A problem from its command-line spelling (the op's Problem.parse; ValueError: why)."""
    return get_op(op_name).parse_problem(text)


def problem_label(problem) -> str:
    """Short stable text of a problem for tables and file names (parse reads it back)."""
    return problem.label()


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


def torch_devices() -> list[str]:
    """Where ATen runs here: the CPU, and the accelerator torch finds (a GPU) if any."""
    torch = import_torch()
    accelerator = torch.accelerator.current_accelerator()
    return ["cpu"] + ([accelerator.type] if accelerator is not None else [])


def _mask_length(op) -> int:
    return sum(1 for p in op.api.tensors(OUTPUT) if p.mask_bit is not None)


def _value(op, param, problem, args: dict):
    """The argument of one aclnn parameter: a tensor by kernel name (one the kernel never
    reads, Param.validated_only, by its aclnn name: None unless ``args`` has it), an
    attribute read from the problem (its fields carry the aclnn attribute names), every
    output asked for."""
    if param.role in (INPUT, OUTPUT):
        return args.get(param.kernel or param.name)
    if param.role == ATTR:
        return getattr(problem, param.name)
    return [True] * _mask_length(op)


def opgen_call(op_name: str, problem, args: dict):
    """A closure running opgen's Pythonic API (``opgen.<op>``) on ``args`` (numpy arrays or
    torch tensors by kernel name); it returns the outputs by kernel name."""
    import opgen

    op = get_op(op_name)
    function = getattr(opgen, op.name)
    derived = op.api.pythonic.derived
    positional = [_value(op, p, problem, args) for p in op.api.params
                  if p.role in (INPUT, ATTR, MASK) and p.name not in derived]

    def run():
        return dict(zip(op.outputs, function(*positional)))
    return run


def aten_call(op_name: str, problem, tensors: dict):
    """The op's hand-written library peer (``Peer.compare``) on torch ``tensors``."""
    op = get_op(op_name)
    (peer,) = [p for p in op.peers if p.compare]
    return peer.make(problem, tensors)


def output_buffers(op_name: str, tag: str, problem, like: str = "numpy", device: str = "cpu") -> dict:
    """Preallocated outputs by kernel name, as an aclnn user makes them (np.empty or
    torch.empty): the two-phase API writes into the caller's outputs."""
    op = get_op(op_name)
    combo = op.combo(tag)
    shapes = op.output_shapes(problem)
    if like == "numpy":
        return {name: np.empty(shape, numpy_dtype(combo[name])) for name, shape in shapes.items()}
    torch = import_torch()
    return {name: torch.empty(shape, dtype=getattr(torch, combo[name]), device=device)
            for name, shape in shapes.items()}


def on_target(run, target: str | None):
    """``run`` with opgen's calls made on ``target`` (None: as configured)."""
    if target is None:
        return run
    from opgen import config

    def targeted():
        with config.using_target(target):
            return run()
    return targeted


def aclnn_call(op_name: str, problem, args: dict, phase1_only: bool = False):
    """A closure making one complete two-phase aclnn call on ``args`` (inputs and
    preallocated outputs by kernel name, numpy arrays or torch tensors): GetWorkspaceSize,
    aclrtMalloc of the workspace, the run, aclrtFree, as the seed examples do.
    ``phase1_only``: GetWorkspaceSize alone (the executor is dropped unrun), to split the
    per-call cost. ``on_target`` runs it on another target."""
    from opgen import acl, aclnn

    op = get_op(op_name)
    get = getattr(aclnn, f"{op.aclnn_name}GetWorkspaceSize")
    run = getattr(aclnn, op.aclnn_name)
    params = tuple(_value(op, p, problem, args) for p in op.api.params)

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
