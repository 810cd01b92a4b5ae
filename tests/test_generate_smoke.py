"""``opgen generate`` never crashes silently (issue 33): rows stream as they are decided, and
a target's smoke kernel runs in a child process (opgen.smoke) whose death by a signal, or
hang, becomes a FAIL row instead of the end of ``generate``.

The children here are real: a ``sitecustomize.py`` on the child's PYTHONPATH (the parent
passes its environment on) makes the smoke child of one target kill itself with a real
signal right before its kernel runs, or hang. Each kernel disk cache is the test's own
(OPGEN_CACHE_DIR), so a row loaded from it was built by the smoke child.
"""
from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from opgen import cli, smoke
from opgen.ops import get_op
from opgen.targets import get_target

ROOT = Path(__file__).resolve().parent.parent
OP = get_op("rms_norm_grad")
FIRST = f"{OP.name}        {OP.combos[0].tag}"      # the smoke kernel's row starts so


def hook_smoke_child(tmp_path, monkeypatch, target: str, action: str) -> None:
    """Run ``action`` (Python lines) at the start of each smoke child of ``target``. The hook
    reaches the children only: this process read its PYTHONPATH long ago."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(
        "import os, signal, sys, time\n"
        "argv = sys.orig_argv\n"
        f"if 'opgen.smoke' in argv and argv[argv.index('opgen.smoke') + 1] == {target!r}:\n"
        + "".join(f"    {line}\n" for line in action.splitlines()))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(hooks), os.environ.get("PYTHONPATH")])))


def die_before_the_kernel_runs(signal_name: str) -> str:
    """The child builds its kernel, then kills itself where the kernel would run."""
    return ("from opgen import kernels\n"
            f"kernels.Kernel.__call__ = lambda kernel, arrays: os.kill(os.getpid(), signal.{signal_name})")


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("OPGEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("OPGEN_DISK_CACHE", raising=False)
    monkeypatch.delenv(smoke.TIMEOUT_VARIABLE, raising=False)
    return tmp_path / "cache"


def rows_of(out: str, target: str) -> list[str]:
    return [line for line in out.splitlines() if len(line.split()) > 2 and line.split()[2] == target]


def test_rows_stream_before_generate_ends(tmp_path, own_cache):
    """stdout a pipe (block-buffered unless flushed): ``generate`` is killed the moment its
    first row is read, while it builds the next kernel (the test's own cache holds only the
    smoke kernel: a build each, ~0.2 s). Streamed, the header and that row were read and
    the summary never was; buffered, every line comes at exit, the summary with them. The
    first row is loaded from the disk cache: the smoke child built it there.
    PYTHONUNBUFFERED (set on some machines) would hide buffering: the child does not get it."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    proc = subprocess.Popen([sys.executable, "-m", "opgen.cli", "generate", "--op", OP.name, "--target", "llvm",
                             "--out", str(tmp_path / "out")], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    read, first_row = [], threading.Event()

    def reader():
        for line in proc.stdout:
            read.append(line.rstrip("\n"))
            if line.startswith(OP.name):
                first_row.set()
    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        first_row.wait(timeout=120)
        proc.kill()
    finally:
        proc.wait(timeout=60)
        thread.join(timeout=60)
    assert first_row.is_set(), read
    assert read[0].split()[:3] == ["op", "dtypes", "target"] and read[1].startswith("---"), read
    assert read[2].startswith(FIRST) and read[2].split()[3].endswith("c") and read[2].endswith("PASS"), read
    assert not any(line.startswith("(c: loaded") or line.startswith("artifacts:") for line in read), read


@pytest.mark.parametrize("signal_name, cause", [
    ("SIGILL", "an instruction this CPU or its OS does not enable: see `opgen targets`"),
    ("SIGBUS", "a truncated or damaged library in the kernel cache ($OPGEN_CACHE_DIR: {cache})"),
], ids=["SIGILL", "SIGBUS"])
def test_a_smoke_kernel_killed_by_a_signal_fails_its_target_and_generate_goes_on(
        tmp_path, own_cache, monkeypatch, capsys, signal_name, cause):
    """llvm's smoke child dies by the signal: a FAIL row naming it and its likely cause, each
    llvm kernel a FAIL row not run, exit status 1 after the whole table. The next target
    (llvm under another name, which the child does not know: its exception is no death)
    still builds, runs and passes its kernels."""
    twin = dataclasses.replace(get_target("llvm"), name="llvm-twin", default=False,
                               schedule_rules="llvm")
    monkeypatch.setattr(cli, "all_targets", lambda: [get_target("llvm"), twin])
    hook_smoke_child(tmp_path, monkeypatch, "llvm", die_before_the_kernel_runs(signal_name))
    status = cli.main(["generate", "--op", OP.name, "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    llvm, others = rows_of(out, "llvm"), rows_of(out, "llvm-twin")
    assert status == 1, out
    assert llvm[0].startswith(f"smoke:{OP.name}") and "FAIL" in llvm[0], out
    assert f"died by {signal_name} while running" in llvm[0] and cause.format(cache=own_cache) in llvm[0], llvm[0]
    assert len(llvm) == 1 + len(OP.combos), out
    assert all(f"FAIL  (not run: smoke kernel {OP.name} {OP.combos[0].tag} died by {signal_name}" in r
               for r in llvm[1:]), out
    assert not (tmp_path / "out" / "llvm").exists()                   # nothing of llvm built in the parent
    assert len(others) == len(OP.combos) and all(r.endswith("PASS") for r in others), out
    assert out.splitlines()[-2].startswith("(c: loaded from the kernel disk cache"), out


def test_a_hung_smoke_kernel_is_a_fail_row(tmp_path, own_cache, monkeypatch, capsys):
    """A child past OPGEN_SMOKE_TIMEOUT is killed; its target's rows FAIL, not run."""
    monkeypatch.setenv(smoke.TIMEOUT_VARIABLE, "2")
    hook_smoke_child(tmp_path, monkeypatch, "llvm", "time.sleep(600)")
    start = time.monotonic()
    status = cli.main(["generate", "--op", OP.name, "--target", "llvm", "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    rows = rows_of(out, "llvm")
    assert status == 1 and time.monotonic() - start < 60, out
    assert rows[0].startswith(f"smoke:{OP.name}") and "did not finish in 2 s in a child process" in rows[0], out
    assert smoke.TIMEOUT_VARIABLE in rows[0], rows[0]
    assert len(rows) == 1 + len(OP.combos) and all("FAIL  (not run: smoke kernel" in r for r in rows[1:]), out
