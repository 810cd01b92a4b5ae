"""The plan cache of phase one: a repeated call reuses its plan, and only an identical call.

Every part of the cache key is changed in turn after a successful call has been cached;
the changed call must get exactly the outcome it gets with a cold cache (status, workspace
size, placements), and that outcome must differ from the cached call's (so the change
mattered). Results are checked against the float64 reference wherever a call succeeds.
"""
from __future__ import annotations

import numpy as np
import pytest

from opgen import acl, aclnn, config
from opgen.ops import get_op
from opgen.ops.group_norm_backward import Problem as GNProblem
from opgen.ops.rms_norm_grad import Problem as RMSProblem

from aclnn_helpers import assert_matches, base_args, phase_one, product

RMS, GN = get_op("rms_norm_grad"), get_op("group_norm_backward")


def outcome(op, args) -> tuple:
    """(status, workspace size, kernel, placements) of phase one, running phase two on success."""
    status, size, executor = phase_one(op, args)
    if status:
        return status, acl.aclGetRecentErrMsg().split(":")[0]
    assert getattr(aclnn, op.aclnn_name)(acl.aclrtMalloc(size)[1] if size else None, size, executor, None) == 0
    return status, size, executor.plan.kernel.symbol, tuple((p.kernel, p.kind) for p in executor.plan.placements)


def test_a_repeated_call_reuses_the_plan_with_its_own_arrays(rng):
    combo = RMS.combo("f32-f32")
    problem = RMSProblem((6, 40), 1)
    first_args, _ = base_args(RMS, problem, combo, rng)
    second_args, second_arrays = base_args(RMS, problem, combo, rng)
    first = phase_one(RMS, first_args)[2]
    status, size, second = phase_one(RMS, second_args)
    assert status == 0 and second.plan is first.plan, "an identical call must hit the cache"
    assert aclnn.aclnnRmsNormGrad(acl.aclrtMalloc(size)[1] if size else None, size, second, None) == 0
    assert_matches(RMS, combo, problem, second_arrays, second_args)


def _transposed_x(args):
    x = args["x"]
    args["x"] = np.ascontiguousarray(x.T).T       # same values, Fortran order


def _odd_address(args):
    raw = np.zeros(args["x"].nbytes + 1, np.uint8)
    moved = raw[1:].view(args["x"].dtype).reshape(args["x"].shape)
    moved[...] = args["x"]
    args["x"] = moved


def _read_only_dx(args):
    args["dxOut"].flags.writeable = False


def _private_format(args):
    x = args["x"]
    args["x"] = acl.aclCreateTensor(list(x.shape), acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_NC1HWC0,
                                    list(x.shape), x)


RMS_CHANGES = {
    "dtype": lambda a: a.update({k: a[k].astype(np.float16) for k in ("dy", "x", "dxOut")}),
    "shape": lambda a: a.update(gamma=np.ones(a["gamma"].size + 1, np.float32)),
    "strides": _transposed_x,
    "alignment": _odd_address,
    "aliasing": lambda a: a.update(dxOut=a["dy"].copy(), dy=None) or a.update(dy=a["dxOut"]),
    "writability": _read_only_dx,
    "format": _private_format,
    "null": lambda a: a.update(gamma=None),
}


@pytest.mark.parametrize("change", RMS_CHANGES, ids=str)
def test_rms_key_changes_are_never_served_from_the_cache(change, rng):
    args, _ = base_args(RMS, RMSProblem((5, 24), 1), RMS.combo("f32-f32"), rng)
    cached = outcome(RMS, args)
    changed = dict(args)
    RMS_CHANGES[change](changed)
    warm = outcome(RMS, changed)
    aclnn.clear_plan_cache()
    assert warm == outcome(RMS, changed), f"{change}: the cached outcome differs from a cold one"
    assert warm != cached, f"{change}: the change should have changed the outcome"


def test_product_is_part_of_the_key(rng):
    args, _ = base_args(RMS, RMSProblem((4, 16), 1), RMS.combo("bf16-f32"), rng)
    assert outcome(RMS, args)[0] == 0
    with product("AtlasInference"):          # no bfloat16 there
        assert outcome(RMS, args)[0] == aclnn.ACLNN_ERR_PARAM_INVALID


def test_target_is_part_of_the_key(rng, monkeypatch):
    args, _ = base_args(RMS, RMSProblem((4, 16), 1), RMS.combo("f32-f32"), rng)
    assert outcome(RMS, args)[0] == 0
    monkeypatch.setenv("OPGEN_TARGET", "no-such-target")
    config.reset()
    assert outcome(RMS, args)[0] == aclnn.ACLNN_ERR_RUNTIME_ERROR


