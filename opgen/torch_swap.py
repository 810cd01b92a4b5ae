"""``opgen.torch.apply(model)``: swap, in place, every norm layer opgen can run for its opgen module.

    report = opgen.torch.apply(model)          # torch.nn's norms, transformers', diffusers', timm's
    print(report)                              # each layer swapped, each left with the reason

A layer is recognized by what it computes, never by its class alone: timm's LayerNorm2d
and transformers' ConvNextLayerNorm(data_format="channels_first") subclass nn.LayerNorm but
normalize the channels of NCHW data, so an isinstance swap would silently change the model.
For each module that looks like a norm (a torch.nn norm class, or a class whose name says
Norm), the attributes its family uses (``weight``/``bias``, ``eps`` / ``variance_epsilon``
/ ``epsilon``, ``normalized_shape`` / ``dim``, ``num_groups``, running statistics) give a
candidate: torch.nn's module of the same formula, which opgen's module equals (its tests).
Copies of the layer and of the candidate, with the same random parameters, then run a
forward and a backward on a small random input; the swap happens only where outputs and
gradients agree within the op tolerances. An RMSNorm-like layer with a weight has two
candidates, tried in turn: torch.nn.RMSNorm (opgen's RMSNorm), then the offset form
``x * rstd * (1 + weight)`` of Gemma's RMSNorm classes (opgen's GemmaRMSNorm). A
LayerNorm-like layer over one dim has two too: torch.nn.LayerNorm (opgen's LayerNorm), then
the channels-first form, F.layer_norm over axis 1 of NCHW data (opgen's LayerNorm2d: ConvNeXt's
data_format="channels_first", timm's LayerNorm2d), probed on a (2, C, 3, 5) input. Anything
else is left as it is and reported: a class with no candidate, a probe that disagrees with
every candidate (an RMSNorm with a bias), float64 layers (opgen has no
float64 kernels), and norms opgen has no module for (SyncBatchNorm, LocalResponseNorm).

The opgen module takes over the layer's own Parameter and buffer objects (so an optimizer
made before the swap, tied weights and the device and dtype are kept) and its eps,
momentum and affine flags. It works on a torch.compile'd model (its ``_orig_mod``; the
compiled wrapper re-traces after the swap) and after ``model.to(dtype)``.

``fuse_group_norm_swish=True`` also replaces a GroupNorm directly followed by a SiLU in an
nn.Sequential (the SiLU's only input is that norm's output) by opgen's GroupNormSwish and the
SiLU by nn.Identity, where that SiLU module is used nowhere else in the model; a SiLU shared
with other code (diffusers' ResnetBlock2D calls one SiLU on both norms and the time
embedding) or called outside an nn.Sequential is not fused, and the report says why.

``precompile(model, example_input)`` runs one forward and backward so that every opgen
module builds its kernels before the first training step, leaving parameters, gradients and
buffers as they were.
"""
from __future__ import annotations

import copy
import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

import torch
from torch import Tensor, nn

LOG = logging.getLogger("opgen.torch")

PROBE_TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}
"""How close a layer's float32 outputs and gradients must be to the candidate's (opgen's op
tolerances for float32 norms) for the two to count as one formula."""

# torch.nn's BatchNorm classes opgen has, and the trailing dims of the probe's input for each.
_BATCH_NORMS = {"BatchNorm1d": (5,), "BatchNorm2d": (2, 5), "BatchNorm3d": (2, 2, 3)}
_INSTANCE_NORMS = {"InstanceNorm1d": (5,), "InstanceNorm2d": (2, 5), "InstanceNorm3d": (2, 2, 3)}
_NORM_BASES = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm, nn.RMSNorm, nn.LocalResponseNorm)


@dataclass
class SwapReport:
    """What apply did: ``swapped`` maps a layer's qualified name to "OldClass -> NewClass";
    ``left`` maps each norm-like layer it did not swap to the reason."""

    swapped: dict = field(default_factory=dict)
    left: dict = field(default_factory=dict)

    def __str__(self) -> str:
        lines = [f"opgen.torch.apply: {len(self.swapped)} swapped, {len(self.left)} left"]
        lines += [f"  swapped {name}: {what}" for name, what in self.swapped.items()]
        lines += [f"  left {name}: {why}" for name, why in self.left.items()]
        return "\n".join(lines)


