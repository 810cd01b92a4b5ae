"""One view of every kind of tensor argument the aclnn layer accepts.

aclTensors from ``opgen.acl``, numpy arrays (any strides, any alignment) and DLPack
exporters (torch tensors, bf16 included) all become a ``TensorArg``: shape, dtype name,
format, and a numpy view of the caller's memory in the caller's shape (zero-copy, so
outputs are written in place and strided views keep the rest of their base untouched).
A problem with the argument itself is an ``ArgError`` that the aclnn layer turns into a
status code; nothing here raises anything else for bad input.
"""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from opgen import acl
from opgen.apispec import ACLNN_ERR_PARAM_INVALID, ArgError
from opgen.dtypes import dtype_name


@dataclass
class TensorArg:
    name: str
    shape: tuple
    dtype: str            # "float32", "float16", "bfloat16", or numpy's name of anything else
    format: str           # "ND" for arrays; an aclTensor's own format name
    host: np.ndarray      # the caller's elements, caller's shape, zero-copy

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def itemsize(self) -> int:
        return self.host.dtype.itemsize


def _name_of(dtype: np.dtype) -> str:
    return dtype_name(dtype) or str(dtype)


def _from_acl(name: str, t: acl.aclTensor) -> TensorArg:
    if t.destroyed:
        raise ArgError(ACLNN_ERR_PARAM_INVALID, f"{name} is an aclTensor that was already destroyed")
    if t.buffer is not None and (t.buffer.freed or t.buffer.host is None) and 0 not in t.shape:
        where = "freed memory" if t.buffer.freed else "memory of a device the host cannot address"
        raise ArgError(ACLNN_ERR_PARAM_INVALID, f"{name} points to {where}")
    return TensorArg(name, t.shape, t.dtype, t.format_name, t.host_view())


def _torch_bf16(obj):
    """torch's bfloat16 cannot cross into numpy through DLPack: reinterpret as int16."""
    import torch

    return np.from_dlpack(obj.view(torch.int16)).view(ml_dtypes.bfloat16)


def _from_dlpack(name: str, obj) -> TensorArg:
    if hasattr(obj, "detach"):
        obj = obj.detach()  # torch refuses to export a tensor that requires grad
    try:
        if str(getattr(obj, "dtype", "")) == "torch.bfloat16":
            host = _torch_bf16(obj)
        else:
            host = np.from_dlpack(obj)
    except Exception as exc:  # foreign device, unsupported dtype: the producer decides
        raise ArgError(ACLNN_ERR_PARAM_INVALID, f"{name} cannot be read through DLPack on the host ({exc})")
    return TensorArg(name, tuple(host.shape), _name_of(host.dtype), "ND", host)


def describe(name: str, obj) -> TensorArg | None:
    """The TensorArg of parameter ``name`` (None for a null pointer)."""
    if obj is None:
        return None
    if isinstance(obj, acl.aclTensor):
        return _from_acl(name, obj)
    if isinstance(obj, np.ndarray):
        return TensorArg(name, tuple(obj.shape), _name_of(obj.dtype), "ND", obj)
    if hasattr(obj, "__dlpack__"):
        return _from_dlpack(name, obj)
    raise ArgError(ACLNN_ERR_PARAM_INVALID, f"{name} must be an aclTensor, a numpy array, a DLPack tensor "
                                            f"or None, got {type(obj).__name__}")
