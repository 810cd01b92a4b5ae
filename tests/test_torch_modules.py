"""opgen.torch: the custom ops pass torch's opcheck; RMSNorm/GroupNorm/LayerNorm/BatchNorm2d are drop-ins for
torch.nn's (state_dict, outputs and gradients in f32 and bf16, gradcheck) whose forward and
backward really are opgen, also inside a torch.compile'd model with no graph break; GemmaRMSNorm
is one for transformers' GemmaRMSNorm (its formula, state_dict and constructor)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
ot = pytest.importorskip("opgen.torch")

import opgen  # noqa: E402
from opgen.ops import get_op  # noqa: E402

from tiers import tiered  # noqa: E402


@pytest.fixture
def opgen_calls(monkeypatch):
    """Counts the calls reaching opgen's Pythonic layer (what the custom ops call), by op."""
    counts = {"rms_norm": 0, "rms_norm_grad": 0, "group_norm": 0, "group_norm_backward": 0, "layer_norm": 0,
              "layer_norm_backward": 0, "batch_norm": 0, "batch_norm_backward": 0, "instance_norm": 0}
    real = opgen.api.call_op

    def counted(op, *a, **k):
        counts[op.name] = counts.get(op.name, 0) + 1
        return real(op, *a, **k)
    monkeypatch.setattr(opgen.api, "call_op", counted)
    return counts


def _pair(ours, theirs):
    with torch.no_grad():
        for p in ours.parameters():
            p.uniform_(0.5, 1.5)
    theirs.load_state_dict(ours.state_dict())
    return ours, theirs


def _grads(module, x, dy):
    x = x.detach().clone().requires_grad_(True)
    module.zero_grad()
    module(x).backward(dy)
    return [x.grad] + [p.grad for p in module.parameters()]


def test_custom_ops_pass_opcheck():
    torch.manual_seed(0)
    torch.library.opcheck(torch.ops.opgen.rms_norm_grad.default,
                          (torch.randn(3, 8), torch.randn(3, 8), torch.rand(3) + 0.5, torch.rand(8) + 0.5))
    torch.library.opcheck(torch.ops.opgen.rms_norm.default, (torch.randn(3, 8), torch.rand(8) + 0.5, 1e-6))
    torch.library.opcheck(torch.ops.opgen.gemma_rms_norm.default, (torch.randn(3, 8), torch.rand(8) - 0.5, 1e-6))
    torch.library.opcheck(torch.ops.opgen.group_norm.default, (torch.randn(2, 4, 3), torch.rand(4), None, 2, 1e-5))
    torch.library.opcheck(torch.ops.opgen.layer_norm.default, (torch.randn(3, 2, 8), [2, 8], torch.rand(2, 8) + 0.5,
                                                               torch.randn(2, 8), 1e-5))
    torch.library.opcheck(torch.ops.opgen.layer_norm.default, (torch.randn(3, 8).bfloat16(), [8], None, None, 1e-5))
    torch.library.opcheck(torch.ops.opgen.batch_norm.default, (torch.randn(3, 4, 5), torch.rand(4) + 0.5, torch.randn(4),
                                                               None, None, True, 0.0, 1e-5))
    torch.library.opcheck(torch.ops.opgen.batch_norm.default, (torch.randn(3, 4, 5), None, None, torch.randn(4),
                                                               torch.rand(4) + 0.5, False, 0.1, 1e-5))
    torch.library.opcheck(torch.ops.opgen.instance_norm.default, (torch.randn(2, 4, 3, 5), torch.rand(4) + 0.5,
                                                                  torch.randn(4), "NCHW", 1e-5))
    torch.library.opcheck(torch.ops.opgen.group_norm_backward.default,
                          (torch.randn(2, 4, 3), torch.randn(2, 4, 3), torch.randn(2, 2), torch.rand(2, 2) + 0.5,
                           torch.rand(4), 2, [True, False, True]))


def test_state_dicts_are_torch_nn_ones():
    assert ot.RMSNorm((6, 32)).state_dict().keys() == torch.nn.RMSNorm((6, 32)).state_dict().keys()
    assert not ot.RMSNorm(8, elementwise_affine=False).state_dict()
    assert ot.GroupNorm(4, 8).state_dict().keys() == torch.nn.GroupNorm(4, 8).state_dict().keys()
    ours = ot.GroupNorm(4, 8)
    ours.load_state_dict(torch.nn.GroupNorm(4, 8).state_dict())  # strict: same names and shapes
    assert isinstance(ours, torch.nn.GroupNorm) and isinstance(ot.RMSNorm(8), torch.nn.RMSNorm)


