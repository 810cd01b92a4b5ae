"""aclnnBatchNormGatherStatsWithCounts (opgen.ops.batch_norm_gather_stats_with_counts): the reference
against an independent float64 formula (the statistics of the ranks' data taken together, counts
that differ per rank and a zero count), the kernel against the reference (edge shapes, every
combo), the aclnn API (every error line of the document literally, the running statistics, an
empty call), the proof and a mutation, the Pythonic function, and the document's C example.
"""
from __future__ import annotations

import numpy as np
import pytest

import opgen
from opgen import acl, aclnn, derive, kernels
from opgen.ops import get_op
from opgen.ops.batch_norm_gather_stats_with_counts import Problem
from opgen.ops.batch_norm_gather_stats_with_counts import reference as ref
from opgen.targets import default_target

from aclnn_helpers import assert_matches, base_args, product, run_both
from op_checks import assert_all_pass
from tiers import tiered

OP = get_op("batch_norm_gather_stats_with_counts")
PRODUCTS = ("Ascend950", "AtlasA3", "AtlasA2", "AtlasTraining")
EPS = 1e-5


def _ranks_of(data: list) -> tuple:
    """Each rank's (mean, invstd) of its (k_w, C) data, as aclnnBatchNormStats saves them, and its counts."""
    c = data[0].shape[1]
    mean = np.array([d.mean(0) if len(d) else np.zeros(c) for d in data])
    invstd = np.array([1 / np.sqrt(d.var(0) + EPS) if len(d) else np.ones(c) for d in data])
    return mean, invstd, np.array([len(d) for d in data], np.float64)


def test_reference_is_the_statistics_of_all_ranks_data(rng):
    """Counts that differ per rank (1, 5, 0, 40, 3: one rank empty), means far from 0 and
    apart: the reference equals numpy's mean and 1/sqrt(var + eps) of the data concatenated."""
    data = [rng.standard_normal((k, 6)) * rng.uniform(0.5, 2, 6) + rng.uniform(-50, 50, 6) for k in (1, 5, 0, 40, 3)]
    mean, invstd, counts = _ranks_of(data)
    mean_all, invstd_all = ref.gather_stats_with_counts(mean, invstd, counts, EPS)
    everything = np.concatenate(data)
    np.testing.assert_allclose(mean_all, everything.mean(0), rtol=1e-12)
    np.testing.assert_allclose(invstd_all, 1 / np.sqrt(everything.var(0) + EPS), rtol=1e-10)


def test_reference_of_no_rank_and_of_no_element():
    """No rank: mean 0 and invstd NaN (CANN's op_api, l.438-446); ranks of count 0 only: NaN."""
    mean_all, invstd_all = ref.gather_stats_with_counts(np.zeros((0, 3)), np.zeros((0, 3)), np.zeros(0), EPS)
    assert (mean_all == 0).all() and np.isnan(invstd_all).all()
    mean_all, invstd_all = ref.gather_stats_with_counts(np.ones((2, 3)), np.ones((2, 3)), np.zeros(2), EPS)
    assert np.isnan(mean_all).all() and np.isnan(invstd_all).all()


EDGES = tuple(Problem(w, c) for w in (1, 2, 4, 7) for c in (1, 7, 33, 941)) + (Problem(3, 5, 1e-2),)
KEEP = ("f32-f32", "f16-f32")


@pytest.mark.parametrize("tag", tiered([c.tag for c in OP.combos], KEEP))
def test_kernel_matches_reference_over_edge_shapes(tag, rng):
    """On the default target (llvm): W = 1, 2, 4, 7 ranks (a zero count from 3 on) times
    C = 1, 7, 33, 941 channels, and another eps."""
    kernel = kernels.get_kernel(OP, tag, default_target())
    from opgen.verify import run_and_compare
    for problem in EDGES:
        comparisons, _ = run_and_compare(kernel, problem, rng)
        assert_all_pass(comparisons, f"{tag} {problem}")


def test_kernel_keeps_the_variance_when_means_are_far_from_zero(rng):
    """Ranks' means near 1000 with a std near 1: the plain E[x^2] - E[x]^2 in float32 loses
    every digit of the variance there (1e6 rounded to 2^-4); the sums about rank 0's mean keep it."""
    data = [rng.standard_normal((k, 5)) + 1000.0 for k in (30, 50, 20)]
    mean, invstd, counts = _ranks_of(data)
    args = dict(input=np.ones((2, 5), np.float32), mean=mean.astype(np.float32), invstd=invstd.astype(np.float32),
                counts=counts.astype(np.float32))
    mean_all, invstd_all = opgen.batch_norm_gather_stats_with_counts(**args)
    want = ref.gather_stats_with_counts(args["mean"], args["invstd"], args["counts"], EPS)
    np.testing.assert_allclose(mean_all, want[0], rtol=1e-6)
    np.testing.assert_allclose(invstd_all, want[1], rtol=1e-4)


