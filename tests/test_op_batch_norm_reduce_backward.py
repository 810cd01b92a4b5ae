"""aclnnBatchNormReduceBackward (opgen.ops.batch_norm_reduce_backward): the reference against
finite differences, the kernel against the reference (every combo, edge shapes), the aclnn
API (every error line of the document literally, the flags, empty calls), the proof and a
mutation, the Pythonic function, and the document's C example.
"""
from __future__ import annotations

import numpy as np
import pytest

import opgen
from opgen import acl, aclnn, derive, kernels
from opgen.ops import get_op
from opgen.ops.batch_norm_reduce_backward import Problem
from opgen.ops.batch_norm_reduce_backward import reference as ref
from opgen.targets import default_target

from aclnn_helpers import assert_matches, base_args, product, run_both
from op_checks import assert_all_pass, assert_gradient, central_difference
from tiers import tiered

OP = get_op("batch_norm_reduce_backward")
PRODUCTS = ("Ascend950", "AtlasA3", "AtlasA2", "AtlasTraining")
OUTS = ("sumDy", "sumDyXmu", "gradWeight", "gradBias")


def test_reference_matches_finite_differences(rng):
    """gradWeight/gradBias are dL/dweight, dL/dbias of L = sum(dy * ((x - mean) * invstd * w + b))
    with mean and invstd constants; sumDyXmu is gradWeight / invstd, sumDy gradBias."""
    x, dy = rng.standard_normal((2, 3, 5)), rng.standard_normal((2, 3, 5))
    mean, invstd = rng.standard_normal(3), rng.uniform(0.5, 2, 3)
    w, b = rng.uniform(0.5, 1.5, 3), rng.standard_normal(3)
    sum_dy, sum_dy_xmu, grad_weight, grad_bias = ref.batch_norm_reduce_backward(dy, x, mean, invstd)
    per = lambda v: v.reshape(1, 3, 1)  # noqa: E731
    loss = lambda w_, b_: float((dy * ((x - per(mean)) * per(invstd) * per(w_) + per(b_))).sum())  # noqa: E731
    assert_gradient("grad_weight", grad_weight, central_difference(lambda v: loss(v, b), w))
    assert_gradient("grad_bias", grad_bias, central_difference(lambda v: loss(w, v), b))
    np.testing.assert_allclose(sum_dy_xmu * invstd, grad_weight)
    np.testing.assert_array_equal(sum_dy, grad_bias)


EDGES = (Problem((1, 1)), Problem((4, 3)), Problem((2, 3, 4, 5)), Problem((3, 7, 33)), Problem((2, 33, 941)),
         Problem((1, 2, 1, 1, 1, 1, 1, 3)), Problem((0, 3, 4)))
KEEP = ("f32-f32", "f16-f32")


@pytest.mark.parametrize("tag", tiered([c.tag for c in OP.combos], KEEP))
def test_kernel_matches_reference_over_edge_shapes(tag, rng):
    """On the default target (llvm): every combo over the edge shapes (one element, a 2-D
    input, odd sizes, a long reduction, 8-D, no batch rows: zeros)."""
    kernel = kernels.get_kernel(OP, tag, default_target())
    from opgen.verify import run_and_compare
    for problem in EDGES:
        comparisons, _ = run_and_compare(kernel, problem, rng)
        assert_all_pass(comparisons, f"{tag} {problem}")


def _run(prod, tag, rng, edit=None, problem=Problem((2, 3, 4, 5)), skip=()):
    combo = OP.combo(tag)
    with product(prod):
        args, arrays = base_args(OP, problem, combo, rng)
        if edit:
            edit(args)
        status, msg = run_both(OP, args)
    assert status == 0, msg
    assert_matches(OP, combo, problem, arrays, args, skip)
    return args


@pytest.mark.parametrize("prod,tag", tiered(
    [(p, c.tag) for p in PRODUCTS for c in OP.products[p]], [("Ascend950", "f32-f32"), ("AtlasTraining", "f16-f32")]))
def test_aclnn_every_combo_of_every_product(prod, tag, rng):
    _run(prod, tag, rng)


@pytest.mark.parametrize("flags", [(False, True, True), (True, False, False), (False, False, False)], ids=str)
def test_flags_leave_outputs_not_asked_for_alone(flags, rng):
    """inputG asks for sumDy and sumDyXmu, weightG for gradWeight, biasG for gradBias (doc
    l.160-182): one not asked for may be null, and a tensor given is not written."""
    asked = dict(zip(OUTS, (flags[0], flags[0], flags[1], flags[2])))
    skip = [k for k, n in zip(OP.outputs, OUTS) if not asked[n]]

    def edit(args):
        args.update(inputG=flags[0], weightG=flags[1], biasG=flags[2])
        for i, n in enumerate(OUTS):
            if not asked[n]:
                args[n] = None if i % 2 else np.full(3, 5.0, np.float32)
    args = _run("AtlasA2", "f32-f32", rng, edit, skip=skip)
    for i, n in enumerate(OUTS):
        if not asked[n] and i % 2 == 0:
            assert (args[n] == 5).all(), n


def red(shape=(2, 3, 4), io=np.float32, stat=np.float32, c=None):
    c = shape[1] if c is None else c
    return dict(gradOut=np.ones(shape, io), input=np.ones(shape, io), mean=np.zeros(c, stat), invstd=np.ones(c, stat),
                weight=np.ones(c, stat), inputG=True, weightG=True, biasG=True,
                **{n: np.zeros(c, stat) for n in OUTS})