GN_CHANGES = {
    "group": lambda a: a.update(group=a["group"] * 2),
    "mask": lambda a: a.update(outputMask=[True, False, True], gradGammaOut=None),
    "null gamma": lambda a: a.update(gamma=None),
}


@pytest.mark.parametrize("change", GN_CHANGES, ids=str)
def test_gn_key_changes_are_never_served_from_the_cache(change, rng):
    problem = GNProblem(2, 8, 5, 2)
    args, arrays = base_args(GN, problem, GN.combo("f32-f32"), rng)
    cached = outcome(GN, args)
    changed = dict(args)
    GN_CHANGES[change](changed)
    warm = outcome(GN, changed)
    aclnn.clear_plan_cache()
    cold = outcome(GN, changed)
    assert warm == cold and warm != cached, change
    if change == "group":                     # the math changed too: check the numbers
        changed_problem = GNProblem(2, 8, 5, 4)
        mean = arrays["x"].reshape(2, 4, -1).mean(axis=2).astype(np.float32)
        rstd = (1 / np.sqrt(arrays["x"].reshape(2, 4, -1).var(axis=2) + 1e-5)).astype(np.float32)
        changed.update(mean=mean, rstd=rstd)
        assert outcome(GN, changed)[0] == 0
        assert_matches(GN, GN.combo("f32-f32"), changed_problem, {**arrays, "mean": mean, "rstd": rstd}, changed)


def test_failures_are_not_cached(rng):
    args, _ = base_args(RMS, RMSProblem((4, 16), 1), RMS.combo("f32-f32"), rng)
    bad = dict(args, gamma=np.ones(15, np.float32))
    assert outcome(RMS, bad)[0] == aclnn.ACLNN_ERR_INNER_TILING_ERROR
    assert outcome(RMS, bad)[0] == aclnn.ACLNN_ERR_INNER_TILING_ERROR   # reported again, in full
    assert "gamma" in acl.aclGetRecentErrMsg()
    assert outcome(RMS, args)[0] == 0


def test_the_aclnn_path_uses_the_tuned_knobs_of_the_calls_bucket_only(tmp_path, monkeypatch, rng):
    """A tuned record for the call's shape bucket picks the kernel (its partial-sum
    workspace shows the tuned chunking); a call in another bucket keeps the defaults."""
    from opgen.targets import get_target
    from opgen.tune import database, lookup

    llvm = get_target("llvm")
    monkeypatch.setenv("OPGEN_TUNE_DB", str(tmp_path / "tuning.jsonl"))
    database.append(tmp_path / "tuning.jsonl", {
        "op": RMS.name, "combo": "f32-f32", "target": llvm.name, "hardware": database.hardware_of(llvm),
        "bucket": database.bucket_of((600, 1000)), "engine": database.TEMPLATE,
        "knobs": {"rows_per_chunk": 256}, "status": database.OK, "median_ms": 1.0, "times_ms": [1.0]})
    lookup.reload()
    aclnn.clear_plan_cache()
    try:
        for cols, chunks in ((1000, 3), (3000, 10)):          # 600 rows: 256 per chunk tuned, 64 by default
            args, arrays = base_args(RMS, RMSProblem((600, cols), 1), RMS.combo("f32-f32"), rng)
            status, size, executor = phase_one(RMS, args)
            assert status == 0, acl.aclGetRecentErrMsg()
            (scratch,) = [p for p in executor.plan.placements if p.kind == "scratch"]
            assert scratch.shape == (chunks, cols)
            assert aclnn.aclnnRmsNormGrad(acl.aclrtMalloc(size)[1], size, executor, None) == 0
            assert_matches(RMS, RMS.combo("f32-f32"), RMSProblem((600, cols), 1), arrays, args)
    finally:
        monkeypatch.delenv("OPGEN_TUNE_DB")
        lookup.reload()
        aclnn.clear_plan_cache()


def test_using_target_is_per_thread_and_part_of_the_key(rng):
    import threading

    seen = {}
    with pytest.raises(KeyError, match="no-such-target"):
        with config.using_target("no-such-target"):
            pass
    with config.using_target("opencl"):
        worker = threading.Thread(target=lambda: seen.update(other=config.get_target()))
        worker.start()
        worker.join()
        seen["this"] = config.get_target()
    assert seen == {"this": "opencl", "other": "llvm"}
    assert config.get_target() == "llvm"


