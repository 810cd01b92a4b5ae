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
from opgen.apispec import ACLNN_ERR_PARAM_INVALID, INT64_MAX, ArgError
from opgen.dtypes import dtype_name, numpy_dtype

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
                 "key", "byte_strides", "_bounds", "_host", "_make_host")

    def __init__(self, name, shape, dtype, itemsize, fmt, tensor, layout, address, nbytes, contiguous,
                 host=None, make_host=None, writeable=True, storage_only=False, byte_strides=None):
        self.name, self.shape, self.dtype, self.itemsize, self.format = name, shape, dtype, itemsize, fmt
        self.byte_strides = byte_strides  # bytes between neighbours along each dimension
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
    def overlaps_itself(self) -> bool:
        """Whether two of its elements share memory (see ``overlaps_itself``)."""
        return overlaps_itself(self.shape, self.byte_strides, self.itemsize)

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


def _check_byte_size(name: str, shape, itemsize: int) -> None:
    """Refuse a tensor whose bytes an int64 cannot count (161002): torch's expand() and an
    aclTensor's zero strides describe such shapes over a few bytes, but no call of a real
    aclnn function can size, stage or plan them (numpy itself refuses to view them)."""
    nbytes = _count(shape) * itemsize
    if nbytes > INT64_MAX:
        raise ArgError(ACLNN_ERR_PARAM_INVALID, f"{name} has shape {tuple(shape)}: its {nbytes} bytes overflow "
                                                f"int64 (more than any address space)")


# Past this many elements an output's layout that the sorted-strides test cannot clear is
# refused rather than enumerated (only as_strided views with interleaved strides get there).
_OVERLAP_ENUMERATION_LIMIT = 1 << 20


def overlaps_itself(shape, byte_strides, itemsize: int) -> bool:
    """Whether two elements of a strided view touch a common byte: a zero stride along a
    dimension of more than one element (torch's expand(), numpy's broadcast_to), or strides
    that fold the view onto itself (as_strided windows). Written through, such a view keeps
    only one of the values meant for a byte, so outputs like it are refused (torch refuses
    to write them too). Dimensions sorted by stride must each step past everything the
    smaller ones span; where that fails the offsets are enumerated (exact), and past
    _OVERLAP_ENUMERATION_LIMIT elements the view counts as overlapping."""
    if byte_strides is None or 0 in shape:
        return False
    dims = sorted((abs(stride), extent) for extent, stride in zip(shape, byte_strides) if extent > 1)
    reach = itemsize            # bytes spanned by the dimensions placed so far
    for stride, extent in dims:
        if stride == 0:
            return True
        if stride < reach:
            return _offsets_collide(dims, itemsize)
        reach += stride * (extent - 1)
    return False


def _offsets_collide(dims, itemsize: int) -> bool:
    """The exact test: every element's byte offset, sorted, at least ``itemsize`` apart."""
    if _count(extent for _, extent in dims) > _OVERLAP_ENUMERATION_LIMIT:
        return True
    offsets = np.zeros(1, np.int64)
    for stride, extent in dims:
        offsets = (offsets[:, None] + np.arange(extent, dtype=np.int64) * stride).ravel()
    offsets.sort()
    return bool(np.any(np.diff(offsets) < itemsize))


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
                     dt is _BF16, array.strides)


def _from_acl(name: str, t: acl.aclTensor) -> TensorArg:
    if t.destroyed:
        raise ArgError(ACLNN_ERR_PARAM_INVALID, f"{name} is an aclTensor that was already destroyed")
    if t.buffer is not None and (t.buffer.freed or t.buffer.host is None) and 0 not in t.shape:
        where = "freed memory" if t.buffer.freed else "memory of a device the host cannot address"
        raise ArgError(ACLNN_ERR_PARAM_INVALID, f"{name} points to {where}")
    _check_byte_size(name, t.shape, numpy_dtype(t.dtype).itemsize)   # before numpy refuses to view it
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
    _check_byte_size(name, shape, itemsize)
    if hasattr(obj, "untyped_storage") and not _torch_memory_alive(obj):
        raise ArgError(ACLNN_ERR_PARAM_INVALID, f"{name} points to freed memory (its storage holds "
                                                f"{obj.untyped_storage().nbytes()} bytes, fewer than its view needs)")

    def make_host():
        if tensor.device.dlpack_device_type() != _HOST:
            raise ArgError(ACLNN_ERR_PARAM_INVALID, f"{name} lives on {tensor.device}; this target reads host memory")
        return _torch_host(obj) if hasattr(obj, "detach") else np.from_dlpack(obj)

    return TensorArg(name, shape, dtype, itemsize, "ND", tensor, ("elements",) + strides, tensor.data_ptr(),
                     itemsize * _count(shape), tensor.is_contiguous(), make_host=make_host,
                     byte_strides=tuple(s * itemsize for s in strides))


def _torch_memory_alive(t) -> bool:
    """Whether a torch tensor's storage still holds every byte its view reaches: a storage
    resized to 0 (freed in place) leaves the view's shape as it was, and DLPack exports it
    with a dangling address. Negative strides do not exist in torch."""
    if t.numel() == 0 or t.device.type == "meta":
        return True
    itemsize = t.element_size()
    last = t.storage_offset() + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    try:
        return t.untyped_storage().nbytes() >= (last + 1) * itemsize
    except (RuntimeError, NotImplementedError):   # a tensor without a storage to ask (a functional wrapper)
        return True


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
