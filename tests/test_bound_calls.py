"""The Pythonic layer's bound calls (opgen.api._Prepared.bound): a call like one that ran
before, with no output given, runs that call's plan without the aclnn phases' reading.

It must be exactly what phase one would have done: every change that changes phase one's
key (dtype, shape, strides, alignment, product, target, an attribute) is a call of its own,
run through both phases; given outputs always go through them; clearing the plan cache
drops every bound call; a failure in a bound call has phase two's status and message.
Values are compared with the float64 reference, and warm results with cold ones bit for bit.
"""
from __future__ import annotations

import numpy as np
import pytest

import opgen
from opgen import aclnn, api, config, executor
from opgen.apispec import ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_RUNTIME_ERROR
from opgen.ops import get_op
from opgen.ops.group_norm_backward.reference import group_norm as reference

from aclnn_helpers import product

torch = pytest.importorskip("torch")


@pytest.fixture
def phase_ones(monkeypatch):
    """A list that gets one entry per phase one actually run (opgen.aclnn._plan_call), from
    a cold cache (no bound call or plan left by other tests)."""
    aclnn.clear_plan_cache()
    seen = []
    real = aclnn._plan_call

    def counted(op, positions, arguments):
        seen.append(op.name)
        return real(op, positions, arguments)
    monkeypatch.setattr(aclnn, "_plan_call", counted)
    return seen


def _inputs(shape=(2, 6, 5), dtype=torch.float32, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=generator, dtype=torch.float64) * 2 + 0.5
    gamma = torch.rand(shape[1], generator=generator, dtype=torch.float64) + 0.5
    beta = torch.randn(shape[1], generator=generator, dtype=torch.float64)
    return tuple(v.to(dtype) for v in (x, gamma, beta))


def _check(outs, x, gamma, beta, group, tol=1e-4):
    want = reference(*(np.asarray(v.double() if hasattr(v, "double") else v, np.float64)
                                       for v in (x, gamma, beta)), group, 1e-5)
    for got, ref in zip(outs, want):
        got = got.double().numpy() if hasattr(got, "double") else np.asarray(got, np.float64)
        np.testing.assert_allclose(got, ref.reshape(got.shape), rtol=tol, atol=tol)


def test_a_repeated_call_skips_phase_one_and_matches_the_reference(phase_ones):
    x, gamma, beta = _inputs(seed=1)
    first = opgen.group_norm(x, gamma, beta, 3)
    assert phase_ones == ["group_norm"]
    for seed in (2, 3):   # other tensors, same signature: the bound plan, their own values
        x, gamma, beta = _inputs(seed=seed)
        outs = opgen.group_norm(x, gamma, beta, 3)
        _check(outs, x, gamma, beta, 3)
    assert phase_ones == ["group_norm"], "calls like the first must run its bound plan"
    assert all(o.data_ptr() != p.data_ptr() for o, p in zip(outs, first)), "fresh outputs every call"


def test_numpy_calls_are_bound_too(phase_ones):
    x, gamma, beta = (v.numpy() for v in _inputs(seed=4))
    for _ in range(3):
        outs = opgen.group_norm(x, gamma, beta, 2)
        assert all(type(o) is np.ndarray for o in outs)
        _check(outs, x, gamma, beta, 2)
    assert phase_ones == ["group_norm"]


def _odd_address(x):
    raw = np.zeros(x.nbytes + 1, np.uint8)
    moved = raw[1:].view(x.dtype).reshape(x.shape)
    moved[...] = x
    return moved


# Each change makes a call whose phase-one key differs from the bound one's (on the input
# x, one attribute, or the settings): it must run phase one and get what a cold cache gives.
CHANGES = {
    "dtype": lambda x, g, b: ((x.half(), g.half(), b.half()), 3),
    "shape": lambda x, g, b: ((x[:1].clone(), g, b), 3),
    "strides": lambda x, g, b: ((x.transpose(0, 2).contiguous().transpose(0, 2), g, b), 3),
    "group": lambda x, g, b: ((x, g, b), 2),
    "numpy, element-misaligned": lambda x, g, b: ((_odd_address(x.numpy()), g.numpy(), b.numpy()), 3),
}


