"""Validation of the generated GetWorkspaceSize functions: every documented error line.

Two halves. The table-driven half replays each Rule's example violations from the op's
spec on every product where the rule applies. The hand-written half does not read the
spec: literal calls with the status the seeds document, so the spec is not just checking
itself.
"""
from __future__ import annotations

import numpy as np
import ml_dtypes
import pytest

from opgen import acl, aclnn
from opgen.ops import all_ops, get_op
from opgen.ops import group_norm_backward as gnb
from opgen.ops import rms_norm_grad as rng_op

from aclnn_helpers import base_args, float32_combo, phase_one, product

BF16 = ml_dtypes.bfloat16
OPS = [op for op in all_ops() if op.api is not None]


def _cases():
    for op in OPS:
        problem = op.problems[0]
        for prod in op.products:
            for i, rule in enumerate(op.api.rules):
                if rule.products is not None and prod not in rule.products:
                    continue
                for v in rule.violations:
                    if v.products is None or prod in v.products:
                        yield pytest.param(op, problem, prod, rule, v, id=f"{op.name}-{prod}-r{i}-{v.description}")


@pytest.mark.parametrize("op,problem,prod,rule,violation", list(_cases()))
def test_spec_violation(op, problem, prod, rule, violation):
    combo = float32_combo(op)
    with product(prod):
        args, _ = base_args(op, problem, combo, np.random.default_rng(0))
        violation.mutate(args)
        status, size, executor = phase_one(op, args)
        message = acl.aclGetRecentErrMsg()
    assert status == rule.code, f"{violation.description}: got {status}, message {message!r}"
    assert executor is None and size == 0
    assert message.startswith(f"{op.aclnn_name}GetWorkspaceSize failed") and str(rule.code) in message


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
@pytest.mark.parametrize("prod", ["Ascend950", "AtlasA3", "AtlasA2", "AtlasInference", "AtlasTraining"])
def test_base_call_valid_where_offered(op, prod):
    with product(prod):
        args, _ = base_args(op, op.problems[0], float32_combo(op), np.random.default_rng(0))
        status, _, executor = phase_one(op, args)
    if prod in op.products:
        assert status == 0, acl.aclGetRecentErrMsg()
        assert executor is not None
    else:
        assert status == aclnn.ACLNN_ERR_PARAM_INVALID
        assert prod in acl.aclGetRecentErrMsg() and "not supported" in acl.aclGetRecentErrMsg()


def test_every_rule_has_an_example():
    for op in OPS:
        for rule in op.api.rules:
            assert rule.violations, f"{op.name}: rule {rule.seed!r} has no example violation"


def test_status_constants():
    assert (aclnn.ACLNN_SUCCESS, aclnn.ACLNN_ERR_PARAM_NULLPTR, aclnn.ACLNN_ERR_PARAM_INVALID,
            aclnn.ACLNN_ERR_RUNTIME_ERROR, aclnn.ACLNN_ERR_INNER_TILING_ERROR) == (0, 161001, 161002, 361001, 561002)


# ---- hand-written: RmsNormGrad (seed 000) ---------------------------------------------------

def rms(shape=(2, 1, 16), gshape=(16,), io=np.float32, g=np.float32, rstd_shape=None):
    n = len(shape) - len(gshape)
    rstd_shape = shape[:n] if rstd_shape is None else rstd_shape
    return dict(dy=np.ones(shape, io), x=np.ones(shape, io), rstd=np.ones(rstd_shape, np.float32),
                gamma=np.ones(gshape, g), dxOut=np.zeros(shape, io), dgammaOut=np.zeros(gshape, np.float32))


def rms_status(prod="Ascend950", **changes):
    args = rms()
    args.update(changes)
    with product(prod):
        status, _, _ = aclnn.aclnnRmsNormGradGetWorkspaceSize(**args)
    return status, acl.aclGetRecentErrMsg()


@pytest.mark.parametrize("name", ["dy", "x", "rstd", "gamma", "dxOut", "dgammaOut"])
def test_rms_null(name):
    status, msg = rms_status(**{name: None})
    assert status == 161001 and name in msg and "null" in msg


