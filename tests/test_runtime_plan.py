"""The launch-plan runner (opgen.runtime): no TVM behind it, and a plan from disk is data.

A plan read from disk could have been edited by someone else, so its expressions are
interpreted over a whitelist, never eval()'d: each malicious expression below must be
refused when the plan is loaded, and must not run (the marker file never appears). The
numerics of the shared run logic are tested by replaying exported plans on a device
(tests/test_export.py); here, the logic alone, through a backend that records its calls.
"""
from __future__ import annotations

import copy
import json
import subprocess
import sys

import numpy as np
import pytest

from opgen.runtime import plan as plans
from opgen.runtime.expr import Expr, PlanError

DOC = {
    "format": plans.FORMAT, "code": {"language": "opencl-c", "source": "kernel.cl"},
    "params": [{"name": "x", "role": "input", "dtype": "float32", "shape": ["v0", "v1"]},
               {"name": "y", "role": "output", "dtype": "float32", "shape": ["v0"]},
               {"name": "ws", "role": "workspace", "dtype": "float32", "shape": ["((v1 + 255) // 256)", "v0"]}],
    "shape_vars": [{"name": "v0", "param": 0, "axis": 0}, {"name": "v1", "param": 0, "axis": 1}],
    "binds": [{"name": "v2", "expr": "v0 * v1"}],
    "kernels": [{"name": "k0", "guard": "(0 < v2)", "grid": ["v0", "1", "1"], "block": ["256", "1", "1"],
                 "args": [{"param": 0}, {"param": 2}, {"scalar": "int64", "expr": "v2"},
                          {"scalar": "float32", "expr": "f32((1.0 / v1))"}]},
                {"name": "k1", "guard": "1", "grid": ["((v1 + 255) // 256)", "1", "1"], "block": ["256", "1", "1"],
                 "args": [{"param": 2}, {"param": 1}]}],
}


class Recording:
    """A backend that records what it is asked (the logic only; no numerics)."""

    def __init__(self):
        self.calls = []

    def bind(self, arrays):
        return [f"array{i}" for i in range(len(arrays))]

    def alloc(self, nbytes):
        self.calls.append(("alloc", nbytes))
        return f"ws{nbytes}"

    def scalar(self, dtype, value):
        return (dtype, value)

    def launch(self, name, grid, block, args):
        self.calls.append((name, grid, block, args))

    def finish(self, arrays, handles, outputs):
        self.calls.append(("finish", outputs))


def test_expressions_in_the_whitelist_evaluate_as_python_would():
    env = {"v0": 7, "v1": 300}
    cases = {"((v1 + 255) // 256)": 2, "min(v0, 3)": 3, "max(v0, v1) % 7": 6, "(0 < v0) and (v1 <= 300)": 1,
             "v0 if v1 > 2 else -v0": 7, "not v0": 0, "int(2.5)": 2, "v0 - v1 * 2": -593, "1 < v0 < 9": 1,
             "(v0 == 7) or (v1 != 1)": 1, "f32((1.0 / v1))": float(np.float32(1.0 / 300))}
    for text, expected in cases.items():
        assert Expr(text, env)(env) == expected, text
    assert isinstance(Expr("float(v0) / 2", env)(env), float)


MALICIOUS = [
    "__import__('os').system('touch {marker}')",
    "open('{marker}', 'w')",
    "exec(\"open('{marker}', 'w')\")",
    "().__class__.__base__.__subclasses__()",
    "f32.__globals__",
    "v0.real",
    "e['v0']",
    "[v0 for v0 in range(10 ** 9)]",
    "v0 ** 99999999",
    "(lambda: open('{marker}', 'w'))()",
    "min(*[v0, v0])",
    "max(v0, v0, key=print)",
    "'{marker}'",
    "v0 if __import__('os') else 1",
    "(x := 1)",
    "v0; import os",
    "(" * 5000 + "v0" + ")" * 5000,
    "1 + " * 3000 + "1",
    "undeclared_name + 1",
]


@pytest.mark.parametrize("text", MALICIOUS)
def test_a_malicious_expression_is_refused_and_never_runs(text, tmp_path):
    marker = tmp_path / "marker"
    with pytest.raises(PlanError):
        Expr(text.format(marker=marker), {"v0"})
    assert not marker.exists()


@pytest.mark.parametrize("where", ["grid", "guard", "bind", "shape", "scalar"])
def test_a_plan_with_a_malicious_expression_is_refused_at_load(where, tmp_path):
    marker = tmp_path / "marker"
    evil = f"__import__('os').system('touch {marker}')"
    doc = copy.deepcopy(DOC)
    target = {"grid": lambda: doc["kernels"][0]["grid"].__setitem__(0, evil),
              "guard": lambda: doc["kernels"][0].__setitem__("guard", evil),
              "bind": lambda: doc["binds"][0].__setitem__("expr", evil),
              "shape": lambda: doc["params"][2]["shape"].__setitem__(0, evil),
              "scalar": lambda: doc["kernels"][0]["args"][2].__setitem__("expr", evil)}
    target[where]()
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(PlanError, match="refused"):
        plans.load(path)
    assert not marker.exists()


