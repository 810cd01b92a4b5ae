"""Comparing kernel outputs with the float64 reference: one tolerance table for everything.

Tolerances follow CANN's accuracy standard ("double thousandths" for half types): an
output element passes when

    |out - ref| <= atol + rtol * |ref| + ulp_out(ref) / 2

where ref is the float64 reference computed from the same (already rounded) inputs the
kernel saw, (rtol, atol) come from TOLERANCES by the dtype of the op's data inputs, and
ulp_out is one rounding step of the output's dtype. The last term is the unavoidable final
rounding into the output: a bfloat16 output's own half-ulp (up to 2^-8 relative) exceeds
1e-3, so without it no correctly rounded bf16 result could pass; with it, the kernel's
pre-rounding value must meet the table. For float32 outputs it is ~6e-8 relative and
changes nothing. inf/nan must appear exactly where the reference has them.

An integer output (a quantized result, opgen.dtypes.ALL_INTS) follows the same rule with
ulp_out = 1: its reference is the float64 value *before* the final rounding (saturated to
the dtype's range, as the cast saturates), so the allowance is half a step for the
rounding itself plus the table's (rtol, atol) for the float arithmetic before it. A value
that lies within that float error of a half-way point may round either way and passes
either way; anywhere else the kernel must pick the nearest integer exactly (a floor or a
truncation where the op rounds is off by up to 1 and fails). Integers cannot compare
exactly: CANN's kernel and opgen's evaluate the float math in different orders, so a
value whose float result is a hair from n + 0.5 rounds differently in each.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from opgen.dtypes import BFLOAT16, FLOAT16, FLOAT32, fill_value, numpy_dtype, ulp

TOLERANCES = {  # dtype of the op's data inputs -> (rtol, atol)
    FLOAT32: (1e-4, 1e-4),
    FLOAT16: (1e-3, 1e-3),
    BFLOAT16: (1e-3, 1e-3),
}


@dataclass(frozen=True)
class Comparison:
    """Result of comparing one output: ``ratio`` <= 1 means every element is in tolerance."""

    name: str
    ratio: float          # max over elements of |out - ref| / allowed (0 for empty outputs)
    max_abs_error: float
    worst_index: tuple | None

    @property
    def passed(self) -> bool:
        return bool(self.ratio <= 1.0)


def compare(name: str, out, ref, compute_dtype: str, out_dtype: str) -> Comparison:
    """Compare ``out`` (any float dtype) with the float64 ``ref`` per the module's rule."""
    rtol, atol = TOLERANCES[compute_dtype]
    got = np.asarray(out).astype(np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        raise ValueError(f"{name}: shape {got.shape} != reference {ref.shape}")
    if got.size == 0:
        return Comparison(name, 0.0, 0.0, None)
    special_mismatch = (np.isnan(got) != np.isnan(ref)) | (np.isinf(ref) & (got != ref))
    finite = np.isfinite(ref) & np.isfinite(got)
    allowed = atol + rtol * np.abs(ref) + 0.5 * ulp(ref, out_dtype)
    error = np.abs(np.where(finite, got, 0.0) - np.where(finite, ref, 0.0))  # inf - inf never formed
    ratio = np.where(finite, error / allowed, 0.0)
    ratio = np.where(special_mismatch | (np.isinf(got) & ~np.isinf(ref)), np.inf, ratio)
    worst = int(np.argmax(ratio))
    return Comparison(name, float(ratio.flat[worst]), float(error.max()), np.unravel_index(worst, ref.shape))


def compare_outputs(op, combo, outputs: dict, reference: dict) -> list[Comparison]:
    """Compare every output of ``op`` named in ``outputs`` with ``reference``."""
    compute_dtype = combo[op.inputs[0]]
    return [compare(name, outputs[name], reference[name], compute_dtype, combo[name])
            for name in op.outputs if name in outputs]


def run_and_compare(kernel, problem, rng: np.random.Generator, inputs: dict | None = None):
    """Run ``kernel`` on random (or given) inputs of ``problem``; returns (comparisons, outputs)."""
    op, combo = kernel.op, kernel.combo
    arrays = inputs if inputs is not None else op.random_inputs(problem, combo, rng)
    ref = op.reference(problem, arrays)

    outputs = {name: np.full(ref[name].shape, fill_value(combo[name]), dtype=numpy_dtype(combo[name]))
               for name in op.outputs}
    kernel(op.kernel_args(problem, {**arrays, **outputs}))
    return compare_outputs(op, combo, outputs, ref), outputs
