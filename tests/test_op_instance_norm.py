"""aclnnInstanceNorm (opgen.ops.instance_norm), y = (x - E(x)) / sqrt(Var(x) + eps) * gamma + beta
per (n, c) over H and W, against independent truths (docs/specs/aclnnInstanceNorm.md):

* the float64 reference against GroupNorm's float64 forward with one channel per group
  (another formula: its rstd, not a variance) and torch's instance_norm in float64;
* the kernel on llvm against the float64 reference over H*W of 1, 7, 33, 941 and 12290, C of
  1 and 7, empty tensors, eps and an off-centre input: float32 in the default tier, float16
  in the extended one (every combo on every target: tests/test_every_target.py, opgen
  generate);
* the document's C example as literal acl/aclnn calls, and its values;
* each line of the document's error table as a literal call with its status and its words
  (the product, null pointers, dataFormat, dtypes, ranks, C, the output shapes) and the calls
  the op_api accepts (empty tensors, sizes under the document's 32-byte line);
* NHWC: the NCHW result transposed (x and y staged transposed by the plan);
* mean and variance are what aclnnGroupNormBackward takes (as mean and 1/sqrt(var + eps));
* the sympy proof, and a flipped sign in the TE fails it;
* llvm and ascend-emu schedule it with GroupNorm's grouped rules.
"""
from __future__ import annotations

import numpy as np
import pytest

import opgen
from opgen import acl, aclnn, derive, kernels
from opgen.ops import get_op
from opgen.ops.group_norm_backward.reference import group_norm
from opgen.ops.instance_norm import Problem
from opgen.ops.instance_norm.reference import instance_norm
from opgen.targets import get_target

from aclnn_helpers import product
from op_checks import ascend_roles, assert_kernel_matches_reference
from tiers import tiered

