"""One view of every kind of tensor argument the aclnn layer accepts, read in full.

This is the reading the documented checks and the planner work on: a call whose plan is
not cached yet, or whose arguments opgen.binding cannot read cheaply. (A cached call never
builds these; opgen.binding reads the same properties from attributes.)

aclTensors from ``opgen.acl``, numpy arrays (any strides, any alignment) and DLPack
exporters (torch tensors, bf16 included) all become a ``TensorArg``: shape, dtype name,
format, and two zero-copy views of the caller's memory in the caller's shape:
  * ``tensor``: a TVM tensor made by one DLPack conversion (the planner reads its
    contiguity and device; ml_dtypes' bfloat16, which numpy cannot export, crosses as
    uint16 storage), or None when DLPack cannot describe the memory;
  * ``host``: a numpy view (for staging copies and for outputs written in place), made
    only when needed: for torch it costs more than everything else a call does.
A problem with the argument itself is an ``ArgError`` that the aclnn layer turns into a
status code; nothing here raises anything else for bad input.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import tvm_ffi

from opgen import acl
from opgen.apispec import ACLNN_ERR_PARAM_INVALID, ArgError
from opgen.dtypes import dtype_name

_UINT16 = np.dtype(np.uint16)
_BF16 = np.dtype(ml_dtypes.bfloat16)
_HOST = 1   # DLPack's kDLCPU


class TensorArg:
    """A tensor argument: metadata, a TVM view (``tensor``) and a numpy view (``host``).

    ``key`` holds everything about the argument that can decide a call's outcome or plan
    (dtype, shape, layout, format, writability, element alignment; never the data) and
    ``bounds`` the byte range it may touch; both are computed once, here, because every
    call needs them (see opgen.aclnn's plan cache).
    """

    __slots__ = ("name", "shape", "dtype", "itemsize", "format", "tensor", "writeable", "storage_only",
                 "key", "_bounds", "_host", "_make_host")

    def __init__(self, name, shape, dtype, itemsize, fmt, tensor, layout, address, nbytes, contiguous,
                 host=None, make_host=None, writeable=True, storage_only=False):
        self.name, self.shape, self.dtype, self.itemsize, self.format = name, shape, dtype, itemsize, fmt
        self.tensor = tensor              # tvm_ffi Tensor over the caller's memory, or None
        self.writeable = writeable
        self.storage_only = storage_only  # the tensor's dtype is only the storage (bf16 as uint16)
        self.key = (dtype, shape, layout, fmt, writeable, address % itemsize == 0)
        self._bounds = (address, address + nbytes) if contiguous or not nbytes else None
        self._host, self._make_host = host, make_host

    @property
    def host(self) -> np.ndarray:
        """The caller's elements as a numpy array in the caller's shape, zero-copy."""
        if self._host is None:
            self._host = self._make_host()
        return self._host

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return _count(self.shape)

    @property
    def bounds(self) -> tuple[int, int]:
        """[first, last) byte addresses the tensor may touch (numpy's may_share_memory rule)."""
        if self._bounds is None:
            self._bounds = np.lib.array_utils.byte_bounds(self.host)
        return self._bounds


def _count(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _dlpack_view(array: np.ndarray):
    """A TVM tensor over a numpy array's memory, or None if DLPack cannot describe it."""
    try:
        if array.dtype is _BF16:
            return tvm_ffi.from_dlpack(array.view(_UINT16))
        return tvm_ffi.from_dlpack(array)
    except Exception:  # odd strides, unsupported dtype: the host view still serves
        return None


def _from_numpy(name: str, array: np.ndarray, fmt: str = "ND", dtype: str | None = None) -> TensorArg:
    dt, flags = array.dtype, array.flags
    tensor = _dlpack_view(array)
    address = tensor.data_ptr() if tensor is not None else array.ctypes.data
    return TensorArg(name, array.shape, dtype or dtype_name(dt) or str(dt), dt.itemsize, fmt, tensor,
                     array.strides, address, array.nbytes, flags.c_contiguous, array, None, flags.writeable,
                     dt is _BF16)


def _from_acl(name: str, t: acl.aclTensor) -> TensorArg:
    if t.destroyed:
        raise ArgError(ACLNN_ERR_PARAM_INVALID, f"{name} is an aclTensor that was already destroyed")
    if t.buffer is not None and (t.buffer.freed or t.buffer.host is None) and 0 not in t.shape:
        where = "freed memory" if t.buffer.freed else "memory of a device the host cannot address"
        raise ArgError(ACLNN_ERR_PARAM_INVALID, f"{name} points to {where}")
    return _from_numpy(name, t.host_view(), t.format_name, t.dtype)


def _torch_host(obj):
    """torch's bfloat16 cannot cross into numpy through DLPack: reinterpret as int16."""
    import torch

    if obj.dtype == torch.bfloat16:
        return np.from_dlpack(obj.view(torch.int16)).view(ml_dtypes.bfloat16)
    return np.from_dlpack(obj)


def _from_dlpack(name: str, obj) -> TensorArg:
    if hasattr(obj, "detach"):
        obj = obj.detach()  # torch refuses to export a tensor that requires grad
    try:
        tensor = tvm_ffi.from_dlpack(obj)
    except Exception as exc:  # foreign device, unsupported dtype: the producer decides
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__   # not torch's C++ trace
        raise ArgError(ACLNN_ERR_PARAM_INVALID, f"{name} cannot be read through DLPack on the host ({reason})")
    dtype = str(tensor.dtype)
    itemsize = (tensor.dtype.bits * tensor.dtype.lanes + 7) // 8
    shape, strides = tuple(tensor.shape), tuple(tensor.strides)

    def make_host():
        if tensor.device.dlpack_device_type() != _HOST:
            raise ArgError(ACLNN_ERR_PARAM_INVALID, f"{name} lives on {tensor.device}; this target reads host memory")
        return _torch_host(obj) if hasattr(obj, "detach") else np.from_dlpack(obj)

    return TensorArg(name, shape, dtype, itemsize, "ND", tensor, ("elements",) + strides, tensor.data_ptr(),
                     itemsize * _count(shape), tensor.is_contiguous(), make_host=make_host)


def describe(name: str, obj) -> TensorArg | None:
    """The TensorArg of parameter ``name`` (None for a null pointer)."""
    if obj is None:
        return None
    if isinstance(obj, np.ndarray):
        return _from_numpy(name, obj)
    if isinstance(obj, acl.aclTensor):
        return _from_acl(name, obj)
    if hasattr(obj, "__dlpack__"):
        return _from_dlpack(name, obj)
    raise ArgError(ACLNN_ERR_PARAM_INVALID, f"{name} must be an aclTensor, a numpy array, a DLPack tensor "
                                            f"or None, got {type(obj).__name__}")
