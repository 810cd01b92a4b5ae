"""The ApiSpec's declared seams, on a toy op: RmsNormGrad with an input its kernel never reads.

* ``Param.validated_only``: ``biasOptional`` (LayerNormBackward's case) has no kernel tensor;
  the op's rules and the generic checks see it like any tensor, the plan never stages,
  fills or hands it to the kernel, and its dtype takes no part in choosing the dtype combo.
* The declarations refuse what they cannot mean: a tensor without a kernel name (unless
  validated_only), a flag that is no bool attribute, a mask bit without an outputMask,
  required_when_off on an output nothing turns off, ApiSpec.unread naming an input
  without a fill value.

The toy is a copy of the registered RmsNormGrad OpSpec with one parameter and two rules
more (same name, so it shares its kernels); its aclnn functions are generated here, not
registered. (Param.flag is tested on GroupNormSwishGrad, ApiSpec.unread on BatchNorm.)
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from opgen import acl, aclnn
from opgen.apispec import (ACLNN_ERR_PARAM_INVALID, ATTR, INPUT, MASK, OUTPUT, ApiSpec, Call, Param, Rule,
                           dtype_message, shape_str)
from opgen.ops import get_op

from opgen.tensorarg import describe

RMS = get_op("rms_norm_grad")


def _bias_dtype(call) -> str | None:
    bias = call["biasOptional"]
    allowed = tuple(dict.fromkeys((call["gamma"].dtype, "float16")))
    return None if bias is None else dtype_message("biasOptional", bias.dtype, allowed, " (gamma's or float16)")


def _bias_shape(call) -> str | None:
    bias, gamma = call["biasOptional"], call["gamma"]
    if bias is None or bias.shape == gamma.shape:
        return None
    return f"biasOptional has shape {shape_str(bias.shape)}; expected gamma's {shape_str(gamma.shape)}"


def _toy(**api_changes):
    """RmsNormGrad with ``biasOptional`` (validated only) after gamma, and its two rules."""
    params = RMS.api.params[:4] + (Param("biasOptional", INPUT, "A per-column bias the math never reads; gamma's "
                                         "shape, gamma's dtype or float16; may be null.", dtypes="FLOAT32, FLOAT16",
                                         ranks="1-8", optional=True, validated_only=True),) + RMS.api.params[4:]
    rules = RMS.api.rules + (
        Rule(ACLNN_ERR_PARAM_INVALID, "toy: biasOptional's dtype is gamma's or float16", _bias_dtype),
        Rule(ACLNN_ERR_PARAM_INVALID, "toy: biasOptional has gamma's shape", _bias_shape))
    api = dataclasses.replace(RMS.api, params=params, rules=rules, **api_changes)
    return dataclasses.replace(RMS, api=api)


TOY = _toy()
_, PHASE_ONE = aclnn._make_phase_one(TOY)
_, PHASE_TWO = aclnn._make_phase_two(TOY)


@pytest.fixture(autouse=True)
def _own_plans():
    """The toy shares RmsNormGrad's name (and kernels): keep its plans out of other tests'."""
    aclnn.clear_plan_cache()
    yield
    aclnn.clear_plan_cache()


def _args(rng, dtype=np.float32, bias=None):
    x = rng.standard_normal((5, 16)).astype(dtype)
    return dict(dy=rng.standard_normal((5, 16)).astype(dtype), x=x, rstd=rng.uniform(0.5, 2, (5, 1)).astype(np.float32),
                gamma=rng.uniform(0.5, 1.5, 16).astype(dtype), biasOptional=bias, dxOut=np.zeros((5, 16), dtype),
                dgammaOut=np.zeros(16, np.float32))


def _run(args):
    """Both phases; (status, message, executor)."""
    status, size, executor = PHASE_ONE(**args)
    if status:
        return status, acl.aclGetRecentErrMsg(), None
    workspace = acl.aclrtMalloc(size)[1] if size else None
    status = PHASE_TWO(workspace, size, executor, None)
    return status, acl.aclGetRecentErrMsg() if status else "", executor


def _outputs(args):
    return args["dxOut"].tobytes() + args["dgammaOut"].tobytes()


def test_a_validated_only_input_changes_nothing_the_kernel_computes(rng):
    """Null, the bias, a nan bias, a float16 bias (a dtype no combo pairs with float32 data:
    were it part of the combo lookup the call would fail), a read-only or strided one: the
    same bits out, and the plan never names it."""
    base = _args(rng)
    status, _, executor = _run(base)
    assert status == 0
    want, kinds = _outputs(base), [(p.kernel, p.kind) for p in executor.plan.placements]
    wide = np.full((16, 2), np.nan, np.float32)
    for bias in (np.ones(16, np.float32), np.full(16, np.nan, np.float32), np.ones(16, np.float16),
                 np.broadcast_to(np.float32(1), (16,)), wide[:, 0]):
        args = {**base, "biasOptional": bias, "dxOut": np.zeros((5, 16), np.float32),
                "dgammaOut": np.zeros(16, np.float32)}
        status, message, executor = _run(args)
        assert (status, message) == (0, "")
        assert _outputs(args) == want
        plan = executor.plan
        assert "biasOptional" not in {p.param for p in plan.placements}
        assert [(p.kernel, p.kind) for p in plan.placements] == kinds and plan.used_bytes == 0


def test_a_validated_only_input_is_checked_by_the_rules_and_the_generic_checks(rng):
    """The op's rules (dtype, shape) and the generic ones (reading, format) see it as given."""
    base = _args(rng)
    _, buffer = acl.aclrtMalloc(64)
    nz = acl.aclCreateTensor((16,), acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_FRACTAL_NZ, (16,), buffer)
    gone = acl.aclCreateTensor((16,), acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, (16,), buffer)
    acl.aclDestroyTensor(gone)
    cases = [
        (np.ones(16, np.float64), "biasOptional has dtype float64; expected float32 or float16"),
        (np.ones(17, np.float32), "biasOptional has shape (17,); expected gamma's (16,)"),
        (np.ones((1, 16), np.float32), "biasOptional has shape (1, 16)"),
        (nz, "biasOptional has format FRACTAL_NZ; expected ND"),
        (gone, "biasOptional is an aclTensor that was already destroyed"),
        ([1.0] * 16, "biasOptional must be an aclTensor, a numpy array, a DLPack tensor or None"),
    ]
    for bias, message in cases:
        status, got, _ = _run({**base, "biasOptional": bias})
        assert status == ACLNN_ERR_PARAM_INVALID and message in got, (bias, got)


