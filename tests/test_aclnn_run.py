"""Running the generated aclnn functions: results, layouts, edge cases, executors, threads."""
from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

from opgen import acl, aclnn
from opgen.dtypes import numpy_dtype
from opgen.ops import get_op
from opgen.ops.group_norm_backward import Problem as GNProblem
from opgen.ops.rms_norm_grad import Problem as RMSProblem

from aclnn_helpers import assert_matches, base_args, phase_one, product, run_both

RMS, GN = get_op("rms_norm_grad"), get_op("group_norm_backward")


def _run_and_check(op, problem, combo_tag, rng, edit=None, skip=()):
    combo = op.combo(combo_tag)
    args, arrays = base_args(op, problem, combo, rng)
    if edit:
        edit(args, arrays)
    before = {k: np.array(v, copy=True) for k, v in arrays.items()}
    status, msg = run_both(op, args)
    assert status == 0, msg
    for k, v in arrays.items():
        np.testing.assert_array_equal(np.asarray(v), before[k], err_msg=f"input {k} was modified")
    assert_matches(op, combo, problem, arrays, args, skip)
    return args


@pytest.mark.parametrize("tag", [c.tag for c in RMS.combos])
@pytest.mark.parametrize("problem", [RMSProblem((2, 1, 16), 1), RMSProblem((5, 33), 1), RMSProblem((3, 4, 8), 2)],
                         ids=str)
def test_rms_combos(tag, problem, rng):
    _run_and_check(RMS, problem, tag, rng)


@pytest.mark.parametrize("tag", [c.tag for c in GN.combos])
@pytest.mark.parametrize("problem", [GNProblem(2, 3, 4, 1), GNProblem(2, 6, 5, 3), GNProblem(3, 4, 7, 4)], ids=str)
def test_gn_combos(tag, problem, rng):
    _run_and_check(GN, problem, tag, rng)


# ---- must-accept: unusual but valid calls -----------------------------------------------

def test_rms_rstd_keepdim_and_flat(rng):
    problem = RMSProblem((2, 3, 16), 1)
    _run_and_check(RMS, problem, "f32-f32", rng, lambda a, arr: a.update(rstd=arr["rstd"].reshape(2, 3, 1)))
    # the flat form where CANN's tiling (CheckRstdShape) takes it: x's dims after rstd's are 1
    _run_and_check(RMS, RMSProblem((2, 1, 16), 1), "f32-f32", rng,
                   lambda a, arr: a.update(rstd=arr["rstd"].reshape(-1)))


def test_rms_gamma_covers_all_dims_and_1d(rng):
    _run_and_check(RMS, RMSProblem((3, 8), 2), "f16-f32", rng,
                   lambda a, arr: a.update(rstd=arr["rstd"].reshape(1)))
    _run_and_check(RMS, RMSProblem((16,), 1), "f32-f32", rng,
                   lambda a, arr: a.update(rstd=arr["rstd"].reshape(1)))


def test_gn_gamma_absent(rng):
    problem = GNProblem(2, 6, 5, 2)
    combo = GN.combo("f32-f32")
    args, arrays = base_args(GN, problem, combo, rng)
    args["gamma"] = None
    assert run_both(GN, args)[0] == 0
    arrays["gamma"] = np.ones(6, np.float32)
    assert_matches(GN, combo, problem, arrays, args)


@pytest.mark.parametrize("tag", ["f32-f32", "bf16-bf16"])
def test_a_fill_is_a_constant_of_the_plan_so_the_call_needs_no_workspace(tag, rng):
    """A null gamma on the host: the plan owns its filled tensor, so the call binds directly
    (opgen.launch's binder), asks for no workspace, and stays correct call after call
    (bfloat16 too, which numpy cannot hand over by DLPack)."""
    problem, combo = GNProblem(2, 6, 5, 2), GN.combo(tag)
    for _ in range(3):      # later calls reuse the plan and its constant
        args, arrays = base_args(GN, problem, combo, rng)
        args["gamma"] = None
        status, size, executor = phase_one(GN, args)
        assert status == 0 and size == 0 and executor.plan.binds_directly
        fills = [p for p in executor.plan.placements if p.kind == "fill"]
        assert [(p.kernel, p.constant) for p in fills] == [("gamma", True)] and executor.plan.used_bytes == 0
        assert aclnn.aclnnGroupNormBackward(None, 0, executor, None) == 0, acl.aclGetRecentErrMsg()
        arrays["gamma"] = np.ones(6, numpy_dtype(combo["gamma"]))
        assert_matches(GN, combo, problem, arrays, args)
        gc.collect()         # the constant outlives any temporary of the first call


