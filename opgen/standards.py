"""CANN's precision standards, as numbers: what ``opgen compare`` reports for one output.

Three standards, each judged against the float64 reference computed from the same
(already rounded) inputs:

* **double thousandths** (CANN's 双千分之一; 双万分之一 for float32): an element is within
  when ``|out - ref| <= atol + rtol*|ref| + ulp_out(ref)/2`` with rtol = atol = 1e-3
  (f16/bf16 data) or 1e-4 (f32 data), opgen.verify's one tolerance table. The second
  "thousandth" is the share: the standard passes when at most a fraction rtol of the
  elements is outside (99.9% within for half types, 99.99% for f32). The half-ulp term is
  the output dtype's own final rounding (see opgen.verify): a bf16 output's rounding alone
  exceeds 1e-3.
* **MERE / MARE**: mean and max relative error; pass when MERE < T and MARE < 10T, with
  T = 2^-13 (f32), 2^-10 (f16), 2^-7 (bf16) for the output's dtype.
* **double benchmark**: opgen's MARE, MERE and RMSE over the hand-written library's, both
  measured against the reference; level L2 when the ratios are <= 2/1.2/1.2, L1 <= 5/1.5/1.5,
  L0 <= 10/2/2, else none (fails). Errors below the output dtype's unit roundoff count as
  that roundoff on both sides (see benchmark_ratios).

Integer (quantized) outputs. The reference is the float64 value *before* its final
rounding (an op's reference returns it so, saturated to the integer range), and a relative
error is the wrong yardstick: correct rounding alone turns a reference of 0.3 into 0, a
"relative" error of 100% (with the floor below, still ~1: ATen's int8 dx, rounded from its
own float32 dx, had MARE 1.00 on every rms_norm_grad_quant row). So an integer output's MERE
and MARE are its mean and max *absolute* error in steps of the integer against that
unrounded reference, and MM passes when every element is one of the two integers around
the reference (MARE < 1: its correct rounding, or the other neighbour where the float32
value an implementation rounds lies across a .5 from the float64 one, which any float32
implementation does for references within its own error of a tie) and the mean exceeds the
correct rounding's own mean by less than T (2^-7 step for int8): a flip near a tie costs
about nothing on average, a bias does not (truncating instead of rounding adds ~1/4 step).
Not "within 1 of the reference's rounding": that would let a reference of 2.4 come out as
1, 1.4 steps away, which no rounding flip explains.

Relative error near zero. ``|out - ref| / |ref|`` is meaningless where ref is the result
of cancellation: a dx element of 1e-6 on an output of RMS 1 is made of terms of size ~1,
and any float32 implementation (ATen's included) carries an absolute error of a few f32
ulps of those terms, i.e. a "relative" error of 10% there. A bare ``|ref|`` (or a
``|golden| + 1e-7`` denominator, which is no floor at all for outputs of scale 1) makes ATen's
own f32 dx fail MARE (measured below). So the denominator is ``max(|ref|, floor)`` with ``floor = FLOOR * rms(ref)`` (FLOOR = 2^-10): elements
larger than 1/1024 of the output's RMS (99.92% of them for normally distributed outputs)
are judged truly relatively; smaller ones by their absolute error as a fraction of
RMS/1024. Measured on 1024x4096 f32: with no floor both opgen's and ATen's dx have MARE
1.6e-2 / 2.2e-2 (fail); with this floor 4.1e-5 / 3.4e-5 (pass, as f32 math should). This is
scale-invariant (scaling dy scales ref, err and floor alike), and a relative perturbation of
1% still gives MARE and MERE near 1% (measured in tests/test_compare.py).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import ml_dtypes
import numpy as np

from opgen.dtypes import BFLOAT16, FLOAT16, FLOAT32, INT8, int_range, is_integer, numpy_dtype, round_to, ulp
from opgen.verify import TOLERANCES

# int8's T is in steps of the integer: the most its MERE may exceed correct rounding's.
MERE_T = {FLOAT32: 2.0 ** -13, FLOAT16: 2.0 ** -10, BFLOAT16: 2.0 ** -7, INT8: 2.0 ** -7}
LEVELS = (("L2", (2.0, 1.2, 1.2)), ("L1", (5.0, 1.5, 1.5)), ("L0", (10.0, 2.0, 2.0)))  # MARE, MERE, RMSE
FLOOR = 2.0 ** -10  # relative-error denominator floor, as a fraction of the output's RMS
# An integer output's MARE limit, in steps against the unrounded reference: every element
# one of the two integers around it.
INTEGER_MARE = 1.0


@dataclass(frozen=True)
class Errors:
    """One output's errors against the reference (float64 arithmetic throughout)."""

    within: float        # share of elements within the double-thousandths tolerance
    mere: float
    mare: float
    rmse: float
    dt_limit: float      # the share needed (1 - rtol)
    t: float             # MERE threshold T of the output's dtype
    specials_ok: bool    # inf/nan exactly where the reference has them
    u: float = 0.0       # unit roundoff of the output's dtype (the double benchmark's floor)
    ref_rms: float = 0.0
    integer: bool = False  # MERE/MARE in steps of the integer (see the module's docstring)
    rounding_mere: float = 0.0  # an integer output's: the correct rounding's own MERE

    @property
    def dt_pass(self) -> bool:
        return self.specials_ok and self.within >= self.dt_limit

    @property
    def mm_pass(self) -> bool:
        if self.integer:     # one of the two integers around the reference, no bias beyond rounding's
            return self.specials_ok and self.mere < self.rounding_mere + self.t and self.mare < INTEGER_MARE
        return self.specials_ok and self.mere < self.t and self.mare < 10 * self.t

    def as_dict(self, prefix: str = "") -> dict:
        d = {**asdict(self), "dt_pass": self.dt_pass, "mm_pass": self.mm_pass}
        return {prefix + k: v for k, v in d.items()}


