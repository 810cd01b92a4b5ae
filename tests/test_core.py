"""The core's seams: the declared target protocol, the one knob resolver, kernel selection.

* No core module probes a target with getattr/hasattr or names one: what opgen asks of a
  target is declared on TargetSpec, with defaults that a minimal target gets.
* A call's knobs come from one resolver (defaults, problem-size defaults, the best valid
  tuned record) and its kernel is scheduled exactly once.
* ``opgen explain`` and ``OPGEN_LOG=kernels`` say which kernel a call runs and why.
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import tvm

from opgen import aclnn, cli, kernels, schedules, selection
from opgen.ops import get_op
from opgen.ops.group_norm_backward import Problem as GNProblem
from opgen.ops.rms_norm_grad import Problem as RMSProblem
from opgen.schedules.llvm import GroupedRowPass, RowPassWithColumnSums
from opgen.targets import TargetSpec, all_targets, get_target
from opgen.targets.llvm import LlvmTarget
from opgen.tune import database, lookup

from aclnn_helpers import assert_matches, base_args, run_both

REPO = Path(__file__).resolve().parent.parent
RMS, GN = get_op("rms_norm_grad"), get_op("group_norm_backward")
LLVM = get_target("llvm")

# ---- the target protocol -----------------------------------------------------------------

# String literals equal to a target's name that are not about targets: torch's device
# names (torch.device("cuda")), which opgen.torch and the baselines must spell.
TORCH_DEVICE_NAMES = {("opgen/torch.py", "cuda"), ("opgen/baselines.py", "cuda"), ("opgen/ops/spec.py", "cuda")}


def _peer_devices(tree) -> set:
    """ids of the constants in a ``devices=`` argument (Peer.devices: torch device types, in
    any op's peers.py), which name torch's devices, not opgen's targets."""
    return {id(const) for call in ast.walk(tree) if isinstance(call, ast.Call)
            for kw in call.keywords if kw.arg == "devices"
            for const in ast.walk(kw.value) if isinstance(const, ast.Constant)}


def _core_files():
    return sorted((REPO / "opgen").rglob("*.py"))


def _docstrings(tree) -> set:
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef,
                                                                  ast.AsyncFunctionDef)))]
    return {id(n.body[0].value) for n in nodes if n.body and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)}


def test_core_code_names_no_target_and_probes_none():
    names = {t.name for t in all_targets()} | {t.schedule_module for t in all_targets() if t.schedule_module}
    named, probes = [], []
    for path in _core_files():
        relative = path.relative_to(REPO).as_posix()
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree) | _peer_devices(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in names and id(node) not in docs \
                    and (relative, node.value) not in TORCH_DEVICE_NAMES:
                named.append(f"{relative}:{node.lineno} {node.value!r}")
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "hasattr") \
                    and node.args and "target" in ast.unparse(node.args[0]).lower():
                probes.append(f"{relative}:{node.lineno} {ast.unparse(node)}")
    assert not named, f"target names in core code: {named}"
    assert not probes, f"targets probed instead of asked through the protocol: {probes}"


@dataclass(frozen=True)
class MinimalTarget(TargetSpec):
    """Only what a target must say: its TVM target, device, whether it runs, how it builds."""

    def tvm_target(self):
        return LLVM.tvm_target()

    def device(self):
        return tvm.cpu(0)

    def can_run(self) -> bool:
        return True

    def build(self, mod):
        return tvm.compile(mod, target=self.tvm_target()).mod


MINIMAL = MinimalTarget(name="minimal-toy", description="llvm through the protocol's defaults",
                        schedule_rules="llvm")


def test_a_minimal_target_gets_every_default_and_runs_through_generate(tmp_path, rng):
    assert MINIMAL.missing() is None and MINIMAL.can_build() and MINIMAL.run_place() == "here"
    assert MINIMAL.dlpack_device_types() == (1,) and MINIMAL.cost_model() is None
    assert MINIMAL.hardware_key() == {"tvm": str(LLVM.tvm_target())}
    assert MINIMAL.for_product("AtlasA2") is MINIMAL and MINIMAL.tools == () and not MINIMAL.default
    assert MINIMAL.simulated() is None
    kernel = kernels.get_kernel(RMS, RMS.combo("f32-f32"), MINIMAL)
    assert MINIMAL.source_of(kernel.module) is None and MINIMAL.artifacts(kernel.module) == {}
    assert MINIMAL.scratch_of(kernel.module) is None and MINIMAL.compile_check(kernel.module) is None
    row = cli.generate_one(RMS, RMS.combo("f32-f32"), MINIMAL, tmp_path, rng)
    assert row.verdict == "PASS" and row.note == "", row
    assert sorted(p.name for p in (tmp_path / "minimal-toy" / RMS.name / "f32-f32").iterdir()) == \
        ["kernel.so", "kernel.tir.py"]