def test_rms_shape_messages_say_what_and_why():
    status, msg = rms_status(gamma=np.ones(15, np.float32), dgammaOut=np.zeros(15, np.float32))
    assert status == 561002
    assert "gamma" in msg and "(15,)" in msg and "(16,)" in msg
    status, msg = rms_status(rstd=np.ones(3, np.float32))
    assert status == 561002 and "rstd has shape (3,)" in msg and "(2, 1)" in msg and "(2,)" in msg
    status, msg = rms_status(dxOut=np.zeros((2, 16), np.float32))
    assert status == 561002 and "dxOut" in msg and "(2, 16)" in msg and "(2, 1, 16)" in msg
    status, msg = rms_status(x=np.ones((2, 1, 17), np.float32))
    assert status == 561002 and "x" in msg


@pytest.mark.parametrize("prod", ["Ascend950", "AtlasA3", "AtlasA2"])
def test_rms_all_five_combos_on_a2_a3_950(prod):
    for io, g in ((np.float16, np.float32), (BF16, np.float32), (np.float16, np.float16), (np.float32, np.float32),
                  (BF16, BF16)):
        assert rms_status(prod, **rms(io=io, g=g))[0] == 0


def test_rms_atlas_inference_dtypes():
    assert rms_status("AtlasInference", **rms(io=np.float16, g=np.float16))[0] == 0
    assert rms_status("AtlasInference", **rms(io=np.float32, g=np.float32))[0] == 0
    assert rms_status("AtlasInference", **rms(io=np.float16, g=np.float32))[0] == 161002
    status, msg = rms_status("AtlasInference", **rms(io=BF16, g=BF16))
    assert status == 161002 and "AtlasInference" in msg


def test_rms_absent_on_atlas_training():
    status, msg = rms_status("AtlasTraining")
    assert status == 161002 and "AtlasTraining" in msg


@pytest.mark.parametrize("changes", [
    dict(dy=np.ones((2, 1, 16), np.float64)), dict(rstd=np.ones(2, np.float16)),
    dict(dgammaOut=np.zeros(16, np.float16)), dict(gamma=np.ones(16, np.int32)),
    dict(x=np.ones((2, 1, 16), np.float16)), dict(dxOut=np.zeros((2, 1, 16), BF16))])
def test_rms_dtype_outside_table(changes):
    assert rms_status(**changes)[0] == 161002


def test_rms_ranks():
    assert rms_status(**rms(shape=(1,) * 8 + (16,)))[0] == 561002            # x has 9 dims
    assert rms_status(**rms(shape=(1,) * 7 + (16,)))[0] == 0                 # 8 dims
    status, msg = rms_status(rstd=np.ones((1,) * 7 + (2, 1), np.float32))    # rstd has 9 dims
    assert status == 561002 and "rstd has 9 dimensions; expected 0 to 8" in msg
    status, msg = rms_status(gamma=np.ones((), np.float32), dgammaOut=np.zeros((), np.float32))
    assert status == 561002 and "gamma has 0 dimensions; expected 1 to 8" in msg
    full = {k: v for k, v in rms((1, 16), (1, 16)).items() if k != "rstd"}
    assert rms_status(rstd=np.ones((), np.float32), **full)[0] == 0          # x_shape[0:0] is ()
    assert rms_status(rstd=np.ones(1, np.float32), **full)[0] == 0


