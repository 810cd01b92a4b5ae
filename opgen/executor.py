"""Plans and executors: what GetWorkspaceSize hands out and the second phase runs.

A plan decides, per kernel tensor, where the kernel reads or writes it:
  * direct:  the caller's memory, zero-copy (a contiguous, 64-byte aligned numpy view in
             the kernel's shape that no output overlaps an input of);
  * a slot:  a 64-byte aligned slice of the caller's workspace: a staged copy of a strided,
             misaligned or overlapping tensor (inputs copied in, outputs copied back), the
             fill of a null optional input (GroupNorm's gamma), or scratch for an output
             the mask turned off (computed, never written to the caller), or the kernel's
             own scratch: the partial sums its passes hand to each other;
  * empty:   a zero-element tensor (nothing to stage; the kernel still runs so that the
             other outputs get the math's zeros).
On a target whose device is not the host, every tensor goes through a slot: the workspace
is device memory there (aclrtMalloc on that device) and slots are TVM views of it.
The partial sums of split reductions are kernel parameters (opgen.kernels hoists every
buffer shared by two loop nests), so they live in the workspace too; per-row scalars stay
inside the kernel, in registers.

Executors are single-use (aclnn's default): the first run marks it used, under a lock.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np
import tvm

from opgen import acl
from opgen.apispec import ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_RUNTIME_ERROR, ArgError
from opgen.dtypes import numpy_dtype
from opgen.kernels import ALIGNMENT, is_host, to_tvm



def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


@dataclass
class Slot:
    kernel: str
    shape: tuple
    dtype: str
    offset: int                  # bytes from the aligned start of the workspace
    nbytes: int
    kind: str                    # "in", "out", "fill", "scratch"
    source: object = None        # the caller's TensorArg for "in" / "out"
    fill: float = 0.0


@dataclass
class Plan:
    kernel: object
    device: object
    direct: dict = field(default_factory=dict)      # kernel name -> numpy view
    empty: dict = field(default_factory=dict)       # kernel name -> (shape, dtype)
    slots: list = field(default_factory=list)
    used_bytes: int = 0

    @property
    def workspace_size(self) -> int:
        """Slot bytes plus ALIGNMENT of slack so any caller buffer can be aligned."""
        return self.used_bytes + ALIGNMENT if self.used_bytes else 0

    def add_slot(self, kernel, shape, dtype, kind, source=None, fill=0.0) -> None:
        nbytes = int(np.prod(shape, dtype=np.int64)) * numpy_dtype(dtype).itemsize
        self.slots.append(Slot(kernel, tuple(shape), dtype, self.used_bytes, nbytes, kind, source, fill))
        self.used_bytes += _align(nbytes)


def direct_view(arg, shape, output: bool, inputs) -> np.ndarray | None:
    """The caller's memory in the kernel's shape, if the kernel can use it as it is."""
    try:
        view = np.reshape(arg.host, shape, copy=False)
    except ValueError:
        return None
    if not view.flags.c_contiguous:
        return None
    if output and (not view.flags.writeable or any(np.may_share_memory(view, i.host) for i in inputs)):
        return None
    return view


def make_plan(call, kernel, problem, combo, device) -> Plan:
    """Place every kernel tensor: direct, in a workspace slot, or empty."""
    api = call.api
    shapes = api.kernel_shapes(problem)
    plan = Plan(kernel, device)
    inputs = [call[p.name] for p in api.tensors("input") if call[p.name] is not None]
    for p in api.tensors():
        shape, dtype, arg = shapes[p.kernel], combo[p.kernel], call[p.name]
        output = p.role == "output"
        if int(np.prod(shape, dtype=np.int64)) == 0:
            plan.empty[p.kernel] = (shape, dtype)
        elif arg is None and not output:
            plan.add_slot(p.kernel, shape, dtype, "fill", fill=api.fill[p.kernel])
        elif output and not call.wanted(p):
            plan.add_slot(p.kernel, shape, dtype, "scratch")
        else:
            view = direct_view(arg, shape, output, inputs) if is_host(device) else None
            if view is not None:
                plan.direct[p.kernel] = view
            else:
                plan.add_slot(p.kernel, shape, dtype, "out" if output else "in", source=arg)
    add_kernel_scratch(plan, kernel, shapes)
    return plan


def add_kernel_scratch(plan: Plan, kernel, shapes: dict) -> None:
    """Workspace slots for the kernel's own scratch (partial sums carried between passes)."""
    scratch_shapes = kernel.scratch_shapes(shapes)
    for buf in kernel.scratch:
        shape = scratch_shapes[buf.name]
        if int(np.prod(shape, dtype=np.int64)) == 0:
            plan.empty[buf.name] = (shape, buf.dtype)
        else:
            plan.add_slot(buf.name, shape, buf.dtype, "scratch")


