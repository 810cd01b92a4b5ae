"""opgen in PyTorch: a custom op per registered op, and drop-in modules that run opgen's kernels.

    import opgen.torch
    norm = opgen.torch.RMSNorm(4096)              # same parameters and state_dict as torch.nn.RMSNorm
    norm(x).sum().backward()                      # forward and backward run opgen's kernels

* ``torch.ops.opgen.<op>`` for every op with a Pythonic face, generated from its ApiSpec
  (no per-op code here): the Pythonic function's parameters (tensors, attributes, the
  output mask) with torch types, returning every output; e.g.
  ``torch.ops.opgen.rms_norm_grad(dy, x, rstd, gamma) -> (dx, dgamma)`` and
  ``torch.ops.opgen.group_norm_backward(grad_out, input, mean, rstd, gamma, group,
  output_mask) -> (dx, dgamma, dbeta)``. Each is a ``torch.library`` custom op with a fake
  (meta) implementation from the op's allocation rules, so torch.compile traces through it
  without a graph break; an output not asked for (its mask bit or flag attribute false)
  is an empty tensor (a custom op returns tensors, never None).
* Modules: an op package may hold ``torch_module.py`` (torch.nn modules whose forward and
  backward call custom ops; ``MODULES`` names them); they are exported here: ``RMSNorm``
  and ``GroupNorm`` run the forward ops (``rms_norm``, ``group_norm``) and hand the
  statistics they return to the backward ops as they are.
* Kernels run where the tensors are: CPU tensors on the configured host target (llvm unless
  ``opgen.set_target`` chose another host target), CUDA tensors on the ``cuda`` target.
  Host kernels' parallel loops run on torch's OpenMP threads (``share_host_threads``), so
  that opgen's calls between torch ops do not wait on a second pool fighting for cores.

torch stays optional for opgen's core: only this module imports it (``import torch`` here
is the real torch: absolute imports never resolve to this file).
"""
from __future__ import annotations

import importlib
import importlib.util
from contextlib import contextmanager
import functools
import logging
import sys
import time
from types import SimpleNamespace
from typing import Optional

import torch
from torch import Tensor
from torch.utils._python_dispatch import _get_current_dispatch_mode as _current_dispatch_mode

from opgen import api, config, targets
from opgen.apispec import INPUT, MASK, OUTPUT, python_name
from opgen.ops import all_ops

__all__: list[str] = []


@functools.lru_cache(maxsize=None)
def _dlpack_device_type(device_type: str) -> int:
    """DLPack's device type of torch's ``device_type`` by torch's own DLPack enum (kDLCPU,
    kDLCUDA, ...; found without a device, so a CUDA tensor maps where no GPU is present).
    No table of device names here: each target declares the DLPack types it serves."""
    from torch.utils.dlpack import DLDeviceType

    by_name = {name[len("kDL"):].lower(): int(kind) for name, kind in DLDeviceType.__members__.items()}
    if device_type not in by_name:
        raise ValueError(f"DLPack has no device type {device_type!r}")
    return by_name[device_type]


def _target_for(device: torch.device) -> str:
    """The opgen target for tensors on ``device``: the current target when it serves that
    DLPack device type, else the default target when it does, else the first registered
    target that does (one that can run here first: opgen.targets.serving)."""
    return _target_serving(device.type, config.get_target())


@functools.lru_cache(maxsize=None)
def _target_serving(device_type: str, current_name: str) -> str:
    """_target_for's answer, once per (device type, current target): targets are registered
    on import and never change, and the answer costs microseconds a call otherwise."""
    try:
        kind = _dlpack_device_type(device_type)
    except ValueError as err:                      # no DLPack form (meta, ...)
        raise RuntimeError(f"opgen has no target for tensors on {device_type} devices") from err
    current = targets.get_target(current_name)
    for candidate in (current, targets.default_target()):
        if kind in candidate.dlpack_device_types():
            return candidate.name
    serving = targets.serving(kind)
    if not serving:
        raise RuntimeError(f"no registered opgen target serves {device_type} tensors")
    return serving[0].name