# CheckRstdShape (ops-nn rms_norm_grad_tiling.cpp) with n = x.dims() - gamma.dims(), r = rstd.dims():
# r < n: rstd == x[:r] and x[r:n] all 1; r >= n: rstd[:n] == x[:n] and rstd holds prod(x[:n]) elements.
RSTD_ACCEPTED = [
    ((2, 1, 16), (16,), (2,)), ((2, 1, 16), (16,), (2, 1)), ((2, 1, 16), (16,), (2, 1, 1)),
    ((2, 1, 16), (16,), (2, 1, 1, 1)), ((4, 6, 8), (8,), (4, 6)), ((4, 6, 8), (8,), (4, 6, 1)),
    ((4, 1, 8), (8,), (4,)), ((4, 1, 8), (8,), (4, 1)), ((1, 1, 8), (8,), ()), ((1, 1, 8), (8,), (1,)),
    ((2, 8), (2, 8), ()), ((2, 8), (2, 8), (1,)), ((2, 8), (2, 8), (1, 1)), ((16,), (16,), ()),
    ((3, 4, 8), (4, 8), (3,)), ((3, 4, 8), (4, 8), (3, 1, 1)),
]
RSTD_REFUSED = [
    ((4, 6, 8), (8,), (6, 4)),           # the right element count, other dims (the example)
    ((4, 6, 8), (8,), (24,)), ((4, 6, 8), (8,), (4,)), ((4, 6, 8), (8,), (6,)), ((4, 6, 8), (8,), ()),
    ((4, 6, 8), (8,), (4, 6, 2)), ((4, 6, 8), (8,), (1, 4, 6)), ((2, 1, 16), (16,), (1, 2)),
    ((2, 1, 16), (16,), (2, 2)), ((2, 1, 16), (16,), ()), ((2, 8), (2, 8), (2,)), ((4, 1, 8), (8,), (1, 4)),
    ((3, 4, 8), (4, 8), (3, 4)),
]


def aclnn_shape(shape) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


@pytest.mark.parametrize("prod", ["Ascend950", "AtlasA2", "AtlasInference"])
@pytest.mark.parametrize("shape,gshape,rshape", RSTD_ACCEPTED)
def test_rms_rstd_shapes_cann_accepts(prod, shape, gshape, rshape):
    status, msg = rms_status(prod, **rms(shape, gshape, rstd_shape=rshape))
    assert status == 0, msg


@pytest.mark.parametrize("prod", ["Ascend950", "AtlasA3", "AtlasInference"])
@pytest.mark.parametrize("shape,gshape,rshape", RSTD_REFUSED)
def test_rms_rstd_shapes_cann_refuses(prod, shape, gshape, rshape):
    status, msg = rms_status(prod, **rms(shape, gshape, rstd_shape=rshape))
    assert status == 561002
    assert f"rstd has shape {aclnn_shape(rshape)}" in msg and f"x has shape {aclnn_shape(shape)}" in msg


def test_rms_rstd_of_zero_rows_on_950():
    """r >= n with no rows: the tiling compares element counts (0 == 0), so further dims are free."""
    assert rms_status(**rms((0, 8), (8,), rstd_shape=(0, 5)))[0] == 0
    assert rms_status(**rms((0, 8), (8,), rstd_shape=(1, 5)))[0] == 561002     # rstd[:n] != x[:n]


def test_rms_empty_rows_only_on_950():
    """Tiling4RmsNormGrad refuses zero rows outside the 950 (dgamma still has elements to write)."""
    assert rms_status("Ascend950", **rms((0, 16), (16,)))[0] == 0
    assert rms_status("Ascend950", **rms((3, 0, 16), (16,)))[0] == 0
    for prod in ("AtlasA2", "AtlasA3", "AtlasInference"):
        status, msg = rms_status(prod, **rms((0, 16), (16,)))
        assert status == 561002 and prod in msg and "no rows" in msg and "16 elements" in msg
        assert rms_status(prod, **rms((3, 0, 16), (16,)))[0] == 561002
    # every output empty (no rows and no columns, or no columns): the seed's "supports empty tensors" stands
    assert rms_status("AtlasA2", **rms((0, 0), (0,)))[0] == 0
    assert rms_status("AtlasA2", **rms((4, 0), (0,)))[0] == 0


def test_rms_atlas_inference_last_axis_32_bytes():
    assert rms_status("AtlasInference", **rms((4, 7), (7,)))[0] == 561002        # 28 bytes
    assert rms_status("AtlasInference", **rms((4, 8), (8,)))[0] == 0             # 32 bytes
    assert rms_status("AtlasInference", **rms((4, 16), (16,), np.float16, np.float16))[0] == 0
    status, msg = rms_status("AtlasInference", **rms((4, 15), (15,), np.float16, np.float16))
    assert status == 561002 and "32 bytes" in msg
    assert rms_status("Ascend950", **rms((4, 7), (7,)))[0] == 0                  # no such rule elsewhere


