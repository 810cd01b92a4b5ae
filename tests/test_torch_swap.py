"""opgen.torch.apply and precompile (issue 39): norms swapped by what they compute, never by
class alone; everything swapped or reported; the layers' own tensors kept; GroupNorm + SiLU
fused only where the SiLU is that norm's alone; after torch.compile and model.to(dtype);
the first-use log line; and one swap-and-step test per real model family (transformers,
diffusers: the ``models`` extra) against the unswapped copy."""
from __future__ import annotations

import copy
import logging

import pytest

torch = pytest.importorskip("torch")
ot = pytest.importorskip("opgen.torch")

from torch import nn  # noqa: E402

import opgen  # noqa: E402
from opgen import bench, model_families  # noqa: E402
from opgen.ops import get_op  # noqa: E402
from opgen.torch_swap import _looks_like_norm  # noqa: E402


@pytest.fixture
def opgen_calls(monkeypatch):
    """Counts the calls reaching opgen's Pythonic layer, by op."""
    counts: dict = {}
    real = opgen.api.call_op

    def counted(op, *a, **k):
        counts[op.name] = counts.get(op.name, 0) + 1
        return real(op, *a, **k)
    monkeypatch.setattr(opgen.api, "call_op", counted)
    return counts


class LayerNorm2d(nn.LayerNorm):
    """timm's LayerNorm2d, as timm writes it: an nn.LayerNorm subclass over NCHW channels."""

    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        x = nn.functional.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class OffsetRMSNorm(nn.Module):
    """Gemma's RMSNorm: x * rstd * (1 + weight), weight initialized to zeros."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1.0 + self.weight)


class PlainRMSNorm(nn.Module):
    """Llama's RMSNorm as transformers writes it (variance_epsilon, no torch.nn base)."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.variance_epsilon, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))


class ScaleNorm(nn.Module):
    """A norm apply does not know (x / ||x|| * g): left and reported."""

    def __init__(self):
        super().__init__()
        self.g = nn.Parameter(torch.ones(()))

    def forward(self, x):
        return x / x.norm(dim=-1, keepdim=True) * self.g


