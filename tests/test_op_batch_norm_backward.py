"""aclnnBatchNormBackward (opgen.ops.batch_norm_backward): the reference against finite
differences, the kernel against the reference (every combo, shapes, modes, layouts), the
aclnn API (every error line literally, masks, nulls, strides, channel-last, empty calls),
the proof and its mutations, the Pythonic function, the torch op and BatchNorm2d, and the
document's C example.
"""
from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

import opgen
from opgen import acl, aclnn, derive, kernels
from opgen.apispec import Call
from opgen.ops import get_op
from opgen.dtypes import numpy_dtype
from opgen.ops.batch_norm_backward import Problem, kernel_shapes
from opgen.ops.batch_norm_backward import reference as ref
from opgen.ops.batch_norm_backward.api import tagged
from opgen.targets import get_target
from opgen.targets import cuda as cuda_target
from opgen.verify import compare_outputs, run_and_compare

from aclnn_helpers import assert_matches, base_args, phase_one, product, run_both
from op_checks import assert_all_pass as _assert_all_pass
from op_checks import assert_gradient, central_difference
from tiers import kept_on

BN = get_op("batch_norm_backward")
BF16 = ml_dtypes.bfloat16
EPS = 1e-5
UNIFORM = ("f32-f32", "f16-f16", "f16-f32", "bf16-bf16", "bf16-f32")
PRODUCTS = ("Ascend950", "AtlasA3", "AtlasA2", "AtlasTraining")


# ------------------------------------------------------------ the reference vs finite differences

def _fd_inputs(shape, axis, rng):
    c = shape[axis]
    return (rng.standard_normal(shape) * 2 + 0.5, rng.standard_normal(shape), rng.uniform(0.5, 1.5, c),
            rng.standard_normal(c), rng.standard_normal(c), rng.uniform(0.5, 2.0, c))


@pytest.mark.parametrize("shape,axis", [((4, 3), 1), ((2, 3, 5), 1), ((2, 3, 1, 2, 2), 1), ((2, 2, 2, 3), 3)],
                         ids=["NC", "NCL", "NCDHW", "NHWC"])
@pytest.mark.parametrize("training", [True, False], ids=["training", "eval"])
def test_reference_matches_finite_differences(shape, axis, training, rng):
    """dx, dweight, dbias are the derivatives of L = sum(dy * forward): the training forward
    recomputes the batch statistics from x, the eval forward uses constant running ones."""
    x, dy, w, b, rm, rv = _fd_inputs(shape, axis, rng)
    _, mean, invstd = ref.batch_norm(x, w, b, rm, rv, training, EPS, axis)

    def loss(x_=x, w_=w, b_=b):
        return np.sum(dy * ref.batch_norm(x_, w_, b_, rm, rv, training, EPS, axis)[0])

    dx, dw, db = ref.batch_norm_backward(dy, x, w, rm, rv, mean, invstd, training, EPS, axis)
    assert_gradient("dx", dx, central_difference(lambda v: loss(x_=v), x))
    assert_gradient("dweight", dw, central_difference(lambda v: loss(w_=v), w))
    assert_gradient("dbias", db, central_difference(lambda v: loss(b_=v), b))


def test_reference_null_inputs_are_cann_fills(rng):
    x, dy, w, _, rm, rv = _fd_inputs((2, 3, 4), 1, rng)
    _, mean, invstd = ref.batch_norm(x, w, 0 * w, None, None, True, EPS)
    for training in (True, False):
        filled = ref.batch_norm_backward(dy, x, np.ones(3), np.zeros(3), np.ones(3), np.zeros(3), np.ones(3),
                                         training, EPS)
        nulls = ref.batch_norm_backward(dy, x, None, None, None, None, None, training, EPS)
        for a, b in zip(filled, nulls):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("training", [True, False], ids=["training", "eval"])
