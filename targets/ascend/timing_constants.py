"""The Atlas A2 timing model's constants: one table, each with its source or its range.

Every parameter of the emulation's timing model (emu_timing.h's TimingParams, hardware.py's
``PipeTiming``) is one ``Constant`` row here. ``PipeTiming``'s A2 defaults are read from these
rows, docs/ascend-timing.md carries the table ``markdown_table()`` prints, and
tests/test_ascend_timing_constants.py checks both (and emu_timing.h's compiled-in defaults)
against this one structure, so the code, the header and the docs cannot drift apart.

Why ranges: the model was first validated only against itself (issue 36). Where a public
measurement exists (msKPP's measured 910B curves, pypto's fitted costs, CANN's documents),
the row cites it by repository, path and commit; where two public figures disagree, or none
exists, the row is ``assumed`` and its ``low``..``high`` is what it could plausibly take.
scripts/ascend_timing_ranges.py evaluates the headline ratios at both ends of every range.
"""
from __future__ import annotations

from dataclasses import dataclass

# The public sources, each at the commit its numbers were read from.
MSKPP = "Ascend/mskpp@065b75cc csrc/prof_data/resource910b.cpp"
ASC_DEVKIT = "hicann/asc-devkit@3d7bd0d7 docs/zh/api/附录/Vector指令理论性能汇总.md"
PYPTO_INI = ("hicann/pypto@883e7dfb framework/src/platform/parser/simulation_platform/"
             "platform_config/A2A3.ini")
PYPTO_COST = "hicann/pypto@883e7dfb framework/src/cost_model/simulation/arch/PipeSimulatorFast.cpp"

MEASURED, DOCUMENTED, ASSUMED = "measured", "documented", "assumed"


@dataclass(frozen=True)
class Constant:
    """One timing-model parameter: its value in the model, the range it could take, and why.

    ``basis``: measured (a public measurement gives the value), documented (a Huawei document
    states it) or assumed (nothing public pins it, or public figures disagree). ``low`` and
    ``high`` equal ``value`` where the source leaves no room."""

    field: str          # the PipeTiming / TimingParams field
    value: float
    unit: str
    basis: str
    low: float
    high: float
    source: str
    note: str

    @property
    def ranged(self) -> bool:
        return self.low != self.high


