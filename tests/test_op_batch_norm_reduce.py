"""aclnnBatchNormReduce (opgen.ops.batch_norm_reduce): the reference against an independent
float64 formula, the kernel against the reference (every combo, edge shapes, channel-last),
the aclnn API (every error line of the document literally, NHWC, empty calls), the proof and
a mutation, the Pythonic function, and the document's C example.
"""
from __future__ import annotations

import numpy as np
import pytest

import opgen
from opgen import acl, aclnn, derive, kernels
from opgen.ops import get_op
from opgen.ops.batch_norm_backward.api import tagged
from opgen.ops.batch_norm_reduce import Problem
from opgen.ops.batch_norm_reduce import reference as ref
from opgen.targets import default_target

from aclnn_helpers import assert_matches, base_args, product, run_both
from op_checks import assert_all_pass
from tiers import tiered

OP = get_op("batch_norm_reduce")
PRODUCTS = ("Ascend950", "AtlasA3", "AtlasA2")


def test_reference_matches_an_independent_formula(rng):
    """The reference against loops written from the document's formulas (float64, one
    element at a time), NCHW and NHWC."""
    x = rng.standard_normal((2, 3, 4, 5))
    total, squares = ref.batch_norm_reduce(x)
    for i in range(3):
        values = [x[n, i, h, w] for n in range(2) for h in range(4) for w in range(5)]
        assert total[i] == pytest.approx(sum(values), rel=1e-14)
        assert squares[i] == pytest.approx(sum(v * v for v in values), rel=1e-14)
    total_last, squares_last = ref.batch_norm_reduce(np.moveaxis(x, 1, 3), channel_axis=3)
    np.testing.assert_allclose(total_last, total, rtol=1e-14)
    np.testing.assert_allclose(squares_last, squares, rtol=1e-14)


EDGES = (Problem((1, 1, 1, 1)), Problem((1, 7, 1, 1)), Problem((2, 3, 4, 5)), Problem((3, 7, 33, 1)),
         Problem((2, 33, 941, 1)), Problem((1, 2, 7, 941)), Problem((2, 5, 3, 33), True), Problem((1, 1, 1, 941), True),
         Problem((0, 3, 4, 5)), Problem((2, 3, 0, 5)), Problem((2, 0, 4, 5)))
KEEP = ("f32-f32", "f16-f32")


@pytest.mark.parametrize("tag", tiered([c.tag for c in OP.combos], KEEP))
def test_kernel_matches_reference_over_edge_shapes(tag, rng):
    """On the default target (llvm): every combo over the edge shapes (one element, C 1 and 7,
    odd sizes, 33 and 941 long reductions, channel-last, an empty batch, spatial or channel
    axis: zeros, or nothing)."""
    kernel = kernels.get_kernel(OP, tag, default_target())
    from opgen.verify import run_and_compare
    for problem in EDGES:
        comparisons, _ = run_and_compare(kernel, problem, rng)
        assert_all_pass(comparisons, f"{tag} {problem}")


def _run(prod, tag, rng, problem=Problem((2, 3, 4, 5))):
    combo = OP.combo(tag)
    with product(prod):
        args, arrays = base_args(OP, problem, combo, rng)
        status, msg = run_both(OP, args)
    assert status == 0, msg
    assert_matches(OP, combo, problem, arrays, args)
    return args


@pytest.mark.parametrize("prod,tag", tiered(
    [(p, c.tag) for p in PRODUCTS for c in OP.products[p]], [("Ascend950", "f32-f32"), ("AtlasA2", "bf16-f32")]))
def test_aclnn_every_combo_of_every_product(prod, tag, rng):
    _run(prod, tag, rng)


def red(shape=(2, 3, 4, 5), dtype=np.float32, c=None):
    c = shape[1] if c is None else c
    return dict(x=np.ones(shape, dtype), sum=np.zeros(c, np.float32), squareSum=np.zeros(c, np.float32))


def status_of(prod="Ascend950", args=None, **changes):
    args = dict(red() if args is None else args)
    args.update(changes)
    with product(prod):
        status, _, _ = aclnn.aclnnBatchNormReduceGetWorkspaceSize(**args)
    return status, acl.aclGetRecentErrMsg() if status else ""