@pytest.mark.parametrize("change", CHANGES, ids=str)
def test_key_changes_run_phase_one_and_get_the_cold_result(change, phase_ones):
    x, gamma, beta = _inputs(seed=5)
    numpy_like = change.startswith("numpy")
    base = tuple(v.numpy() for v in (x, gamma, beta)) if numpy_like else (x, gamma, beta)
    opgen.group_norm(*base, 3)
    opgen.group_norm(*base, 3)
    assert len(phase_ones) == 1
    values, group = CHANGES[change](x, gamma, beta)
    warm = opgen.group_norm(*values, group)
    assert len(phase_ones) == 2, f"{change}: served the bound plan of another call"
    aclnn.clear_plan_cache()
    cold = opgen.group_norm(*values, group)
    for w, c in zip(warm, cold):
        np.testing.assert_array_equal(np.asarray(w.float() if hasattr(w, "float") else w),
                                      np.asarray(c.float() if hasattr(c, "float") else c))
    _check(warm, *values, group, tol=5e-3 if change == "dtype" else 1e-4)


def test_product_and_target_are_part_of_the_key(phase_ones, monkeypatch):
    x, gamma, beta = (v.to(torch.bfloat16) for v in _inputs(seed=6))
    opgen.group_norm(x, gamma, beta, 3)
    opgen.group_norm(x, gamma, beta, 3)
    with product("AtlasInference"):   # no bfloat16 there: phase one refuses, every time
        for _ in range(2):
            with pytest.raises(opgen.AclnnError) as info:
                opgen.group_norm(x, gamma, beta, 3)
            assert info.value.status == ACLNN_ERR_PARAM_INVALID
    monkeypatch.setenv("OPGEN_TARGET", "no-such-target")
    config.reset()
    with pytest.raises(opgen.AclnnError) as info:
        opgen.group_norm(x, gamma, beta, 3)
    assert info.value.status == ACLNN_ERR_RUNTIME_ERROR
    assert len(phase_ones) == 4


def test_given_outputs_always_run_both_phases(phase_ones):
    x, gamma, beta = _inputs(seed=7)
    y, mean, rstd = opgen.group_norm(x, gamma, beta, 3)
    for _ in range(2):
        outs = opgen.group_norm(x, gamma, beta, 3, out=y, mean=mean, rstd=rstd)
        assert outs[0] is y
    assert len(phase_ones) == 3


def test_clearing_the_plan_cache_drops_bound_calls(phase_ones):
    x, gamma, beta = _inputs(seed=8)
    opgen.group_norm(x, gamma, beta, 3)
    opgen.group_norm(x, gamma, beta, 3)
    aclnn.clear_plan_cache()              # as a reloaded tuning database does
    _check(opgen.group_norm(x, gamma, beta, 3), x, gamma, beta, 3)
    assert len(phase_ones) == 2


def test_plans_that_stage_are_never_bound(phase_ones):
    """A non-contiguous input is staged through the workspace: phase two's path, each call."""
    x, gamma, beta = _inputs(seed=9)
    strided = x.transpose(0, 2).contiguous().transpose(0, 2)
    for _ in range(2):
        _check(opgen.group_norm(strided, gamma, beta, 3), strided, gamma, beta, 3)
    op = get_op("group_norm")
    prepared = api._prepared(op, api._layout(op), (strided, gamma, beta, 3, 1e-5), (None, None, None))
    assert prepared.bound is None


def test_a_failing_bound_call_has_phase_twos_status_and_message(monkeypatch):
    x, gamma, beta = _inputs(seed=10)
    opgen.group_norm(x, gamma, beta, 3)   # bound from here on

    def broken(self, memory, keys_just_read=False):
        raise RuntimeError("boom")
    monkeypatch.setattr(executor.Executor, "run", broken)
    messages = []
    for _ in range(2):                     # bound, then both phases: the same report
        with pytest.raises(opgen.AclnnError) as info:
            opgen.group_norm(x, gamma, beta, 3)
        messages.append((info.value.status, info.value.message))
        aclnn.clear_plan_cache()
    assert messages[0] == messages[1]
    assert messages[0][0] == ACLNN_ERR_RUNTIME_ERROR
    assert messages[0][1].startswith("aclnnGroupNorm failed") and "boom" in messages[0][1]


