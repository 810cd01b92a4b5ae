"""Dtype names shared by the ops, the kernels and the API layers.

TVM, numpy and CANN each spell the types differently; this module is the single place
that maps between them, so nothing else hard-codes a spelling. Three floating types carry
the data; two integer types carry what quantized ops read and write: int32 inputs (a
quantization offset, a counter) and int8 outputs (a quantized result). An integer output
is the rounding of a float value, so its "ulp" is 1 and opgen.verify compares it with the
unrounded float64 reference exactly as it compares a float output with its own rounding.
"""
from __future__ import annotations

import sys

import numpy as np

from opgen.lazy import ml_dtypes

FLOAT32 = "float32"
FLOAT16 = "float16"
BFLOAT16 = "bfloat16"
ALL_FLOATS = (FLOAT32, FLOAT16, BFLOAT16)
INT32 = "int32"
INT8 = "int8"
ALL_INTS = (INT32, INT8)
ALL_DTYPES = ALL_FLOATS + ALL_INTS
# HiFloat8: an 8-bit output format of CANN's (ACL_HIFLOAT8), stored as uint8 codes; its numpy
# codec is opgen.hifloat8. Not in ALL_DTYPES yet: no target stores it (see docs/specs of
# aclnnRmsNormGradQuant), so no DtypeCombo may name it.
HIFLOAT8 = "hifloat8"

SHORT_NAMES = {FLOAT32: "f32", FLOAT16: "f16", BFLOAT16: "bf16", INT32: "i32", INT8: "i8", HIFLOAT8: "hif8"}
# bfloat16's is ml_dtypes', added on the first request (numpy_dtype): importing ml_dtypes
# costs more than the rest of ``import opgen.torch`` besides torch (see opgen.lazy).
NUMPY_DTYPES = {
    FLOAT32: np.dtype(np.float32),
    FLOAT16: np.dtype(np.float16),
    INT32: np.dtype(np.int32),
    INT8: np.dtype(np.int8),
}
CANN_NAMES = {FLOAT32: "FLOAT32", FLOAT16: "FLOAT16", BFLOAT16: "BFLOAT16", INT32: "INT32", INT8: "INT8",
              HIFLOAT8: "HIFLOAT8"}
_NAMES = {dt: name for name, dt in NUMPY_DTYPES.items()}
# float64 after _NAMES: a kernel's scratch may hold it (the CPU's float64 sum partials,
# schedules/llvm.py _widen_sum), no tensor of the API does (dtype_name knows it not).
NUMPY_DTYPES["float64"] = np.dtype(np.float64)


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype that stores a tensor of TVM dtype ``name``."""
    try:
        return NUMPY_DTYPES[name]
    except KeyError:
        if name != BFLOAT16:
            raise
    dt = NUMPY_DTYPES[BFLOAT16] = np.dtype(ml_dtypes.bfloat16)
    _NAMES[dt] = BFLOAT16
    return dt


def dtype_name(dtype) -> str | None:
    """TVM dtype name of a numpy dtype (or anything numpy.dtype accepts); None if unsupported."""
    dt = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
    name = _NAMES.get(dt)
    if name is None and BFLOAT16 not in NUMPY_DTYPES and "ml_dtypes" in sys.modules:
        numpy_dtype(BFLOAT16)     # only once ml_dtypes is imported can an array hold its bfloat16
        name = _NAMES.get(dt)
    return name


def short(name: str) -> str:
    """Short tag used in kernel names and tables: f32, f16, bf16, i32, i8."""
    return SHORT_NAMES[name]


def is_integer(name: str) -> bool:
    """Whether dtype ``name`` holds integers (no inf/nan, a rounding step of 1)."""
    return name in ALL_INTS


def int_range(name: str) -> tuple[int, int]:
    """The smallest and largest value of integer dtype ``name``: where a saturating cast clips."""
    info = np.iinfo(numpy_dtype(name))
    return int(info.min), int(info.max)


def round_to(values: np.ndarray, name: str) -> np.ndarray:
    """Round float64 values to dtype ``name`` (round to nearest even) and back to float64; an
    integer dtype saturates at its range (numpy's own cast would wrap)."""
    values = np.asarray(values)
    if is_integer(name):
        return np.clip(np.rint(values.astype(np.float64)), *int_range(name))
    return values.astype(numpy_dtype(name)).astype(np.float64)


def fill_value(name: str):
    """What an output buffer of dtype ``name`` starts as, so that an element a kernel never
    writes shows: nan for a float; for an integer, which has no such value, its minimum
    (a kernel that leaves it there is caught wherever the reference is not that minimum)."""
    return int_range(name)[0] if is_integer(name) else np.nan


def ulp(values: np.ndarray, name: str) -> np.ndarray:
    """Spacing of dtype ``name`` at |values|: the size of one rounding step of that dtype
    (1 for an integer dtype)."""
    if is_integer(name):
        return np.ones(np.shape(values))
    dt = numpy_dtype(name)
    mag = np.abs(np.asarray(values, dtype=np.float64))
    finfo = ml_dtypes.finfo(dt)
    tiny = float(finfo.smallest_subnormal)
    mantissa_bits = int(finfo.nmant)
    with np.errstate(divide="ignore", invalid="ignore"):
        exponent = np.floor(np.log2(np.where(mag > 0, mag, 1.0)))
    spacing = np.where(mag > 0, np.exp2(exponent - mantissa_bits), tiny)
    return np.maximum(spacing, tiny)