def test_doc_error_lines_literally():
    """Each line of the document's status table, on every product that offers the op, and
    the products that do not."""
    for prod in PRODUCTS:
        for name in ("x", "sum", "squareSum"):
            status, msg = status_of(prod, **{name: None})
            assert status == 161001 and f"{name} is a null pointer" in msg, (name, msg)
        # the dtypes: x FLOAT32/FLOAT16/BFLOAT16, sum and squareSum FLOAT32
        for dtype in (np.float16, "bfloat16"):
            assert status_of(prod, x=np.ones((2, 3, 4, 5), dtype))[0] == 0
        status, msg = status_of(prod, x=np.ones((2, 3, 4, 5), np.float64))
        assert status == 161002 and "x has dtype float64" in msg
        for name in ("sum", "squareSum"):
            status, msg = status_of(prod, **{name: np.zeros(3, np.float16)})
            assert status == 161002 and f"{name} has dtype float16" in msg, msg
        # the formats: x NCHW (and NHWC, the op_api), the outputs ND
        assert status_of(prod, x=tagged(np.ones((2, 3, 4, 5), np.float32), "NCHW"))[0] == 0
        assert status_of(prod, x=tagged(np.ones((2, 4, 5, 3), np.float32), "NHWC"))[0] == 0
        status, msg = status_of(prod, x=tagged(np.ones((2, 3, 4, 5), np.float32), "FRACTAL_NZ"))
        assert status == 161002 and "x has format FRACTAL_NZ" in msg
        status, msg = status_of(prod, red((2, 3, 4)))          # untagged 3-D: read as NCL
        assert status == 161002 and "x has format NCL" in msg
        status, msg = status_of(prod, x=tagged(np.ones((2, 3, 4), np.float32), "NCHW"))
        assert status == 161002 and "x has 3 dimensions; expected 4" in msg
        assert status_of(prod, sum=tagged(np.zeros(3, np.float32), "NCHW"))[0] == 161002
        # the shapes: sum and squareSum 1-D with x's channel count
        for name in ("sum", "squareSum"):
            status, msg = status_of(prod, **{name: np.zeros(4, np.float32)})
            assert status == 161002 and f"{name} has shape (4,); expected (3,)" in msg, msg
            assert status_of(prod, **{name: np.zeros((1, 3), np.float32)})[0] == 161002
        status, msg = status_of(prod, x=tagged(np.ones((2, 4, 5, 3), np.float32), "NHWC"),
                                sum=np.zeros(4, np.float32), squareSum=np.zeros(4, np.float32))
        assert status == 161002 and "axis 3" in msg                  # NHWC: C is the last axis
    for prod in ("AtlasTraining", "AtlasInference"):
        assert status_of(prod)[0] == 161002


def test_nhwc_sums_over_the_channel_last(rng):
    """An NHWC-tagged x (CheckFormat l.67-71, CheckShape l.102-105): the channel is axis 3."""
    x = rng.standard_normal((2, 4, 5, 3)).astype(np.float32)
    args = red((2, 3, 4, 5))
    args["x"] = tagged(x, "NHWC")
    with product("AtlasA2"):
        assert run_both(OP, args) == (0, "")
    total, squares = ref.batch_norm_reduce(x, channel_axis=3)
    np.testing.assert_allclose(args["sum"], total, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(args["squareSum"], squares, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(0, 3, 4, 5), (2, 3, 0, 5)])
def test_an_empty_x_writes_zeros(shape):
    """An empty x: CANN fills sum and squareSum with zeros (l.186-194); so does opgen."""
    args = red(shape)
    args.update(sum=np.full(3, 5.0, np.float32), squareSum=np.full(3, 5.0, np.float32))
    with product("AtlasA2"):
        assert run_both(OP, args) == (0, "")
    assert (args["sum"] == 0).all() and (args["squareSum"] == 0).all()


def test_doc_c_example():
    """The document's example: x (1, 2, 3, 4) of ones: sum = squareSum = 12 per channel."""
    args = red((1, 2, 3, 4))
    args["x"] = tagged(np.ones((1, 2, 3, 4), np.float32), "NCHW")
    with product("AtlasA2"):
        assert run_both(OP, args) == (0, "")
    np.testing.assert_array_equal(args["sum"], [12, 12])
    np.testing.assert_array_equal(args["squareSum"], [12, 12])


def test_proof_and_document_formulas():
    report = derive.prove("batch_norm_reduce")
    assert report.ok, report.summary()
    checks = OP.model.seed_checks()
    assert [c.matches for c in checks] == [True, True, False]   # the square of the sum is not squareSum


@pytest.fixture
def negate_sum(monkeypatch):
    """Make ``te.compute`` negate the summand of the reduction named ``stage`` (x * x -> -(x * x):
    no Add/Sub there for op_checks.flip_first_sign to flip); returns the list of hits."""
    from tvm import te, tirx

    original = te.compute

    def apply(stage):
        hits = []

        def compute(shape, fcompute, name="compute", *args, **kwargs):
            if name == stage:
                body = fcompute

                def fcompute(*idx):
                    r = body(*idx)
                    hits.append(stage)
                    return tirx.Reduce(r.combiner, [-r.source[0]], r.axis, r.condition, r.value_index, r.init)
            return original(shape, fcompute, name, *args, **kwargs)

        monkeypatch.setattr(te, "compute", compute)
        return hits
    return apply


def test_a_flipped_sign_fails_the_proof(negate_sum):
    hits = negate_sum("batch_norm_reduce_squares")
    report = derive.prove("batch_norm_reduce", cases=[(2, 2, 2)])
    assert hits and not report.ok
    bad = report.cases[0].mismatches
    assert any(m.startswith("batch_norm_reduce_square_sum[") for m in bad), bad
    assert not any(m.startswith("batch_norm_reduce_sum[") for m in bad), bad


def test_pythonic_function(rng):
    problem = Problem((2, 3, 4, 5))
    a = OP.random_inputs(problem, OP.combo("f16-f32"), rng)
    total, squares = opgen.batch_norm_reduce(a["x"])
    assert total.dtype == np.float32 and total.shape == (3,)
    want = OP.reference(problem, a)
    np.testing.assert_allclose(total, want["sum"], rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(squares, want["square_sum"], rtol=1e-5, atol=1e-4)
