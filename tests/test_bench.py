"""opgen bench: the case list (every op's own shapes), the row arithmetic, the OMP_WAIT_POLICY rerun, and
one real ``--quick`` run through the CLI writing JSON and a PNG (checked as a file)."""
from __future__ import annotations

import argparse
import json
import struct
import sys

import pytest

import opgen
from opgen import bench
from opgen.ops import all_ops
from opgen.cli import main as cli_main


def _args(argv):
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return parser.parse_args(argv)


def test_the_case_list_is_every_ops_own_benchmark_shapes_in_f32_and_bf16_data():
    full = bench.cases(quick=False)
    large = [c for c in full if not c.tiny]
    want = {(op.name, s, t) for op in all_ops() for s in op.cases.bench for t in bench.benchmarked_tags(op, ("f32", "bf16"))}
    assert {(c.op, c.shape, c.tag) for c in large} == want and len(large) == len(want)
    assert {("rms_norm_grad", s) for s in ("4096x4096", "8192x5120", "16384x1024", "2048x8192")} <= {
        (c.op, c.shape) for c in large}                         # issue 10's shapes stay
    assert {(c.op, c.shape) for c in full if c.tiny} == {(op.name, op.cases.tiny) for op in all_ops() if op.cases.tiny}
    quick = bench.cases(quick=True, tiny=False)
    assert sorted(c.op for c in quick) == sorted(op.name for op in all_ops() if op.cases.quick)
    assert all(c.tag.startswith("f32") for c in quick)


def test_benchmarked_tags_prefer_the_uniform_combo_and_fall_back_to_the_documented_one():
    from types import SimpleNamespace as NS
    op = NS(combos=[NS(tag=t) for t in ("f16-f32", "bf16-f32", "bf16-bf16", "f32-f32")])
    assert bench.benchmarked_tags(op, ("f32", "bf16")) == ["f32-f32", "bf16-bf16"]
    op = NS(combos=[NS(tag=t) for t in ("f32-f32", "f16-f32", "bf16-f32")])        # DeepNormGrad's
    assert bench.benchmarked_tags(op, ("f32", "bf16", "f16")) == ["f32-f32", "bf16-f32", "f16-f32"]


def test_records_arithmetic():
    case = bench.Case("rms_norm_grad", "f32-f32", "8x8")
    times = {"opgen-numpy": 0.002, "opgen-torch": 0.001, "eager": 0.010, "opgen-torch after torch op": 0.0015}
    rows = {r.contender: r for r in bench.records(case, times, nbytes=4_000_000, triad_gbs=8.0)}
    assert rows["opgen-numpy"].gbs == pytest.approx(2.0) and rows["opgen-numpy"].pct_bandwidth == pytest.approx(25)
    assert rows["opgen-torch"].gbs == pytest.approx(4.0) and rows["opgen-torch"].vs_opgen_torch is None
    assert rows["eager"].vs_opgen_numpy == pytest.approx(5) and rows["eager"].vs_opgen_torch == pytest.approx(10)
    assert rows["opgen-torch after torch op"].vs_opgen_torch == pytest.approx(1.5)


def test_measure_times_only_the_run_part():
    calls = []
    times = bench.measure({"a": (lambda: calls.append("before"), lambda: calls.append("a"))}, repeats=3)
    assert calls == ["before", "a"] * 4 and set(times) == {"a"}


def test_flush_runs_before_every_timed_turn_so_no_contender_inherits_a_warm_cache():
    calls = []
    contenders = {name: (lambda n=name: calls.append(f"before {n}"), lambda n=name: calls.append(n)) for name in "ab"}
    bench.measure(contenders, repeats=2, flush=lambda: calls.append("flush"))
    timed_turns = calls[4:]   # after the warm-up (before a, a, before b, b)
    assert timed_turns == ["flush", "before a", "a", "flush", "before b", "b",
                           "flush", "before b", "b", "flush", "before a", "a"]


def test_the_same_bytes_stream_of_a_reduction_reads_its_inputs_and_writes_nothing():
    """An op whose outputs are all smaller than its data (a per-channel reduction) has no
    full-size output to stream into: the stream row reads each input once (a general op may
    have none; before, the stream copied a (N, C, HW) input into a (C,) output and failed)."""
    torch = pytest.importorskip("torch")
    data = {"dy": torch.ones(2, 3, 4), "x": torch.full((2, 3, 4), 2.0)}
    sums = {"sum_dy": torch.zeros(3), "grad_bias": torch.zeros(3)}
    assert bench._elementwise(sums, data["dy"].numel()) == []
    assert bench._elementwise(sums) == list(sums.values())      # alone, the largest are the (C,) ones
    read = bench.same_bytes_stream(bench._elementwise(data), [])()
    assert [int(t) for t in read] == [24 * 0x3F800000, 24 * 0x40000000]   # every float32's bits, summed once
    assert all((t == 0).all() for t in sums.values())


def test_argv_round_trip():
    argv = ["--quick", "--op", "rms_norm_grad", "--dtypes", "bf16-bf16", "--shape", "rms_norm_grad=64x64",
            "--skip", "compile", "--repeats", "2", "--omp-wait", "default", "--out", "x.csv", "--plot", "p.png",
            "--target", "llvm"]
    args = _args(argv)
    assert _args(bench.to_argv(args)) == args
    args = _args(["--models", "--model", "vit", "--compile", "on", "--steps", "3"])
    assert _args(bench.to_argv(args)) == args


