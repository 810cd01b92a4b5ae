"""Driving ``bishengir-compile`` (pip ``ascendnpu-ir``) and reading how far a kernel got.

bishengir lowers HFusion named ops through HIVM to a device binary; the last step calls
``hivmc``, which ships with the CANN toolkit only. So here a kernel's best outcome is
"HIVM": the pipeline reached the HIVM module (saved with ``--save-temps``, with the host
tiling function bishengir derives) and stopped at the missing ``hivmc``. Where ``hivmc``
is on PATH it goes on to the device binary ("binary").

A kernel whose automatic tiling overflows the unified buffer ("ub overflow") is retried
with bishengir's own UB options, in the order of ``UB_FLAGS`` (GroupNorm's float16 sum of
squares, one stage, overflowed with the first and fit with the second); the report says
which it needed. bishengir 1.2.0 is not deterministic: one unchanged file of GroupNorm's row pass
failed 1 run in 6 with "'arith.mulf' op using value defined outside the region" and passed
the others (RmsNorm's, with a scalar ``tensor.extract``, failed 6 in 12 with "operand #0
does not dominate this use"; a float16 GroupNorm kernel crashed 1 build in 4). Those
messages and crashes are retried, up to ``ATTEMPTS`` runs, and the report counts the runs.

Each run also prints the module as bishengir has rewritten it just before its auto-schedule
(``HFUSION_DUMP``): the kernel after bishengir's own normalisations, decompositions and
bf16 legalisation, still on whole tensors. That is the text ``targets/mlir/replay.py``
turns back into upstream linalg and runs on this CPU (the numeric check of what bishengir
accepted).

Verdicts are final after the retries and kept in the disk cache
(``<cache>/bishengir/<hash>.json``, keyed by the wheel's version, the SoC and the kernel
text), rejections as well as acceptances: the same text gets the same verdict on every
later run, so the fallback split (targets/ascend_mlir.py) is the same too. A rejection is
final when bishengir says the same thing on two runs in a row (a message it has been
seen to say and then retract, ``NONDETERMINISTIC``, never counts); one still unsettled
after ``ATTEMPTS`` runs is ``flaky``: no split follows from it. JSON only, loaded under
opgen.diskcache's ownership and mode checks.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

HIVM, BINARY, REJECTED = "HIVM", "binary", "rejected"
ATTEMPTS = 10
VERDICT_FORMAT = "verdict-3"     # in the cache key: older entries are not read (-2 could hold a missing tool as a verdict)
HFUSION_DUMP = "hfusion-auto-schedule"   # the pass before which the rewritten module is printed
UB_FLAGS = (("--enable-ubuf-saving",), ("--enable-ubuf-saving", "--hfusion-max-buffer-count-tuning=8"),
            ("--enable-ubuf-saving", "--enable-hfusion-count-buffer-dma-opt"))
NONDETERMINISTIC = ("does not dominate this use", "using value defined outside the region",
                    "PLEASE submit a bug report",   # a crash: GroupNorm's row pass crashed 1 build in 4
                    # BatchNorm's per-channel chain + y said this, and passed on other runs
                    "must be floating-point-like, but got 'index'",
                    "Stack dump")                   # a crash without the bug-report line
# A run that failed for want of a tool, not on the kernel's text: no verdict, never kept (the
# wheel's bishengir-compile hands an Ascend 950 target to bishengir-compile-a5 beside it).
ENVIRONMENT = ("Cannot find bishengir", "No such file or directory")


@functools.lru_cache(maxsize=None)
def compiler() -> str | None:
    """The ``bishengir-compile`` executable of the installed ``ascendnpu-ir`` wheel, or on PATH."""
    found = shutil.which("bishengir-compile")
    if found:
        return found
    try:
        import ascendnpuir
    except ImportError:
        return None
    path = Path(ascendnpuir.__file__).parent / "bin" / "bishengir-compile"
    return str(path) if path.exists() else None


def hivmc_present() -> bool:
    return shutil.which("hivmc") is not None


@dataclass(frozen=True)
class KernelReport:
    """How far bishengir took one kernel (a ``compile_check`` report)."""

    arch: str                 # the kernel's name: reports are per kernel here
    ok: bool
    stage: str                # HIVM, binary or rejected
    error: str = ""
    flags: tuple = ()         # extra flags it needed
    hivm: str = ""            # the HIVM module text, when reached
    runs: int = 1             # bishengir runs it took (see NONDETERMINISTIC)
    hfusion: str = ""         # the module before auto-schedule, from the run that reached HIVM
    flaky: bool = False       # rejected, but not twice alike in ATTEMPTS runs: no split follows

    @property
    def summary(self) -> str:
        extra = f" with {' '.join(self.flags)}" if self.flags else ""
        again = f" on run {self.runs}" if self.runs > 1 else ""
        return f"k{self.arch.rpartition('_k')[2]} {self.stage}{extra}{again}"


def _errors(log: str) -> str:
    log = log[:log.find(_DUMP_HEAD)] if _DUMP_HEAD in log else log     # not the IR printed
    lines = [ln.strip() for ln in log.splitlines() if "error" in ln.lower() and "hivmc" not in ln
             and "Failed to run BiSheng" not in ln]
    if not lines:
        return (log.strip().splitlines() or ["no message"])[-1][-300:]
    return " / ".join(ln.split("error: ", 1)[-1][:200] for ln in lines[:2])


def _run(text: str, soc: str, flags: tuple, timeout: float) -> tuple[str, str, str]:
    """(stage reached, HIVM text or "", log) of one bishengir run; the log ends with the
    module as it was before ``HFUSION_DUMP`` (``hfusion_of`` reads it back)."""
    with tempfile.TemporaryDirectory(prefix="opgen-bishengir-") as tmp:
        src, temps = Path(tmp) / "kernel.mlir", Path(tmp) / "temps"
        src.write_text(text)
        cmd = [compiler(), str(src), "--enable-hfusion-compile", "--enable-hivm-compile", f"--target={soc}",
               f"--save-temps={temps}", f"--mlir-print-ir-before={HFUSION_DUMP}", "-o", str(Path(tmp) / "kernel"),
               *flags]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_tool_env())
        except subprocess.TimeoutExpired:
            return REJECTED, "", f"bishengir-compile took over {timeout:.0f} s"
        dump, log = _split_dump(done.stderr)
        log = done.stdout + log + dump
        hivm = temps / "module.hivm.opt.mlir"
        if done.returncode == 0:
            return BINARY, hivm.read_text() if hivm.exists() else "", log
        if hivm.exists() and ("hivmc" in log):
            return HIVM, hivm.read_text(), log
        return REJECTED, "", log


_DUMP_HEAD = "// -----// IR Dump Before "


def _tool_env() -> dict:
    """This process's environment with the compiler's own folder first on PATH: the wheel's
    ``bishengir-compile`` runs its siblings (``bishengir-compile-a5`` for Ascend 950) by name,
    and pip puts only the console scripts, not the wheel's bin/, on PATH."""
    folder = str(Path(compiler()).parent)
    return {**os.environ, "PATH": os.pathsep.join([folder, os.environ.get("PATH", "")])}