OP = get_op("instance_norm")
TAGS = [c.tag for c in OP.combos]
SHAPES = [Problem(3, 1, 1, 1), Problem(2, 7, 7, 1), Problem(2, 6, 33, 1), Problem(1, 4, 941, 1),
          Problem(2, 3, 12290, 1, 1e-3), Problem(3, 130, 7, 7), Problem(2, 1, 5, 4), Problem(0, 4, 5, 2),
          Problem(2, 4, 0, 2), Problem(2, 0, 3, 3), Problem(2, 8, 16, 1, 0.5)]


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 1, 1, 7), (3, 2, 1, 2)])
def test_reference_is_group_norm_with_one_channel_per_group_and_torchs(shape, rng):
    torch = pytest.importorskip("torch")
    x = rng.standard_normal(shape) * 2 + 0.5
    gamma, beta = rng.uniform(0.5, 1.5, shape[1]), rng.standard_normal(shape[1])
    y, mean, variance = instance_norm(x, gamma, beta, 1e-5)
    gy, gmean, grstd = group_norm(x.reshape(shape[0], shape[1], -1), gamma, beta, shape[1], 1e-5)
    np.testing.assert_allclose(y.reshape(gy.shape), gy, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(mean.reshape(gmean.shape), gmean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(1 / np.sqrt(variance.reshape(grstd.shape) + 1e-5), grstd, rtol=1e-12)
    ty = torch.nn.functional.instance_norm(torch.from_numpy(x), weight=torch.from_numpy(gamma),
                                           bias=torch.from_numpy(beta), eps=1e-5)
    np.testing.assert_allclose(y, ty.numpy(), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("tag", tiered(TAGS, ["f32"]))
def test_llvm_kernel_matches_the_float64_reference(tag, rng):
    assert_kernel_matches_reference(OP, tag, get_target("llvm"), SHAPES, rng)


def test_far_from_zero_mean_keeps_float32_accuracy(rng):
    """The variance is taken about the mean: an input at 1000 +- 1 keeps the variance to f32
    accuracy (E[x^2] - E[x]^2 in float32 would lose every digit of it)."""
    x = (rng.standard_normal((2, 8, 30, 10)) + 1000.0).astype(np.float32)
    with product("AtlasInference"):
        y, mean, variance = opgen.instance_norm(x, np.ones(8, np.float32), np.zeros(8, np.float32))
    want_y, want_mean, want_var = instance_norm(x, np.ones(8), np.zeros(8), float(np.float32(1e-5)))
    np.testing.assert_allclose(variance, want_var, rtol=1e-4)
    # y carries the float32 mean's rounding (ulp(1000) = 6e-5 against a std of 1), no more
    np.testing.assert_allclose(y, want_y, atol=5e-4)


def test_llvm_and_ascend_emu_take_it_as_groupnorms_grouped_pass():
    """One parallel loop over (n, c) with no scratch on llvm; ascend-emu's group rule: mean and
    variance per-task outputs, the sums channel sums, scale and shift inlined into y."""
    kernel = kernels.get_kernel(OP, "f32", "llvm")
    assert type(kernels.matching_rule(OP, OP.combo("f32"), get_target("llvm"))).__name__ == "GroupedRowPass"
    assert kernel.tir.count("T.parallel") == 1 and not kernel.scratch
    roles = ascend_roles(OP, "f32")
    assert roles["instance_norm_mean"] == roles["instance_norm_variance"] == "task_output"
    assert roles["instance_norm_sq"] == roles["instance_norm_sum"] == "channel_sum"
    assert "instance_norm_scale" not in roles and "instance_norm_shift" not in roles


def test_statistics_feed_group_norm_backward_as_the_float64_ones_do(rng):
    """GroupNormBackward with num_groups = C fed this op's mean and 1/sqrt(variance + eps) equals
    it fed the float64 statistics: the exchange opgen.torch's InstanceNorm modules make."""
    x = (rng.standard_normal((3, 8, 4, 5)) * 2 + 0.5).astype(np.float32)
    gamma, beta = rng.uniform(0.5, 1.5, 8).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    with product("AtlasInference"):
        _, mean, variance = opgen.instance_norm(x, gamma, beta)
    rstd = (1 / np.sqrt(variance.astype(np.float64) + 1e-5)).astype(np.float32).reshape(3, 8)
    _, exact_mean, exact_var = instance_norm(x, gamma, beta, 1e-5)
    exact = (exact_mean.reshape(3, 8).astype(np.float32), (1 / np.sqrt(exact_var + 1e-5)).reshape(3, 8)
             .astype(np.float32))
    got = opgen.group_norm_backward(dy, x, mean.reshape(3, 8), rstd, gamma, 8)
    want = opgen.group_norm_backward(dy, x, *exact, gamma, 8)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def _device_tensor(host, shape):
    """The C example's CreateAclTensor: aclrtMalloc, aclrtMemcpy host to device, aclCreateTensor
    (ACL_FLOAT, ACL_FORMAT_ND, contiguous strides)."""
    host = np.asarray(host, np.float32)
    ret, addr = acl.aclrtMalloc(host.nbytes, acl.ACL_MEM_MALLOC_HUGE_FIRST)
    assert ret == acl.ACL_SUCCESS
    assert acl.aclrtMemcpy(addr, host.nbytes, host, host.nbytes, acl.ACL_MEMCPY_HOST_TO_DEVICE) == acl.ACL_SUCCESS
    strides = [int(np.prod(shape[i + 1:])) for i in range(len(shape))]
    return addr, acl.aclCreateTensor(shape, acl.ACL_FLOAT, strides, 0, acl.ACL_FORMAT_ND, shape, addr)


def _copy_out(addr, count):
    out = np.zeros(count, np.float32)
    assert acl.aclrtMemcpy(out, out.nbytes, addr, out.nbytes, acl.ACL_MEMCPY_DEVICE_TO_HOST) == acl.ACL_SUCCESS
    return out


def test_the_documents_c_example():
    """aclnnInstanceNorm.md's example on its product (Atlas inference): x (1, 8, 4, 4) of 0.77,
    gamma 1.5, beta 0.5, mean and variance (1, 8, 1, 1), "NCHW", eps 1e-5. Every channel is
    constant: mean 0.77, variance 0, y = beta = 0.5."""
    with product("AtlasInference"):
        assert acl.aclInit(None) == acl.ACL_SUCCESS and acl.aclrtSetDevice(0) == acl.ACL_SUCCESS
        ret, stream = acl.aclrtCreateStream()
        assert ret == acl.ACL_SUCCESS
        tensors = [_device_tensor(np.full(int(np.prod(s)), v), s) for v, s in (
            (0.77, [1, 8, 4, 4]), (1.5, [8]), (0.5, [8]), (0.0, [1, 8, 4, 4]), (0.0, [1, 8, 1, 1]),
            (0.0, [1, 8, 1, 1]))]
        x, gamma, beta, y, mean, variance = (t for _, t in tensors)
        ret, size, executor = aclnn.aclnnInstanceNormGetWorkspaceSize(x, gamma, beta, "NCHW", 1e-5, y, mean,
                                                                      variance)
        assert ret == acl.ACL_SUCCESS, acl.aclGetRecentErrMsg()
        workspace = None
        if size > 0:
            ret, workspace = acl.aclrtMalloc(size, acl.ACL_MEM_MALLOC_HUGE_FIRST)
            assert ret == acl.ACL_SUCCESS
        assert aclnn.aclnnInstanceNorm(workspace, size, executor, stream) == acl.ACL_SUCCESS
        assert acl.aclrtSynchronizeStream(stream) == acl.ACL_SUCCESS
        results = [_copy_out(tensors[i][0], n) for i, n in ((3, 128), (4, 8), (5, 8))]
        for addr, tensor in tensors:
            acl.aclDestroyTensor(tensor)
            acl.aclrtFree(addr)
        if workspace is not None:
            acl.aclrtFree(workspace)
        acl.aclrtDestroyStream(stream)
        acl.aclrtResetDevice(0)
        acl.aclFinalize()
    # float32 sums of 16 x 0.77 round: mean32 is off by ~1e-8, which a rstd of 1/sqrt(1e-5) = 316
    # (variance 0) turns into ~1.5e-5 on y; the float64 reference of the same call gives 0.5
    np.testing.assert_allclose(results[0], 0.5, atol=1e-4)
    np.testing.assert_allclose(results[1], np.float32(0.77), rtol=1e-6)
    np.testing.assert_allclose(results[2], 0.0, atol=1e-12)


def _call(x=(2, 8, 4, 4), c=None, y=None, stat=None, io=np.float32, dtypes=None, fmt="NCHW", drop=None,
          prod="AtlasInference"):
    """One GetWorkspaceSize call on arrays of these shapes (gamma and beta of ``c`` elements,
    x's C by default; ``dtypes``: per-tensor dtype overrides; ``drop``: that one None):
    (status, the recent error message)."""
    c = x[1] if c is None and len(x) > 1 else (c or 1)
    stat = (x[0], x[1], 1, 1) if stat is None else stat
    shapes = dict(x=x, gamma=(c,), beta=(c,), y=x if y is None else y, mean=stat, variance=stat)
    args = {name: np.ones(s, (dtypes or {}).get(name, io)) for name, s in shapes.items()}
    args.update(dataFormat=fmt, eps=1e-5)
    if drop:
        args[drop] = None
    with product(prod):
        status, _, _ = aclnn.aclnnInstanceNormGetWorkspaceSize(**args)
        return status, acl.aclGetRecentErrMsg() if status else ""


ERROR_LINES = [
    ("Ascend 950", dict(prod="Ascend950"), 161002, "not supported"),
    ("Atlas A2", dict(prod="AtlasA2"), 161002, "not supported"),
    ("null x", dict(drop="x"), 161001, "x is a null pointer"),
    ("null variance", dict(drop="variance"), 161001, "variance is a null pointer"),
    ("null dataFormat", dict(drop="dataFormat"), 161001, "dataFormat is a null pointer"),
    ("dataFormat ND", dict(fmt="ND"), 161002, "dataFormat is 'ND'"),
    ("float64", dict(io=np.float64), 161002, "x has dtype float64"),
    ("bfloat16 x", dict(io="bfloat16"), 161002, "x has dtype bfloat16"),
    ("float16 mean", dict(dtypes={"mean": np.float16}), 161002, "mean has dtype float16; expected x's float32"),
    ("x 9-d", dict(x=(2, 8, 4, 4, 1, 1, 1, 1, 1), y=(2, 8, 4, 4, 1, 1, 1, 1, 1)), 161002, "at most 8"),
    ("x 3-d", dict(x=(2, 8, 16), y=(2, 8, 16)), 161002, "x has 3 dimensions; expected 4"),
    ("gamma of 7", dict(c=7), 161002, "gamma has shape (7,); expected (8,)"),
    ("NHWC gamma of dim 1", dict(x=(2, 8, 4, 4), c=8, fmt="NHWC", stat=(2, 1, 1, 4)), 161002,
     "gamma has shape (8,); expected (4,): x's C axis (NHWC)"),
    ("NHWC mean (N, C, 1, 1)", dict(x=(2, 4, 4, 8), c=8, fmt="NHWC", stat=(2, 8, 1, 1)), 561103,
     "mean has shape (2, 8, 1, 1); expected (N, 1, 1, C) = (2, 1, 1, 8)"),
    ("y flattened", dict(y=(256,)), 561103, "y has shape (256,)"),
    ("mean (N, C)", dict(stat=(2, 8)), 561103, "mean has shape (2, 8); expected (N, C, 1, 1)"),
]


@pytest.mark.parametrize("kwargs,status,words", [pytest.param(k, s, w, id=i) for i, k, s, w in ERROR_LINES])
def test_each_error_line_as_a_literal_call(kwargs, status, words):
    if kwargs.get("io") == "bfloat16":
        import ml_dtypes
        kwargs = {**kwargs, "io": ml_dtypes.bfloat16}
    got, message = _call(**kwargs)
    assert got == status and words in message, message


@pytest.mark.parametrize("kwargs", [dict(), dict(io=np.float16, x=(2, 16, 4, 4)), dict(x=(1, 1, 1, 1)),
                                    dict(x=(2, 3, 1, 7), io=np.float16), dict(x=(0, 8, 4, 4)),
                                    dict(x=(2, 0, 4, 4)), dict(x=(2, 3, 0, 4))],
                         ids=["float32", "float16", "1x1x1x1", "C 3 HW 7 float16", "N 0", "C 0", "H 0"])
def test_the_calls_the_op_api_accepts(kwargs):
    """Valid calls, empty ones (the op_api's UT case_empty_*), and calls under the document's
    "32 bytes" line, which the op_api does not check (its UT case_nchw_float_small_shape_normal
    expects success for x (1, 1, 1, 1) float32)."""
    got, message = _call(**kwargs)
    assert got == 0, message


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_nhwc_is_the_nchw_result_transposed(dtype, rng):
    """dataFormat NHWC (the op_api transposes x to NCHW and y back, and reshapes the statistics
    to (N, 1, 1, C)): opgen stages x and y transposed through the workspace (ApiSpec.kernel_axes);
    the outputs are the float64 reference of the NCHW data, transposed, written in place into
    a strided y too; an NCHW call on the same data agrees."""
    x = (rng.standard_normal((2, 5, 3, 16)) * 2 + 0.5).astype(dtype)
    gamma, beta = rng.uniform(0.5, 1.5, 16).astype(dtype), rng.standard_normal(16).astype(dtype)
    y = np.zeros((2, 5, 3, 32), dtype)[..., ::2]
    with product("AtlasInference"):
        _, mean, variance = opgen.instance_norm(x, gamma, beta, "NHWC", y=y)
        nchw = opgen.instance_norm(np.ascontiguousarray(x.transpose(0, 3, 1, 2)), gamma, beta)
    assert mean.shape == variance.shape == (2, 1, 1, 16) and mean.dtype == dtype
    want = instance_norm(x.transpose(0, 3, 1, 2), gamma, beta, float(np.float32(1e-5)))
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=2e-3, atol=4e-3)
    np.testing.assert_allclose(y, want[0].transpose(0, 2, 3, 1), **tol)
    for got, ref in ((mean, want[1]), (variance, want[2])):
        np.testing.assert_allclose(got.reshape(2, 16), ref.reshape(2, 16), **tol)
    np.testing.assert_array_equal(y, nchw[0].transpose(0, 2, 3, 1))
    np.testing.assert_array_equal(mean.reshape(2, 16), nchw[1].reshape(2, 16))


@pytest.mark.parametrize("problem", [Problem(2, 8, 4, 5), Problem(2, 7, 33, 1, 1e-3),
                                     Problem(2, 8, 4, 5, 1e-5, "NHWC")])
def test_problem_spelling_reads_its_label_back_with_the_format(problem):
    assert Problem.parse(problem.label()) == problem
    assert problem.x_shape == ((2, 4, 5, 8) if problem.dataFormat == "NHWC" else (problem.N, problem.C, problem.H,
                                                                                   problem.W))


def test_proof_holds_and_a_flipped_sign_fails_it(flip_stage):
    assert derive.prove("instance_norm").ok
    hits = flip_stage("instance_norm_shift")
    report = derive.prove("instance_norm", cases=[(1, 2, 1, 3)])
    assert hits and not report.ok
    assert {m.split("[")[0] for m in report.cases[0].mismatches} == {"instance_norm_y"}