def test_every_registered_target_answers_the_protocol():
    for target in all_targets():
        assert isinstance(target.can_build(), bool) and isinstance(target.run_place(), str)
        assert target.missing() is None or isinstance(target.missing(), str)
        assert all(isinstance(t, int) for t in target.dlpack_device_types())
        json.dumps(target.hardware_key())
        assert target.schedule_module is None or isinstance(target.schedule_module, str)
        simulated = target.simulated()
        assert simulated is None or (isinstance(simulated, type(target)) and simulated.simulated() == simulated)
    assert [t.name for t in all_targets() if t.default] == ["llvm"]
    assert get_target("ascend-emu").cost_model() is not None and get_target("ascend-emu").tools
    assert get_target("cuda").dlpack_device_types() == (2,)


def test_a_field_added_to_a_target_class_keeps_its_tuning_records():
    @dataclass(frozen=True)
    class Grown(LlvmTarget):
        some_new_protocol_field: int = 3

    grown = Grown(name="llvm", description="llvm with one more field", default=True)
    assert database.hardware_of(grown) == database.hardware_of(LLVM)


def test_a_target_without_schedule_rules_builds_its_function_unscheduled():
    bare = MinimalTarget(name="bare-toy", description="no rules", schedule_rules=None)
    assert schedules.rules_of(bare) == [] and kernels.matching_rule(RMS, RMS.combo("f32-f32"), bare) is None
    mod, symbol = kernels.scheduled_module(RMS, RMS.combo("f32-f32"), bare)
    assert symbol in mod.script() and "T.parallel" not in mod.script()
    with pytest.raises(schedules.InvalidKnobs, match="no schedule rules"):
        kernels.kernel_point(RMS, RMS.combo("f32-f32"), bare, {"parallel": False})


def test_torch_tensors_run_on_a_target_serving_their_device(monkeypatch):
    torch = pytest.importorskip("torch")
    from opgen import config
    from opgen import torch as opgen_torch

    assert opgen_torch._target_for(torch.device("cpu")) == config.get_target()
    assert opgen_torch._target_for(torch.device("cuda", 0)) == "cuda"
    monkeypatch.setenv("OPGEN_TARGET", "cuda")      # a CUDA target cannot take CPU tensors
    assert opgen_torch._target_for(torch.device("cpu")) == "llvm"


# ---- one resolver, one schedule per kernel --------------------------------------------------

@pytest.fixture
def counted_schedules(monkeypatch):
    """Calls of the CPU rules' ``schedule`` (the scheduling itself; matching reads blocks)."""
    calls = []
    for rule in (RowPassWithColumnSums, GroupedRowPass):
        real = rule.schedule

        def counting(self, sch, matched, target, knobs, _real=real):
            calls.append(type(self).__name__)
            return _real(self, sch, matched, target, knobs)
        monkeypatch.setattr(rule, "schedule", counting)
    return calls


@pytest.fixture
def cold_kernels(monkeypatch, tmp_path):
    """No kernel built yet in memory or on disk, no cached plan, an empty tuning database."""
    monkeypatch.setenv("OPGEN_DISK_CACHE", "0")
    monkeypatch.setenv("OPGEN_TUNE_DB", str(tmp_path / "tuning.jsonl"))
    kernels.clear_memory_cache()
    lookup.reload()
    yield tmp_path / "tuning.jsonl"
    kernels.clear_memory_cache()
    lookup.reload()


def _record(op, shapes, knobs, median=1.0, target=LLVM, combo="f32-f32") -> dict:
    return {"op": op.name, "combo": combo, "target": target.name, "hardware": database.hardware_of(target),
            "bucket": database.bucket_for(op, shapes), "engine": database.TEMPLATE, "knobs": knobs,
            "status": database.OK, "median_ms": median, "times_ms": [median]}