@dataclass
class _Candidate:
    """An opgen module that may replace a layer: ``build()`` makes it (on the meta device's
    cost: no parameters of its own survive, the layer's are moved in), ``reference()``
    torch.nn's module of the same formula and arguments, ``probe`` a small input shape."""

    build: Callable[[], nn.Module]
    reference: Callable[[], nn.Module]
    probe: tuple


def _eps(layer: nn.Module, default: Optional[float] = None):
    for name in ("eps", "variance_epsilon", "epsilon"):
        value = getattr(layer, name, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return default


def _param(layer: nn.Module, name: str) -> Optional[Tensor]:
    value = getattr(layer, name, None)
    return value if isinstance(value, Tensor) else None


def _candidates(layer: nn.Module, ot) -> tuple[list, str]:
    """The opgen modules this layer may become, in the order the probe tries them, or none
    and why not. Nothing here decides the swap: the probe does."""
    first, why = _candidate(layer, ot)
    if first is None:
        return [], why
    second = _offset_candidate(layer, ot) if _is_rms(layer) else _channels_first_candidate(layer, ot)
    return [first] + ([second] if second is not None else []), ""


def _candidate(layer: nn.Module, ot) -> tuple[Optional[_Candidate], str]:
    """The opgen module this layer would become, from the attributes its family uses, or
    None and why not."""
    if isinstance(layer, nn.SyncBatchNorm):      # what synchronizes it is a process group, not a probe's input
        return None, ("torch's SyncBatchNorm: opgen.torch.SyncBatchNorm.convert_sync_batchnorm(model) turns it "
                      "into opgen's")
    if isinstance(layer, nn.modules.batchnorm._BatchNorm):
        name = next((n for n in _BATCH_NORMS if isinstance(layer, getattr(nn, n))), None)
        if name is None:
            return None, f"no opgen module for {type(layer).__name__} (opgen has {', '.join(_BATCH_NORMS)})"
        args = dict(num_features=layer.num_features, eps=layer.eps, momentum=layer.momentum, affine=layer.affine,
                    track_running_stats=layer.track_running_stats)
        return _Candidate(lambda: getattr(ot, name)(**args), lambda: getattr(nn, name)(**args),
                          (3, layer.num_features) + _BATCH_NORMS[name]), ""
    if isinstance(layer, nn.modules.instancenorm._InstanceNorm):
        name = next((n for n in _INSTANCE_NORMS if isinstance(layer, getattr(nn, n))), None)
        if name is None:
            return None, f"no opgen module for {type(layer).__name__} (opgen has {', '.join(_INSTANCE_NORMS)})"
        args = dict(num_features=layer.num_features, eps=layer.eps, momentum=layer.momentum, affine=layer.affine,
                    track_running_stats=layer.track_running_stats)
        return _Candidate(lambda: getattr(ot, name)(**args), lambda: getattr(nn, name)(**args),
                          (3, layer.num_features) + _INSTANCE_NORMS[name]), ""
    if isinstance(layer, nn.GroupNorm) or (hasattr(layer, "num_groups") and hasattr(layer, "num_channels")):
        groups, channels = int(layer.num_groups), int(layer.num_channels)
        args = dict(num_groups=groups, num_channels=channels, eps=_eps(layer, 1e-5),
                    affine=_param(layer, "weight") is not None, bias=_param(layer, "bias") is not None)
        return _Candidate(lambda: ot.GroupNorm(**args), lambda: nn.GroupNorm(**args), (2, channels, 3, 5)), ""
    if isinstance(layer, nn.LayerNorm) or hasattr(layer, "normalized_shape") and not _is_rms(layer):
        shape = tuple(getattr(layer, "normalized_shape", ()))
        if not shape:
            return None, "a LayerNorm-like class without normalized_shape"
        weight, bias = _param(layer, "weight"), _param(layer, "bias")
        args = dict(normalized_shape=shape, eps=_eps(layer, 1e-5), elementwise_affine=weight is not None,
                    bias=bias is not None)
        return _Candidate(lambda: ot.LayerNorm(**args), lambda: nn.LayerNorm(**args), (2, 3, 5) + shape), ""
    if _is_rms(layer):
        weight = _param(layer, "weight")
        shape = tuple(weight.shape) if weight is not None else tuple(getattr(layer, "normalized_shape", None)
                                                                      or getattr(layer, "dim", None) or ())
        if not shape:
            return None, "an RMSNorm-like class whose normalized size is unknown"
        args = dict(normalized_shape=shape, eps=_eps(layer), elementwise_affine=weight is not None)
        return _Candidate(lambda: ot.RMSNorm(**args), lambda: nn.RMSNorm(**args), (2, 3, 5) + shape), ""
    return None, f"no opgen module known for {type(layer).__name__}"


class _OffsetRMSNorm(nn.Module):
    """Gemma's RMSNorm in plain torch, x * rstd * (1 + weight) computed in float32 (as
    transformers writes it): the reference a layer is probed against before opgen's
    GemmaRMSNorm replaces it (torch.nn has no module of this form)."""

    def __init__(self, shape: tuple, eps: Optional[float]):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.zeros(shape))

    def forward(self, x: Tensor) -> Tensor:
        gamma = 1.0 + self.weight.float()
        return nn.functional.rms_norm(x.float(), tuple(gamma.shape), gamma, self.eps).to(x.dtype)


