"""aclnnRmsNormGradQuant (opgen.ops.rms_norm_grad_quant) against independent truths.

* the reference: RmsNormGrad's (checked against finite differences there) and the
  quantization, whose rounding (half to even) and saturation are pinned by hand-made values;
* the kernel on llvm against the reference over edge shapes (1, 7, 33, 941, 12290 columns,
  ranks 2-8, no rows, empty), both divModes, with and without an offset; every combo of the
  document's table in the extended tier; exact ties built so that half-to-even is visible;
* the aclnn API by literal calls (statuses and messages), the Pythonic function;
* the sympy proof and a mutation (the divMode branches swapped) that must fail it;
* the torch composite peer (opgen compare's) against the reference.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import opgen
from opgen import derive, kernels
from opgen.ops import get_op
from opgen.ops.rms_norm_grad_quant import Problem
from opgen.ops.rms_norm_grad_quant import reference as ref
from opgen.targets import get_target
from opgen.verify import compare_outputs, run_and_compare

from aclnn_helpers import assert_matches, base_args, product, run_both
from op_checks import assert_all_pass
from tiers import covering, tiered

OP = get_op("rms_norm_grad_quant")
TAGS = [c.tag for c in OP.combos]
DEFAULT_TAGS = [c.tag for _, c in covering([(OP, c) for c in OP.combos])]


# ---------------------------------------------------------------------------- the Problem

@pytest.mark.parametrize("text,problem", [
    ("4096x4096", Problem((4096, 4096), 1, True)), ("4x8x64,2,0", Problem((4, 8, 64), 2, False)),
    ("3x5,1,1", Problem((3, 5), 1, True))])
def test_problem_spelling_round_trips(text, problem):
    assert Problem.parse(text) == problem == OP.parse_problem(problem.label())
    assert problem.quantMode == "static"


# ---------------------------------------------------------------------------- the reference

def test_quantize_rounds_half_to_even_and_saturates():
    dx = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 126.5, 127.5, 300.0, -300.0, 2.4])
    assert ref.quantize(dx, np.array([1.0]), None, False).tolist() == [0, 2, 2, 0, -2, 126, 127, 127, -128, 2]
    # divMode divides, the offset is added after the scale, before rounding
    assert ref.quantize(np.array([1.0, -1.0]), np.array([0.25]), np.array([3], np.int32), True).tolist() == [7, -1]
    assert ref.quantize(np.array([1.0, -1.0]), np.array([0.25]), np.array([3], np.int32), False).tolist() == [3, 3]


@pytest.mark.parametrize("seed", range(5))
def test_reference_dx_is_rms_norm_grads_scaled_and_unrounded(seed):
    from opgen.ops.rms_norm_grad.reference import rms_norm_grad

    problem = Problem((64, 256), 1, False)
    arrays = OP.random_inputs(problem, OP.combo("f32-f32-f32-i8"), np.random.default_rng(seed))
    got = OP.reference(problem, arrays)["dx"]
    dx, _ = rms_norm_grad(arrays["dy"], arrays["x"], arrays["rstd"], arrays["gamma"])
    want = np.clip(dx * float(arrays["scales_x"][0]) + int(arrays["offset_x"][0]), -128, 127)
    np.testing.assert_array_equal(got, want)
    assert np.any(np.abs(got) == 127) or np.any(got == -128), "random inputs reach the saturation"
    assert np.any(got != np.rint(got)), "the reference is the value before rounding"


# ------------------------------------------------------------------------ kernels (llvm)

EDGE_PROBLEMS = [
    Problem((1, 1)), Problem((3, 7), 1, False), Problem((2, 1, 33)), Problem((4, 941), 1, False),
    Problem((3, 12290)), Problem((12290, 7), 1, False), Problem((3, 4, 5), 2),
    *[Problem((2, 3, 1, 2, 1, 3, 2, 5), k, bool(k % 2)) for k in (1, 4, 7)],   # dy of 8 dims
]
NO_ROWS = [Problem((0, 16)), Problem((2, 0, 5), 1, False)]


def _cases(problems):
    cases = [(tag, p) for p in problems for tag in TAGS]
    keep = [(tag, p) for tag, p in cases if tag in DEFAULT_TAGS]
    return tiered(cases, keep, ids=[f"{tag}-{p.label()}" for tag, p in cases])


@pytest.mark.parametrize("tag,problem", _cases(EDGE_PROBLEMS))
def test_kernel_matches_reference(tag, problem, rng):
    comparisons, outputs = run_and_compare(kernels.get_kernel(OP, tag, "llvm"), problem, rng)
    assert [c.name for c in comparisons] == ["dx", "dgamma"] and outputs["dx"].dtype == np.int8
    assert_all_pass(comparisons, f"{tag} {problem}")


@pytest.mark.parametrize("tag,problem", _cases(NO_ROWS))
def test_kernel_no_rows_writes_zero_dgamma(tag, problem, rng):
    comparisons, outputs = run_and_compare(kernels.get_kernel(OP, tag, "llvm"), problem, rng)
    np.testing.assert_array_equal(outputs["dgamma"], np.zeros(problem.gamma_shape, np.float32))
    assert outputs["dx"].size == 0
    assert_all_pass(comparisons, f"{tag} {problem}")


@pytest.mark.parametrize("target", ["llvm", pytest.param("ascend-emu", marks=pytest.mark.full)])
@pytest.mark.parametrize("div_mode", [False, True])
def test_kernel_rounds_exact_ties_half_to_even_and_saturates(div_mode, target):
    """x = 0 and rstd = 1 make dx = dy * gamma exactly, so q lands on the halves themselves:
    CANN's CAST_RINT (round half to even) is visible, and one step off fails assert_equal.
    On ascend-emu: the emulated Cast chain (float rint, half, saturating int8)."""
    if not get_target(target).can_run():
        pytest.skip(f"{target} cannot run here: {get_target(target).missing()}")
    dy = np.array([[0.5, 1.5, 2.5, -0.5, -2.5, 126.5, -127.5, 200.0, -300.0, 3.25]], np.float32)
    problem = Problem(dy.shape, 1, div_mode)
    arrays = {"dy": dy, "x": np.zeros_like(dy), "rstd": np.ones(1, np.float32), "gamma": np.ones(10, np.float32),
              "scales_x": np.array([1.0], np.float32), "offset_x": np.array([0], np.int32),
              "div_mode": np.array([1.0 if div_mode else 0.0], np.float32)}
    _, outputs = run_and_compare(kernels.get_kernel(OP, "f32-f32-f32-i8", target), problem, None, inputs=arrays)
    assert outputs["dx"].tolist() == [[0, 2, 2, 0, -2, 126, -128, 127, -128, 3]]


def test_kernel_never_modifies_inputs(rng):
    problem = Problem((5, 3, 40), 2, False)
    arrays = OP.random_inputs(problem, OP.combo("f16-f32-f32-i8"), rng)
    before = {k: v.tobytes() for k, v in arrays.items()}
    run_and_compare(kernels.get_kernel(OP, "f16-f32-f32-i8", "llvm"), problem, rng, inputs=arrays)
    assert {k: v.tobytes() for k, v in arrays.items()} == before


# ----------------------------------------------------------------------- the aclnn API

def _call(problem=Problem((4, 64), 1, True), tag="f16-f32-f32-i8", seed=0):
    combo = OP.combo(tag)
    args, arrays = base_args(OP, problem, combo, np.random.default_rng(seed))
    return args, arrays, combo, problem


def test_a_literal_call_runs_both_phases_and_matches(rng):
    with product("Ascend950"):
        for div_mode in (True, False):
            args, arrays, combo, problem = _call(Problem((4, 2, 64), 1, div_mode))
            status, message = run_both(OP, args)
            assert status == 0, message
            assert args["dxOut"].dtype == np.int8
            assert_matches(OP, combo, problem, arrays, args)


def test_the_documents_c_example():
    """The document's program: ones everywhere, scale 1, offset 0, divMode true: dx 0, dgamma 8."""
    dy = np.ones((8, 64), np.float16)
    args = dict(dy=dy, x=dy.copy(), rstd=np.ones(8, np.float32), gamma=np.ones(64, np.float32),
                scalesX=np.ones(1, np.float32), offsetXOptional=np.zeros(1, np.int32), quantMode="static",
                divMode=True, dxOut=np.full((8, 64), 5, np.int8), dgammaOut=np.zeros(64, np.float32))
    with product("Ascend950"):
        status, message = run_both(OP, args)
    assert status == 0, message
    assert not args["dxOut"].any() and args["dgammaOut"].tolist() == [8.0] * 64


