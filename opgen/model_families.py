"""Real third-party models, built from small configs, for ``opgen.torch.apply``'s tests and
``opgen bench --models``.

Each family is the library's own model class (transformers' Llama, Gemma, ConvNeXt, ViT and
ResNet; diffusers' UNet2DModel) with random weights, so the norms ``apply`` meets are the
classes those libraries really ship (LlamaRMSNorm, GemmaRMSNorm's ``1 + weight``, ConvNeXt's
channels-first LayerNorm, ResNet's BatchNorm2d, diffusers' GroupNorms), not stand-ins. A
family at a size gives the model and a loss closure over one fixed batch: the same data for
every step, so two copies of a model trained side by side see exactly the same inputs.

Sizes: ``tiny`` (the tests: a forward and backward take milliseconds) and ``bench`` (the
benchmark: big enough that the norms' share of a step is what a small real model has, small
enough for 2 cores). Needs the ``models`` extra (transformers, diffusers):
``missing()`` names what is not installed.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Callable

import torch

SIZES = ("tiny", "bench")
# The RMSNorm of Gemma's families starts at zeros (the offset form, x * rstd * (1 + w)); the
# benchmark and the tests give it random values so that a dropped offset would show.
_RANDOM_NORM_WEIGHTS = ("gemma",)


@dataclass
class Built:
    """A family's model and ``loss(model)``, a closure over one fixed batch."""

    model: torch.nn.Module
    loss: Callable[[torch.nn.Module], torch.Tensor]


def missing() -> str | None:
    """What the families need and is not installed, as one line, or None."""
    absent = [name for name in ("transformers", "diffusers") if importlib.util.find_spec(name) is None]
    return f"{' and '.join(absent)} not installed: pip install 'opgen[models]'" if absent else None


def _decoder(config_name: str, model_name: str, size: str) -> Built:
    import transformers as tf

    dims = {"tiny": dict(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32),
            "bench": dict(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)}[size]
    if config_name == "GemmaConfig":
        dims["head_dim"] = dims["hidden_size"] // dims["num_attention_heads"]
    batch, seq = {"tiny": (2, 12), "bench": (4, 128)}[size]
    model = getattr(tf, model_name)(getattr(tf, config_name)(**dims))
    ids = torch.randint(0, dims["vocab_size"], (batch, seq))
    return Built(model, lambda m: m(input_ids=ids, labels=ids).loss)


def _image(name: str, size: str, **dims) -> Built:
    import transformers as tf

    model = getattr(tf, f"{name}Model")(getattr(tf, f"{name}Config")(**dims))
    batch, side = {"tiny": (2, 16), "bench": (8, 64)}[size]
    pixels, target = torch.randn(batch, 3, side, side), torch.randn(batch, 16)
    return Built(model, lambda m: ((m(pixel_values=pixels).pooler_output.flatten(1)[:, :16] - target) ** 2).mean())


def _convnext(size: str) -> Built:
    dims = {"tiny": dict(hidden_sizes=[8, 16], depths=[1, 1], image_size=16),
            "bench": dict(hidden_sizes=[32, 64], depths=[2, 2], image_size=64)}[size]
    return _image("ConvNext", size, num_channels=3, num_stages=2, patch_size=2, **dims)


def _vit(size: str) -> Built:
    dims = {"tiny": dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                         image_size=16, patch_size=4),
            "bench": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
                          image_size=64, patch_size=8)}[size]
    return _image("ViT", size, **dims)


def _resnet(size: str) -> Built:
    dims = {"tiny": dict(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1]),
            "bench": dict(embedding_size=32, hidden_sizes=[32, 64], depths=[2, 2])}[size]
    return _image("ResNet", size, layer_type="basic", downsample_in_first_stage=False, **dims)


def _unet(size: str) -> Built:
    import diffusers

    side, channels, groups, batch = {"tiny": (8, (8,), 4, 2), "bench": (32, (32, 64), 8, 4)}[size]
    blocks = len(channels)
    model = diffusers.UNet2DModel(sample_size=side, in_channels=3, out_channels=3, block_out_channels=channels,
                                  layers_per_block=1, norm_num_groups=groups, attention_head_dim=8,
                                  down_block_types=("AttnDownBlock2D",) * blocks,
                                  up_block_types=("AttnUpBlock2D",) * blocks)
    sample, noise = torch.randn(batch, 3, side, side), torch.randn(batch, 3, side, side)
    steps = torch.arange(batch) * 3 + 1
    return Built(model, lambda m: ((m(sample, steps).sample - noise) ** 2).mean())


FAMILIES: dict[str, Callable[[str], Built]] = {
    "llama": lambda size: _decoder("LlamaConfig", "LlamaForCausalLM", size),
    "gemma": lambda size: _decoder("GemmaConfig", "GemmaForCausalLM", size),
    "convnext": _convnext,
    "vit": _vit,
    "resnet": _resnet,
    "unet2d": _unet,
}


def build(family: str, size: str = "tiny", seed: int = 0) -> Built:
    """``family``'s model at ``size`` with weights and batch drawn from ``seed``."""
    if size not in SIZES:
        raise ValueError(f"size {size!r}: one of {', '.join(SIZES)}")
    torch.manual_seed(seed)
    built = FAMILIES[family](size)
    if family in _RANDOM_NORM_WEIGHTS:
        with torch.no_grad():
            for name, p in built.model.named_parameters():
                if "norm" in name:
                    p.uniform_(-0.5, 0.5)
    return built
