"""Reading a call's raw arguments cheaply, and handing them to the kernel as they are.

Phase one of a warm call should cost what deciding "this call is like one already
validated" costs, not what validating costs; phase two what launching costs. Each kind of
tensor argument users pass (numpy arrays, torch tensors, aclTensors, other DLPack
producers) has an ``ArgKind`` that knows these things about it:

  * ``read(obj)`` -> (key, anchor). The key holds every property that can decide the
    call's outcome or plan (dtype, shape, strides, writability, device, element
    alignment, format), never the data; opgen.aclnn looks the call's keys up in its plan
    cache, and only a miss builds full ``TensorArg``s (opgen.tensorarg) and runs the
    documented checks. The anchor serves the aliasing check every call needs: for numpy
    the array owning the memory (a base chain ending at an array that owns its data
    cannot overlap anything another such array owns, so distinct owners settle it
    without addresses, which numpy reads slowly); for torch, whose address is cheap, the
    byte range itself (see ``no_overlap``);
  * ``span(obj)``: the exact byte range, for when the anchors cannot settle it;
  * ``for_kernel(obj, place)``: what the kernel is handed for a directly placed tensor.
    The caller's object itself where TVM-FFI converts it inside the call (numpy, torch),
    reshaped by numpy when the kernel's shape differs;
  * ``prefers_address(place)`` and ``address(obj, place)``: whether a host kernel is
    better handed the address than the object (torch, whose address is cheap; bf16
    numpy, whose object would need three conversions), and that address, checked at
    run time. A generated binder (opgen.launch) writes it into a DLTensor in the
    kernel's own shape, so no view is made per call;
  * ``pointer_method``: the name of the object's own address method (torch's
    ``data_ptr``), or None: what a bound call (opgen.api), which read the argument's key
    in the same call, hands over without address's checks.

Measured (2 cores, warm, µs per tensor): a Python-level ``tvm_ffi.from_dlpack`` 0.35 plus
0.26 to free it and 0.42 (+0.2 to free) per ``tensor_view``; TVM-FFI converting a numpy
array inside the kernel call 0.15 (torch 0.12); numpy ``reshape`` 0.15; ``a.ctypes.data``
0.87. A GroupNorm call has 8 tensors, so the Python-level tensor objects were half of a
warm call; here none is made for numpy or torch arguments the kernel reads in place.

Anything a kind cannot read quickly raises ``NotReadable``: that call takes the full path,
uncached, and gets the same status and message it always did.
"""
from __future__ import annotations

import struct

import ml_dtypes
import numpy as np
import tvm_ffi

from opgen import acl
from opgen.memory import create_view as _create_view

_UINT16 = np.dtype(np.uint16)
_BF16 = np.dtype(ml_dtypes.bfloat16)
_from_dlpack = tvm_ffi.from_dlpack


class NotReadable(Exception):
    """The argument needs the full reader (an unknown kind of object, a dead aclTensor,
    a DLPack export that fails): the call is validated in full and not cached."""


def strided_span(address: int, shape, byte_strides, itemsize: int) -> tuple[int, int]:
    """[first, end) bytes of a strided view; numpy's byte_bounds rule."""
    low = high = address
    for extent, stride in zip(shape, byte_strides):
        if extent == 0:
            return address, address
        reach = (extent - 1) * stride
        if reach < 0:
            low += reach
        else:
            high += reach
    return low, high + itemsize


def _tvm_view(tensor, place):
    """``tensor`` in the kernel's shape and dtype of ``place`` (a TVM view, no copy)."""
    return _create_view(tensor, place.tvm_shape, place.tvm_dtype, 0)