@contextmanager
def _on(device: torch.device):
    """Run one call on the target for ``device``. The common case (CPU tensors, a host
    target selected) changes nothing; otherwise this thread uses that target for the call
    (config.using_target: the process-wide setting is not touched)."""
    wanted = _target_for(device)
    if wanted == config.get_target():
        yield
        return
    with config.using_target(wanted):
        yield


def as_dtype(t: Tensor, dtype: torch.dtype) -> Tensor:
    """``t.to(dtype)`` for the modules' autograd functions: ``t`` itself when it already has
    that dtype, as Tensor.to returns it then, without the 0.7 µs its dispatch costs (a
    small layer's forward and backward make six such calls)."""
    return t if t.dtype == dtype else t.to(dtype)


_ANNOTATION = {"int": "int", "float": "float", "bool": "bool", "ints": "list[int]", "str": "Optional[str]"}


def _annotation(param) -> str:
    if param.role == INPUT:
        return "Optional[Tensor]" if param.optional else "Tensor"
    return "list[bool]" if param.role == MASK else _ANNOTATION[param.value_type]


LOG = logging.getLogger("opgen.torch")
"""The torch layer's logger: the first slow call (a kernel build) says so once per process."""

_FIRST_USE = {"announced": False, "quiet": False}
FIRST_USE_SECONDS = 0.5
"""A first call at a dtype slower than this built kernels (a warm call takes microseconds)."""


def _first_use(op, dtype, seconds: float) -> None:
    """Say once per process that the first call of an op at a new dtype built its kernels,
    and how to pay that ahead (precompile); silent while precompile itself runs."""
    if seconds < FIRST_USE_SECONDS or _FIRST_USE["announced"] or _FIRST_USE["quiet"]:
        return
    _FIRST_USE["announced"] = True
    LOG.warning("opgen built kernels for %s at %s on its first call (%.1f s); every opgen module builds "
                "its kernels on its first call at a new dtype (about 2 s each, once per process and "
                "cached on disk): call opgen.torch.precompile(model, example_input) before training to pay "
                "it ahead (this message is shown once)", op.name, str(dtype).replace("torch.", ""), seconds)


@contextmanager
def _quiet_first_use():
    """No first-use message while precompile builds the kernels on purpose."""
    before, _FIRST_USE["quiet"] = _FIRST_USE["quiet"], True
    try:
        yield
    finally:
        _FIRST_USE["quiet"] = before


_DTYPE_NAMES = {torch.float64: "Double", torch.int64: "Long", torch.int32: "Int", torch.int16: "Short",
                torch.int8: "Char", torch.uint8: "Byte", torch.bool: "Bool", torch.complex64: "ComplexFloat",
                torch.complex128: "ComplexDouble"}
KERNEL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
"""The dtypes opgen's norm kernels take (CANN's combos: no float64, no integers)."""


def refuse_dtype(x: Tensor, kernel: str) -> None:
    """Refuse data opgen has no kernel for the way torch refuses a dtype it has no kernel
    for: NotImplementedError, ``"<kernel>" not implemented for 'Double'`` (torch's
    AT_DISPATCH wording), rather than an AclnnError with an aclnn status code."""
    if x.dtype not in KERNEL_DTYPES:
        name = _DTYPE_NAMES.get(x.dtype, str(x.dtype).replace("torch.", ""))
        raise NotImplementedError(f'"{kernel}" not implemented for \'{name}\' (opgen\'s kernels take float32, '
                                  f'float16 and bfloat16; use torch.nn\'s module for float64)')


def refuse_other_devices(x: Tensor, *params: Tensor | None) -> None:
    """torch's RuntimeError for a module whose parameters or buffers are on another device
    than its input (checked only when they are not all CPU tensors: the common case costs
    two attribute reads a tensor)."""
    if x.is_cpu:
        for p in params:
            if p is not None and not p.is_cpu:
                break
        else:
            return
    for p in params:
        if p is not None and p.device != x.device:
            raise RuntimeError(f"Tensor on device {p.device} is not on the expected device {x.device}!")