def test_rms_argument_kinds():
    status, msg = rms_status(dy=[[1.0] * 16] * 2)
    assert status == 161002 and "dy" in msg and "list" in msg
    ro = np.zeros(16, np.float32)
    ro.flags.writeable = False
    status, msg = rms_status(dgammaOut=ro)
    assert status == 161002 and "read-only" in msg


def test_rms_private_format_and_destroyed_tensor():
    _, buf = acl.aclrtMalloc(64 * 4)
    nz = acl.aclCreateTensor([16], acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_FRACTAL_NZ, [16], buf)
    status, msg = rms_status(gamma=nz)
    assert status == 161002 and "FRACTAL_NZ" in msg
    t = acl.aclCreateTensor([16], acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, [16], buf)
    acl.aclDestroyTensor(t)
    assert rms_status(gamma=t)[0] == 161002


# ---- hand-written: GroupNormBackward (seed 002) ----------------------------------------------

def gn(n=2, c=6, hw=4, group=3, io=np.float32, stat=np.float32):
    return dict(gradOut=np.ones((n, c, hw), io), input=np.ones((n, c, hw), io), mean=np.zeros((n, group), stat),
                rstd=np.ones((n, group), stat), gamma=np.ones(c, stat), N=n, C=c, HxW=hw, group=group,
                outputMask=[True, True, True], gradInput=np.zeros((n, c, hw), io),
                gradGammaOut=np.zeros(c, stat), gradBetaOut=np.zeros(c, stat))


def gn_status(prod="Ascend950", args=None, **changes):
    args = dict(gn() if args is None else args)
    args.update(changes)
    with product(prod):
        status, _, _ = aclnn.aclnnGroupNormBackwardGetWorkspaceSize(**args)
    return status, acl.aclGetRecentErrMsg()


@pytest.mark.parametrize("name", ["gradOut", "input", "mean", "rstd"])
def test_gn_required_nulls(name):
    status, msg = gn_status(**{name: None})
    assert status == 161001 and name in msg


@pytest.mark.parametrize("prod", ["Ascend950", "AtlasA3", "AtlasA2", "AtlasTraining"])
def test_gn_null_mask_is_invalid_not_nullptr(prod):
    """CANN's CheckMaskNotNull runs under CHECK_RET(..., ACLNN_ERR_PARAM_INVALID): 161002."""
    status, msg = gn_status(prod, outputMask=None)
    assert status == 161002 and "outputMask is a null pointer" in msg
    assert gn_status(prod, outputMask=None, rstd=None)[0] == 161001       # the four inputs come first


@pytest.mark.parametrize("bit,name", [(0, "gradInput"), (1, "gradGammaOut"), (2, "gradBetaOut")])
def test_gn_masked_outputs(bit, name):
    for prod in ("Ascend950", "AtlasA2", "AtlasTraining"):
        status, msg = gn_status(prod, **{name: None})                     # CheckMaskNotNull: 161002
        assert status == 161002 and f"outputMask[{bit}] is true but {name} is a null pointer" in msg
    mask = [True, True, True]
    mask[bit] = False
    assert gn_status(**{name: None, "outputMask": mask})[0] == 0
    wrong = np.zeros(99, np.float16)  # masked off: neither shape nor dtype matters
    assert gn_status(**{name: wrong, "outputMask": mask})[0] == 0


def test_gn_mask_length_and_kind():
    assert gn_status(outputMask=[True, True])[0] == 161002
    assert gn_status(outputMask=[True] * 4)[0] == 161002
    assert gn_status(outputMask=acl.aclCreateBoolArray([True, False, True]), gradGammaOut=None)[0] == 0
    assert gn_status(outputMask=[1, 0, 1])[0] == 161002       # ints are not bools


