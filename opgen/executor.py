"""Plans and executors: what GetWorkspaceSize hands out and the second phase runs.

A plan decides, per kernel parameter (in the kernel's parameter order), where the kernel
reads or writes it:
  * direct:  the caller's memory, zero-copy, at any element-aligned address: a C-contiguous
             view in the kernel's shape that no output overlaps an input of;
  * a slot:  a 64-byte aligned slice of the caller's workspace: a staged copy of a tensor
             the kernel cannot read in place (strided, overlapping, not element-aligned;
             inputs copied in, outputs copied back), the fill of a null optional input
             (GroupNorm's gamma), of an input the call leaves unread (ApiSpec.unread:
             BatchNorm's unused statistics) or of a kernel input an attribute gives
             (ApiSpec.attribute_inputs: DeepNorm's alpha) — for a host TVM-FFI kernel a
             small fill is instead a tensor the plan owns, made once —, scratch for an
             output not asked for (its mask bit or flag false: computed, never written to
             the caller), or the kernel's own scratch: the partial sums
             its passes hand to each other. Scratch of a host kernel that fits in
             ARENA_BYTES sits in opgen's per-thread arena instead (see _Arena), so tiny
             calls need no workspace;
  * empty:   a zero-element tensor (nothing to stage; the kernel still runs so that the
             other outputs get the math's zeros).
An input parameter without a kernel tensor (Param.validated_only) gets no placement.
On a target whose device is not the host, every tensor goes through a slot: the workspace
is device memory there (aclrtMalloc on that device) and slots are TVM views of it.

A ``Plan`` holds only decisions, never the caller's arrays, and is immutable: it depends
on nothing but the call's metadata (see opgen.aclnn's plan cache), so one plan serves
every call with the same shapes, strides, dtypes, mask, nulls and aliasing. The arrays of
one call are bound to it in an ``Executor``.

Executors are single-use (aclnn's default): the first run marks it used, under a lock.
A run of a plan that only hands memory to a TVM-FFI kernel (no staging, no fill) goes
through a binder generated for the plan and the call's argument kinds (opgen.launch);
other runs walk the placements.
"""
from __future__ import annotations

import functools
import math
import threading
from dataclasses import dataclass

import numpy as np
import tvm
import tvm_ffi

from opgen import acl, launch
from opgen.apispec import ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_RUNTIME_ERROR, INT64_MAX, ArgError
from opgen.dtypes import numpy_dtype
from opgen.binding import NotReadable
from opgen.memory import ALIGNMENT, host_tensor, is_host, tensor_view
from opgen.tensorarg import describe, overlaps_itself

DIRECT, EMPTY, STAGE_IN, STAGE_OUT, FILL, SCRATCH = "direct", "empty", "in", "out", "fill", "scratch"
SLOT_KINDS = (STAGE_IN, STAGE_OUT, FILL, SCRATCH)


def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def _bytes(shape, dtype: str) -> int:
    """Bytes of a C-contiguous tensor of ``shape`` and ``dtype`` (exact: numpy's int64
    product would wrap silently for shapes no memory holds)."""
    return _count(shape) * numpy_dtype(dtype).itemsize


def _count(shape) -> int:
    """Elements of ``shape``, as an exact Python int."""
    return math.prod(int(d) for d in shape)


