"""Training benchmark: small models trained with torch's norm modules and with opgen's.

``opgen bench --training`` (or ``python benchmarks/training.py``) builds each model twice
from one seed, once with torch.nn's GroupNorm / RMSNorm / LayerNorm and once with
opgen.torch's (same parameters: opgen's modules subclass torch's), and trains both on the
same batches, their steps interleaved in one process. It reports:

* the step time of each (median over the steps after the first, which builds kernels);
* each norm layer's forward and backward alone, torch's module and opgen's, at the shapes
  the model feeds it (interleaved medians);
* the norm layers' share of torch's step, and the step Amdahl's law predicts for opgen from
  that share and the per-layer times: torch's step - torch's norm time + opgen's norm time;
* both loss curves, which must agree (the benchmark doubles as a correctness test: the
  models differ only in the norm modules' kernels).

Models (the issue's sizes; ``--quick`` shrinks them so that CI can run 20 steps):
* ``unet``: a UNet-style CNN, conv -> GroupNorm -> SiLU blocks at 32, 64 and 128 channels,
  two stride-2 downsamplings, upsampling with skip connections; batch 32 of 3x64x64.
* ``transformer``: a pre-norm transformer block, RMSNorm before attention and LayerNorm
  before the MLP; batch 8, sequence 512, hidden 1024, 8 heads.
"""
from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

FULL = {"unet": {"batch": 32, "side": 64, "channels": (32, 64, 128), "groups": 8},
        "transformer": {"batch": 8, "seq": 512, "hidden": 1024, "heads": 8}}
QUICK = {"unet": {"batch": 4, "side": 16, "channels": (8, 16, 32), "groups": 4},
         "transformer": {"batch": 2, "seq": 32, "hidden": 64, "heads": 4}}
LEARNING_RATE = 0.01


def norm_classes(library: str) -> dict:
    """The norm module classes of ``library`` ("torch" or "opgen"), by torch's name."""
    if library == "torch":
        return {"GroupNorm": nn.GroupNorm, "RMSNorm": nn.RMSNorm, "LayerNorm": nn.LayerNorm}
    import opgen.torch as ot

    return {"GroupNorm": ot.GroupNorm, "RMSNorm": ot.RMSNorm, "LayerNorm": ot.LayerNorm}


class _ConvBlock(nn.Module):
    """conv3x3 -> GroupNorm -> SiLU, the UNet's unit."""

    def __init__(self, c_in: int, c_out: int, groups: int, norms: dict, stride: int = 1):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1)
        self.norm = norms["GroupNorm"](groups, c_out)

    def forward(self, x):
        return F.silu(self.norm(self.conv(x)))


class UNet(nn.Module):
    """Two levels down (stride-2 convs), two up (nearest upsampling, skip connections added)."""

    def __init__(self, channels: tuple, groups: int, norms: dict):
        super().__init__()
        c0, c1, c2 = channels
        self.stem = _ConvBlock(3, c0, groups, norms)
        self.down1 = _ConvBlock(c0, c1, groups, norms, stride=2)
        self.down2 = _ConvBlock(c1, c2, groups, norms, stride=2)
        self.mid = _ConvBlock(c2, c2, groups, norms)
        self.up2 = _ConvBlock(c2, c1, groups, norms)
        self.up1 = _ConvBlock(c1, c0, groups, norms)
        self.head = nn.Conv2d(c0, 3, 1)

    def forward(self, x):
        s0 = self.stem(x)
        s1 = self.down1(s0)
        h = self.mid(self.down2(s1))
        h = self.up2(F.interpolate(h, scale_factor=2.0)) + s1
        h = self.up1(F.interpolate(h, scale_factor=2.0)) + s0
        return self.head(h)


class TransformerBlock(nn.Module):
    """Pre-norm block: x + attention(RMSNorm(x)), then + MLP(LayerNorm(.))."""

    def __init__(self, hidden: int, heads: int, norms: dict):
        super().__init__()
        self.heads = heads
        self.attn_norm = norms["RMSNorm"](hidden, eps=1e-6)      # torch's default eps differs from opgen's
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.mlp_norm = norms["LayerNorm"](hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).reshape(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, s, h)
        x = x + self.proj(attended)
        return x + self.mlp(self.mlp_norm(x))


