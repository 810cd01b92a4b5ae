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


# ---- the caller's arrays: dtype by dtype, C-contiguity, for numpy and torch alike -----------------

BF16_DOC = {**DOC, "params": [{**p, "dtype": "bfloat16"} if p["role"] == "input" else p for p in DOC["params"]]}
F16_DOC = {**DOC, "params": [{**p, "dtype": "float16"} if p["role"] == "input" else p for p in DOC["params"]]}


def test_a_dtype_is_checked_by_name_not_by_size(tmp_path):
    """bfloat16 and float16 are both 2 bytes: neither passes as the other; bfloat16 may come
    as its uint16 bits (CuPy has none), float16 may not."""
    import ml_dtypes

    out = np.zeros(5, np.float32)
    for doc, given, ok in [(F16_DOC, np.float16, True), (F16_DOC, ml_dtypes.bfloat16, False),
                           (F16_DOC, np.uint16, False), (BF16_DOC, ml_dtypes.bfloat16, True),
                           (BF16_DOC, np.uint16, True), (BF16_DOC, np.float16, False)]:
        plan, backend = plans.parse(doc, tmp_path), Recording()
        arrays = [np.zeros((5, 300), given), out]
        if ok:
            plans.run(plan, arrays, backend)
            assert backend.calls[-1][0] == "finish", (doc is F16_DOC, given)
        else:
            with pytest.raises(PlanError, match="elements, the kernel takes"):
                plans.run(plan, arrays, backend)
            assert not backend.calls


def test_torch_tensors_are_checked_by_dtype_and_layout_like_numpy_arrays(tmp_path):
    torch = pytest.importorskip("torch")
    plan = plans.parse(BF16_DOC, tmp_path)
    good = [torch.zeros((5, 300), dtype=torch.bfloat16), torch.zeros(5, dtype=torch.float32)]
    assert plans.refusal(plan, good) is None
    assert "float16 elements" in plans.refusal(plan, [good[0].to(torch.float16), good[1]])
    transposed = torch.zeros((300, 5), dtype=torch.bfloat16).t()       # the right shape, column-major
    assert "not C-contiguous" in plans.refusal(plan, [transposed, good[1]])
    every_other = torch.zeros((5, 600), dtype=torch.bfloat16)[:, ::2]
    assert "not C-contiguous" in plans.refusal(plan, [every_other, good[1]])
    assert plans.refusal(plan, [torch.zeros((1, 300), dtype=torch.bfloat16).expand(5, 300), good[1]])   # stride 0
    plans.run(plan, good, Recording())


def test_numpy_views_that_are_not_c_contiguous_are_refused(tmp_path):
    plan = plans.parse(DOC, tmp_path)
    out = np.zeros(5, np.float32)
    assert plans.refusal(plan, [np.zeros((5, 300), np.float32), out]) is None
    assert plans.refusal(plan, [np.zeros((0, 600), np.float32)[:, ::2], np.zeros(0, np.float32)]) is None  # empty
    for bad in (np.zeros((300, 5), np.float32).T, np.zeros((5, 600), np.float32)[:, ::2],
                np.zeros((10, 300), np.float32)[::2], np.asfortranarray(np.zeros((5, 300), np.float32))):
        assert "not C-contiguous" in plans.refusal(plan, [bad, out]), bad.strides
        with pytest.raises(PlanError, match="not C-contiguous"):
            plans.run(plan, [bad, out], Recording())
    # extent-1 axes may carry any stride, as numpy's own flag says
    single = np.zeros((1, 300), np.float32)[:, :]
    assert plans.is_contiguous(np.lib.stride_tricks.as_strided(single, (1, 300), (12345 * 4, 4)))


# ---- a kernel's variants: the selection rule in the plan, the runner's choice -----------------------

VARIANT = {**DOC, "variant": "vector",
           "requires": {"when": ["0 < v0", "0 < v1", "v1 % 4 == 0"], "aligned": [{"param": 0, "bytes": 16}]}}


def _family(tmp_path):
    base = tmp_path / "plan.json"
    base.write_text(json.dumps({**DOC, "variant": "default", "variants": ["vector"]}))
    (tmp_path / "vector").mkdir()
    (tmp_path / "vector" / "plan.json").write_text(json.dumps(VARIANT))
    return plans.load_family(base)


