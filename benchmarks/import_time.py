"""What importing opgen costs: wall time of fresh interpreters, and where the time goes.

For each module, ``--runs`` fresh ``python -c "import X"`` processes, run one after another
from a directory outside the repository (so the installed package is what loads, with a
warm file cache after the first run); the wall time of each whole process, start-up
included (the ``-c pass`` row is the interpreter alone); the ``opgen.torch|torch`` row is
``import opgen.torch`` alone, timed inside interpreters that imported torch first. Then one
``python -X importtime -c "import opgen.torch"``: its top entries by cumulative time.

The machine may be shared: the load average is printed with each module's row, and the
minimum is the number least disturbed by others. ``-X importtime`` does not report modules
loaded through ``importlib.import_module`` (opgen's lazy attributes, the registries'
discovery): their time shows in their importer's self time.

Bytecode: with ``PYTHONDONTWRITEBYTECODE`` set (as on the 2-core VM these benchmarks ran on)
no ``.pyc`` is written, so every run compiles opgen's sources again (0.15-0.3 s there);
``--bytecode`` lets the runs write and reuse them, under a temporary
``PYTHONPYCACHEPREFIX`` (the repository stays clean), as an installed package would.

    python benchmarks/import_time.py [--runs 5] [--modules opgen opgen.torch ...] [--top 20] [--bytecode]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

MODULES = ("opgen", "opgen.torch", "opgen.api", "torch", "tvm")
# opgen's own share of ``import opgen.torch``: timed inside an interpreter that imported torch
# first (less exposed to torch's own variation on a busy machine).
AFTER_TORCH = "opgen.torch|torch"


def wall_times(module: str, runs: int, cwd: str, env: dict) -> list[float]:
    """Seconds of ``runs`` fresh interpreters importing ``module`` (the first one unmeasured:
    it warms the file cache); for AFTER_TORCH, of ``import opgen.torch`` in each."""
    if module == AFTER_TORCH:
        code = ("import time, torch\nstart = time.perf_counter()\nimport opgen.torch\n"
                "print(time.perf_counter() - start)")
    else:
        code = "pass" if module == "(start-up)" else f"import {module}"
    times = []
    for i in range(runs + 1):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, check=True, capture_output=True,
                              text=True)
        seconds = float(done.stdout.split()[-1]) if module == AFTER_TORCH else time.perf_counter() - start
        if i:
            times.append(seconds)
    return times


def importtime_top(module: str, top: int, cwd: str, env: dict) -> list[tuple[int, int, str]]:
    """(self µs, cumulative µs, name) of the ``top`` entries of ``-X importtime`` by
    cumulative time (nested names keep their indentation)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"], cwd=cwd, env=env,
                          capture_output=True, text=True, check=True)
    rows = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own, cumulative, name = line[len("import time:"):].split("|", 2)
        rows.append((int(own), int(cumulative), name.rstrip()))
    return sorted(rows, key=lambda r: -r[1])[:top]


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh interpreters per module (default 5)")
    parser.add_argument("--modules", nargs="+", default=["(start-up)", *MODULES, AFTER_TORCH],
                        help=f"modules to import ({AFTER_TORCH!r}: opgen.torch timed after torch)")
    parser.add_argument("--top", type=int, default=20, help="-X importtime entries to show (0: none)")
    parser.add_argument("--importtime", default="opgen.torch", help="the module -X importtime reads")
    parser.add_argument("--bytecode", action="store_true",
                        help="write and reuse .pyc files (under a temporary PYTHONPYCACHEPREFIX)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as cwd:
        env = dict(os.environ)
        if args.bytecode:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = os.path.join(cwd, "pycache")
        bytecode = "written and reused" if args.bytecode or not env.get("PYTHONDONTWRITEBYTECODE") else "not written"
        print(f"{sys.executable} (Python {sys.version.split()[0]}), {args.runs} runs each, from {cwd}, "
              f"bytecode {bytecode}")
        print(f"{'module':<17} {'median s':>9} {'min s':>7}  load avg (1/5/15 min) before -> after")
        for module in args.modules:
            before = load()
            times = wall_times(module, args.runs, cwd, env)
            print(f"{module:<17} {statistics.median(times):9.3f} {min(times):7.3f}  {before} -> {load()}")
        if args.top:
            print(f"\npython -X importtime -c 'import {args.importtime}': top {args.top} by cumulative time "
                  f"(load {load()})")
            print(f"{'self ms':>8} {'cum ms':>8}  module")
            for own, cumulative, name in importtime_top(args.importtime, args.top, cwd, env):
                print(f"{own / 1e3:8.1f} {cumulative / 1e3:8.1f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
