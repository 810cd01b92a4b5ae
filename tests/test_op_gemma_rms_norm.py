"""aclnnGemmaRmsNorm (opgen.ops.gemma_rms_norm), y = x / Rms(x) * (1 + gamma), against independent
truths (docs/specs/aclnnGemmaRmsNorm.md):

* the float64 reference against the document's formula written out row by row;
* the kernel on llvm against the float64 reference over 1, 7, 33, 941 and 12290 columns,
  ranks 1-4, gamma over all of x (n = 0), several eps and empty tensors: float32 in the
  default tier, float16 and bfloat16 in the extended one (every combo on every target:
  tests/test_every_target.py, opgen generate);
* the document's C example as literal acl/aclnn calls, and its values;
* each line of the document's error table (and each shape rule under its 561002 line) as a
  literal call with its status and its words, and the calls the document allows that a
  stricter reading would refuse (gamma as x, both rstdOut forms, empty calls, a negative
  epsilon);
* the sympy proof with the offset flipped in the TE fails.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from opgen import acl, aclnn, derive, kernels
from opgen.dtypes import numpy_dtype
from opgen.ops import get_op
from opgen.ops.gemma_rms_norm import Problem
from opgen.ops.gemma_rms_norm.reference import gemma_rms_norm
from opgen.targets import get_target

from aclnn_helpers import product
from op_checks import ascend_roles, assert_kernel_matches_reference
from tiers import FULL, tiered

OP = get_op("gemma_rms_norm")
TAGS = [c.tag for c in OP.combos]
SHAPES = [Problem((3, 1)), Problem((5, 7)), Problem((2, 33), 1, 1e-5), Problem((4, 941)), Problem((3, 12290)),
          Problem((16,)), Problem((2, 16), 2), Problem((2, 3, 4, 5), 2), Problem((0, 8)), Problem((4, 0)),
          Problem((6, 64), 1, 0.5)]


def _by_rows(x, gamma, eps):
    """The document's formula, one row at a time in Python floats: Rms = sqrt(sum x^2 / n + eps),
    y_i = x_i / Rms * (1 + gamma_i)."""
    g = [float(v) for v in np.asarray(gamma).ravel()]
    rows = np.asarray(x, np.float64).reshape(-1, len(g))
    ys, rstds = [], []
    for row in rows:
        rms = math.sqrt(sum(v * v for v in row) / len(g) + eps)
        ys.append([v / rms * (1.0 + gi) for v, gi in zip(row, g)])
        rstds.append(1.0 / rms)
    return np.array(ys).reshape(np.shape(x)), np.array(rstds)


@pytest.mark.parametrize("x_shape,g_ndim", [((3, 8), 1), ((2, 3, 5), 2), ((7,), 1), ((2, 4), 2)])
def test_reference_is_the_documents_formula(x_shape, g_ndim, rng):
    x = rng.standard_normal(x_shape)
    gamma = rng.uniform(-0.5, 0.5, x_shape[len(x_shape) - g_ndim:])
    y, rstd = gemma_rms_norm(x, gamma, 1e-5)
    want_y, want_rstd = _by_rows(x, gamma, 1e-5)
    np.testing.assert_allclose(y, want_y, rtol=1e-12)
    np.testing.assert_allclose(rstd.reshape(-1), want_rstd, rtol=1e-12)


@pytest.mark.parametrize("tag", tiered(TAGS, ["f32-f32"]))
def test_llvm_kernel_matches_the_float64_reference(tag, rng):
    assert_kernel_matches_reference(OP, tag, get_target("llvm"), SHAPES, rng)


def test_llvm_runs_the_fused_row_pass():
    """The row rule of aclnnRmsNorm takes it: one parallel loop over rows holding the sum,
    rstd and y, no scratch."""
    kernel = kernels.get_kernel(OP, "f32-f32", "llvm")
    assert type(kernels.matching_rule(OP, OP.combo("f32-f32"), get_target("llvm"))).__name__ == "RowPass"
    assert kernel.tir.count("T.parallel") == 1 and not kernel.scratch


def _device_tensor(host, shape):
    """The C example's CreateAclTensor: aclrtMalloc, aclrtMemcpy host to device, aclCreateTensor
    (ACL_FLOAT, ACL_FORMAT_ND, contiguous strides)."""
    host = np.asarray(host, np.float32)
    ret, addr = acl.aclrtMalloc(host.nbytes, acl.ACL_MEM_MALLOC_HUGE_FIRST)
    assert ret == acl.ACL_SUCCESS
    assert acl.aclrtMemcpy(addr, host.nbytes, host, host.nbytes, acl.ACL_MEMCPY_HOST_TO_DEVICE) == acl.ACL_SUCCESS
    strides = [int(np.prod(shape[i + 1:])) for i in range(len(shape))]
    return addr, acl.aclCreateTensor(shape, acl.ACL_FLOAT, strides, 0, acl.ACL_FORMAT_ND, shape, addr)


def test_the_documents_c_example():
    """aclnnGemmaRmsNorm.md's example (l.261-427): x (2, 16) and gamma (16,) of 0..7 twice,
    yOut pre-filled with x, rstdOut (2, 1) = [1, 2], ``float epsilon = 1e-6`` passed as the
    double parameter. Each row has mean(x^2) = 17.5, so y = i (1 + i) / sqrt(17.5 + eps)."""
    assert acl.aclInit(None) == acl.ACL_SUCCESS and acl.aclrtSetDevice(0) == acl.ACL_SUCCESS
    ret, stream = acl.aclrtCreateStream()
    assert ret == acl.ACL_SUCCESS
    data = list(range(8)) * 2
    x_addr, x = _device_tensor(data * 2, [2, 16])
    gamma_addr, gamma = _device_tensor(data, [16])
    y_addr, y = _device_tensor(data * 2, [2, 16])
    rstd_addr, rstd = _device_tensor([1, 2], [2, 1])
    epsilon = float(np.float32(1e-6))                   # C: float epsilon = 1e-6, promoted to double
    ret, workspace_size, executor = aclnn.aclnnGemmaRmsNormGetWorkspaceSize(x, gamma, epsilon, y, rstd)
    assert ret == acl.ACL_SUCCESS, acl.aclGetRecentErrMsg()
    workspace = None
    if workspace_size > 0:
        ret, workspace = acl.aclrtMalloc(workspace_size, acl.ACL_MEM_MALLOC_HUGE_FIRST)
        assert ret == acl.ACL_SUCCESS
    assert aclnn.aclnnGemmaRmsNorm(workspace, workspace_size, executor, stream) == acl.ACL_SUCCESS
    assert acl.aclrtSynchronizeStream(stream) == acl.ACL_SUCCESS
    result, stats = np.zeros(32, np.float32), np.zeros(2, np.float32)
    assert acl.aclrtMemcpy(result, 128, y_addr, 128, acl.ACL_MEMCPY_DEVICE_TO_HOST) == acl.ACL_SUCCESS
    assert acl.aclrtMemcpy(stats, 8, rstd_addr, 8, acl.ACL_MEMCPY_DEVICE_TO_HOST) == acl.ACL_SUCCESS
    for tensor in (x, gamma, y, rstd):
        acl.aclDestroyTensor(tensor)
    for addr in (x_addr, gamma_addr, y_addr, rstd_addr) + ((workspace,) if workspace_size > 0 else ()):
        acl.aclrtFree(addr)
    acl.aclrtDestroyStream(stream)
    acl.aclrtResetDevice(0)
    acl.aclFinalize()
    rms = math.sqrt(17.5 + epsilon)
    np.testing.assert_allclose(result, [i * (1 + i) / rms for i in data] * 2, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(stats, [1 / rms] * 2, rtol=1e-6)
    assert result[15] == pytest.approx(56 / rms, rel=1e-6) and round(float(result[15]), 4) == 13.3866


def _call(x=(2, 1, 16), gamma=(16,), y=None, rstd=(2, 1, 1), io=np.float32, g=None, y_dtype=None,
          rstd_dtype=np.float32, epsilon=1e-6, drop=None):
    """One GetWorkspaceSize call on arrays of these shapes and dtypes (None for ``drop``):
    (status, the recent error message)."""
    y = x if y is None else y
    args = dict(x=np.ones(x, io), gamma=np.full(gamma, 0.5, io if g is None else g), epsilon=epsilon,
                yOut=np.zeros(y, io if y_dtype is None else y_dtype), rstdOut=np.zeros(rstd, rstd_dtype))
    if drop:
        args[drop] = None
    status, _, _ = aclnn.aclnnGemmaRmsNormGetWorkspaceSize(**args)
    return status, acl.aclGetRecentErrMsg() if status else ""


ERROR_LINES = [
    # 161001: a required input or output is a null pointer
    ("null x", dict(drop="x"), 161001, "x is a null pointer"),
    ("null gamma", dict(drop="gamma"), 161001, "gamma is a null pointer"),
    ("null yOut", dict(drop="yOut"), 161001, "yOut is a null pointer"),
    ("null rstdOut", dict(drop="rstdOut"), 161001, "rstdOut is a null pointer"),
    # 161002: a dtype outside the supported range (the table: gamma and yOut in x's dtype, rstdOut F32)
    ("float64 x", dict(io=np.float64), 161002, "x has dtype float64"),
    ("float16 x with float32 gamma", dict(io=np.float16, g=np.float32), 161002, "not a row of Ascend950's table"),
    ("bfloat16 yOut for float32 x", dict(y_dtype=numpy_dtype("bfloat16")), 161002, "not a row"),
    ("float16 rstdOut", dict(rstd_dtype=np.float16), 161002, "(float32/float32/float32/float16) are not a row"),
    # 561002: the parameters do not meet the Parameters table
    ("9-d x", dict(x=(1,) * 7 + (2, 16), rstd=(1,) * 7 + (2, 1)), 561002, "x has 9 dimensions"),
    ("gamma not x's trailing dims", dict(gamma=(15,)), 561002, "gamma has shape (15,)"),
    ("gamma of more dims than x", dict(x=(16,), gamma=(1, 16), rstd=(1,)), 561002, "gamma has shape (1, 16)"),
    ("empty gamma with rows to write", dict(x=(2, 0), gamma=(0,), rstd=(2, 1)), 561002, "empty gamma is refused"),
    ("yOut not x's shape", dict(y=(2, 16)), 561002, "yOut has shape (2, 16)"),
    ("rstdOut of x's shape", dict(rstd=(2, 1, 16)), 561002, "rstdOut has shape (2, 1, 16)"),
    ("rstdOut one row short", dict(rstd=(1, 1, 1)), 561002, "expected x's first n = 2 dims, (2, 1, 1) or (2, 1)"),
]


@pytest.mark.parametrize("edits,status,words", [case[1:] for case in ERROR_LINES], ids=[c[0] for c in ERROR_LINES])
def test_each_error_line(edits, status, words):
    got, message = _call(**edits)
    assert got == status, message
    assert words in message and message.startswith("aclnnGemmaRmsNormGetWorkspaceSize failed")


@pytest.mark.parametrize("prod", ["AtlasInference", "AtlasTraining"])
def test_products_the_document_does_not_support(prod):
    with product(prod):
        got, message = _call()
    assert got == 161002 and "not supported" in message and prod in message


ACCEPTED = [
    ("keepdim rstdOut (the C example's form)", dict(), (2, 1, 1)),
    ("flat rstdOut (the doc's text: x's first n dims)", dict(rstd=(2, 1)), (2, 1)),
    ("gamma over all of x (n = 0)", dict(x=(2, 16), gamma=(2, 16), rstd=(1, 1)), (1, 1)),
    ("1-d x", dict(x=(16,), gamma=(16,), rstd=(1,)), (1,)),
    ("a negative epsilon (CANN logs it and goes on)", dict(epsilon=-1e-3), (2, 1, 1)),
]


@pytest.mark.parametrize("edits,rstd_shape", [case[1:] for case in ACCEPTED], ids=[c[0] for c in ACCEPTED])
def test_what_the_document_allows_runs_and_gives_the_formula(edits, rstd_shape, rng):
    """Calls a stricter reading would refuse: both phases succeed and the outputs are the
    document's formula (x random, gamma around 0)."""
    x_shape, g_shape = edits.get("x", (2, 1, 16)), edits.get("gamma", (16,))
    x = rng.standard_normal(x_shape).astype(np.float32)
    gamma = rng.uniform(-0.5, 0.5, g_shape).astype(np.float32)
    eps = edits.get("epsilon", 1e-6)
    y, rstd = np.zeros_like(x), np.zeros(rstd_shape, np.float32)
    status, size, executor = aclnn.aclnnGemmaRmsNormGetWorkspaceSize(x, gamma, eps, y, rstd)
    assert status == 0, acl.aclGetRecentErrMsg()
    assert aclnn.aclnnGemmaRmsNorm(None, size, executor, None) == 0
    want_y, want_rstd = _by_rows(x, gamma, float(np.float32(eps)))
    np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rstd.reshape(-1), want_rstd, rtol=1e-5)