A2 = (
    Constant("clock_hz", 1.8e9, "Hz", DOCUMENTED, 1.8e9, 1.85e9, f"{PYPTO_INI} l.36 (cube_freq=1850, 910B1)",
             "1.8 GHz is the 910B2/A3 9381 clock (ASCEND-NOTES, M); the ini's 910B1 runs 1.85 GHz. "
             "msKPP's curves are read at 1.8 GHz"),
    Constant("mte2_bytes_per_cycle", 46.5, "B/cycle/core", ASSUMED, 43.7, 78.7,
             f"{MSKPP} l.115 GM_TO_UB_910b1 (plateau 78.7 from 32 KB)",
             "the plateau's unit: the header (resource910b.h MovType) says GB/s, i.e. 43.7 B/cycle at "
             "1.8 GHz (46.5 read as GiB/s); msKPP's own mov_prof.py divides bytes by it as B/cycle: 78.7"),
    Constant("mte3_bytes_per_cycle", 65.6, "B/cycle/core", ASSUMED, 61.5, 110.7,
             f"{MSKPP} l.616 UB_TO_GM_910b1 (plateau 110.7)",
             "same unit question as MTE2: 110.7 GB/s = 61.5 B/cycle at 1.8 GHz, 65.6 as GiB/s, 110.7 as "
             "msKPP uses it"),
    Constant("dma_latency", 210, "cycles", ASSUMED, 127, 1400,
             f"{MSKPP} l.115 (1 KB GM->UB at 7.29); {PYPTO_COST} l.378 (rGmLatency 1400, wGmLatency 300)",
             "msKPP's 1 KB point less its streaming time: 127 cycles read as B/cycle, 213 as GiB/s; "
             "pypto's fitted model adds 1400 cycles to a GM read (300 to a write). One latency serves "
             "reads and writes"),
    Constant("gm_bytes_per_cycle", 768, "B/cycle (all cores)", ASSUMED, 222, 889,
             f"{PYPTO_INI} l.65, l.17 (ddr_rate=32, ai_core_cnt=24)",
             "32 x 24 AI cores reads the ini's ddr_rate, whose unit is undocumented, as B/cycle "
             "per AI core (1.38 TB/s at 1.8 GHz); Huawei publishes no 910B HBM figure, third-party "
             "claims span 0.4-1.6 TB/s (222-889 B/cycle)"),
    Constant("vec_head", 2, "cycles/instruction", MEASURED, 1, 2,
             f"{MSKPP} l.1373 VADD_FP32 (1 repeat 3.09 cycles), l.1276 VADDS_FP32 (1 repeat 3.04)",
             "a one-repeat instruction takes ~3 cycles: head 2 with 1 cycle per repeat (VADDS), 1 with "
             "2 per repeat (VADD)"),
    Constant("vec_simple_elems", 256, "B/cycle", ASSUMED, 128, 256,
             f"{ASC_DEVKIT} table 6 (Add/Mul/Adds/Muls float 64, half 128 elements/cycle); {MSKPP} "
             "l.1373 VADD_FP32, l.3435 VMUL_FP32 (127.9 B/cycle), l.1276 VADDS_FP32 (255.4)",
             "the documented 256 B/cycle holds for the scalar forms (Adds, Muls: measured 1 cycle "
             "per repeat); two-operand Add/Mul measure 2 cycles per repeat (128 B/cycle). The model "
             "charges both classes one rate"),
    Constant("vec_slow_elems", 32, "elements/cycle", MEASURED, 16, 32,
             f"{ASC_DEVKIT} table 6 (Exp, Ln, Sqrt, Div 32); {MSKPP} l.2842 VEXP_FP32, l.2882 VLN_FP32, "
             "l.3975 VSQRT_FP32 (127.9 B/cycle = 32 f32/cycle), l.2682 VDIV_FP32 (64.0 B/cycle = 16)",
             "Exp/Ln/Sqrt measure the documented 32; Div measures 16. The model also charges Rsqrt and "
             "Reciprocal here, which table 6 lists at the simple rate"),
    Constant("vec_cast_elems", 64, "elements/cycle", ASSUMED, 64, 128,
             f"{ASC_DEVKIT} table 10 (Cast half<->float 64); {MSKPP} l.2091 VCONV_FP16_FP32, l.2127 "
             "VCONV_FP32_FP16 (32 repeats in 31.2 and 15.6 cycles)",
             "the document says 64 elements/cycle; msKPP measures about 128 (1 cycle per 128 "
             "elements)"),
    Constant("vec_reduce_cycles", 7, "cycles/repeat", ASSUMED, 3, 7,
             f"{ASC_DEVKIT} table 11 (ReduceRepeat float 64/7, half 128/7); {MSKPP} l.1713 "
             "VCADD_FP32 (14 repeats in 42.0 cycles)",
             "the document gives 7 cycles per repeat; msKPP measures 3"),
    Constant("scalar_cycles", 1, "cycles", DOCUMENTED, 1, 1, f"{ASC_DEVKIT} tables 16-17 (1 cycle/instruction)",
             "LocalTensor GetValue/SetValue charged as one scalar instruction"),
    Constant("gm_scalar_cycles", 210, "cycles", ASSUMED, 127, 1400, f"{PYPTO_COST} l.378 (GM read 1400)",
             "GlobalTensor GetValue/SetValue: no public figure; one GM round trip, bounded like "
             "dma_latency"),
    Constant("event_cycles", 1, "cycles", ASSUMED, 1, 50, "Ascend/mskpp@065b75cc mskpp/core/sync_instruction.py "
             "l.99 (set_flag: 1, 'for display only')",
             "no public measurement of SetFlag/WaitFlag; msKPP's 1 is a display value"),
    Constant("barrier_cycles", 1, "cycles", ASSUMED, 1, 50, "none public",
             "PipeBarrier's own cost beyond the wait it imposes"),
    Constant("sync_all_cycles", 3600, "cycles", ASSUMED, 900, 9000, "none public",
             "SyncAll across the cores: 2 us at 1.8 GHz, range 0.5-5 us"),
)

BY_FIELD = {c.field: c for c in A2}


def a2(field: str) -> float:
    """The model's value of ``field`` on Atlas A2 (PipeTiming's defaults read these)."""
    return BY_FIELD[field].value


def _num(x: float) -> str:
    return f"{x:.4g}" if abs(x) < 1e6 else f"{x:.3g}"


def markdown_rows() -> list[str]:
    """One markdown row per constant: what docs/ascend-timing.md carries."""
    rows = ["| constant | value | unit | basis | range | source | note |", "|---|---|---|---|---|---|---|"]
    for c in A2:
        span = f"{_num(c.low)} - {_num(c.high)}" if c.ranged else "-"
        rows.append(f"| `{c.field}` | {_num(c.value)} | {c.unit} | {c.basis} | {span} | {c.source} | {c.note} |")
    return rows


def markdown_table() -> str:
    return "\n".join(markdown_rows())