def test_float_attributes_key_plans_by_their_bits():
    """-0.0 and 0.0 are equal but fill different bits; nan must find its own plan again."""
    from opgen.binding import value_key
    assert value_key(0.0) != value_key(-0.0) and value_key(1.5) == value_key(1.5)
    assert value_key(float("nan")) == value_key(float("nan")) and value_key(1) != value_key(1.0)


@pytest.mark.parametrize("problem", [GNProblem(2, 6, 1, 3), GNProblem(2, 6, 4, 6), GNProblem(1, 5, 3, 5)], ids=str)
def test_gn_hxw_1_and_group_c(problem, rng):
    _run_and_check(GN, problem, "f32-f32", rng)


@pytest.mark.parametrize("bit", [0, 1, 2])
def test_gn_one_output_mask_leaves_others_untouched(bit, rng):
    problem = GNProblem(2, 6, 5, 3)
    combo = GN.combo("f32-f32")
    args, arrays = base_args(GN, problem, combo, rng)
    names = ("gradInput", "gradGammaOut", "gradBetaOut")
    args["outputMask"] = [i == bit for i in range(3)]
    sentinels = {n: np.full(args[n].shape, 7.0, np.float32) for n in names if n != names[bit]}
    args.update(sentinels)
    assert run_both(GN, args)[0] == 0
    for n, s in sentinels.items():
        assert np.all(s == 7.0), f"masked-off {n} was written"
    kernel = {"gradInput": "dx", "gradGammaOut": "dgamma", "gradBetaOut": "dbeta"}
    assert_matches(GN, combo, problem, arrays, args, skip=[kernel[n] for n in sentinels])


def test_empty_tensors():
    rms = dict(dy=np.ones((0, 8), np.float32), x=np.ones((0, 8), np.float32), rstd=np.ones(0, np.float32),
               gamma=np.ones(8, np.float32), dxOut=np.zeros((0, 8), np.float32), dgammaOut=np.full(8, 5, np.float32))
    assert run_both(RMS, rms)[0] == 0
    np.testing.assert_array_equal(rms["dgammaOut"], 0)         # sum over zero rows
    n0 = dict(gradOut=np.ones((0, 4, 3), np.float32), input=np.ones((0, 4, 3), np.float32),
              mean=np.ones((0, 2), np.float32), rstd=np.ones((0, 2), np.float32), gamma=np.ones(4, np.float32),
              N=0, C=4, HxW=3, group=2, outputMask=[True] * 3, gradInput=np.ones((0, 4, 3), np.float32),
              gradGammaOut=np.full(4, 5, np.float32), gradBetaOut=np.full(4, 5, np.float32))
    assert run_both(GN, n0)[0] == 0
    np.testing.assert_array_equal(n0["gradGammaOut"], 0)
    np.testing.assert_array_equal(n0["gradBetaOut"], 0)
    hw0 = dict(n0, gradOut=np.ones((2, 4, 0), np.float32), input=np.ones((2, 4, 0), np.float32),
               mean=np.ones((2, 2), np.float32), rstd=np.ones((2, 2), np.float32), N=2, HxW=0,
               gradInput=np.ones((2, 4, 0), np.float32), gradGammaOut=np.full(4, 5, np.float32),
               gradBetaOut=np.full(4, 5, np.float32))
    assert run_both(GN, hw0)[0] == 0
    np.testing.assert_array_equal(hw0["gradBetaOut"], 0)


def test_inf_nan_propagate(rng):
    """Seed 003: an inf input gives inf, a nan input gives nan (as the reference says)."""
    def poison(a, arr):
        for name in ("dy", "x"):
            arr[name] = arr[name].copy()
            a[name] = arr[name]
        arr["x"][0, 3] = np.inf
        arr["dy"][1, 5] = np.nan
    args = _run_and_check(RMS, RMSProblem((3, 16), 1), "f32-f32", rng, poison)
    assert np.isnan(args["dxOut"][1]).all() and not np.isfinite(args["dxOut"][0]).all()
    assert np.isfinite(args["dxOut"][2]).all()


# ---- layouts ------------------------------------------------------------------------------

