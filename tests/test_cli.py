"""``opgen generate`` (the main job) and ``opgen prove`` through their entry point."""
from __future__ import annotations

import pytest

from opgen import cli


def test_generate_builds_verifies_and_writes_artifacts(tmp_path, capsys):
    status = cli.main(["generate", "--op", "rms_norm_grad", "--target", "llvm", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert status == 0, out
    rows = [line for line in out.splitlines() if line.startswith("rms_norm_grad")]
    assert len(rows) == 5 and all(line.endswith("PASS") for line in rows), out
    for tag in ("f16-f32", "bf16-f32", "f16-f16", "f32-f32", "bf16-bf16"):
        kernel_dir = tmp_path / "llvm" / "rms_norm_grad" / tag
        assert "T.parallel" in (kernel_dir / "kernel.tir.py").read_text()
        assert (kernel_dir / "kernel.so").read_bytes()[:4] == b"\x7fELF"


def test_generate_fails_rows_whose_error_exceeds_the_tolerance(tmp_path, capsys, monkeypatch):
    """The verdict follows the measured error: with zero tolerance float32 rounding fails."""
    monkeypatch.setitem(cli.verify.TOLERANCES, "float32", (0.0, 0.0))
    status = cli.main(["generate", "--op", "group_norm_backward", "--target", "llvm", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("group_norm_backward  f32-f32"))
    assert status == 1 and "FAIL" in row, out


def test_generate_reports_a_build_failure_and_goes_on(tmp_path, capsys, monkeypatch):
    real = cli.kernels.get_kernel

    def failing(op, combo, target):
        if combo.tag == "f16-f16":
            raise RuntimeError("no rule for this one")
        return real(op, combo, target)
    monkeypatch.setattr(cli.kernels, "get_kernel", failing)
    status = cli.main(["generate", "--op", "rms_norm_grad", "--target", "llvm", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert status == 1
    assert "FAIL  (build: RuntimeError: no rule for this one)" in out
    assert sum(line.endswith("PASS") for line in out.splitlines()) == 4, out


def test_generate_rows_say_what_a_target_refused_and_a_run_that_raised(tmp_path, capsys, monkeypatch):
    """A sample problem the target's own host code refuses (ProblemRefused: Ascend's tiling on
    a product without DataCopyPad) is left out and counted on the row; every problem refused
    is NOT RUN with the reason; any other error while a kernel runs is a FAIL row, never a
    traceback that ends generate (seen: ascend-emu on AtlasInference)."""
    real = cli.verify.run_and_compare

    def refusing(kernel, problem, rng):
        if kernel.combo.tag == "f16-f16" or problem == kernel.op.problems[0]:
            raise cli.ProblemRefused(f"no DataCopyPad for {problem}")
        if kernel.combo.tag == "bf16-bf16":
            raise RuntimeError("the launch failed")
        return real(kernel, problem, rng)
    monkeypatch.setattr(cli.verify, "run_and_compare", refusing)
    status = cli.main(["generate", "--op", "rms_norm_grad", "--target", "llvm", "--out", str(tmp_path)])
    rows = {line.split()[1]: line for line in capsys.readouterr().out.splitlines() if line.startswith("rms_norm_grad")}
    assert status == 1
    assert "NOT RUN  [the target refused every sample problem (" in rows["f16-f16"]
    assert "FAIL  (run: RuntimeError: the launch failed)" in rows["bf16-bf16"]
    assert " PASS  [" in rows["f32-f32"] and "1 of 4 sample problems refused by the target" in rows["f32-f32"]


def test_prove_exits_0(capsys, monkeypatch):
    """The command's wiring, on the two seed ops (every op's proof is tests/test_derive.py's)."""
    from opgen import derive
    from opgen.ops import get_op

    monkeypatch.setattr(derive, "all_ops", lambda: [get_op("rms_norm_grad"), get_op("group_norm_backward")])
    assert cli.main(["prove"]) == 0
    assert "DIFFERS" in capsys.readouterr().out  # the seed's garbled GroupNorm gradInput is reported


def test_prove_op_proves_only_the_ops_named(capsys):
    """``opgen prove --op NAME``: that op's proof and seed formulas, not every op's (a minute),
    so one adding an op proves it alone; RmsNormGrad's is the cheapest with seed formulas."""
    assert cli.main(["prove", "--op", "rms_norm_grad"]) == 0
    out = capsys.readouterr().out
    proofs = [line for line in out.splitlines() if line.endswith(")") and ": PROVEN (" in line]
    assert [line.split()[0] for line in proofs] == ["rms_norm_grad"], out
    seeds = [line.split()[1] for line in out.splitlines() if line.startswith("  [")]
    assert seeds and {seed.split(".")[0] for seed in seeds} == {"rms_norm_grad"}, out


def test_generate_prints_the_ascend_emulations_modelled_time(tmp_path, capsys):
    """ascend-emu rows carry the timing model of the largest verified run; other targets' rows
    do not (their run_summary is None)."""
    from opgen.targets import get_target

    if not get_target("ascend-emu").can_build():
        import pytest
        pytest.skip("g++ or the AscendC emulation header is missing")
    status = cli.main(["generate", "--op", "rms_norm_grad", "--target", "ascend-emu", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("rms_norm_grad")]
    assert status == 0 and len(rows) == 5, out
    assert all("PASS" in r and "modelled " in r and "% of the GM bound" in r and "busy MTE2" in r for r in rows), out
    assert get_target("llvm").run_summary(None) is None


UNKNOWN_OP = [["tune", "nosuch"], ["tune", "nosuch", "--shape", "8x8"], ["explain", "nosuch"],
              ["explain", "nosuch", "--shape", "8x8"], ["compare", "--op", "nosuch"], ["bench", "--op", "nosuch"],
              ["generate", "--op", "nosuch"], ["export", "--target", "opencl", "--op", "nosuch"],
              ["prove", "--op", "rms_norm_grad", "--op", "nosuch"]]


def _status(argv) -> int:
    """``opgen`` 's exit status, whether main returns it or argparse exits with it."""
    try:
        return cli.main(argv)
    except SystemExit as exit_:
        return exit_.code


@pytest.mark.parametrize("argv", UNKNOWN_OP, ids=lambda argv: " ".join(argv))
def test_every_subcommand_that_takes_an_op_names_an_unknown_one(argv, tmp_path, capsys):
    """``opgen tune nosuch`` said "give an op and --shape"; compare and bench answered with
    argparse's usage (several lines). Each now says the op is unknown, in one line with the
    registered ops, exit 2, and writes nothing."""
    out = tmp_path / "out"
    argv = [*argv, "--out", str(out)] if argv[0] in ("generate", "export") else argv
    assert _status(argv) == 2
    err = capsys.readouterr().err
    command = argv[0]
    assert err.startswith(f"opgen {command}: unknown op 'nosuch'; registered ops: "), err
    assert "rms_norm_grad" in err and err.count("\n") == 1, err
    assert not out.exists()


def test_generate_rows_do_not_depend_on_how_many_kernels_build_at_once(tmp_path, capsys, monkeypatch):
    """Kernels build a few at once (OPGEN_GENERATE_JOBS) while rows print in op and combo
    order, each verified on inputs from its own generator (the seed and the row's op, combo
    and target): one job and two give the same rows, verdicts and error ratios."""
    monkeypatch.setenv("OPGEN_CACHE_DIR", str(tmp_path / "cache"))      # two builds at once, not loads
    monkeypatch.delenv("OPGEN_DISK_CACHE", raising=False)
    tables = {}
    for jobs in ("2", "1"):
        cli.kernels.clear_memory_cache()
        monkeypatch.setenv("OPGEN_GENERATE_JOBS", jobs)
        status = cli.main(["generate", "--op", "rms_norm_grad", "--target", "llvm", "--out", str(tmp_path / jobs)])
        out = capsys.readouterr().out
        assert status == 0, out
        rows = [line.split() for line in out.splitlines() if line.startswith("rms_norm_grad")]
        tables[jobs] = [(row[1], row[-2], row[-1]) for row in rows]     # dtypes, max err/tol, verdict
    assert [tag for tag, _, _ in tables["1"]] == [combo.tag for combo in cli.get_op("rms_norm_grad").combos]
    assert tables["1"] == tables["2"], tables
    monkeypatch.setenv("OPGEN_GENERATE_JOBS", "3")
    assert cli.generate_jobs() == 3
    monkeypatch.setenv("OPGEN_GENERATE_JOBS", "0")
    with pytest.warns(UserWarning, match="OPGEN_GENERATE_JOBS"):
        assert 1 <= cli.generate_jobs() <= cli.MAX_JOBS
