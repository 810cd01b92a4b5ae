"""opgen: backward operators written once in TVM TE, exposed as CANN's aclnn API.

    import opgen
    dx, dgamma = opgen.rms_norm_grad(dy, x, rstd, gamma)
    opgen.set_product("AtlasInference"); opgen.set_target("llvm")
    from opgen import acl, aclnn          # the two-phase API and the runtime calls

``import opgen`` stays light: the settings are plain Python; the API layers load on first
use of the names below, and TVM with the first call that runs a kernel (opgen.lazy).
"""
from __future__ import annotations

from opgen.config import get_product, get_target, set_product, set_target

__all__ = ["set_product", "get_product", "set_target", "get_target", "AclnnError", "acl", "aclnn"]


def __getattr__(name: str):
    """The API layers on first use; ``opgen.<op name>`` is each op's Pythonic function
    (opgen.api generates one per registered op)."""
    import importlib
    import importlib.util

    if name in ("acl", "aclnn"):
        return importlib.import_module(f"opgen.{name}")
    if name.startswith("__"):
        raise AttributeError(name)
    if importlib.util.find_spec(f"opgen.{name}") is not None:
        # ``from opgen import kernel_view`` asks here before importing the submodule: loading
        # opgen.api now, from inside the op registry's discovery, would leave it without the
        # ops not yet registered (its functions are made once, on import).
        raise AttributeError(f"module 'opgen' has no attribute {name!r}")
    api = importlib.import_module("opgen.api")
    if name == "AclnnError" or name in api.FUNCTIONS:
        value = globals()[name] = getattr(api, name)   # later lookups skip this hook (~3 us a call)
        return value
    raise AttributeError(f"module 'opgen' has no attribute {name!r}")