def _strided_copy(a, rng, transpose=False):
    """``a`` as a view with gaps (every other element of a bigger base) or transposed memory."""
    if transpose and a.ndim >= 2:
        base = np.ascontiguousarray(np.swapaxes(a, -1, -2))
        return np.swapaxes(base, -1, -2), base
    base = np.full(a.shape[:-1] + (a.shape[-1] * 2,), 99, a.dtype) if a.ndim else a.copy()
    view = base[..., ::2] if a.ndim else base
    view[...] = a
    return view, base


@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("tag", ["f32-f32", "bf16-f32"])
def test_strided_inputs_and_outputs(tag, transpose, rng):
    combo = RMS.combo(tag)
    problem = RMSProblem((6, 24), 1)
    args, arrays = base_args(RMS, problem, combo, rng)
    bases = {}
    for name in ("dy", "x", "dxOut", "dgammaOut"):
        args[name], bases[name] = _strided_copy(args[name], rng, transpose)
    arrays.update(dy=args["dy"], x=args["x"])
    out_base = bases["dxOut"].copy()
    status, size, executor = phase_one(RMS, args)
    assert status == 0 and size > 0
    workspace = np.full(size, 0xAB, np.uint8)
    assert aclnn.aclnnRmsNormGrad(workspace, size, executor, None) == 0
    assert (workspace != 0xAB).any(), "the staging copies did not use the workspace"
    assert_matches(RMS, combo, problem, arrays, args)
    if not transpose:  # the gaps of the strided outputs' bases are untouched
        assert np.all(bases["dxOut"][..., 1::2] == out_base[..., 1::2])
        assert np.all(bases["dgammaOut"][1::2] == 99)


def test_misaligned_and_aliased(rng):
    combo = RMS.combo("f16-f16")
    problem = RMSProblem((4, 32), 1)
    args, arrays = base_args(RMS, problem, combo, rng)
    raw = np.zeros(args["x"].nbytes + 2, np.uint8)
    mis = raw[2:].view(np.float16).reshape(args["x"].shape)  # 2 bytes off any 64-byte boundary
    mis[...] = args["x"]
    args["x"] = arrays["x"] = mis
    dy_copy = arrays["dy"].copy()
    args["dxOut"] = args["dy"]                                  # dx written over dy: staged, still right
    arrays["dy"] = dy_copy
    assert run_both(RMS, args)[0] == 0
    assert_matches(RMS, combo, problem, arrays, args)


