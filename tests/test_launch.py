"""Generated binders (opgen.launch): torch tensors reach host kernels as DLTensors opgen
writes in the kernel's shape, numpy arrays as themselves, scratch as arena views.

Every call here goes through the public aclnn API and is compared with the float64
reference; the binder's source is read back to check which way each tensor went.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from opgen import acl, aclnn, launch
from opgen.executor import _recipes
from opgen.baselines import to_torch
from opgen.ops import get_op
from opgen.ops.group_norm_backward import Problem as GNProblem
from opgen.ops.rms_norm_grad import Problem as RMSProblem

from aclnn_helpers import assert_matches, base_args, phase_one

torch = pytest.importorskip("torch")

RMS, GN = get_op("rms_norm_grad"), get_op("group_norm_backward")


def as_torch(a):
    """A torch tensor with ``a``'s values from torch's allocator; other arguments as given."""
    return to_torch(a) if isinstance(a, np.ndarray) else a


def as_numpy(t):
    """The tensor's values as numpy (bf16 back through its bits)."""
    if not isinstance(t, torch.Tensor):
        return t
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def run_on_torch(op, problem, combo, rng):
    """Both phases on torch tensors; (the executor, the torch args, the numpy arrays)."""
    args, arrays = base_args(op, problem, combo, rng)
    targs = {k: as_torch(v) for k, v in args.items()}
    status, size, executor = phase_one(op, targs)
    assert status == 0, acl.aclGetRecentErrMsg()
    assert getattr(aclnn, op.aclnn_name)(acl.aclrtMalloc(size)[1] if size else None, size, executor, None) == 0, \
        acl.aclGetRecentErrMsg()
    back = {k: as_numpy(v) for k, v in targs.items()}
    assert_matches(op, combo, problem, arrays, back)
    return executor, targs


def binder_source(executor) -> str:
    """The source of this thread's binder for the executor's plan and argument kinds (made
    when it ran)."""
    return launch.binders.get(executor.plan, executor.kinds, _recipes).source


RMS_SHAPES = [(1, 1), (3, 7), (5, 33), (2, 941), (2, 12290), (0, 16), (4, 3, 5)]
GN_SHAPES = [GNProblem(1, 1, 1, 1), GNProblem(2, 6, 7, 3), GNProblem(1, 33, 1, 33), GNProblem(3, 8, 941, 2),
             GNProblem(0, 4, 5, 2), GNProblem(2, 4, 0, 2)]


@pytest.mark.parametrize("tag", ["f32-f32", "f16-f32", "bf16-f32", "bf16-bf16"])
@pytest.mark.parametrize("shape", RMS_SHAPES, ids=str)
def test_rms_norm_grad_on_torch_tensors_matches_the_reference(shape, tag, rng):
    problem = RMSProblem(shape, 1)
    executor, _ = run_on_torch(RMS, problem, RMS.combo(tag), rng)
    if executor.plan.binds_directly and all(p.kind == "direct" for p in executor.plan.placements[:6]):
        assert binder_source(executor).count("address_of_") == 6


@pytest.mark.parametrize("tag", ["f32-f32", "f16-f32", "bf16-bf16"])
@pytest.mark.parametrize("problem", GN_SHAPES, ids=str)
def test_group_norm_backward_on_torch_tensors_matches_the_reference(problem, tag, rng):
    """GroupNorm's kernel reads (N,C,H,W) as (N,G,D,HW): the frames carry that shape."""
    executor, targs = run_on_torch(GN, problem, GN.combo(tag), rng)
    assert executor.plan.binds_directly
    direct = [p for p in executor.plan.placements if p.kind == "direct"]
    assert binder_source(executor).count("address_of_") == len(direct)
    if problem.N * problem.C * problem.HxW:
        assert len(direct) == 8 and any(p.reshape for p in direct)


def test_numpy_and_torch_in_one_call_each_go_their_own_way(rng):
    problem, combo = GNProblem(2, 6, 5, 3), GN.combo("f32-f32")
    args, arrays = base_args(GN, problem, combo, rng)
    args.update(gradOut=as_torch(args["gradOut"]), gradInput=as_torch(args["gradInput"]))
    status, size, executor = phase_one(GN, args)
    assert status == 0 and size == 0
    assert aclnn.aclnnGroupNormBackward(None, 0, executor, None) == 0
    source = binder_source(executor)
    assert source.count("address_of_") == 2 and source.count("object_of_") == 6, source
    assert_matches(GN, combo, problem, arrays, {k: as_numpy(v) for k, v in args.items()})


@pytest.mark.parametrize("op,problem", [(RMS, RMSProblem((5, 33), 1)), (GN, GNProblem(2, 6, 7, 3))],
                         ids=["rms_norm_grad", "group_norm_backward"])
