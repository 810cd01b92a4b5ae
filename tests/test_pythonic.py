"""The Pythonic layer: opgen.rms_norm_grad / opgen.group_norm_backward and AclnnError."""
from __future__ import annotations

import numpy as np
import pytest

import opgen
from opgen.ops.group_norm_backward import reference as gn_ref
from opgen.ops.rms_norm_grad import reference as rms_ref

from aclnn_helpers import product


def _rms_inputs(rng, shape=(3, 4, 16), dtype=np.float32):
    x = rng.standard_normal(shape).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    gamma = rng.uniform(0.5, 1.5, shape[-1]).astype(np.float32)
    _, rstd = rms_ref.rms_norm(x, gamma)
    return dy, x, rstd.astype(np.float32), gamma


def test_rms_norm_grad_allocates_and_matches(rng):
    dy, x, rstd, gamma = _rms_inputs(rng)
    dx, dgamma = opgen.rms_norm_grad(dy, x, rstd, gamma)
    rdx, rdg = rms_ref.rms_norm_grad(dy, x, rstd, gamma)
    assert dx.dtype == np.float32 and dgamma.dtype == np.float32 and dx.shape == x.shape
    np.testing.assert_allclose(dx, rdx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dgamma, rdg, rtol=1e-4, atol=1e-4)


def test_given_outputs_are_written_in_place(rng):
    dy, x, rstd, gamma = _rms_inputs(rng)
    base = np.zeros((3, 4, 32), np.float32)
    dx_out = base[..., ::2]
    dx, _ = opgen.rms_norm_grad(dy, x, rstd, gamma, dx=dx_out)
    assert dx is dx_out and np.all(base[..., 1::2] == 0)
    np.testing.assert_allclose(dx_out, rms_ref.rms_norm_grad(dy, x, rstd, gamma)[0], rtol=1e-4, atol=1e-4)


def test_aclnn_error():
    with pytest.raises(opgen.AclnnError) as info:
        opgen.rms_norm_grad(np.ones((2, 16), np.float32), np.ones((2, 16), np.float32),
                            np.ones(3, np.float32), np.ones(16, np.float32))
    assert info.value.status == 561002 and "rstd" in info.value.message
    with pytest.raises(opgen.AclnnError) as info:
        opgen.rms_norm_grad(None, np.ones((2, 16), np.float32), np.ones(2, np.float32), np.ones(16, np.float32))
    assert info.value.status == 161001
    with product("AtlasTraining"), pytest.raises(opgen.AclnnError) as info:
        opgen.rms_norm_grad(*_rms_inputs(np.random.default_rng(0)))
    assert info.value.status == 161002


def test_settings(monkeypatch):
    monkeypatch.delenv("OPGEN_PRODUCT", raising=False)
    monkeypatch.delenv("OPGEN_TARGET", raising=False)
    assert opgen.get_product() == "Ascend950" and opgen.get_target() == "llvm"
    opgen.set_product("AtlasA2")
    try:
        assert opgen.get_product() == "AtlasA2"
    finally:
        opgen.config.reset()
    with pytest.raises(ValueError):
        opgen.set_product("Atlas9000")
    with pytest.raises(KeyError):
        opgen.set_target("no-such-target")