def _at_offset(a: np.ndarray, offset: int) -> np.ndarray:
    """A copy of ``a`` whose data starts ``offset`` bytes past a 64-byte boundary."""
    raw = np.zeros(a.nbytes + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + offset
    placed = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    placed[...] = a
    return placed


def _placed_call(args: dict, elements: int, extra_bytes: int = 0) -> dict:
    """Every array of a call moved ``elements`` of its own elements (+ bytes) off 64 bytes."""
    return {k: _at_offset(v, elements * v.itemsize + extra_bytes) if isinstance(v, np.ndarray) else v
            for k, v in args.items()}


def _outputs_bytes(op, args) -> dict:
    return {p.name: np.asarray(args[p.name]).tobytes() for p in op.api.tensors("output")}


def _run_placed(op, args) -> set:
    """Both phases on ``args``; returns the kinds of workspace slot the plan used."""
    status, size, executor = phase_one(op, args)
    assert status == 0, acl.aclGetRecentErrMsg()
    workspace = acl.aclrtMalloc(size)[1] if size else None
    assert getattr(aclnn, op.aclnn_name)(workspace, size, executor, None) == 0, acl.aclGetRecentErrMsg()
    return {slot.kind for slot in executor.plan.slots}


@pytest.mark.parametrize("op,problem,tag", [(RMS, RMSProblem((37, 941), 1), "bf16-f32"),
                                            (RMS, RMSProblem((5, 33), 1), "f32-f32"),
                                            (GN, GNProblem(2, 6, 33, 3), "f16-f32"),
                                            (GN, GNProblem(3, 4, 7, 2), "f32-f32")],
                         ids=lambda v: v.name if hasattr(v, "aclnn_name") else str(v))
def test_any_alignment_is_zero_copy_and_bit_identical(op, problem, tag, rng):
    """Inputs and outputs at any element-aligned address go to the kernel without a copy
    (the workspace holds only the kernel's own scratch) and give the aligned call's bits;
    memory that is not even element-aligned is staged, with the same bits."""
    combo = op.combo(tag)
    args, arrays = base_args(op, problem, combo, rng)
    aligned = _placed_call(args, 0)
    _run_placed(op, aligned)
    expected = _outputs_bytes(op, aligned)
    for elements in (1, 3, 5, 9, 15):
        placed = _placed_call(args, elements)
        assert _run_placed(op, placed) <= {"scratch"}, f"{elements} elements off: staged a copy"
        assert _outputs_bytes(op, placed) == expected, f"{elements} elements off: results differ"
    odd = _placed_call(args, 0, extra_bytes=1)
    assert {"in", "out"} <= _run_placed(op, odd), "byte-misaligned data must be staged"
    assert _outputs_bytes(op, odd) == expected
    assert_matches(op, combo, problem, arrays, aligned)


def test_acl_tensor_with_strides_and_offset(rng):
    """A transposed view at an element offset into device memory, as input and output."""
    x = rng.standard_normal((8, 5)).astype(np.float32)      # stored (8, 5); used as (5, 8)
    _, buf = acl.aclrtMalloc(4 * (3 + 40))
    host = np.zeros(43, np.float32)
    host[3:] = x.reshape(-1)
    acl.aclrtMemcpy(buf, host.nbytes, host, host.nbytes, acl.ACL_MEMCPY_HOST_TO_DEVICE)
    xt = acl.aclCreateTensor([5, 8], acl.ACL_FLOAT, [1, 5], 3, acl.ACL_FORMAT_ND, [43], buf)
    _, obuf = acl.aclrtMalloc(4 * 50)
    dxt = acl.aclCreateTensor([5, 8], acl.ACL_FLOAT, [1, 5], 10, acl.ACL_FORMAT_ND, [50], obuf)
    gamma, rstd = np.ones(8, np.float32), np.full(5, 0.5, np.float32)
    dgamma = np.zeros(8, np.float32)
    status, size, ex = aclnn.aclnnRmsNormGradGetWorkspaceSize(xt, xt, rstd, gamma, dxt, dgamma)
    assert status == 0, acl.aclGetRecentErrMsg()
    assert aclnn.aclnnRmsNormGrad(acl.aclrtMalloc(size)[1] if size else None, size, ex, None) == 0
    out = np.zeros(50, np.float32)
    acl.aclrtMemcpy(out, 200, obuf, 200, acl.ACL_MEMCPY_DEVICE_TO_HOST)
    from opgen.ops.rms_norm_grad.reference import rms_norm_grad
    ref_dx, ref_dg = rms_norm_grad(x.T, x.T, rstd, gamma)
    np.testing.assert_allclose(out[10:].reshape(8, 5).T, ref_dx, rtol=1e-5, atol=1e-5)
    assert np.all(out[:10] == 0)
    np.testing.assert_allclose(dgamma, ref_dg, rtol=1e-5, atol=1e-5)


# ---- executors ----------------------------------------------------------------------------

def _planned(rng, strided=True):
    args, _ = base_args(RMS, RMSProblem((4, 16), 1), RMS.combo("f32-f32"), rng)
    if strided:
        args["x"] = np.asfortranarray(args["x"])
    status, size, ex = phase_one(RMS, args)
    assert status == 0
    return size, ex


def test_executor_single_use_and_foreign(rng):
    size, ex = _planned(rng)
    ws = acl.aclrtMalloc(size)[1]
    assert aclnn.aclnnRmsNormGrad(ws, size, ex, None) == 0
    assert aclnn.aclnnRmsNormGrad(ws, size, ex, None) == aclnn.ACLNN_ERR_PARAM_INVALID
    assert "single-use" in acl.aclGetRecentErrMsg()
    assert aclnn.aclnnRmsNormGrad(ws, size, None, None) == aclnn.ACLNN_ERR_PARAM_NULLPTR
    assert aclnn.aclnnRmsNormGrad(ws, size, object(), None) == aclnn.ACLNN_ERR_PARAM_INVALID
    size2, ex2 = _planned(rng)
    assert aclnn.aclnnGroupNormBackward(ws, size2, ex2, None) == aclnn.ACLNN_ERR_PARAM_INVALID
    assert "aclnnGroupNormBackward" in acl.aclGetRecentErrMsg()


def test_workspace_too_small_then_retry(rng):
    size, ex = _planned(rng)
    assert size > 0
    assert aclnn.aclnnRmsNormGrad(None, size, ex, None) == aclnn.ACLNN_ERR_PARAM_INVALID
    assert aclnn.aclnnRmsNormGrad(np.zeros(size, np.uint8), size - 1, ex, None) == aclnn.ACLNN_ERR_PARAM_INVALID
    short = np.zeros(size - 64 - 1, np.uint8)
    assert aclnn.aclnnRmsNormGrad(short, size, ex, None) == aclnn.ACLNN_ERR_PARAM_INVALID
    assert "workspace" in acl.aclGetRecentErrMsg()
    assert aclnn.aclnnRmsNormGrad(bytearray(size), size, ex, None) == 0     # the executor was not spent


def test_destroyed_stream_and_freed_workspace(rng):
    size, ex = _planned(rng)
    _, stream = acl.aclrtCreateStream()
    acl.aclrtDestroyStream(stream)
    assert aclnn.aclnnRmsNormGrad(np.zeros(size, np.uint8), size, ex, stream) == aclnn.ACLNN_ERR_PARAM_INVALID
    _, ws = acl.aclrtMalloc(size)
    acl.aclrtFree(ws)
    assert aclnn.aclnnRmsNormGrad(ws, size, ex, None) == aclnn.ACLNN_ERR_PARAM_INVALID


def _acl_tensor(array):
    """``array`` copied into aclrtMalloc memory (64-byte aligned) as a contiguous aclTensor."""
    a = np.ascontiguousarray(array)
    _, buf = acl.aclrtMalloc(max(a.nbytes, 1))
    acl.aclrtMemcpy(buf, a.nbytes, a, a.nbytes, acl.ACL_MEMCPY_HOST_TO_DEVICE)
    dtype = {np.dtype(np.float32): acl.ACL_FLOAT, np.dtype(np.float16): acl.ACL_FLOAT16}[a.dtype]
    return acl.aclCreateTensor(a.shape, dtype, None, 0, acl.ACL_FORMAT_ND, a.shape, buf), buf


@pytest.mark.parametrize("cols", [16, 1_100_000])
def test_aligned_contiguous_call_is_zero_copy(cols, rng):
    """aclrtMalloc memory is aligned: no staging, the kernel writes the outputs in place.
    The only slot is the kernel's partial sums of dgamma (one chunk of up to 64 rows x cols
    float64, the CPU's accumulator: schedules/llvm.py, _widen_sum): 128 B for 16 columns,
    kept in opgen's per-thread arena (no workspace at all); 8.8 MB for 1.1M columns, more
    than the arena takes, in the workspace (plus 64 bytes of alignment slack). A copy of the
    data (4 rows x cols float32, 16 B a column) would not fit in that bound: none is made."""
    from opgen.executor import ARENA_BYTES

    args, arrays = base_args(RMS, RMSProblem((4, cols), 1), RMS.combo("f32-f32"), rng)
    tensors = {k: _acl_tensor(v) for k, v in args.items()}
    status, size, ex = phase_one(RMS, {k: t for k, (t, _) in tensors.items()})
    accumulator = np.dtype(np.float64)
    partial_bytes = cols * accumulator.itemsize
    assert partial_bytes < args["x"].nbytes     # the bound below excludes a staged copy of x
    in_arena = partial_bytes <= ARENA_BYTES
    assert status == 0 and size == (0 if in_arena else partial_bytes + 64)
    assert [(slot.kind, slot.in_arena) for slot in ex.plan.slots] == [("scratch", in_arena)]
    workspace = None
    if size:
        status, workspace = acl.aclrtMalloc(size, acl.ACL_MEM_MALLOC_HUGE_FIRST)
        assert status == 0
        workspace.host[:] = 0xFF  # NaN garbage: every partial sum must be initialised by the kernel
    assert aclnn.aclnnRmsNormGrad(workspace, size, ex, None) == 0
    dgamma = np.zeros(cols, np.float32)
    acl.aclrtMemcpy(dgamma, 4 * cols, tensors["dgammaOut"][1], 4 * cols, acl.ACL_MEMCPY_DEVICE_TO_HOST)
    from opgen.ops.rms_norm_grad.reference import rms_norm_grad
    np.testing.assert_allclose(dgamma, rms_norm_grad(**{k: arrays[k] for k in ("dy", "x", "rstd", "gamma")})[1],
                               rtol=1e-4, atol=1e-4)
    if workspace is not None:
        raw = workspace.host
        start = (-raw.ctypes.data) % 64
        partials = raw[start:start + partial_bytes].view(accumulator).reshape(1, cols)
        np.testing.assert_allclose(partials.sum(axis=0), dgamma, rtol=1e-6, atol=1e-6)


def in_threads(work, count: int) -> None:
    """Run ``work(i)`` for i < count, each on its own thread, and fail with the first error
    any of them raised (pytest does not see other threads' failures)."""
    errors = []

    def guarded(i):
        try:
            work(i)
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:1]


