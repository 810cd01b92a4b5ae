"""aclnnBatchNormElemt (opgen.ops.batch_norm_elemt): the reference against an independent
float64 formula, the kernel against the reference (every combo, edge shapes), the aclnn API
(every error line of the document literally, null weight and bias, empty calls), the proof and
a mutation, the Pythonic function, and the document's C example.
"""
from __future__ import annotations

import numpy as np
import pytest

import opgen
from opgen import acl, aclnn, derive, kernels
from opgen.ops import get_op
from opgen.ops.batch_norm_backward.api import tagged
from opgen.ops.batch_norm_elemt import Problem
from opgen.ops.batch_norm_elemt import reference as ref
from opgen.targets import default_target

from aclnn_helpers import assert_matches, base_args, product, run_both
from op_checks import assert_all_pass
from tiers import tiered

OP = get_op("batch_norm_elemt")
PRODUCTS = ("Ascend950", "AtlasA3", "AtlasA2", "AtlasTraining")


def test_reference_matches_an_independent_formula(rng):
    """The reference against the document's formula one element at a time: the statistics of
    the batch itself, 1/sqrt(Var + eps) as invstd (so y has per-channel mean bias and standard
    deviation weight, up to eps), and a loop over the elements of a 3-D input."""
    x = rng.standard_normal((2, 3, 4, 5)) * 3 + 1
    mean, var, eps = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3)), 1e-5
    w, b = rng.uniform(0.5, 1.5, 3), rng.standard_normal(3)
    y = ref.batch_norm_elemt(x, w, b, mean, 1 / np.sqrt(var + eps))
    np.testing.assert_allclose(y.mean(axis=(0, 2, 3)), b, atol=1e-12)
    np.testing.assert_allclose(y.std(axis=(0, 2, 3)), w * np.sqrt(var / (var + eps)), rtol=1e-12)
    x3 = rng.standard_normal((2, 3, 7))
    invstd = rng.uniform(0.5, 2, 3)
    y3 = ref.batch_norm_elemt(x3, w, b, mean, invstd)
    for n, c, i in np.ndindex(*x3.shape):
        assert y3[n, c, i] == pytest.approx((x3[n, c, i] - mean[c]) / (1 / invstd[c]) * w[c] + b[c], rel=1e-13)


EDGES = (Problem((1, 1)), Problem((4, 3)), Problem((1, 7, 1)), Problem((2, 3, 4, 5)), Problem((3, 7, 33)),
         Problem((2, 33, 941)), Problem((1, 2, 12290)), Problem((1, 2, 1, 1, 1, 1, 1, 3)), Problem((0, 3, 4)),
         Problem((2, 3, 0)))
KEEP = ("f32-f32", "f16-f32", "bf16-bf16")


@pytest.mark.parametrize("tag", tiered([c.tag for c in OP.combos], KEEP))
def test_kernel_matches_reference_over_edge_shapes(tag, rng):
    """On the default target (llvm): every combo over the edge shapes (one element, a 2-D input,
    C 7 and 33, 941 and 12290 columns, 8-D, an empty batch or spatial axis)."""
    kernel = kernels.get_kernel(OP, tag, default_target())
    from opgen.verify import run_and_compare
    for problem in EDGES:
        comparisons, _ = run_and_compare(kernel, problem, rng)
        assert_all_pass(comparisons, f"{tag} {problem}")


def _run(prod, tag, rng, edit=None, problem=Problem((2, 3, 4, 5))):
    combo = OP.combo(tag)
    with product(prod):
        args, arrays = base_args(OP, problem, combo, rng)
        if edit:
            edit(args, arrays)
        status, msg = run_both(OP, args)
    assert status == 0, msg
    assert_matches(OP, combo, problem, arrays, args)
    return args


@pytest.mark.parametrize("prod,tag", tiered(
    [(p, c.tag) for p in PRODUCTS for c in OP.products[p]],
    [("Ascend950", "f32-f32"), ("AtlasTraining", "f16-f32"), ("AtlasA2", "bf16-f32")]))
def test_aclnn_every_combo_of_every_product(prod, tag, rng):
    _run(prod, tag, rng)


@pytest.mark.parametrize("null", [("weight",), ("bias",), ("weight", "bias")], ids="+".join)
def test_null_weight_and_bias_are_ones_and_zeros(null, rng):
    """weight and bias may be null (the doc's C example passes both so): the op_api fills ones
    and zeros (l.160-169)."""
    def edit(args, arrays):
        for name in null:
            args[name] = None
            arrays[name] = np.full(3, 1.0 if name == "weight" else 0.0, np.float32)
    _run("AtlasA2", "f32-f32", rng, edit)


def elemt(shape=(2, 3, 4), io=np.float32, stat=np.float32, c=None):
    c = shape[1] if len(shape) > 1 and c is None else c
    return dict(input=np.ones(shape, io), weight=np.ones(c, stat), bias=np.zeros(c, stat), mean=np.zeros(c, stat),
                invstd=np.ones(c, stat), eps=1e-5, output=np.zeros(shape, io))


def status_of(prod="Ascend950", args=None, **changes):
    args = dict(elemt() if args is None else args)
    args.update(changes)
    with product(prod):
        status, _, _ = aclnn.aclnnBatchNormElemtGetWorkspaceSize(**args)
    return status, acl.aclGetRecentErrMsg() if status else ""


