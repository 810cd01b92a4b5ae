"""``opgen export`` and the runner, end to end: exported plans replayed on a device here.

The opencl export of every op x dtype combo is replayed on the OpenCL device opgen's probe chose, by ``opgen.runtime.check`` in a
process where TVM cannot be imported: the golden cases (sample problems up to 4096
elements, ragged rows, every empty variant) are compared with the float64 reference. The
same checker and the same plan logic run the CUDA export on a GPU (scripts/gpu_check.sh);
here CUDA is compile-only: PTX and cubins per architecture, the plan's kernels in the PTX,
and a plan equal to the OpenCL one launch for launch (same kernels, grids, guards, arguments,
workspace): only the code differs, so the replay covers the CUDA plan's launches too.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from opgen import cli
from opgen.export import case_problems
from opgen.ops import all_ops, get_op
from opgen import selection
from opgen.runtime import plan as plans
from opgen.targets import get_target
from tiers import covering, tiered

OPENCL, CUDA = get_target("opencl"), get_target("cuda")
EVERY_KERNEL = [(op, combo) for op in all_ops() for combo in op.combos]
# Every kernel's plan replays in the extended tier; the default tier replays each pattern once and
# each dtype mix once (tests/tiers.py).
REPLAYED = {"representatives": [(op.name, combo.tag) for op, combo in covering(EVERY_KERNEL, "opencl")],
            "every-kernel": [(op.name, combo.tag) for op, combo in EVERY_KERNEL]}
NO_TVM = "import sys; sys.modules['tvm'] = None; sys.modules['tvm_ffi'] = None\n"


@pytest.mark.parametrize("argv,message", [
    (["--target", "nope"], "unknown target 'nope'"),
    (["--target", "llvm"], "target llvm cannot export here"),
    (["--target", "opencl", "--op", "nope"], "unknown op 'nope'"),
    (["--target", "opencl", "--op", "rms_norm_grad", "--dtypes", "f64-f64"], "unknown dtype combo 'f64-f64'"),
    (["--target", "opencl", "--op", "rms_norm_grad", "--bench", "rms_norm_grad=8x"], "--bench 'rms_norm_grad=8x'"),
    (["--target", "opencl", "--op", "rms_norm_grad", "--bench", "group_norm_backward=2,64,8x8,8"], "OP=PROBLEM"),
])
def test_bad_input_is_one_line_and_status_2(argv, message, tmp_path, capsys):
    assert cli.main(["export", "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_an_unwritable_out_folder_is_one_line_and_status_2(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert cli.main(["export", "--target", "opencl", "--out", str(blocker / "out")]) == 2
    err = capsys.readouterr().err
    assert "cannot write to" in err and len(err.strip().splitlines()) == 1


def test_every_op_has_ragged_and_empty_golden_cases():
    for op in all_ops():
        problems = case_problems(op)
        sizes = [max(a.size for a in op.random_inputs(p, op.combos[0], np.random.default_rng(0)).values())
                 for p in problems]
        assert any(s == 0 or min(a.size for a in op.random_inputs(p, op.combos[0], np.random.default_rng(0)).values()) == 0
                   for p, s in zip(problems, sizes)), op.name
        assert "37" in " ".join(str(p) for p in problems), op.name     # the ragged row count


def _export(target, out: Path, pairs, *extra) -> list:
    """``opgen export`` of each (op, combo); the plans' paths."""
    paths = []
    for op_name, tag in pairs:
        assert cli.main(["export", "--target", target.name, "--out", str(out), "--op", op_name, "--dtypes", tag,
                         *extra]) == 0
        paths.append(out / target.name / op_name / tag / "plan.json")
    return paths


def _opencl_env(tmp_path) -> dict:
    """The environment of a process without opgen's probe that opens the device the probe
    chose: the runtimes opgen's extras install (Intel's CPU runtime) are registered by opgen
    in its own process only (targets/opencl_devices.py), so they are listed in an
    OCL_ICD_VENDORS folder here, as a user of the runner would; PYOPENCL_CTX names the
    device by platform and device name (indices differ between the two lists)."""
    from opgen.targets import opencl_devices

    chosen = OPENCL._runtime().device
    if ":" in chosen.platform.name or ":" in chosen.name:
        pytest.skip(f"PYOPENCL_CTX cannot name {chosen.platform.name!r}:{chosen.name!r} (a colon)")
    vendors = tmp_path / "icd"
    vendors.mkdir()
    opencl_devices.write_vendors(vendors, opencl_devices.system_vendor_lines()
                                 + opencl_devices.pip_runtime_libraries())
    return dict(os.environ, PYOPENCL_CTX=f"{chosen.platform.name}:{chosen.name}", PYOPENCL_NO_CACHE="1",
                OCL_ICD_VENDORS=str(vendors))


@pytest.mark.timeout(900)
@pytest.mark.parametrize("which", tiered(list(REPLAYED), ["representatives"], list(REPLAYED)))
def test_exported_opencl_plans_replay_without_tvm_and_match_the_reference(tmp_path, which):
    if not OPENCL.can_run():
        pytest.skip(f"opencl cannot run here: {OPENCL.missing()}")
    paths = _export(OPENCL, tmp_path, REPLAYED[which])
    env = _opencl_env(tmp_path)
    code = NO_TVM + "from opgen.runtime.check import main\nsys.exit(main(sys.argv[1:]))\n"
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, env=env,
                          timeout=850)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith(("PASS", "FAIL"))]
    every_plan = sorted(tmp_path.rglob("plan.json"))    # the kernels' variants (vector/) as well
    assert len(rows) == len(every_plan) > len(paths) and all(r.startswith("PASS") for r in rows), proc.stdout
    assert any(r.split()[-1] == "vector" or "/vector " in r for r in rows), proc.stdout
    for path in paths:
        cases = json.loads((path.parent / "cases.json").read_text())
        assert any(re.search(r"\b0\b", c["problem"]) for c in cases), path     # an empty dimension ran