def _at(offset_bytes: int, shape, dtype=np.float32):
    """An array starting ``offset_bytes`` past a 64-byte boundary."""
    from opgen.runtime.check import aligned
    return aligned(shape, dtype, 0, offset_bytes)


def test_the_runner_picks_the_variant_only_for_calls_its_rule_admits(tmp_path):
    family = _family(tmp_path)
    assert [p.doc["variant"] for p in family] == ["vector", "default"]
    out = np.zeros(5, np.float32)
    chosen = lambda x: plans.choose(family, [x, out]).doc["variant"]   # noqa: E731
    assert chosen(_at(0, (5, 300))) == "vector"                       # aligned, 300 % 4 == 0
    assert chosen(_at(16, (5, 300))) == "vector"
    assert chosen(_at(4, (5, 300))) == "default"                      # misaligned by one element
    assert chosen(_at(0, (5, 302))) == "default"                      # a row length the lanes do not divide
    assert chosen(_at(0, (5, 2))) == "default"                        # a short row
    assert plans.choose(family, [_at(0, (0, 300)), np.zeros(0, np.float32)]).doc["variant"] == "default"
    # forced, the variant refuses what it cannot take, before any launch
    for x, why in [(_at(4, (5, 300)), "16-byte aligned"), (_at(0, (5, 302)), "v1 % 4 == 0")]:
        backend = Recording()
        with pytest.raises(PlanError, match=why):
            plans.run(family[0], [x, np.zeros(5, np.float32)], backend)
        assert not backend.calls


@pytest.mark.parametrize("change,match", [
    (lambda d: d.__setitem__("requires", {"when": ["__import__('os')"]}), "refused"),
    (lambda d: d.__setitem__("requires", {"aligned": [{"param": 2, "bytes": 16}]}), "alignment"),   # workspace
    (lambda d: d.__setitem__("requires", {"aligned": [{"param": 9, "bytes": 16}]}), "alignment"),
    (lambda d: d.__setitem__("requires", {"when": "v1 % 4 == 0"}), "conditions"),
    (lambda d: d.__setitem__("requires", {"unknown": 1}), "bad requires"),
    (lambda d: d.__setitem__("variants", ["../elsewhere"]), "plain sub-folder"),
])
def test_a_malformed_selection_rule_is_refused_at_load(change, match, tmp_path):
    doc = copy.deepcopy(VARIANT)
    change(doc)
    with pytest.raises(PlanError, match=match):
        plans.parse(doc, tmp_path)


def test_a_prepared_call_launches_again_without_binding_allocating_or_finishing(tmp_path):
    """What scripts/export_bench.py times: ``prepare`` binds, allocates the workspace and
    packs every argument once; each ``launch`` then only enqueues the same kernels."""
    plan = plans.parse(DOC, tmp_path)
    backend = Recording()
    call = plans.prepare(plan, [np.zeros((5, 300), np.float32), np.zeros(5, np.float32)], backend)
    setup = list(backend.calls)
    for _ in range(3):
        call.launch()
    launches = backend.calls[len(setup):]
    assert [c[0] for c in setup] == ["alloc"] and [c[0] for c in launches] == ["k0", "k1"] * 3
    assert launches[:2] == launches[2:4] == launches[4:]
    call.finish()
    assert backend.calls[-1] == ("finish", [False, True])


def test_the_checker_reports_a_plan_it_cannot_run_and_goes_on_to_the_others(tmp_path, capsys):
    """One plan whose code no backend runs is a CANNOT RUN row and exit 2, after the others
    (on a GPU machine one bad folder must not hide the rest of the golden check)."""
    from opgen.runtime import check
    doc = copy.deepcopy(DOC)
    doc["code"]["language"] = "nope"
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "plan.json").write_text(json.dumps(doc))
    assert check.main([str(tmp_path)]) == 2
    out = capsys.readouterr().out
    assert [line.split()[:2] for line in out.splitlines()] == [["CANNOT", "RUN"]] * 2, out
    assert "no backend for code language 'nope'" in out