def _offset_candidate(layer: nn.Module, ot) -> Optional[_Candidate]:
    """opgen's GemmaRMSNorm for an RMSNorm-like layer with a weight (the offset form needs
    one), over the weight's shape with the layer's eps (transformers' default 1e-6)."""
    weight = _param(layer, "weight")
    if weight is None:
        return None
    shape, eps = tuple(weight.shape), _eps(layer, 1e-6)
    return _Candidate(lambda: ot.GemmaRMSNorm(shape, eps=eps), lambda: _OffsetRMSNorm(shape, eps),
                      (2, 3, 5) + shape)


class _ChannelsFirstLayerNorm(nn.LayerNorm):
    """A LayerNorm over axis 1 of (N, C, spatial...) data in plain torch: the channels moved
    last, F.layer_norm, moved back (transformers' ConvNextLayerNorm(channels_first) and
    timm's LayerNorm2d compute this): the reference a LayerNorm-like layer is probed against
    before opgen's LayerNorm2d replaces it."""

    def forward(self, x: Tensor) -> Tensor:
        return nn.functional.layer_norm(x.movedim(1, -1), self.normalized_shape, self.weight, self.bias,
                                        self.eps).movedim(-1, 1)


def _channels_first_candidate(layer: nn.Module, ot) -> Optional[_Candidate]:
    """opgen's LayerNorm2d for a LayerNorm-like layer over one dim (C), tried when the
    trailing-dims LayerNorm disagrees: its probe input is (2, C, 3, 5), channels first."""
    if not (isinstance(layer, nn.LayerNorm) or hasattr(layer, "normalized_shape")) or _is_rms(layer):
        return None
    shape = tuple(getattr(layer, "normalized_shape", ()))
    if len(shape) != 1:
        return None
    weight, bias = _param(layer, "weight"), _param(layer, "bias")
    args = dict(eps=_eps(layer, 1e-6), elementwise_affine=weight is not None, bias=bias is not None)
    return _Candidate(lambda: ot.LayerNorm2d(shape[0], **args), lambda: _ChannelsFirstLayerNorm(shape, **args),
                      (2, shape[0], 3, 5))


