"""scripts/gpu_bench.py on the CPU: its plan and byte arithmetic (--dry-run, without torch), the
same code as on a GPU run on torch CPU tensors with the llvm target (--smoke llvm) for every
registered op and tag, a corrupted kernel output caught (a positive control), no op named in
the script, and Peer.devices keeping a CUDA-only peer (Liger-Kernel's) off the CPU."""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from opgen import baselines as B
from opgen import bench
from opgen.ops import all_ops, get_op

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_bench.py"


def _load():
    spec = importlib.util.spec_from_file_location("gpu_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module        # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


gpu_bench = _load()
BENCHED = [op for op in all_ops() if op.cases.bench]


def _small(op) -> str:
    """The op's smallest shape for a smoke run: its tiny one, else its first compare shape."""
    return op.cases.tiny or op.cases.compare[0]


def _headers(out: str) -> set:
    """(op, tag, shape) of every case header the script printed."""
    return {tuple(m.groups()) for m in re.finditer(r"^(\w+) (\S+) (\S+)  \(", out, re.M)}


def test_dry_run_plans_every_op_tag_and_shape_without_torch(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)     # import torch raises ImportError
    assert gpu_bench.main(["--dry-run"]) == 0
    out = capsys.readouterr().out
    want = {(op.name, tag, shape) for op in BENCHED for tag in bench.benchmarked_tags(op, ("f32", "bf16"))
            for shape in op.cases.bench}
    got = {tuple(m.groups()) for m in re.finditer(r"^(\w+) (\S+) (\S+): [\d.]+ MB", out, re.M)}
    assert BENCHED and got == want, out
    assert f"{len(want)} cases" in out


def test_the_byte_count_from_shapes_is_the_arrays_bytes():
    """--dry-run counts from the kernel shapes; a run counts the arrays: the same number."""
    rng = np.random.default_rng(0)
    for op in BENCHED:
        for tag in bench.benchmarked_tags(op, ("f32", "bf16")):
            for shape in (_small(op), *op.cases.compare):
                problem = B.parse_problem(op.name, shape)
                arrays = {**B.random_inputs(op.name, tag, problem, rng), **B.output_buffers(op.name, tag, problem)}
                assert gpu_bench.planned_bytes(op, tag, problem) == gpu_bench.array_bytes(op, arrays), (op.name, tag)


def test_the_plan_reads_each_ops_own_shapes():
    smoke = gpu_bench.plan(smoke=True)
    for op in BENCHED:
        texts = {c.shape for c in smoke if c.op == op.name}
        assert texts == {t for t in (op.cases.tiny, *op.cases.compare) if t}, op.name
    op = BENCHED[0]
    only = gpu_bench.plan(ops=[op.name], shapes={op.name: [_small(op)]})
    assert {(c.op, c.shape) for c in only} == {(op.name, _small(op))}
    assert {c.tag for c in only} == set(bench.benchmarked_tags(op, ("f32", "bf16")))
    with pytest.raises(SystemExit):
        gpu_bench.main(["--dry-run", "--shape", f"{op.name}=not-a-shape"])


def _smoke(monkeypatch, capsys, ops) -> tuple[int, str]:
    """--smoke llvm on each op's smallest shape; compiled peers (torch.compile's minute of
    warm-up) always take the budget's skip."""
    pytest.importorskip("torch")
    monkeypatch.setattr(gpu_bench, "COMPILED_NEEDS", float("inf"))
    argv = ["--smoke", "llvm", "--budget", "600"]
    for op in ops:
        argv += ["--op", op.name, "--shape", f"{op.name}={_small(op)}"]
    status = gpu_bench.main(argv)
    return status, capsys.readouterr().out


def test_smoke_llvm_runs_every_registered_op_and_tag(monkeypatch, capsys):
    status, out = _smoke(monkeypatch, capsys, BENCHED)
    want = {(op.name, tag, _small(op)) for op in BENCHED for tag in bench.benchmarked_tags(op, ("f32", "bf16"))}
    assert _headers(out) == want, out
    assert status == 0 and "MISMATCH" not in out and "FAILED" not in out, out
    assert out.count("opgen kernel vs float64 reference: ok") == len(want), out
    for label in ("opgen kernel", "opgen aclnn"):
        rows = re.findall(rf"^  {label} {{2,}}(\S+)", out, re.M)
        assert len(rows) == len(want) and "-" not in rows, (label, out)
    sections = dict(re.findall(r"^== (\w+) .*?\n(.*?)(?=^== |\Z)", out, re.M | re.S))
    for op in BENCHED:
        rows = set(re.findall(r"^  (\S+) ", sections[op.name], re.M))
        for peer in op.peers:     # every CPU contender has its rows (timed or skipped), the others none
            assert (peer.name in rows) == (peer.bench and "cpu" in peer.devices), (op.name, peer.name)
    assert "liger" not in out.lower()          # CUDA-only: not even listed on the CPU


def test_a_corrupted_kernel_output_is_a_mismatch(monkeypatch, capsys):
    """Positive control: the check sees a kernel that writes garbage."""
    real = gpu_bench.kernel_call

    def corrupted(torch, setup, op, tag, problem, inputs):
        run, outputs = real(torch, setup, op, tag, problem, inputs)
        first = outputs[op.outputs[0]]

        def bad():
            run()
            first.fill_(12345.0)
        return bad, outputs
    monkeypatch.setattr(gpu_bench, "kernel_call", corrupted)
    op = BENCHED[0]
    status, out = _smoke(monkeypatch, capsys, [op])
    assert status == 1, out
    assert out.count("opgen kernel vs float64 reference: MISMATCH") == len(bench.benchmarked_tags(op, ("f32", "bf16")))
    assert f"FAILED {op.name}" in out and "opgen kernel MISMATCH" in out


def test_no_op_is_named_in_the_script():
    source = SCRIPT.read_text()
    for op in all_ops():
        for name in (op.name, op.aclnn_name, op.aclnn_name.removeprefix("aclnn")):
            assert name not in source, f"scripts/gpu_bench.py names {name}: read it from the op's package"


def test_peer_devices_keep_a_cuda_only_peer_off_the_cpu():
    cuda_only = [(op, p) for op in all_ops() for p in op.peers if p.bench and "cpu" not in p.devices]
    assert ("rms_norm_grad", "liger") in {(op.name, p.name) for op, p in cuda_only}
    for op, peer in cuda_only:
        assert peer in gpu_bench.peers_for(op, "cuda") and peer not in gpu_bench.peers_for(op, "cpu")
    op = get_op("rms_norm_grad")
    pytest.importorskip("torch")
    runs, _ = bench.contenders(bench.Case(op.name, "f32-f32", op.cases.tiny, tiny=True), np.random.default_rng(0))
    assert "liger" not in runs and "eager" in runs


def test_a_contender_that_fails_or_does_not_fit_is_a_row_not_an_error(capsys):
    budget = gpu_bench.Budget(30.0)

    def missing():
        raise ModuleNotFoundError("No module named 'liger_kernel'")
    assert gpu_bench.measure(None, None, "liger", missing, 1000, 1e12, budget) is None
    compiled = (lambda: None, lambda: None)
    assert gpu_bench.measure(None, None, "compile", lambda: compiled, 1000, 1e12, budget) is None
    assert gpu_bench.measure(None, None, "late", lambda: None, 1000, 1e12, gpu_bench.Budget(0.0)) is None
    seconds = gpu_bench.measure(None, lambda torch, c: 1e-3, "fast", lambda: (lambda: None), 10**6, 1e12, budget,
                                base=5e-4)
    out = capsys.readouterr().out
    assert "unavailable: ModuleNotFoundError: No module named 'liger_kernel'" in out
    assert "SKIPPED: a compiled peer needs 60 s" in out and "SKIPPED: time budget spent" in out
    assert seconds == 1e-3 and re.search(r"fast +1\.000 +1\.0 +0\.1% +2\.00x", out), out


def test_cuda_time_times_only_run_between_events():
    """The GPU timer's logic on a stand-in for torch.cuda: warm-up, ``before`` untimed, median."""
    from types import SimpleNamespace as NS

    calls, clock = [], iter(range(1000))

    class Event:
        def __init__(self, enable_timing):
            self.at = None

        def record(self):
            self.at = next(clock)
            calls.append("record")

        def synchronize(self):
            pass

        def elapsed_time(self, end):
            return (end.at - self.at) * 1e3      # ms: 1 s per tick

    fake = NS(cuda=NS(Event=Event, synchronize=lambda: calls.append("sync")))
    seconds = gpu_bench.cuda_time(fake, (lambda: calls.append("before"), lambda: calls.append("run")),
                                  min_seconds=0.0, max_reps=5)
    assert seconds == 1.0
    assert calls[:5] == ["before", "run", "before", "run", "sync"]
    assert calls[5:9] == ["before", "record", "run", "record"] and calls.count("run") == 7
