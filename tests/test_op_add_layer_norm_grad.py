"""aclnnAddLayerNormGrad (opgen.ops.add_layer_norm_grad): every layer of the op, against independent truths.

* the float64 reference against central finite differences of the float64 forward of Add +
  LayerNorm (with dsum joining at x1 + x2), and against ATen's native_layer_norm_backward;
* the kernel (llvm) against the reference over the edge shapes (1, 7, 33, 941, 12290 columns,
  ranks 1-8, empty tensors) for every dtype combo, with and without dsum (the variant);
* the optional term: a null dsumOptional runs the variant without dsum, which allocates no
  dsum-sized tensor or workspace, and matches the reference; a given one adds its term;
* the aclnn API: the document's C example, each documented error line as a literal call;
* the sympy proof, its variant without dsum, and a flipped sign failing it.
The literal calls below do not read the ApiSpec: the spec is not just checking itself.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from tvm import te

from opgen import aclnn, derive, executor, kernels
from opgen.ops import get_op
from opgen.ops.add_layer_norm_grad import Problem
from opgen.ops.add_layer_norm_grad import reference as ref
from opgen.verify import run_and_compare
from opgen.schedules.llvm import DEFAULT_ROWS_PER_CHUNK

from aclnn_helpers import base_args, phase_one, run_both, assert_matches, product
from op_checks import assert_all_pass, assert_gradient, central_difference, flip_first_sign
from tiers import tiered

OP = get_op("add_layer_norm_grad")
TAGS = [c.tag for c in OP.combos]
DEFAULT_TAGS = ("f32-f32", "f32-f32-nodsum")       # the default tier; the half combos are extended
RANK8 = (2, 3, 1, 2, 1, 3, 2, 5)


# ---------------------------------------------------------------------------- the combos

def test_every_combo_has_a_variant_without_dsum():
    """OpSpec.optional_terms: each of the def's columns, with and without dsum, on every product
    that offers the op; Atlas inference without BFLOAT16; Atlas training not at all."""
    assert TAGS == ["f32-f32", "f32-f32-nodsum", "f16-f32", "f16-f32-nodsum", "bf16-f32", "bf16-f32-nodsum"]
    assert [c.tag for c in OP.products["AtlasInference"]] == TAGS[:4]
    assert "AtlasTraining" not in OP.products
    variant = OP.combo("f32-f32-nodsum")
    assert variant.absent == ("dsum",) and not variant.has("dsum")
    assert OP.kernel_inputs(variant) == ("dy", "x1", "x2", "rstd", "mean", "gamma")
    assert len(OP.compute(variant)) == len(OP.compute(OP.combo("f32-f32"))) - 1


# ------------------------------------------------------------ the reference vs finite differences

@pytest.mark.parametrize("x_shape,gamma_shape", [((3, 5), (5,)), ((2, 3, 4), (3, 4)), ((4, 1), (1,)), ((6,), (6,))])
@pytest.mark.parametrize("with_dsum", [True, False])
def test_reference_matches_finite_differences(x_shape, gamma_shape, with_dsum, rng):
    """dx (for x1 and for x2 alike), dgamma and dbeta are the derivatives of
    L = sum(dy * LayerNorm(x1 + x2)) + sum(dsum * (x1 + x2)), with mean and rstd recomputed in
    the forward (they are the true statistics here)."""
    x1, x2, dy = (rng.standard_normal(x_shape) for _ in range(3))
    dsum = rng.standard_normal(x_shape) if with_dsum else np.zeros(x_shape)
    gamma, beta = rng.uniform(0.5, 1.5, gamma_shape), rng.standard_normal(gamma_shape)
    axes = tuple(range(len(x_shape) - len(gamma_shape), len(x_shape)))

    def forward(a, b, g, be):
        x = a + b
        mean = x.mean(axis=axes, keepdims=True)
        rstd = 1.0 / np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True) + 1e-5)
        return (x - mean) * rstd * g + be, mean, rstd

    _, mean, rstd = forward(x1, x2, gamma, beta)
    dx, dgamma, dbeta = ref.add_layer_norm_grad(dy, x1, x2, rstd, mean, gamma, dsum if with_dsum else None)

    def loss(a=x1, b=x2, g=gamma, be=beta):
        return np.sum(dy * forward(a, b, g, be)[0]) + np.sum(dsum * (a + b))
    assert_gradient("dx (x1)", dx, central_difference(lambda v: loss(a=v), x1))
    assert_gradient("dx (x2)", dx, central_difference(lambda v: loss(b=v), x2))
    assert_gradient("dgamma", dgamma, central_difference(lambda v: loss(g=v), gamma))
    assert_gradient("dbeta", dbeta, central_difference(lambda v: loss(be=v), beta))


def test_reference_agrees_with_aten_for_any_mean_and_rstd():
    """ATen's native_layer_norm_backward on x1 + x2, plus dsum, takes mean/rstd as given, as CANN
    does: a second, independent reference, with statistics that are not x's."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x1, x2, dy, dsum = (rng.standard_normal((4, 3, 6)) for _ in range(4))
    gamma = rng.uniform(0.5, 1.5, (3, 6))
    mean, rstd = rng.standard_normal((4, 1, 1)), rng.uniform(0.2, 2.0, (4, 1, 1))
    ours = ref.add_layer_norm_grad(dy, x1, x2, rstd, mean, gamma, dsum)
    t = torch.from_numpy
    dx, dgamma, dbeta = torch.ops.aten.native_layer_norm_backward(
        t(dy), t(x1 + x2), [3, 6], t(mean), t(rstd), t(gamma), t(np.zeros((3, 6))), [True, True, True])
    for mine, theirs in zip(ours, (dx.numpy() + dsum, dgamma.numpy(), dbeta.numpy())):
        np.testing.assert_allclose(mine, theirs, rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------------ kernels (llvm)

KERNEL_PROBLEMS = [
    Problem((1, 1)),                    # one element per row: x_hat = 0, dx = dsum
    Problem((3, 1, 4)),                 # the document example's shape
    Problem((7, 33)),
    Problem((33, 7)),
    Problem((2, 2, 941)),
    Problem((3, 12290)),                # 12,290 columns
    Problem((12290, 16)),               # 12,290 rows: the column sums
    Problem((3, 4, 5), 2),
    Problem((6,)),                      # dy of one dim: one row
    Problem((2, 3, 4), 3),              # gamma covers every dim of dy: one row
    *[Problem(RANK8, k) for k in (1, 4, 8)],   # dy of 8 dims
]
EMPTY_PROBLEMS = [Problem((3, 0)), Problem((0, 0)), Problem((4, 2, 0), 2)]      # cols = 0: every output empty
NO_ROWS = [Problem((0, 16)), Problem((2, 0, 5))]                                   # rows = 0 (kernel level)


def _cases(problems):
    cases = [(tag, p) for p in problems for tag in TAGS]
    return tiered(cases, [c for c in cases if c[0] in DEFAULT_TAGS], ids=[f"{t}-{p.label()}" for t, p in cases])


@pytest.mark.parametrize("tag,problem", _cases(KERNEL_PROBLEMS))
def test_kernel_matches_reference(tag, problem, rng):
    comparisons, _ = run_and_compare(kernels.get_kernel(OP, tag, "llvm"), problem, rng)
    assert [c.name for c in comparisons] == ["dx", "dgamma", "dbeta"]
    assert_all_pass(comparisons, f"{tag} {problem}")


@pytest.mark.parametrize("tag,problem", _cases(EMPTY_PROBLEMS))
def test_kernel_empty_tensors(tag, problem, rng):
    comparisons, outputs = run_and_compare(kernels.get_kernel(OP, tag, "llvm"), problem, rng)
    assert_all_pass(comparisons, f"{tag} {problem}")
    assert all(v.size == 0 for v in outputs.values())


@pytest.mark.parametrize("tag,problem", _cases(NO_ROWS))
def test_kernel_no_rows_writes_zero_column_sums(tag, problem, rng):
    """No rows: dgamma and dbeta are zeros (outputs start as nan, so unwritten ones fail)."""
    comparisons, outputs = run_and_compare(kernels.get_kernel(OP, tag, "llvm"), problem, rng)
    for name in ("dgamma", "dbeta"):
        np.testing.assert_array_equal(outputs[name], np.zeros(problem.gamma_shape, np.float32), err_msg=name)
    assert_all_pass(comparisons, f"{tag} {problem}")


@pytest.mark.parametrize("name,value", [("x1", np.nan), ("x2", np.inf), ("dy", np.nan), ("dsum", np.inf)])
def test_kernel_propagates_inf_and_nan(name, value, rng):
    """The document: inf in -> inf out, nan in -> nan out, where the reference has them."""
    problem = Problem((4, 37))
    arrays = OP.random_inputs(problem, OP.combo("f32-f32"), rng)
    arrays[name] = arrays[name].copy()
    arrays[name][1, 5] = value
    assert not np.isfinite(OP.reference(problem, arrays)["dx"][1]).all()
    comparisons, _ = run_and_compare(kernels.get_kernel(OP, "f32-f32", "llvm"), problem, rng, inputs=arrays)
    assert_all_pass(comparisons, f"{name}={value}")


# -------------------------------------------------------------- the optional term (the variant)

def _call(problem, tag, rng, dsum=True):
    """A valid call's arguments (dsumOptional given or null) and its input arrays."""
    combo = OP.combo(tag)
    args, arrays = base_args(OP, problem, combo, rng)
    if not dsum:
        args["dsumOptional"] = None
        arrays.pop("dsum", None)
    return args, arrays


@pytest.mark.parametrize("with_dsum", [False, True])
def test_null_dsum_allocates_no_dsum_sized_tensor(with_dsum, rng):
    """The issue's case, 2048x8192 float32: a null dsumOptional once made a 64 MiB tensor of
    zeros. Now the plan runs the variant without dsum: no placement for it, nothing filled, no
    workspace, no plan-owned constant; the kernel takes one tensor fewer. Both calls match the
    float64 reference."""
    problem = Problem((2048, 8192))
    args, arrays = _call(problem, "f32-f32", rng, dsum=with_dsum)
    status, size, ex = phase_one(OP, args)
    assert status == 0
    plan = ex.plan
    assert plan.kernel.combo.tag == ("f32-f32" if with_dsum else "f32-f32-nodsum")
    assert size == 0 and plan.used_bytes == 0
    assert not [p.kernel for p in plan.placements if p.kind in (executor.FILL, executor.STAGE_IN)]
    dsum_sized = [p.kernel for p in plan.placements if math.prod(p.shape) == problem.rows * problem.cols
                  and p.kind != executor.DIRECT]
    assert dsum_sized == []
    # what the plan owns beyond the caller's memory: the column sums' partials only (dgamma's and
    # dbeta's: a row of cols accumulators per chunk of rows, float64 on the CPU (schedules/llvm.py,
    # _widen_sum): 2 x 2 MiB here), not a 64 MiB dsum of zeros
    owned = [p for p in plan.placements if p.kind != executor.DIRECT]
    assert all(p.kind == executor.SCRATCH and p.shape[-1] == problem.cols for p in owned), owned
    chunks = -(-problem.rows // DEFAULT_ROWS_PER_CHUNK)
    partials = 2 * chunks * problem.cols * np.dtype(np.float64).itemsize
    assert sum(p.nbytes for p in owned) <= partials < problem.rows * problem.cols * 4
    assert ("dsum" in [p.kernel for p in plan.placements]) == with_dsum
    assert aclnn.aclnnAddLayerNormGrad(None, 0, ex, None) == 0
    assert_matches(OP, plan.kernel.combo, problem, arrays, args)


def test_null_dsum_equals_zero_dsum_and_adds_nothing(rng):
    """The variant's dx is the full kernel's with dsum = 0, bit for bit on llvm? Not required:
    both within tolerance of the reference, and dx(dsum) - dx(null) == dsum to rounding."""
    problem = Problem((5, 300))
    args, arrays = _call(problem, "f32-f32", rng)
    assert run_both(OP, args)[0] == 0
    with_term = args["dxOut"].copy()
    args["dsumOptional"], args["dxOut"] = None, np.zeros_like(args["dxOut"])
    assert run_both(OP, args)[0] == 0
    np.testing.assert_allclose(with_term - args["dxOut"], arrays["dsum"], rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- the aclnn API

def test_document_example():
    """The document's C example (l.448-505): shapes (3, 1, 4), gamma (4,), FLOAT32, with dsum."""
    f = lambda v, s: np.array(v, np.float32).reshape(s)   # noqa: E731
    dy = f(range(1, 13), (3, 1, 4))
    x1 = f(range(1, 13), (3, 1, 4))
    x2 = f([2, 2, 2, 4, 4, 4, 6, 6, 6, 8, 8, 8], (3, 1, 4))
    rstd, mean, gamma = f([0, 1, 2], (3, 1, 1)), f([0, 1, 2], (3, 1, 1)), f([0, 1, 2, 3], (4,))
    dsum = f(range(1, 13), (3, 1, 4))
    dx, dgamma, dbeta = np.zeros((3, 1, 4), np.float32), np.zeros(4, np.float32), np.zeros(4, np.float32)
    status, size, ex = aclnn.aclnnAddLayerNormGradGetWorkspaceSize(dy, x1, x2, rstd, mean, gamma, dsum, dx, dgamma,
                                                                   dbeta)
    assert status == 0 and size == 0
    assert aclnn.aclnnAddLayerNormGrad(None, size, ex, None) == 0
    want = ref.add_layer_norm_grad(dy, x1, x2, rstd, mean, gamma, dsum)
    for got, w in zip((dx, dgamma, dbeta), want):
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-4)


def _literal(rng, **changes):
    """A literal call of (3, 1, 4) float32 tensors with ``changes`` applied (name -> array or None)."""
    args, _ = _call(Problem((3, 1, 4)), "f32-f32", rng)
    args.update(changes)
    return run_both(OP, args)


@pytest.mark.parametrize("name", ["dy", "x1", "x2", "rstd", "mean", "gamma", "dxOut", "dgammaOut", "dbetaOut"])
def test_null_required_tensor_is_161001(name, rng):
    status, message = _literal(rng, **{name: None})
    assert status == 161001 and name in message


def test_null_dsum_is_valid(rng):
    assert _literal(rng, dsumOptional=None)[0] == 0


@pytest.mark.parametrize("name,dtype", [("dy", np.float64), ("rstd", np.float16), ("dgammaOut", np.float16),
                                        ("dsumOptional", np.float64), ("x2", np.float16), ("dxOut", np.float16)])
def test_dtype_outside_the_def_is_161002(name, dtype, rng):
    args, _ = _call(Problem((3, 1, 4)), "f32-f32", rng)
    status, message = _literal(rng, **{name: args[name].astype(dtype)})
    assert status == 161002 and name in message


def test_bfloat16_on_atlas_inference_is_161002(rng):
    args, _ = _call(Problem((3, 4)), "bf16-f32", rng)
    with product("AtlasInference"):
        status, message = run_both(OP, args)
    assert status == 161002 and "bfloat16" in message


@pytest.mark.parametrize("name,shape", [("x1", (3, 1, 5)), ("dxOut", (3, 4)), ("rstd", (3, 1, 2)),
                                        ("gamma", (3,)), ("dbetaOut", (5,)), ("dsumOptional", (2, 1, 4)),
                                        ("mean", (3, 1))])
def test_shape_mismatch_is_561002(name, shape, rng):
    args, _ = _call(Problem((3, 1, 4)), "f32-f32", rng)
    status, message = _literal(rng, **{name: np.zeros(shape, args[name].dtype)})
    assert status == 561002 and name in message, message


def test_zero_rows_with_outputs_to_write_is_561002(rng):
    z = np.zeros((0, 4), np.float32)
    status, message = _literal(rng, dy=z, x1=z, x2=z, dsumOptional=z, dxOut=z, rstd=np.zeros((0, 1), np.float32),
                               mean=np.zeros((0, 1), np.float32), gamma=np.ones(4, np.float32),
                               dgammaOut=np.zeros(4, np.float32), dbetaOut=np.zeros(4, np.float32))
    assert status == 561002 and "dimension of 0" in message


# ----------------------------------------------------------------------------- the proof

@pytest.mark.parametrize("tag", ["f32-f32", "f32-f32-nodsum"])
def test_proof_holds(tag):
    report = derive.prove("add_layer_norm_grad", tag)
    assert report.ok, report.summary()


def test_proof_tags_cover_the_variant():
    assert derive.proof_tags(OP) == ["f32-f32", "f32-f32-nodsum"]


def test_an_absent_input_is_zero_in_the_truth_and_nothing_else():
    """derive's truth of a variant: the absent input's elements are 0, another input's stay
    (a name that merely starts with it too)."""
    import sympy
    dsum, dy, other = sympy.symbols("dsum_0_1 dy_0_1 dsumx_0")
    assert derive._without_absent({(0,): dsum + dy + other}, ("dsum",)) == {(0,): dy + other}


@pytest.mark.parametrize("tag", ["f32-f32", "f32-f32-nodsum"])
@pytest.mark.parametrize("stage,broken,intact", [
    ("add_layer_norm_grad_dx", {"dx"}, {"dgamma", "dbeta"}),
    ("add_layer_norm_grad_dgamma", {"dgamma"}, {"dx", "dbeta"}),          # x1 + x2 - mean inside te.sum
    ("add_layer_norm_grad_sum_gxc", {"dx"}, {"dgamma", "dbeta"}),         # the row sum feeding c2
])
def test_a_flipped_sign_fails_the_proof(monkeypatch, tag, stage, broken, intact):
    original, hits = te.compute, []

    def compute(shape, fcompute, name="compute", *args, **kwargs):
        if name == stage:
            body = fcompute

            def fcompute(*idx):
                flipped = flip_first_sign(body(*idx))
                assert flipped is not None, f"no Add/Sub in {stage}"
                hits.append(stage)
                return flipped
        return original(shape, fcompute, name, *args, **kwargs)
    monkeypatch.setattr(te, "compute", compute)
    report = derive.prove("add_layer_norm_grad", tag, cases=[(2, 2)])
    assert hits and not report.ok and "MISMATCH" in report.summary()
    outputs = {m.split("[")[0].removeprefix("add_layer_norm_grad_") for m in report.cases[0].mismatches}
    assert outputs == broken and not outputs & intact


def test_the_documents_formulas():
    checks = derive.check_seed_formulas([get_op("add_layer_norm_grad")])   # this op's alone (every op's: tests/test_derive.py)
    assert [(c.output, c.matches) for c in checks] == [("dx", True), ("dgamma", True), ("dbeta", True)]


# ------------------------------------------------------------- Pythonic and torch

@pytest.mark.parametrize("with_dsum", [False, True])
def test_pythonic_function_allocates_and_matches(with_dsum, rng):
    import opgen

    problem = Problem((4, 3, 16))
    arrays = OP.random_inputs(problem, OP.combo("f16-f32"), rng)
    if not with_dsum:
        arrays.pop("dsum")
    dx, dgamma, dbeta = opgen.add_layer_norm_grad(*(arrays[k] for k in ("dy", "x1", "x2", "rstd", "mean", "gamma")),
                                                  arrays.get("dsum"))
    want = OP.reference(problem, arrays)
    assert (dx.dtype, dgamma.dtype, dbeta.dtype) == (np.float16, np.float32, np.float32)
    for name, got in (("dx", dx), ("dgamma", dgamma), ("dbeta", dbeta)):
        np.testing.assert_allclose(got, want[name], rtol=2e-3, atol=2e-3, err_msg=name)