@dataclass(frozen=True)
class Placement:
    """Where one kernel parameter lives during the run."""

    kernel: str                  # the kernel's tensor (or scratch buffer) name
    kind: str                    # DIRECT, EMPTY or one of SLOT_KINDS
    shape: tuple                 # the kernel's shape of it
    dtype: str
    param: str | None = None     # the aclnn parameter it comes from (DIRECT, STAGE_IN, STAGE_OUT)
    index: int | None = None     # that parameter's position in GetWorkspaceSize's arguments
    offset: int = 0              # slots: bytes from the aligned start of the workspace
    nbytes: int = 0
    fill: float = 0.0
    reshape: bool = False        # DIRECT: the caller's view differs from the kernel's (shape or dtype)
    in_arena: bool = False       # SCRATCH: in this thread's arena (offset from its aligned start)
    constant: bool = False       # FILL: a host tensor the plan owns, made once (see _Planner.put)
    axes: tuple | None = None    # STAGE_IN/OUT: the caller's axes in the kernel's order (ApiSpec.kernel_axes)

    @property
    def is_slot(self) -> bool:
        return self.kind in SLOT_KINDS and not self.constant

    @functools.cached_property
    def constant_tensor(self):
        """The filled tensor of a constant FILL: made on first use, then shared by every call
        of the plan on every thread (kernels never write their inputs)."""
        return host_tensor(np.full(self.shape, self.fill, numpy_dtype(self.dtype)))

    @functools.cached_property
    def tvm_shape(self):
        return tvm_ffi.Shape(self.shape)

    @functools.cached_property
    def tvm_dtype(self):
        return tvm.DataType(self.dtype)

    @functools.cached_property
    def extent(self) -> int:
        """Bytes of the kernel's tensor (C-contiguous)."""
        return _bytes(self.shape, self.dtype)


def converts_arrays(kernel) -> bool:
    """Whether the kernel is a TVM-FFI function, which converts the caller's numpy arrays
    and torch tensors itself (0.15 µs each, no Python object) and takes scratch from the
    host arena; a target's own module (AscendC through ctypes, OpenCL) is handed TVM
    tensors and its scratch lives in the caller's workspace."""
    return isinstance(kernel.function, tvm_ffi.Function)


@dataclass(frozen=True)
class Plan:
    """Every kernel parameter placed, in parameter order; the workspace it needs."""

    kernel: object
    device: object
    host: bool                   # the device is the host: numpy views, zero-copy
    placements: tuple
    used_bytes: int
    by_alignment: bool = False   # the kernel was chosen by its tensors' alignment (opgen.aclnn's plan key)

    @property
    def workspace_size(self) -> int:
        """Slot bytes plus ALIGNMENT of slack so any caller buffer can be aligned."""
        return self.used_bytes + ALIGNMENT if self.used_bytes else 0

    @functools.cached_property
    def converts_arrays(self) -> bool:
        return converts_arrays(self.kernel)

    @functools.cached_property
    def binds_directly(self) -> bool:
        """Whether a run only hands memory to the kernel (no staging, no fill, no workspace):
        then a generated binder (opgen.launch) builds the kernel's arguments."""
        return self.converts_arrays and all(p.kind in (DIRECT, EMPTY) or p.in_arena or p.constant
                                            for p in self.placements)

    @property
    def slots(self) -> tuple:
        return tuple(p for p in self.placements if p.is_slot)


class _Planner:
    """Accumulates placements and the workspace (and arena) offsets while a plan is made."""

    def __init__(self, arena: bool):
        self.placed: dict[str, Placement] = {}
        self.used = 0
        self.arena_used = 0 if arena else None   # None: this plan keeps all scratch in the workspace

    def put(self, kernel, kind, shape, dtype, param=None, index=None, fill=0.0, reshape=False, axes=None) -> None:
        shape = tuple(int(d) for d in shape)
        if kind not in SLOT_KINDS:
            self.placed[kernel] = Placement(kernel, kind, shape, dtype, param, index, reshape=reshape)
            return
        nbytes = _bytes(shape, dtype)
        if kind == FILL and self.arena_used is not None and nbytes <= ARENA_BYTES:
            # a host TVM-FFI kernel reads a fill (a null optional input's constant, an
            # attribute's value) from a tensor the plan owns: the value is part of the plan's
            # key, so the call needs no workspace for it and keeps the binder's fast path
            self.placed[kernel] = Placement(kernel, kind, shape, dtype, param, index, fill=fill, constant=True)
            return
        if kind == SCRATCH and self.arena_used is not None and self.arena_used + _align(nbytes) <= ARENA_BYTES:
            self.placed[kernel] = Placement(kernel, kind, shape, dtype, param, index, self.arena_used, nbytes,
                                            fill, in_arena=True)
            self.arena_used += _align(nbytes)
            return
        self.placed[kernel] = Placement(kernel, kind, shape, dtype, param, index, self.used, nbytes, fill,
                                        axes=axes)
        self.used += _align(nbytes)