def test_a_validated_only_input_has_no_part_in_the_dtype_combo(rng):
    """aclnn._combo reads the tensors the kernel uses: a null bias and a float16 one select
    the same combo; combos cannot name it (they list the kernel's tensors)."""
    args = _args(rng)
    for bias in (None, np.ones(16, np.float16)):
        call = Call(TOY, "Ascend950", {k: describe(k, v) for k, v in {**args, "biasOptional": bias}.items()})
        assert aclnn._combo(call).tag == "f32-f32"
        assert not call.reads(TOY.api.param("biasOptional")) and call.reads(TOY.api.param("gamma"))
    assert all("biasOptional" not in dict(c.dtypes) for c in TOY.combos)


def test_declarations_refuse_what_they_cannot_mean():
    with pytest.raises(ValueError, match="needs its kernel tensor name .*validated_only"):
        Param("bias", INPUT, "a forgotten kernel name")
    with pytest.raises(ValueError, match="only an input without a kernel tensor is validated_only"):
        Param("bias", INPUT, "a kernel name and validated_only", "bias", validated_only=True)
    with pytest.raises(ValueError, match="only an input without a kernel tensor is validated_only"):
        Param("out", OUTPUT, "an output the kernel does not write", validated_only=True)
    with pytest.raises(ValueError, match="mask bit or by a flag, not both"):
        Param("out", OUTPUT, "asked twice", "o", mask_bit=0, flag="wantOut")
    with pytest.raises(ValueError, match="only an output has a mask bit or a flag"):
        Param("a", ATTR, "an attribute with a flag", flag="wantOut")
    with pytest.raises(ValueError, match="required_when_off needs a mask bit or a flag"):
        Param("out", OUTPUT, "never off", "o", required_when_off=True)
    common = dict(rules=(), problem=lambda call: None, kernel_shapes=lambda p: {}, description="toy")
    x, out = Param("x", INPUT, "x", "x"), Param("out", OUTPUT, "out", "o", flag="wantOut")
    with pytest.raises(ValueError, match="flag 'wantOut' is not a bool attribute"):
        ApiSpec(params=(x, Param("wantOut", ATTR, "an int"), out), **common)
    with pytest.raises(ValueError, match="flag 'wantOut' is not a bool attribute"):
        ApiSpec(params=(x, out), **common)
    with pytest.raises(ValueError, match="mask bit but the op has no outputMask"):
        ApiSpec(params=(x, Param("out", OUTPUT, "out", "o", mask_bit=0)), **common)
    with pytest.raises(ValueError, match="more than one outputMask"):
        ApiSpec(params=(x, Param("m1", MASK, "m"), Param("m2", MASK, "m")), **common)
    bias = Param("bias", INPUT, "never read; may be null", optional=True, validated_only=True)
    api = ApiSpec(params=(x, bias, Param("wantOut", ATTR, "b", value_type="bool"), out), **common)
    assert api.wanted(out, {"wantOut": False}) is False and api.wanted(out, {"wantOut": True}) is True
    assert api.wanted(out, {"wantOut": 1}) is True     # no bool: the rules refuse it; nothing is skipped for it


def test_unread_may_name_only_an_input_with_a_fill_value(rng):
    """An ApiSpec.unread naming gamma (no fill value) is the op's bug: an internal error
    status in phase one, never a kernel fed something else."""
    op = _toy(unread=lambda call: ("gamma",))
    _, phase_one = aclnn._make_phase_one(op)
    status, size, executor = phase_one(**_args(rng))
    assert status == aclnn.ACLNN_ERR_RUNTIME_ERROR and executor is None
    assert "only an input with a fill value can go unread" in acl.aclGetRecentErrMsg()


def test_other_readers_of_the_param_table_pass_a_validated_only_input_over(rng):
    """Golden dumps skip it (the kernel never reads it), baselines and the tests' base calls
    take it by its aclnn name (None when absent: a null optional input)."""
    from opgen import baselines, dumps

    from aclnn_helpers import base_args

    bias = TOY.api.param("biasOptional")
    assert dumps._kernel_name(TOY, "biasOptional") is None and dumps._kernel_name(TOY, "gamma") == "gamma"
    assert baselines._value(TOY, bias, None, {"gamma": 1}) is None
    assert baselines._value(TOY, bias, None, {"biasOptional": 2}) == 2
    problem = RMS.problems[0]
    args, _ = base_args(TOY, problem, RMS.combo("f32-f32"), rng)
    assert args["biasOptional"] is None and _run(args)[0] == 0
