"""The OpenCL device is chosen by probe, so opgen runs (or says why not) on any CPU.

Simulated failures: the probe is replaced to fail the way pip's PoCL 3.0 fails on a CPU LLVM
14 does not know (AMD Zen 5: "error: unknown target CPU 'generic'"), for PoCL alone (the
next device takes over) or for every device (the target cannot build: ``opgen generate``
marks its rows NOT RUN and exits 0, ``--target opencl`` is refused in one line, the opencl
tests skip). The ICD vendor list opgen writes for pip's runtimes is checked on a fake prefix,
and for real where Intel's runtime is installed.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from opgen import cli, kernels
from opgen.ops import get_op
from opgen.targets import get_target
from opgen.targets import opencl as opencl_target
from opgen.targets import opencl_devices as devices
from opgen.verify import run_and_compare

from opencl_no_device import ZEN5_LOG

OPENCL = get_target("opencl")
ROOT = Path(__file__).resolve().parents[1]
needs_opencl = pytest.mark.skipif(not OPENCL.can_run(), reason=f"opencl cannot run here: {OPENCL.missing()}")


def _platform(device) -> str:
    return device.platform.name.strip()


@pytest.fixture
def fresh_devices():
    """The device choice made anew for the test, and again after it (a test that breaks the
    probe must not leave its choice to the next test)."""
    opencl_target.reset()
    yield
    opencl_target.reset()


def _failing_for(platforms):
    """A probe that fails like PoCL on Zen 5 for devices of ``platforms`` (all: None)."""
    real = devices.probe

    def probe(device):
        if platforms is None or _platform(device) in platforms:
            return ZEN5_LOG
        return real(device)
    return probe


# ---- the probe --------------------------------------------------------------------------------

@needs_opencl
def test_the_chosen_device_passes_the_probe_and_a_broken_kernel_fails_it(monkeypatch):
    device = opencl_target._runtime().device
    assert devices.probe(device) is None
    monkeypatch.setattr(devices, "PROBE_SOURCE", devices.PROBE_SOURCE.replace("barrier(", "no_such_function("))
    log = devices.probe(device)
    assert log is not None and "no_such_function" in log, log


def test_the_error_line_of_a_build_log_is_what_the_message_keeps():
    assert devices.first_error_line(ZEN5_LOG) == "error: unknown target CPU 'generic'"
    assert devices.first_error_line("just one line") == "just one line"
    invalid = ("RuntimeError: clBuildProgram failed: INVALID_BUILD_OPTIONS\n\nBuild on <pyopencl.Device 'x'>:\n\n"
               "Invalid build option: -target-cpu\n\n(options: -I /x)")
    assert devices.first_error_line(invalid) == "Invalid build option: -target-cpu"


def test_the_probe_kernel_needs_what_opgens_kernels_use():
    for needed in ("__local", "barrier(CLK_LOCAL_MEM_FENCE)", "long", "vload_half"):
        assert needed in devices.PROBE_SOURCE
    assert devices.PROBE_EXPECTED > 2**32      # a 32-bit sum would not hold it


@needs_opencl
def test_candidates_put_gpus_first_and_leave_the_simulator_out_of_the_run_chain():
    kinds = [c.kind for c in devices.candidates()]
    assert kinds == sorted(kinds)
    choice = devices.choose()
    assert devices.kind_of(choice.device) != devices.SIMULATOR


# ---- PoCL fails: the next device, or none -------------------------------------------------------

def _intel_installed() -> bool:
    return devices.intel_library().is_file()


needs_intel = pytest.mark.skipif(not _intel_installed(),
                                 reason='Intel\'s CPU runtime is not installed (pip install -e ".[opencl-intel]")')


@needs_intel
def test_when_pocl_fails_its_probe_intels_runtime_runs_the_kernels(monkeypatch, fresh_devices, rng):
    monkeypatch.setattr(devices, "probe", _failing_for({"Portable Computing Language"}))
    assert OPENCL.can_run(), OPENCL.missing()
    assert "Intel" in OPENCL.run_place() and "AMD" not in OPENCL.hardware_key()["platform"]
    op = get_op("rms_norm_grad")
    kernel = kernels.build(op, op.combo("f16-f16"), OPENCL)
    assert _platform(kernel.module.runtime.device) == "Intel(R) OpenCL"
    assert "cl_khr_fp16" in kernel.module.runtime.device.extensions   # real half arithmetic there
    for problem in op.problems[:2]:
        comparisons, _ = run_and_compare(kernel, problem, rng)
        assert all(c.passed for c in comparisons), (problem, comparisons)


def test_when_no_device_passes_the_target_says_why_with_each_devices_log(monkeypatch, fresh_devices):
    monkeypatch.setattr(devices, "probe", _failing_for(None))
    assert not OPENCL.can_build() and not OPENCL.can_run()
    why = OPENCL.missing()
    if "pyopencl is not installed" in why:
        pytest.skip(why)
    assert "\n" not in why and "unknown target CPU 'generic'" in why, why
    assert ("opencl-intel" in why) == (not devices.intel_library().is_file()), why   # the hint, when it helps
    assert all(c.label in why for c in devices.candidates() if c.kind != devices.SIMULATOR), why
    assert OPENCL.run_place().startswith("not here: ")
    assert OPENCL.simulated().missing() is not None


def test_no_opencl_platform_at_all_is_a_reason_not_a_crash(monkeypatch, fresh_devices):
    cl = pytest.importorskip("pyopencl")

    def no_icd():
        raise cl.LogicError("clGetPlatformIDs failed: PLATFORM_NOT_FOUND_KHR")
    monkeypatch.setattr(cl, "get_platforms", no_icd)
    assert devices.candidates() == []
    assert OPENCL.missing().startswith("no OpenCL device found (pyopencl lists none)"), OPENCL.missing()


def test_generate_marks_the_rows_not_run_and_exits_0_and_a_named_target_is_refused(monkeypatch, fresh_devices,
                                                                                  tmp_path, capsys):
    monkeypatch.setattr(devices, "probe", _failing_for(None))
    monkeypatch.setattr(cli, "all_targets", lambda: [OPENCL])    # generate's unnamed targets: opencl alone
    assert cli.main(["generate", "--op", "rms_norm_grad", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("rms_norm_grad")]
    assert len(rows) == len(get_op("rms_norm_grad").combos), out
    assert all("NOT RUN" in r and "cannot build here:" in r and OPENCL.missing() in r for r in rows), out
    assert cli.main(["generate", "--op", "rms_norm_grad", "--target", "opencl", "--out", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "target opencl cannot build here" in lines[0], captured.err
    assert ("pyopencl is not installed" in lines[0] or "unknown target CPU 'generic'" in lines[0]), lines[0]
    assert "Traceback" not in captured.err + captured.out


def test_opgen_targets_says_build_run_and_simulate(monkeypatch, fresh_devices, capsys):
    assert cli.main(["targets"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("opencl "))
    build, run, simulate = line.split()[1:4]
    assert (build, run) == (("yes", "yes") if OPENCL.can_run() else ("no", "no")), line
    assert simulate == ("yes" if OPENCL.simulated().missing() is None else "no"), line
    monkeypatch.setattr(devices, "probe", _failing_for(None))
    opencl_target.reset()
    assert cli.main(["targets"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("opencl "))
    assert line.split()[1:4] == ["no", "no", "no"] and "simulate:" in line, line


def test_the_suite_skips_the_opencl_tests_when_no_device_builds(tmp_path):
    """The README's `pytest -q` on a machine where every device fails its probe: the opencl
    and Oclgrind tests skip with the reason, none fails (a fresh process, as CI runs it)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]),
           "OPGEN_CACHE_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "opencl_no_device", "-p",
                           "no:cacheprovider", "tests/test_gpu_opencl.py", "tests/test_gpu_races.py", "-k",
                           "opencl or oclgrind"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    # pytest's summary line, wherever a plugin's warnings (stderr, after stdout here) put it
    summary = next(line for line in reversed(proc.stdout.strip().splitlines())
                   if re.search(r"\d+ (passed|skipped|failed)", line))
    assert "skipped" in summary and "failed" not in summary and "error" not in summary, summary
    assert "unknown target CPU 'generic'" in out and "passed" not in summary, summary


