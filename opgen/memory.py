"""Memory helpers below the runtime: alignment, host-ness and zero-copy TVM views.

The aclnn runtime (acl, binding, executor) and the compiler's Kernel both hand caller
memory to kernels; what they share about memory lives here, so that neither imports the
other for it (the compiler used to hold these, and every runtime module imported the
compiler to reach them).
"""
from __future__ import annotations

import numpy as np
import tvm
import tvm_ffi
from tvm.runtime import _ffi_api as _runtime_api

from opgen.dtypes import BFLOAT16, dtype_name

# Workspace slots start on 64-byte boundaries (a cache line; what TVM's own allocations
# use). Kernel parameters need no more than element alignment (see
# opgen.kernels.declare_element_alignment), so caller memory is used at any address.
ALIGNMENT = 64

_DLPACK_CPU = 1   # DLPack's kDLCPU


def is_host(dev) -> bool:
    """Whether ``dev`` is the CPU, whose memory numpy can view directly."""
    return dev.dlpack_device_type() == _DLPACK_CPU


# TVMTensorCreateView(tensor, tvm_ffi.Shape, tvm.DataType, byte offset): a view of a tensor's
# memory with another shape and dtype. Called directly: the ``_create_view`` wrapper
# converts its arguments from Python values, which cost 8 µs of a 9 µs call (measured).
create_view = _runtime_api.TVMTensorCreateView


def tensor_view(tensor, shape, dtype, byte_offset: int = 0):
    """A view of ``tensor``'s memory with another shape and dtype (tvm_ffi.Shape, tvm.DataType)."""
    return create_view(tensor, shape, dtype, byte_offset)


_BF16_TYPE = tvm.DataType(BFLOAT16)


def host_tensor(a: np.ndarray):
    """A zero-copy TVM view of a C-contiguous host array, at any address.

    ``tvm_ffi.from_dlpack`` itself accepts any alignment (``tvm.runtime.from_dlpack`` asks
    for 64 bytes); numpy cannot export ml_dtypes' bfloat16, so it crosses as uint16 and is
    re-viewed.
    """
    if a.dtype == np.uint16 or dtype_name(a.dtype) != BFLOAT16:
        return tvm_ffi.from_dlpack(a)
    return tensor_view(tvm_ffi.from_dlpack(a.view(np.uint16)), tvm_ffi.Shape(a.shape), _BF16_TYPE)


def to_tvm(array, dev):
    """A TVM tensor for ``array``: zero-copy when possible; returns (tensor, copied)."""
    if isinstance(array, tvm.runtime.Tensor):
        return array, False
    a = np.asarray(array)
    if dtype_name(a.dtype) is None:
        raise TypeError(f"unsupported dtype {a.dtype}")
    if a.flags.c_contiguous and a.size and is_host(dev):
        return host_tensor(a), False
    return tvm.runtime.tensor(np.ascontiguousarray(a), dev), True