def test_reference_agrees_with_aten_in_float64(training, rng):
    """ATen's hand-written native_batch_norm_backward is a second, independent reference."""
    torch = pytest.importorskip("torch")
    x, dy, w, _, rm, rv = _fd_inputs((3, 4, 5, 2), 1, rng)
    _, mean, invstd = ref.batch_norm(x, w, 0 * w, rm, rv, True, EPS)
    ours = ref.batch_norm_backward(dy, x, w, rm, rv, mean, invstd, training, EPS)
    t = torch.from_numpy
    theirs = torch.ops.aten.native_batch_norm_backward(t(dy), t(x), t(w), t(rm), t(rv), t(mean), t(invstd), training,
                                                       EPS, [True, True, True])
    for mine, vendor in zip(ours, theirs):
        np.testing.assert_allclose(mine, vendor.numpy(), rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------ the kernel vs the reference (llvm)

RANK8 = (2, 3, 1, 2, 1, 3, 2, 2)
KERNEL_PROBLEMS = [
    Problem((1, 1)),                           # one element per channel: dx is exactly 0
    Problem((7, 33)),                          # 2-D (N, C)
    Problem((3, 7, 33)),                       # ragged
    Problem((2, 5, 941), False, 1e-3),         # eval, ragged HW
    Problem((1, 941, 1)),                      # many channels, one element each
    Problem(RANK8),                            # rank 8
    Problem((5, 4, 3, 2, 7), False),           # 5-D eval
    Problem((4, 5, 3, 6), channel_last=True),  # NHWC as the kernel sees it: (N*H*W, C, 1)
]


@pytest.mark.parametrize("problem", KERNEL_PROBLEMS, ids=lambda p: p.label())
@pytest.mark.parametrize("combo", BN.combos, ids=lambda c: c.tag)
def test_kernel_matches_reference(combo, problem, rng):
    kernel = kernels.get_kernel(BN, combo, "llvm")
    comparisons, _ = run_and_compare(kernel, problem, rng)
    assert [c.name for c in comparisons] == ["dx", "dweight", "dbias"]
    _assert_all_pass(comparisons, f"{combo.tag} {problem}")


LONG = [("f32-f32", Problem((2, 3, 12290))), ("bf16-f32", Problem((2, 3, 12290))), ("f16-f16", Problem((12290, 3), False))]


@pytest.mark.parametrize("tag,problem", LONG, ids=[f"{t}-{p.label()}" for t, p in LONG])
def test_kernel_long_reductions(tag, problem, rng):
    """12,290 elements per channel along HW, and 12,290 rows of N (float32 accumulation)."""
    comparisons, _ = run_and_compare(kernels.get_kernel(BN, tag, "llvm"), problem, rng)
    _assert_all_pass(comparisons, f"{tag} {problem}")


EMPTY = [pytest.param((0, 4, 5), id="N0"), pytest.param((2, 4, 0), id="HW0"), pytest.param((3, 0, 5), id="C0")]


@pytest.mark.parametrize("shape", EMPTY)
@pytest.mark.parametrize("combo", [BN.combo(t) for t in UNIFORM], ids=lambda c: c.tag)
def test_kernel_empty_tensors(combo, shape, rng):
    """The kernel over no elements per channel: dweight and dbias must be zeros. Outputs and the
    kernel's scratch (its partial sums) start as nan, so nothing unwritten can pass by luck."""
    problem = Problem(shape)
    kernel = kernels.get_kernel(BN, combo, "llvm")
    arrays = BN.random_inputs(problem, combo, rng)
    reference = BN.reference(problem, arrays)
    outputs = {n: np.full(reference[n].shape, np.nan, numpy_dtype(combo[n])) for n in BN.outputs}
    args = BN.kernel_args(problem, {**arrays, **outputs})
    scratch = kernel.scratch_shapes(kernel_shapes(problem))
    args.update({b.name: np.full(scratch[b.name], np.nan, b.dtype) for b in kernel.scratch})
    kernel(args)
    _assert_all_pass(compare_outputs(BN, combo, outputs, reference), f"{combo.tag} {shape}")
    for name in ("dweight", "dbias"):
        np.testing.assert_array_equal(outputs[name].astype(np.float32), np.zeros(problem.C, np.float32))


# eval with a non-finite x or dy: test_eval_non_finite_data_makes_the_channels_dx_nan
SPECIALS = [(t, v, True) for t, v in (("dy", np.nan), ("dy", np.inf), ("x", np.nan), ("weight", np.nan))] + [
    ("weight", np.nan, False), ("weight", np.inf, False)]


@pytest.mark.parametrize("tensor,value,training", SPECIALS,
                         ids=[f"{t}={v}-{'training' if m else 'eval'}" for t, v, m in SPECIALS])
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_kernel_propagates_nan_and_inf(tensor, value, training, rng):
    problem = Problem((2, 3, 7), training)
    arrays = BN.random_inputs(problem, BN.combo("f32-f32"), rng)
    arrays[tensor] = arrays[tensor].copy()
    arrays[tensor][(1,) if tensor == "weight" else (1, 1, 3)] = value
    reference = BN.reference(problem, arrays)
    assert not np.isfinite(reference["dx"][:, 1]).all() or not np.isfinite(reference["dweight"][1])
    assert np.isfinite(reference["dx"][:, [0, 2]]).all(), "the other channels stay finite"
    comparisons, _ = run_and_compare(kernels.get_kernel(BN, "f32-f32", "llvm"), problem, rng, inputs=arrays)
    _assert_all_pass(comparisons, f"{tensor}={value}")


@pytest.mark.parametrize("tensor", ["x", "dy"])
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_eval_non_finite_data_makes_the_channels_dx_nan(tensor, rng):
    """Known difference of the one-kernel design: eval's dx still carries the blended terms
    t * sum_dy / M and (x - mean) * t * sum_dy_xmu ..., which are 0 * inf = nan when the
    channel holds an inf, so the whole channel's dx is nan, where CANN's eval gradInput
    (dy * w * invstd) is non-finite only at that dy element (and never reads x). dweight and
    dbias agree. A Select on the mode in the TE (which the proof's translator lacks) would
    remove it; training is exact (test_kernel_propagates_nan_and_inf)."""
    problem = Problem((2, 3, 7), False)
    arrays = BN.random_inputs(problem, BN.combo("f32-f32"), rng)
    arrays[tensor] = arrays[tensor].copy()
    arrays[tensor][1, 1, 3] = np.inf
    reference = BN.reference(problem, arrays)
    _, outputs = run_and_compare(kernels.get_kernel(BN, "f32-f32", "llvm"), problem, rng, inputs=arrays)
    assert np.isfinite(np.delete(reference["dx"][:, 1].ravel(), 10)).all() and np.isnan(outputs["dx"][:, 1]).all()
    assert np.isfinite(outputs["dx"][:, [0, 2]]).all()
    agree = [c for c in compare_outputs(BN, BN.combo("f32-f32"), outputs, reference) if c.name != "dx"]
    _assert_all_pass(agree, f"eval {tensor}=inf")


# ------------------------------------------------------------ OpenCL (PoCL) and CUDA (nvcc)

OPENCL = get_target("opencl")


# The combos covering keeps on opencl over every op (tests/tiers.py: kernels_kept_on); the other
# combos in the extended tier (opgen generate verifies each on opencl too).
OPENCL_COMBOS = kept_on(BN, "opencl")


@pytest.mark.skipif(not OPENCL.can_run(), reason="opencl cannot run here")
@pytest.mark.parametrize("combo", OPENCL_COMBOS)
def test_opencl_every_combo(combo, rng):
    kernel = kernels.get_kernel(BN, combo, OPENCL)
    problems = [Problem((3, 5, 17))] + ([Problem((2, 4, 33), False, 1e-3), Problem((3, 2, 2, 6), channel_last=True)]
                                        if combo.tag in UNIFORM else [])
    for problem in problems:
        comparisons, _ = run_and_compare(kernel, problem, rng)
        _assert_all_pass(comparisons, f"opencl {combo.tag} {problem}")


# Every kernel's nvcc check runs in the extended tier; the default tier compiles each GPU pattern and
# dtype mix once (tests/test_gpu_cuda.py).
@pytest.mark.full
@pytest.mark.skipif(cuda_target.nvcc() is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("tag", ["f32-f32", "bf16-bf16-bf16-f32-bf16"])
def test_cuda_compiles_for_sm80_and_sm90(tag):
    cuda = get_target("cuda")
    reports = cuda.compile_check(kernels.get_kernel(BN, tag, cuda).module)
    assert [r.arch for r in reports] == ["sm_80", "sm_90"] and all(r.ok and r.spill_bytes == 0 for r in reports)


# ------------------------------------------------------------ through the aclnn API: values

def _run(problem, tag, rng, edit=None, prod="Ascend950", skip=()):
    """A complete two-phase call on random inputs (``edit(args, arrays)`` changes it; None in
    ``arrays`` is a null the reference fills too); checks the outputs against the reference
    and that no input was modified."""
    combo = BN.combo(tag)
    with product(prod):
        args, arrays = base_args(BN, problem, combo, rng)
        if edit:
            edit(args, arrays)
        before = {k: None if v is None else np.array(v, copy=True) for k, v in arrays.items()}
        status, msg = run_both(BN, args)
    assert status == 0, msg
    for k, v in arrays.items():
        if v is not None:
            np.testing.assert_array_equal(np.asarray(v), before[k], err_msg=f"input {k} was modified")
    assert_matches(BN, combo, problem, arrays, args, skip)
    return args


def _every_product_combo():
    for prod in PRODUCTS:
        for i, combo in enumerate(BN.products[prod]):
            yield pytest.param(prod, combo.tag, i % 2 == 0, id=f"{prod}-{combo.tag}")


@pytest.mark.parametrize("prod,tag,training", list(_every_product_combo()))
def test_aclnn_every_combo_of_every_product(prod, tag, training, rng):
    """32768 elements: the size from which the CPU schedules run parallel, so these calls reuse
    the kernels test_kernel_matches_reference built (smaller ones get a serial build each)."""
    _run(Problem((4, 8, 32, 32), training, 1e-3), tag, rng, prod=prod)


@pytest.mark.parametrize("shape", [(5, 3), (2, 3, 4), (2, 3, 2, 2), (2, 3, 1, 2, 2), (2, 3, 1, 1, 2, 2), (1, 3, 2, 1, 1, 2, 2),
                                   RANK8], ids=lambda s: f"{len(s)}d")
@pytest.mark.parametrize("prod,tag", [("Ascend950", "f32-f32"), ("AtlasA2", "bf16-f32"), ("AtlasTraining", "f16-f16")])
def test_aclnn_ranks_2_to_8(shape, prod, tag, rng):
    _run(Problem(shape, shape[0] % 2 == 0), tag, rng, prod=prod)


def _strided(a: np.ndarray, axis: int = -1) -> np.ndarray:
    """A non-contiguous view holding a copy of ``a`` (every other element along ``axis``)."""
    shape = list(a.shape)
    shape[axis] *= 2
    base = np.full(shape, 7, a.dtype)
    index = [slice(None)] * a.ndim
    index[axis] = slice(None, None, 2)
    view = base[tuple(index)]
    view[...] = a
    return view


@pytest.mark.parametrize("tag", ["f32-f32", "bf16-bf16-bf16-f32-bf16"])
@pytest.mark.parametrize("training", [True, False], ids=["training", "eval"])
def test_aclnn_strided_inputs_and_outputs(tag, training, rng):
    def edit(args, arrays):
        for name in ("gradOut", "input", "weight", "runningVar", "saveInvstd"):
            args[name] = _strided(np.asarray(args[name]))
            arrays[BN.api.param(name).kernel] = args[name]
        args["input"] = np.asfortranarray(np.asarray(args["input"]))           # another layout
        arrays["x"] = args["input"]
        for name in ("gradInput", "gradWeight", "gradBias"):
            args[name] = _strided(np.asarray(args[name]), 0)
    args = _run(Problem((3, 4, 5), training), tag, rng, edit)
    assert not args["gradInput"].flags.c_contiguous and args["gradInput"].base[1::2].min() == 7   # gaps untouched


@pytest.mark.parametrize("mask", list(itertools.product([False, True], repeat=3)), ids=str)
@pytest.mark.parametrize("absent", ["sentinel", "null"])
def test_aclnn_every_output_mask(mask, absent, rng):
    """An output whose bit is false is neither required nor written (doc l.211; api l.843-863)."""
    skip = [k for k, bit in zip(("dx", "dweight", "dbias"), mask) if not bit]
    sentinels = {}

    def edit(args, arrays):
        args["outputMask"] = list(mask)
        for name, bit in zip(("gradInput", "gradWeight", "gradBias"), mask):
            if not bit:
                args[name] = None if absent == "null" else np.full(np.shape(args[name]), 5, args[name].dtype)
                sentinels[name] = args[name]
    _run(Problem((2, 3, 5)), "f32-f32", rng, edit, skip=skip)
    for name, value in sentinels.items():
        assert value is None or (value == 5).all(), name


NULLABLE = ("weight", "runningMean", "runningVar", "saveMean", "saveInvstd")


@pytest.mark.parametrize("nulls", [(n,) for n in NULLABLE] + [NULLABLE], ids=lambda n: "+".join(n))
@pytest.mark.parametrize("training", [True, False], ids=["training", "eval"])
@pytest.mark.parametrize("prod,tag", [("Ascend950", "f32-f32"), ("AtlasA2", "f16-f16-f16-f32-f16")])
def test_aclnn_null_optional_inputs_are_filled(nulls, training, prod, tag, rng):
    """(The 950 refuses one null running statistic beside 16-bit ones in training, B15: A2 here.)"""
    def edit(args, arrays):
        for name in nulls:
            args[name] = arrays[BN.api.param(name).kernel] = None
    _run(Problem((2, 3, 4), training, 0.25), tag, rng, edit, prod=prod)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("training", [True, False], ids=["training", "eval"])
def test_statistics_the_mode_does_not_read_cannot_reach_the_result(training, rng):
    """Training never reads runningMean/runningVar or eps, eval never saveMean/saveInvstd
    (eval may pass them with length 0, doc l.171): nan, negative variances and eps = -1
    there change nothing (the kernel's arithmetic blend would turn them into nan)."""
    def edit(args, arrays):
        unused = ("runningMean", "runningVar") if training else ("saveMean", "saveInvstd")
        for name in unused:
            args[name] = np.full(3, np.nan if name.endswith("Mean") else -4.0, np.float32)
        if training:
            args["eps"] = -1.0
        else:
            args["saveMean"] = args["saveMean"][:0]
    _run(Problem((2, 3, 6), training), "f32-f32", rng, edit)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("training", [True, False], ids=["training", "eval"])
def test_unread_statistics_are_plan_fills_and_the_call_keeps_them(training, rng, monkeypatch):
    """ApiSpec.unread (api._unread): the pair the mode does not read is filled by the plan like
    a null pair (plan-owned constants for the host kernel: no workspace, the binder's fast
    path), so nan there leaves every output bit for bit as with that pair null; the rules
    saw the caller's tensors (a float64 unused statistic is still 161002) and ``call.values``
    still holds them; their dtypes choose no kernel (float16 data with a float32 unused pair
    runs the all-float16 kernel)."""
    unused = ("runningMean", "runningVar") if training else ("saveMean", "saveInvstd")
    calls = []
    real = aclnn.make_plan
    monkeypatch.setattr(aclnn, "make_plan", lambda call, *a: calls.append(call) or real(call, *a))
    results = []
    for value in (None, np.nan):
        args = bn((2, 3, 5), io=np.float16, stat=np.float16, training=training)
        args["gradOut"] = rng.standard_normal((2, 3, 5)).astype(np.float16) if not results else results[0][1]
        for name in unused:
            args[name] = None if value is None else np.full(3, value, np.float32)
        with product("Ascend950"):
            status, size, executor = aclnn.aclnnBatchNormBackwardGetWorkspaceSize(**args)
            assert status == 0 and size == 0, acl.aclGetRecentErrMsg()
            assert aclnn.aclnnBatchNormBackward(None, 0, executor, None) == 0
        plan = executor.plan
        fills = {p.kernel: p.fill for p in plan.placements if p.kind == "fill"}
        want = {"running_mean": 0.0, "running_var": 1.0} if training else {"save_mean": 0.0, "save_invstd": 1.0}
        assert {k: fills[k] for k in want} == want and all(p.constant for p in plan.placements if p.kind == "fill")
        assert plan.binds_directly and plan.kernel.combo.tag == "f16-f16"
        results.append((b"".join(args[n].tobytes() for n in ("gradInput", "gradWeight", "gradBias")), args["gradOut"]))
    assert results[0][0] == results[1][0] and np.isfinite(args["gradInput"]).all()
    call = calls[-1]
    assert all(call.values[n] is not None and call.values[n].dtype == "float32" for n in unused)
    assert call.unread == frozenset(unused)
    status, message = bn_status(**{unused[0]: np.zeros(3, np.float64), "training": training})
    assert status == 161002 and f"{unused[0]} has dtype float64" in message


@pytest.mark.parametrize("fmt,shape", [("NHWC", (2, 3, 4, 5)), ("NDHWC", (2, 2, 3, 2, 4))])
def test_channel_last_on_the_950(fmt, shape, rng):
    """NHWC/NDHWC aclTensors: the channel is the last axis (GetDimC); the kernel reads them
    as (N*H*W, C, 1) in place of a transpose."""
    problem = Problem(shape, channel_last=True)
    arrays = BN.random_inputs(problem, BN.combo("f32-f32"), rng)
    c = shape[-1]
    grad_input = tagged(np.zeros(shape, np.float32), fmt)
    args = dict(gradOut=tagged(arrays["dy"], fmt), input=tagged(arrays["x"], fmt), weight=arrays["weight"],
                runningMean=arrays["running_mean"], runningVar=arrays["running_var"], saveMean=arrays["save_mean"],
                saveInvstd=arrays["save_invstd"], training=True, eps=EPS, outputMask=[True] * 3,
                gradInput=grad_input, gradWeight=np.zeros(c, np.float32), gradBias=np.zeros(c, np.float32))
    with product("Ascend950"):
        status, msg = run_both(BN, args)
    assert status == 0, msg
    outputs = {"dx": grad_input.host_view(), "dweight": args["gradWeight"], "dbias": args["gradBias"]}
    _assert_all_pass(compare_outputs(BN, BN.combo("f32-f32"), outputs, BN.reference(problem, arrays)), fmt)
    with product("AtlasA2"):
        status, _, _ = phase_one(BN, args)
    assert status == 161002 and "does not support NHWC or NDHWC" in acl.aclGetRecentErrMsg()


def test_empty_calls_succeed_unchecked_and_write_nothing():
    """B5: an empty input or gradOut returns success after the two null checks; nothing else
    is checked (a null mask, wrong shapes, a null output asked for) and nothing is written."""
    for prod in PRODUCTS:
        args = bn((0, 3, 4))
        args.update(gradWeight=np.full(3, 5.0, np.float32), gradBias=np.full(3, 5.0, np.float32))
        with product(prod):
            assert run_both(BN, args) == (0, "")
            assert (args["gradWeight"] == 5).all() and (args["gradBias"] == 5).all()
            odd = dict(args, outputMask=None, weight=np.ones(7, np.float32), gradInput=None, input=np.ones((5, 2), np.float32))
            assert run_both(BN, odd) == (0, "")
            assert run_both(BN, dict(args, gradOut=np.ones((2, 3, 4), np.float32), input=np.ones((2, 0), np.float32)))[0] == 0
            assert bn_status(prod, args, input=None)[0] == 161001          # the null checks come first


def test_mask_of_four_off_the_950_reads_the_first_three(rng):
    args = _run(Problem((2, 3, 4)), "f32-f32", rng, lambda a, arr: a.update(
        outputMask=[True, False, True, True], gradWeight=np.full(3, 5.0, np.float32)), prod="AtlasA2", skip=("dweight",))
    assert (args["gradWeight"] == 5).all()
    assert bn_status("Ascend950", outputMask=[True, False, True, True])[0] == 161001


# ------------------------------------------------------------ every error line, literally

def bn(shape=(2, 3, 4), io=np.float32, stat=np.float32, training=True, c=None):
    c = shape[1] if c is None else c
    return dict(gradOut=np.ones(shape, io), input=np.ones(shape, io), weight=np.ones(c, stat),
                runningMean=np.zeros(c, stat), runningVar=np.ones(c, stat), saveMean=np.zeros(c, stat),
                saveInvstd=np.ones(c, stat), training=training, eps=EPS, outputMask=[True, True, True],
                gradInput=np.zeros(shape, io), gradWeight=np.zeros(c, stat), gradBias=np.zeros(c, stat))


def bn_status(prod="Ascend950", args=None, **changes):
    args = dict(bn() if args is None else args)
    args.update(changes)
    with product(prod):
        status, _, _ = aclnn.aclnnBatchNormBackwardGetWorkspaceSize(**args)
    return status, acl.aclGetRecentErrMsg() if status else ""


@pytest.mark.parametrize("name", ["gradOut", "input"])
def test_l316_gradout_or_input_null(name):
    for prod in PRODUCTS:
        status, msg = bn_status(prod, **{name: None})
        assert status == 161001 and f"{name} is a null pointer" in msg


@pytest.mark.parametrize("bit,name", [(0, "gradInput"), (1, "gradWeight"), (2, "gradBias")])
def test_l319_l325_mask_bit_true_and_output_null(bit, name):
    for prod in PRODUCTS:
        status, msg = bn_status(prod, **{name: None})
        assert status == 161001 and f"outputMask[{bit}] is true but {name} is a null pointer" in msg
    mask = [True] * 3
    mask[bit] = False
    assert bn_status(**{name: None, "outputMask": mask})[0] == 0
    assert bn_status(**{name: np.zeros(9, np.float32), "outputMask": mask})[0] == 0      # not checked either


def test_l330_input_gradout_dtype_format_shape():
    status, msg = bn_status(gradOut=np.ones((2, 3, 4), np.float64))
    assert status == 161002 and "gradOut has dtype float64" in msg
    status, msg = bn_status("AtlasTraining", bn(io=BF16, stat=BF16))
    assert status == 161002 and "gradOut has dtype bfloat16" in msg and "AtlasTraining" in msg
    nz = {n: tagged(np.ones((2, 3, 4), np.float32), "FRACTAL_NZ") for n in ("gradOut", "input", "gradInput")}
    status, msg = bn_status(**nz)
    assert status == 161002 and "gradOut has the private format FRACTAL_NZ" in msg
    status, msg = bn_status(**{n: np.ones((2, 3, 1, 1, 1, 1, 1, 1, 4), np.float32) for n in ("gradOut", "input")},
                            gradInput=np.zeros((2, 3, 1, 1, 1, 1, 1, 1, 4), np.float32))
    assert status == 161002 and "has 9 dimensions; expected 2 to 8" in msg


def test_l333_small_tensors_when_non_null():
    status, msg = bn_status(runningMean=np.zeros(3, np.float64))
    assert status == 161002 and "runningMean has dtype float64" in msg
    status, msg = bn_status(runningVar=np.ones((1, 3), np.float32))
    assert status == 161002 and "runningVar has shape (1, 3); expected (3,)" in msg
    for name in NULLABLE:
        assert bn_status(**{name: None})[0] == 0


def test_l336_mask_length():
    for prod in PRODUCTS:                         # B1: null or empty is 161001 everywhere
        assert bn_status(prod, outputMask=None)[0] == 161001
        assert bn_status(prod, outputMask=[])[0] == 161001
    status, msg = bn_status(outputMask=[True, True])                 # B2: the 950's op_api, 161001
    assert status == 161001 and "outputMask has 2 elements; expected 3" in msg
    for prod in ("AtlasA3", "AtlasA2", "AtlasTraining"):             # B3: the doc's 161002 for 1-2
        assert bn_status(prod, outputMask=[True])[0] == 161002
        assert bn_status(prod, outputMask=[True, True, True, False])[0] == 0
    assert bn_status(outputMask=acl.aclCreateBoolArray([True, False, True]), gradWeight=None)[0] == 0
    assert bn_status(outputMask=[1, 0, 1])[0] == 161002             # ints are not bools


def test_l339_l345_outputs_asked_for():
    assert bn_status(gradWeight=np.zeros(3, np.float64))[0] == 161002
    status, msg = bn_status(gradBias=np.zeros(4, np.float32))
    assert status == 161002 and "gradBias has shape (4,); expected (3,)" in msg
    status, msg = bn_status(gradInput=np.zeros((2, 12), np.float32))
    assert status == 161002 and "gradInput has shape (2, 12); expected gradOut's (2, 3, 4)" in msg
    status, msg = bn_status(gradWeight=np.zeros(3, np.float16))      # 950: float32 or weight's dtype
    assert status == 161002 and "gradWeight has dtype float16" in msg
    assert bn_status(gradBias=np.zeros(4, np.float32), outputMask=[True, True, False])[0] == 0


def test_l348_lengths_differ_from_the_channel_axis():
    for prod in PRODUCTS:      # B11: saveMean/saveInvstd and the gradients on every product (the 950's rule)
        for name in NULLABLE + ("gradWeight", "gradBias"):
            status, msg = bn_status(prod, **{name: np.ones(4, np.float32)})
            assert status == 161002 and f"{name} has shape (4,); expected (3,)" in msg, (prod, name)
    assert bn_status(saveMean=np.zeros(0, np.float32), saveInvstd=np.ones(0, np.float32), training=False)[0] == 0
    status, msg = bn_status(saveMean=np.zeros(0, np.float32), training=True)             # B12
    assert status == 161002 and "saveMean has shape (0,)" in msg


def test_l351_formats_differ():
    status, msg = bn_status(gradOut=tagged(np.ones((2, 3, 4, 5), np.float32), "NHWC"),
                            **{n: np.ones((2, 3, 4, 5), np.float32) for n in ("input", "gradInput")})
    assert status == 161002 and "input has format ND (read as NCHW); expected gradOut's NHWC (read as NHWC)" in msg
    four = {n: np.ones((2, 3, 4, 5), np.float32) for n in ("gradOut", "input", "gradInput")}
    assert bn_status(**dict(four, input=tagged(four["input"], "NCHW")))[0] == 0            # ND 4-D reads as NCHW


def test_l354_dtypes_differ():
    status, msg = bn_status(input=np.ones((2, 3, 4), np.float16))
    assert status == 161002 and "input has dtype float16" in msg
    for prod in PRODUCTS:       # gradInput: the 950's op_api, and the doc elsewhere (B7)
        status, msg = bn_status(prod, gradInput=np.zeros((2, 3, 4), np.float16))
        assert status == 161002 and "gradInput has dtype float16" in msg


def test_l357_shapes_differ_or_rank():
    status, msg = bn_status(input=np.ones((2, 3, 5), np.float32))
    assert status == 161002 and "input has shape (2, 3, 5); expected gradOut's (2, 3, 4)" in msg
    status, msg = bn_status(**{n: np.ones(6, np.float32) for n in ("gradOut", "input", "gradInput")})
    assert status == 161002 and "has 1 dimensions; expected 2 to 8" in msg


def test_products():
    status, msg = bn_status("AtlasInference")                                        # doc l.19-21, B17
    assert status == 161002 and "not supported on AtlasInference" in msg
    for prod in PRODUCTS:
        assert bn_status(prod)[0] == 0
        assert bn_status(prod, bn(io=np.float16, stat=np.float32))[0] == 0         # the UT's mixed case (B6)
    assert bn_status("AtlasA2", bn(io=BF16, stat=BF16))[0] == 0


def test_950_dtype_rows():
    """doc l.283-292: the five statistics F32 or gradOut's, the pairs alike, gradWeight/gradBias
    F32 or weight's and alike (B13: compared even when one is masked off)."""
    half = bn(io=np.float16, stat=np.float16)
    assert bn_status(args=dict(half, saveMean=np.zeros(3, np.float32), saveInvstd=np.ones(3, np.float32)))[0] == 0
    status, msg = bn_status(args=dict(half, runningVar=np.ones(3, np.float32)))
    assert status == 161002 and "runningVar has dtype float32; expected float16" in msg
    assert bn_status(weight=np.ones(3, np.float16))[0] == 161002                     # f32 data: f32 only
    assert bn_status(args=half, weight=np.ones(3, BF16))[0] == 161002
    status, msg = bn_status(outputMask=[True, False, True], gradWeight=np.zeros(3, np.float16))
    assert status == 161002 and "gradBias has dtype float32; expected float16" in msg
    assert bn_status(outputMask=[True, False, True], gradWeight=None)[0] == 0
    # B14: with weight null, gradWeight/gradBias only match the list and each other; opgen's
    # kernels write them in gradOut's dtype or float32, so bfloat16 ones with float16 data are not offered
    assert bn_status(args=dict(half, weight=None), gradWeight=np.zeros(3, np.float32),
                     gradBias=np.zeros(3, np.float32))[0] == 0
    status, msg = bn_status(args=dict(half, weight=None), gradWeight=np.zeros(3, BF16), gradBias=np.zeros(3, BF16))
    assert status == 161002 and "gradWeight has dtype bfloat16; opgen's Ascend950 kernels" in msg


def test_a2_mixed_rows_beyond_the_kernels_are_refused_clearly():
    """B6, adopted as far as kernels exist: CANN's A2/A3/training op_api would cast any
    supported dtype per tensor; opgen offers the 950's rows and names what it lacks."""
    status, msg = bn_status("AtlasA2", weight=np.ones(3, np.float16))
    assert status == 161002 and "weight has dtype float16; opgen's AtlasA2 kernels take float32" in msg
    status, msg = bn_status("AtlasA2", bn(io=np.float16, stat=np.float16), runningVar=np.ones(3, np.float32))
    assert status == 161002 and "runningVar has dtype float32; opgen's kernels take it in runningMean's float16" in msg


def test_950_formats_by_rank():
    five = {n: np.ones((2, 3, 2, 2, 2), np.float32) for n in ("gradOut", "input", "gradInput")}
    assert bn_status(**five)[0] == 0                                                # ND 5-D reads as NCDHW
    status, msg = bn_status(**{n: tagged(a, "NCHW") for n, a in five.items()})       # B9
    assert status == 161002 and "has 5 dimensions and format NCHW; expected NCDHW or NDHWC" in msg
    assert bn_status("AtlasA2", **{n: tagged(a, "NCHW") for n, a in five.items()})[0] == 0
    three = {n: tagged(np.ones((2, 3, 4), np.float32), "NHWC") for n in ("gradOut", "input", "gradInput")}
    status, msg = bn_status(**three, weight=np.ones(4, np.float32), gradWeight=np.zeros(4, np.float32),
                            gradBias=np.zeros(4, np.float32), runningMean=None, runningVar=None, saveMean=None,
                            saveInvstd=None)
    assert status == 161002 and "format NHWC with 3 dimensions; expected 4" in msg
    four = {n: tagged(np.ones((2, 3, 4, 5), np.float32), "NCDHW") for n in ("gradOut", "input", "gradInput")}
    status, msg = bn_status(**four)                                                  # B8: the kernel tiling
    assert status == 561103 and "Not supported format" in msg and "ACLNN_ERR_INNER_NULLPTR" in msg
    assert bn_status(**four, outputMask=[False] * 3)[0] == 0                        # no kernel: early return
    assert bn_status("AtlasA3", **four)[0] == 0


def test_950_training_with_one_running_statistic_null():
    """B15: the null one is filled float32, the other is float16 and so is weight: no kernel."""
    half = bn(io=np.float16, stat=np.float16)
    status, msg = bn_status(args=half, runningMean=None)
    assert status == 561103 and "runningMean is null (filled as float32) while runningVar is float16" in msg
    assert bn_status(args=half, runningMean=None, training=False)[0] == 0
    assert bn_status(args=half, runningMean=None, runningVar=None)[0] == 0
    assert bn_status(args=half, runningMean=None, weight=None)[0] == 0
    assert bn_status("AtlasA2", args=half, runningMean=None)[0] == 0


def test_attributes_by_their_c_type():
    status, msg = bn_status(training=1)
    assert status == 161002 and "training must be a bool" in msg
    status, msg = bn_status(eps="1e-5")
    assert status == 161002 and "eps must be a number" in msg
    assert bn_status(eps=0)[0] == 0 and bn_status(training=np.bool_(False))[0] == 0


def _call(prod, args) -> Call:
    values = aclnn._describe_all(BN, tuple(args[p.name] for p in BN.api.params))
    return Call(BN, prod, values)


def _violations():
    for prod in PRODUCTS:
        for i, rule in enumerate(BN.api.rules):
            if rule.products is None or prod in rule.products:
                for v in rule.violations:
                    if v.products is None or prod in v.products:
                        yield pytest.param(prod, i, v, id=f"{prod}-r{i}-{v.description}")


@pytest.mark.parametrize("prod,index,violation", list(_violations()))
def test_each_example_violation_breaks_its_own_rule_first(prod, index, violation):
    """Beyond test_aclnn_validation's status check: every earlier rule passes the mutated call,
    and the reported reason is this rule's."""
    with product(prod):
        args, _ = base_args(BN, BN.problems[0], BN.combo("f32-f32"), np.random.default_rng(0))
        violation.mutate(args)
        call = _call(prod, args)
        status, _, _ = phase_one(BN, args)
        message = acl.aclGetRecentErrMsg()
    applies = [r for r in BN.api.rules[:index] if r.products is None or prod in r.products]
    assert [r.seed for r in applies if r.check(call)] == []
    reason = BN.api.rules[index].check(call)
    assert reason and status == BN.api.rules[index].code and message.endswith(f": {reason}.")


# ------------------------------------------------------------ the proof, and proofs that can fail

def test_proof_holds_in_both_modes():
    report = derive.prove("batch_norm_backward")
    assert report.ok, report.summary()
    modes = {c.sizes["training"] for c in report.cases}
    assert modes == {0, 1} and any(c.sizes["N"] * c.sizes["HW"] == 1 for c in report.cases)
    assert all(c.checked == c.sizes["N"] * c.sizes["C"] * c.sizes["HW"] + 2 * c.sizes["C"]
               for c in report.cases)


def test_proof_of_a_mixed_combo_holds():
    report = derive.prove("batch_norm_backward", "bf16-bf16-f32-bf16-f32", cases=[(1, 2, 2, 1), (1, 2, 2, 0)])
    assert report.ok, report.summary()


@pytest.mark.parametrize("stage,case,broken,intact", [
    ("batch_norm_backward_sum_dy_xmu", (2, 2, 2, 1), ("batch_norm_backward_dweight", "batch_norm_backward_dx"),
     "batch_norm_backward_dbias"),
    ("batch_norm_backward_dx", (2, 2, 2, 1), ("batch_norm_backward_dx",), "batch_norm_backward_dweight"),
    # the mean's running term only counts in eval: the same flip passes in training, fails in eval
    ("batch_norm_backward_mean", (2, 2, 2, 0), ("batch_norm_backward_dweight",), "batch_norm_backward_dbias"),
    ("batch_norm_backward_invstd", (2, 2, 2, 0), ("batch_norm_backward_dx", "batch_norm_backward_dweight"),
     "batch_norm_backward_dbias"),
])
def test_a_flipped_sign_fails_the_proof(flip_stage, stage, case, broken, intact):  # noqa: F811
    hits = flip_stage(stage)
    report = derive.prove("batch_norm_backward", cases=[case])
    assert hits and not report.ok, report.summary()
    bad = report.cases[0].mismatches
    for name in broken:
        assert any(m.startswith(name + "[") for m in bad), (name, bad)
    assert not any(m.startswith(intact + "[") for m in bad), bad


def test_a_flip_in_the_running_mean_term_is_invisible_in_training(flip_stage):  # noqa: F811
    flip_stage("batch_norm_backward_mean")
    assert derive.prove("batch_norm_backward", cases=[(2, 2, 2, 1)]).ok


def test_document_formulas():
    checks = derive.check_seed_formulas([get_op("batch_norm_backward")])   # this op's alone (every op's: tests/test_derive.py)
    verdicts = [(c.output, c.matches) for c in checks]
    assert verdicts == [("dx", True), ("dx", False), ("dx", False), ("dweight", True), ("dbias", True),
                        ("dx", True), ("dweight", True), ("dbias", True)]
    assert "batch size" in checks[1].formula and "N*HxW" in checks[1].detail
    assert "saveInvstd is already 1/sqrt(var + eps)" in checks[2].detail


# ------------------------------------------------------------ the Pythonic function and torch

def test_pythonic_function(rng):
    problem = Problem((2, 3, 4, 5))
    a = BN.random_inputs(problem, BN.combo("f16-f32"), rng)
    dx, dweight, dbias = opgen.batch_norm_backward(a["dy"], a["x"], a["weight"], save_mean=a["save_mean"],
                                                   save_invstd=a["save_invstd"])
    assert dx.dtype == np.float16 and dx.shape == problem.x_shape and dweight.dtype == dbias.dtype == np.float32
    want = ref.batch_norm_backward(a["dy"], a["x"], a["weight"], None, None, a["save_mean"], a["save_invstd"], True,
                                   EPS)
    _assert_all_pass(compare_outputs(BN, BN.combo("f16-f32"), {"dx": dx, "dweight": dweight, "dbias": dbias},
                                     dict(zip(BN.outputs, want))), "pythonic")
    bf16 = {k: v.astype(BF16) for k, v in a.items()}
    _, dweight, dbias = opgen.batch_norm_backward(bf16["dy"], bf16["x"], bf16["weight"], save_mean=bf16["save_mean"],
                                                  save_invstd=bf16["save_invstd"])
    assert dweight.dtype == dbias.dtype == np.float32            # float32 unless asked otherwise
    _, dweight, _ = opgen.batch_norm_backward(bf16["dy"], bf16["x"], bf16["weight"], save_mean=bf16["save_mean"],
                                              save_invstd=bf16["save_invstd"], grad_weight=np.zeros(3, BF16),
                                              grad_bias=np.zeros(3, BF16))
    assert dweight.dtype == BF16
    with pytest.raises(opgen.AclnnError) as info:          # B13: gradWeight and gradBias alike
        opgen.batch_norm_backward(bf16["dy"], bf16["x"], bf16["weight"], grad_weight=np.zeros(3, BF16))
    assert info.value.status == 161002 and "gradBias has dtype float32" in info.value.message
    gi, gw, gb = opgen.batch_norm_backward(a["dy"], a["x"], None, a["running_mean"], a["running_var"], training=False,
                                           eps=1e-3, output_mask=(False, True, False))
    assert gi is None and gb is None and gw.dtype == np.float32
    want = ref.batch_norm_backward(a["dy"], a["x"], None, a["running_mean"], a["running_var"], None, None, False,
                                   float(np.float32(1e-3)))
    np.testing.assert_allclose(gw, want[1], rtol=1e-3, atol=1e-3)
    with pytest.raises(opgen.AclnnError) as info:
        opgen.batch_norm_backward(a["dy"], a["x"], np.ones(4, np.float32))
    assert info.value.status == 161002 and "weight has shape (4,)" in info.value.message
    with pytest.raises(opgen.AclnnError) as info:
        opgen.batch_norm_backward(a["dy"], None)
    assert info.value.status == 161001


@pytest.fixture
def tt():
    return pytest.importorskip("torch")


@pytest.fixture
def ot():
    return pytest.importorskip("opgen.torch")


def test_custom_op_passes_opcheck(tt, ot):
    tt.manual_seed(0)
    x, dy = tt.randn(3, 4, 5), tt.randn(3, 4, 5)
    mean, var = x.mean(dim=(0, 2)), x.var(dim=(0, 2), unbiased=False)
    args = (dy, x, tt.rand(4) + 0.5, tt.randn(4), tt.rand(4) + 0.5, mean, tt.rsqrt(var + EPS))
    tt.library.opcheck(tt.ops.opgen.batch_norm_backward.default, args + (True, EPS, [True, True, True]))
    tt.library.opcheck(tt.ops.opgen.batch_norm_backward.default, args[:5] + (None, None, False, 1e-3,
                                                                             [True, False, True]))


@pytest.fixture
def opgen_calls(monkeypatch):
    counts = {"n": 0}
    real = opgen.api.call_op

    def counted(op, *a, **k):
        counts["n"] += op.name == "batch_norm_backward"
        return real(op, *a, **k)
    monkeypatch.setattr(opgen.api, "call_op", counted)
    return counts


def _modules(ot, tt, dtype=None, **kwargs):
    ours, theirs = ot.BatchNorm2d(6, dtype=dtype, **kwargs), tt.nn.BatchNorm2d(6, dtype=dtype, **kwargs)
    if ours.affine:
        with tt.no_grad():
            ours.weight.uniform_(0.5, 1.5)
            ours.bias.uniform_(-1, 1)
    theirs.load_state_dict(ours.state_dict())
    return ours, theirs


def _step(module, x, dy):
    x = x.detach().clone().requires_grad_(True)
    module.zero_grad()
    y = module(x)
    y.backward(dy)
    return [y, x.grad] + [p.grad for p in module.parameters()]


@pytest.mark.parametrize("kwargs", [{}, {"affine": False}, {"track_running_stats": False}, {"momentum": None}],
                         ids=["default", "no-affine", "no-running-stats", "cumulative"])
def test_batchnorm2d_matches_torch_f32(tt, ot, kwargs, opgen_calls):
    tt.manual_seed(1)
    ours, theirs = _modules(ot, tt, **kwargs)
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    for mode in ("train", "train", "eval"):
        getattr(ours, mode)()
        getattr(theirs, mode)()
        x, dy = tt.randn(4, 6, 5, 7) * 2 + 0.5, tt.randn(4, 6, 5, 7)
        for a, b in zip(_step(ours, x, dy), _step(theirs, x, dy)):
            tt.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
        for a, b in zip(ours.buffers(), theirs.buffers()):
            tt.testing.assert_close(a, b)
    assert opgen_calls["n"] == 3


def test_batchnorm2d_bf16_within_tolerance_of_float64(tt, ot):
    """bf16 module: gradients as close to the float64 truth as bf16 outputs can be, and within
    bf16's tolerance of torch.nn's own bf16 module; running statistics equal torch's."""
    tt.manual_seed(4)
    ours, theirs = _modules(ot, tt, dtype=tt.bfloat16)
    exact = tt.nn.BatchNorm2d(6, dtype=tt.float64)
    exact.load_state_dict({k: v.double() if v.is_floating_point() else v for k, v in ours.state_dict().items()})
    x, dy = (tt.randn(2, 6, 5, 5) * 2 + 0.5).bfloat16(), tt.randn(2, 6, 5, 5).bfloat16()
    got, torch_bf16, want = _step(ours, x, dy), _step(theirs, x, dy), _step(exact, x.double(), dy.double())
    for a, t, b in zip(got[1:], torch_bf16[1:], want[1:]):
        assert a.dtype == tt.bfloat16
        scale = b.abs().max().item()
        tt.testing.assert_close(a.double(), b, rtol=2 ** -7, atol=2e-2 * scale)
        tt.testing.assert_close(a.double(), t.double(), rtol=2 ** -6, atol=2 ** -6 * scale)
    for a, b in zip(ours.buffers(), theirs.buffers()):
        tt.testing.assert_close(a, b)


def test_batchnorm2d_compiles_without_graph_break(tt, ot, opgen_calls):
    """One small compile (slow on 2 cores): fullgraph=True refuses any graph break; the backward
    reaches opgen through the custom op; gradients and running statistics equal eager torch.nn's."""
    tt.manual_seed(6)
    ours, theirs = _modules(ot, tt)
    x, dy = tt.randn(2, 6, 4, 4), tt.randn(2, 6, 4, 4)
    compiled = _step(tt.compile(ours, fullgraph=True), x, dy)
    assert opgen_calls["n"] == 1
    for a, b in zip(compiled, _step(theirs, x, dy)):
        tt.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    for a, b in zip(ours.buffers(), theirs.buffers()):
        tt.testing.assert_close(a, b)


# ------------------------------------------------------------ the document's C example (doc l.419-643)

def test_document_example():
    """The C example line by line: (1, 2, 4) float32 ND tensors, training, eps 1e-5, every
    output asked for; expected values from the digest (ATen gives the same)."""
    assert acl.aclInit(None) == 0 and acl.aclrtSetDevice(0) == 0
    ret, stream = acl.aclrtCreateStream()

    def create(host, shape):
        host = np.asarray(host, np.float32)
        ret, addr = acl.aclrtMalloc(host.nbytes, acl.ACL_MEM_MALLOC_HUGE_FIRST)
        assert acl.aclrtMemcpy(addr, host.nbytes, host, host.nbytes, acl.ACL_MEMCPY_HOST_TO_DEVICE) == 0
        return addr, acl.aclCreateTensor(shape, acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, shape, addr)

    data = list(range(8))
    _, grad_out = create(data, [1, 2, 4])
    _, self_ = create(data, [1, 2, 4])
    _, weight = create([1, 1], [2])
    _, r_mean = create([0, 0], [2])
    _, r_var = create([1, 1], [2])
    _, s_mean = create([0, 0], [2])
    _, s_var = create([1, 1], [2])
    out_mask = acl.aclCreateBoolArray([True, True, True], 3)
    grad_in_addr, grad_in = create([0] * 8, [1, 2, 4])
    grad_weight_addr, grad_weight = create([0, 0], [2])
    grad_bias_addr, grad_bias = create([0, 0], [2])
    status, workspace_size, executor = aclnn.aclnnBatchNormBackwardGetWorkspaceSize(
        grad_out, self_, weight, r_mean, r_var, s_mean, s_var, True, 1e-5, out_mask, grad_in, grad_weight, grad_bias)
    assert status == 0, acl.aclGetRecentErrMsg()
    workspace = acl.aclrtMalloc(workspace_size, acl.ACL_MEM_MALLOC_HUGE_FIRST)[1] if workspace_size > 0 else None
    assert aclnn.aclnnBatchNormBackward(workspace, workspace_size, executor, stream) == 0
    assert acl.aclrtSynchronizeStream(stream) == 0
    results = {}
    for name, addr, n in (("gradInput", grad_in_addr, 8), ("gradWeight", grad_weight_addr, 2),
                          ("gradBias", grad_bias_addr, 2)):
        host = np.zeros(n, np.float32)
        assert acl.aclrtMemcpy(host, host.nbytes, addr, host.nbytes, acl.ACL_MEMCPY_DEVICE_TO_HOST) == 0
        results[name] = host
    np.testing.assert_allclose(results["gradInput"], [-1.5, -4.0, -6.5, -9.0, -127.5, -158.0, -188.5, -219.0],
                               rtol=1e-6)
    np.testing.assert_allclose(results["gradWeight"], [14, 126], rtol=1e-6)
    np.testing.assert_allclose(results["gradBias"], [6, 22], rtol=1e-6)
    for t in (grad_out, self_, weight, r_mean, r_var, s_mean, s_var, grad_in, grad_weight, grad_bias):
        assert acl.aclDestroyTensor(t) == 0
    if workspace is not None:
        assert acl.aclrtFree(workspace) == 0
    assert acl.aclrtDestroyStream(stream) == 0


def test_document_example_in_eval():
    """The same data with training = false (the digest: gradInput = x * (1 + 1e-5)^-1/2)."""
    args = bn((1, 2, 4), c=2)
    x = np.arange(8, dtype=np.float32).reshape(1, 2, 4)
    args.update(gradOut=x.copy(), input=x.copy(), training=False)
    assert run_both(BN, args) == (0, "")
    np.testing.assert_allclose(args["gradInput"], x / np.sqrt(1 + np.float32(1e-5)), rtol=1e-6)
    np.testing.assert_allclose(args["gradWeight"], [13.99993, 125.99937], rtol=1e-6)
    np.testing.assert_allclose(args["gradBias"], [6, 22], rtol=1e-6)
