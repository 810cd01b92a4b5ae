"""aclnnBatchNormElemtBackward (opgen.ops.batch_norm_elemt_backward): the reference against
finite differences, the kernel against the reference (every combo, edge shapes, counters of
several shapes), the aclnn API (every error line of the document literally, a null weight,
empty calls, the counter's dtypes), the proof and a mutation, the Pythonic function, and the
document's C example.
"""
from __future__ import annotations

import numpy as np
import pytest

import opgen
from opgen import acl, aclnn, derive, kernels
from opgen.ops import get_op
from opgen.ops.batch_norm_elemt_backward import Problem
from opgen.ops.batch_norm_elemt_backward import reference as ref
from opgen.targets import default_target

from aclnn_helpers import assert_matches, base_args, product, run_both
from op_checks import assert_all_pass, assert_gradient, central_difference
from tiers import tiered

OP = get_op("batch_norm_elemt_backward")
PRODUCTS = ("Ascend950", "AtlasA3", "AtlasA2", "AtlasTraining")


def test_reference_matches_finite_differences(rng):
    """With one rank (the counter sums to N x HW) and the reduce half's sums of this batch,
    gradInput is dL/dx of L = sum(dy * ((x - mean(x)) * (var(x) + eps)^-1/2 * w + b)), the
    statistics functions of x; split over two ranks' counts, the same."""
    x, dy = rng.standard_normal((2, 3, 5)), rng.standard_normal((2, 3, 5))
    w, b, eps = rng.uniform(0.5, 1.5, 3), rng.standard_normal(3), 1e-5
    per = lambda v: v.reshape(1, 3, 1)  # noqa: E731

    def loss(x_):
        mean, var = x_.mean(axis=(0, 2)), x_.var(axis=(0, 2))
        return float((dy * ((x_ - per(mean)) / np.sqrt(per(var) + eps) * per(w) + per(b))).sum())
    mean, invstd = x.mean(axis=(0, 2)), 1 / np.sqrt(x.var(axis=(0, 2)) + eps)
    sum_dy, sum_dy_xmu = dy.sum(axis=(0, 2)), (dy * (x - per(mean))).sum(axis=(0, 2))
    for counter in (np.array([10.0]), np.array([[4.0, 6.0]])):
        dx = ref.batch_norm_elemt_backward(dy, x, mean, invstd, w, sum_dy, sum_dy_xmu, counter)
        assert_gradient(f"dx, counter {counter.tolist()}", dx, central_difference(loss, x))


EDGES = (Problem((1, 1)), Problem((4, 3), (4,)), Problem((2, 3, 4, 5), (2, 2)), Problem((3, 7, 33), ()),
         Problem((2, 33, 941), (8,)), Problem((1, 2, 12290), (3,)), Problem((1, 2, 1, 1, 1, 1, 1, 3), (1,) * 8),
         Problem((0, 3, 4)), Problem((2, 3, 0), (2,)))
KEEP = ("f32-f32", "bf16-f32-f16", "f16-f16-i32")


@pytest.mark.parametrize("tag", tiered([c.tag for c in OP.combos], KEEP))
def test_kernel_matches_reference_over_edge_shapes(tag, rng):
    """On the default target (llvm): every combo over the edge shapes (one element, a 2-D
    input, odd sizes, 12290 columns, 8-D, counters 0-D to 8-D, empty batch or spatial axes)."""
    kernel = kernels.get_kernel(OP, tag, default_target())
    from opgen.verify import run_and_compare
    for problem in EDGES:
        comparisons, _ = run_and_compare(kernel, problem, rng)
        assert_all_pass(comparisons, f"{tag} {problem}")


def _run(prod, tag, rng, edit=None, problem=Problem((2, 3, 4, 5), (4,))):
    combo = OP.combo(tag)
    with product(prod):
        args, arrays = base_args(OP, problem, combo, rng)
        if edit:
            edit(args)
            arrays.update({k: args[p] for p, k in (("weight", "weight"),) if args[p] is not None})
        status, msg = run_both(OP, args)
    assert status == 0, msg
    assert_matches(OP, combo, problem, arrays, args)
    return args


@pytest.mark.parametrize("prod,tag", tiered(
    [(p, c.tag) for p in PRODUCTS for c in OP.products[p]],
    [("Ascend950", "f32-f32"), ("AtlasTraining", "f16-f32"), ("AtlasA2", "bf16-f32-i32")]))
def test_aclnn_every_combo_of_every_product(prod, tag, rng):
    _run(prod, tag, rng)


def test_a_null_weight_is_ones(rng):
    """weight is optional (doc l.129-137): null, the op_api fills ones (l.312-315)."""
    problem = Problem((2, 3, 4, 5), (4,))
    combo = OP.combo("f32-f32")
    with product("AtlasA2"):
        args, arrays = base_args(OP, problem, combo, rng)
        args["weight"] = None
        assert run_both(OP, args) == (0, "")
    arrays["weight"] = np.ones(3, np.float32)
    assert_matches(OP, combo, problem, arrays, args)


def elemt(shape=(2, 3, 4), io=np.float32, stat=np.float32, c=None, counter=np.float32):
    c = shape[1] if len(shape) > 1 and c is None else c
    return dict(gradOut=np.ones(shape, io), input=np.ones(shape, io), mean=np.zeros(c, stat),
                invstd=np.ones(c, stat), weight=np.ones(c, stat), sumDy=np.zeros(c, stat),
                sumDyXmu=np.zeros(c, stat), counter=np.full(2, 4, counter), gradInput=np.zeros(shape, io))