def readable_in_place(arg, shape) -> bool:
    """Whether the kernel can use the caller's memory as it is: a C-contiguous DLPack view,
    element-aligned (the kernels promise LLVM no more than element alignment)."""
    return (arg.tensor is not None and arg.tensor.is_contiguous() and arg.key[-1]
            and arg.tensor.device.dlpack_device_type() == 1
            and _count(shape) == arg.size)


def kernel_alignments(call, shapes: dict, host: bool, aliased) -> dict:
    """Kernel tensor name -> the alignment (a power of two, at most ALIGNMENT) of the address
    the kernel will be handed, decided as ``make_plan`` places the tensors: the caller's
    address for a tensor read in place, a workspace slot's ALIGNMENT otherwise (staged,
    filled, scratch or empty). What the schedule rules' ``knobs_for_call`` choose a vector
    variant by (opgen.schedules)."""
    found = {}
    for p in call.api.tensors():
        if p.kernel is None:
            continue
        arg = call[p.name]
        direct = (arg is not None and host and readable_in_place(arg, shapes[p.kernel])
                  and not (p.role == "output" and p.name in aliased))
        address = arg.bounds[0] if direct else 0
        found[p.kernel] = min(ALIGNMENT, address & -address) if address else ALIGNMENT
    return found


def make_plan(call, kernel, problem, combo, device, aliased) -> Plan:
    """Place every kernel tensor: direct, in a workspace slot, or empty.

    ``aliased`` names the outputs whose memory overlaps an input's (they are staged so the
    kernel never reads what it already wrote).
    """
    api = call.api
    shapes = api.kernel_shapes(problem)
    permuted = api.kernel_axes(problem) if api.kernel_axes is not None else {}
    host = is_host(device)
    planner = _Planner(arena=host and converts_arrays(kernel))
    position = {p.name: i for i, p in enumerate(api.params)}
    for p in api.tensors():
        if p.kernel is None or not combo.has(p.kernel):   # validated_only, or absent from this variant
            continue
        shape, dtype, arg = shapes[p.kernel], combo[p.kernel], call[p.name]
        output = p.role == "output"
        if _count(shape) == 0:
            planner.put(p.kernel, EMPTY, shape, dtype)
        elif not output and not call.reads(p):   # null, or left unread by this call (ApiSpec.unread)
            planner.put(p.kernel, FILL, shape, dtype, fill=api.fill[p.kernel])
        elif output and not call.wanted(p):
            planner.put(p.kernel, SCRATCH, shape, dtype)
        elif (host and p.kernel not in permuted and readable_in_place(arg, shape)
              and not (output and p.name in aliased)):
            reshape = tuple(arg.shape) != tuple(int(d) for d in shape) or arg.storage_only
            planner.put(p.kernel, DIRECT, shape, dtype, p.name, position[p.name], reshape=reshape)
        else:
            arg.host   # staging goes through host memory: a tensor the host cannot read fails here, in phase one
            planner.put(p.kernel, STAGE_OUT if output else STAGE_IN, shape, dtype, p.name, position[p.name],
                        axes=permuted.get(p.kernel))
    for name, value in api.attribute_inputs.items():    # an attribute the kernel reads as data
        planner.put(name, FILL, shapes[name], combo[name], fill=float(value(call)))
    scratch_shapes = kernel.scratch_shapes(shapes)
    for buf in kernel.scratch:
        shape = scratch_shapes[buf.name]
        empty = _count(shape) == 0
        planner.put(buf.name, EMPTY if empty else SCRATCH, shape, buf.dtype)
    placements = tuple(planner.placed[name] for name in kernel.tensor_names)
    plan = Plan(kernel, device, host, placements, planner.used)
    if plan.workspace_size > INT64_MAX:
        raise ArgError(ACLNN_ERR_PARAM_INVALID, f"the call needs a workspace of {plan.workspace_size} bytes, past "
                                                f"any address space (at most 2**63 - 1): its staged tensors are too "
                                                f"large")
    return plan


