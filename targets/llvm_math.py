"""exp in opgen's CPU kernels: a polynomial LLVM vectorizes (Cephes' expf), not a libm call.

TVM lowers ``tirx.exp`` to ``llvm.exp``. With no vector math library, LLVM scalarizes
``llvm.exp.v8f32`` into eight calls of libm's ``expf``. Measured (TVM 0.27, LLVM, znver3,
2 cores): GroupNormSwishGrad's float32 kernel held 30 ``expf@PLT`` calls and spent most of
its time in them: 14.6 ms at (2, 320, 64x64), 2.2 GB/s, slower than torch's eager autograd.

Cephes' expf is a few vector multiply-adds. Reduce by ln 2 in two parts,
r = x - n ln2 with n = round(x / ln2). Then exp(r) = 1 + r + r^2 P(r), with P of degree 5
(by Estrin's scheme: _estrin), and 2^n is built in the exponent bits (as two halves, as n
reaches 128). Outside the float32 range the result is explicit: above ln(FLT_MAX) it is
inf, below ln(FLT_MIN) it is 0 (no denormals, as flush-to-zero would give), and nan gives
nan. Measured against float64 over 2^22 random
float32 values in [-88, 88]: at most 1.02 ulp (libm's expf: 0.50; Horner's rule gave
1.01); tests/test_llvm_math.py holds it to EXP_MAX_ULP. With it GroupNormSwishGrad's kernel
took 9.1 ms at that shape.

Scope: TVM's lowering rules are process-global (``register_intrin_lowering``), so this rule
takes effect only inside ``polynomial_exp()``, which the LLVM target's build enters.
Elsewhere it returns what TVM's own rule gives (``llvm.exp``), so other TVM code in the
process is unaffected. The rule is registered on the first entry, not on import: importing
the targets imports no TVM (opgen.lazy).
"""
from __future__ import annotations

import contextlib
import contextvars
import threading

from opgen.lazy import tirx

EXP_MAX_ULP = 2                          # measured bound (see tests/test_llvm_math.py)
_ACTIVE = contextvars.ContextVar("opgen_polynomial_exp", default=False)

_LOG2E = 1.44269504088896341
_LN2_HI, _LN2_LO = 0.693359375, -2.12194440e-4      # ln 2 = HI + LO, HI exact in 9 bits
_MAX_ARG = 88.72283905206835                          # ln(FLT_MAX): above, exp overflows
_MIN_ARG = -87.33654475055310898657                   # ln(FLT_MIN): below, denormal or 0
_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1,
      5.0000001201e-1)                                # Cephes expf, highest degree first


@contextlib.contextmanager
def polynomial_exp():
    """Within this block, float32 exp lowers to the polynomial (the LLVM target's build)."""
    _register_lowering()
    token = _ACTIVE.set(True)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def _dtype(expr) -> str:
    return str(expr.dtype) if hasattr(expr, "dtype") else str(expr.ty.dtype)


def _with_lanes(dtype: str, scalar: str) -> str:
    """``scalar`` with the lanes of ``dtype`` (float32x8 -> int32x8)."""
    return scalar + dtype[len("float32"):]


def _estrin(r, r2):
    """P(r) by Estrin's scheme: (P0 r + P1) r^4 + (P2 r + P3) r^2 + (P4 r + P5).

    Horner's rule chains five dependent multiply-adds; this evaluates the three pairs at
    once, and the chain from r to P(r) is three multiply-adds deep. In a kernel whose loop
    body is one long dependency chain (GroupNormSwishGrad's sigmoid between two loads and
    an accumulator), the out-of-order window, not the arithmetic, limits throughput, so a
    shorter chain is a faster loop. Measured (2-core znver3 VM, one thread, sigmoid over
    4M float32, interleaved medians of 61, two runs): Horner 0.99-1.05 ns per element,
    Estrin 0.89-0.94; the maximum error over 2^22 arguments went from 1.01 to 1.02 ulp,
    inside EXP_MAX_ULP."""
    low = r * _P[4] + _P[5]
    mid = r * _P[2] + _P[3]
    high = r * _P[0] + _P[1]
    return high * (r2 * r2) + (mid * r2 + low)


def exp_float32(x):
    """The polynomial exp of a float32 (or float32xN) expression."""
    dtype = _dtype(x)
    clamped = tirx.max(tirx.min(x, _MAX_ARG), _MIN_ARG)
    n = tirx.floor(clamped * _LOG2E + 0.5)
    r = clamped - n * _LN2_HI - n * _LN2_LO
    r2 = r * r
    y = _estrin(r, r2) * r2 + r + 1.0
    # 2^n in two halves: n reaches 128 just below ln(FLT_MAX), one past the largest exponent.
    k = n.astype(_with_lanes(dtype, "int32"))
    half = tirx.shift_right(k, 1)
    power = lambda e: tirx.reinterpret(dtype, tirx.shift_left(e + 127, 23))  # noqa: E731
    value = tirx.Select(x > _MAX_ARG, tirx.const(float("inf"), dtype), y * power(half) * power(k - half))
    value = tirx.Select(x < _MIN_ARG, tirx.const(0.0, dtype), value)
    return tirx.Select(tirx.isnan(x), x, value)


def _lower_exp(call):
    """TVM's lowering of ``tirx.exp`` for LLVM while opgen builds, else TVM's own rule."""
    (x,) = call.args
    if _ACTIVE.get() and _dtype(x).split("x")[0] == "float32":
        return exp_float32(x)
    return tirx.call_llvm_pure_intrin(_dtype(call), "llvm.exp", x)


_REGISTERED: list = []
_REGISTER_LOCK = threading.Lock()


def _register_lowering() -> None:
    """Make _lower_exp TVM's lowering of exp for LLVM, once per process."""
    with _REGISTER_LOCK:
        if not _REGISTERED:
            tirx.register_intrin_lowering("tirx.exp", target="llvm", f=_lower_exp, level=99)
            _REGISTERED.append(True)
