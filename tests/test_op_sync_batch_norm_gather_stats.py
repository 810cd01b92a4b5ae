"""aclnnSyncBatchNormGatherStats (opgen.ops.sync_batch_norm_gather_stats): the reference against an
independent float64 formula (the statistics of the ranks' data taken together, counts that
differ per rank and a zero count), the kernel against the reference (edge shapes, every combo),
the aclnn API (every error line of the document literally, the running statistics, no rank, no
channel), the proof and a mutation, the Pythonic function, and the document's C example.
"""
from __future__ import annotations

import numpy as np
import pytest

import opgen
from opgen import acl, aclnn, derive, kernels
from opgen.dtypes import numpy_dtype
from opgen.ops import get_op
from opgen.ops.sync_batch_norm_gather_stats import Problem
from opgen.ops.sync_batch_norm_gather_stats import reference as ref
from opgen.targets import default_target

from aclnn_helpers import assert_matches, base_args, product, run_both
from op_checks import assert_all_pass
from tiers import tiered

OP = get_op("sync_batch_norm_gather_stats")
PRODUCTS = ("Ascend950", "AtlasA3", "AtlasA2")
EPS = 1e-5


def test_reference_is_the_statistics_of_all_ranks_data(rng):
    """Counts that differ per rank (3, 0, 17, 1: one rank empty): the reference equals numpy's
    mean and 1/sqrt(var + eps) of the data concatenated, from the ranks' sums alone."""
    data = [rng.standard_normal((k, 5)) * 1.5 + 0.7 for k in (3, 0, 17, 1)]
    sums = np.array([d.sum(0) for d in data])
    squares = np.array([(d * d).sum(0) for d in data])
    counts = np.array([len(d) for d in data], np.int32)
    mean, invstd = ref.sync_batch_norm_gather_stats(sums, squares, counts, EPS)
    everything = np.concatenate(data)
    np.testing.assert_allclose(mean, everything.mean(0), rtol=1e-12)
    np.testing.assert_allclose(invstd, 1 / np.sqrt(everything.var(0) + EPS), rtol=1e-10)


EDGES = tuple(Problem(w, c) for w in (1, 2, 4, 7) for c in (1, 7, 33, 941)) + (Problem(3, 5, 1e-2),)
KEEP = ("f32-f32", "f16-f32-i32")


@pytest.mark.parametrize("tag", tiered([c.tag for c in OP.combos], KEEP))
def test_kernel_matches_reference_over_edge_shapes(tag, rng):
    """On the default target (llvm): W = 1, 2, 4, 7 ranks (a zero count from 3 on) times
    C = 1, 7, 33, 941 channels, and another eps."""
    kernel = kernels.get_kernel(OP, tag, default_target())
    from opgen.verify import run_and_compare
    for problem in EDGES:
        comparisons, _ = run_and_compare(kernel, problem, rng)
        assert_all_pass(comparisons, f"{tag} {problem}")


def _run(prod, tag, rng, problem=Problem(4, 33)):
    combo = OP.combo(tag)
    with product(prod):
        args, arrays = base_args(OP, problem, combo, rng)
        status, msg = run_both(OP, args)
    assert status == 0, msg
    assert_matches(OP, combo, problem, arrays, args)
    return args


@pytest.mark.parametrize("prod,tag", tiered(
    [(p, c.tag) for p in PRODUCTS for c in OP.products[p]], [("Ascend950", "bf16-f32-i32"), ("AtlasA2", "f32-f32")]))
def test_aclnn_every_combo_of_every_product(prod, tag, rng):
    _run(prod, tag, rng)


def sums(w=3, c=4, dtype=np.float32, out=np.float32, count=np.int32):
    return dict(totalSum=np.ones((w, c), dtype), totalSquareSum=np.full((w, c), 2, dtype),
                sampleCount=np.ones(w, count), mean=np.zeros(c, dtype), variance=np.ones(c, dtype), momentum=0.0,
                eps=EPS, batchMean=np.zeros(c, out), batchInvstd=np.zeros(c, out))


def status_of(prod="Ascend950", args=None, **changes):
    args = dict(sums() if args is None else args)
    args.update(changes)
    with product(prod):
        status, _, _ = aclnn.aclnnSyncBatchNormGatherStatsGetWorkspaceSize(**args)
    return status, acl.aclGetRecentErrMsg() if status else ""