class NumpyKind:
    """numpy arrays: any strides, any alignment, read-only too (the plan stages what the
    kernel cannot read in place)."""

    pointer_method = None   # an array's address is no method call: bound calls check it too

    @staticmethod
    def prefers_address(place) -> bool:
        """bf16 only: numpy cannot export ml_dtypes' bfloat16, so handing the array over
        takes a uint16 view, its DLPack export and a TVM view per call (1 µs warm, 13 µs
        right after a cache-evicting op); its address 1 and 8. Other arrays go as
        themselves (TVM-FFI converts them in the call, 0.15 µs warm)."""
        return place.dtype == "bfloat16"

    @staticmethod
    def address(a, place) -> int:
        """The array's address, if it still spans exactly the kernel's bytes, contiguously
        (``a.shape = ...`` or ``a.dtype = ...`` may have changed it since phase one)."""
        if a.nbytes == place.extent and a.flags.c_contiguous:
            return a.__array_interface__["data"][0]   # (a.ctypes.data: same warm, 20% more cold)
        raise NotReadable

    @staticmethod
    def key(a) -> tuple:
        """What of ``a`` can decide a call's outcome or plan (read's key alone)."""
        flags = a.flags   # ALIGNED: address and strides are multiples of the dtype's alignment
        return "numpy", a.dtype, a.shape, a.strides, flags.writeable, flags.aligned

    @staticmethod
    def guard(name: str, a, constant) -> str:
        """A Python expression true of an array ``name`` exactly when its key is ``a``'s
        (``constant(value)`` names a value in the expression's namespace)."""
        _, dtype, shape, strides, writeable, aligned = NumpyKind.key(a)
        return (f"{name}.dtype == {constant(dtype)} and {name}.shape == {constant(shape)} and "
                f"{name}.strides == {constant(strides)} and {name}.flags.writeable is {writeable} and "
                f"{name}.flags.aligned is {aligned}")

    @staticmethod
    def read(a):
        """(key, owner): the owner is the array owning ``a``'s memory, None when that is not
        a numpy allocation (then the aliasing check reads addresses)."""
        base = a.base
        if base is None:
            owner = a if a.flags.owndata else None
        else:
            owner = a
            while isinstance(base, np.ndarray):
                owner, base = base, base.base
            if base is not None or not owner.flags.owndata:
                owner = None
        return NumpyKind.key(a), owner

    @staticmethod
    def span(a):
        address = a.__array_interface__["data"][0]
        if a.flags.c_contiguous:
            return address, address + a.nbytes
        return strided_span(address, a.shape, a.strides, a.itemsize)

    @staticmethod
    def for_kernel(a, place):
        if type(a) is not np.ndarray:   # a subclass (np.matrix) may reshape by its own rules
            a = a.view(np.ndarray)
        if not place.reshape:
            return a
        if a.dtype is _BF16:   # numpy cannot export ml_dtypes' bfloat16: its uint16 storage, viewed
            return _tvm_view(_from_dlpack(a.view(_UINT16)), place)
        return a.reshape(place.shape)


class AclKind:
    """aclTensors: their host view (made once; a tensor's metadata never changes after
    aclCreateTensor) read as numpy, plus the aclDataType and format."""

    prefers_address = NumpyKind.prefers_address
    pointer_method = None
    guard = None   # not keyed by opgen.api: never written out (opgen.bound)

    @staticmethod
    def _view(t):
        if t.destroyed or (t.buffer is not None and t.buffer.freed):
            raise NotReadable   # the full path reports the dead tensor or freed memory
        try:
            return t.cached_host_view()
        except Exception:
            raise NotReadable

    @classmethod
    def read(cls, t):
        key, owner = NumpyKind.read(cls._view(t))
        return (key, "acl", t.dataType, t.format), owner

    @classmethod
    def span(cls, t):
        return NumpyKind.span(cls._view(t))

    @classmethod
    def for_kernel(cls, t, place):
        return NumpyKind.for_kernel(cls._view(t), place)

    @classmethod
    def address(cls, t, place) -> int:
        return NumpyKind.address(cls._view(t), place)


class TorchKind:
    """torch tensors on any device (requires_grad is fine: DLPack export works on them)."""

    # A call whose tensors' keys were read just before (a bound call, opgen.api) hands a
    # host kernel ``t.data_ptr()`` unchecked: the key fixes what ``address`` checks
    # (device, dtype, shape, strides, hence contiguity and byte extent). One torch call
    # per tensor instead of four: 1-3 µs of a warm 13 µs GroupNorm call (tiny_modules).
    pointer_method = "data_ptr"

    @staticmethod
    def key(t) -> tuple:
        """What of ``t`` can decide a call's outcome or plan (read's key alone). The device
        is True on the CPU: a torch.device costs 0.07 µs to hash and to compare."""
        return "torch", t.dtype, t.shape, t.stride(), t.is_cpu or t.device, t.data_ptr() % t.element_size() == 0

    @staticmethod
    def guard(name: str, t, constant) -> str:
        """A Python expression true of a tensor ``name`` exactly when its key is ``t``'s
        (``constant(value)`` names a value in the expression's namespace)."""
        _, dtype, shape, strides, device, aligned = TorchKind.key(t)
        where = f"{name}.is_cpu" if device is True else f"{name}.device == {constant(device)}"
        return (f"{name}.dtype is {constant(dtype)} and {name}.shape == {constant(tuple(shape))} and "
                f"{name}.stride() == {constant(strides)} and {where} and "
                f"({name}.data_ptr() % {t.element_size()} == 0) is {aligned}")

    @staticmethod
    def read(t):
        """(key, byte range): a torch tensor's address costs 0.05 µs, numpy's 0.9."""
        key, address = TorchKind.key(t), t.data_ptr()
        if t.is_contiguous():
            return key, (address, address + t.nbytes)
        itemsize = t.element_size()
        return key, strided_span(address, t.shape, [s * itemsize for s in t.stride()], itemsize)

    @staticmethod
    def span(t):
        return TorchKind.read(t)[1]

    @staticmethod
    def for_kernel(t, place):
        # torch's own view() dispatches an op (1.3 µs); a TVM view of its DLPack export is 0.7
        return _create_view(_from_dlpack(t), place.tvm_shape, place.tvm_dtype, 0) if place.reshape else t

    @staticmethod
    def prefers_address(place) -> bool:
        return True

    @staticmethod
    def address(t, place) -> int:
        """Where a host kernel may read or write ``place``'s bytes in ``t`` (for a DLTensor
        that opgen.dltensor writes in the kernel's shape).

        Checked again here, at run time, because the tensor may have been changed since
        phase one (resize_, set_, ``.data =``): a contiguous CPU tensor of exactly the
        kernel's byte extent lies inside its own storage, so the kernel touches nothing
        else. Its storage must still hold that extent: one resized to 0 (freed in place)
        keeps the view's shape, and its address is null or dangling. 0.3 µs per tensor,
        against 1.15 for a TVM view.
        """
        if t.is_cpu and t.nbytes == place.extent and t.is_contiguous() and t.untyped_storage().nbytes() >= place.extent:
            return t.data_ptr()
        raise NotReadable


