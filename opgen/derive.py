"""Symbolic proofs that each op's TE computes the true gradient of its forward (or, for a
forward op such as rms_norm, the forward's outputs themselves: its model's truth is y and
the statistics, no derivative taken).

Why: the kernels are compiled from TE, so the proof must read that very TE, not a retyped
copy of the formula. opgen.symbolic's ``Translator`` turns every output element of an op's
TE (``SPEC.compute(combo)``) into a sympy expression for small concrete sizes; the op's
package supplies the truth (``SPEC.model``, an opgen.symbolic.ProofModel): its forward in
sympy, L = sum(dy * y), and sympy's derivative of L with respect to every input the op
differentiates. What is symbolic: dy, x, gamma, the kernel's rstd input and eps, all free;
the sizes are concrete. Two bridges join the forward's statistics to the kernel's inputs:
- rstd: the forward's (var + eps)^(-1/2) is replaced, as an exact subtree, by the kernel's
  positive rstd symbol, so (var + eps)^(-3/2) becomes rstd^3 (eps must then be gone: checked).
- mean: the kernel's mean input is bound to the forward's mean of x. The other direction is
  unsound: the true gradient uses sum(x - mean) = 0, true only for the real mean.
Then ``expand(kernel - truth)`` must be 0 for every output element: a polynomial identity,
for every value of rstd.

Every registered op with a model is proven (``opgen prove``; ``--op NAME`` proves only the
ops named); an op without one is reported as unproven, never skipped in silence. Outside
the proof: float rounding (casts are identity); accuracy is the numeric tests' job, algebra
is this module's.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import sympy

from opgen.ops import all_ops, get_op
from opgen.symbolic import (EPS, POSITIVE_INPUTS, SeedCheck, Translator, Truth, UnsupportedNode,  # noqa: F401
                            make_symbol)


@dataclass(frozen=True)
class CaseResult:
    """One concrete size: how many output elements were compared, which differ, and by what."""

    sizes: dict
    checked: int
    mismatches: tuple[str, ...]  # e.g. "rms_norm_grad_dx[0, 1]"
    residual: str = ""           # expand(kernel - truth) of the first mismatch, for diagnosis

    @property
    def ok(self) -> bool:
        return not self.mismatches


@dataclass(frozen=True)
class ProofReport:
    """``prove``'s answer; ``symbolic`` says what the proof covers and what it leaves out."""

    op: str
    combo: str
    cases: tuple[CaseResult, ...]
    symbolic: str = ("dy, x, gamma, rstd (positive), eps symbolic; mean = the forward's; "
                     "sizes concrete; casts = identity (rounding not proven)")

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.cases)

    def summary(self) -> str:
        lines = [f"{self.op} [{self.combo}]: {'PROVEN' if self.ok else 'MISMATCH'} ({self.symbolic})"]
        for c in self.cases:
            shown = ", ".join(c.mismatches[:4]) + (" ..." if len(c.mismatches) > 4 else "")
            lines.append(f"  {c.sizes}: {c.checked} elements, " + (
                "all equal" if c.ok else f"{len(c.mismatches)} differ: {shown}; first: {c.residual[:160]}"))
        return "\n".join(lines)


def _compare(tensor, expected: dict, translator: Translator, bind: dict) -> dict[str, sympy.Expr]:
    """Every element of ``tensor`` against ``expected``; returns the nonzero residuals."""
    if len(expected) != math.prod(translator.shape(tensor)):
        raise ValueError(f"{tensor.name}: truth covers {len(expected)} of {translator.shape(tensor)}")
    bad = {}
    for idx, want in expected.items():
        residual = sympy.expand(translator.element(tensor, idx).xreplace(bind) - want)
        if residual != 0:
            bad[f"{tensor.name}{list(idx)}"] = residual
    return bad


def _without_absent(expected: dict, absent) -> dict:
    """The truth of a variant without the inputs ``absent`` (DtypeCombo.absent): their
    elements are zero (an optional term the variant omits, as a null input means)."""
    if not absent:
        return expected
    pattern = re.compile(rf"({'|'.join(map(re.escape, absent))})(_\d+)+")
    zero = {s: 0 for want in expected.values() for s in want.free_symbols if pattern.fullmatch(s.name)}
    return {idx: want.xreplace(zero) for idx, want in expected.items()}


def proof_tags(spec, base: str | None = None) -> list[str]:
    """The combos a proof covers: ``base`` (None: the model's own, ProofModel.combo) and its
    variants without optional inputs."""
    base = base or spec.model.combo
    combo = spec.combo(base)
    return [base] + [c.tag for c in spec.combos if c.absent and c == combo.without(c.absent)]


def prove(op_name: str, combo_tag: str | None = None, cases=None) -> ProofReport:
    """Translate the op's TE for each case and compare every output with sympy's gradient
    (``combo_tag`` None: the model's own, ProofModel.combo)."""
    spec = get_op(op_name)
    if spec.model is None:
        raise LookupError(f"{op_name} has no forward model (its OpSpec.model): nothing to prove it against")
    combo_tag = combo_tag or spec.model.combo
    combo = spec.combo(combo_tag)
    tensors = spec.compute(combo)
    by_name = dict(zip(spec.kernel_tensors(combo), tensors))
    results = []
    for dims in cases or spec.model.cases:
        sizes, truth = dict(zip(spec.model.extents, dims)), spec.model.truth(*dims)
        translator = Translator(sizes)
        bad, checked = {}, 0
        for out in spec.outputs:
            expected = _without_absent(truth.outputs[out], combo.absent)
            bad.update(_compare(by_name[out], expected, translator, truth.bind))
            checked += len(truth.outputs[out])
        first = str(next(iter(bad.values()))) if bad else ""
        results.append(CaseResult(sizes, checked, tuple(bad), first))
    if spec.model.covers:
        return ProofReport(op_name, combo_tag, tuple(results), spec.model.covers)
    return ProofReport(op_name, combo_tag, tuple(results))


def check_seed_formulas(ops=None) -> list[SeedCheck]:
    """Every formula the documents of ``ops`` (default: every op) print, judged against
    sympy's derivative of the forward."""
    return [check for op in (all_ops() if ops is None else ops)
            if op.model is not None and op.model.seed_checks is not None
            for check in op.model.seed_checks()]


def main(names=None) -> int:
    """``opgen prove [--op NAME ...]``: the proofs of the ops named (every op when none: about
    a minute, so one adding an op proves only that one) and their seed-formula report; 1 if a
    proof fails or an op has no model. The caller checks that the names are registered."""
    ops = all_ops() if not names else [get_op(name) for name in names]
    unproven = [op.name for op in ops if op.model is None]
    reports = [prove(op.name, tag) for op in ops if op.model is not None for tag in proof_tags(op)]
    for report in reports:
        print(report.summary())
    for name in unproven:
        print(f"{name}: UNPROVEN (no forward model in its OpSpec)")
    print("\nseed formulas vs the true gradient:")
    for c in check_seed_formulas(ops):
        print(f"  [{c.seed}] {c.op}.{c.output}: {'matches' if c.matches else 'DIFFERS'}  {c.formula}\n"
              f"        {c.detail}")
    return 0 if all(r.ok for r in reports) and not unproven else 1


if __name__ == "__main__":
    raise SystemExit(main())
