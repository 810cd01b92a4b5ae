"""The timing model's constants against their one table (targets/ascend/timing_constants.A2).

tests/test_ascend_timing.py checks that the emulation follows the model's rules; these check
where the model's numbers come from: hardware.py's PipeTiming, emu_timing.h's compiled-in
defaults (the ABI order too) and docs/ascend-timing.md's table all equal the table's rows,
every row cites a public source at a commit or says it is assumed with a range, and the sweep
(scripts/ascend_timing_ranges.py) visits both ends of every range. No g++: text and Python only.
"""
from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from opgen.targets.ascend.hardware import A2_TIMING, DESCRIPTIONS, PipeTiming
from opgen.targets.ascend.timing_constants import A2, ASSUMED, BY_FIELD, DOCUMENTED, MEASURED, markdown_rows

ROOT = Path(__file__).resolve().parents[1]
HEADER = ROOT / "targets" / "ascend" / "emu" / "emu_timing.h"
DOC = ROOT / "docs" / "ascend-timing.md"
PARAMS = [f.name for f in fields(PipeTiming) if f.name != "assumed"]


def header_defaults() -> list[tuple[str, float]]:
    """TimingParams' fields and compiled-in defaults, in declaration order (the set() ABI)."""
    body = re.search(r"struct TimingParams \{(.*?)static constexpr", HEADER.read_text(), re.S).group(1)
    return [(name, float(value)) for name, value in re.findall(r"double (\w+) = ([0-9.e+-]+);", body)]


def test_every_model_parameter_has_exactly_one_row():
    assert [c.field for c in A2] == PARAMS
    assert len(BY_FIELD) == len(A2)


def test_atlas_a2_timing_is_the_table():
    assert A2_TIMING.params() == tuple(float(c.value) for c in A2)
    assert DESCRIPTIONS["AtlasA2"].timing == A2_TIMING and DESCRIPTIONS["AtlasA3"].timing == A2_TIMING
    assert set(A2_TIMING.assumed) == {c.field for c in A2 if c.basis == ASSUMED}


def test_the_emulations_defaults_are_the_table_in_its_order():
    assert header_defaults() == [(c.field, float(c.value)) for c in A2]


def test_the_docs_carry_the_table():
    text = DOC.read_text()
    missing = [row for row in markdown_rows() if row not in text]
    assert not missing, f"docs/ascend-timing.md is out of date (python scripts/ascend_timing_ranges.py --table): {missing[:2]}"


@pytest.mark.parametrize("c", A2, ids=lambda c: c.field)
def test_each_row_is_sourced_or_assumed_with_a_range(c):
    assert c.basis in (MEASURED, DOCUMENTED, ASSUMED)
    assert c.low <= c.value <= c.high, "the model's value lies inside its range"
    assert c.note and c.unit
    if c.basis == ASSUMED:
        assert c.ranged or c.source == "none public", "an assumed constant says what else it could be"
    else:
        assert re.search(r"\w+/[\w.-]+@[0-9a-f]{8} \S+", c.source), "a measured or documented row cites repo@commit path"


def test_the_vector_rates_the_issue_names_are_ranged_over_the_measurement():
    """Issue 36: msKPP measures two-operand Add/Mul at 2 cycles per 256-byte repeat (128 B/cycle)
    where the model charges 1; that measurement is the low end of the row, not dropped."""
    simple = BY_FIELD["vec_simple_elems"]
    assert simple.low == 128 and simple.high == 256 and "VADD_FP32" in simple.source
    assert BY_FIELD["gm_bytes_per_cycle"].basis == ASSUMED


def _sweep_module():
    spec = importlib.util.spec_from_file_location("ascend_timing_ranges", ROOT / "scripts" / "ascend_timing_ranges.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module           # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_sweep_visits_both_ends_of_every_range_and_orients_its_corners():
    sweep = _sweep_module()
    points = dict(sweep.points())
    for c in A2:
        if c.ranged:
            assert points[f"{c.field} low"] == {c.field: c.low} and points[f"{c.field} high"] == {c.field: c.high}
        else:
            assert f"{c.field} low" not in points
    # A ratio that rises with dma_latency and falls with gm_bytes_per_cycle; others flat.
    values = {label: 1.0 for label in points}
    values.update({"dma_latency high": 2.0, "gm_bytes_per_cycle low": 1.5})
    (_, lowering), (_, raising) = sweep.corners(values)
    lat, gm = BY_FIELD["dma_latency"], BY_FIELD["gm_bytes_per_cycle"]
    assert raising == {"dma_latency": lat.high, "gm_bytes_per_cycle": gm.low}
    assert lowering == {"dma_latency": lat.low, "gm_bytes_per_cycle": gm.high}
    assert sweep.Headline("x", 1.0, values).movers(2) == ["dma_latency", "gm_bytes_per_cycle"]
    crossing = {**values, "defaults": 1.1, "dma_latency low": 0.9}
    assert "unknown" in sweep.Headline("x", 1.25, crossing).summary()
    assert "below" in sweep.Headline("x", 2.5, crossing).summary()
    assert "above" in sweep.Headline("x", 0.5, crossing).summary()