class _ForeignDevice:
    """A DLPack producer whose tensor lives on a device the host cannot read (kDLCUDA)."""

    def __init__(self, array):
        self.array = array

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, **kwargs):
        raise BufferError("this producer only exports to its own device")


def test_a_tensor_the_host_cannot_read_fails_in_phase_one(rng):
    args, _ = base_args(RMS, RMSProblem((4, 16), 1), RMS.combo("f32-f32"), rng)
    args["x"] = _ForeignDevice(args["x"])
    status, size, executor = phase_one(RMS, args)
    assert status == aclnn.ACLNN_ERR_PARAM_INVALID and executor is None
    assert "x" in acl.aclGetRecentErrMsg()


# ---- what opgen.binding reads on the hot path ------------------------------------------------

def _from_one_buffer(args, overlap: bool):
    """dy and dxOut cut from one numpy allocation: disjoint slices, or dxOut on dy's memory."""
    dy = args["dy"]
    buffer = np.zeros(2 * dy.size, dy.dtype)
    args["dy"] = buffer[:dy.size].reshape(dy.shape)
    args["dy"][...] = dy
    args["dxOut"] = (buffer[:dy.size] if overlap else buffer[dy.size:]).reshape(dy.shape)


def test_one_owner_disjoint_slices_are_direct_and_overlap_is_staged(rng):
    """Shared owners are settled by addresses: disjoint slices of one array run in place,
    dxOut on dy's own memory is staged (and still right)."""
    problem, combo = RMSProblem((6, 40), 1), RMS.combo("f32-f32")
    for overlap, kind in ((False, "direct"), (True, "out")):
        args, arrays = base_args(RMS, problem, combo, rng)
        _from_one_buffer(args, overlap)
        status, size, executor = phase_one(RMS, args)
        assert status == 0, acl.aclGetRecentErrMsg()
        placed = {p.param: p.kind for p in executor.plan.placements if p.param}
        assert placed["dxOut"] == kind, overlap
        assert aclnn.aclnnRmsNormGrad(acl.aclrtMalloc(size)[1] if size else None, size, executor, None) == 0
        assert_matches(RMS, combo, problem, arrays, args)


ATTRIBUTE_LOOKALIKES = {
    "group as True": lambda a: a.update(group=True),            # == 1 in Python, not an integer to aclnn
    "group as float": lambda a: a.update(group=float(a["group"])),
    "mask of ints": lambda a: a.update(outputMask=[1, 1, 1]),     # == [True] * 3 in Python
}


@pytest.mark.parametrize("change", ATTRIBUTE_LOOKALIKES, ids=str)
def test_values_equal_in_python_but_not_to_aclnn_have_their_own_plans(change, rng):
    problem = GNProblem(2, 8, 5, 2 if change != "group as True" else 1)
    args, _ = base_args(GN, problem, GN.combo("f32-f32"), rng)
    assert outcome(GN, args)[0] == 0                                   # the valid call, now cached
    changed = dict(args)
    ATTRIBUTE_LOOKALIKES[change](changed)
    warm = outcome(GN, changed)
    aclnn.clear_plan_cache()
    assert warm == outcome(GN, changed) and warm[0] == aclnn.ACLNN_ERR_PARAM_INVALID, warm


def test_torch_tensors_key_on_dtype_strides_and_grad_free_export(rng):
    """torch inputs: a cached call, then a transposed (non-contiguous) x and a half-precision
    call each get their own plan; tensors that require grad are read without a copy."""
    torch = pytest.importorskip("torch")
    problem, combo = RMSProblem((6, 40), 1), RMS.combo("f32-f32")
    args, arrays = base_args(RMS, problem, combo, rng)
    as_torch = {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in args.items()}
    as_torch["x"].requires_grad_(True)
    first = outcome(RMS, as_torch)
    assert first[0] == 0 and all(kind == "direct" for _, kind in first[3][:6]), first
    assert_matches(RMS, combo, problem, arrays, {k: v.detach().numpy() for k, v in as_torch.items()})
    transposed = dict(as_torch, x=as_torch["x"].detach().T.contiguous().T)
    assert outcome(RMS, transposed) != first
    half = {k: v.detach().half() if k in ("dy", "x", "dxOut") else v for k, v in as_torch.items()}
    warm = outcome(RMS, half)
    aclnn.clear_plan_cache()
    assert warm == outcome(RMS, half) != first