def test_eight_threads(rng):
    problems = [(RMS, RMSProblem((3 + i, 16 + 8 * (i % 3)), 1), RMS.combos[i % 5]) for i in range(8)]
    problems += [(GN, GNProblem(2 + i % 2, 6, 3 + i, 3), GN.combos[i % 5]) for i in range(8)]

    def work(i):
        local = np.random.default_rng(i)
        for _ in range(4):
            op, problem, combo = problems[(i + _) % len(problems)]
            args, arrays = base_args(op, problem, combo, local)
            args[op.api.tensors("input")[1].name] = np.asfortranarray(args[op.api.tensors("input")[1].name])
            status, msg = run_both(op, args)
            assert status == 0, msg
            assert_matches(op, combo, problem, arrays, args)

    in_threads(work, 8)


def test_product_from_environment(monkeypatch, rng):
    monkeypatch.setenv("OPGEN_PRODUCT", "AtlasInference")
    args, _ = base_args(RMS, RMSProblem((2, 16), 1), RMS.combo("bf16-bf16"), rng)
    assert phase_one(RMS, args)[0] == aclnn.ACLNN_ERR_PARAM_INVALID
    with product("AtlasA2"):
        assert phase_one(RMS, args)[0] == 0
    monkeypatch.setenv("OPGEN_PRODUCT", "NoSuchProduct")
    assert phase_one(RMS, args)[0] == aclnn.ACLNN_ERR_PARAM_INVALID


