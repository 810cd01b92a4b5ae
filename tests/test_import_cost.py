"""What importing opgen loads: nothing that builds or runs a kernel (issue 34).

``import opgen.torch`` generates the custom ops and modules from the registries; TVM, its
FFI (which imports ml_dtypes), ml_dtypes, sympy and the targets' toolchains load on the first
call that needs them (opgen.lazy, opgen.api's call machinery, OpSpec.model). This checks
which modules a fresh interpreter holds after each import, not how long it took: timings
are benchmarks/import_time.py's (docs/per-call-cost.md, "Import time").
"""
from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("tvm", "tvm_ffi", "ml_dtypes", "sympy", "pyopencl", "iree", "torch", "numpy")

# One fresh interpreter, three steps: the third-party packages of HEAVY held after each.
STEPS = """
import json, sys
def held():
    return sorted({m.split(".")[0] for m in sys.modules} & set(HEAVY))
import opgen
steps = {"import opgen": held()}
opgen.rms_norm_grad             # opgen.api: every op's function, made from the registry
steps["opgen.rms_norm_grad"] = held()
try:
    import torch
except ImportError:
    pass
else:
    import opgen.torch
    steps["import opgen.torch"] = held()
print(json.dumps(steps))
"""


def test_importing_opgen_loads_no_kernel_machinery(tmp_path):
    done = subprocess.run([sys.executable, "-c", f"HEAVY = {HEAVY!r}\n{STEPS}"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    steps = json.loads(done.stdout.strip().splitlines()[-1])
    assert steps["import opgen"] == []
    assert steps["opgen.rms_norm_grad"] == ["numpy"]               # no torch: it stays optional
    assert steps.get("import opgen.torch", ["numpy", "torch"]) == ["numpy", "torch"]


def test_every_ops_function_whatever_is_imported_first(tmp_path):
    """The op registry imported before opgen's functions (a script that imports an op's
    reference first): an op package's ``from opgen import <submodule>`` asked opgen's
    ``__getattr__``, which made opgen.api's functions in the middle of the registry's
    discovery, from the ops registered so far (none): ``opgen.group_norm`` was missing."""
    code = ("import opgen.ops.group_norm.reference\nimport opgen\nfrom opgen.ops import all_ops\n"
            "print(sorted(op.name for op in all_ops() if op.api and op.api.pythonic and not hasattr(opgen, op.name)))")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
