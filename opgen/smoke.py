"""A target's first kernel, run in a child process before ``opgen generate`` runs any.

A kernel built for instructions this CPU (or its OS) does not enable kills the process
that runs it with SIGILL; a damaged library in the kernel cache, with SIGBUS. Python cannot
catch either, so ``opgen generate`` once printed nothing for 13 minutes and died with exit
status 132 (issue 33). Before a target's first kernel runs in the ``generate`` process,
one smoke kernel of that target is built and run here, in a child:

    python -m opgen.smoke TARGET OP COMBO [--product PRODUCT]

The child inherits the environment (``OPGEN_CACHE_DIR`` included), so the library it
builds lands in the disk cache the parent then loads. ``smoke_failure`` is the parent's
side: None when the child finished (or failed with a Python exception, which the parent's
own rows then report with its message), else one line saying which signal killed the
child (or that it hung) and the likely cause. ``OPGEN_SMOKE_TIMEOUT`` (seconds) overrides
the timeout.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile

DEFAULT_TIMEOUT_S = 300.0     # a first build of one kernel: seconds to a minute even on slow targets
TIMEOUT_VARIABLE = "OPGEN_SMOKE_TIMEOUT"
STAGE_PREFIX = "opgen.smoke: "                 # the child's stage lines on stderr
BUILDING, RUNNING = "building", "running"

SIGNAL_CAUSES = {
    signal.SIGILL: "an instruction this CPU or its OS does not enable: see `opgen targets` for the CPU and "
                   "features kernels are built for; OPGEN_LLVM_TARGET overrides them",
    signal.SIGBUS: "a truncated or damaged library in the kernel cache ($OPGEN_CACHE_DIR: {cache})",
    signal.SIGSEGV: "an invalid memory access in the kernel or its runtime",
    signal.SIGFPE: "an integer division by zero or overflow in the kernel",
    signal.SIGABRT: "the runtime aborted (its last line on stderr: {last_line})",
}


def smoke_command(target_name: str, op_name: str, combo_tag: str, product: str | None = None) -> list[str]:
    """The child's command line: this Python, this module."""
    command = [sys.executable, "-m", "opgen.smoke", target_name, op_name, combo_tag]
    return command + ["--product", product] if product else command


def timeout_seconds() -> float:
    """``OPGEN_SMOKE_TIMEOUT`` when set (a slow machine, or a test), else DEFAULT_TIMEOUT_S;
    a value that is not a positive number of seconds is warned about once and ignored."""
    from opgen.environment import positive_setting

    return positive_setting(TIMEOUT_VARIABLE, float, DEFAULT_TIMEOUT_S, "number of seconds")


def smoke_failure(target_name: str, op_name: str, combo_tag: str, product: str | None = None,
                  timeout: float | None = None) -> str | None:
    """Build and run one kernel in a child process; None when it did not die, else why.

    stderr goes to a temporary file, not a pipe: a killed child's own children (the
    linker of a library being exported) could hold a pipe open and hang the read.
    """
    timeout = timeout_seconds() if timeout is None else timeout
    kernel = f"{op_name} {combo_tag}"
    with tempfile.TemporaryFile() as stderr:
        try:
            child = subprocess.run(smoke_command(target_name, op_name, combo_tag, product), stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=stderr, env=dict(os.environ), timeout=timeout)
        except subprocess.TimeoutExpired:
            return (f"smoke kernel {kernel} did not finish in {timeout:g} s in a child process (while "
                    f"{last_stage(stderr)}); {TIMEOUT_VARIABLE} sets the limit")
        if child.returncode >= 0:
            return None
        return died_by_signal(kernel, -child.returncode, stderr)


def died_by_signal(kernel: str, number: int, stderr) -> str:
    """One line: the kernel, the signal, the stage it died in, and the signal's likely cause."""
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    cause = SIGNAL_CAUSES.get(number) or signal.strsignal(number) or name
    messages = [line for line in stderr_lines(stderr) if not line.startswith(STAGE_PREFIX)]
    cause = cause.format(cache=cache_root(), last_line=messages[-1] if messages else "none")
    return f"smoke kernel {kernel} died by {name} while {last_stage(stderr)} in a child process: {cause}"


def cache_root() -> str:
    from opgen import diskcache     # here, not at the top: the parent imports this module cheaply

    return str(diskcache.cache_dir())


def stderr_lines(stderr) -> list[str]:
    stderr.seek(0)
    return [line for line in stderr.read().decode(errors="replace").splitlines() if line.strip()]


def last_stage(stderr) -> str:
    """The child's last stage (building, running), or "starting" before the first."""
    stages = [line.split()[1] for line in stderr_lines(stderr) if line.startswith(STAGE_PREFIX)]
    return next((s for s in reversed(stages) if s in (BUILDING, RUNNING)), "starting")


def run_smoke_kernel(target_name: str, op_name: str, combo_tag: str, product: str | None) -> None:
    """The child's work: build the kernel, run it once on the op's first sample problem through
    the path ``opgen generate`` verifies with. The error is not judged here (the parent's
    row does that); only whether the process survives."""
    import numpy as np

    from opgen import kernels, verify
    from opgen.ops import get_op
    from opgen.targets import get_target

    target = get_target(target_name)
    target = target.for_product(product) if product else target
    op = get_op(op_name)
    say(f"{BUILDING} {op_name} {combo_tag} for {target_name}")
    kernel = kernels.get_kernel(op, op.combo(combo_tag), target)
    say(f"{RUNNING} {op_name} {combo_tag} on {op.problems[0]}")
    verify.run_and_compare(kernel, op.problems[0], np.random.default_rng(0))
    say("done")


def say(line: str) -> None:
    """A stage line on stderr, flushed: the parent names the stage a killed child was in."""
    print(f"{STAGE_PREFIX}{line}", file=sys.stderr, flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m opgen.smoke", description="build and run one kernel (the "
                                     "child of opgen generate's smoke test)")
    parser.add_argument("target")
    parser.add_argument("op")
    parser.add_argument("combo", help="dtype combo tag")
    parser.add_argument("--product", default=None)
    args = parser.parse_args(argv)
    run_smoke_kernel(args.target, args.op, args.combo, args.product)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