def test_bound_calls_hand_addresses_unchecked_but_the_aclnn_api_still_checks(phase_ones):
    """A bound call's binder takes each torch tensor's data_ptr() unchecked (its key was read
    in the same call); the aclnn API's binder for the same plan still checks each tensor
    between the phases (binders are keyed by their recipes too): a tensor resized after
    GetWorkspaceSize is refused, never read."""
    from opgen import acl, launch

    x, gamma, beta = _inputs(seed=11)
    for _ in range(2):
        y, mean, rstd = opgen.group_norm(x, gamma, beta, 3)
    op = get_op("group_norm")
    plan, kinds = api._prepared(op, api._layout(op), (x, gamma, beta, 3, 1e-5), (None, None, None)).bound
    unchecked = launch.binders.get(plan, kinds, executor._recipes_of_read_keys)
    assert ".data_ptr()" in unchecked.source and "address_of" not in unchecked.source
    status, size, ex = aclnn.aclnnGroupNormGetWorkspaceSize(x, gamma, beta, 2, 6, 5, 3, 1e-5, y, mean, rstd)
    assert status == 0 and ex.plan is plan
    x.resize_(1)
    before = y.clone()
    assert aclnn.aclnnGroupNorm(None, size, ex, None) == ACLNN_ERR_PARAM_INVALID
    assert "self was changed or destroyed" in acl.aclGetRecentErrMsg()
    assert torch.equal(y, before)


# ---- written calls (opgen.bound) -----------------------------------------------------------

def _written(op_name: str, values: tuple):
    """The op's written call for the signature of ``values`` (made by two calls)."""
    from opgen import bound

    aclnn.clear_plan_cache()
    function = getattr(opgen, op_name)
    function(*values)
    function(*values)
    (written,) = bound.calls_of(op_name)
    return written


def _moved_by_one_element(t):
    raw = torch.empty(t.numel() + 1, dtype=t.dtype)
    moved = raw[1:].view(t.shape)
    moved.copy_(t)
    return moved


# Each changes one field of the signature a written GroupNorm call was made for: its guard
# must refuse it (None), so the call takes the general path.
GUARDED = {
    "dtype": lambda v: (v[0].double(), *v[1:]),
    "shape": lambda v: (v[0][:1].clone(), *v[1:]),
    "strides": lambda v: (v[0].transpose(0, 2).contiguous().transpose(0, 2), *v[1:]),
    "type": lambda v: (torch.nn.Parameter(v[0]), *v[1:]),
    "null beta": lambda v: (v[0], v[1], None, *v[3:]),
    "group value": lambda v: (*v[:3], 2, v[4]),
    "group as a bool": lambda v: (*v[:3], True, v[4]),
    "eps value": lambda v: (*v[:4], 1e-3),
    "eps as an int": lambda v: (*v[:4], 1),
    "numpy for torch": lambda v: (v[0].numpy(), *v[1:]),
    "nested": lambda v: (torch.nested.nested_tensor(list(v[0])), *v[1:]),   # no sizes: the guard must not raise
}


@pytest.mark.parametrize("change", GUARDED, ids=str)
def test_a_written_calls_guard_refuses_every_other_signature(change):
    x, gamma, beta = _inputs(seed=12)
    values = (x, gamma, beta, 3, 1.0)
    written = _written("group_norm", values)
    assert written(values) is not None
    changed = GUARDED[change](values)
    assert written(changed) is None, f"{change}: the written call accepted another signature"
    if change == "nested":   # and the general path reports it in one line
        with pytest.raises(opgen.AclnnError) as info:
            opgen.group_norm(*changed)
        assert info.value.status == ACLNN_ERR_PARAM_INVALID and "\n" not in info.value.message