def status_of(prod="Ascend950", args=None, **changes):
    args = dict(red() if args is None else args)
    args.update(changes)
    with product(prod):
        status, _, _ = aclnn.aclnnBatchNormReduceBackwardGetWorkspaceSize(**args)
    return status, acl.aclGetRecentErrMsg() if status else ""


def test_doc_error_lines_literally():
    """Each line of the document's status table (l.278-325), on every product."""
    for prod in PRODUCTS:
        for name in ("gradOut", "input", "mean", "invstd"):
            status, msg = status_of(prod, **{name: None})
            assert status == 161001 and f"{name} is a null pointer" in msg
        assert status_of(prod, weight=None)[0] == 0                         # weight is optional
        for name, flag in (("sumDy", "inputG"), ("sumDyXmu", "inputG"), ("gradWeight", "weightG"),
                           ("gradBias", "biasG")):
            assert status_of(prod, **{name: None})[0] == 161001
            assert status_of(prod, **{name: None, flag: False})[0] == 0
            assert status_of(prod, **{name: np.zeros(3, np.float64)})[0] == 161002
            assert status_of(prod, **{name: np.zeros(3, np.float64), flag: False})[0] == 0
            assert status_of(prod, **{name: np.zeros(4, np.float32)})[0] == 161002
        status, msg = status_of(prod, gradOut=np.ones((2, 3, 4), np.float16))
        assert status == 161002 and "gradOut has dtype float16" in msg
        assert status_of(prod, weight=np.ones(3, np.int32))[0] == 161002
        assert status_of(prod, red((2, 3, 1, 1, 1, 1, 1, 1, 4)))[0] == 161002
        flat = np.ones(6, np.float32)
        assert status_of(prod, red((6,), c=1), gradOut=flat, input=flat)[0] == 161002
        status, msg = status_of(prod, red((2, 0, 4), c=0))
        assert status == 161002 and "channel axis" in msg
        assert status_of(prod, mean=np.zeros(4, np.float32))[0] == 161002
        assert status_of(prod, gradOut=np.ones((3, 3, 4), np.float32))[0] == 161002
    assert status_of("AtlasTraining", red(io=np.float32, stat=np.float32), invstd=np.ones(3, "bfloat16"))[0] == 161002


def test_empty_batch_writes_zeros(rng):
    args = red((0, 3, 4))
    for n in OUTS:
        args[n] = np.full(3, 5.0, np.float32)
    with product("AtlasA2"):
        assert run_both(OP, args) == (0, "")
    assert all((args[n] == 0).all() for n in OUTS)


def test_doc_c_example():
    """The document's example (l.494-503): gradOut (4, 2), input 0..7, mean 1, invstd 1."""
    args = red((4, 2))
    args.update(gradOut=np.array([1, 1, 1, 2, 2, 2, 3, 3], np.float32).reshape(4, 2),
                input=np.arange(8, dtype=np.float32).reshape(4, 2), mean=np.ones(2, np.float32))
    with product("AtlasA2"):
        assert run_both(OP, args) == (0, "")
    np.testing.assert_array_equal(args["sumDy"], [7, 8])       # 1+1+2+3, 1+2+2+3
    np.testing.assert_array_equal(args["sumDyXmu"], [21, 30])  # 1*-1 + 1*1 + 2*3 + 3*5, 1*0 + 2*2 + 2*4 + 3*6
    np.testing.assert_array_equal(args["gradWeight"], [21, 30])
    np.testing.assert_array_equal(args["gradBias"], [7, 8])


def test_proof_and_document_formulas():
    report = derive.prove("batch_norm_reduce_backward")
    assert report.ok, report.summary()
    checks = OP.model.seed_checks()
    assert len(checks) == 5 and all(c.matches for c in checks)


def test_a_flipped_sign_fails_the_proof(flip_stage):
    hits = flip_stage("batch_norm_reduce_backward_sum_dy_xmu")
    report = derive.prove("batch_norm_reduce_backward", cases=[(2, 2, 2)])
    assert hits and not report.ok
    bad = report.cases[0].mismatches
    assert any(m.startswith("batch_norm_reduce_backward_grad_weight[") for m in bad), bad
    assert not any(m.startswith("batch_norm_reduce_backward_grad_bias[") for m in bad), bad


def test_pythonic_function(rng):
    problem = Problem((2, 3, 4, 5))
    a = OP.random_inputs(problem, OP.combo("f16-f32"), rng)
    sum_dy, sum_dy_xmu, grad_weight, grad_bias = opgen.batch_norm_reduce_backward(a["dy"], a["x"], a["mean"],
                                                                                  a["invstd"])
    assert sum_dy.dtype == np.float32 and sum_dy.shape == (3,)
    want = OP.reference(problem, a)
    np.testing.assert_allclose(grad_weight, want["grad_weight"], rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(sum_dy_xmu, want["sum_dy_xmu"], rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(grad_bias, want["grad_bias"], rtol=1e-3, atol=1e-3)
    out = opgen.batch_norm_reduce_backward(a["dy"], a["x"], a["mean"], a["invstd"], input_g=False, bias_g=False)
    assert out[0] is None and out[1] is None and out[3] is None and out[2] is not None