@pytest.mark.parametrize("x_shape,g_shape,rstd_shape", [((0, 8), (8,), (0, 1)), ((0, 0), (0,), (0, 1)),
                                                        ((2, 0, 4), (4,), (2, 0, 1))])
def test_empty_calls_succeed_and_write_nothing(x_shape, g_shape, rstd_shape):
    """Every output empty: CANN's runtime runs neither tiling nor kernel, so even an empty
    gamma passes (the document: every tensor may be empty)."""
    x, gamma = np.ones(x_shape, np.float32), np.ones(g_shape, np.float32)
    y, rstd = np.zeros(x_shape, np.float32), np.zeros(rstd_shape, np.float32)
    status, size, executor = aclnn.aclnnGemmaRmsNormGetWorkspaceSize(x, gamma, 1e-6, y, rstd)
    assert status == 0, acl.aclGetRecentErrMsg()
    assert aclnn.aclnnGemmaRmsNorm(None, size, executor, None) == 0


def test_proof_holds_and_a_flipped_offset_fails_it(flip_stage):
    """The first sign in the y stage is the offset's: xr * (1 - gamma) must not prove."""
    assert derive.prove("gemma_rms_norm", cases=[(2, 3)]).ok
    hits = flip_stage("gemma_rms_norm_y")
    report = derive.prove("gemma_rms_norm", cases=[(2, 3)])
    assert hits and not report.ok
    assert any(m.startswith("gemma_rms_norm_y") for m in report.cases[0].mismatches)


def test_combos_and_products_are_the_documents_table():
    """Three rows, gamma and y in x's dtype and rstd float32, on Ascend 950, Atlas A3 and A2."""
    assert set(OP.products) == {"Ascend950", "AtlasA3", "AtlasA2"}
    assert all(OP.products[p] == OP.combos for p in OP.products)
    for combo in OP.combos:
        assert combo["gamma"] == combo["y"] == combo["x"] and numpy_dtype(combo["rstd"]) == np.float32
    assert sorted(TAGS) == ["bf16-bf16", "f16-f16", "f32-f32"]


@FULL
def test_ascend_emu_schedules_it_as_row_tiles_storing_rstd():
    """The row rule takes it as aclnnRmsNorm, rstd a per-row output (tests/test_ascend.py emits
    every registered op)."""
    roles = ascend_roles(OP, "f32-f32")
    assert roles["gemma_rms_norm_rstd"] == "row_output" and roles["gemma_rms_norm_y"] == "tile"