def _is_rms(layer: nn.Module) -> bool:
    """An RMSNorm by its attributes: torch.nn.RMSNorm, or a weight and an eps (transformers'
    LlamaRMSNorm and kin: ``variance_epsilon``; diffusers': ``eps``) and no running stats."""
    if isinstance(layer, nn.RMSNorm):
        return True
    if isinstance(layer, (nn.LayerNorm, nn.GroupNorm)) or _eps(layer) is None:
        return False
    return "rms" in type(layer).__name__.lower() or hasattr(layer, "variance_epsilon")


def _looks_like_norm(layer: nn.Module) -> bool:
    """Whether the report should account for this module: a torch.nn norm, or a leaf whose
    class name says it normalizes (a norm apply does not know is reported, not ignored)."""
    if isinstance(layer, _NORM_BASES):
        return True
    return "norm" in type(layer).__name__.lower() and not any(True for _ in layer.children())


def _randomized(module: nn.Module, seed: int) -> nn.Module:
    """A float32 copy with every parameter and running statistic drawn at random (seeded),
    so that a weight the layer ignores, or adds one to, shows in the probe."""
    probe = copy.deepcopy(module).float()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for tensor in list(probe.parameters()) + [b for b in probe.buffers() if b.is_floating_point()]:
            tensor.copy_(torch.rand(tensor.shape, generator=generator) + 0.5)
    return probe


def _outputs(module: nn.Module, x: Tensor, dy: Tensor) -> list:
    """The forward output, the input gradient and the parameter gradients, in train mode
    then eval mode (BatchNorm's two formulas); the running statistics after training."""
    got = []
    for training in (True, False):
        module.train(training)
        xi = x.clone().requires_grad_(True)
        y = module(xi)
        if not isinstance(y, Tensor) or y.shape != x.shape:
            raise ValueError(f"returned {type(y).__name__} {getattr(y, 'shape', '')}, not a tensor of x's shape")
        grads = torch.autograd.grad(y, [xi] + [p for p in module.parameters()], dy, allow_unused=True)
        got += [y.detach()] + list(grads)
    return got + [b.detach().clone() for b in module.buffers() if b.is_floating_point()]


def _same_formula(layer: nn.Module, reference: nn.Module, shape: tuple) -> tuple[bool, str]:
    """Probe: the layer and torch.nn's candidate, with the same random parameters, on the
    same random float32 input (and output gradient); whether they agree and, if not, how."""
    theirs = _randomized(layer, seed=1)
    ours = _randomized(reference.to(_device_of(theirs)), seed=1)
    names = [n for n, _ in theirs.named_parameters()]
    if names != [n for n, _ in ours.named_parameters()]:
        return False, f"its parameters {names} are not torch.nn.{type(ours).__name__}'s"
    generator = torch.Generator().manual_seed(2)
    x = (torch.randn(shape, generator=generator) * 2 + 0.5).to(_device_of(ours))
    dy = torch.randn(shape, generator=generator).to(x.device)
    try:
        want, got = _outputs(ours, x, dy), _outputs(theirs, x, dy)
    except Exception as err:   # noqa: BLE001 (any failure means: not this formula)
        return False, f"its forward on a {list(shape)} probe raised {type(err).__name__}: {str(err)[:120]}"
    for a, b in zip(got, want):
        if (a is None) != (b is None) or a is not None and not torch.allclose(a, b, **PROBE_TOLERANCE):
            return False, "its outputs or gradients on a probe differ from torch.nn." + type(ours).__name__ + "'s"
    return True, ""


def _device_of(module: nn.Module) -> torch.device:
    for tensor in list(module.parameters()) + list(module.buffers()):
        return tensor.device
    return torch.device("cpu")


def _adopt(new: nn.Module, old: nn.Module) -> nn.Module:
    """The opgen module takes the layer's own Parameter and buffer objects (identity kept:
    optimizers, tied weights, device, dtype) and its training mode."""
    for name in list(new._parameters):
        new._parameters[name] = old._parameters.get(name, getattr(old, name, None))
    for name in list(new._buffers):
        new._buffers[name] = old._buffers.get(name, getattr(old, name, None))
    new.train(old.training)
    return new


