"""HiFloat8 (HiF8), Huawei's tapered-precision 8-bit float, in numpy: decode, encode, spacing.

The format ("Ascend HiFloat8 Format for Deep Learning", arXiv 2409.16626; the same layout as
MindSpore's ``mindspore/core/base/hifloat8.h``, Huawei's own C++ type): a sign bit, then a
prefix-coded *dot* field that says how wide the exponent is, then the exponent in
sign-magnitude with its leading 1 implicit, then the mantissa:

    dot    exponents          exponent bits  mantissa bits  binades
    11     +-8 .. +-15        4 (sign + 3)    1              16
    10     +-4 .. +-7         3 (sign + 2)    2               8
    01     +-2, +-3           2 (sign + 1)    3               4
    001    +-1                1 (sign)        3               2
    0001   0                  0               3               1
    0000   2^-22 .. 2^-16     (denormal: 3 bits m give 2^(m - 23), no mantissa)

Special codes: 0x00 is zero (the only one), 0x80 NaN, 0x6F / 0xEF +-inf. The largest finite
magnitude is 2^15 (0x6E), the smallest 2^-22 (0x01). No numpy or ml_dtypes type exists: a
HiFloat8 tensor is stored as uint8 codes.

``encode`` rounds to nearest with ties away from zero (the Ascend 950's ``CAST_ROUND``, as
ops-nn's RmsNormGradQuant casts float32 to hifloat8_t) and, with ``saturate`` (its ``SAT``),
clips magnitudes above 2^15 to 2^15; without it they become inf beyond 2^15 + 2^13 (half the
last step). Within a binade the step is uniform and the next binade starts at the next power
of two, so rounding the mantissa at the value's own binade is the nearest representable value.
"""
from __future__ import annotations

import functools

import numpy as np

NAN_CODE, INF_CODE, ZERO_CODE, SIGN_BIT = 0x80, 0x6F, 0x00, 0x80
MAX = 2.0 ** 15
MIN_DENORMAL = 2.0 ** -22


def _decode_magnitude(code: int) -> float:
    """The value of a code with its sign bit clear (0..127)."""
    if code == INF_CODE:
        return np.inf
    if code & 0x78 == 0x00:                       # dot 0000: zero or denormal 2^(m - 23)
        return 0.0 if code == 0 else 2.0 ** ((code & 0x07) - 23)
    if code & 0x78 == 0x08:                       # dot 0001: exponent 0, 3 mantissa bits
        exponent, mantissa_bits = 0, 3
    elif code & 0x70 == 0x10:                     # dot 001: exponent +-1, 3 mantissa bits
        exponent, mantissa_bits = (-1 if code & 0x08 else 1), 3
    else:                                         # dot 01, 10, 11: exponent of 2, 3, 4 bits
        width = (code >> 5) + 1
        mantissa_bits = 5 - width
        magnitude = (1 << (width - 1)) + ((code & 0x0F) >> mantissa_bits)
        exponent = -magnitude if code & 0x10 else magnitude
    mantissa = code & ((1 << mantissa_bits) - 1)
    return (1.0 + mantissa / (1 << mantissa_bits)) * 2.0 ** exponent


@functools.cache
def value_table() -> np.ndarray:
    """The float64 value of every code 0..255."""
    magnitudes = np.array([_decode_magnitude(c) for c in range(128)])
    table = np.concatenate([magnitudes, -magnitudes])
    table[NAN_CODE] = np.nan
    return table


@functools.cache
def _finite_magnitudes() -> tuple[np.ndarray, np.ndarray]:
    """(the non-negative finite values ascending, their codes)."""
    table = value_table()[:128]
    codes = np.array([c for c in range(128) if np.isfinite(table[c])])
    order = np.argsort(table[codes])
    return table[codes][order], codes[order]


def decode(codes) -> np.ndarray:
    """float64 values of uint8 HiFloat8 codes."""
    return value_table()[np.asarray(codes, dtype=np.uint8)]


def encode(values, saturate: bool = True) -> np.ndarray:
    """uint8 HiFloat8 codes of float values: nearest, ties away from zero; see the module doc."""
    values = np.asarray(values, dtype=np.float64)
    magnitude = np.abs(values)
    grid, codes = _finite_magnitudes()
    upper = np.clip(np.searchsorted(grid, magnitude, side="left"), 1, len(grid) - 1)
    low, high = grid[upper - 1], grid[upper]
    with np.errstate(invalid="ignore"):
        take_high = magnitude - low >= high - magnitude            # a tie goes away from zero
    code = np.where(take_high, codes[upper], codes[upper - 1])
    above = magnitude > MAX
    overflow = above if saturate else magnitude >= MAX + 2.0 ** 13
    code = np.where(above, codes[-1], code)                        # 2^15 (0x6E)
    if not saturate:
        code = np.where(overflow, INF_CODE, code)
    code = np.where(code == ZERO_CODE, ZERO_CODE, code | np.where(np.signbit(values), SIGN_BIT, 0))
    return np.where(np.isnan(values), NAN_CODE, code).astype(np.uint8)


def spacing(values) -> np.ndarray:
    """The step between the representable values around |values| (the upper one's, at a
    binade's edge): what one rounding into HiFloat8 can move a value by, at most half of it."""
    grid, _ = _finite_magnitudes()
    magnitude = np.minimum(np.abs(np.asarray(values, dtype=np.float64)), MAX)
    upper = np.clip(np.searchsorted(grid, magnitude, side="right"), 1, len(grid) - 1)
    return grid[upper] - grid[upper - 1]
