"""Binders: a plan's kernel arguments, built by code specialized once per thread to the
kinds of the call's arguments, so a warm call does little more than hand addresses to the
kernel.

Phase two of a warm call used to walk the plan's placements, ask each argument's kind
what the kernel gets, and make view objects: on GroupNorm (1,32,2x2,G=8), 6.5 µs of
which the kernel call itself was 0.74. Two things cost:

  * views. A TVM-FFI kernel takes each tensor parameter as a ``DLTensor*``. Handed the
    caller's torch tensor, TVM-FFI exports it through DLPack inside the call (0.12 µs),
    but only in the tensor's own shape; GroupNorm's kernel reads (N,C,H,W) as (N,G,D,HW)
    and (C,) as (G,D), and a TVM view of a torch tensor costs 0.7 µs plus 0.45 to free it
    (torch's own ``view()`` 1.3). A ``Frame`` holds one DLTensor per kernel parameter in
    the kernel's shape and dtype, C-contiguous, on the CPU; a call writes only its data
    pointer (0.02 µs) and passes the struct's address. TVM-FFI hands an address to the
    kernel as an opaque pointer, which the prologue TVM generates for every PrimFunc reads
    as the ``DLTensor*`` and checks like any other (ndim, dtype, shape, device, element
    alignment). Passing two such addresses costs 0.16 µs, two torch tensors 0.29.
  * the generic walk: 0.45 µs of loop plus about 0.4 per parameter of lookups and calls.
    A binder is the same walk written out as straight-line Python for one plan and one
    tuple of argument kinds (``binder_source`` shows it), with the placements,
    handles and arena views as constants.

Which arguments go by address (torch tensors; bf16 numpy arrays, which numpy cannot
export) and how each is checked before its address is written is opgen.binding's
(``ArgKind.prefers_address``, ``ArgKind.address``); plans that stage or fill (copies, so
a slow path anyway) and targets whose modules take TVM tensors keep the generic walk in
opgen.executor.

A frame is written during one run and read by that run's kernel call; runs are
synchronous and never re-entered on one thread, so frames and binders are per thread
(like the scratch arena) and per plan.
"""
from __future__ import annotations

import ctypes
import threading

import tvm


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    """DLPack's DLTensor (dlpack.h, unchanged since v0.2)."""

    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_WORDS = ctypes.sizeof(DLTensor) // 8   # 6: ``data`` is word 0 of each struct
assert ctypes.sizeof(DLTensor) == 48 and DLTensor.data.offset == 0
_KDLCPU = 1


class Frame:
    """One DLTensor per placement (C-contiguous CPU tensors in the placement's shape and
    dtype, data pointer unset; None where a parameter needs none), and each one's address
    as a kernel argument (``handles``). ``words`` is the frames' memory as 64-bit words: a
    struct's data pointer is word ``index * 6``."""

    def __init__(self, placements):
        count = len(placements)
        self._structs = (DLTensor * count)()
        self._shapes = [(ctypes.c_int64 * max(len(p.shape), 1))(*p.shape) if p else None for p in placements]
        for struct, shape, place in zip(self._structs, self._shapes, placements):
            if place is None:
                continue
            dtype = tvm.DataType(place.dtype)
            struct.device = _DLDevice(_KDLCPU, 0)
            struct.ndim = len(place.shape)
            struct.dtype = _DLDataType(dtype.type_code, dtype.bits, dtype.lanes)
            struct.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
        base = ctypes.addressof(self._structs)
        self.handles = tuple(None if p is None else ctypes.c_void_p(base + i * ctypes.sizeof(DLTensor))
                             for i, p in enumerate(placements))
        self.words = memoryview(self._structs).cast("B").cast("Q")


# How the binder gets each kernel parameter (opgen.executor decides, per placement):
ADDRESS = "address"   # (ADDRESS, argument index, kind.address, placement): written into the frame
POINTER = "pointer"   # (POINTER, argument index, method name, placement): the argument's own
#                       address method, unchecked: for calls whose arguments' keys were just read
OBJECT = "object"     # (OBJECT, argument index, kind.for_kernel, placement): what the kind hands over
CONSTANT = "constant"  # (CONSTANT, value): the same object every call on this thread (arena views)


def binder_source(recipes) -> tuple[str, dict]:
    """Python source of ``bind(arguments) -> kernel arguments`` for these recipes, and the
    namespace it runs in (the recipes' functions, placements, handles and constants)."""
    lines, names, namespace = ["def bind(arguments):"], [], {}
    for index, recipe in enumerate(recipes):
        how = recipe[0]
        if how == CONSTANT:
            namespace[f"constant_{index}"] = recipe[1]
            names.append(f"constant_{index}")
            continue
        _, position, function, place = recipe
        if how == POINTER:
            if not function.isidentifier():
                raise ValueError(f"{function!r} is not a method name")
            lines.append(f"    words[{index * _WORDS}] = arguments[{position}].{function}()")
            names.append(f"handle_{index}")
            continue
        namespace[f"{how}_of_{index}"], namespace[f"place_{index}"] = function, place
        if how == ADDRESS:
            lines.append(f"    words[{index * _WORDS}] = address_of_{index}(arguments[{position}], place_{index})")
            names.append(f"handle_{index}")
        else:
            lines.append(f"    object_{index} = object_of_{index}(arguments[{position}], place_{index})")
            names.append(f"object_{index}")
    lines.append(f"    return ({', '.join(names)}{',' if len(names) == 1 else ''})")
    return "\n".join(lines) + "\n", namespace


def make_binder(recipes):
    """The binder for these recipes on a frame of its own (see binder_source)."""
    frame = Frame([r[3] if r[0] in (ADDRESS, POINTER) else None for r in recipes])
    source, namespace = binder_source(recipes)
    namespace["words"] = frame.words
    namespace.update((f"handle_{i}", handle) for i, handle in enumerate(frame.handles) if handle is not None)
    exec(source, namespace)  # noqa: S102 (generated from the recipes' kinds only)
    bind = namespace["bind"]
    bind.source, bind.frame = source, frame
    return bind


_MAX_BINDERS = 4096


class _Binders(threading.local):
    binders: dict = None

    def get(self, plan, kinds, recipes):
        """This thread's binder for ``plan`` with arguments of ``kinds`` (made on first use
        from ``recipes(plan, kinds)``)."""
        binders = self.binders
        if binders is None:
            self.binders = binders = {}
        key = (id(plan), kinds, recipes)
        known = binders.get(key)
        if known is not None and known[0] is plan:
            return known[1]
        if len(binders) >= _MAX_BINDERS:
            binders.clear()
        bind = make_binder(recipes(plan, kinds))
        binders[key] = (plan, bind)
        return bind


binders = _Binders()