def _workspace_bytes(workspace, need: int):
    """(uint8 numpy view or None, TVM uint8 tensor or None, aligned start) of the workspace.

    aclrtMalloc's buffers come with their TVM tensor (made once at allocation); other
    buffers get one here (its data pointer is also the cheapest way to the address).
    """
    if isinstance(workspace, acl.DeviceBuffer):
        if workspace.freed:
            raise ArgError(ACLNN_ERR_PARAM_INVALID, "workspace was freed with aclrtFree")
        if workspace.host is None:
            return None, workspace.tensor, 0
        data, tensor = workspace.host, workspace.tensor
    else:
        try:
            data = acl._host_bytes(workspace, "workspace", writable=True)
        except (TypeError, ValueError) as exc:
            raise ArgError(ACLNN_ERR_PARAM_INVALID, f"workspace is not a writable buffer ({exc})")
        tensor = tvm_ffi.from_dlpack(data)
    start = (-tensor.data_ptr()) % ALIGNMENT
    if data.size - start < need - ALIGNMENT:
        raise ArgError(ACLNN_ERR_PARAM_INVALID, f"workspace holds {data.size} bytes ({data.size - start} after "
                                                f"64-byte alignment); the executor needs {need}")
    return data, tensor, start


# Scratch of a host kernel (partial sums between its passes, outputs the mask turned
# off) that fits in ARENA_BYTES lives in a per-thread arena that opgen holds, not in the
# caller's workspace: such a call needs no workspace at all, and the caller skips
# aclrtMalloc/aclrtFree. Measured on 2 cores: 3-5 µs of a warm 20 µs tiny call; 50-60 µs
# of a GroupNorm (2,1280,16x16) call right after another library's op evicted the caches
# (its 20 KiB of partial sums). 4 MiB covers GroupNorm up to N*C = 512K and the row
# kernels' partials up to 1M floats (4096 columns x 256 chunks of rows): at 256 KiB,
# LayerNormBackward (8,512,1024)'s 512 KiB of partials went to a fresh workspace each call
# and its plan missed the binder, 145 µs over its 1.0 ms kernel through opgen's Python API,
# warm (pages of a fresh buffer faulted in); in the arena 40 µs. The pages are mapped
# lazily (np.zeros), so a thread holds only what its largest call touched. The arena is used
# only during a run, which is synchronous and never re-entered on one thread; views of it
# are made once per placement and thread. Staged copies of the caller's tensors, and
# everything of device kernels and of targets whose modules take their own workspace
# (ascend-emu's GM workspace), stay in the workspace, as CANN's ops ask for theirs.
ARENA_BYTES = 4 << 20
_MAX_ARENA_VIEWS = 4096


class _Arena(threading.local):
    base = None        # a TVM uint8 tensor of ARENA_BYTES + ALIGNMENT host bytes, made on first use
    start = 0
    views: dict = None

    def tensor(self, place: Placement):
        """The TVM view of ``place`` in this thread's arena."""
        views = self.views
        if views is None:
            self.views = views = {}
            self.base = tvm_ffi.from_dlpack(np.zeros(ARENA_BYTES + ALIGNMENT, np.uint8))
            self.start = (-self.base.data_ptr()) % ALIGNMENT
        known = views.get(id(place))
        if known is not None and known[0] is place:
            return known[1]
        if len(views) >= _MAX_ARENA_VIEWS:
            views.clear()
        view = tensor_view(self.base, place.tvm_shape, place.tvm_dtype, self.start + place.offset)
        views[id(place)] = (place, view)
        return view


_ARENA = _Arena()