def test_a_null_offset_is_offset_zero():
    with product("Ascend950"):
        args, arrays, combo, problem = _call(Problem((3, 48), 1, False))
        args["offsetXOptional"] = None
        assert run_both(OP, args)[0] == 0
        dx = ref.rms_norm_grad(arrays["dy"], arrays["x"], arrays["rstd"], arrays["gamma"])[0]
        want = ref.scaled(dx, arrays["scales_x"], None, False)
        assert np.all(np.abs(args["dxOut"] - want) <= 0.5 + 1e-3 + 1e-3 * np.abs(want))


@pytest.mark.parametrize("edit,status,words", [
    (lambda a: a.update(dy=None), 161001, "dy is a null pointer"),
    (lambda a: a.update(scalesX=None), 161001, "scalesX is a null pointer"),
    (lambda a: a.update(dxOut=a["dxOut"].astype(np.float16)), 161002, "dxOut has dtype float16; expected int8"),
    (lambda a: a.update(offsetXOptional=a["offsetXOptional"].astype(np.int64)), 161002, "expected int32"),
    (lambda a: a.update(scalesX=a["scalesX"].astype(np.float16)), 161002, "scalesX has dtype float16"),
    (lambda a: a.update(scalesX=np.ones(2, np.float32)), 561002, "scalesX has shape (2,); expected (1,)"),
    (lambda a: a.update(rstd=a["rstd"][:, None]), 561002, "x = rstd's shape followed by gamma's"),
    (lambda a: a.update(quantMode="dynamic"), 561002, "quantMode is 'dynamic'"),
], ids=["null dy", "null scalesX", "f16 dxOut", "int64 offset", "f16 scale with f16 data and f32 gamma",
        "two scales", "keepdim rstd", "dynamic"])