def test_policy_is_set_in_process_or_rerun(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    monkeypatch.setattr(bench, "_openmp_loaded", lambda: False)
    assert bench.apply_policy(_args(["--omp-wait", "passive"])) is None
    assert bench.os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    assert bench.apply_policy(_args(["--omp-wait", "default"])) is None
    assert "OMP_WAIT_POLICY" not in bench.os.environ
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert bench.apply_policy(_args(["--omp-wait", "inherit"])) is None
    seen = {}
    monkeypatch.setattr(bench, "_openmp_loaded", lambda: True)
    monkeypatch.setattr(bench.subprocess, "run", lambda cmd, env: seen.update(cmd=cmd, env=env) or
                        argparse.Namespace(returncode=3))
    assert bench.apply_policy(_args(["--omp-wait", "passive", "--quick"])) == 3
    assert seen["cmd"][1:4] == ["-m", "opgen.bench", "--quick"] and seen["env"]["OMP_WAIT_POLICY"] == "PASSIVE"


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature"
    assert data[12:16] == b"IHDR"
    assert data[-8:-4] == b"IEND"
    return struct.unpack(">II", data[16:24])


def test_quick_through_the_cli(tmp_path, capfd):
    """--quick (one shape per op and the tiny rows) for the two ops checked below, one round,
    no torch.compile (its compile alone takes longer than the rest here); runs in a fresh
    process for PASSIVE. (All eleven ops took 44-60 s of CI; test_cases_* cover the rest.)"""
    pytest.importorskip("torch")
    pytest.importorskip("matplotlib")
    out, png = tmp_path / "rows.json", tmp_path / "bench.png"
    assert cli_main(["bench", "--quick", "--op", "rms_norm_grad", "--op", "group_norm_backward", "--repeats", "1",
                     "--skip", "compile", "--out", str(out), "--plot", str(png)]) == 0
    data = json.loads(out.read_text())
    assert data["environment"]["OMP_WAIT_POLICY"] == "PASSIVE"
    assert data["environment"]["target"] == opgen.get_target()
    by = {(r["op"], r["shape"], r["contender"]): r for r in data["rows"]}
    for key in [("rms_norm_grad", "4096x4096", c) for c in ("opgen-numpy", "opgen-torch", "eager", "aten-layernorm",
                                                            "triad")] + \
               [("group_norm_backward", "2,640,32x32,32", c) for c in ("opgen-numpy", "aten")] + \
               [("group_norm_backward", "1,32,2x2,8", c) for c in ("opgen-numpy", "opgen-numpy GetWorkspaceSize")] + \
               [("rms_norm_grad", "4x64", "eager")]:
        assert key in by and by[key]["ms"] > 0, key
    assert by[("rms_norm_grad", "4096x4096", "opgen-numpy")]["gbs"] > 0
    width, height = _png_size(png)
    assert width > 800 and height > 300
    assert "opgen-torch after torch op" in capfd.readouterr().out


def test_a_failing_case_is_reported_and_the_rest_still_run(monkeypatch):
    def fake(case, rng, skip):
        if case.op == "group_norm_backward":
            raise RuntimeError("kernel failed")
        return {"opgen-numpy": lambda: None}, 1000
    monkeypatch.setattr(bench, "contenders", fake)
    case_list = bench.cases(quick=True, tiny=False)
    rows, failures = bench.run(case_list, repeats=1, progress=False)
    assert {r.op for r in rows} == {c.op for c in case_list} - {"group_norm_backward"}
    assert {r.contender for r in rows} == {"opgen-numpy", "triad"}
    assert failures == ["group_norm_backward f32-f32 2,640,32x32,32: RuntimeError: kernel failed"]


@pytest.mark.parametrize("missing,argv,says", [
    ("torch", ["--training", "--quick"], "--training trains torch models: pip install 'opgen[torch]'"),
    ("matplotlib", ["--quick", "--plot", "bench.png"], "--plot needs matplotlib: pip install 'opgen[bench]'"),
    ("transformers", ["--models", "--quick"], "--models needs transformers: pip install 'opgen[models]'"),
    ("nothing", ["--models", "--model", "transformer"], "--model transformer: --models has llama, gemma, convnext, "
                                                         "vit, resnet, unet2d"),
    ("nothing", ["--training", "--model", "llama"], "--model llama: --training has unet, transformer"),
])
def test_a_missing_extra_is_one_line_before_any_timing(monkeypatch, capsys, missing, argv, says):
    monkeypatch.setitem(sys.modules, missing, None)   # what an install without the extra finds
    monkeypatch.delitem(sys.modules, "opgen.bench_training", raising=False)
    assert cli_main(["bench", "--omp-wait", "inherit", *argv]) == 2
    assert capsys.readouterr().err == f"opgen bench: {says}\n"


def test_models_through_the_cli(tmp_path, capfd):
    """``opgen bench --models`` on one family, eager, two steps: a row per family and mode,
    the two copies' losses and step-1 gradients equal within float32 norm tolerances, and the
    step times (the model-swap tests check every family's numbers; this checks the benchmark)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    out = tmp_path / "models.json"
    assert cli_main(["bench", "--models", "--quick", "--model", "llama", "--steps", "3", "--compile", "off",
                     "--omp-wait", "inherit", "--out", str(out)]) == 0
    [row] = json.loads(out.read_text())
    assert (row["family"], row["mode"], row["swapped"], row["left"], row["steps"]) == ("llama", "eager", 3, {}, 3)
    assert row["max_loss_difference"] < 1e-5 and row["max_gradient_difference"] < 1e-4
    assert row["torch_step_ms"] > 0 and row["opgen_step_ms"] > 0 and len(row["losses"]["opgen"]) == 3
    assert "llama     eager     swapped  3" in capfd.readouterr().out


def test_without_torch_the_table_says_which_contenders_did_not_run(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    assert bench.not_run_note() == ("not run: opgen-torch and the torch baselines "
                                    "(torch is not installed: pip install 'opgen[torch]')")