class Zoo(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln, self.rms, self.llama = nn.LayerNorm(8, eps=1e-4), nn.RMSNorm(8), PlainRMSNorm(8)
        self.gn, self.bn = nn.GroupNorm(2, 4, affine=False), nn.BatchNorm2d(4, momentum=0.3)
        self.ln2d, self.gemma, self.scale = LayerNorm2d(4), OffsetRMSNorm(8, eps=1e-5), ScaleNorm()
        self.bn1d, self.inorm = nn.BatchNorm1d(4), nn.InstanceNorm2d(4)


def test_apply_swaps_by_formula_and_reports_the_rest():
    zoo = Zoo()
    kept = {name: p for name, p in zoo.named_parameters()} | {name: b for name, b in zoo.named_buffers()}
    report = ot.apply(zoo)
    assert set(report.swapped) == {"ln", "rms", "llama", "gn", "bn", "gemma", "bn1d", "inorm", "ln2d"}
    assert set(report.left) == {"scale"}
    assert report.swapped["ln2d"].endswith("opgen.torch.LayerNorm2d")
    assert report.swapped["gemma"].endswith("opgen.torch.GemmaRMSNorm")
    assert "ScaleNorm" in report.left["scale"] and report.swapped["inorm"].endswith("opgen.torch.InstanceNorm2d")
    assert type(zoo.ln) is ot.LayerNorm and type(zoo.llama) is ot.RMSNorm and type(zoo.bn) is ot.BatchNorm2d
    assert type(zoo.bn1d) is ot.BatchNorm1d and type(zoo.inorm) is ot.InstanceNorm2d
    assert type(zoo.ln2d) is ot.LayerNorm2d and type(zoo.gemma) is ot.GemmaRMSNorm
    # the layers' own Parameter and buffer objects, their eps, momentum and affine flags
    now = {name: p for name, p in zoo.named_parameters()} | {name: b for name, b in zoo.named_buffers()}
    assert now.keys() == kept.keys() and all(now[k] is kept[k] for k in kept)
    assert (zoo.ln.eps, zoo.rms.eps, zoo.llama.eps, zoo.gemma.eps, zoo.bn.momentum) == (1e-4, None, 1e-6, 1e-5, 0.3)
    assert zoo.gn.weight is None and not zoo.gn.affine
    assert "opgen.torch" in str(report) and "swapped gemma" in str(report) and "left scale" in str(report)
    again = ot.apply(zoo)                           # a second apply changes nothing
    assert not again.swapped and all(again.left[n].startswith("already opgen.torch") for n in report.swapped)


def test_swapped_layers_compute_what_they_did(opgen_calls):
    torch.manual_seed(0)
    zoo = Zoo()
    with torch.no_grad():
        zoo.gemma.weight.uniform_(-0.5, 0.5)     # zeros at start: an offset that is dropped would not show
    before = copy.deepcopy(zoo)
    ot.apply(zoo)
    x8, x4 = torch.randn(3, 5, 8), torch.randn(2, 4, 3, 5)
    for name, x in [("ln", x8), ("rms", x8), ("llama", x8), ("gemma", x8), ("gn", x4), ("bn", x4), ("inorm", x4)]:
        torch.testing.assert_close(getattr(zoo, name)(x), getattr(before, name)(x), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(zoo.bn.running_mean, before.bn.running_mean)
    assert opgen_calls["rms_norm"] == 2 and opgen_calls["layer_norm"] == 1 and opgen_calls["batch_norm"] == 1
    assert opgen_calls["gemma_rms_norm"] == 1 and opgen_calls["instance_norm"] == 1


def test_types_restricts_and_float64_is_left():
    model = nn.Sequential(nn.LayerNorm(8), nn.GroupNorm(2, 4), nn.LayerNorm(8).double())
    report = ot.apply(model, types=[nn.LayerNorm])
    assert list(report.swapped) == ["0"]
    assert "not in types" in report.left["1"] and "float64" in report.left["2"]


def test_group_norm_swish_fused_only_where_the_silu_is_the_norms_alone():
    torch.manual_seed(1)
    shared = nn.SiLU()
    model = nn.ModuleDict({"own": nn.Sequential(nn.GroupNorm(2, 4), nn.SiLU()),
                           "shared": nn.Sequential(nn.GroupNorm(2, 4), shared), "elsewhere": shared})
    before = copy.deepcopy(model)
    report = ot.apply(model, fuse_group_norm_swish=True)
    assert type(model["own"][0]) is ot.GroupNormSwish and type(model["own"][1]) is nn.Identity
    assert type(model["shared"][0]) is ot.GroupNorm and model["shared"][1] is shared
    assert "used elsewhere" in report.left["shared.0 (fusion)"] and "fused" in report.swapped["own.0"]
    x = torch.randn(2, 4, 3, 3)
    torch.testing.assert_close(model["own"](x), before["own"](x), rtol=1e-5, atol=1e-5)


def test_apply_after_model_to_dtype_and_after_compile(opgen_calls):
    """model.to(bfloat16) then apply: bf16 opgen modules; a compiled model (eager backend:
    dynamo's guards, no Inductor build) swapped after its first call re-traces and runs opgen."""
    model = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8)).to(torch.bfloat16)
    assert list(ot.apply(model).swapped) == ["1"] and model[1].weight.dtype == torch.bfloat16
    assert model(torch.randn(2, 8, dtype=torch.bfloat16)).dtype == torch.bfloat16
    plain = nn.Sequential(nn.Linear(8, 8), nn.RMSNorm(8))
    compiled = torch.compile(plain, backend="eager")
    x = torch.randn(2, 8)
    want = compiled(x)
    assert opgen_calls.get("rms_norm", 0) == 0
    assert list(ot.apply(compiled).swapped) == ["1"] and type(plain[1]) is ot.RMSNorm
    torch.testing.assert_close(compiled(x), want, rtol=1e-5, atol=1e-5)
    assert opgen_calls["rms_norm"] == 1


def test_first_slow_call_is_logged_once(monkeypatch, caplog):
    monkeypatch.setattr(ot, "_FIRST_USE", {"announced": False, "quiet": False})
    monkeypatch.setattr(ot, "FIRST_USE_SECONDS", 0.0)
    run = ot._runner(get_op("rms_norm"))
    x, gamma = torch.randn(2, 8), torch.ones(8)
    with caplog.at_level(logging.WARNING, logger="opgen.torch"):
        with ot._quiet_first_use():
            run((x, gamma, 1e-6))                        # precompile's builds: silent
        run((x.half(), gamma.half(), 1e-6))
        run((x.bfloat16(), gamma.bfloat16(), 1e-6))      # another dtype: already said
        run((x.half(), gamma.half(), 1e-6))
    said = [r for r in caplog.records if r.name == "opgen.torch"]
    assert len(said) == 1 and "precompile" in said[0].getMessage() and "float16" in said[0].getMessage()


def test_precompile_builds_and_leaves_the_model_as_it_was(opgen_calls):
    torch.manual_seed(2)
    model = nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4), nn.Flatten(), nn.LayerNorm(36))
    ot.apply(model)
    buffers = [b.clone() for b in model.buffers()]
    seconds = ot.precompile(model, torch.randn(2, 3, 3, 3))
    assert seconds > 0 and opgen_calls["batch_norm_backward"] == 1 and opgen_calls["layer_norm_backward"] == 1
    assert all(p.grad is None for p in model.parameters())
    for a, b in zip(model.buffers(), buffers):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