def test_documented_errors_by_literal_calls(edit, status, words):
    """f16 scalesX with f16 dy is a row of the table; with dy f16, gamma f32 it is too (row 8),
    so that case edits dy to float32 first: scale float16 with float32 data is no row."""
    with product("Ascend950"):
        args, *_ = _call()
        if "f16 scale" in words or words.startswith("scalesX has dtype"):
            args.update(dy=args["dy"].astype(np.float32), x=args["x"].astype(np.float32))
        edit(args)
        got, message = run_both(OP, args)
        assert got == status and words in message, message


def test_the_op_is_ascend950_only():
    with product("AtlasA2"):
        args, *_ = _call()
        got, message = run_both(OP, args)
        assert got != 0 and "AtlasA2" in message, message


def test_the_pythonic_function_allocates_int8_dx(rng):
    with product("Ascend950"):
        problem = Problem((3, 40), 1, False)
        arrays = OP.random_inputs(problem, OP.combo("f32-f32-f32-i8"), rng)
        dx, dgamma = opgen.rms_norm_grad_quant(arrays["dy"], arrays["x"], arrays["rstd"], arrays["gamma"],
                                               arrays["scales_x"], arrays["offset_x"], div_mode=False)
        assert dx.dtype == np.int8 and dgamma.dtype == np.float32
        outputs = {"dx": np.asarray(dx), "dgamma": np.asarray(dgamma)}
        assert_all_pass(compare_outputs(OP, OP.combo("f32-f32-f32-i8"), outputs, OP.reference(problem, arrays)),
                        "pythonic")


# --------------------------------------------------------------------- the proof

def test_proof_of_the_float32_kernel_holds():
    report = derive.prove(OP.name, cases=[(2, 3, 1), (2, 3, 0)])
    assert report.ok, report.summary()
    assert {c.sizes["div_mode"] for c in report.cases} == {0, 1}


def test_swapped_div_mode_branches_fail_the_proof(monkeypatch):
    """The kernel multiplies where divMode asks to divide: only dx's elements mismatch."""
    from tvm import te as tvm_te    # opgen.lazy's te reads through to this module

    original = tvm_te.if_then_else
    monkeypatch.setattr(tvm_te, "if_then_else", lambda cond, a, b: original(cond, b, a))
    report = derive.prove(OP.name, cases=[(1, 3, 1)])
    assert not report.ok
    bad = report.cases[0].mismatches
    assert bad and all(m.startswith("rms_norm_grad_quant_dx[") for m in bad), bad


# --------------------------------------------------------------------- the peer

def test_the_torch_composite_peer_matches_the_reference(rng):
    pytest.importorskip("torch")
    from opgen import baselines

    for problem in (Problem((6, 96), 1, True), Problem((6, 96), 1, False)):
        arrays = OP.random_inputs(problem, OP.combo("f32-f32-f32-i8"), rng)
        peer = next(p for p in OP.peers if p.compare)
        out = peer.make(problem, {k: baselines.to_torch(v) for k, v in arrays.items()})()
        got = {k: v.detach().numpy() for k, v in out.items()}
        assert got["dx"].dtype == np.int8 and math.prod(got["dx"].shape) == 6 * 96
        assert_all_pass(compare_outputs(OP, OP.combo("f32-f32-f32-i8"), got, OP.reference(problem, arrays)), "peer")