def _run(prod, tag, rng, problem=Problem(4, 33)):
    combo = OP.combo(tag)
    with product(prod):
        args, arrays = base_args(OP, problem, combo, rng)
        status, msg = run_both(OP, args)
    assert status == 0, msg
    assert_matches(OP, combo, problem, arrays, args)
    return args


@pytest.mark.parametrize("prod,tag", tiered(
    [(p, c.tag) for p in PRODUCTS for c in OP.products[p]], [("Ascend950", "f32-f32"), ("AtlasTraining", "f16-f32")]))
def test_aclnn_every_combo_of_every_product(prod, tag, rng):
    _run(prod, tag, rng)


def gather(w=3, c=4, dtype=np.float32, out=np.float32):
    return dict(input=np.ones((2, c, 5), dtype), mean=np.zeros((w, c), dtype), invstd=np.ones((w, c), dtype),
                runningMean=None, runningVar=None, momentum=0.0, eps=EPS, counts=np.full(w, 2, dtype),
                meanAll=np.zeros(c, out), invstdAll=np.zeros(c, out))


def status_of(prod="Ascend950", args=None, **changes):
    args = dict(gather() if args is None else args)
    args.update(changes)
    with product(prod):
        status, _, _ = aclnn.aclnnBatchNormGatherStatsWithCountsGetWorkspaceSize(**args)
    return status, acl.aclGetRecentErrMsg() if status else ""


def test_doc_error_lines_literally():
    """Each line of the document's status table (l.250-286), on every product."""
    for prod in PRODUCTS:
        for name in ("input", "mean", "invstd", "counts", "meanAll", "invstdAll"):
            status, msg = status_of(prod, **{name: None})
            assert status == 161001 and f"{name} is a null pointer" in msg, (prod, name)
        for name in ("input", "mean", "invstd", "counts", "meanAll", "invstdAll"):
            status, msg = status_of(prod, **{name: np.zeros(np.shape(gather()[name]), np.float64)})
            assert status == 161002 and f"{name} has dtype float64" in msg, (prod, name)
        for name in ("runningMean", "runningVar"):
            assert status_of(prod, **{name: np.zeros(4, np.int32)})[0] == 161002
            assert status_of(prod, **{name: np.zeros(4, np.float32)})[0] == 0
        status, msg = status_of(prod, input=np.ones((1,) * 7 + (2, 4), np.float32))
        assert status == 161002 and "at most 8" in msg
        status, msg = status_of(prod, input=np.ones(4, np.float32))
        assert status == 161002 and "at least 2" in msg
        for name in ("mean", "invstd"):
            status, msg = status_of(prod, **{name: np.ones((3, 4, 1), np.float32)})
            assert status == 161002 and f"{name} has 3 dimensions" in msg
        status, msg = status_of(prod, counts=np.ones(4, np.float32))
        assert status == 161002 and "first dimensions" in msg
        status, msg = status_of(prod, invstd=np.ones((2, 4), np.float32))
        assert status == 161002 and "first dimensions" in msg
        for name in ("mean", "invstd"):
            status, msg = status_of(prod, **{name: np.ones((3, 5), np.float32)})
            assert status == 161002 and "input's channel axis" in msg
        for name in ("runningMean", "runningVar", "meanAll", "invstdAll"):
            status, msg = status_of(prod, **{name: np.zeros(5, np.float32)})
            assert status == 161002 and f"{name} has shape (5,)" in msg, (prod, name)
        status, msg = status_of(prod, counts=np.ones((3, 1), np.float32))
        assert status == 161002 and "counts has 2 dimensions" in msg
    bf16 = gather(dtype="bfloat16", out="bfloat16")
    bf16 = {k: (np.asarray(v).astype(opgen.dtypes.numpy_dtype("bfloat16")) if isinstance(v, np.ndarray) else v)
            for k, v in bf16.items()}
    assert status_of("AtlasA2", bf16)[0] == 0
    status, msg = status_of("AtlasTraining", bf16)
    assert status == 161002 and "bfloat16" in msg