@pytest.mark.parametrize("tuned", [False, True], ids=["untuned", "tuned"])
def test_a_call_schedules_its_kernel_exactly_once(tuned, counted_schedules, cold_kernels, rng):
    rms_problem, gn_problem = RMSProblem((96, 300), 1), GNProblem(2, 8, 20, 2)
    if tuned:
        database.append(cold_kernels, _record(RMS, RMS.api.kernel_shapes(rms_problem), {"rows_per_chunk": 16}))
        lookup.reload()
    for op, problem, rule in ((RMS, rms_problem, "RowPassWithColumnSums"), (GN, gn_problem, "GroupedRowPass")):
        args, arrays = base_args(op, problem, op.combo("f32-f32"), rng)
        before = len(counted_schedules)
        assert run_both(op, args)[0] == 0
        assert counted_schedules[before:] == [rule], "one schedule for one new kernel"
        assert_matches(op, op.combo("f32-f32"), problem, arrays, args)
        again, _ = base_args(op, problem, op.combo("f32-f32"), rng)
        assert run_both(op, again)[0] == 0 and len(counted_schedules) == before + 1, "a warm call schedules nothing"


def test_the_resolver_takes_the_best_valid_record_and_says_why_it_refused_the_others():
    shapes = RMS.api.kernel_shapes(RMSProblem((64, 1000), 1))
    func = kernels.prim_func(RMS, RMS.combo("f32-f32"))
    tuned = [{"knobs": {"rows_per_chunk": [128]}, "_source": "db:1"},        # a list value
             {"knobs": {"rows_per_chunkz": 128}, "_source": "db:2"},         # no such knob
             {"knobs": {"rows_per_chunk": 3}, "_source": "db:3"},            # outside the domain
             {"knobs": {"parallel": 1}, "_source": "db:4"},                  # an int is not a bool
             {"knobs": ["rows_per_chunk", 128], "_source": "db:5"},          # not a mapping
             {"knobs": {"rows_per_chunk": 256}, "_source": "db:6"},
             {"knobs": {"rows_per_chunk": 8}, "_source": "db:7"}]
    resolution = schedules.resolve(func, LLVM, shapes, tuned)
    assert resolution.record is tuned[5] and resolution.knobs["rows_per_chunk"] == 256
    assert resolution.sources["rows_per_chunk"] == "tuned db:6" and resolution.sources["parallel"] == "default"
    reasons = [why for _, why in resolution.refused]
    assert [r["_source"] for r, _ in resolution.refused] == ["db:1", "db:2", "db:3", "db:4", "db:5"]
    assert "outside its domain" in reasons[0] and "no knob 'rows_per_chunkz'" in reasons[1]
    assert "outside its domain" in reasons[2] and "outside its domain" in reasons[3] and "mapping" in reasons[4]
    untuned = schedules.resolve(func, LLVM, shapes, ())
    assert untuned.record is None and set(untuned.sources.values()) <= {"default", "shape default"}


def test_the_same_point_given_two_ways_is_one_kernel():
    combo = RMS.combo("f32-f32")
    defaults = schedules.default_knobs(kernels.matching_rule(RMS, combo, LLVM), LLVM)
    assert kernels.get_kernel(RMS, combo, LLVM) is kernels.get_kernel(RMS, combo, LLVM, knobs=defaults)
    with pytest.raises(schedules.InvalidKnobs, match="no knob"):
        kernels.get_kernel(RMS, combo, LLVM, knobs={"rows_per_chunkz": 64})


def test_infeasible_ascend_points_are_pruned_before_they_cost_a_trial():
    """Every point the tuner would try fits the UB; a point that does not is refused with
    the tiling's own reason (before: such points passed and failed as trials)."""
    from opgen.tune.space import parse_problem, space_for

    target = get_target("ascend-emu").for_product("AtlasA2")
    problem = parse_problem(RMS, "4096x12288")
    shapes, func = RMS.api.kernel_shapes(problem), kernels.prim_func(RMS, RMS.combo("f32-f32"))
    space = space_for(RMS, RMS.combo("f32-f32"), target, problem)
    for point in space.points:
        plan = space.rule.tiling(func, target, point, list(shapes.values()))
        assert plan.ub_bytes(target.hardware.block_bytes) <= target.hardware.usable_ub_bytes, point
    why = schedules.check_knobs(space.rule, {"rows_per_pass": 16}, target, shapes, func)
    assert why and why.startswith("infeasible on AtlasA2") and "UB" in why


# ---- saying which kernel runs ---------------------------------------------------------------