def build(model: str, sizes: dict, library: str) -> nn.Module:
    norms = norm_classes(library)
    if model == "unet":
        return UNet(sizes["channels"], sizes["groups"], norms)
    return TransformerBlock(sizes["hidden"], sizes["heads"], norms)


def model_pair(model: str, sizes: dict, seed: int) -> tuple[nn.Module, nn.Module]:
    """(torch's, opgen's): the same parameters, only the norm modules' classes differ."""
    torch.manual_seed(seed)
    reference = build(model, sizes, "torch")
    ours = build(model, sizes, "opgen")
    ours.load_state_dict(reference.state_dict())
    return reference, ours


def batches(model: str, sizes: dict, steps: int, seed: int) -> list[tuple]:
    """(input, target) per step, fixed by ``seed``."""
    gen = torch.Generator().manual_seed(seed + 1)
    if model == "unet":
        shape = (sizes["batch"], 3, sizes["side"], sizes["side"])
    else:
        shape = (sizes["batch"], sizes["seq"], sizes["hidden"])
    return [(torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)) for _ in range(steps)]


def _step(model: nn.Module, optimizer, x, target) -> float:
    optimizer.zero_grad(set_to_none=True)
    loss = F.mse_loss(model(x), target)
    loss.backward()
    optimizer.step()
    return loss.item()


def train(pair: tuple, data: list) -> dict:
    """Both models over ``data``, one step of each in turn: {side: (losses, step seconds)}."""
    sides = dict(zip(("torch", "opgen"), pair))
    optimizers = {name: torch.optim.SGD(m.parameters(), lr=LEARNING_RATE) for name, m in sides.items()}
    losses = {name: [] for name in sides}
    seconds = {name: [] for name in sides}
    for x, target in data:
        for name, model in sides.items():
            start = time.perf_counter()
            losses[name].append(_step(model, optimizers[name], x, target))
            seconds[name].append(time.perf_counter() - start)
    return {name: (losses[name], seconds[name]) for name in sides}


def norm_inputs(model: nn.Module, x) -> list[tuple]:
    """(module name, class name, input shape) of every norm layer in one forward."""
    found, hooks = [], []
    names = set(norm_classes("torch"))
    for name, module in model.named_modules():
        if type(module).__name__ in names:
            hooks.append(module.register_forward_pre_hook(
                lambda m, args, name=name: found.append((name, type(m).__name__, tuple(args[0].shape)))))
    with torch.no_grad():
        model(x)
    for hook in hooks:
        hook.remove()
    return found


def _ms(fn) -> float:
    start = time.perf_counter()
    fn()
    return 1e3 * (time.perf_counter() - start)


def layer_times(pair: tuple, x, repeats: int) -> list[dict]:
    """Forward and backward of each norm layer alone, torch's module and opgen's, at the
    input shape the model gives it, interleaved (torch, opgen per round), medians in ms.
    The backward is ``torch.autograd.grad`` on a kept graph: the gradients are returned,
    not added into ``x.grad`` (in the model x is the previous layer's output, where nothing
    accumulates; ``y.backward`` here added a pass over x's size to both sides' times)."""
    rows = []
    modules = [dict(m.named_modules()) for m in pair]
    for name, kind, shape in norm_inputs(pair[0], x):
        gen = torch.Generator().manual_seed(len(rows))
        inp = torch.randn(shape, generator=gen).requires_grad_()
        grad = torch.randn(shape, generator=gen)
        ms = {}
        for side, mods in zip(("torch", "opgen"), modules):
            layer = mods[name]
            y, wrt = layer(inp), [inp, *layer.parameters()]
            ms[side] = {"forward": lambda layer=layer: layer(inp),
                        "backward": lambda y=y, wrt=wrt: torch.autograd.grad(y, wrt, grad, retain_graph=True)}
        rounds = {(side, phase): [] for side in ms for phase in ("forward", "backward")}
        for _ in range(repeats):
            for (side, phase), times in rounds.items():
                times.append(_ms(ms[side][phase]))
        row = {"layer": name, "module": kind, "shape": list(shape)}
        row.update({f"{side} {phase} ms": statistics.median(t) for (side, phase), t in rounds.items()})
        rows.append(row)
    return rows