def _workspace_bytes(workspace, need: int):
    """(uint8 numpy view or None, device tensor or None, aligned start) of the workspace."""
    if isinstance(workspace, acl.DeviceBuffer):
        if workspace.freed:
            raise ArgError(ACLNN_ERR_PARAM_INVALID, "workspace was freed with aclrtFree")
        if workspace.host is None:
            return None, workspace.tensor, 0
        data = workspace.host
    else:
        try:
            data = acl._host_bytes(workspace, "workspace", writable=True)
        except (TypeError, ValueError) as exc:
            raise ArgError(ACLNN_ERR_PARAM_INVALID, f"workspace is not a writable buffer ({exc})")
    start = (-data.ctypes.data) % ALIGNMENT
    if data.size - start < need - ALIGNMENT:
        raise ArgError(ACLNN_ERR_PARAM_INVALID, f"workspace holds {data.size} bytes ({data.size - start} after "
                                                f"64-byte alignment); the executor needs {need}")
    return data, None, start


def check_workspace(workspace, need: int) -> None:
    """ArgError unless ``workspace`` is a usable buffer of at least ``need`` bytes."""
    _workspace_bytes(workspace, need)


class _Memory:
    """Slot views over the workspace: numpy views on the host, TVM views on a device."""

    def __init__(self, workspace, need: int, device):
        self.host, self.tensor, self.start = _workspace_bytes(workspace, need)
        self.device = device

    def view(self, slot: Slot):
        if self.host is not None:
            raw = self.host[self.start + slot.offset:self.start + slot.offset + slot.nbytes]
            arr = raw.view(numpy_dtype(slot.dtype)).reshape(slot.shape)
            tensor = to_tvm(arr, self.device)[0] if is_host(self.device) else tvm.runtime.tensor(arr, self.device)
            return arr, tensor
        return None, self.tensor._create_view(slot.shape, slot.dtype, slot.offset)

    def stage_in(self, slot: Slot, arr, tensor) -> None:
        if slot.kind == "fill":
            data = np.full(slot.shape, slot.fill, numpy_dtype(slot.dtype))
        else:
            data = slot.source.host
        if arr is not None:
            np.copyto(arr.reshape(data.shape), data)
            if not is_host(self.device):
                tensor.copyfrom(arr)
        else:
            tensor.copyfrom(np.ascontiguousarray(data).reshape(slot.shape))

    def stage_out(self, slot: Slot, arr, tensor) -> None:
        if arr is None or not is_host(self.device):
            arr = tensor.numpy()
        np.copyto(slot.source.host, arr.reshape(slot.source.shape))


class Executor:
    """aclOpExecutor: one planned call of one op, runnable once."""

    def __init__(self, op_name: str, plan: Plan):
        self.op_name = op_name
        self.plan = plan
        self._lock = threading.Lock()
        self._used = False

    @property
    def workspace_size(self) -> int:
        return self.plan.workspace_size

    def claim(self) -> bool:
        """Mark used; False if it already was (single use)."""
        with self._lock:
            used, self._used = self._used, True
        return not used

    def run(self, workspace) -> None:
        """Stage, run the kernel, copy back. ArgError for a bad workspace, other errors raise."""
        plan = self.plan
        memory = _Memory(workspace, plan.workspace_size, plan.device) if plan.slots else None
        tensors = {name: to_tvm(view, plan.device)[0] for name, view in plan.direct.items()}
        for name, (shape, dtype) in plan.empty.items():
            tensors[name] = tvm.runtime.empty(shape, dtype, plan.device)
        staged = []
        for slot in plan.slots:
            arr, tensor = memory.view(slot)
            if slot.kind in ("in", "fill"):
                memory.stage_in(slot, arr, tensor)
            elif slot.kind == "out":
                staged.append((slot, arr, tensor))
            tensors[slot.kernel] = tensor
        try:
            plan.kernel(tensors)
        except Exception as exc:
            raise ArgError(ACLNN_ERR_RUNTIME_ERROR, f"the {plan.kernel.symbol} kernel failed ({exc})")
        for slot, arr, tensor in staged:
            memory.stage_out(slot, arr, tensor)
