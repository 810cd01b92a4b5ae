"""The GPU schedules run for real on OpenCL (the device opgen's probe chose: PoCL's CPU device
here), through the aclnn API.

Every op x every dtype combo, on the issue's shapes: row lengths 1, 7, 33, 941 and 12290
(every tail of the thread loop), more rows than the row pass has blocks, N*G smaller than
the number of blocks, empty tensors, strided inputs and outputs. Results are judged by
the one tolerance table (opgen.verify) against the float64 reference. Skipped, with the
reason, where pyopencl or an OpenCL device that passes the probe is missing (pip install -e
".[opencl]", or ".[opencl-intel]" where PoCL cannot build).
"""
from __future__ import annotations

import numpy as np
import pytest

from opgen import aclnn, config, kernels
from opgen.ops import get_op
from opgen.ops.group_norm_backward import Problem as GNProblem
from opgen.ops.layer_norm_backward import Problem as LNProblem
from opgen.ops.rms_norm_grad import Problem as RMSProblem
from opgen.targets import get_target
from opgen.targets.opencl import OpenclModule

from aclnn_helpers import assert_matches, base_args, phase_one, run_both

RMS, GN, LN = get_op("rms_norm_grad"), get_op("group_norm_backward"), get_op("layer_norm_backward")
OPENCL = get_target("opencl")
TAILS = (1, 7, 33, 941, 12290)


LAUNCHES: list = []


@pytest.fixture(autouse=True)
def on_opencl(monkeypatch):
    """Every call of these tests goes to the opencl target (counted, so a test cannot pass
    on another target by mistake); the environment's choice comes back after."""
    if not OPENCL.can_run():
        pytest.skip(f"opencl cannot run here: {OPENCL.missing()}")
    real = OpenclModule._run

    def counted(self, plan, *tensors):
        LAUNCHES.append(plan)
        return real(self, plan, *tensors)
    monkeypatch.setattr(OpenclModule, "_run", counted)
    config.set_target("opencl")
    LAUNCHES.clear()
    yield
    config.reset()


def _run(op, args):
    before = len(LAUNCHES)
    status, message = run_both(op, args)
    assert status == 0, message
    assert len(LAUNCHES) > before, "the call did not run on the opencl target"


def _check(op, problem, tag, rng):
    combo = op.combo(tag)
    args, arrays = base_args(op, problem, combo, rng)
    _run(op, args)
    assert_matches(op, combo, problem, arrays, args)


RMS_SHAPES = [RMSProblem((3, c), 1) for c in TAILS] + [
    RMSProblem((1100, 7), 1),        # more rows than the 512 blocks of the row pass: 3 rows per block, a ragged last
    RMSProblem((2, 3, 33), 2),       # gamma over two axes
]


@pytest.mark.parametrize("problem", RMS_SHAPES, ids=str)
@pytest.mark.parametrize("tag", [c.tag for c in RMS.combos])
def test_rms_norm_grad_on_opencl(tag, problem, rng):
    _check(RMS, problem, tag, rng)


GN_SHAPES = [GNProblem(2, 4, hw, 2) for hw in TAILS] + [
    GNProblem(1, 2, 941, 1),         # N*G = 1 block for the group passes
    GNProblem(3, 2130, 7, 71),       # many groups, short rows
    GNProblem(2, 6, 9, 6),           # group = C
]


@pytest.mark.parametrize("problem", GN_SHAPES, ids=str)
@pytest.mark.parametrize("tag", [c.tag for c in GN.combos])
def test_group_norm_backward_on_opencl(tag, problem, rng):
    _check(GN, problem, tag, rng)


@pytest.mark.parametrize("problem", [LNProblem((3, c), 1) for c in TAILS] + [LNProblem((1100, 7), 1)], ids=str)
@pytest.mark.parametrize("tag", ["bf16-bf16", "f32-f32"])
def test_layer_norm_backward_column_sums_on_opencl(tag, problem, rng):
    """Two column sums, rounded to bf16 by cast stages (bf16-bf16) or not: the final sum
    split over partials and columns (schedules/gpu.py final_column_sum) on every tail."""
    _check(LN, problem, tag, rng)


@pytest.mark.parametrize("tag", [c.tag for c in RMS.combos])
def test_rms_norm_grad_empty_on_opencl(tag, rng):
    for problem in (RMSProblem((0, 16), 1), RMSProblem((3, 0), 1)):
        combo = RMS.combo(tag)
        args, arrays = base_args(RMS, problem, combo, rng)
        args["dgammaOut"][...] = 5
        _run(RMS, args)
        np.testing.assert_array_equal(args["dgammaOut"], 0)     # a sum over no rows
        assert_matches(RMS, combo, problem, arrays, args)


@pytest.mark.parametrize("tag", [c.tag for c in GN.combos])
def test_group_norm_backward_empty_on_opencl(tag, rng):
    for problem in (GNProblem(0, 4, 5, 2), GNProblem(2, 4, 0, 2)):
        combo = GN.combo(tag)
        args, arrays = base_args(GN, problem, combo, rng)
        args["gradGammaOut"][...] = 5
        args["gradBetaOut"][...] = 5
        _run(GN, args)
        np.testing.assert_array_equal(args["gradBetaOut"].astype(np.float32), 0)
        assert_matches(GN, combo, problem, arrays, args)


def _gapped(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``a`` as every other element of a bigger base (a strided view), and the base."""
    base = np.full(a.shape[:-1] + (a.shape[-1] * 2,), 99, a.dtype)
    view = base[..., ::2]
    view[...] = a
    return view, base


@pytest.mark.parametrize("tag", ["f32-f32", "bf16-f32", "f16-f16"])
def test_strided_inputs_and_outputs_on_opencl(tag, rng):
    combo = RMS.combo(tag)
    problem = RMSProblem((6, 33), 1)
    args, arrays = base_args(RMS, problem, combo, rng)
    bases = {}
    for name in ("dy", "x", "dxOut"):
        args[name], bases[name] = _gapped(args[name])
    arrays.update(dy=args["dy"], x=args["x"])
    status, size, executor = phase_one(RMS, args)
    assert status == 0 and size > 0
    assert aclnn.aclnnRmsNormGrad(np.zeros(size, np.uint8), size, executor, None) == 0
    assert LAUNCHES, "the call did not run on the opencl target"
    assert_matches(RMS, combo, problem, arrays, args)
    assert np.all(bases["dxOut"][..., 1::2] == 99), "the gaps of a strided output were written"


def test_gn_strided_input_on_opencl(rng):
    problem = GNProblem(2, 6, 33, 3)
    combo = GN.combo("f16-f32")
    args, arrays = base_args(GN, problem, combo, rng)
    args["input"], _ = _gapped(args["input"])
    arrays["x"] = args["input"]
    _run(GN, args)
    assert_matches(GN, combo, problem, arrays, args)


def test_opencl_kernels_are_the_gpu_schedules_and_carry_half_as_storage():
    """The kernel that ran above is TVM's OpenCL C of the GPU schedules (work-groups,
    a __local reduction tree), and float16 goes through vload_half/vstore_half where the
    device has no cl_khr_fp16."""
    kernel = kernels.get_kernel(RMS, "f16-f16", OPENCL)
    source = OPENCL.source_of(kernel.module)[1]
    assert "get_group_id(0)" in source and "__local float" in source and "barrier(" in source
    extensions = kernel.module._ctx.devices[0].extensions.split()
    if "cl_khr_fp16" not in extensions:
        assert "vload_half(" in source and "vstore_half(" in source and "cl_khr_fp16" not in source