@dataclass
class Report:
    """One model's result."""

    model: str
    sizes: dict
    steps: int
    torch_step_ms: float
    opgen_step_ms: float
    norm_share_of_torch_step: float
    predicted_opgen_step_ms: float
    max_loss_difference: float
    losses: dict = field(default_factory=dict)
    layers: list = field(default_factory=list)

    @property
    def speedup(self) -> float:
        return self.torch_step_ms / self.opgen_step_ms

    @property
    def of_prediction(self) -> float:
        """Measured opgen step over Amdahl's prediction (1.0: the per-layer gains all reach the step)."""
        return self.opgen_step_ms / self.predicted_opgen_step_ms


def run_model(model: str, quick: bool, steps: int, repeats: int, seed: int = 0) -> Report:
    sizes = (QUICK if quick else FULL)[model]
    pair = model_pair(model, sizes, seed)
    data = batches(model, sizes, steps, seed)
    trained = train(pair, data)
    layers = layer_times(pair, data[0][0], repeats)
    step_ms = {side: 1e3 * statistics.median(seconds[1:] or seconds) for side, (_, seconds) in trained.items()}
    norm_ms = {side: sum(row[f"{side} forward ms"] + row[f"{side} backward ms"] for row in layers)
               for side in ("torch", "opgen")}
    losses = {side: values for side, (values, _) in trained.items()}
    return Report(model, sizes, steps, step_ms["torch"], step_ms["opgen"], norm_ms["torch"] / step_ms["torch"],
                  step_ms["torch"] - norm_ms["torch"] + norm_ms["opgen"],
                  max(abs(a - b) for a, b in zip(losses["torch"], losses["opgen"])), losses, layers)


def print_report(report: Report) -> None:
    print(f"{report.model} {report.sizes}, {report.steps} SGD steps (lr {LEARNING_RATE}), f32, interleaved")
    print(f"  step: torch {report.torch_step_ms:.2f} ms, opgen {report.opgen_step_ms:.2f} ms "
          f"({report.speedup:.2f}x); norms {100 * report.norm_share_of_torch_step:.0f}% of torch's step; "
          f"Amdahl predicts {report.predicted_opgen_step_ms:.2f} ms for opgen (measured/predicted "
          f"{report.of_prediction:.2f})")
    print(f"  losses: max |torch - opgen| = {report.max_loss_difference:.2e} over {report.steps} steps "
          f"(first {report.losses['torch'][0]:.5f}, last {report.losses['torch'][-1]:.5f})")
    print(f"  {'layer':<16} {'module':<10} {'shape':<22} {'fwd torch':>10} {'fwd opgen':>10} "
          f"{'bwd torch':>10} {'bwd opgen':>10}")
    for row in report.layers:
        print(f"  {row['layer']:<16} {row['module']:<10} {'x'.join(map(str, row['shape'])):<22} "
              f"{row['torch forward ms']:>10.3f} {row['opgen forward ms']:>10.3f} "
              f"{row['torch backward ms']:>10.3f} {row['opgen backward ms']:>10.3f}")


def main(args) -> int:
    """``opgen bench --training``: every model (or ``--model``), its report, --out as JSON."""
    models = args.model or list(FULL)
    steps = args.steps or (20 if args.quick else 10)
    repeats = args.repeats or (5 if args.quick else 15)
    reports = []
    for model in models:
        report = run_model(model, args.quick, steps, repeats, args.seed)
        print_report(report)
        reports.append(report)
    if args.out:
        with open(args.out, "w") as f:
            json.dump([asdict(r) | {"speedup": r.speedup, "measured_over_predicted": r.of_prediction}
                       for r in reports], f, indent=1)
    return 0