def _dtype_of(layer: nn.Module) -> Optional[torch.dtype]:
    for tensor in layer.parameters():
        return tensor.dtype
    return None


_PLAIN_VALUES = (int, float, str, bool, tuple, type(None))


def _verdict_key(layer: nn.Module) -> tuple:
    """What a layer's probe verdict depends on: its class (the forward's code), its plain
    attributes (eps, data_format, ...) and its tensors' shapes; the probe draws the values.
    Layers with equal keys (a model's many identical blocks) are probed once."""
    plain = tuple(sorted((k, v) for k, v in vars(layer).items() if isinstance(v, _PLAIN_VALUES)))
    shapes = tuple((n, tuple(t.shape), t.dtype) for n, t in list(layer.named_parameters()) + list(layer.named_buffers()))
    return type(layer), repr(plain), shapes


def _decide(layer: nn.Module, ot, verdicts: dict) -> tuple[Optional[nn.Module], str]:
    """The opgen module for ``layer`` (its tensors adopted): the first candidate whose probe
    agrees, or None and the reason; probe verdicts are kept in ``verdicts`` by (_verdict_key,
    the candidate's place in _candidates)."""
    candidates, why = _candidates(layer, ot)
    if not candidates:
        return None, why
    if _dtype_of(layer) not in (None,) + ot.KERNEL_DTYPES:
        return None, f"{_dtype_of(layer)} parameters: opgen's kernels take float32, float16 and bfloat16"
    key = _verdict_key(layer)
    for i, candidate in enumerate(candidates):
        if (key, i) not in verdicts:
            verdicts[key, i] = _same_formula(layer, candidate.reference(), candidate.probe)
        if verdicts[key, i][0]:
            with torch.device("meta"):
                new = candidate.build()
            return _adopt(new, layer), ""
    why = verdicts[key, 0][1]      # the first candidate's disagreement names the layer's family
    if isinstance(layer, nn.LayerNorm):
        why += (" (a LayerNorm subclass that normalizes neither the last dims nor, channels first, axis 1 as "
                "opgen's LayerNorm2d does)")
    return None, f"computes something else than {type(candidates[0].reference()).__name__}: {why}"


def _slots(root: nn.Module) -> dict:
    """id(module) -> every (parent, attribute name) holding it (a module held twice is
    swapped at both places, as one module)."""
    slots: dict = {}
    for _, parent in root.named_modules(remove_duplicate=False):
        for name, child in parent._modules.items():
            if child is not None:
                slots.setdefault(id(child), []).append((parent, name))
    return slots


def _unwrap(model: nn.Module) -> nn.Module:
    """A torch.compile'd model's original module (swapped in place; the compiled wrapper
    re-traces on its next call, since its guards see new submodules)."""
    return getattr(model, "_orig_mod", model)


def apply(model: nn.Module, ot, *, types: Optional[Iterable[type]] = None,
          fuse_group_norm_swish: bool = False) -> SwapReport:
    """Replace, in place, every norm layer of ``model`` that opgen can run by the equivalent
    opgen.torch module and return what was swapped and what was left (with the reason).

    ``types``: only layers that are instances of one of these classes are considered (e.g.
    ``types=[torch.nn.GroupNorm]``); the rest are left with the reason "not in types".
    ``fuse_group_norm_swish``: see the module docstring. ``ot`` is opgen.torch, which passes
    itself (opgen.torch.apply): this module never imports it, so the two form no cycle."""

    root = _unwrap(model)
    report = SwapReport()
    slots = _slots(root)
    decided, verdicts = {}, {}
    for name, layer in root.named_modules():
        if not name or not _looks_like_norm(layer):
            continue
        if type(layer).__module__.startswith("opgen."):
            report.left[name] = f"already opgen.torch.{type(layer).__name__}"
            continue
        if types is not None and not isinstance(layer, tuple(types)):
            report.left[name] = f"{type(layer).__name__} not in types"
            continue
        new, why = _decide(layer, ot, verdicts)
        if new is None:
            report.left[name] = why
            continue
        decided[id(layer)] = new
        report.swapped[name] = f"{type(layer).__module__}.{type(layer).__qualname__} -> opgen.torch.{type(new).__name__}"
    for key, new in decided.items():
        for parent, attribute in slots.get(key, ()):
            setattr(parent, attribute, new)
    if fuse_group_norm_swish:
        _fuse_group_norm_swish(root, report, ot)
    return report