def _for_want_of_a_tool(report: KernelReport) -> bool:
    return not report.ok and any(m in report.error for m in ENVIRONMENT)


def _split_dump(stderr: str) -> tuple[str, str]:
    """(the IR dump, the rest) of bishengir's stderr: the dump is a header line and a
    module up to its closing brace at column 0."""
    start = stderr.find(_DUMP_HEAD)
    if start < 0:
        return "", stderr
    end = stderr.find("\n}\n", start)
    end = len(stderr) if end < 0 else end + 3
    return stderr[start:end], stderr[:start] + stderr[end:]


def hfusion_of(log: str) -> str:
    """The module a run's log printed before ``HFUSION_DUMP`` ("" when it got no further)."""
    start = log.find(_DUMP_HEAD)
    return "" if start < 0 else log[log.index("\n", start) + 1:]


@functools.lru_cache(maxsize=None)
def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("ascendnpu-ir")
    except metadata.PackageNotFoundError:
        return f"on PATH: {compiler()}"


def _verdict_path(text: str, soc: str) -> Path | None:
    from opgen import diskcache

    if not diskcache.enabled():
        return None
    key = [VERDICT_FORMAT, _version(), soc, str(hivmc_present()), text]
    digest = hashlib.sha256("\n".join(key).encode()).hexdigest()
    return diskcache.cache_dir() / "bishengir" / f"{digest[:24]}.json"


