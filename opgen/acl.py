"""The ACL runtime calls used by the seed examples, over TVM devices.

Each seed's C program ports line by line. Where C returns through an out-parameter,
Python returns a tuple with the status first:

    ret, stream = acl.aclrtCreateStream()          # aclrtCreateStream(&stream)
    ret, addr = acl.aclrtMalloc(size, policy)      # aclrtMalloc(&addr, size, policy)

and ``aclCreateTensor(shape, dataType, strides, offset, format, storageShape, deviceAddr)``
drops C's separate dimension counts (a Python sequence carries its length). Memory comes
from the device of the current target (``opgen.set_target`` / ``OPGEN_TARGET``): host
memory, 64-byte aligned, for llvm. Work is synchronous (an aclnn call returns when its
kernel has finished), so streams only exist to keep the seed's calls; synchronising one
waits for the device. Errors: a non-zero ACL_ERROR_* status (or None where C returns a
null pointer) and a one-sentence reason in ``aclGetRecentErrMsg()``, kept per thread.
"""
from __future__ import annotations

import functools

import math
import operator
import threading
from dataclasses import dataclass, field

import numpy as np

from opgen.lazy import ml_dtypes

ACL_SUCCESS = 0
ACL_ERROR_INVALID_PARAM = 100000
ACL_ERROR_BAD_ALLOC = 200000
ACL_ERROR_INTERNAL_ERROR = 500000

# aclDataType (values as in CANN's acl_base.h)
ACL_DT_UNDEFINED, ACL_FLOAT, ACL_FLOAT16, ACL_INT8, ACL_INT32, ACL_UINT8 = -1, 0, 1, 2, 3, 4
ACL_INT16, ACL_UINT16, ACL_UINT32, ACL_INT64, ACL_UINT64, ACL_DOUBLE, ACL_BOOL = 6, 7, 8, 9, 10, 11, 12
ACL_BF16 = 27
DTYPES = {ACL_FLOAT: "float32", ACL_FLOAT16: "float16", ACL_BF16: "bfloat16", ACL_DOUBLE: "float64",
          ACL_INT8: "int8", ACL_INT16: "int16", ACL_INT32: "int32", ACL_INT64: "int64", ACL_UINT8: "uint8",
          ACL_UINT16: "uint16", ACL_UINT32: "uint32", ACL_UINT64: "uint64", ACL_BOOL: "bool"}

# aclFormat. The plain layouts are all described by shape + strides; the others are tiled
# private layouts that the aclnn layer rejects (the seeds document Data Format ND).
ACL_FORMAT_UNDEFINED, ACL_FORMAT_NCHW, ACL_FORMAT_NHWC, ACL_FORMAT_ND = -1, 0, 1, 2
ACL_FORMAT_NC1HWC0, ACL_FORMAT_FRACTAL_Z, ACL_FORMAT_NDHWC, ACL_FORMAT_FRACTAL_NZ, ACL_FORMAT_NCDHW = 3, 4, 27, 29, 30
FORMATS = {ACL_FORMAT_ND: "ND", ACL_FORMAT_NCHW: "NCHW", ACL_FORMAT_NHWC: "NHWC", ACL_FORMAT_NCDHW: "NCDHW",
           ACL_FORMAT_NDHWC: "NDHWC", ACL_FORMAT_NC1HWC0: "NC1HWC0", ACL_FORMAT_FRACTAL_Z: "FRACTAL_Z",
           ACL_FORMAT_FRACTAL_NZ: "FRACTAL_NZ", ACL_FORMAT_UNDEFINED: "UNDEFINED"}
PLAIN_FORMATS = ("ND", "NCHW", "NHWC", "NCDHW", "NDHWC")

ACL_MEM_MALLOC_HUGE_FIRST, ACL_MEM_MALLOC_HUGE_ONLY, ACL_MEM_MALLOC_NORMAL_ONLY = 0, 1, 2
ACL_MEMCPY_HOST_TO_HOST, ACL_MEMCPY_HOST_TO_DEVICE = 0, 1
ACL_MEMCPY_DEVICE_TO_HOST, ACL_MEMCPY_DEVICE_TO_DEVICE = 2, 3


class _ThreadState(threading.local):
    """Per thread: the last error message and the aclrtSetDevice id (class defaults read
    in 0.03 µs; getattr with a default on a plain threading.local costs 0.35)."""

    message: str = ""
    device_id: int = 0


_local = _ThreadState()


def aclGetRecentErrMsg() -> str:
    """The reason for this thread's most recent failure ("" when nothing has failed)."""
    return _local.message


def set_error(message: str) -> None:
    """Record ``message`` as this thread's most recent failure (used by the aclnn layer too)."""
    _local.message = message