def test_gn_dtypes_per_product():
    mixed = gn(io=np.float16, stat=np.float32)
    assert gn_status("Ascend950", mixed)[0] == 0
    assert gn_status("Ascend950", gn(io=BF16, stat=np.float32))[0] == 0
    for prod in ("AtlasA2", "AtlasA3", "AtlasTraining"):
        status, msg = gn_status(prod, mixed)
        assert status == 161002 and "mean" in msg
    assert gn_status("AtlasA2", gn(io=BF16, stat=BF16))[0] == 0
    status, msg = gn_status("AtlasTraining", gn(io=BF16, stat=BF16))
    assert status == 161002 and "gradOut" in msg
    assert gn_status("AtlasTraining", gn(io=np.float16, stat=np.float16))[0] == 0
    assert gn_status(gradOut=np.ones((2, 6, 4), np.float64))[0] == 161002
    assert gn_status(input=np.ones((2, 6, 4), np.float16))[0] == 161002
    assert gn_status(rstd=np.ones((2, 3), np.float16))[0] == 161002
    assert gn_status(gamma=np.ones(6, np.float16))[0] == 161002
    assert gn_status(gradBetaOut=np.zeros(6, np.float16))[0] == 161002


def test_gn_absent_on_atlas_inference():
    status, msg = gn_status("AtlasInference")
    assert status == 161002 and "AtlasInference" in msg


def test_gn_group_and_counts():
    status, msg = gn_status(group=0)
    assert status == 161002 and "group" in msg
    assert gn_status(group=-2)[0] == 161002
    status, msg = gn_status(group=4, mean=np.zeros((2, 4), np.float32), rstd=np.ones((2, 4), np.float32))
    assert status == 161002 and "divisible" in msg
    status, msg = gn_status(HxW=5)
    assert status == 161002 and "input" in msg and "48" in msg
    assert gn_status(mean=np.zeros((2, 4), np.float32))[0] == 161002
    assert gn_status(rstd=np.ones(5, np.float32))[0] == 161002
    g7 = np.ones(7, np.float32)
    assert gn_status(gamma=g7, gradGammaOut=np.zeros(7, np.float32), gradBetaOut=np.zeros(7, np.float32))[0] == 161002
    assert gn_status(N="2")[0] == 161002


def test_gn_output_shapes():
    status, msg = gn_status(gradInput=np.zeros((2, 24), np.float32))
    assert status == 161002 and "gradInput" in msg
    assert gn_status(gradGammaOut=np.zeros((1, 6), np.float32))[0] == 161002
    status, msg = gn_status(gradBetaOut=np.zeros((1, 6), np.float32))
    assert status == 161002 and "gradBetaOut" in msg
    # gamma null: gradGammaOut/gradBetaOut are shaped (C,)
    assert gn_status(gamma=None)[0] == 0
    assert gn_status(gamma=None, gradGammaOut=np.zeros((6, 1), np.float32))[0] == 161002


def test_gn_input_shape_is_free_beyond_its_count():
    """The seed checks element counts, not shapes: (N, C, H, W) and flat inputs are fine."""
    a = gn()
    a.update(gradOut=np.ones((2, 6, 2, 2), np.float32), input=np.ones((2, 6, 2, 2), np.float32),
             gradInput=np.zeros((2, 6, 2, 2), np.float32), mean=np.zeros(6, np.float32), rstd=np.ones(6, np.float32))
    assert gn_status(args=a)[0] == 0


def gn_sized(n, c, hw, group, **changes):
    return dict(gn(n, c, hw, group), **changes)