class Workspace:
    """The caller's workspace, checked once, and the slots' tensors over it.

    On the host every slot is a view of the workspace's TVM tensor at its aligned offset;
    on a device, a view of the device buffer. Building one raises ArgError for a bad
    workspace, before the executor is claimed, so the caller may retry with a proper one.
    """

    def __init__(self, workspace, plan: Plan):
        self.bytes, self.base, self.start = _workspace_bytes(workspace, plan.workspace_size)
        self.device = plan.device
        self.on_host = plan.host

    def array(self, slot: Placement) -> np.ndarray:
        """The slot as a numpy array (host workspaces only)."""
        begin = self.start + slot.offset
        return self.bytes[begin:begin + slot.nbytes].view(numpy_dtype(slot.dtype)).reshape(slot.shape)

    def tensor(self, slot: Placement):
        """The TVM tensor the kernel gets for ``slot``."""
        if self.on_host:
            return tensor_view(self.base, slot.tvm_shape, slot.tvm_dtype, self.start + slot.offset)
        if self.bytes is not None:   # host bytes for a device kernel: the slot is copied over
            return tvm.runtime.tensor(self.array(slot), self.device)
        return self.base._create_view(slot.shape, slot.dtype, slot.offset)

    def stage_in(self, slot: Placement, source, tensor) -> None:
        """Fill ``slot`` with the caller's input (a numpy view; None for a FILL slot)."""
        data = np.full(slot.shape, slot.fill, numpy_dtype(slot.dtype)) if slot.kind == FILL else source
        if slot.axes is not None:       # the caller's layout is a transpose of the kernel's
            data = np.transpose(data, slot.axes)
        if self.on_host:
            np.copyto(self.array(slot).reshape(data.shape), data)
        else:
            tensor.copyfrom(np.ascontiguousarray(data).reshape(slot.shape))

    def stage_out(self, slot: Placement, target: np.ndarray, tensor) -> None:
        """Copy ``slot``'s result to the caller's output (a numpy view)."""
        result = self.array(slot) if self.on_host else tensor.numpy()
        if slot.axes is not None:       # written through the transposed view of the caller's tensor
            target = np.transpose(target, slot.axes)
        np.copyto(target, result.reshape(target.shape))