def _fail(status, message: str):
    set_error(message)
    return status


def numpy_dtype(name: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def _device():
    """The TVM device of the current target and the device id chosen by aclrtSetDevice."""
    from opgen import config

    return _device_of(config.get_target(), _local.device_id)


@functools.lru_cache(maxsize=None)
def _device_of(target_name: str, device_id: int):
    """Made once per (target, id): building a TVM device costs a microsecond per call."""
    import tvm

    from opgen.targets import get_target

    return tvm.device(get_target(target_name).device().dlpack_device_type(), device_id)


@dataclass(eq=False)
class DeviceBuffer:
    """Memory from aclrtMalloc: ``tensor`` is a TVM uint8 tensor on the device; on a host
    device ``host`` is a numpy uint8 view of the same bytes (64-byte aligned)."""

    size: int
    device: object
    tensor: object
    host: np.ndarray | None
    freed: bool = False

    @property
    def nbytes(self) -> int:
        return self.size


@functools.lru_cache(maxsize=None)
def _device_runtime():
    """(tvm, tvm_ffi, ALIGNMENT, is_host), imported on first use (this module stays importable
    without TVM) and then held: an import statement in the allocation path cost 1 µs a call."""
    import tvm
    import tvm_ffi

    from opgen.memory import ALIGNMENT, is_host

    return tvm, tvm_ffi, ALIGNMENT, is_host


def _allocate(size: int, dev) -> DeviceBuffer:
    tvm, tvm_ffi, alignment, is_host = _device_runtime()
    if is_host(dev):
        raw = np.zeros(size + alignment, dtype=np.uint8)
        start = (-tvm_ffi.from_dlpack(raw).data_ptr()) % alignment   # cheaper than raw.ctypes.data
        host = raw[start:start + size]
        return DeviceBuffer(size, dev, tvm_ffi.from_dlpack(host), host)
    return DeviceBuffer(size, dev, tvm.runtime.empty((size,), "uint8", dev), None)


def aclInit(configPath=None) -> int:
    return ACL_SUCCESS


def aclFinalize() -> int:
    return ACL_SUCCESS


def aclrtSetDevice(deviceId: int) -> int:
    """Select device ``deviceId`` of the current target for this thread."""
    if not isinstance(deviceId, (int, np.integer)) or deviceId < 0:
        return _fail(ACL_ERROR_INVALID_PARAM, f"aclrtSetDevice: deviceId must be an integer >= 0, got {deviceId!r}.")
    _local.device_id = int(deviceId)
    try:
        exists = _device().exist
    except Exception as exc:  # unknown target name, no runtime for it
        return _fail(ACL_ERROR_INVALID_PARAM, f"aclrtSetDevice: the current target has no usable device ({exc}).")
    if not exists:
        _local.device_id = 0
        return _fail(ACL_ERROR_INVALID_PARAM, f"aclrtSetDevice: device {deviceId} does not exist on this machine.")
    return ACL_SUCCESS


def aclrtResetDevice(deviceId: int) -> int:
    _local.device_id = 0
    return ACL_SUCCESS


@dataclass(eq=False)
class aclrtStream:
    """A stream: work is synchronous, so it only records the device it belongs to."""

    device: object
    destroyed: bool = False


def aclrtCreateStream():
    """C: aclrtCreateStream(&stream). Python: ``ret, stream = aclrtCreateStream()``."""
    return ACL_SUCCESS, aclrtStream(_device())


def aclrtSynchronizeStream(stream) -> int:
    if not isinstance(stream, aclrtStream) or stream.destroyed:
        return _fail(ACL_ERROR_INVALID_PARAM, f"aclrtSynchronizeStream: {stream!r} is not a live stream.")
    stream.device.sync()
    return ACL_SUCCESS


def aclrtDestroyStream(stream) -> int:
    if not isinstance(stream, aclrtStream) or stream.destroyed:
        return _fail(ACL_ERROR_INVALID_PARAM, f"aclrtDestroyStream: {stream!r} is not a live stream.")
    stream.destroyed = True
    return ACL_SUCCESS


def aclrtMalloc(size: int, policy: int = ACL_MEM_MALLOC_HUGE_FIRST):
    """C: aclrtMalloc(&addr, size, policy). Python: ``ret, addr = aclrtMalloc(size, policy)``."""
    if not isinstance(size, (int, np.integer)) or size <= 0:
        return _fail(ACL_ERROR_INVALID_PARAM, f"aclrtMalloc: size must be a positive integer, got {size!r}."), None
    if policy not in (ACL_MEM_MALLOC_HUGE_FIRST, ACL_MEM_MALLOC_HUGE_ONLY, ACL_MEM_MALLOC_NORMAL_ONLY):
        return _fail(ACL_ERROR_INVALID_PARAM, f"aclrtMalloc: unknown policy {policy!r}."), None
    try:
        return ACL_SUCCESS, _allocate(int(size), _device())
    except (MemoryError, RuntimeError) as exc:
        return _fail(ACL_ERROR_BAD_ALLOC, f"aclrtMalloc: cannot allocate {size} bytes ({exc})."), None


def aclrtFree(devPtr) -> int:
    if not isinstance(devPtr, DeviceBuffer) or devPtr.freed:
        return _fail(ACL_ERROR_INVALID_PARAM, "aclrtFree: the pointer is not live memory from aclrtMalloc.")
    devPtr.freed = True
    devPtr.tensor, devPtr.host = None, None
    return ACL_SUCCESS


def _host_bytes(obj, name: str, writable: bool) -> np.ndarray:
    """A flat uint8 view of a host buffer (numpy array, bytearray, memoryview)."""
    a = obj if isinstance(obj, np.ndarray) else np.frombuffer(obj, dtype=np.uint8)
    if not a.flags.c_contiguous:
        raise ValueError(f"{name} must be contiguous host memory")
    if writable and not a.flags.writeable:
        raise ValueError(f"{name} is read-only")
    return a if a.ndim == 1 and a.dtype == np.uint8 else a.reshape(-1).view(np.uint8)


def _endpoint(obj, name: str, on_device: bool, writable: bool):
    if on_device:
        if not isinstance(obj, DeviceBuffer) or obj.freed:
            raise ValueError(f"{name} must be live device memory from aclrtMalloc")
        return obj
    if isinstance(obj, DeviceBuffer):
        raise ValueError(f"{name} is device memory but the copy kind says host")
    return _host_bytes(obj, name, writable)


def _copy(dst, src, count: int) -> None:
    if isinstance(dst, DeviceBuffer) and isinstance(src, DeviceBuffer):
        if dst.host is not None and src.host is not None:
            dst.host[:count] = src.host[:count]
        else:
            dst.tensor._create_view((count,), "uint8").copyfrom(src.tensor._create_view((count,), "uint8"))
    elif isinstance(dst, DeviceBuffer):
        if dst.host is not None:
            dst.host[:count] = src[:count]
        else:
            dst.tensor._create_view((count,), "uint8").copyfrom(np.ascontiguousarray(src[:count]))
    elif isinstance(src, DeviceBuffer):
        dst[:count] = src.host[:count] if src.host is not None else src.tensor.numpy()[:count]
    else:
        dst[:count] = src[:count]


def aclrtMemcpy(dst, destMax: int, src, count: int, kind: int) -> int:
    """Copy ``count`` bytes; host memory is any contiguous numpy array or bytes-like buffer."""
    if kind not in (ACL_MEMCPY_HOST_TO_HOST, ACL_MEMCPY_HOST_TO_DEVICE, ACL_MEMCPY_DEVICE_TO_HOST,
                    ACL_MEMCPY_DEVICE_TO_DEVICE):
        return _fail(ACL_ERROR_INVALID_PARAM, f"aclrtMemcpy: unknown copy kind {kind!r}.")
    if count < 0 or count > destMax:
        return _fail(ACL_ERROR_INVALID_PARAM, f"aclrtMemcpy: count {count} exceeds destMax {destMax}.")
    try:
        d = _endpoint(dst, "dst", kind in (ACL_MEMCPY_HOST_TO_DEVICE, ACL_MEMCPY_DEVICE_TO_DEVICE), True)
        s = _endpoint(src, "src", kind in (ACL_MEMCPY_DEVICE_TO_HOST, ACL_MEMCPY_DEVICE_TO_DEVICE), False)
    except ValueError as exc:
        return _fail(ACL_ERROR_INVALID_PARAM, f"aclrtMemcpy: {exc}.")
    if count > d.nbytes or count > s.nbytes or destMax > d.nbytes:
        return _fail(ACL_ERROR_INVALID_PARAM, f"aclrtMemcpy: {count} bytes do not fit: dst holds {d.nbytes}, "
                                              f"src holds {s.nbytes}, destMax is {destMax}.")
    _copy(d, s, int(count))
    return ACL_SUCCESS


@dataclass(eq=False)
class aclTensor:
    """A view (shape, strides and offset in elements) of device memory, as in CANN."""

    shape: tuple
    dataType: int
    strides: tuple
    offset: int
    format: int
    storageShape: tuple
    buffer: DeviceBuffer | None
    destroyed: bool = field(default=False)

    @property
    def dtype(self) -> str:
        return DTYPES[self.dataType]

    @property
    def format_name(self) -> str:
        return FORMATS[self.format]

    def cached_host_view(self) -> np.ndarray:
        """``host_view()``, made once: a tensor's shape, strides, offset and memory never
        change after aclCreateTensor (the aclnn hot path reads it on every call)."""
        view = self.__dict__.get("_host_view")
        if view is None:
            view = self.__dict__["_host_view"] = self.host_view()
        return view

    def host_view(self) -> np.ndarray:
        """A writable numpy view of the tensor's elements (host devices only)."""
        dt = numpy_dtype(self.dtype)
        if math.prod(self.shape) == 0:
            return np.zeros(self.shape, dtype=dt)
        flat = self.buffer.host.view(dt) if self.buffer.size % dt.itemsize == 0 else \
            self.buffer.host[: self.buffer.size // dt.itemsize * dt.itemsize].view(dt)
        return np.lib.stride_tricks.as_strided(
            flat[self.offset:], self.shape, tuple(s * dt.itemsize for s in self.strides))


def _tensor_error(shape, dataType, strides, offset, format, storageShape, data) -> str | None:
    if dataType not in DTYPES:
        return f"unknown aclDataType {dataType!r}"
    if format not in FORMATS:
        return f"unknown aclFormat {format!r}"
    if any(int(d) < 0 for d in shape) or any(int(d) < 0 for d in storageShape):
        return f"negative dimension in shape {shape} or storage shape {storageShape}"
    if len(strides) != len(shape) or any(int(s) < 0 for s in strides) or offset < 0:
        return f"strides {strides} must be {len(shape)} non-negative numbers and offset {offset} >= 0"
    if math.prod(shape) == 0:
        return None
    if not isinstance(data, DeviceBuffer) or data.freed:
        return "tensorData must be live memory from aclrtMalloc"
    itemsize = numpy_dtype(DTYPES[dataType]).itemsize
    last = offset + sum((d - 1) * s for d, s in zip(shape, strides))
    if last >= math.prod(storageShape):
        return f"the view (shape {shape}, strides {strides}, offset {offset}) reaches past storage {storageShape}"
    if math.prod(storageShape) * itemsize > data.size:
        return f"storage {storageShape} needs {math.prod(storageShape) * itemsize} bytes, buffer has {data.size}"
    return None


def aclCreateTensor(viewDims, dataType, stride, offset, format, storageDims, tensorData):
    """C drops the counts here: aclCreateTensor(shape, dataType, strides, offset, format,
    storageShape, deviceAddr). ``stride`` None means contiguous. Returns None on error."""
    try:
        shape = tuple(int(d) for d in viewDims)
        if stride is None:
            stride = [math.prod(shape[i + 1:]) for i in range(len(shape))]
        strides, storage = tuple(int(s) for s in stride), tuple(int(d) for d in storageDims)
        reason = _tensor_error(shape, dataType, strides, int(offset), format, storage, tensorData)
    except (TypeError, ValueError) as exc:
        reason = f"bad arguments ({exc})"
    if reason is not None:
        set_error(f"aclCreateTensor: {reason}.")
        return None
    return aclTensor(shape, dataType, strides, int(offset), format, storage, tensorData)


def aclDestroyTensor(tensor) -> int:
    if not isinstance(tensor, aclTensor) or tensor.destroyed:
        return _fail(ACL_ERROR_INVALID_PARAM, "aclDestroyTensor: not a live aclTensor.")
    tensor.destroyed = True
    return ACL_SUCCESS


@dataclass(frozen=True)
class aclBoolArray:
    values: tuple

    def __len__(self):
        return len(self.values)

    def __iter__(self):
        return iter(self.values)


def aclCreateBoolArray(value, size=None):
    """C: aclCreateBoolArray(value, size). ``size`` defaults to len(value)."""
    values = tuple(bool(v) for v in value)
    if size is not None and (size < 0 or size > len(values)):
        set_error(f"aclCreateBoolArray: size {size} exceeds the {len(values)} values given.")
        return None
    return aclBoolArray(values if size is None else values[:size])


def aclDestroyBoolArray(array) -> int:
    return ACL_SUCCESS


@dataclass(frozen=True)
class aclIntArray:
    values: tuple

    def __len__(self):
        return len(self.values)

    def __iter__(self):
        return iter(self.values)


def aclCreateIntArray(value, size=None):
    """C: aclCreateIntArray(value, size): int64 values. ``size`` defaults to len(value)."""
    try:
        values = tuple(operator.index(v) for v in value)
    except TypeError as exc:
        set_error(f"aclCreateIntArray: the values must be integers ({exc}).")
        return None
    if size is not None and (size < 0 or size > len(values)):
        set_error(f"aclCreateIntArray: size {size} exceeds the {len(values)} values given.")
        return None
    return aclIntArray(values if size is None else values[:size])


def aclDestroyIntArray(array) -> int:
    return ACL_SUCCESS