@pytest.mark.parametrize("environ_dict", [True, False], ids=["os.environ's dict", "os.environ.get"])
def test_context_follows_the_environment_and_the_settings(environ_dict, monkeypatch):
    """config.context() (what every aclnn call keys its plan on) sees each change: the
    environment (through os.environ's dict, or os.environ.get where that is not available),
    set_product/set_target, and a thread's using_target."""
    from opgen import config

    if not environ_dict:
        monkeypatch.setattr(config, "_ENV_BYTES", None)
    monkeypatch.delenv("OPGEN_PRODUCT", raising=False)
    monkeypatch.delenv("OPGEN_TARGET", raising=False)
    assert config.context() == ("Ascend950", "llvm")
    monkeypatch.setenv("OPGEN_PRODUCT", "AtlasA2")
    monkeypatch.setenv("OPGEN_TARGET", "opencl")
    assert config.context() == ("AtlasA2", "opencl")
    with config.using_target("ascend-emu"):
        assert config.context() == ("AtlasA2", "ascend-emu")
    opgen.set_product("AtlasA3")
    try:
        assert config.context() == ("AtlasA3", "opencl") == (opgen.get_product(), opgen.get_target())
    finally:
        config.reset()
    monkeypatch.setenv("OPGEN_PRODUCT", "Atlas9000")
    with pytest.raises(ValueError, match="Atlas9000"):
        config.context()


def _gn_inputs(rng, n=2, c=6, hw=(2, 3), group=3, dtype=np.float32):
    x = rng.standard_normal((n, c) + hw).astype(dtype)
    dy = rng.standard_normal((n, c) + hw).astype(dtype)
    gamma = rng.uniform(0.5, 1.5, c).astype(np.float32)
    _, mean, rstd = gn_ref.group_norm(x, gamma, np.zeros(c), group)
    return dy, x, mean.astype(np.float32), rstd.astype(np.float32), gamma


def test_group_norm_backward(rng):
    dy, x, mean, rstd, gamma = _gn_inputs(rng)
    outs = opgen.group_norm_backward(dy, x, mean, rstd, gamma, 3)
    for got, ref in zip(outs, gn_ref.group_norm_backward(dy, x, mean, rstd, gamma, 3)):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    gi, gg, gb = opgen.group_norm_backward(dy, x, mean, rstd, None, 3, output_mask=(False, True, False))
    assert gi is None and gb is None
    np.testing.assert_allclose(gg, gn_ref.group_norm_backward(dy, x, mean, rstd, None, 3)[1], rtol=1e-4, atol=1e-4)
    with pytest.raises(opgen.AclnnError) as info:
        opgen.group_norm_backward(dy, x, mean, rstd, gamma, 4)
    assert info.value.status == 161002


def test_an_optional_input_can_be_left_out(rng):
    """An optional input (Param.optional) defaults to None in the Python signature without
    the op declaring it: GroupNormBackward's gamma, which a required ``group`` follows, is
    left out by naming ``group`` (a null gamma: ones); ``group`` stays required."""
    dy, x, mean, rstd, _ = _gn_inputs(rng)
    outs = opgen.group_norm_backward(dy, x, mean, rstd, group=3)
    for got, ref in zip(outs, gn_ref.group_norm_backward(dy, x, mean, rstd, None, 3)):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    with pytest.raises(TypeError, match="group_norm_backward\\(\\) missing required argument: 'group'"):
        opgen.group_norm_backward(dy, x, mean, rstd)


def test_every_optional_input_defaults_to_none():
    """Every op's Pythonic signature: each optional input has the default None, the other
    inputs none at all (or the required marker, after an optional one)."""
    import inspect

    from opgen import api
    from opgen.apispec import INPUT, python_name

    checked = 0
    for name in api.FUNCTIONS:
        op = opgen.ops.get_op(name)
        parameters = inspect.signature(getattr(opgen, name)).parameters
        for param in api.positional(op):
            if param.role != INPUT:
                continue
            default = parameters[python_name(param)].default
            if param.optional:
                assert default is None, (name, param.name)
                checked += 1
            else:
                assert default in (inspect.Parameter.empty, api.REQUIRED), (name, param.name, default)
    assert checked >= 10   # BatchNorm's and LayerNorm's weights and statistics, GroupNorm's gamma and beta



@pytest.fixture
def torch_mod():
    return pytest.importorskip("torch")