@pytest.mark.parametrize("shape", [(32,), (6, 32)])
def test_rms_norm_f32_matches_torch(shape, opgen_calls):
    torch.manual_seed(1)
    ours, theirs = _pair(ot.RMSNorm(shape), torch.nn.RMSNorm(shape))
    x, dy = torch.randn(4, 6, 32), torch.randn(4, 6, 32)
    torch.testing.assert_close(ours(x), theirs(x))
    for a, b in zip(_grads(ours, x, dy), _grads(theirs, x, dy)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert opgen_calls["rms_norm"] == 2 and opgen_calls["rms_norm_grad"] == 1   # ours(x), then in _grads


def test_rms_norm_without_weight_matches_torch():
    torch.manual_seed(7)
    ours, theirs = ot.RMSNorm(24, elementwise_affine=False), torch.nn.RMSNorm(24, elementwise_affine=False)
    x, dy = torch.randn(5, 24), torch.randn(5, 24)
    torch.testing.assert_close(_grads(ours, x, dy)[0], _grads(theirs, x, dy)[0], rtol=1e-4, atol=1e-5)


def _gemma_composite(x, weight, eps: float, ndim: int):
    """transformers' GemmaRMSNorm.forward as written there (float32 throughout, the offset on
    the widened weight, one rounding to x's dtype), over the last ``ndim`` dims."""
    xf = x.float()
    out = xf * torch.rsqrt(xf.pow(2).mean(tuple(range(-ndim, 0)), keepdim=True) + eps)
    return (out * (1.0 + weight.float())).type_as(x)


_GEMMA_CASES = [((32,), torch.float32, torch.float32, "gemma_rms_norm"),
                ((6, 32), torch.float32, torch.float32, "gemma_rms_norm"),
                ((32,), torch.bfloat16, torch.float32, "rms_norm"),       # no bf16/f32 row: aclnnRmsNorm on 1 + w
                ((32,), torch.bfloat16, torch.bfloat16, "gemma_rms_norm")]


@pytest.mark.parametrize("shape,x_dtype,w_dtype,forward_op", tiered(
    _GEMMA_CASES, _GEMMA_CASES[:3], ids=[f"{s}-{str(x)[6:]}-{str(w)[6:]}" for s, x, w, _ in _GEMMA_CASES]))
def test_gemma_rms_norm_matches_transformers_formula(shape, x_dtype, w_dtype, forward_op, opgen_calls):
    """Outputs and both gradients equal transformers' composite's (f32: the op tolerances;
    bf16: one rounding apart); the forward is the Gemma op where the weight has x's dtype,
    the backward aclnnRmsNormGrad with gamma' = 1 + weight."""
    torch.manual_seed(8)
    ours = ot.GemmaRMSNorm(shape, eps=1e-6, dtype=w_dtype)
    with torch.no_grad():
        ours.weight.uniform_(-0.5, 0.5)
    weight = ours.weight.detach().clone().requires_grad_(True)
    x, dy = torch.randn(4, 6, 32).to(x_dtype), torch.randn(4, 6, 32).to(x_dtype)
    xa, xb = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    y, want = ours(xa), _gemma_composite(xb, weight, 1e-6, len(shape))
    y.backward(dy)
    want.backward(dy)
    half = dict(rtol=1.6e-2, atol=1e-2)
    tol = dict(rtol=1e-4, atol=1e-5) if x_dtype == torch.float32 else half
    assert y.dtype == x_dtype and ours.weight.grad.dtype == w_dtype
    torch.testing.assert_close(y, want, **tol)
    torch.testing.assert_close(xa.grad, xb.grad, **tol)
    torch.testing.assert_close(ours.weight.grad, weight.grad, **(half if w_dtype == torch.bfloat16 else
                                                                dict(rtol=1e-4, atol=1e-4)))
    assert opgen_calls[forward_op] == 1 and opgen_calls["rms_norm_grad"] == 1


def test_gemma_rms_norm_is_transformers_drop_in():
    """transformers' GemmaRMSNorm's constructor, state_dict, initial weight (zeros) and repr."""
    import inspect

    modeling = pytest.importorskip("transformers.models.gemma.modeling_gemma")
    theirs, ours = modeling.GemmaRMSNorm(8), ot.GemmaRMSNorm(8)
    assert [(p.name, p.default) for p in inspect.signature(ot.GemmaRMSNorm).parameters.values()][:2] == \
        [(p.name, p.default) for p in inspect.signature(modeling.GemmaRMSNorm).parameters.values()][:2]
    ours.load_state_dict(theirs.state_dict())       # strict: same names and shapes
    assert not ours.weight.any() and ours.extra_repr() == theirs.extra_repr() and ours.eps == theirs.eps


@pytest.mark.parametrize("affine", [True, False])
def test_group_norm_f32_matches_torch(affine, opgen_calls):
    torch.manual_seed(2)
    ours, theirs = _pair(ot.GroupNorm(4, 12, affine=affine), torch.nn.GroupNorm(4, 12, affine=affine))
    x, dy = torch.randn(3, 12, 5, 7) * 2 + 0.5, torch.randn(3, 12, 5, 7)
    torch.testing.assert_close(ours(x), theirs(x), rtol=1e-5, atol=1e-5)
    for a, b in zip(_grads(ours, x, dy), _grads(theirs, x, dy)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert opgen_calls["group_norm"] == 2 and opgen_calls["group_norm_backward"] == 1   # ours(x), then in _grads


def test_group_norm_input_without_grad_asks_only_parameter_grads():
    torch.manual_seed(3)
    ours, theirs = _pair(ot.GroupNorm(2, 4), torch.nn.GroupNorm(2, 4))
    x, dy = torch.randn(2, 4, 9), torch.randn(2, 4, 9)
    ours(x).backward(dy)
    theirs(x).backward(dy)
    torch.testing.assert_close(ours.weight.grad, theirs.weight.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(ours.bias.grad, theirs.bias.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", ["rms", "group"])
def test_bf16_within_tolerance_of_float64(kind):
    """bf16 modules: opgen's gradients are as close to the float64 truth (torch.nn on float64
    copies of the same bf16 values) as bf16 outputs can be, and within bf16's tolerance of
    torch.nn's own bf16 module (measured: equal for RmsNorm, 0.6% of the scale for GroupNorm,
    whose torch bf16 gradients are the farther from the truth)."""
    torch.manual_seed(4)
    if kind == "rms":
        make, x = (lambda cls, dt: cls(64, eps=1e-6, dtype=dt)), torch.randn(8, 64)
        ours = ot.RMSNorm(64, eps=1e-6, dtype=torch.bfloat16)
    else:
        make, x = (lambda cls, dt: cls(4, 16, dtype=dt)), torch.randn(2, 16, 6, 6)
        ours = ot.GroupNorm(4, 16, dtype=torch.bfloat16)
    reference_class = getattr(torch.nn, type(ours).__name__)
    exact, theirs = make(reference_class, torch.float64), make(reference_class, torch.bfloat16)
    with torch.no_grad():
        for p in ours.parameters():
            p.uniform_(0.5, 1.5)
    exact.load_state_dict({k: v.double() for k, v in ours.state_dict().items()})
    theirs.load_state_dict(ours.state_dict())
    x, dy = x.bfloat16(), torch.randn(x.shape).bfloat16()
    got, torch_bf16 = _grads(ours, x, dy), _grads(theirs, x, dy)
    want = _grads(exact, x.double(), dy.double())
    for a, t, b in zip(got, torch_bf16, want):
        assert a.dtype == torch.bfloat16
        scale = b.abs().max().item()
        torch.testing.assert_close(a.double(), b, rtol=2 ** -7, atol=2e-2 * scale)
        torch.testing.assert_close(a.double(), t.double(), rtol=2 ** -6, atol=2 ** -6 * scale)


@pytest.mark.parametrize("kind", ["rms", "group"])
def test_gradcheck_through_a_float64_wrapper(kind):
    """opgen has no float64 kernels: the wrapper casts to float32 around the module, and
    gradcheck's finite differences (eps 1e-2 keeps f32 rounding far below them) check the
    opgen backward against the forward."""
    torch.manual_seed(5)
    module = ot.RMSNorm(6) if kind == "rms" else ot.GroupNorm(2, 4)
    x = torch.randn((3, 6) if kind == "rms" else (2, 4, 3), dtype=torch.float64, requires_grad=True)
    params = [torch.rand(p.shape, dtype=torch.float64).add(0.5).requires_grad_() for p in module.parameters()]

    def wrapped(x, *ps):
        overrides = {name: p.float() for (name, _), p in zip(module.named_parameters(), ps)}
        return torch.func.functional_call(module, overrides, (x.float(),)).double()
    assert torch.autograd.gradcheck(wrapped, (x, *params), eps=1e-2, atol=2e-3, rtol=2e-3)


def test_compiled_model_has_no_graph_break_and_runs_opgen(opgen_calls):
    """One small compile (slow on 2 cores): fullgraph=True refuses any graph break; the
    backward still reaches opgen through the custom ops; gradients equal eager ones."""
    torch.manual_seed(6)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bn, self.gn = ot.BatchNorm2d(8), ot.GroupNorm(4, 8)
            self.rms, self.ln = ot.RMSNorm(16), ot.LayerNorm(16)
            self.inorm = ot.InstanceNorm2d(8, affine=True)
            self.register_buffer("w", torch.randn(2, 8, 16))

        def forward(self, x):
            return (self.ln(self.rms(self.inorm(self.gn(self.bn(x))).reshape(2, 8, 16))) * self.w).sum()

    model, x = Model(), torch.randn(2, 8, 4, 4, requires_grad=True)
    torch.compile(model, fullgraph=True)(x).backward()
    compiled = [x.grad.clone()] + [p.grad.clone() for p in model.parameters()]
    assert opgen_calls == {"rms_norm": 1, "rms_norm_grad": 1, "group_norm": 1, "group_norm_backward": 2,
                           "layer_norm": 1, "layer_norm_backward": 1, "batch_norm": 1, "batch_norm_backward": 1,
                           "instance_norm": 1}
    assert model.bn.num_batches_tracked.item() == 1 and model.bn.running_mean.abs().sum() > 0
    x.grad = None
    model.zero_grad()
    model(x).backward()
    for a, b in zip(compiled, [x.grad] + [p.grad for p in model.parameters()]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_target_switch_is_put_back(monkeypatch):
    """A call whose tensors need another target switches it for the call only."""
    from opgen import config

    monkeypatch.setattr(ot, "_target_for", lambda device: "llvm")
    config.reset()
    monkeypatch.setenv("OPGEN_TARGET", "ascend-emu")
    seen = []
    with ot._on(torch.device("cpu")):
        seen.append(config.get_target())
    assert seen == ["llvm"] and config._state["target"] is None and config.get_target() == "ascend-emu"


_TOL = {torch.float32: (1e-5, 1e-5), torch.float16: (2 ** -10, 2 ** -10), torch.bfloat16: (2 ** -7, 2 ** -7)}
_FORWARD_CASES = [("rms", (1, 1), 1), ("rms", (3, 7), 7), ("rms", (2, 5, 33), 33), ("rms", (4, 941), 941),
                  ("rms", (2, 12290), 12290), ("group", (1, 2), 1), ("group", (3, 6, 7), 3), ("group", (2, 8, 5, 7), 4),
                  ("group", (2, 12, 33, 3), 6), ("layer", (1, 1), 1), ("layer", (3, 7), 7), ("layer", (2, 5, 33), 33),
                  ("layer", (4, 941), 941), ("layer", (2, 12290), 12290)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("kind,shape,size", _FORWARD_CASES, ids=[f"{k}-{s}" for k, s, _ in _FORWARD_CASES])
def test_forward_outputs_match_torch_modules(kind, shape, size, dtype, opgen_calls):
    """The forward kernel's output against torch.nn's module in every dtype, over tiny,
    ragged and long rows/groups (``size``: RMSNorm's normalized length, GroupNorm's group
    count): within one rounding of the output dtype (opgen rounds once from float32; torch's
    half modules round intermediate results too)."""
    torch.manual_seed(8)
    if kind == "rms":
        ours, theirs = _pair(ot.RMSNorm(size, dtype=dtype), torch.nn.RMSNorm(size, dtype=dtype))
    elif kind == "layer":
        ours, theirs = _pair(ot.LayerNorm(size, dtype=dtype), torch.nn.LayerNorm(size, dtype=dtype))
    else:
        ours, theirs = _pair(ot.GroupNorm(size, shape[1], dtype=dtype), torch.nn.GroupNorm(size, shape[1], dtype=dtype))
    x = (torch.randn(shape) * 2 + 0.5).to(dtype)
    got, want = ours(x), theirs(x)
    assert got.dtype == want.dtype == dtype and got.shape == want.shape
    rtol, atol = _TOL[dtype]
    scale = want.double().abs().max().item()
    torch.testing.assert_close(got.double(), want.double(), rtol=rtol, atol=atol * max(scale, 1.0))
    assert opgen_calls[{"rms": "rms_norm", "group": "group_norm", "layer": "layer_norm"}[kind]] == 1


def test_group_norm_channels_last_matches_torch():
    """A channels_last input (the kernel reads NCHW: the custom op makes it contiguous first)."""
    torch.manual_seed(9)
    ours, theirs = _pair(ot.GroupNorm(4, 16), torch.nn.GroupNorm(4, 16))
    x = torch.randn(2, 16, 5, 6).to(memory_format=torch.channels_last)
    dy = torch.randn(2, 16, 5, 6)
    torch.testing.assert_close(ours(x), theirs(x), rtol=1e-5, atol=1e-5)
    for a, b in zip(_grads(ours, x, dy), _grads(theirs, x, dy)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_statistics_reach_the_backward_without_a_cast(monkeypatch):
    """The backward ops receive the forward ops' statistics objects themselves (no copy, no
    cast): the tensors the forward ops (opgen.torch.calls.rms_norm / group_norm, ...) returned."""
    seen = {}
    for name in ("rms_norm", "group_norm", "rms_norm_grad", "group_norm_backward", "layer_norm", "layer_norm_backward",
                 "batch_norm", "batch_norm_backward"):
        real = getattr(ot.calls, name)

        def spy(*args, _real=real, _name=name):
            out = _real(*args)
            seen[_name] = (args, out)
            return out
        monkeypatch.setattr(ot.calls, name, spy)
    x = torch.randn(2, 8, 6, requires_grad=True)
    (ot.RMSNorm(6)(x).sum() + ot.GroupNorm(2, 8)(x).sum() + ot.LayerNorm(6)(x).sum()
     + ot.BatchNorm2d(8)(x[..., None]).sum()).backward()
    assert seen["rms_norm_grad"][0][2] is seen["rms_norm"][1][1]                  # rstd
    assert seen["group_norm_backward"][0][2] is seen["group_norm"][1][1]          # mean
    assert seen["group_norm_backward"][0][3] is seen["group_norm"][1][2]          # rstd
    assert seen["layer_norm_backward"][0][3] is seen["layer_norm"][1][1]          # mean
    assert seen["layer_norm_backward"][0][4] is seen["layer_norm"][1][2]          # rstd
    assert seen["batch_norm_backward"][0][5] is seen["batch_norm"][1][1]          # saveMean
    assert seen["batch_norm_backward"][0][6] is seen["batch_norm"][1][2]          # saveInvstd
    assert seen["batch_norm"][1][1].dtype == torch.float32


_BN_CASES = [((2, 1, 1, 1), False), ((3, 7, 1, 1), False), ((2, 3, 5, 7), False), ((2, 3, 5, 7), True),
             ((1, 2, 1, 12290), False), ((4, 5, 33, 31), True)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape,channels_last", _BN_CASES, ids=[f"{s}{'-nhwc' if c else ''}" for s, c in _BN_CASES])
def test_batch_norm2d_matches_torch(shape, channels_last, dtype, opgen_calls):
    """Two training steps then eval: outputs, gradients and running statistics against
    torch.nn.BatchNorm2d in the same dtype, over tiny, ragged and long channels, NCHW and
    channels_last inputs (within one rounding of the dtype, scaled by the largest value)."""
    torch.manual_seed(10)
    ours, theirs = _pair(ot.BatchNorm2d(shape[1], dtype=dtype), torch.nn.BatchNorm2d(shape[1], dtype=dtype))
    rtol, atol = _TOL[dtype]
    if dtype != torch.float32:
        rtol, atol = 2 * rtol, 4 * atol     # gradients: sums of the channel, rounded once by opgen, more by torch
    for mode in ("train", "train", "eval"):
        getattr(ours, mode)()
        getattr(theirs, mode)()
        x = (torch.randn(shape) * 2 + 0.5).to(dtype)
        if channels_last:
            x = x.to(memory_format=torch.channels_last)
        dy = torch.randn(shape).to(dtype)
        for a, b in zip(_grads_and_output(ours, x, dy), _grads_and_output(theirs, x, dy)):
            scale = max(b.double().abs().max().item(), 1.0)
            torch.testing.assert_close(a.double(), b.double(), rtol=rtol, atol=atol * scale)
        for a, b in zip(ours.buffers(), theirs.buffers()):
            torch.testing.assert_close(a, b, rtol=rtol, atol=atol)
    assert opgen_calls["batch_norm"] == 3 and opgen_calls["batch_norm_backward"] == 3


@pytest.mark.parametrize("kwargs", [{"affine": False}, {"track_running_stats": False}, {"momentum": None}],
                         ids=["no-affine", "no-running-stats", "cumulative"])
def test_batch_norm2d_options_match_torch(kwargs, opgen_calls):
    torch.manual_seed(11)
    ours, theirs = _pair(ot.BatchNorm2d(5, **kwargs), torch.nn.BatchNorm2d(5, **kwargs))
    for mode in ("train", "train", "train", "eval"):
        getattr(ours, mode)()
        getattr(theirs, mode)()
        x, dy = torch.randn(3, 5, 4, 6) * 2 + 0.5, torch.randn(3, 5, 4, 6)
        for a, b in zip(_grads_and_output(ours, x, dy), _grads_and_output(theirs, x, dy)):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
        for a, b in zip(ours.buffers(), theirs.buffers()):
            torch.testing.assert_close(a, b)
    assert opgen_calls["batch_norm"] == 4


_BN_RANKS = [("BatchNorm1d", (5, 3), None), ("BatchNorm1d", (4, 7, 33), None), ("BatchNorm1d", (6, 2, 1), None),
             ("BatchNorm3d", (2, 3, 4, 5, 6), None), ("BatchNorm3d", (2, 5, 3, 1, 7), torch.channels_last_3d)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name,shape,memory_format", _BN_RANKS, ids=[f"{n}{s}{'-cl' if m else ''}" for n, s, m in _BN_RANKS])
def test_batch_norm1d_and_3d_match_torch(name, shape, memory_format, dtype, opgen_calls):
    """BatchNorm1d ((N, C) and (N, C, L)) and BatchNorm3d (NCDHW, channels_last_3d): the
    BatchNorm2d implementation at ranks 2, 3 and 5. Two training steps then eval against
    torch.nn's class: outputs, gradients, running statistics."""
    torch.manual_seed(12)
    ours, theirs = _pair(getattr(ot, name)(shape[1], dtype=dtype), getattr(torch.nn, name)(shape[1], dtype=dtype))
    rtol, atol = _TOL[dtype]
    if dtype != torch.float32:
        rtol, atol = 2 * rtol, 4 * atol
    for mode in ("train", "train", "eval"):
        getattr(ours, mode)()
        getattr(theirs, mode)()
        x = (torch.randn(shape) * 2 + 0.5).to(dtype)
        if memory_format is not None:
            x = x.to(memory_format=memory_format)
        dy = torch.randn(shape).to(dtype)
        for a, b in zip(_grads_and_output(ours, x, dy), _grads_and_output(theirs, x, dy)):
            scale = max(b.double().abs().max().item(), 1.0)
            torch.testing.assert_close(a.double(), b.double(), rtol=rtol, atol=atol * scale)
        for a, b in zip(ours.buffers(), theirs.buffers()):
            torch.testing.assert_close(a, b, rtol=rtol, atol=atol)
    assert opgen_calls["batch_norm"] == 3 and opgen_calls["batch_norm_backward"] == 3


def test_batch_norm2d_one_value_per_channel_is_refused_like_torch():
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        ot.BatchNorm2d(3)(torch.randn(1, 3, 1, 1))


def _grads_and_output(module, x, dy):
    x = x.detach().clone().requires_grad_(True)
    module.zero_grad()
    y = module(x)
    y.backward(dy)
    return [y, x.grad] + [p.grad for p in module.parameters()]


def test_eager_module_calls_skip_the_dispatcher_traced_ones_do_not(monkeypatch):
    """An eager module runs the custom op's implementation directly (no dispatch cost); a
    call under a dispatch mode (what tracing installs) goes through torch.ops.opgen, so a
    graph records it."""
    from torch.utils._python_dispatch import TorchDispatchMode

    dispatched = []
    real = torch.ops.opgen.group_norm

    def spy(*args):
        dispatched.append(args)
        return real(*args)
    # Only the modules' way in is spied on: the custom op's own autograd and redispatch read
    # torch.ops.opgen.group_norm, which must stay the real OpOverloadPacket.
    monkeypatch.setattr(ot.calls, "group_norm", ot._eager_or_traced(get_op("group_norm"), spy))
    x = torch.randn(2, 8, 6)
    module = ot.GroupNorm(2, 8)
    eager = module(x)
    assert not dispatched

    class Recording(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))
    with Recording():
        traced = module(x)
    assert len(dispatched) == 1
    torch.testing.assert_close(traced, eager, rtol=0, atol=0)


def test_benchmark_node_time_is_the_modules_node_inside_the_call(opgen_calls):
    """benchmarks/torch_forward.NodeTime (docs/torch.md's "its node" backward column): the time
    the engine spends in the module's node, which runs opgen's backward, is positive and
    within the whole call's time, and measure_ms(n) sums n calls."""
    import importlib.util
    import time
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "torch_forward.py"
    spec = importlib.util.spec_from_file_location("torch_forward_under_test", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    x, dy = torch.randn(2, 8, 4, 4, requires_grad=True), torch.randn(2, 8, 4, 4)
    y = ot.GroupNorm(4, 8)(x)
    calls = []
    timed = bench.NodeTime(lambda: calls.append(torch.autograd.grad(y, [x], dy, retain_graph=True)), y.grad_fn)
    start = time.perf_counter()
    node = timed.measure_ms()
    whole = (time.perf_counter() - start) * 1e3
    assert 0 < node <= whole and len(calls) == 1 and opgen_calls["group_norm_backward"] == 1
    assert timed.measure_ms(3) > 0 and len(calls) == 4 and opgen_calls["group_norm_backward"] == 4


_EMPTY_CASES = [("batch", (0, 3, 4, 4)), ("batch", (2, 3, 0, 4)), ("group", (0, 4, 4, 4)), ("group", (2, 4, 0, 4)),
                ("layer", (0, 8)), ("layer", (3, 0, 8)), ("rms", (0, 8)), ("rms", (3, 0, 8))]


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("kind,shape", _EMPTY_CASES, ids=[f"{k}-{s}" for k, s in _EMPTY_CASES])
def test_empty_inputs_match_torch_modules(kind, shape, training):
    """An empty batch or an empty spatial axis, in training and eval: the output's shape,
    the gradients (a weight gradient is a sum over nothing: zero, or nan where torch's is
    nan) and the running statistics (an empty batch leaves them) as torch.nn's modules.
    BatchNorm's aclnn calls write nothing for an empty input (as CANN's): before, the module
    returned the allocator's leftover bytes as weight gradients and mixed them into its
    running statistics."""
    torch.manual_seed(12)
    make = {"batch": (lambda m: m.BatchNorm2d(3)), "group": (lambda m: m.GroupNorm(2, 4)),
            "layer": (lambda m: m.LayerNorm(8)), "rms": (lambda m: m.RMSNorm(8))}[kind]
    ours, theirs = _pair(make(ot), make(torch.nn))
    ours.train(training)
    theirs.train(training)
    x, dy = torch.randn(shape), torch.randn(shape)
    for _ in range(16):   # nan in the memory the allocator hands out next (BatchNorm2d(3)'s outputs)
        torch.full((3,), float("nan"))
    for a, b in zip(_grads_and_output(ours, x, dy), _grads_and_output(theirs, x, dy)):
        torch.testing.assert_close(a, b, equal_nan=True)
    for a, b in zip(ours.buffers(), theirs.buffers()):
        torch.testing.assert_close(a, b)


# --- torch's conventions (issue 39): defaults, and mistakes raise what torch.nn's module raises ----------


@pytest.mark.parametrize("name", ["RMSNorm", "LayerNorm", "GroupNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d",
                                  "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"])
def test_constructor_defaults_are_torch_nn_ones(name):
    """Same parameters and defaults as torch.nn's class (RMSNorm's eps=None: the input dtype's
    machine epsilon), so a model written for torch.nn gets the same layer."""
    import inspect

    ours, theirs = inspect.signature(getattr(ot, name)), inspect.signature(getattr(torch.nn, name))
    assert [(p.name, p.default) for p in ours.parameters.values()] == \
        [(p.name, p.default) for p in theirs.parameters.values()]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_rms_norm_default_eps_is_the_dtypes_machine_epsilon(dtype):
    torch.manual_seed(13)
    ours, theirs = _pair(ot.RMSNorm(16, dtype=dtype), torch.nn.RMSNorm(16, dtype=dtype))
    assert ours.eps is None and theirs.eps is None
    x = torch.randn(4, 16).to(dtype) * 1e-4       # small values: the eps shows
    rtol, atol = _TOL[dtype]
    torch.testing.assert_close(ours(x).double(), theirs(x).double(), rtol=rtol, atol=atol)


_MISTAKES = [("RMSNorm", (8,), {}, (2, 7)), ("RMSNorm", ((6, 32),), {}, (2, 5, 32)), ("RMSNorm", ((6, 32),), {}, (32,)),
             ("LayerNorm", (8,), {}, (2, 7)), ("LayerNorm", ((6, 32),), {}, (32,)),
             ("GroupNorm", (2, 4), {}, (2, 5, 3)), ("GroupNorm", (2, 4), {}, (2, 6, 3)), ("GroupNorm", (2, 4), {}, (4,)),
             ("GroupNormSwish", (2, 4), {}, (2, 6, 3)),
             ("BatchNorm2d", (4,), {}, (2, 6, 3, 3)), ("BatchNorm2d", (4,), {"track_running_stats": False}, (2, 6, 3, 3)),
             ("BatchNorm2d", (4,), {}, (2, 4, 3)), ("BatchNorm1d", (4,), {}, (2, 4, 3, 3)), ("BatchNorm1d", (4,), {}, (2, 6)),
             ("BatchNorm3d", (4,), {}, (2, 4, 3, 3)),
             ("RMSNorm", (8,), {"device": "meta"}, (2, 8)), ("LayerNorm", (8,), {"device": "meta"}, (2, 8)),
             ("GroupNorm", (2, 4), {"device": "meta"}, (2, 4, 3)), ("BatchNorm2d", (4,), {"device": "meta"}, (2, 4, 3, 3)),
             ("InstanceNorm2d", (4,), {"affine": True}, (2, 6, 3, 3)), ("InstanceNorm1d", (4,), {}, (2, 4, 3, 3)),
             ("InstanceNorm2d", (4,), {}, (2, 4, 1, 1)),
             ("InstanceNorm2d", (4,), {"track_running_stats": True}, (2, 6, 3, 3)),
             ("InstanceNorm3d", (4,), {}, (2, 4, 3)),
             ("InstanceNorm2d", (4,), {"device": "meta", "affine": True}, (2, 4, 3, 3))]


@pytest.mark.parametrize("name,args,kwargs,shape", _MISTAKES,
                         ids=[f"{n}{a}{''.join(k)}-{s}" for n, a, k, s in _MISTAKES])
def test_mistakes_raise_what_torch_nn_raises(name, args, kwargs, shape):
    """A wrong size, rank or device: torch.nn's module and opgen's raise the same exception
    class with the same message (not an AclnnError with an aclnn status code).
    GroupNormSwish is compared with torch.nn.GroupNorm, the norm it starts with."""
    x = torch.randn(shape)
    raised = []
    for module in (getattr(torch.nn, name.replace("Swish", "")), getattr(ot, name)):
        with pytest.raises(Exception) as caught:
            module(*args, **kwargs)(x)
        raised.append((type(caught.value), str(caught.value)))
    assert raised[1] == raised[0]


@pytest.mark.parametrize("name,args,shape", [("RMSNorm", (8,), (2, 8)), ("LayerNorm", (8,), (2, 8)),
                                             ("GroupNorm", (2, 4), (2, 4, 3)), ("BatchNorm2d", (4,), (2, 4, 3, 3)),
                                             ("GroupNormSwish", (2, 4), (2, 4, 3)),
                                             ("InstanceNorm2d", (4,), (2, 4, 3, 3))])
def test_float64_and_integers_are_refused_as_torch_refuses_a_dtype(name, args, shape):
    """opgen has no float64 kernels: a float64 module refuses its input the way torch refuses
    a dtype it has no kernel for (NotImplementedError, '"<kernel>" not implemented for
    'Double''; torch's own for RMSNorm on int32 is checked to have that form)."""
    with pytest.raises(NotImplementedError, match=r"^\"rms_norm\" not implemented for 'Int'$"):
        torch.nn.RMSNorm(8)(torch.ones(2, 8, dtype=torch.int32))
    with pytest.raises(NotImplementedError, match=r"^\"opgen [a-z_]+\" not implemented for 'Double'"):
        getattr(ot, name)(*args, dtype=torch.float64)(torch.randn(shape, dtype=torch.float64))
    with pytest.raises(NotImplementedError, match=r"^\"opgen [a-z_]+\" not implemented for 'Int'"):
        getattr(ot, name)(*args)(torch.ones(shape, dtype=torch.int32))


# --- InstanceNorm1d/2d/3d: aclnnInstanceNorm forward, aclnnGroupNormBackward (G = C) backward -----------

_IN_CASES = [("InstanceNorm2d", (2, 7, 5, 3), dict(affine=True, track_running_stats=True)),
             ("InstanceNorm1d", (3, 8, 33), {}), ("InstanceNorm3d", (2, 4, 3, 5, 2), dict(affine=True)),
             ("InstanceNorm1d", (7, 9), dict(affine=True, track_running_stats=True)),    # unbatched (C, L)
             ("InstanceNorm2d", (3, 2, 1, 3), dict(affine=True)), ("InstanceNorm2d", (1, 3, 941, 1), {}),
             ("InstanceNorm3d", (2, 3, 2, 3, 2), dict(track_running_stats=True, momentum=None)),
             ("InstanceNorm2d", (2, 5, 4, 6), dict(affine=True, bias=False))]
_IN_DTYPES = [torch.float32, torch.float16, torch.bfloat16]
_IN_PARAMS = [(name, shape, kwargs, dtype) for name, shape, kwargs in _IN_CASES for dtype in _IN_DTYPES]
_IN_IDS = [f"{n}{s}{''.join(k)}-{str(d)[6:]}" for n, s, k, d in _IN_PARAMS]
_IN_DEFAULT = {_IN_IDS[0], _IN_IDS[1], _IN_IDS[3 * 3], _IN_IDS[3 * 2 + 1]}   # f32 and f16 representatives


@pytest.mark.parametrize("name,shape,kwargs,dtype", tiered(_IN_PARAMS, [i in _IN_DEFAULT for i in _IN_IDS], _IN_IDS))
def test_instance_norm_matches_torch(name, shape, kwargs, dtype, opgen_calls):
    """Two training steps then eval against torch.nn's class run in float64 on the same values:
    outputs, gradients and running statistics, over tiny (H*W = 3), ragged and long spatial
    sizes, unbatched input, every option. (H*W = 2 is left out: its dx is 0 but for eps's
    share, so every float32 implementation returns rounding there; torch.nn's own float32
    module is off by 10% of its largest element.) The half dtypes within two roundings of the dtype
    (scaled by the largest value): the kernel's statistics are the dtype's (aclnnInstanceNorm's
    outputs), float32 for bfloat16 (its float32 kernel)."""
    torch.manual_seed(14)
    channels = shape[0] if len(shape) == {"InstanceNorm1d": 2, "InstanceNorm2d": 3}.get(name, 4) else shape[1]
    ours = getattr(ot, name)(channels, dtype=dtype, **kwargs)
    theirs = getattr(torch.nn, name)(channels, dtype=torch.float64, **kwargs)
    with torch.no_grad():
        for p in ours.parameters():
            p.uniform_(0.5, 1.5)
    theirs.load_state_dict({k: v.double() if v.is_floating_point() else v for k, v in ours.state_dict().items()})
    rtol, atol = (1e-5, 1e-5) if dtype == torch.float32 else (2 * _TOL[dtype][0], 4 * _TOL[dtype][1])
    for mode in ("train", "train", "eval"):
        getattr(ours, mode)()
        getattr(theirs, mode)()
        x = (torch.randn(shape) * 2 + 0.5).to(dtype)
        dy = torch.randn(shape).to(dtype)
        for a, b in zip(_grads_and_output(ours, x, dy), _grads_and_output(theirs, x.double(), dy.double())):
            assert a.dtype == dtype
            scale = max(b.abs().max().item(), 1.0)
            torch.testing.assert_close(a.double(), b, rtol=rtol, atol=atol * scale)
        for a, b in zip(ours.buffers(), theirs.buffers()):
            torch.testing.assert_close(a.to(b.dtype), b, rtol=rtol, atol=atol)
    running = kwargs.get("track_running_stats", False)
    steps = 2 if running else 3         # eval with running statistics is BatchNorm's eval
    assert opgen_calls["instance_norm"] == steps and opgen_calls["group_norm_backward"] == steps
    assert opgen_calls["batch_norm"] == (1 if running else 0)


@pytest.mark.parametrize("name", ["AtlasInference", "AtlasA2"])
def test_instance_norm_runs_under_a_product_without_one_of_its_ops(name, opgen_calls):
    """aclnnInstanceNorm is offered on Atlas inference alone, aclnnGroupNormBackward everywhere
    but there: each custom op runs under the first product offering it when the current one
    does not (the default product, Ascend 950, lacks the forward; these two each lack one)."""
    torch.manual_seed(15)
    ours, theirs = _pair(ot.InstanceNorm2d(6, affine=True), torch.nn.InstanceNorm2d(6, affine=True))
    x, dy = torch.randn(2, 6, 4, 5) * 2 + 0.5, torch.randn(2, 6, 4, 5)
    with opgen.config.using_product(name):
        got = _grads_and_output(ours, x, dy)
    for a, b in zip(got, _grads_and_output(theirs, x, dy)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert opgen_calls["instance_norm"] == opgen_calls["group_norm_backward"] == 1