def test_the_replay_sees_a_wrong_launch(tmp_path):
    """Negative control: the second kernel of RmsNormGrad (dgamma's final sum) launched over
    one block instead of one per 32 columns (its threadIdx.x; threadIdx.y splits the partials)
    leaves dgamma's later columns unwritten (NaN): the 33- and 941-column cases fail."""
    if not OPENCL.can_run():
        pytest.skip(f"opencl cannot run here: {OPENCL.missing()}")
    from opgen.runtime import check

    (path,) = _export(OPENCL, tmp_path, [("rms_norm_grad", "f32-f32")])
    ctx = OPENCL._runtime().ctx
    assert all(r.passed for r in check.check_plan(path, context=ctx))
    doc = json.loads(path.read_text())
    doc["kernels"][1]["grid"][0] = "1"
    path.write_text(json.dumps(doc))
    failed = {(r.problem, r.output) for r in check.check_plan(path, context=ctx) if not r.passed}
    assert failed == {("x[4, 941] gamma_ndim=1", "dgamma"), ("x[7, 33] gamma_ndim=1", "dgamma")}, failed
    assert doc["kernels"][1]["block"][:2] == ["32", "8"], doc["kernels"][1]["block"]


@pytest.mark.skipif(CUDA.export_missing() is not None, reason=f"{CUDA.export_missing()}")
def test_cuda_export_writes_ptx_and_cubins_whose_kernels_the_plan_names(tmp_path):
    (path,) = _export(CUDA, tmp_path, [("group_norm_backward", "f32-f32")], "--no-cases")
    plan = plans.load(path)
    assert set(plan.code["archs"]) == {"sm_80", "sm_90"}
    for arch, files in plan.code["archs"].items():
        ptx = plan.code_file(files["ptx"]).read_text()
        assert f".target {arch}" in ptx
        assert plan.code_file(files["cubin"]).read_bytes()[:4] == b"\x7fELF"
        entries = set(re.findall(r"\.entry\s+(\w+)\(", ptx))
        assert {k.name for k in plan.kernels} <= entries, (arch, entries)
    assert len(plan.kernels) == 3 and all(k.guard.text != "1" for k in plan.kernels)   # every launch guarded
    # The CUDA plan is the OpenCL plan the replay test runs, launch for launch: only the code differs.
    (opencl_path,) = _export(OPENCL, tmp_path, [("group_norm_backward", "f32-f32")], "--no-cases")
    strip = lambda doc: {k: v for k, v in doc.items() if k not in ("code", "target")}   # noqa: E731
    assert strip(plan.doc) == strip(json.loads(opencl_path.read_text()))


def test_gpu_check_fails_when_the_cuda_runtime_cannot_load(tmp_path):
    """scripts/gpu_check.sh must fail, not skip, where CUDA cannot load (here: no CuPy, no GPU)."""
    probe = subprocess.run(["python3", "-c", "import cupy; cupy.cuda.runtime.getDeviceCount()"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip("the CUDA runtime loads here")
    (tmp_path / "cuda").mkdir()
    script = Path(__file__).resolve().parent.parent / "scripts" / "gpu_check.sh"
    proc = subprocess.run(["bash", str(script), str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "the CUDA runtime cannot load" in proc.stdout


class _Array:
    """A numpy-like array that is only a description (shape, dtype, strides, address): what
    the runner's checks read, at sizes too large to allocate here."""

    def __init__(self, shape, dtype, address):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        strides, step = [], self.dtype.itemsize
        for extent in reversed(self.shape):
            strides.insert(0, step)
            step *= extent
        self.strides, self.__array_interface__ = tuple(strides), {"data": (address, False)}


def test_the_runner_chooses_the_variant_exactly_where_the_library_does(tmp_path):
    """The exported family's selection rule against the library's per-call choice
    (opgen.selection.resolve, knob ``vector``) on aligned, misaligned, short, ragged and
    empty rows and both sides of the variant's 32-bit index bound."""
    import ml_dtypes

    op, combo = get_op("rms_norm_grad"), get_op("rms_norm_grad").combo("bf16-f32")
    (path,) = _export(OPENCL, tmp_path, [(op.name, combo.tag)], "--no-cases")
    family = plans.load_family(path)
    assert [p.doc["variant"] for p in family] == ["vector", "default"]
    bound = max(c for c in range(1031000, 1032400, 8) if (2048 + 1) * (c + 16 * 1024) < 2 ** 31)
    sizes = [(4, 16), (3, 24), (4, 12), (4, 941), (0, 16), (4, 0), (1, 8), (4, bound), (4, bound + 8),
             (100000, 8), (200000, 8)]
    caller = family[-1].caller_params()
    dtypes = {"bfloat16": ml_dtypes.bfloat16, "float32": np.float32}
    chosen = []
    for rows, cols in sizes:
        env = {"v0": rows, "v1": cols}
        shapes = {p.name: tuple(e(env) for e in p.shape) for p in caller}
        for misaligned in (None, "x", "dgamma", "rstd"):
            alignments = {p.name: 2 if p.name == misaligned else 64 for p in caller}
            library = selection.resolve(op, combo, OPENCL, shapes, alignments)[0].knobs["vector"]
            arrays = [_Array(shapes[p.name], dtypes[p.dtype], 1 << 20 | (2 if p.name == misaligned else 0))
                      for p in caller]
            runner = plans.choose(family, arrays).doc["variant"] == "vector"
            assert runner == library, (rows, cols, misaligned, library)
            chosen.append(library)
    assert any(chosen) and not all(chosen)
