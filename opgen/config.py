"""Process-wide settings of the API layers: which product's rules apply, where kernels run.

Both default from the environment (``OPGEN_PRODUCT``, ``OPGEN_TARGET``) and can be changed
with ``opgen.set_product`` / ``opgen.set_target``. They are read at GetWorkspaceSize time:
an executor keeps the product and target it was planned for, so changing a setting never
affects an executor already handed out.
"""
from __future__ import annotations

import contextlib
import os
import threading

from opgen.products import DEFAULT_PRODUCT, PRODUCTS  # noqa: F401  (re-exported: the seeds' product names)


class _ThreadSettings(threading.local):
    target: str | None = None     # using_target's override; a class default reads in 0.03 µs (getattr: 0.35)
    product: str | None = None    # using_product's override


_lock = threading.Lock()
_thread = _ThreadSettings()
# os.environ.get of an unset name costs 0.65 µs (a KeyError raised and caught inside the
# Mapping); every aclnn call reads two settings. On POSIX, os.environ is a view of this
# bytes-keyed dict, which answers in 0.05 µs and sees every change made through os.environ
# (and pytest's monkeypatch). Elsewhere, the plain read.
_ENV_BYTES = os.environ._data if os.name == "posix" and isinstance(getattr(os.environ, "_data", None), dict) \
    else None


def _environment(name: str) -> str | None:
    if _ENV_BYTES is None:
        return os.environ.get(name)
    value = _ENV_BYTES.get(name.encode())
    return None if value is None else os.fsdecode(value)
_state: dict[str, str | None] = {"product": None, "target": None}


def check_product(name: str) -> str:
    """``name`` when it is a known product; ValueError naming the known ones otherwise."""
    if name not in PRODUCTS:
        raise ValueError(f"unknown product {name!r}; known: {', '.join(PRODUCTS)}")
    return name


def set_product(name: str) -> None:
    """Select the product whose documented dtype and shape rules the aclnn layer enforces."""
    check_product(name)
    with _lock:
        _state["product"] = name


def get_product() -> str:
    """The current product: using_product's, set_product's, else $OPGEN_PRODUCT, else Ascend950."""
    override = _thread.product
    if override is not None:
        return override
    chosen = _state["product"]   # a dict read is atomic; the lock guards writers (every call reads this)
    return chosen if chosen is not None else _environment_product()


@contextlib.contextmanager
def using_product(name: str):
    """Within the block, calls made by this thread follow product ``name``'s rules; other
    threads and the process-wide setting are untouched."""
    check_product(name)
    previous = _thread.product
    _thread.product = name
    try:
        yield
    finally:
        _thread.product = previous


def product_for(op) -> str:
    """The current product when it offers ``op``, else the first product that does. The tools
    that go over every op (compare, bench) run each on a product whose rules admit it: an
    op one product family alone ships (aclnnFastBatchNormBackward: Atlas A2) is measured
    too, not reported as 0 rows, and the tool says which product it used."""
    current = get_product()
    return current if current in op.products else next(iter(op.products))


def _environment_product() -> str:
    name = _environment("OPGEN_PRODUCT") or DEFAULT_PRODUCT
    if name not in PRODUCTS:
        raise ValueError(f"OPGEN_PRODUCT={name!r} is not a product; known: {', '.join(PRODUCTS)}")
    return name


def set_target(name: str) -> None:
    """Select where kernels run (a registered target name: llvm, cuda, ascend-emu, ...)."""
    from opgen.targets import get_target as lookup

    lookup(name)  # raises KeyError with the registered names
    with _lock:
        _state["target"] = name


@contextlib.contextmanager
def using_target(name: str):
    """Within the block, calls made by this thread run on target ``name``; other threads and
    the process-wide setting are untouched (opgen.torch runs CUDA tensors on cuda this way)."""
    from opgen.targets import get_target as lookup

    lookup(name)  # raises KeyError with the registered names
    previous = _thread.target
    _thread.target = name
    try:
        yield
    finally:
        _thread.target = previous


def get_target() -> str:
    """The current target name: using_target's, set_target's, else $OPGEN_TARGET, else the
    default target (llvm, the host CPU)."""
    override = _thread.target
    if override is not None:
        return override
    chosen = _state["target"]
    return chosen if chosen is not None else _environment_target()


def _environment_target() -> str:
    return _environment("OPGEN_TARGET") or _default_target()


_default: list = []


def _default_target() -> str:
    """The name of the registered target marked ``default`` (opgen.targets), looked up once:
    this module names no target, and imports TVM only when a call needs a target."""
    if not _default:
        from opgen.targets import default_target

        _default.append(default_target().name)
    return _default[0]


def context() -> tuple[str, str]:
    """(product, target): what every aclnn call plans for, read in one go (0.2 µs warm;
    few function calls, because right after another library's op has evicted the caches
    each function a call touches costs microseconds)."""
    thread = _thread
    product, target = thread.product or _state["product"], thread.target or _state["target"]
    return (product if product is not None else _environment_product(),
            target if target is not None else _environment_target())


def reset() -> None:
    """Forget set_product/set_target so the environment decides again (tests use this)."""
    with _lock:
        _state["product"] = None
        _state["target"] = None