def test_one_executor_shared_by_eight_threads_runs_once(rng):
    size, ex = _planned(rng)
    results = []
    barrier = threading.Barrier(8)

    def go(_):
        barrier.wait()
        results.append(aclnn.aclnnRmsNormGrad(np.zeros(size, np.uint8), size, ex, None))

    in_threads(go, 8)
    assert sorted(results) == [0] + [aclnn.ACLNN_ERR_PARAM_INVALID] * 7


def test_generated_signatures_and_docs():
    import inspect

    for op in (RMS, GN):
        phase_one = getattr(aclnn, f"{op.aclnn_name}GetWorkspaceSize")
        assert list(inspect.signature(phase_one).parameters) == [p.name for p in op.api.params]
        assert list(inspect.signature(getattr(aclnn, op.aclnn_name)).parameters) == [
            "workspace", "workspaceSize", "executor", "stream"]
        for p in op.api.params:
            assert f"| {p.name} |" in phase_one.__doc__
        for rule in op.api.rules:
            assert str(rule.code) in phase_one.__doc__
    assert list(inspect.signature(aclnn.aclnnGroupNormBackwardGetWorkspaceSize).parameters) == [
        "gradOut", "input", "mean", "rstd", "gamma", "N", "C", "HxW", "group", "outputMask",
        "gradInput", "gradGammaOut", "gradBetaOut"]
    assert list(inspect.signature(aclnn.aclnnRmsNormGradGetWorkspaceSize).parameters) == [
        "dy", "x", "rstd", "gamma", "dxOut", "dgammaOut"]


def test_arena_scratch_is_per_thread(rng):
    """Tiny calls keep their partial sums in opgen's arena: four threads hammering the same
    plan at once must each get their own (a shared arena would mix their dgamma partials)."""
    problem, combo = RMSProblem((64, 48), 1), RMS.combo("f32-f32")

    def work(seed):
        local = np.random.default_rng(seed)
        for _ in range(100):
            args, arrays = base_args(RMS, problem, combo, local)
            status, size, executor = phase_one(RMS, args)
            assert status == 0 and size == 0 and any(p.in_arena for p in executor.plan.placements)
            assert aclnn.aclnnRmsNormGrad(None, 0, executor, None) == 0
            assert_matches(RMS, combo, problem, arrays, args)

    in_threads(work, 4)