def test_explain_shows_each_knob_and_its_source_for_a_tuned_and_an_untuned_shape(cold_kernels, capsys):
    tuned_shapes = RMS.api.kernel_shapes(RMSProblem((64, 1000), 1))
    database.append(cold_kernels, _record(RMS, tuned_shapes, {"rows_per_chunk": 256}))
    lookup.reload()
    assert cli.main(["explain", "rms_norm_grad", "--shape", "64x1000", "--dtype", "f32-f32",
                     "--target", "llvm"]) == 0
    tuned = capsys.readouterr().out
    assert "RowPassWithColumnSums" in tuned and f"tuned {cold_kernels}:1" in tuned
    assert "parallel" in tuned and "default" in tuned and "cache key" in tuned and "artifact" in tuned
    assert cli.main(["explain", "rms_norm_grad", "--shape", "4x64", "--dtype", "f32-f32"]) == 0
    untuned = capsys.readouterr().out
    assert "tuned" not in untuned.replace("(tuning key", "") and "shape default" in untuned   # parallel


def test_explain_refuses_bad_input_in_one_line(capsys):
    for argv, expected in ((["explain", "nosuch", "--shape", "4x4"], "unknown op 'nosuch'"),
                           (["explain", "rms_norm_grad", "--shape", "4x4", "--dtype", "f8"], "no dtype combo"),
                           (["explain", "rms_norm_grad", "--shape", "4x4", "--target", "tpu"], "unknown target"),
                           (["explain", "rms_norm_grad", "--shape", "4,4,4"], "fields")):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert expected in err and err.count("\n") == 1, err


def test_opgen_log_kernels_reports_every_selection(tmp_path):
    script = ("import numpy as np, opgen; x = np.ones((3, 8), np.float32); "
              "opgen.rms_norm_grad(x, x, np.ones(3, np.float32), np.ones(8, np.float32))")
    # a fresh cache: the first process builds (and logs), the quiet one loads what it built
    env = {**os.environ, "OPGEN_LOG": "kernels", "OPGEN_DISK_CACHE": "1", "OPGEN_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "opgen: rms_norm_grad_f32_f32 on llvm" in done.stderr and "RowPassWithColumnSums(" in done.stderr
    assert "parallel=False (shape default)" in done.stderr
    quiet = subprocess.run([sys.executable, "-c", script], env={**env, "OPGEN_LOG": ""}, capture_output=True,
                           text=True, timeout=300)
    assert quiet.returncode == 0 and "opgen:" not in quiet.stderr


def test_the_cli_answers_bad_names_in_one_line_and_has_a_version(capsys):
    assert cli.main(["generate", "--op", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown op 'nosuch'" in err
    assert cli.main(["tiling", "--product", "X"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown product 'X'" in err
    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.startswith("opgen ")


@pytest.mark.parametrize("argv,expected", [
    (["bench", "--target", "tpu"], "unknown target 'tpu'"),
    (["bench", "--op", "rms_norm_grad", "--dtypes", "f8"], "--dtypes f8: no combo of rms_norm_grad"),
    (["bench", "--shape", "rms_norm_grad=abc"], "--shape rms_norm_grad=abc: cannot read 'abc'"),
    (["bench", "--shape", "nosuch=4x4"], "'nosuch' is not a benchmarked op"),
    (["bench", "--shape", "4x4"], "wants OP=SHAPE"),
    (["bench", "--repeats", "0"], "--repeats wants a number >= 1, got 0"),
    (["bench", "--training", "--steps", "0"], "--steps wants a number >= 1"),
    (["tune", "rms_norm_grad", "--shape", "4x4", "--product", "X"], "unknown product 'X'"),
    (["explain", "rms_norm_grad", "--shape", "4x4", "--product", "X"], "unknown product 'X'"),
    (["generate", "--op", "rms_norm_grad", "--product", "X"], "unknown product 'X'"),
])
def test_every_command_refuses_a_bad_value_in_one_line_before_running(argv, expected, capsys):
    """Each refusal comes before any build or timing: a misspelt value used to cost a
    traceback (bench --target), a silently empty table (bench --dtypes, --shape OP=) or a
    run that ignored it (tune --product)."""
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1, err


def test_opgen_targets_lists_every_target_with_what_it_can_do(capsys):
    assert cli.main(["targets"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out[1:]] == [t.name for t in all_targets()]
    llvm = next(line for line in out if line.startswith("llvm "))
    assert llvm.split()[1:3] == ["yes", "yes"] and "(default)" in llvm
    if not get_target("cuda").can_run():
        assert "no GPU" in next(line for line in out if line.startswith("cuda "))