class Executor:
    """aclOpExecutor: one planned call of one op, bound to that call's arguments, runnable once.

    ``arguments`` are GetWorkspaceSize's arguments as the caller passed them and
    ``kinds`` their opgen.binding kinds (None for non-tensors and null pointers): a
    directly placed tensor goes to the kernel through its kind, a staged one through a
    numpy view made when (and only when) the plan stages it.
    """

    def __init__(self, op_name: str, plan: Plan, kinds: tuple, arguments: tuple):
        self.op_name = op_name
        self.plan = plan
        self.kinds = kinds
        self.arguments = arguments
        self._unused = threading.Lock()   # acquired once, never released: the single use

    @property
    def workspace_size(self) -> int:
        return self.plan.workspace_size

    def open_workspace(self, workspace) -> Workspace | None:
        """The checked workspace (None when the plan needs none); ArgError if unusable."""
        return Workspace(workspace, self.plan) if self.plan.used_bytes else None

    def claim(self) -> bool:
        """Mark used; False if it already was (single use; atomic across threads)."""
        return self._unused.acquire(False)

    def host(self, place: Placement) -> np.ndarray:
        """The caller's tensor of a staged placement as a numpy view (zero-copy), checked
        again: a torch tensor may have been resized, re-pointed (set_, ``.data =``) or had
        its storage freed since phase one. A view that no longer holds the planned dtype
        and element count (any layout serves a staged tensor) is 161002, like a directly
        placed tensor that changed (_direct); never a numpy error past the API."""
        try:
            view = describe(place.param, self.arguments[place.index]).host
        except ArgError as err:
            raise ArgError(ACLNN_ERR_PARAM_INVALID, f"{_CHANGED.format(place.param)} ({err.message})")
        if view.dtype != numpy_dtype(place.dtype) or view.size != _count(place.shape):
            raise ArgError(ACLNN_ERR_PARAM_INVALID, _CHANGED.format(place.param))
        if place.kind == STAGE_OUT and overlaps_itself(view.shape, view.strides, view.itemsize):
            raise ArgError(ACLNN_ERR_PARAM_INVALID, f"{_CHANGED.format(place.param)}: its elements now overlap")
        return view

    def run(self, memory: Workspace | None, keys_just_read: bool = False) -> None:
        """Stage, run the kernel, copy back. ArgError if the kernel fails.

        ``keys_just_read``: the caller read every tensor argument's binding key in this
        call and it is the plan's (a bound call): addresses are taken unchecked where the
        kind allows (ArgKind.pointer_method)."""
        plan = self.plan
        if plan.binds_directly:
            try:
                recipes = _recipes_of_read_keys if keys_just_read else _recipes
                kernel_args = launch.binders.get(plan, self.kinds, recipes)(self.arguments)
            except NotReadable:
                raise self._changed_argument()
            self._call(kernel_args)
            return
        kernel_args, staged = [], []
        for place in plan.placements:
            kind = place.kind
            if kind == DIRECT:
                kernel_args.append(self._direct(place))
                continue
            if kind == EMPTY:
                kernel_args.append(tvm.runtime.empty(place.shape, place.dtype, plan.device))
                continue
            if place.in_arena:
                kernel_args.append(_ARENA.tensor(place))
                continue
            if place.constant:
                kernel_args.append(place.constant_tensor)
                continue
            tensor = memory.tensor(place)
            if kind == STAGE_IN:
                memory.stage_in(place, self.host(place), tensor)
            elif kind == FILL:
                memory.stage_in(place, None, tensor)
            elif kind == STAGE_OUT:   # its target checked now: a changed output fails before the kernel runs
                staged.append((place, tensor, self.host(place)))
            kernel_args.append(tensor)
        if not plan.converts_arrays:
            kernel_args = [a if isinstance(a, tvm_ffi.Tensor) else tvm_ffi.from_dlpack(a) for a in kernel_args]
        self._call(kernel_args)
        for place, tensor, target in staged:
            memory.stage_out(place, target, tensor)

    def _call(self, kernel_args) -> None:
        try:
            self.plan.kernel.function(*kernel_args)
        except Exception as exc:
            raise ArgError(ACLNN_ERR_RUNTIME_ERROR, f"the {self.plan.kernel.symbol} kernel failed ({exc})")

    def _direct(self, place: Placement, check: bool = False):
        """What the kernel gets for the caller's tensor of a DIRECT placement, from its kind
        (the array itself, a reshape, a view); with ``check``, the kind's run-time check
        of an address it gives is made too. ArgError names a tensor that is no longer
        what phase one read."""
        kind, value = self.kinds[place.index], self.arguments[place.index]
        try:
            if check and kind.prefers_address(place):
                kind.address(value, place)
            return kind.for_kernel(value, place)
        except NotReadable:
            raise ArgError(ACLNN_ERR_PARAM_INVALID, _CHANGED.format(place.param))

    def _changed_argument(self) -> ArgError:
        """The error for a binder that met an argument no longer as phase one read it."""
        for place in self.plan.placements:
            if place.kind == DIRECT:
                try:
                    self._direct(place, check=True)
                except ArgError as err:
                    return err
        return ArgError(ACLNN_ERR_PARAM_INVALID, "an argument was changed after GetWorkspaceSize")


_CHANGED = "{} was changed or destroyed, or its memory freed, after GetWorkspaceSize"


def _recipes(plan: Plan, kinds: tuple, keys_just_read: bool = False) -> list:
    """How a binder (opgen.launch) gets each kernel parameter of ``plan`` on this thread."""
    recipes = []
    for place in plan.placements:
        if place.kind == DIRECT:
            kind = kinds[place.index]
            if kind.prefers_address(place) and keys_just_read and plan.host and kind.pointer_method:
                recipes.append((launch.POINTER, place.index, kind.pointer_method, place))
            elif kind.prefers_address(place):
                recipes.append((launch.ADDRESS, place.index, kind.address, place))
            else:
                recipes.append((launch.OBJECT, place.index, kind.for_kernel, place))
        elif place.kind == EMPTY:
            recipes.append((launch.CONSTANT, tvm.runtime.empty(place.shape, place.dtype, plan.device)))
        elif place.constant:
            recipes.append((launch.CONSTANT, place.constant_tensor))
        else:
            recipes.append((launch.CONSTANT, _ARENA.tensor(place)))
    return recipes


def _recipes_of_read_keys(plan: Plan, kinds: tuple) -> list:
    """_recipes for a call whose tensors' keys were just read (Executor.run)."""
    return _recipes(plan, kinds, keys_just_read=True)