@pytest.mark.parametrize("change,match", [
    (lambda d: d.__setitem__("format", "opgen-launch-plan/0"), "format"),
    (lambda d: d["code"].__setitem__("source", "../../etc/passwd"), "plain file name"),
    (lambda d: d["code"].__setitem__("archs", {"sm_90": {"cubin": "/tmp/evil.cubin"}}), "plain file name"),
    (lambda d: d["binds"].__setitem__(0, {"name": "__class__", "expr": "1"}), "variable name"),
    (lambda d: d["kernels"][0]["args"].__setitem__(0, {"param": 9}), "bad argument"),
    (lambda d: d["params"][0].__setitem__("dtype", "object"), "bad parameter"),
])
def test_a_malformed_plan_is_refused_with_the_reason(change, match, tmp_path):
    doc = copy.deepcopy(DOC)
    change(doc)
    with pytest.raises(PlanError, match=match):
        plans.parse(doc, tmp_path)


def test_the_shared_run_logic_sizes_launches_and_workspace_and_skips_empty_ones(tmp_path):
    plan = plans.parse(DOC, tmp_path)
    backend = Recording()
    plans.run(plan, [np.zeros((5, 300), np.float32), np.zeros(5, np.float32)], backend)
    ws_bytes = 2 * 5 * 4
    assert backend.calls == [
        ("alloc", ws_bytes),
        ("k0", (5, 1, 1), (256, 1, 1), ["array0", f"ws{ws_bytes}", ("int64", 1500), ("float32", float(np.float32(1 / 300)))]),
        ("k1", (2, 1, 1), (256, 1, 1), [f"ws{ws_bytes}", "array1"]),
        ("finish", [False, True])]
    backend = Recording()
    plans.run(plan, [np.zeros((0, 300), np.float32), np.zeros(0, np.float32)], backend)
    assert [c[0] for c in backend.calls] == ["alloc", "k1", "finish"]     # k0: guard false; k1 runs
    backend = Recording()
    plans.run(plan, [np.zeros((3, 0), np.float32), np.zeros(3, np.float32)], backend)
    assert [c[0] for c in backend.calls] == ["alloc", "finish"]           # k1's grid is 0: not launched


def test_arrays_that_do_not_fit_the_kernel_are_refused_before_any_launch(tmp_path):
    plan = plans.parse(DOC, tmp_path)
    for arrays, match in [([np.zeros((5, 3), np.float32), np.zeros(4, np.float32)], "shape"),
                          ([np.zeros((5, 3), np.float32)], "takes 2 arrays"),
                          ([np.zeros(5, np.float32), np.zeros(5, np.float32)], "dimensions"),
                          ([np.zeros((5, 3), np.float64), np.zeros(5, np.float32)], "elements")]:
        backend = Recording()
        with pytest.raises(PlanError, match=match):
            plans.run(plan, arrays, backend)
        assert not backend.calls


def test_the_runner_imports_no_tvm_and_no_compiler_layer():
    """Run where TVM cannot even be imported: the GPU machine has none."""
    code = ("import sys; sys.modules['tvm'] = None; sys.modules['tvm_ffi'] = None\n"
            "import opgen.runtime.plan, opgen.runtime.backends, opgen.runtime.check, opgen.runtime.expr\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('tvm', 'tvm_ffi') and sys.modules[m]\n"
            "             or m.startswith(('opgen.targets', 'opgen.schedules', 'opgen.kernels', 'opgen.ops')))\n"
            "assert not bad, bad\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_a_missing_device_api_is_a_clear_error(tmp_path, monkeypatch):
    from opgen.runtime import backends

    doc = copy.deepcopy(DOC)
    doc["code"] = {"language": "ptx", "archs": {"sm_90": {"ptx": "kernel.sm_90.ptx"}}}
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(backends.BackendMissing, match="CuPy is not installed"):
        backends.for_plan(plans.parse(doc, tmp_path))
    doc["code"] = {"language": "python"}
    with pytest.raises(PlanError, match="no backend"):
        backends.for_plan(plans.parse(doc, tmp_path))


def test_the_cuda_backend_loads_the_devices_cubin_else_the_newest_older_ptx(tmp_path):
    from opgen.runtime import backends

    doc = copy.deepcopy(DOC)
    doc["code"] = {"language": "ptx", "archs": {a: {"ptx": f"k.{a}.ptx", "cubin": f"k.{a}.cubin"}
                                                for a in ("sm_80", "sm_90")}}
    plan = plans.parse(doc, tmp_path)
    pick = backends.CupyBackend._code_path
    assert pick(plan, 90).name == "k.sm_90.cubin" and pick(plan, 80).name == "k.sm_80.cubin"
    assert pick(plan, 86).name == "k.sm_80.ptx" and pick(plan, 100).name == "k.sm_90.ptx"
    with pytest.raises(backends.BackendMissing, match="no code for sm_75"):
        pick(plan, 75)