def test_unknown_argument_kinds_take_the_full_path_and_fail_the_same_way(rng):
    args, _ = base_args(RMS, RMSProblem((4, 16), 1), RMS.combo("f32-f32"), rng)
    args["gamma"] = args["gamma"].tolist()                  # a list is not a tensor
    cached = len(aclnn._PLANS)
    for _ in range(2):
        status, size, executor = phase_one(RMS, args)
        assert status == aclnn.ACLNN_ERR_PARAM_INVALID and "gamma" in acl.aclGetRecentErrMsg()
    assert len(aclnn._PLANS) == cached


def test_read_only_inputs_are_staged_and_their_plan_reused(rng):
    problem, combo = RMSProblem((5, 24), 1), RMS.combo("f32-f32")
    plans = []
    for _ in range(2):
        args, arrays = base_args(RMS, problem, combo, rng)
        args["x"].flags.writeable = False
        status, size, executor = phase_one(RMS, args)
        assert status == 0
        plans.append(executor.plan)
        assert {p.param: p.kind for p in executor.plan.placements if p.param}["x"] == "in"
        assert aclnn.aclnnRmsNormGrad(acl.aclrtMalloc(size)[1], size, executor, None) == 0
        assert_matches(RMS, combo, problem, arrays, args)
    assert plans[0] is plans[1]


def test_memory_freed_between_the_phases_is_reported_not_run(rng):
    """An aclTensor whose memory is freed after GetWorkspaceSize: phase two refuses it
    (161002, naming the parameter) instead of running the kernel on freed memory."""
    args, _ = base_args(RMS, RMSProblem((4, 16), 1), RMS.combo("f32-f32"), rng)
    _, buf = acl.aclrtMalloc(args["x"].nbytes)
    acl.aclrtMemcpy(buf, args["x"].nbytes, args["x"], args["x"].nbytes, acl.ACL_MEMCPY_HOST_TO_DEVICE)
    args["x"] = acl.aclCreateTensor(list(args["x"].shape), acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND,
                                    list(args["x"].shape), buf)
    status, size, executor = phase_one(RMS, args)
    assert status == 0
    acl.aclrtFree(buf)
    assert aclnn.aclnnRmsNormGrad(None, size, executor, None) == aclnn.ACLNN_ERR_PARAM_INVALID
    assert "x was changed or destroyed, or its memory freed" in acl.aclGetRecentErrMsg()


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
def test_numpy_subclasses_are_read_as_plain_arrays(rng):
    """np.matrix reshapes by its own (2-D) rules: the kernel gets a plain ndarray view of
    GroupNorm's (N, C) input in its (N, G, D, 1) shape."""
    problem, combo = GNProblem(2, 6, 1, 3), GN.combo("f32-f32")
    args, arrays = base_args(GN, problem, combo, rng)
    for name in ("gradOut", "input", "gradInput"):
        args[name] = np.asmatrix(args[name].reshape(2, 6))
    arrays = {k: v.reshape(2, 6) if k in ("dy", "x") else v for k, v in arrays.items()}
    status, size, executor = phase_one(GN, args)
    assert status == 0 and {p.param: p.kind for p in executor.plan.placements if p.param}["input"] == "direct"
    assert aclnn.aclnnGroupNormBackward(None, size, executor, None) == 0
    assert_matches(GN, combo, problem, arrays, {k: np.asarray(v) if isinstance(v, np.ndarray) else v
                                                for k, v in args.items()})


class _HostProducer:
    """A DLPack producer that is neither numpy nor torch (as cupy or jax would be on the host)."""

    def __init__(self, array):
        self.array = array

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)


def test_other_dlpack_producers_are_read_and_cached(rng):
    from opgen.binding import DLPackKind, kind_of

    problem, combo = GNProblem(2, 8, 5, 2), GN.combo("f32-f32")
    plans = []
    for _ in range(2):
        args, arrays = base_args(GN, problem, combo, rng)
        wrapped = dict(args, gradOut=_HostProducer(args["gradOut"]), gradInput=_HostProducer(args["gradInput"]))
        assert kind_of(wrapped["gradOut"]) is DLPackKind
        status, size, executor = phase_one(GN, wrapped)
        assert status == 0, acl.aclGetRecentErrMsg()
        assert aclnn.aclnnGroupNormBackward(None, size, executor, None) == 0
        assert_matches(GN, combo, problem, arrays, args)        # written through the producer's memory
        plans.append(executor.plan)
    assert plans[0] is plans[1]