def test_torch_tensors_zero_copy_bf16(torch_mod, rng):
    t = torch_mod
    dy, x, rstd, gamma = _rms_inputs(rng, (4, 32))
    tdy, tx = t.from_numpy(dy).to(t.bfloat16), t.from_numpy(x).to(t.bfloat16).requires_grad_(True)
    dx, dgamma = opgen.rms_norm_grad(tdy, tx, t.from_numpy(rstd), t.from_numpy(gamma))
    assert isinstance(dx, t.Tensor) and dx.dtype == t.bfloat16 and dgamma.dtype == t.float32
    rdx, rdg = rms_ref.rms_norm_grad(tdy.float().numpy(), tx.detach().float().numpy(), rstd, gamma)
    np.testing.assert_allclose(dx.float().numpy(), rdx, rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(dgamma.numpy(), rdg, rtol=1e-3, atol=1e-3)


def test_torch_transposed_output_in_place(torch_mod, rng):
    t = torch_mod
    dy, x, mean, rstd, gamma = _gn_inputs(rng, hw=(4,))
    grad_in = t.zeros(4, 6, 2).permute(2, 1, 0)          # (2, 6, 4), non-contiguous
    outs = opgen.group_norm_backward(t.from_numpy(dy), t.from_numpy(x).transpose(0, 1).contiguous().transpose(0, 1),
                                     t.from_numpy(mean), t.from_numpy(rstd), t.from_numpy(gamma), 3,
                                     grad_input=grad_in)
    assert outs[0] is grad_in
    ref = gn_ref.group_norm_backward(dy, x, mean, rstd, gamma, 3)
    np.testing.assert_allclose(grad_in.numpy(), ref[0], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(outs[1].numpy(), ref[1], rtol=1e-4, atol=1e-4)


def _group_norm_ref(t, x, gamma, beta, group, eps=1e-5):
    """y, mean, rstd of ATen's native_group_norm (float64), for opgen.group_norm's outputs."""
    n, c = x.shape[:2]
    y, mean, rstd = t.ops.aten.native_group_norm(x.double().contiguous(), gamma.double(), beta.double(), n, c,
                                                 x[0, 0].numel(), group, eps)
    return y, mean, rstd


def _assert_group_norm(t, outs, x, gamma, beta, group, stats_dtype, tol=1e-4):
    y, mean, rstd = outs
    assert y.dtype == x.dtype and y.shape == x.shape
    assert mean.dtype == rstd.dtype == stats_dtype and mean.shape == rstd.shape == (x.shape[0], group)
    for got, ref in zip(outs, _group_norm_ref(t, x, gamma, beta, group)):
        np.testing.assert_allclose(got.double().numpy(), ref.numpy(), rtol=tol, atol=tol)


def test_prepared_calls_follow_dtype_shape_strides_and_product(torch_mod):
    """A Python function's derived attributes and output allocations are cached per call
    signature (opgen.api._prepared): each change of dtype, shape, strides, library or
    product after a cached call still gets outputs of the right dtype and shape and
    correct values, and invalid calls still fail with their status every time."""
    t = torch_mod
    t.manual_seed(0)
    x, gamma, beta = t.randn(2, 6, 4), t.rand(6) + 0.5, t.randn(6)
    _assert_group_norm(t, opgen.group_norm(x, gamma, beta, 3), x, gamma, beta, 3, t.float32)
    _assert_group_norm(t, opgen.group_norm(x, gamma, beta, 3), x, gamma, beta, 3, t.float32)   # cached
    half = [v.half() for v in (x, gamma, beta)]
    _assert_group_norm(t, opgen.group_norm(*half, 3), *half, 3, t.float32, tol=2e-3)   # Ascend950: f32 stats
    with product("AtlasA2"):   # no float32-statistics row: statistics in self's dtype
        _assert_group_norm(t, opgen.group_norm(*half, 3), *half, 3, t.float16, tol=5e-3)
    other = t.randn(3, 6, 5)
    _assert_group_norm(t, opgen.group_norm(other, gamma, beta, 2), other, gamma, beta, 2, t.float32)
    strided = t.randn(4, 6, 2).transpose(0, 2)                       # (2, 6, 4), not contiguous
    _assert_group_norm(t, opgen.group_norm(strided, gamma, beta, 3), strided, gamma, beta, 3, t.float32)
    y, mean, rstd = opgen.group_norm(x.numpy(), gamma.numpy(), beta.numpy(), 3)   # numpy in, numpy out
    assert isinstance(y, np.ndarray) and mean.dtype == np.float32
    np.testing.assert_allclose(y, _group_norm_ref(t, x, gamma, beta, 3)[0].numpy(), rtol=1e-4, atol=1e-4)
    for _ in range(2):
        for bad, status in ((4, 161002), (True, 161002)):   # 6 % 4, and a bool for an int64: never cached
            with pytest.raises(opgen.AclnnError) as info:
                opgen.group_norm(x, gamma, beta, bad)
            assert info.value.status == status
        with pytest.raises(opgen.AclnnError) as info:   # a 1-d self: its derivation of N, C fails
            opgen.group_norm(t.randn(6), gamma, beta, 3)
        assert info.value.status == 161002


def test_prepared_calls_hold_no_tensor(torch_mod):
    """A cached preparation never keeps the caller's tensors alive (it makes outputs from
    shapes and dtypes only)."""
    import gc
    import weakref

    t = torch_mod
    x, gamma, beta = t.randn(2, 6, 4), t.ones(6), t.zeros(6)
    held = [weakref.ref(v) for v in (x, gamma, beta)]
    outs = opgen.group_norm(x, gamma, beta, 3)
    held += [weakref.ref(o) for o in outs]
    del x, gamma, beta, outs
    gc.collect()
    assert all(ref() is None for ref in held)


def test_outputs_are_made_on_the_inputs_device(torch_mod):
    """The outputs a call makes go on its first input's device (a CUDA input's on its GPU),
    and the device is part of the prepared call's key. Checked through the preparation with
    torch's meta device, where no kernel runs (CPU and meta differ only by device)."""
    from opgen import api
    from opgen.ops import get_op

    t = torch_mod
    op = get_op("group_norm")
    layout = api._layout(op)
    for device in ("cpu", "meta", "cpu"):
        x, gamma, beta = t.empty(2, 6, 4, device=device), t.empty(6, device=device), t.empty(6, device=device)
        values = (x, gamma, beta, 3, 1e-5)
        prepared = api._prepared(op, layout, values, (None, None, None))
        made = prepared.outputs((None, None, None))
        assert [o.device.type for o in made if o is not None] == [device] * 3, device


def test_a_call_on_empty_data_returns_zeroed_outputs(torch_mod):
    """aclnnBatchNormBackward writes nothing for an empty batch (B5, as CANN): the weight
    and bias gradients a call makes for it are zeros (a sum over nothing), for torch
    tensors as for numpy arrays, in the first call and in the written call after it. The
    allocator is first given back memory holding nan, so a torch.empty output would not
    come back zero by chance."""
    t = torch_mod
    x = t.randn(0, 3, 4, 4)
    weight, saved_mean, saved_invstd = t.rand(3) + 0.5, t.zeros(3), t.ones(3)
    for _ in range(2):
        for _ in range(16):
            t.full((3,), float("nan"))
        _, dweight, dbias = opgen.batch_norm_backward(x, x, weight, None, None, saved_mean, saved_invstd, True)
        assert t.equal(dweight, t.zeros(3)) and t.equal(dbias, t.zeros(3))
    numpy_out = opgen.batch_norm_backward(x.numpy(), x.numpy(), weight.numpy(), None, None, saved_mean.numpy(),
                                          saved_invstd.numpy(), True)
    assert [o.shape for o in numpy_out] == [(0, 3, 4, 4), (3,), (3,)] and not numpy_out[1].any()
