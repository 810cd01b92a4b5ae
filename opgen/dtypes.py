"""Dtype names shared by the ops, the kernels and the API layers.

TVM, numpy and CANN each spell the three floating types differently; this module is
the single place that maps between them, so nothing else hard-codes a spelling.
"""
from __future__ import annotations

import sys

import numpy as np

from opgen.lazy import ml_dtypes

FLOAT32 = "float32"
FLOAT16 = "float16"
BFLOAT16 = "bfloat16"
ALL_FLOATS = (FLOAT32, FLOAT16, BFLOAT16)

SHORT_NAMES = {FLOAT32: "f32", FLOAT16: "f16", BFLOAT16: "bf16"}
# bfloat16's is ml_dtypes', added on the first request (numpy_dtype): importing ml_dtypes
# costs more than the rest of ``import opgen.torch`` besides torch (see opgen.lazy).
NUMPY_DTYPES = {
    FLOAT32: np.dtype(np.float32),
    FLOAT16: np.dtype(np.float16),
}
CANN_NAMES = {FLOAT32: "FLOAT32", FLOAT16: "FLOAT16", BFLOAT16: "BFLOAT16"}
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
    """Short tag used in kernel names and tables: f32, f16, bf16."""
    return SHORT_NAMES[name]


def round_to(values: np.ndarray, name: str) -> np.ndarray:
    """Round float64 values to dtype ``name`` (round to nearest even) and back to float64."""
    return np.asarray(values).astype(numpy_dtype(name)).astype(np.float64)


def ulp(values: np.ndarray, name: str) -> np.ndarray:
    """Spacing of dtype ``name`` at |values|: the size of one rounding step of that dtype."""
    dt = numpy_dtype(name)
    mag = np.abs(np.asarray(values, dtype=np.float64))
    finfo = ml_dtypes.finfo(dt)
    tiny = float(finfo.smallest_subnormal)
    mantissa_bits = int(finfo.nmant)
    with np.errstate(divide="ignore", invalid="ignore"):
        exponent = np.floor(np.log2(np.where(mag > 0, mag, 1.0)))
    spacing = np.where(mag > 0, np.exp2(exponent - mantissa_bits), tiny)
    return np.maximum(spacing, tiny)