_FIELDS = ("ok", "stage", "error", "flags", "hivm", "runs", "hfusion", "flaky")


def _cached(name: str, path: Path | None) -> KernelReport | None:
    from opgen import diskcache

    if path is None or not diskcache.loadable(path):
        return None
    try:
        fields = json.loads(path.read_text())
        return KernelReport(name, **{k: tuple(fields[k]) if k == "flags" else fields[k] for k in _FIELDS})
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _keep(report: KernelReport, path: Path | None) -> None:
    """Store a final verdict atomically, a rejection as well as an acceptance: a second run
    must see what the first saw (bishengir is not deterministic, see NONDETERMINISTIC)."""
    from opgen import diskcache

    if path is None or not diskcache.trusted_dir(path.parent, "bishengir verdicts are not kept"):
        return
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({k: list(getattr(report, k)) if k == "flags" else getattr(report, k)
                               for k in _FIELDS}))
    os.replace(tmp, path)


def compile_kernel(name: str, text: str, soc: str, timeout: float = 120.0) -> KernelReport:
    """bishengir's verdict on one kernel's module: from the disk cache, else compiled."""
    if compiler() is None:
        return KernelReport(name, False, REJECTED, "bishengir-compile is not installed")
    path = _verdict_path(text, soc)
    report = _cached(name, path)
    if report is None:
        report = _compile(name, text, soc, timeout)
        if not _for_want_of_a_tool(report):    # a verdict on the text, not on this machine's PATH
            _keep(report, path)
    return replace(report, arch=name)


def _compile(name: str, text: str, soc: str, timeout: float) -> KernelReport:
    """Run bishengir until its verdict is final: a UB overflow is retried with its UB options,
    a NONDETERMINISTIC message always, any other message once more (final when the second
    run says the same). A rejection still unsettled after ATTEMPTS runs is ``flaky``."""
    flags, runs, ub_options = (), 1, list(UB_FLAGS)
    stage, hivm, log = _run(text, soc, flags, timeout)
    said = None                                   # the last settled-looking message
    while stage == REJECTED and runs < ATTEMPTS:
        error = _errors(log)
        if "ub overflow" in log and ub_options:
            flags, said = ub_options.pop(0), None
        elif any(m in log for m in NONDETERMINISTIC):
            said = None
        elif error == said:
            break                                 # the same message twice in a row: final
        else:
            said = error
        runs += 1
        stage, hivm, log = _run(text, soc, flags, timeout)
    if stage == REJECTED:
        error = _errors(log)
        settled = error == said or ("ub overflow" in log and not ub_options)
        return KernelReport(name, False, stage, error, flags, runs=runs, flaky=not settled)
    return KernelReport(name, True, stage, "", flags, hivm, runs, hfusion_of(log))


if __name__ == "__main__":   # a reproducer's runner: python -m opgen.targets.mlir.bishengir FILE SOC
    report = compile_kernel(Path(sys.argv[1]).stem, Path(sys.argv[1]).read_text(), sys.argv[2])
    print(report.summary, report.error)
