"""The CUDA backend's code path (opgen.runtime.backends.CupyBackend) with real numerics, here.

No GPU here, so CuPy is replaced by scripts/standin's stand-in (gpu_check.sh's dry run),
whose device memory is host memory and whose kernels are the same kernels compiled as OpenCL C (the cuda and opencl plans are the same
launch for launch, kernel names included: tests/test_export.py). What runs is the exported
CUDA plan, through CupyBackend's own bind / alloc / launch / copy-back, judged against the
float64 golden cases: a wrong argument order, workspace or copy-back shows as a mismatch.
What the stand-in cannot show (the driver loading the cubin, CUDA's launch itself) is
scripts/gpu_check.sh's job on a GPU.
"""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from opgen import cli
from opgen.runtime import check
from opgen.runtime import plan as plans
from opgen.targets import get_target

OPENCL, CUDA = get_target("opencl"), get_target("cuda")
STANDIN = Path(__file__).resolve().parent.parent / "scripts" / "standin" / "cupy" / "__init__.py"


def standin_cupy(monkeypatch, opencl_root: Path, loaded: list):
    """scripts/standin's CuPy (gpu_check.sh's dry run), as ``cupy``, recording each module loaded."""
    spec = importlib.util.spec_from_file_location("cupy", STANDIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setenv("OPGEN_STANDIN_OPENCL", str(opencl_root))

    class RawModule(module.RawModule):
        def __init__(self, path=None, **options):
            loaded.append(Path(path).name)
            super().__init__(path, **options)
    module.RawModule = RawModule
    monkeypatch.setitem(sys.modules, "cupy", module)


@pytest.mark.skipif(CUDA.export_missing() is not None, reason=f"{CUDA.export_missing()}")
@pytest.mark.parametrize("op,tag", [("rms_norm_grad", "bf16-f32"), ("group_norm_backward", "f16-f32")])
def test_the_cuda_plan_through_cupybackend_matches_the_reference(op, tag, tmp_path, monkeypatch):
    if not OPENCL.can_run():
        pytest.skip(f"opencl cannot run here: {OPENCL.missing()}")
    for target, extra in ((CUDA, []), (OPENCL, ["--no-cases"])):
        assert cli.main(["export", "--target", target.name, "--out", str(tmp_path), "--op", op, "--dtypes", tag,
                         *extra]) == 0
    # The row op's 128-bit variant too (its own sub-folder, the same kernel names on both targets).
    variants = [""] + (["vector"] if op == "rms_norm_grad" else [])
    assert {p.parent.name for p in (tmp_path / "cuda" / op / tag).glob("*/plan.json")} == set(variants[1:])
    for variant in variants:
        loaded = []
        standin_cupy(monkeypatch, tmp_path / "opencl", loaded)
        results = check.check_plan(tmp_path / "cuda" / op / tag / variant / "plan.json")
        assert loaded == ["kernel.sm_90.cubin"]
        assert results and all(r.passed for r in results), [r for r in results if not r.passed]
        plan = plans.load(tmp_path / "cuda" / op / tag / variant / "plan.json")
        ptx = plan.code_file(plan.code["archs"]["sm_90"]["ptx"]).read_text()
        assert {k.name for k in plan.kernels} <= set(re.findall(r"\.entry\s+(\w+)\(", ptx))
        assert (".v4." in ptx) == (variant == "vector")       # the variant's 128-bit accesses, compiled