def errors(out, ref, data_dtype: str, out_dtype: str) -> Errors:
    """The three standards' raw numbers for one output. ``data_dtype`` picks the double
    thousandths' (rtol, atol); ``out_dtype`` the MERE threshold and the final half ulp."""
    got = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        raise ValueError(f"shape {got.shape} != reference {ref.shape}")
    rtol, atol = TOLERANCES[data_dtype]
    t, u = MERE_T[out_dtype], unit_roundoff(out_dtype)
    if ref.size == 0:
        return Errors(1.0, 0.0, 0.0, 0.0, 1.0 - rtol, t, True, u)
    finite = np.isfinite(ref)
    specials_ok = bool(np.array_equal(np.isnan(got), np.isnan(ref))
                       and np.array_equal(got[np.isinf(ref)], ref[np.isinf(ref)])
                       and np.all(np.isfinite(got[finite])))
    got, ref = got[finite], ref[finite]
    if ref.size == 0:
        return Errors(1.0, 0.0, 0.0, 0.0, 1.0 - rtol, t, specials_ok, u)
    err = np.abs(got - ref)
    allowed = atol + rtol * np.abs(ref) + 0.5 * ulp(ref, out_dtype)
    rms = float(np.sqrt(np.mean(ref * ref)))
    floor = max(FLOOR * rms, np.finfo(np.float64).tiny)
    integer = is_integer(out_dtype)
    rel = err if integer else err / np.maximum(np.abs(ref), floor)   # an integer's: in steps
    rounding = float(np.abs(round_to(ref, out_dtype) - ref).mean()) if integer else 0.0
    return Errors(float(np.mean(err <= allowed)), float(rel.mean()), float(rel.max()),
                  float(np.sqrt(np.mean(err * err))), 1.0 - rtol, t, specials_ok, u, rms, integer, rounding)


def unit_roundoff(dtype: str) -> float:
    """Half the spacing at 1 (2^-24 for f32): the relative error of correct rounding. An
    integer's: half a step relative to its largest value (~2^-8 for int8)."""
    if is_integer(dtype):
        return 0.5 / int_range(dtype)[1]
    return float(ml_dtypes.finfo(numpy_dtype(dtype)).eps) / 2


def _ratio(ours: float, theirs: float, floor: float) -> float:
    """ours / theirs, each raised to ``floor`` first (0/0 = 1 when floor is 0, x/0 = inf)."""
    ours, theirs = max(ours, floor), max(theirs, floor)
    if theirs == 0.0:
        return 1.0 if ours == 0.0 else float("inf")
    return ours / theirs


def benchmark_ratios(ours: Errors, theirs: Errors) -> tuple[float, float, float]:
    """(MARE, MERE, RMSE) ratios of opgen over the library.

    Errors below one unit roundoff u of the finer output dtype (RMSE: u * rms(ref)) count
    as u: that is what correct rounding itself costs, so below it the two sides differ only
    in the last bit of a summation order. Measured: GroupNorm bf16-f32 dbeta (sums of bf16
    values, mostly exact in f32) had MERE 7e-9 (opgen) vs 4e-9 (ATen), a "ratio" of 2 made
    of a handful of last-bit differences, while both are 10^4 below the f32 threshold.
    """
    u = min(ours.u, theirs.u)
    rms_floor = u * ours.ref_rms
    return (_ratio(ours.mare, theirs.mare, u), _ratio(ours.mere, theirs.mere, u),
            _ratio(ours.rmse, theirs.rmse, rms_floor))


def level(ratios: tuple[float, float, float]) -> str | None:
    """The strictest double-benchmark level whose three limits the ratios meet, else None."""
    for name, limits in LEVELS:
        if all(r <= lim for r, lim in zip(ratios, limits)):
            return name
    return None