def test_a_written_float_is_guarded_by_its_bits():
    """0.0 and -0.0 are equal but fill different values (BatchNorm's momentum here)."""
    x = _inputs(seed=18)[0]
    values = (x, None, None, None, None, True, 0.0, 1e-5)
    written = _written("batch_norm", values)
    assert written(values) is not None
    assert written((*values[:6], -0.0, 1e-5)) is None


def test_a_written_call_takes_any_tensor_with_the_same_key_and_matches_the_reference():
    x, gamma, beta = _inputs(seed=13)
    written = _written("group_norm", (x, gamma, beta, 3, 1e-5))
    other = _moved_by_one_element(_inputs(seed=14)[0])   # another storage offset, still 4-byte aligned
    outs = written((other, gamma, beta, 3, 1e-5))
    assert outs is not None
    _check(outs, other, gamma, beta, 3)


def test_a_written_mask_is_guarded_by_item_types():
    x, gamma, beta = _inputs(seed=15)
    y, mean, rstd = opgen.group_norm(x, gamma, beta, 3)
    dy = torch.randn_like(x)
    values = (dy, x, mean, rstd, gamma, 3, [True, False, True])
    written = _written("group_norm_backward", values)
    outs = written(values)
    assert outs is not None and outs[1] is None
    assert written((*values[:6], [True, 0, True])) is None
    assert written((*values[:6], (True, False, True))) is None
    assert written((*values[:6], [True, True, True])) is None


def test_written_calls_follow_the_product_and_the_plan_cache():
    from opgen import bound

    x, gamma, beta = (v.to(torch.bfloat16) for v in _inputs(seed=16))
    values = (x, gamma, beta, 3, 1e-5)
    written = _written("group_norm", values)
    with product("AtlasInference"):
        assert written(values) is None
        with pytest.raises(opgen.AclnnError):   # no bfloat16 there: the general path says so
            opgen.group_norm(*values)
    aclnn.clear_plan_cache()
    assert bound.calls_of("group_norm") == ()


def test_an_op_keeps_at_most_max_per_op_written_calls(phase_ones):
    from opgen import bound

    gamma, beta = _inputs(seed=17)[1:]
    for n in range(1, bound.MAX_PER_OP + 3):
        x = _inputs(shape=(n, 6, 5), seed=n)[0]
        for _ in range(2):
            _check(opgen.group_norm(x, gamma, beta, 3), x, gamma, beta, 3)
    assert len(bound.calls_of("group_norm")) == bound.MAX_PER_OP
    assert len(phase_ones) == bound.MAX_PER_OP + 2   # the others still bound: one phase one each


def test_a_signature_met_with_other_tensor_types_gets_a_written_call_of_its_own(phase_ones):
    """A module passes Parameters where a functional call of the same signature passed plain
    tensors: the first such call runs bound (no phase one), and writes a call that takes the
    next ones."""
    from opgen import bound

    x, gamma, beta = _inputs(seed=19)
    plain = (x, gamma, beta, 3, 1e-5)
    params = (x, torch.nn.Parameter(gamma), torch.nn.Parameter(beta), 3, 1e-5)
    opgen.group_norm(*plain)
    opgen.group_norm(*plain)
    assert len(bound.calls_of("group_norm")) == 1 and bound.calls_of("group_norm")[0](params) is None
    _check(opgen.group_norm(*params), x, gamma, beta, 3)
    assert len(phase_ones) == 1 and len(bound.calls_of("group_norm")) == 2
    outs = bound.calls_of("group_norm")[1](params)
    assert outs is not None
    _check(outs, x, gamma, beta, 3)


def test_a_signature_tries_to_write_its_call_a_bounded_number_of_times(phase_ones, monkeypatch):
    """Where no written call can be made (write returns None: a nan attribute, say), the
    bound calls stop trying after api._REWRITES attempts."""
    from opgen import bound

    tries = []
    monkeypatch.setattr(bound, "write", lambda *args: tries.append(args[0].name))
    x, gamma, beta = _inputs(seed=20)
    for _ in range(6):
        _check(opgen.group_norm(x, gamma, beta, 3), x, gamma, beta, 3)
    assert len(phase_ones) == 1 and tries == ["group_norm"] * (1 + api._REWRITES)
