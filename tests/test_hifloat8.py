"""opgen.hifloat8 against the HiFloat8 definition (arXiv 2409.16626; MindSpore's hifloat8.h):
special codes, the range 2^-22 .. 2^15, the tapered precision per binade, exact round trips,
CANN's CAST_ROUND (ties away from zero) and SAT."""
from __future__ import annotations

import numpy as np

from opgen import hifloat8 as hif8


def test_special_codes_and_the_range():
    table = hif8.value_table()
    assert table[0x00] == 0.0 and np.isnan(table[0x80])
    assert table[0x6F] == np.inf and table[0xEF] == -np.inf
    assert table[0x08] == 1.0 and table[0x88] == -1.0            # MindSpore's true_value 0x08
    assert table[0x6E] == hif8.MAX == 2.0 ** 15 and table[0x01] == hif8.MIN_DENORMAL == 2.0 ** -22
    assert table[0x07] == 2.0 ** -16                              # the largest denormal
    assert np.nanmax(table[np.isfinite(table)]) == 2.0 ** 15


def test_tapered_precision_per_binade():
    """Values per binade: 8 (3 mantissa bits) for |e| <= 3, 4 for 4-7, 2 for 8-15 (one at 15:
    its second code is inf), 1 for each of the 7 denormal binades: 126 positive values."""
    finite = hif8.value_table()[:128]
    finite = finite[np.isfinite(finite) & (finite > 0)]
    exponents, counts = np.unique(np.floor(np.log2(finite)).astype(int), return_counts=True)
    per = dict(zip(exponents.tolist(), counts.tolist()))
    assert finite.size == 126 and len(set(finite.tolist())) == 126
    assert all(per[e] == 1 for e in range(-22, -15))
    assert all(per[e] == 8 for e in range(-3, 4))
    assert all(per[e] == 4 for e in (-7, -4, 4, 7))
    assert all(per[e] == 2 for e in (-15, -8, 8, 14)) and per[15] == 1
    assert set(per) == set(range(-22, -15)) | set(range(-15, 16))


def test_every_finite_code_round_trips():
    table = hif8.value_table()
    codes = np.array([c for c in range(256) if np.isfinite(table[c])], np.uint8)
    assert codes.size == 253
    np.testing.assert_array_equal(hif8.encode(hif8.decode(codes)), codes)


def test_encode_rounds_to_nearest_ties_away_and_saturates():
    values = [1.0625, 1.06, -1.0625, 2.0 ** -23, 2.0 ** -23 * 0.99, 3e4, 5e4, np.inf, -np.inf, -0.0, np.nan]
    assert hif8.encode(values).tolist() == [0x09, 0x08, 0x89, 0x01, 0x00, 0x6E, 0x6E, 0x6E, 0xEE, 0x00, 0x80]
    assert hif8.encode([40959.0, 40960.0, -5e4], saturate=False).tolist() == [0x6E, 0x6F, 0xEF]


def test_spacing_is_the_step_around_a_value():
    assert hif8.spacing([1.0, 1.99, 16.0, 1e-6]).tolist() == [0.125, 0.125, 4.0, 2.0 ** -20]   # 1e-6 lies in [2^-20, 2^-19)