def refuse_normalized_shape(x: Tensor, shape: tuple, star: str, least: type = RuntimeError) -> None:
    """torch's RuntimeError for an input whose trailing dims are not ``shape`` (LayerNorm's
    and RMSNorm's wording: ``star`` is "*, " for LayerNorm, "*" for RMSNorm), and, for
    RMSNorm, its ValueError (``least``) for an input with fewer dims than ``shape``."""
    n = len(shape)
    if x.shape[-n:] == shape:    # torch.Size is a tuple; a shorter x gives a shorter slice
        return
    if least is not RuntimeError and x.dim() < n:
        raise least(f"Input tensor must have at least {n} dimensions, but got {x.dim()}")
    listed = ", ".join(str(s) for s in shape)
    raise RuntimeError(f"Given normalized_shape=[{listed}], expected input with shape [{star}{listed}], "
                       f"but got input of size{list(x.shape)}")


def _runner(op):
    """The custom op's real implementation, ``run(values)``: the Pythonic call, on the
    tensors' device, under the current product when it offers the op, else the first that
    does (config.product_for, as opgen compare and bench do: aclnnInstanceNorm ships on Atlas
    inference alone, aclnnGroupNormBackward everywhere but there, and a module runs both).
    The positions of the op's tensor inputs are found once, so a call
    looks only at those. The first call at each dtype is timed: a slow one built kernels
    (_first_use)."""
    positions = tuple(i for i, p in enumerate(api.positional(op)) if p.role == INPUT)
    nothing = (None,) * len(op.outputs)
    seen_dtypes: set = set()
    offered = frozenset(op.products)

    def run(values: tuple) -> tuple:
        if config.get_product() not in offered:    # an op one product family alone ships
            with config.using_product(config.product_for(op)):
                return run(values)
        first, contiguous = None, True
        for i in positions:
            value = values[i]
            if value is not None:
                first = value if first is None else first
                contiguous = contiguous and value.is_contiguous()
        if not contiguous:   # the kernel reads them in place
            values = tuple(v.contiguous() if isinstance(v, Tensor) else v for v in values)
        if first.dtype not in seen_dtypes:
            return _timed_first_call(run, values, first.dtype)
        current = config.get_target()
        # _on's common case without its context manager (a CPU tensor's device type read
        # as is_cpu: 0.05 µs, against 0.3 for device.type)
        if _target_serving("cpu" if first.is_cpu else first.device.type, current) == current:
            outs = api.call_op(op, values, nothing)
        else:
            with _on(first.device):
                outs = api.call_op(op, values, nothing)
        for out in outs:
            if out is None:   # a custom op returns tensors, never None
                return tuple(o if o is not None else first.new_empty((0,)) for o in outs)
        return outs

    def _timed_first_call(run, values: tuple, dtype) -> tuple:
        seen_dtypes.add(dtype)
        start = time.perf_counter()
        try:
            return run(values)
        finally:
            _first_use(op, dtype, time.perf_counter() - start)
    return run


def _plain_eager(values: tuple) -> bool:
    """Whether a call may skip torch's dispatcher: eager (no torch.compile or jit trace, no
    dispatch mode recording ops) on plain tensors (no fake or functional ones)."""
    if torch.compiler.is_compiling() or torch._C._get_tracing_state() is not None:
        return False
    if _current_dispatch_mode() is not None:
        return False
    for v in values:
        if isinstance(v, Tensor) and type(v) not in _PLAIN:
            return False
    return True


_PLAIN = (Tensor, torch.nn.Parameter)     # what eager code holds: no fake or functional wrappers


def _eager_or_traced(op, traced):
    """What ``torch.ops.opgen.<op>`` computes, for the modules' autograd functions: an eager
    call on plain tensors runs the implementation directly (the custom op's dispatch costs
    about 17 us a call, a tenth of a small layer's forward); anything traced goes through
    the custom op, so graphs still record it."""
    run = _runner(op)

    def call(*values):
        return run(values) if _plain_eager(values) else traced(*values)
    call.__name__ = op.name
    return call


