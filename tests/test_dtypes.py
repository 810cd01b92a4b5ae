"""The dtype seam: integer tensors (int32 inputs, int8 outputs) beside the three floats.

What every op and target relies on: a DtypeCombo may name them, their numpy/CANN/short
spellings, saturating rounding, their fill value, and opgen.verify's rule for an integer
output (half a step for the rounding plus the float tolerance; a floor fails).
"""
from __future__ import annotations

import numpy as np
import pytest

from opgen import dtypes
from opgen.dtypes import FLOAT16, FLOAT32, INT8, INT32
from opgen.ops.spec import DtypeCombo
from opgen.verify import compare


def test_a_combo_names_integer_tensors_and_tags_them():
    combo = DtypeCombo((("x", FLOAT16), ("offset", INT32), ("q", INT8)), key_tensors=("x", "offset", "q"))
    assert combo.tag == "f16-i32-i8"
    with pytest.raises(ValueError, match="unsupported dtype int16"):
        DtypeCombo((("x", "int16"),), key_tensors=("x",))


def test_integer_spellings_round_trip():
    for name, np_type, cann in ((INT32, np.int32, "INT32"), (INT8, np.int8, "INT8")):
        assert dtypes.numpy_dtype(name) == np.dtype(np_type)
        assert dtypes.dtype_name(np_type) == name
        assert dtypes.CANN_NAMES[name] == cann
        assert dtypes.is_integer(name) and not dtypes.is_integer(FLOAT32)


def test_rounding_to_an_integer_is_to_nearest_even_and_saturates():
    values = np.array([-300.0, -128.5, -2.5, -0.5, 0.5, 1.5, 2.4999, 126.5, 127.6, 1e9])
    assert dtypes.round_to(values, INT8).tolist() == [-128, -128, -2, -0, 0, 2, 2, 126, 127, 127]
    assert dtypes.round_to(np.array([3e9]), INT32).tolist() == [2 ** 31 - 1]


def test_an_integer_step_is_one_and_its_fill_is_its_minimum():
    assert dtypes.ulp(np.array([0.0, 5.0, -1e6]), INT8).tolist() == [1.0, 1.0, 1.0]
    assert dtypes.fill_value(INT8) == -128 and dtypes.fill_value(INT32) == -2 ** 31
    assert np.isnan(dtypes.fill_value(FLOAT16))


def test_an_integer_output_passes_its_nearest_integer_and_fails_a_floor():
    # the reference is the value before rounding (saturated): 2.7 -> 3, -2.7 -> -3, 127.9 -> 127
    ref = np.array([2.7, -2.7, 127.0, 0.4])
    assert compare("q", np.array([3, -3, 127, 0], np.int8), ref, FLOAT16, INT8).passed
    floor = compare("q", np.floor(ref).astype(np.int8), ref, FLOAT16, INT8)
    assert not floor.passed and floor.worst_index == (0,)


def test_a_half_way_value_may_round_either_way_within_the_float_tolerance():
    ref = np.array([2.5 + 5e-4, 2.5 - 5e-4])   # within f16's (1e-3, 1e-3) of the tie
    assert compare("q", np.array([2, 3], np.int8), ref, FLOAT16, INT8).passed
    assert not compare("q", np.array([2, 3], np.int8), np.array([2.52, 2.48]), FLOAT16, INT8).passed