def test_bf16_numpy_arrays_go_by_address_and_match_the_reference(op, problem, rng):
    """numpy cannot export ml_dtypes' bfloat16: the binder hands the kernel its address
    (no uint16 view, DLPack export and TVM view per call); other numpy dtypes go as the
    arrays themselves."""
    for tag in ("bf16-bf16", "f32-f32"):
        combo = op.combo(tag)
        args, arrays = base_args(op, problem, combo, rng)
        status, size, executor = phase_one(op, args)
        assert status == 0 and executor.plan.binds_directly
        assert getattr(aclnn, op.aclnn_name)(None, size, executor, None) == 0, acl.aclGetRecentErrMsg()
        assert_matches(op, combo, problem, arrays, args)
        source = binder_source(executor)
        direct = [p.dtype for p in executor.plan.placements if p.kind == "direct"]
        assert source.count("address_of_") == direct.count("bfloat16"), source
        assert source.count("object_of_") == len(direct) - direct.count("bfloat16"), source


def test_a_bf16_numpy_array_changed_between_the_phases(rng):
    """Reshaped in place (same bytes, contiguous): still the kernel's extent, accepted;
    strided in place: refused with 161002 before the kernel runs."""
    problem, combo = RMSProblem((6, 40), 1), RMS.combo("bf16-bf16")
    args, arrays = base_args(RMS, problem, combo, rng)
    args["x"] = args["x"].copy()
    status, size, executor = phase_one(RMS, args)
    args["x"].shape = (args["x"].size,)
    assert aclnn.aclnnRmsNormGrad(None, size, executor, None) == 0
    assert_matches(RMS, combo, problem, arrays, args)
    args, _ = base_args(RMS, problem, combo, rng)
    status, size, executor = phase_one(RMS, args)
    with pytest.warns(DeprecationWarning):
        args["dxOut"].strides = (2, 12)
    before = args["dxOut"].copy()
    assert aclnn.aclnnRmsNormGrad(None, size, executor, None) == aclnn.ACLNN_ERR_PARAM_INVALID
    assert "dxOut was changed or destroyed" in acl.aclGetRecentErrMsg()
    assert np.array_equal(args["dxOut"], before, equal_nan=True)


def _resized(t):
    t.resize_(1)


def _swapped_storage(t):
    t.set_(torch.zeros(2, dtype=t.dtype))


def _other_dtype(t):
    t.data = torch.zeros(t.shape, dtype=torch.float16)


def _transposed_in_place(t):
    t.data = t.data.reshape(t.shape[1], t.shape[0]).t()


CHANGES = {"resize_": _resized, "set_": _swapped_storage, "dtype": _other_dtype,
           "strides": _transposed_in_place}   # (torch refuses ``.data =`` across devices itself)


@pytest.mark.parametrize("tensor", ["x", "dxOut"])
@pytest.mark.parametrize("change", CHANGES, ids=str)
def test_a_torch_tensor_changed_between_the_phases_is_refused_before_the_kernel_runs(change, tensor, rng):
    """The binder writes an address only for a CPU, contiguous tensor of the kernel's exact
    byte extent; anything else is 161002 naming the tensor, and no output is written."""
    problem, combo = RMSProblem((6, 40), 1), RMS.combo("f32-f32")
    args, _ = base_args(RMS, problem, combo, rng)
    targs = {k: as_torch(v) for k, v in args.items()}
    status, size, executor = phase_one(RMS, targs)
    assert status == 0 and executor.plan.binds_directly
    CHANGES[change](targs[tensor])
    before = {k: targs[k].clone() for k in ("dxOut", "dgammaOut") if k != tensor}
    status = aclnn.aclnnRmsNormGrad(None, size, executor, None)
    assert status == aclnn.ACLNN_ERR_PARAM_INVALID
    assert f"{tensor} was changed or destroyed" in acl.aclGetRecentErrMsg()
    for name, old in before.items():
        assert torch.equal(targs[name], old), f"{name} was written"


def test_binders_are_per_thread_and_per_kind(rng):
    """Four threads share one plan with torch tensors (each thread its own frame), while
    numpy calls of the same shapes use their own plan and binder."""
    from test_aclnn_run import in_threads
    problem, combo, bf16 = GNProblem(2, 8, 9, 4), GN.combo("f32-f32"), GN.combo("bf16-bf16")

    def work(seed):
        local = np.random.default_rng(seed)
        for _ in range(100):
            run_on_torch(GN, problem, combo, local)
            for numpy_combo in (combo, bf16):   # bf16 numpy arrays go by address too
                args, arrays = base_args(GN, problem, numpy_combo, local)
                status, size, executor = phase_one(GN, args)
                assert status == 0 and aclnn.aclnnGroupNormBackward(None, size, executor, None) == 0
                assert_matches(GN, numpy_combo, problem, arrays, args)

    in_threads(work, 4)


def test_binder_source_is_straight_line_code():
    """What a binder is: one line per tensor handed over, constants for the rest."""
    place = type("Place", (), {"shape": (2, 3), "dtype": "float32"})()
    source, namespace = launch.binder_source([
        (launch.ADDRESS, 4, None, place), (launch.OBJECT, 0, None, place), (launch.CONSTANT, "arena")])
    assert source == ("def bind(arguments):\n"
                      "    words[0] = address_of_0(arguments[4], place_0)\n"
                      "    object_1 = object_of_1(arguments[0], place_1)\n"
                      "    return (handle_0, object_1, constant_2)\n")
    assert namespace["constant_2"] == "arena"