def _fake(op, values: tuple) -> tuple:
    """Outputs of the right shape and dtype, from the op's Pythonic allocation rules."""
    params = api.positional(op)
    args = {p.name: v for p, v in zip(params, values)}
    infos = {p.name: None if args.get(p.name) is None else api.TensorInfo.of_torch(args[p.name])
             for p in op.api.tensors(INPUT)}
    pythonic = op.api.pythonic
    for name, derive in pythonic.derived.items():
        args[name] = derive(infos)
    first = next(v for v in values if isinstance(v, Tensor))
    outs = []
    for param in op.api.tensors(OUTPUT):
        wanted = op.api.wanted(param, args)   # as the real op: mask bit or flag
        shape_dtype = pythonic.allocate[param.name](infos, args) if wanted else None
        outs.append(first.new_empty((0,)) if shape_dtype is None else
                    first.new_empty(tuple(shape_dtype[0]), dtype=getattr(torch, shape_dtype[1])))
    return tuple(outs)


def custom_op(op):
    """``torch.ops.opgen.<op>``: a custom op with the Pythonic function's parameters."""
    params = api.positional(op)
    names = [python_name(p) for p in params]
    outputs = ", ".join(["Tensor"] * len(op.outputs))
    source = (f"def {op.name}({', '.join(f'{n}: {_annotation(p)}' for n, p in zip(names, params))}) "
              f"-> tuple[{outputs}]:\n    return _run(({', '.join(names)},))\n"
              f"def fake({', '.join(names)}):\n    return _fake(_op, ({', '.join(names)},))\n")
    namespace = {"_run": _runner(op), "_fake": _fake, "_op": op, "Tensor": Tensor, "Optional": Optional}
    exec(source, namespace)  # noqa: S102 (names are the op's parameter names, checked by opgen.api)
    function = namespace[op.name]
    function.__doc__ = f"opgen's {op.aclnn_name} as a torch custom op: returns ({', '.join(op.outputs)})."
    made = torch.library.custom_op(f"opgen::{op.name}", mutates_args=())(function)
    made.register_fake(namespace["fake"])
    return made


def _export_modules(op) -> None:
    """The op package's torch_module.MODULES, if it has one, as names of this module."""
    if not op.package or importlib.util.find_spec(f"{op.package}.torch_module") is None:
        return
    modules = importlib.import_module(f"{op.package}.torch_module").MODULES
    globals().update(modules)
    __all__.extend(modules)


# ``calls.<op>(...)``: the modules' way in, filled here with the custom ops (torch.compile
# traces through it; a namespace filled lazily would be a side effect inside the trace).
calls = SimpleNamespace()
for _op in all_ops():
    if _op.api is not None and _op.api.pythonic is not None:
        globals()[_op.name] = custom_op(_op)
        __all__.append(_op.name)
        setattr(calls, _op.name, _eager_or_traced(_op, globals()[_op.name]))
for _op in all_ops():
    _export_modules(_op)

# torch's OpenMP pool is loaded now: host targets run their parallel loops on it rather
# than on a second pool whose threads fight torch's for the cores (targets/llvm_threads.py).
for _target in targets.all_targets():
    _target.share_host_threads()

# opgen.torch.apply / precompile: the model-wide swap (its own module, loaded with this one,
# which reads this module's classes from the argument it is given, never by importing it).
from opgen import torch_swap  # noqa: E402
from opgen.torch_swap import SwapReport  # noqa: E402


def apply(model, *, types=None, fuse_group_norm_swish: bool = False) -> SwapReport:
    return torch_swap.apply(model, sys.modules[__name__], types=types, fuse_group_norm_swish=fuse_group_norm_swish)


def precompile(model, *example_inputs, **example_kwargs) -> float:
    return torch_swap.precompile(model, sys.modules[__name__], *example_inputs, **example_kwargs)


apply.__doc__ = torch_swap.apply.__doc__
precompile.__doc__ = torch_swap.precompile.__doc__

__all__ += ["SwapReport", "apply", "precompile"]
