"""opgen.derive: the symbolic proofs hold, they fail on a wrong TE, and the seed report is right.

The negative tests matter as much as the positive ones: a proof that cannot fail proves
nothing. They mutate the op's own TE while ``SPEC.compute`` builds it (``te.compute`` is
wrapped so one named stage gets one sign flipped), then run the unchanged ``prove`` path.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import sympy
from tvm import te, tirx

from opgen import derive
from opgen.ops import all_ops, get_op

from tiers import tiered


# ----------------------------------------------------------------------------- the proofs hold

def _proved_by_its_own_module(op_name: str) -> bool:
    """An op's own test module (tests/test_op_<name>.py, the scaffold's) proves it with a
    flipped sign beside; the seed ops have none."""
    return (Path(__file__).parent / f"test_op_{op_name}.py").exists()


OP_NAMES = [op.name for op in all_ops()]


# Every op, so an op whose module forgot its proof is still proven; in the default tier only
# those no module of their own proves (the others' proofs run there already).
@pytest.mark.parametrize("op_name", tiered(OP_NAMES, [n for n in OP_NAMES if not _proved_by_its_own_module(n)],
                                           OP_NAMES))
def test_proof_of_the_float32_kernel_holds(op_name):
    report = derive.prove(op_name)
    assert report.ok, report.summary()
    spec = get_op(op_name)
    assert report.cases and all(c.checked > 0 for c in report.cases)
    assert "PROVEN" in report.summary() and spec.name in report.summary()


def test_group_norm_proof_includes_a_single_group_case():
    report = derive.prove("group_norm_backward")
    assert any(c.sizes["G"] == 1 for c in report.cases)
    assert any(c.sizes["G"] > 1 for c in report.cases)


def test_rms_norm_proof_counts_every_output_element():
    report = derive.prove("rms_norm_grad", cases=[(2, 3)])
    (case,) = report.cases
    assert case.sizes == {"rows": 2, "cols": 3}
    assert case.checked == 2 * 3 + 3  # dx and dgamma


@pytest.mark.parametrize("op_name, tag", [("rms_norm_grad", "f16-f16"), ("group_norm_backward", "bf16-bf16")])
def test_low_precision_combos_prove_through_casts(op_name, tag):
    """Casts (and GroupNorm's extra rounding stages) translate to identity: same algebra."""
    report = derive.prove(op_name, tag, cases=[(1, 3)] if op_name == "rms_norm_grad" else [(1, 2, 1, 2)])
    assert report.ok, report.summary()


# ----------------------------------------------------------------------------- mutations fail


@pytest.mark.parametrize("op_name, case, stage, broken, intact", [
    ("rms_norm_grad", (2, 3), "rms_norm_grad_dx", "rms_norm_grad_dx", "rms_norm_grad_dgamma"),
    ("group_norm_backward", (2, 2, 2, 2), "group_norm_backward_c3", "group_norm_backward_dx",
     "group_norm_backward_dgamma_acc"),
    # inside a te.sum: the mutation rebuilds the Reduce node, the translator expands it
    ("group_norm_backward", (2, 2, 2, 2), "group_norm_backward_dgamma_acc",
     "group_norm_backward_dgamma_acc", "group_norm_backward_dx"),
])
def test_a_flipped_sign_in_the_te_fails_the_proof(flip_stage, op_name, case, stage, broken, intact):
    hits = flip_stage(stage)
    report = derive.prove(op_name, cases=[case])
    assert hits, f"stage {stage} was never built"
    assert not report.ok, report.summary()
    bad = report.cases[0].mismatches
    assert any(m.startswith(broken + "[") for m in bad), bad
    assert not any(m.startswith(intact + "[") for m in bad), bad
    assert "MISMATCH" in report.summary()


# ----------------------------------------------------------------------------- the translator

def test_translator_expands_a_reduction_into_symbols():
    n = te.var("n", "int64")
    a = te.placeholder((n, n), "float32", name="a")
    b = te.placeholder((n,), "float32", name="b")
    k = te.reduce_axis((0, n), name="k")
    dot = te.compute((n,), lambda i: te.sum(a[i, k] * b[k], axis=k), name="dot")
    out = te.compute((n,), lambda i: (dot[i] / 2.0).astype("float16"), name="out")
    got = derive.Translator({"n": 2}).element(out, (1,))
    s = derive.make_symbol
    assert sympy.expand(got - (s("a", (1, 0)) * s("b", (0,)) + s("a", (1, 1)) * s("b", (1,))) / 2) == 0


def test_math_intrinsics_translate_exactly():
    """exp, sigmoid, rsqrt and sqrt have an exact sympy meaning (the new ops' forwards)."""
    n = te.var("n", "int64")
    x = te.placeholder((n,), "float32", name="x")
    out = te.compute((n,), lambda i: te.sigmoid(x[i]) + te.exp(x[i]) * te.rsqrt(x[i]) - tirx.sqrt(x[i]), name="o")
    got = derive.Translator({"n": 2}).element(out, (1,))
    v = derive.make_symbol("x", (1,))
    assert sympy.simplify(got - (1 / (1 + sympy.exp(-v)) + sympy.exp(v) / sympy.sqrt(v) - sympy.sqrt(v))) == 0


@pytest.mark.parametrize("body", [
    lambda x, k: te.max(x[k], axis=k),                    # a reducer that is not a sum
    lambda x, k: tirx.tanh(x[0]),                         # an intrinsic without an exact translation
    lambda x, k: x[0].astype("int32").astype("float32"),  # a float -> int cast that truncates
    lambda x, k: te.max(x[0], x[1]).astype("int8").astype("float32"),  # saturation of an unrounded value
])
def test_translator_refuses_what_it_does_not_know(body):
    n = te.var("n", "int64")
    x = te.placeholder((n,), "float32", name="x")
    k = te.reduce_axis((0, n), name="k")
    out = te.compute((1,), lambda i: body(x, k), name="out")
    with pytest.raises(derive.UnsupportedNode):
        derive.Translator({"n": 3}).element(out, (0,))


def test_a_quantizing_stage_translates_its_value_and_a_data_condition_to_a_piecewise():
    """round -> identity, Max/Min -> sympy's, a float -> int8 cast of the rounded value is
    allowed; a condition on an input element is a Piecewise that binding the input decides."""
    n = te.var("n", "int64")
    x = te.placeholder((n,), "float32", name="x")
    mode = te.placeholder((1,), "float32", name="mode")
    out = te.compute((n,), lambda i: te.min(te.max(te.nearbyint(te.if_then_else(mode[0] != 0.0, x[i] * 2.0, x[i])),
                                                   tirx.const(-128.0, "float32")), tirx.const(127.0, "float32"))
                     .astype("int8"), name="q")
    got = derive.Translator({"n": 2}).element(out, (1,))
    v, m = derive.make_symbol("x", (1,)), derive.make_symbol("mode", (0,))
    assert got.xreplace({m: 1}) == sympy.Min(sympy.Max(2 * v, -128), 127)
    assert got.xreplace({m: 0}) == sympy.Min(sympy.Max(v, -128), 127)


def test_translator_refuses_a_size_it_was_not_given():
    n = te.var("n", "int64")
    x = te.placeholder((n,), "float32", name="x")
    with pytest.raises(derive.UnsupportedNode, match="'n'"):
        derive.Translator({}).element(x, (0,))


def test_translator_checks_bounds():
    x = te.placeholder((2,), "float32", name="x")
    with pytest.raises(IndexError):
        derive.Translator({}).element(x, (2,))


# ----------------------------------------------------------------------------- the seeds

def _by_output(checks, op):
    return [c for c in checks if c.op == op]


def test_seed_formulas_report():
    checks = derive.check_seed_formulas()
    rms = {c.output: c for c in _by_output(checks, "rms_norm_grad")}
    assert rms["dx"].matches and rms["dgamma"].matches and all(c.seed == "000" for c in rms.values())

    gn = _by_output(checks, "group_norm_backward")
    assert all(c.seed == "002" for c in gn)
    assert [c.matches for c in gn if c.output in ("dbeta", "dgamma")] == [True, True]
    readings = [c for c in gn if c.output == "dx"]
    printed, no_mean, gamma_outside, corrected = readings
    assert "as printed" in printed.formula and "mean*rstd*gamma" in printed.formula
    assert not printed.matches and "mean" in printed.detail
    assert not no_mean.matches and "N is the batch" in no_mean.detail and "M = D*HW" in no_mean.detail
    assert not gamma_outside.matches and "only when gamma is constant" in gamma_outside.detail
    assert corrected.matches


def test_main_prints_the_report(capsys):
    """``opgen prove``'s report, on the two seed ops (both seed formulas, a DIFFERS reading).
    Every op's own proofs run in test_proof_of_the_float32_kernel_holds or its own module;
    proving all of them again here (26 s) would guard nothing more. What ``main()`` over every
    op adds, an op without a model failing the run, is checked on the registry below."""
    seeds = ["rms_norm_grad", "group_norm_backward"]
    assert derive.main(seeds) == 0
    out = capsys.readouterr().out
    proofs = sum(len(derive.proof_tags(get_op(name))) for name in seeds)
    assert out.count("PROVEN") == proofs >= len(seeds) and "DIFFERS" in out and "[002]" in out and "[000]" in out
    assert [op.name for op in all_ops() if op.model is None] == []     # main() would print UNPROVEN, exit 1