def test_doc_error_lines_literally():
    """Each line of the document's status table (l.243-258), on every product."""
    names = ("totalSum", "totalSquareSum", "sampleCount", "mean", "variance", "batchMean", "batchInvstd")
    for prod in PRODUCTS:
        for name in names:
            status, msg = status_of(prod, **{name: None})
            assert status == 161001 and f"{name} is a null pointer" in msg, (prod, name)
            status, msg = status_of(prod, **{name: np.zeros(np.shape(sums()[name]), np.float64)})
            assert status == 161002 and f"{name} has dtype float64" in msg, (prod, name)
        for name in ("totalSquareSum", "mean", "variance"):             # the constraint line: totalSum's dtype
            status, msg = status_of(prod, **{name: np.zeros(np.shape(sums()[name]), np.float16)})
            assert status == 161002 and "totalSum's" in msg, (prod, name)
        status, msg = status_of(prod, batchInvstd=np.zeros(4, np.float16))
        assert status == 161002 and "batchMean's" in msg
        for name, shape in (("totalSum", (12,)), ("totalSquareSum", (3, 4, 1)), ("sampleCount", (3, 1)),
                            ("mean", (1, 4)), ("variance", ()), ("batchMean", (4, 1)), ("batchInvstd", (1, 4))):
            status, msg = status_of(prod, **{name: np.zeros(shape, sums()[name].dtype)})
            assert status == 161002 and f"{name} has {len(shape)} dimensions" in msg, (prod, name)
        for name, shape in (("totalSquareSum", (3, 5)), ("totalSquareSum", (2, 4)), ("sampleCount", (4,)),
                            ("mean", (5,)), ("variance", (3,)), ("batchMean", (5,)), ("batchInvstd", (3,))):
            status, msg = status_of(prod, **{name: np.zeros(shape, sums()[name].dtype)})
            assert status == 161002 and f"{name} has shape" in msg, (prod, name, msg)
        status, msg = status_of(prod, sums(w=0))
        assert status == 161002 and "first dimension (the ranks) is 0" in msg
    for prod, ok in (("Ascend950", True), ("AtlasA3", False), ("AtlasA2", False)):
        bf16 = {k: (v.astype(numpy_dtype("bfloat16")) if isinstance(v, np.ndarray) and k != "sampleCount" else v)
                for k, v in sums().items()}
        assert (status_of(prod, bf16)[0] == 0) == ok, prod
        assert (status_of(prod, sampleCount=np.ones(3, numpy_dtype("bfloat16")))[0] == 161002)   # not an opgen row
    assert status_of(sampleCount=np.ones(3, np.float16))[0] == 161002      # in CANN's range, not an opgen row (S3)


def test_running_statistics_are_read_only_with_momentum_zero(rng):
    """mean and variance are in-out in CANN; opgen refuses a momentum other than 0 and, with 0
    (no update), leaves them as they are."""
    status, msg = status_of(momentum=0.1)
    assert status == 161002 and "in place" in msg and "batchMean" in msg
    args = sums()
    args.update(mean=np.full(4, 3.0, np.float32), variance=np.full(4, 5.0, np.float32))
    assert run_both(OP, args) == (0, "")
    assert (args["mean"] == 3).all() and (args["variance"] == 5).all()
    np.testing.assert_allclose(args["batchMean"], 1.0)


def test_no_channel_succeeds_with_nothing_to_write():
    """C = 0: the op_api returns success without a kernel (l.275-279)."""
    with product("AtlasA2"):
        assert run_both(OP, sums(c=0)) == (0, "")


def test_doc_c_example():
    """The document's example (l.382-411): one rank, totalSum (300, 400), totalSquareSum
    (300, 400), sampleCount 400 (INT32), eps 1e-5; momentum 1e-1 there, 0 here (opgen does
    not update mean and variance in place). batchMean = (0.75, 1), batchVar = (0.75 - 0.5625, 0)."""
    args = sums(w=1, c=2)
    args.update(totalSum=np.array([[300, 400]], np.float32), totalSquareSum=np.array([[300, 400]], np.float32),
                sampleCount=np.array([400], np.int32), mean=np.full(2, 400, np.float32),
                variance=np.full(2, 400, np.float32))
    with product("AtlasA2"):
        assert run_both(OP, args) == (0, "")
    np.testing.assert_allclose(args["batchMean"], [0.75, 1.0], rtol=1e-6)
    np.testing.assert_allclose(args["batchInvstd"], 1 / np.sqrt(np.array([0.1875, 0.0]) + EPS), rtol=1e-5)


def test_proof_and_document_formulas():
    report = derive.prove("sync_batch_norm_gather_stats")
    assert report.ok, report.summary()
    checks = OP.model.seed_checks()
    assert len(checks) == 2 and all(c.matches for c in checks)


def test_a_flipped_sign_fails_the_proof(flip_stage):
    hits = flip_stage("sync_batch_norm_gather_stats_var32")
    report = derive.prove("sync_batch_norm_gather_stats", cases=[(2, 2, 1)])
    assert hits and not report.ok
    bad = report.cases[0].mismatches
    assert any(m.startswith("sync_batch_norm_gather_stats_batch_invstd[") for m in bad), bad
    assert not any(m.startswith("sync_batch_norm_gather_stats_batch_mean[") for m in bad), bad


def test_pythonic_function(rng):
    problem = Problem(5, 7)
    a = OP.random_inputs(problem, OP.combo("f16-f16-i32"), rng)
    mean, invstd = opgen.sync_batch_norm_gather_stats(a["total_sum"], a["total_square_sum"], a["sample_count"],
                                                      a["mean"], a["variance"])
    assert mean.dtype == np.float32 and mean.shape == (7,)        # float32 statistics from half inputs
    want = OP.reference(problem, a)
    np.testing.assert_allclose(mean.astype(np.float64), want["batch_mean"], rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(invstd.astype(np.float64), want["batch_invstd"], rtol=2e-3, atol=2e-3)
