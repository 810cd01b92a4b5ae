"""Heavy third-party modules, imported on first use.

``import opgen.torch`` generates a custom op per registered op from the op registry and the
targets' declarations; it builds and runs nothing. Yet the modules it reads (the ops' TE
definitions and aclnn rules, the target and schedule modules) name TVM (2 s and more to
import on a 2-core VM), tvm_ffi (which imports torch and ml_dtypes) and ml_dtypes (0.6-1 s:
numpy 2 registers its ufunc loops one by one), all only inside functions that build,
schedule or check. Those modules import the names from here instead:

    from opgen.lazy import te, tvm           # for: from tvm import te / import tvm

and use them as before (``te.compute(...)``). Each is a stand-in module whose every attribute
read imports the real module (the first time) and reads the attribute there, so nothing is
copied: a monkeypatched ``tvm.te.compute`` is what the next read finds. A read costs about
0.3 µs more than a plain module attribute, so the call path (opgen.aclnn, opgen.binding,
opgen.executor, ...) imports TVM plainly and is itself imported by the first call (opgen.api).

A module that needs one of these at import time (tables keyed by TVM classes, sympy
models) imports it plainly and is loaded lazily itself (OpSpec.model). ``sys.modules`` holds
a real module only once something read through it (tests/test_import_cost.py).
"""
from __future__ import annotations

import importlib
import sys
import types

_getattribute = types.ModuleType.__getattribute__


class LazyModule(types.ModuleType):
    """The module named ``name``, imported on the first attribute read (see above)."""

    def __getattribute__(self, attr: str):
        name = _getattribute(self, "__name__")
        real = sys.modules.get(name)
        if real is None:
            real = importlib.import_module(name)
        return getattr(real, attr)

    def __repr__(self) -> str:
        name = _getattribute(self, "__name__")
        return f"<module {name!r} ({'imported' if name in sys.modules else 'not imported yet'}; opgen.lazy)>"


tvm = LazyModule("tvm")
te = LazyModule("tvm.te")
tirx = LazyModule("tvm.tirx")
s_tir = LazyModule("tvm.s_tir")
tvm_ffi = LazyModule("tvm_ffi")
ml_dtypes = LazyModule("ml_dtypes")
