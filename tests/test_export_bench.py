"""scripts/export_bench.py, the GPU check's benchmark, driven here by scripts/standin's CuPy
(kernels as OpenCL C on the OpenCL device, torch on the CPU): the rows issue 40 asks for are
printed, each opgen row's outputs agree with torch's float64 autograd, and a case that cannot
run is a row and exit 1. The extended tier (an export for two targets: minutes here)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from opgen import cli
from opgen.targets import get_target
from tiers import FULL

ROOT = Path(__file__).resolve().parent.parent
OPENCL, CUDA = get_target("opencl"), get_target("cuda")

pytestmark = [FULL, pytest.mark.timeout(1200)]


@pytest.mark.skipif(CUDA.export_missing() is not None, reason=f"{CUDA.export_missing()}")
def test_the_benchmark_prints_every_row_with_its_error_against_float64(tmp_path):
    if not OPENCL.can_run():
        pytest.skip(f"opencl cannot run here: {OPENCL.missing()}")
    common = ["--out", str(tmp_path), "--op", "rms_norm_grad", "--dtypes", "bf16-bf16"]
    assert cli.main(["export", "--target", "cuda", *common, "--bench", "rms_norm_grad=64x512"]) == 0
    assert cli.main(["export", "--target", "opencl", "--no-cases", *common]) == 0
    env = {**os.environ, "OPGEN_STANDIN_OPENCL": str(tmp_path / "opencl"),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "scripts" / "standin"), str(ROOT),
                                          os.environ.get("PYTHONPATH", "")])}
    run = lambda *cases: subprocess.run(   # noqa: E731
        [sys.executable, str(ROOT / "scripts" / "export_bench.py"), str(tmp_path / "cuda"), "--repeats", "2",
         "--warmup", "1", "--copy-mib", "1", "--peers", "torch eager,Liger", *[f"--case={c}" for c in cases]],
        capture_output=True, text=True, env=env, timeout=600)
    good = run("rms_norm_grad:bf16-bf16:64x512")
    assert good.returncode == 0, good.stdout + good.stderr
    rows = {line.split()[3]: line for line in good.stdout.splitlines() if line.startswith("rms_norm_grad bf16-bf16")}
    assert set(rows) >= {"opgen", "torch", "Liger"}, good.stdout
    for line in good.stdout.splitlines():
        if line.startswith("rms_norm_grad bf16-bf16 64x512") and " ms " not in line and "err" in line:
            assert "MISMATCH" not in line
    assert sum(" err " in line for line in good.stdout.splitlines()) == 3, good.stdout   # generic, 128-bit, eager
    bad = run("rms_norm_grad:bf16-bf16:3x3")
    assert bad.returncode == 1 and "FAILED: PlanError: 3x3 is not in" in bad.stdout, bad.stdout