_DECODER_NORMS = {"llama": "LlamaRMSNorm", "mistral": "MistralRMSNorm", "mixtral": "MixtralRMSNorm",
                  "qwen2": "Qwen2RMSNorm", "qwen3": "Qwen3RMSNorm", "phi3": "Phi3RMSNorm", "t5": "T5LayerNorm",
                  "gemma": "GemmaRMSNorm", "gemma2": "Gemma2RMSNorm", "gemma3": "Gemma3RMSNorm"}


def test_every_decoder_familys_norm_class_and_diffusers_rms_norm():
    """transformers' RMSNorm classes share one formula but not one class: each plain one is
    swapped for RMSNorm, Gemma's three (1 + weight) classes for GemmaRMSNorm; diffusers'
    RMSNorm with a bias (another formula) is left, while its plain ones are swapped."""
    import importlib

    pytest.importorskip("transformers")
    diffusers = pytest.importorskip("diffusers")
    layers = nn.ModuleDict()
    for family, name in _DECODER_NORMS.items():
        layers[family] = getattr(importlib.import_module(f"transformers.models.{family}.modeling_{family}"), name)(8)
    rms = importlib.import_module("diffusers.models.normalization").RMSNorm
    layers["diffusers"], layers["diffusers_plain"] = rms(8, eps=1e-6), rms(8, eps=1e-6, elementwise_affine=False)
    layers["diffusers_bias"] = rms(8, eps=1e-6, bias=True)
    report = ot.apply(layers)
    offset = {f for f, what in report.swapped.items() if what.endswith("opgen.torch.GemmaRMSNorm")}
    assert offset == {"gemma", "gemma2", "gemma3"}
    assert set(report.swapped) == set(_DECODER_NORMS) | {"diffusers", "diffusers_plain"}
    assert set(report.left) == {"diffusers_bias"} and "RMSNorm" in report.left["diffusers_bias"] and diffusers


# --- one swap-and-step test per real model family (the ``models`` extra) -----------------------------


# The counts of swapped and left norms each family's code holds at the tiny config.
FAMILIES = {"llama": {"counts": (3, 0)}, "gemma": {"counts": (3, 0)},
            "convnext": {"counts": (5, 0)}, "vit": {"counts": (3, 0)},
            "resnet": {"counts": (6, 0)}, "unet2d": {"counts": (15, 0)}}


def test_every_family_of_the_benchmark_is_tested():
    assert list(FAMILIES) == list(model_families.FAMILIES) == bench.MODEL_FAMILIES


@pytest.mark.parametrize("family", list(FAMILIES))
def test_real_model_swap_and_three_adamw_steps_match_the_unswapped_copy(family, opgen_calls):
    """A tiny model of each family with random weights: apply() swaps every norm or reports
    it (ConvNeXt's channels-first LayerNorms too: opgen's LayerNorm2d), then 3 AdamW steps on the
    same batch: losses and step-1 gradients equal the unswapped copy's within float32 norm
    tolerances (the model's matmuls sum what the norms round)."""
    if model_families.missing():
        pytest.skip(model_families.missing())
    expect = FAMILIES[family]
    built = model_families.build(family, "tiny", seed=3)
    model, loss_of = built.model, built.loss
    reference = copy.deepcopy(model)
    report = ot.apply(model)
    norms = {name for name, m in reference.named_modules() if name and _looks_like_norm(m)}
    assert set(report.swapped) | set(report.left) == norms
    assert (len(report.swapped), len(report.left)) == expect["counts"]    # the norms the family's code holds
    for name, why in report.left.items():
        assert expect.get("left", "nothing may be left") in why, (name, why)
    losses, grads = {}, {}
    for key, m in (("ours", model), ("torch", reference)):
        m.train()
        optimizer = torch.optim.AdamW(m.parameters(), lr=1e-3)
        losses[key] = []
        for step in range(3):
            optimizer.zero_grad()
            loss = loss_of(m)
            loss.backward()
            if step == 0:
                grads[key] = {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}
            optimizer.step()
            losses[key].append(loss.item())
    torch.testing.assert_close(torch.tensor(losses["ours"]), torch.tensor(losses["torch"]), rtol=1e-5, atol=1e-6)
    assert grads["ours"].keys() == grads["torch"].keys()
    for name, g in grads["ours"].items():
        scale = grads["torch"][name].abs().max().item()
        torch.testing.assert_close(g, grads["torch"][name], rtol=1e-4, atol=1e-5 * max(scale, 1e-2), msg=name)
    backward = {op for op in opgen_calls if op.endswith(("_grad", "_backward"))}
    assert backward and len(opgen_calls) == 2 * len(backward)   # each swapped op's forward and backward ran