def status_of(prod="Ascend950", args=None, **changes):
    args = dict(elemt() if args is None else args)
    args.update(changes)
    with product(prod):
        status, _, _ = aclnn.aclnnBatchNormElemtBackwardGetWorkspaceSize(**args)
    return status, acl.aclGetRecentErrMsg() if status else ""


def test_doc_error_lines_literally():
    """Each line of the document's status table (l.227-256), on every product."""
    for prod in PRODUCTS:
        for name in ("gradOut", "input", "mean", "invstd", "sumDy", "sumDyXmu", "counter", "gradInput"):
            status, msg = status_of(prod, **{name: None})
            assert status == 161001 and f"{name} is a null pointer" in msg, (name, msg)
        assert status_of(prod, weight=None)[0] == 0                          # weight is optional
        for name in ("gradOut", "mean", "invstd", "sumDy", "sumDyXmu", "gradInput"):
            status, msg = status_of(prod, **{name: elemt()[name].astype(np.float64)})
            assert status == 161002 and f"{name} has dtype float64" in msg, (name, msg)
        assert status_of(prod, weight=np.ones(3, np.int32))[0] == 161002      # weight, when non-null
        status, msg = status_of(prod, counter=np.full(2, 4, np.int64))
        assert status == 161002 and "counter has dtype int64" in msg
        assert status_of(prod, elemt((2, 3, 1, 1, 1, 1, 1, 1, 4)))[0] == 161002     # more than 8 dims
        assert status_of(prod, counter=np.ones((1,) * 9, np.float32))[0] == 161002  # the counter too
        assert status_of(prod, counter=np.array(8.0, np.float32))[0] == 0                     # 0-D: no minimum (BE1)
        flat = np.ones(6, np.float32)
        assert status_of(prod, elemt((6,), c=1), gradOut=flat, input=flat, gradInput=flat)[0] == 161002
        status, msg = status_of(prod, elemt((2, 0, 4), c=0))
        assert status == 161002 and "channel axis" in msg
        assert status_of(prod, gradOut=np.ones((3, 3, 4), np.float32))[0] == 161002
        assert status_of(prod, gradInput=np.ones((2, 3, 5), np.float32))[0] == 161002
        for name in ("mean", "invstd", "sumDy", "sumDyXmu", "weight"):
            status, msg = status_of(prod, **{name: np.zeros(4, np.float32)})
            assert status == 161002 and f"{name} has shape (4,)" in msg, (name, msg)
    bf16 = elemt(io="bfloat16", stat=np.float32)
    assert status_of("AtlasTraining", bf16)[0] == 161002
    assert status_of("AtlasA2", bf16)[0] == 0


def test_an_int32_counter_is_summed_in_float32(rng):
    """CANN's INT32 counter (doc l.163; torch's SyncBatchNorm passes its per-rank counts so):
    the counts are widened to float32 and summed, as CANN's Cast then ReduceSum."""
    args = elemt((2, 3, 4))
    args.update(gradOut=rng.standard_normal((2, 3, 4)).astype(np.float32), sumDy=np.full(3, 6.0, np.float32),
                counter=np.array([[3, 5], [4, 4]], np.int32))
    with product("AtlasA2"):
        assert run_both(OP, args) == (0, "")
    want = ref.batch_norm_elemt_backward(args["gradOut"], args["input"], args["mean"], args["invstd"], args["weight"],
                                         args["sumDy"], args["sumDyXmu"], args["counter"])
    np.testing.assert_allclose(args["gradInput"], want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(args["gradInput"], args["gradOut"] - 6.0 / 16, rtol=1e-6, atol=1e-6)


def test_an_empty_input_writes_nothing():
    """An empty gradOut/input returns success without a kernel (l.305-309)."""
    args = elemt((0, 3, 4))
    with product("AtlasA2"):
        assert run_both(OP, args) == (0, "")
    assert args["gradInput"].shape == (0, 3, 4)


def test_doc_c_example():
    """The document's example (l.416-424): gradOut = input = 0..7 as (1, 2, 4), mean 0,
    invstd 1, weight 1, sumDy 0, sumDyXmu 1, counter {5, 5}: gradInput = dy - x / 10."""
    args = elemt((1, 2, 4))
    args.update(gradOut=np.arange(8, dtype=np.float32).reshape(1, 2, 4),
                input=np.arange(8, dtype=np.float32).reshape(1, 2, 4), sumDyXmu=np.ones(2, np.float32),
                counter=np.array([5, 5], np.float32))
    with product("AtlasA2"):
        assert run_both(OP, args) == (0, "")
    np.testing.assert_allclose(args["gradInput"].ravel(), 0.9 * np.arange(8), rtol=1e-6)


def test_proof_and_document_formula():
    report = derive.prove("batch_norm_elemt_backward")
    assert report.ok, report.summary()
    checks = OP.model.seed_checks()
    assert [c.matches for c in checks] == [True, False]   # the counter summed whole; one rank's count is wrong


def test_a_flipped_sign_fails_the_proof(flip_stage):
    hits = flip_stage("batch_norm_elemt_backward_dx")
    report = derive.prove("batch_norm_elemt_backward", cases=[(2, 2, 2, 1)])
    assert hits and not report.ok
    assert report.cases[0].mismatches


def test_pythonic_function(rng):
    problem = Problem((2, 3, 4, 5), (2,))
    a = OP.random_inputs(problem, OP.combo("f16-f32"), rng)
    (dx,) = opgen.batch_norm_elemt_backward(a["dy"], a["x"], a["mean"], a["invstd"], a["weight"], a["sum_dy"],
                                           a["sum_dy_xmu"], a["counter"])
    assert dx.dtype == np.float16 and dx.shape == problem.x_shape
    np.testing.assert_allclose(dx.astype(np.float64), OP.reference(problem, a)["dx"], rtol=2e-3, atol=2e-3)