class DLPackKind:
    """Any other DLPack producer, read through a TVM tensor's metadata."""

    pointer_method = None
    guard = None   # not keyed by opgen.api: never written out (opgen.bound)

    @staticmethod
    def prefers_address(place) -> bool:
        return False   # handed over as an object (see for_kernel)

    @staticmethod
    def _tensor(obj):
        try:
            return _from_dlpack(obj)
        except Exception:
            raise NotReadable

    @classmethod
    def read(cls, obj):
        tensor = cls._tensor(obj)
        dtype, device = tensor.dtype, tensor.device
        shape, strides = tuple(tensor.shape), tuple(tensor.strides)
        itemsize = (dtype.bits * dtype.lanes + 7) // 8
        address = tensor.data_ptr()
        key = ("dlpack", type(obj), str(dtype), shape, strides, device.dlpack_device_type(), device.index,
               address % itemsize == 0)
        return key, strided_span(address, shape, [s * itemsize for s in strides], itemsize)

    @classmethod
    def span(cls, obj):
        return cls.read(obj)[1]

    @classmethod
    def for_kernel(cls, obj, place):
        tensor = cls._tensor(obj)
        return _tvm_view(tensor, place) if place.reshape else tensor


KINDS = {np.ndarray: NumpyKind, acl.aclTensor: AclKind}   # type -> kind, filled as types are met


def kind_of(obj):
    """The ArgKind of a tensor argument (remembered per type); NotReadable if none fits."""
    cls = type(obj)
    kind = KINDS.get(cls)
    if kind is None:
        if issubclass(cls, np.ndarray):
            kind = NumpyKind
        elif issubclass(cls, acl.aclTensor):
            kind = AclKind
        elif cls.__module__.startswith("torch") and hasattr(cls, "element_size"):
            kind = TorchKind
        elif hasattr(cls, "__dlpack__"):
            kind = DLPackKind
        else:
            raise NotReadable
        KINDS[cls] = kind
    return kind


def value_key(value):
    """An attribute's or mask's key: its type next to its value, so that True and 1 (or
    [True] and [1]) never share a plan: they are equal in Python but not equally valid.
    A float is keyed by its bits: -0.0 and 0.0 are equal but fill different values, and
    nan, unequal to itself, would miss the cache on every call."""
    kind = type(value)
    if isinstance(value, float):
        return kind, struct.pack("<d", value)
    if kind is list or kind is tuple:
        return kind, tuple(value), tuple(map(type, value))
    if kind is acl.aclBoolArray or kind is acl.aclIntArray:
        return kind, value.values, tuple(map(type, value.values))
    try:
        hash(value)
    except TypeError:   # a dict, a set: the full path says what is wrong with it
        raise NotReadable
    return kind, value


def overlapping_outputs(inputs: list, outputs: list) -> tuple:
    """Indexes (into ``outputs``) of the output spans that overlap any input span; None
    spans (null pointers) never overlap."""
    hits = ()
    for index, span in enumerate(outputs):
        if span is not None:
            low, high = span
            for other in inputs:
                if other is not None and low < other[1] and other[0] < high:
                    hits += (index,)
                    break
    return hits


def no_overlap(anchors: list) -> bool:
    """Whether the anchors of a call's tensors prove that no two of them overlap: all numpy
    owners and none shared, or all byte ranges and pairwise disjoint. Anything else (a
    shared owner, a mix of kinds) is left to ``aliased_outputs``. (Never ``None in
    anchors``: == on arrays is elementwise.)"""
    types = set(map(type, anchors))
    if types == _SPANS_ONLY:   # sorted by start, disjoint iff each one ends before the next starts
        end = 0
        for low, high in sorted(anchors):
            if low < end:
                return False
            end = high
        return True
    if tuple in types or _NONE in types:
        return not anchors
    return len(set(map(id, anchors))) == len(anchors)


_SPANS_ONLY, _NONE = {tuple}, type(None)


def aliased_outputs(inputs: list, outputs: list) -> tuple:
    """Indexes (into ``outputs``) of the outputs whose memory overlaps an input's, by byte
    ranges; ``inputs`` and ``outputs`` are (kind, object) pairs, None for null pointers.
    Needed only when ``no_overlap`` cannot settle it (one owner may hold disjoint slices,
    e.g. dy and dx cut from one buffer)."""
    def spans(pairs):
        return [None if p is None else p[0].span(p[1]) for p in pairs]
    return overlapping_outputs(spans(inputs), spans(outputs))