def _fuse_group_norm_swish(root: nn.Module, report: SwapReport, ot) -> None:
    """GroupNorm then SiLU inside one nn.Sequential, the SiLU held nowhere else: the pair
    becomes GroupNormSwish (the GroupNorm's tensors) and nn.Identity. A GroupNorm elsewhere
    is reported as not fused: whether its SiLU is its output's only consumer cannot be
    seen from the module tree (diffusers shares one SiLU with the time embedding)."""
    holders = {}
    for _, parent in root.named_modules(remove_duplicate=False):
        for child in parent._modules.values():
            if child is not None:
                holders[id(child)] = holders.get(id(child), 0) + 1
    names = {id(m): n for n, m in root.named_modules()}
    fused = set()
    for _, parent in root.named_modules():
        if not isinstance(parent, nn.Sequential):
            continue
        keys = list(parent._modules)
        for first, second in zip(keys, keys[1:]):
            norm, act = parent._modules[first], parent._modules[second]
            if not (type(norm) is ot.GroupNorm and isinstance(act, nn.SiLU)):
                continue
            if holders[id(act)] > 1 or holders[id(norm)] > 1:
                report.left[names[id(norm)] + " (fusion)"] = "not fused: its SiLU or the norm is also used elsewhere"
                continue
            with torch.device("meta"):
                swish = ot.GroupNormSwish(norm.num_groups, norm.num_channels, eps=norm.eps, affine=norm.affine,
                                          bias=norm.bias is not None)
            setattr(parent, first, _adopt(swish, norm))
            setattr(parent, second, nn.Identity())
            fused.add(names[id(norm)])
            report.swapped[names[id(norm)]] += " (fused with the following SiLU: GroupNormSwish)"
    for name, what in report.swapped.items():
        if what.endswith("opgen.torch.GroupNorm") and name not in fused:
            report.left.setdefault(name + " (fusion)", "not fused: no SiLU follows it in an nn.Sequential, so the "
                                                       "module tree does not show that a SiLU is its only consumer")


def _tensors_in(output) -> list:
    """The floating tensors in a model's output (a tensor, a tuple or list, a dict or
    transformers' ModelOutput), for a backward through all of them."""
    if isinstance(output, Tensor):
        return [output] if output.is_floating_point() and output.requires_grad else []
    if isinstance(output, dict):
        output = list(output.values())
    if isinstance(output, (list, tuple)):
        return [t for item in output for t in _tensors_in(item)]
    return []


def precompile(model: nn.Module, ot, *example_inputs, **example_kwargs) -> float:
    """Build every opgen kernel ``model`` needs before training: one forward and backward on
    the example inputs (in the model's current mode: a training job's), then parameters'
    gradients and every buffer (BatchNorm's running statistics) are put back as they were.
    Returns the seconds it took, and logs them at INFO on the ``opgen.torch`` logger. ``ot``:
    opgen.torch, as for ``apply``."""

    root = _unwrap(model)
    grads = {p: p.grad for p in root.parameters()}
    buffers = {b: b.detach().clone() for b in root.buffers()}
    start = time.perf_counter()
    with ot._quiet_first_use():
        try:
            output = root(*example_inputs, **example_kwargs)
            tensors = _tensors_in(output)
            if tensors:
                torch.autograd.backward(tensors, [torch.ones_like(t) for t in tensors])
        finally:
            with torch.no_grad():
                for p, g in grads.items():
                    p.grad = g
                for b, saved in buffers.items():
                    b.copy_(saved)
    seconds = time.perf_counter() - start
    LOG.info("opgen.torch.precompile: forward and backward kernels built in %.1f s", seconds)
    return seconds