def test_running_statistics_are_read_only_with_momentum_zero(rng):
    """runningMean/runningVar are in-out in CANN; opgen refuses a call that would update them
    (momentum != 0) and, with momentum 0 (no update), leaves them as they are."""
    for name in ("runningMean", "runningVar"):
        status, msg = status_of(**{name: np.ones(4, np.float32), "momentum": 0.1})
        assert status == 161002 and "in place" in msg and "meanAll" in msg
    assert status_of(momentum=0.1)[0] == 0            # no running statistic: nothing to update
    args = gather()
    args.update(runningMean=np.full(4, 3.0, np.float32), runningVar=np.full(4, 5.0, np.float32),
                mean=rng.standard_normal((3, 4)).astype(np.float32))
    assert run_both(OP, args) == (0, "")
    assert (args["runningMean"] == 3).all() and (args["runningVar"] == 5).all()
    np.testing.assert_allclose(args["meanAll"], args["mean"].mean(0), rtol=1e-6)


def test_no_rank_writes_zero_mean_and_nan_invstd():
    """An empty mean (W = 0): the op_api fills meanAll with 0, invstdAll with NaN (l.438-446)."""
    args = gather(w=0)
    args["meanAll"][:], args["invstdAll"][:] = 5.0, 5.0
    with product("AtlasA2"):
        assert run_both(OP, args) == (0, "")
    assert (args["meanAll"] == 0).all() and np.isnan(args["invstdAll"]).all()


def test_doc_c_example():
    """The document's example (l.418-451): input (2, 4, 2), counts 1..4, invstd rows 1..4,
    momentum 1e-2 (here 0 with no running statistics: opgen does not update them in place),
    eps 1e-4. Its mean vector holds 8 values for a (4, 4) tensor; here mean's rows are 0..15."""
    args = gather(w=4, c=4)
    args.update(input=np.arange(16, dtype=np.float32).reshape(2, 4, 2), mean=np.arange(16, dtype=np.float32)
                .reshape(4, 4), invstd=np.repeat(np.arange(1, 5, dtype=np.float32), 4).reshape(4, 4),
                counts=np.arange(1, 5, dtype=np.float32), eps=1e-4)
    with product("AtlasA2"):
        assert run_both(OP, args) == (0, "")
    np.testing.assert_allclose(args["meanAll"], [8, 9, 10, 11], rtol=1e-6)   # sum k*(4r+c)/10 = 8 + c
    within = (1 + 2 / 4 + 3 / 9 + 4 / 16) / 10 - 1e-4                        # sum k * (1/r^2 - eps) / 10
    between = (1 * 64 + 2 * 16 + 3 * 0 + 4 * 16) / 10                          # sum k * (4r - 8)^2 / 10
    np.testing.assert_allclose(args["invstdAll"], 1 / np.sqrt(within + between + 1e-4), rtol=1e-6)


def test_proof_and_document_formulas():
    report = derive.prove("batch_norm_gather_stats_with_counts")
    assert report.ok, report.summary()
    checks = OP.model.seed_checks()
    assert len(checks) == 2 and all(c.matches for c in checks)


def test_a_flipped_sign_fails_the_proof(flip_stage):
    """The spread of the ranks' means (mean - shift) added with the wrong sign: invstdAll must fail, meanAll not."""
    hits = flip_stage("batch_norm_gather_stats_with_counts_var32")
    report = derive.prove("batch_norm_gather_stats_with_counts", cases=[(2, 2, 1)])
    assert hits and not report.ok
    bad = report.cases[0].mismatches
    assert any(m.startswith("batch_norm_gather_stats_with_counts_invstd_all[") for m in bad), bad
    assert not any(m.startswith("batch_norm_gather_stats_with_counts_mean_all[") for m in bad), bad


def test_pythonic_function(rng):
    problem = Problem(5, 7)
    a = OP.random_inputs(problem, OP.combo("f16-f16"), rng)
    mean_all, invstd_all = opgen.batch_norm_gather_stats_with_counts(a["input"], a["mean"], a["invstd"],
                                                                     counts=a["counts"])
    assert mean_all.dtype == np.float32 and mean_all.shape == (7,)        # float32 statistics from half inputs
    want = OP.reference(problem, a)
    np.testing.assert_allclose(mean_all.astype(np.float64), want["mean_all"], rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(invstd_all.astype(np.float64), want["invstd_all"], rtol=2e-3, atol=2e-3)