def test_doc_error_lines_literally():
    """Each line of the document's status table (l.214-242), on every product."""
    for prod in PRODUCTS:
        for name in ("input", "mean", "invstd", "output"):      # 161002: CheckNotNull under PARAM_INVALID (EL1)
            status, msg = status_of(prod, **{name: None})
            assert status == 161002 and f"{name} is a null pointer" in msg, (name, msg)
        assert status_of(prod, weight=None, bias=None)[0] == 0     # weight and bias are optional
        for name in ("input", "weight", "bias", "mean", "invstd", "output"):
            status, msg = status_of(prod, **{name: elemt()[name].astype(np.float64)})
            assert status == 161002 and f"{name} has dtype float64" in msg, (name, msg)
        status, msg = status_of(prod, input=tagged(np.ones((2, 3, 4), np.float32), "FRACTAL_NZ"),
                                output=tagged(np.zeros((2, 3, 4), np.float32), "FRACTAL_NZ"))
        assert status == 161002 and "input has format FRACTAL_NZ" in msg
        status, msg = status_of(prod, elemt((2, 3, 4, 5)), output=tagged(np.zeros((2, 3, 4, 5), np.float32), "NCDHW"))
        assert status == 161002 and "output has format NCDHW; expected input's ND" in msg
        assert status_of(prod, elemt((2, 3, 4, 5)), output=tagged(np.zeros((2, 3, 4, 5), np.float32), "NCHW"))[0] == 0
        flat = np.ones(6, np.float32)
        status, msg = status_of(prod, elemt((6,), c=1), input=flat, output=flat)
        assert status == 161002 and "input has 1 dimensions" in msg
        assert status_of(prod, elemt((2, 3, 1, 1, 1, 1, 1, 1, 4)))[0] == 161002      # more than 8 dims
        assert status_of(prod, elemt((2, 3, 1, 1, 1, 1, 1, 4)))[0] == 0                # 8 dims
        status, msg = status_of(prod, elemt((2, 0, 4), c=0))
        assert status == 161002 and "channel axis" in msg
        for name in ("weight", "bias", "mean", "invstd"):
            status, msg = status_of(prod, **{name: np.zeros(4, np.float32)})
            assert status == 161002 and f"{name} has shape (4,)" in msg, (name, msg)
        assert status_of(prod, mean=np.zeros((1, 3), np.float32))[0] == 161002
        status, msg = status_of(prod, output=np.zeros((3, 3, 4), np.float32))
        assert status == 161002 and "output has shape (3, 3, 4)" in msg
        status, msg = status_of(prod, output=np.zeros((2, 3, 4), np.float16))
        assert status == 161002 and "not consistent" in msg
        assert status_of(prod, mean=np.zeros(3, np.float16))[0] == 161002               # the statistics alike
        assert status_of(prod, elemt(io=np.float16, stat=np.float32))[0] == 0           # input's or float32
    bf16 = elemt(io="bfloat16", stat=np.float32)
    assert status_of("AtlasTraining", bf16)[0] == 161002
    assert status_of("AtlasA2", bf16)[0] == 0
    for prod in ("AtlasInference",):
        assert status_of(prod)[0] == 161002


def test_nhwc_is_refused():
    """The doc's formats are NC, NCL, NCHW, NCDHW and ND; the op_api lets NHWC through while
    reading the channel from axis 1 (EL4): opgen refuses it."""
    status, msg = status_of(input=tagged(np.ones((2, 3, 4, 5), np.float32), "NHWC"),
                            output=tagged(np.zeros((2, 3, 4, 5), np.float32), "NHWC"))
    assert status == 161002 and "input has format NHWC" in msg


def test_an_empty_input_writes_nothing():
    """An empty input (C > 0) returns success without a kernel (l.138-142)."""
    args = elemt((0, 3, 4))
    with product("AtlasA2"):
        assert run_both(OP, args) == (0, "")
    assert args["output"].shape == (0, 3, 4)


def test_doc_c_example():
    """The document's example (l.380-395, l.417): input 0..15 as (2, 4, 2), mean (1, 2, 3, 4),
    invstd (5, 6, 7, 8), weight and bias null, eps 1e-2: y = (x - mean) * invstd."""
    args = elemt((2, 4, 2))
    args.update(input=np.arange(16, dtype=np.float32).reshape(2, 4, 2), weight=None, bias=None,
                mean=np.array([1, 2, 3, 4], np.float32), invstd=np.array([5, 6, 7, 8], np.float32), eps=1e-2)
    with product("AtlasA2"):
        assert run_both(OP, args) == (0, "")
    want = (np.arange(16).reshape(2, 4, 2) - np.array([1, 2, 3, 4])[None, :, None]) * np.array([5, 6, 7, 8])[None, :, None]
    np.testing.assert_array_equal(args["output"], want)


def test_proof_and_document_formula():
    report = derive.prove("batch_norm_elemt")
    assert report.ok, report.summary()
    checks = OP.model.seed_checks()
    assert [c.matches for c in checks] == [True, True, False]   # invstd read as the standard deviation is wrong


def test_a_flipped_sign_fails_the_proof(flip_stage):
    hits = flip_stage("batch_norm_elemt_y")
    report = derive.prove("batch_norm_elemt", cases=[(2, 2, 2)])
    assert hits and not report.ok
    assert report.cases[0].mismatches


def test_pythonic_function(rng):
    problem = Problem((2, 3, 4, 5))
    a = OP.random_inputs(problem, OP.combo("f16-f32"), rng)
    (y,) = opgen.batch_norm_elemt(a["x"], a["weight"], a["bias"], a["mean"], a["invstd"])
    assert y.dtype == np.float16 and y.shape == problem.x_shape
    np.testing.assert_allclose(y.astype(np.float64), OP.reference(problem, a)["y"], rtol=2e-3, atol=2e-3)
    (y,) = opgen.batch_norm_elemt(a["x"], None, None, a["mean"], a["invstd"], 1e-5)
    want = ref.batch_norm_elemt(a["x"], np.ones(3), np.zeros(3), a["mean"], a["invstd"])
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=2e-3, atol=2e-3)