def test_gn_channel_limits_on_a2_a3():
    """CheckAttr on NpuArch DAV_2201: C / group <= 8000 and C <= 240000 (161002)."""
    for prod in ("AtlasA2", "AtlasA3"):
        status, msg = gn_status(prod, gn_sized(1, 8001, 1, 1))
        assert status == 161002 and "C / group = 8001 / 1 = 8001" in msg and "8000" in msg and prod in msg
        assert gn_status(prod, gn_sized(1, 8000, 1, 1))[0] == 0
        assert gn_status(prod, gn_sized(2, 16002, 1, 2))[0] == 161002
        status, msg = gn_status(prod, gn_sized(1, 240032, 1, 32))                    # 7501 per group
        assert status == 161002 and "C = 240032" in msg and "240000" in msg
        assert gn_status(prod, gn_sized(1, 240000, 1, 30))[0] == 0                   # 8000 per group
    # the limits come before the element counts, as in CheckParams (both 161002)
    assert gn_status("AtlasA2", gn_sized(1, 8001, 1, 1, HxW=2))[0] == 161002


def test_gn_channel_limits_elsewhere():
    """Atlas training: no limit (the BatchNorm composition). Ascend 950: no C limit, but its kernel
    tiling refuses C / group > 8000, which the op_api reports as 561103 (ACLNN_ERR_INNER_NULLPTR)."""
    assert gn_status("AtlasTraining", gn_sized(1, 8001, 1, 1))[0] == 0
    assert gn_status("AtlasTraining", gn_sized(1, 240032, 1, 32))[0] == 0
    assert gn_status("Ascend950", gn_sized(1, 240032, 1, 32))[0] == 0
    assert gn_status("Ascend950", gn_sized(1, 8000, 1, 1))[0] == 0
    status, msg = gn_status("Ascend950", gn_sized(1, 8001, 1, 1))
    assert status == 561103 and "C / group = 8001 / 1 = 8001" in msg and "ACLNN_ERR_INNER_NULLPTR" in msg
    for bit in range(3):                       # one output asked for is enough to look at the kernel
        assert gn_status("Ascend950", gn_sized(1, 8001, 1, 1, outputMask=[i == bit for i in range(3)]))[0] == 561103
    assert gn_status("Ascend950", gn_sized(1, 8001, 1, 1, outputMask=[False] * 3))[0] == 0
    assert gn_status("Ascend950", gn_sized(0, 8001, 1, 1, outputMask=[False] * 3))[0] == 561103   # empty path


def test_gn_empty_calls_on_950_need_n_c_layout():
    """ComputeGroupNormBackwardEmptyInput hands gradOut as given to the empty tiling (arch35)."""
    flat = gn_sized(0, 6, 4, 3, gradOut=np.ones(0, np.float32), input=np.ones(0, np.float32),
                    gradInput=np.zeros(0, np.float32), mean=np.zeros(0, np.float32), rstd=np.ones(0, np.float32))
    status, msg = gn_status("Ascend950", flat)
    assert status == 561103 and "gradOut has shape (0,)" in msg and "(0, 6, ...)" in msg
    for prod in ("AtlasA2", "AtlasA3", "AtlasTraining"):      # there the op_api returns before any kernel
        assert gn_status(prod, flat)[0] == 0
    assert gn_status("Ascend950", gn_sized(0, 6, 4, 3))[0] == 0                          # (0, 6, 4)
    assert gn_status("Ascend950", gn_sized(2, 6, 0, 3))[0] == 0                          # (2, 6, 0)
    wide = dict(flat, gradOut=np.ones((0, 24), np.float32), input=np.ones((0, 24), np.float32),
                gradInput=np.zeros((0, 24), np.float32))
    assert gn_status("Ascend950", wide)[0] == 561103                                    # dim 1 is not C
    odd = dict(gn_sized(0, 6, 4, 3), input=np.ones((0, 6, 2, 2), np.float32),
               gradInput=np.zeros((0, 6, 2, 2), np.float32))
    status, msg = gn_status("Ascend950", odd)
    assert status == 561103 and "input has shape (0, 6, 2, 2)" in msg
    assert gn_status("Ascend950", dict(flat, C=0, gamma=np.ones(0, np.float32), gradGammaOut=np.zeros(0, np.float32),
                                       gradBetaOut=np.zeros(0, np.float32)))[0] == 0   # C = 0 returns first


def test_op_modules_import():
    assert get_op("rms_norm_grad").api is rng_op.API and get_op("group_norm_backward").api is gnb.API