def test_generate_when_pocl_really_cannot_build(tmp_path):
    """No monkeypatch: PoCL refuses ``POCL_EXTRA_BUILD_FLAGS=-target-cpu`` as it refuses
    every build on Zen 5, in a fresh process. With Intel's runtime installed (CI) the opencl
    rows pass there; without it, the named target is refused in one line (exit 2)."""
    env = {**os.environ, "POCL_EXTRA_BUILD_FLAGS": "-target-cpu generic", "OPGEN_CACHE_DIR": str(tmp_path)}
    env.pop("PYOPENCL_CTX", None)
    proc = subprocess.run([sys.executable, "-m", "opgen.cli", "generate", "--op", "rms_norm_grad", "--target",
                           "opencl", "--out", str(tmp_path / "out")], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    if proc.returncode == 2 and "pyopencl is not installed" in proc.stderr:
        pytest.skip(proc.stderr.strip())
    if _intel_installed():
        assert proc.returncode == 0, proc.stdout + proc.stderr
        rows = [line for line in proc.stdout.splitlines() if line.startswith("rms_norm_grad")]
        assert len(rows) == len(get_op("rms_norm_grad").combos), proc.stdout
        assert all("PASS" in r and "run: Intel(R) OpenCL" in r for r in rows), proc.stdout
    else:
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stdout + proc.stderr
        assert "Invalid build option: -target-cpu" in lines[0], lines[0]


# ---- PYOPENCL_CTX -----------------------------------------------------------------------------

@needs_opencl
def test_pyopencl_ctx_names_the_device_and_is_never_replaced(monkeypatch, fresh_devices):
    import pyopencl as cl

    device = opencl_target._runtime().device
    platforms = cl.get_platforms()
    index = next(i for i, p in enumerate(platforms) if p.name == device.platform.name)
    position = next(j for j, d in enumerate(platforms[index].get_devices()) if d.name == device.name)
    monkeypatch.setenv("PYOPENCL_CTX", f"{index}:{position}")
    choice = devices.choose()
    assert choice.device.name == device.name and "PYOPENCL_CTX" in choice.label
    monkeypatch.setattr(devices, "probe", _failing_for({_platform(device)}))
    refused = devices.choose()
    assert refused.device is None and len(refused.failures) == 1 and "PYOPENCL_CTX" in refused.failures[0][0]


# ---- the ICD loader's vendors -------------------------------------------------------------------

def test_pip_runtimes_are_found_beside_the_prefix_and_in_foreign_pyopencl_folders(tmp_path):
    prefix = tmp_path / "venv"
    (prefix / "lib").mkdir(parents=True)
    (prefix / "lib" / "libintelocl.so").write_bytes(b"")
    site = tmp_path / "site"
    (site / "pyopencl" / ".libs").mkdir(parents=True)
    (site / "pyopencl" / ".libs" / "zz-sim.icd").write_text("libsim-1234.so\n")
    found = devices.pip_runtime_libraries(prefix=str(prefix), paths=[str(site)])
    assert found == [str(prefix / "lib" / "libintelocl.so"), str(site / "pyopencl" / ".libs" / "libsim-1234.so")]
    assert devices.pip_runtime_libraries(prefix=str(tmp_path / "none"), paths=[]) == []


def test_the_users_vendors_are_kept_and_written_one_file_each(tmp_path, monkeypatch):
    vendors = tmp_path / "vendors"
    vendors.mkdir()
    (vendors / "a.icd").write_text("/opt/gpu/libgpu-ocl.so\n")
    (vendors / "b.txt").write_text("not an icd file")
    monkeypatch.setenv("OCL_ICD_VENDORS", str(vendors))
    assert devices.system_vendor_lines() == ["/opt/gpu/libgpu-ocl.so"]
    monkeypatch.setenv("OCL_ICD_VENDORS", str(tmp_path / "nowhere"))
    monkeypatch.setenv("OPENCL_VENDOR_PATH", str(vendors))
    assert devices.system_vendor_lines() == [str(tmp_path / "nowhere")]     # a library named directly
    monkeypatch.delenv("OCL_ICD_VENDORS")
    assert devices.system_vendor_lines() == ["/opt/gpu/libgpu-ocl.so"]
    out = tmp_path / "out"
    out.mkdir()
    written = devices.write_vendors(out, ["/opt/gpu/libgpu-ocl.so", "/venv/lib/libintelocl.so"])
    assert [p.name for p in written] == ["00-libgpu-ocl.icd", "01-libintelocl.icd"]
    assert written[1].read_text() == "/venv/lib/libintelocl.so\n"


@needs_intel
def test_the_loader_lists_intels_runtime_and_the_variable_is_put_back():
    import pyopencl as cl

    added = devices.prepare_loader()
    assert str(Path(sys.prefix) / "lib" / "libintelocl.so") in added
    assert "Intel(R) OpenCL" in [p.name for p in cl.get_platforms()]
    assert "opgen-icd-" not in os.environ.get("OCL_ICD_VENDORS", "")
