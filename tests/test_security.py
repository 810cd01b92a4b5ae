"""The disk cache is a trust boundary: opgen loads native code from it only if it is ours.

A planted library is a shared object whose constructor writes a marker file when it is
loaded: if the marker appears, opgen ran someone else's code. Files and directories are
given to another user with ``chown`` when the tests run as root (they do here and in CI);
otherwise the owner check is pointed at another uid (``diskcache._owner``).
"""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest

from opgen import diskcache, kernels
from opgen.ops import get_op
from opgen.ops.rms_norm_grad import Problem
from opgen.targets import get_target
from opgen.verify import run_and_compare

RMS = get_op("rms_norm_grad")
LLVM = get_target("llvm")
NOBODY = 65534

PLANTED_C = """
#include <stdio.h>
__attribute__((constructor)) static void planted(void) {
    FILE *f = fopen("%s", "w");
    if (f) { fputs("loaded", f); fclose(f); }
}
"""


def plant_library(path: Path, marker: Path) -> None:
    """Write a shared library at ``path`` that creates ``marker`` when dlopen()ed."""
    source = path.with_suffix(".c")
    source.write_text(PLANTED_C % marker)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(path), str(source)], check=True, timeout=120)
    source.unlink()


def give_away(path: Path, monkeypatch) -> None:
    """Make ``path`` belong to another user (chown as root; else the check's idea of us)."""
    if os.geteuid() == 0:
        os.chown(path, NOBODY, NOBODY)
    else:
        monkeypatch.setattr(diskcache, "_owner", lambda: os.geteuid() + 1)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("OPGEN_CACHE_DIR", str(root))
    monkeypatch.delenv("OPGEN_DISK_CACHE", raising=False)
    monkeypatch.setattr(diskcache, "_warned", set())
    kernels.clear_memory_cache()
    yield root
    kernels.clear_memory_cache()


def _build_and_check(rng):
    kernel = kernels.build(RMS, RMS.combo("f32-f32"), LLVM)
    comparisons, _ = run_and_compare(kernel, Problem((5, 40), 1), rng)
    assert all(c.passed for c in comparisons)
    return kernel


def test_cache_directories_are_created_private(cache, rng):
    _build_and_check(rng)
    for folder in (cache, cache / "kernels"):
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700, folder


def _library(cache: Path) -> Path:
    (path,) = (cache / "kernels").glob("*.so")
    return path


@pytest.mark.parametrize("damage", ["world-writable root", "root owned by another user",
                                    "file owned by another user", "group-writable file", "symlinked file"])
def test_a_cache_anyone_else_could_write_is_never_loaded(damage, cache, tmp_path, monkeypatch, rng):
    _build_and_check(rng)                               # the library a later call would load
    library, marker = _library(cache), tmp_path / "marker"
    if damage == "symlinked file":
        elsewhere = tmp_path / "elsewhere.so"
        plant_library(elsewhere, marker)
        library.unlink()
        library.symlink_to(elsewhere)
    else:
        plant_library(library, marker)                  # a planted file under the predicted name
    if damage == "world-writable root":
        cache.chmod(0o777)
    elif damage == "root owned by another user":
        give_away(cache, monkeypatch)
    elif damage == "file owned by another user":
        give_away(library, monkeypatch)
    elif damage == "group-writable file":
        library.chmod(0o664)
    with pytest.warns(UserWarning, match="not using the disk cache") as caught:
        kernel = _build_and_check(rng)                  # rebuilt, and correct
    assert not kernel.from_disk and not marker.exists(), "the planted library was loaded"
    assert "SECURITY.md" in str(caught[0].message)


def test_a_planted_file_in_a_world_writable_cache_dir_is_never_loaded_nor_exported(tmp_path, monkeypatch, rng):
    """OPGEN_CACHE_DIR=/tmp/opgen-cache on a shared machine: another user made the folder
    (world-writable, as /tmp folders often are) and planted the predicted file."""
    shared = tmp_path / "opgen-cache"
    (shared / "kernels").mkdir(parents=True)
    shared.chmod(0o777)
    (shared / "kernels").chmod(0o777)
    monkeypatch.setenv("OPGEN_CACHE_DIR", str(shared))
    monkeypatch.setattr(diskcache, "_warned", set())
    kernels.clear_memory_cache()
    mod, symbol = kernels.scheduled_module(RMS, RMS.combo("f32-f32"), LLVM)
    predicted, marker = kernels._cache_path(LLVM, symbol, mod.script()), tmp_path / "marker"
    plant_library(predicted, marker)
    with pytest.warns(UserWarning, match="writable by its group or by others"):
        kernel = _build_and_check(rng)
    assert not marker.exists() and not kernel.from_disk and kernel.library_path is None
    kernel.export(tmp_path / "exported.so")             # from memory, not a copy of the planted file
    assert b"planted" not in (tmp_path / "exported.so").read_bytes()
    kernels.clear_memory_cache()


def test_the_warning_comes_once_per_reason(cache, monkeypatch, rng):
    _build_and_check(rng)
    cache.chmod(0o777)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _build_and_check(rng)
        _build_and_check(rng)
    assert len([w for w in caught if "not using the disk cache" in str(w.message)]) == 1


def test_the_checks_run_at_load_time_not_per_call(monkeypatch, rng):
    """A warm aclnn call never consults the disk cache's checks."""
    import opgen

    x = np.ones((3, 8), np.float32)
    opgen.rms_norm_grad(x, x, np.ones(3, np.float32), np.ones(8, np.float32))   # plan and kernel cached
    monkeypatch.setattr(diskcache, "why_untrusted", lambda path: pytest.fail("checked on a warm call"))
    opgen.rms_norm_grad(x, x, np.ones(3, np.float32), np.ones(8, np.float32))


@pytest.mark.skipif(not get_target("ascend-emu").can_build(), reason="g++ or the emulation header is missing")
@pytest.mark.timeout(600)
def test_a_planted_emulation_library_is_never_loaded(cache, tmp_path, monkeypatch, rng):
    emu = get_target("ascend-emu").for_product("AtlasA2")
    kernels.get_kernel(RMS, RMS.combo("f32-f32"), emu)                 # compiles into the cache
    (library,) = (cache / "ascend-emu").glob("*.so")
    marker = tmp_path / "marker"
    plant_library(library, marker)
    (cache / "ascend-emu").chmod(0o777)
    kernels.clear_memory_cache()
    with pytest.warns(UserWarning, match="not using the disk cache"):
        kernel = kernels.get_kernel(RMS, RMS.combo("f32-f32"), emu)
    comparisons, _ = run_and_compare(kernel, Problem((5, 40), 1), rng)
    assert all(c.passed for c in comparisons) and not marker.exists()
    assert Path(kernel.module.kernel.lib._name).parent == diskcache.private_scratch_dir()
    assert stat.S_IMODE(os.stat(diskcache.private_scratch_dir()).st_mode) == 0o700
    shutil.rmtree(cache / "ascend-emu", ignore_errors=True)


def test_a_planted_thread_launcher_is_never_loaded(cache, tmp_path, monkeypatch):
    """The CPU kernels' thread launcher (targets/llvm_threads.py) is native code from the
    cache too: planted in a directory others can write, it is neither loaded nor trusted;
    the launcher is rebuilt in the private scratch directory and that one works."""
    import ctypes

    from opgen.targets import llvm_threads

    monkeypatch.setattr(diskcache, "_scratch", [])
    built = llvm_threads._build_launcher()
    if built is None:
        pytest.skip("no C compiler here")
    assert built.parent == cache / "llvm-threads"
    marker = tmp_path / "marker"
    plant_library(built, marker)
    built.parent.chmod(0o777)
    with pytest.warns(UserWarning, match="not using the disk cache"):
        rebuilt = llvm_threads._build_launcher()
    assert rebuilt.parent == diskcache.private_scratch_dir() and not marker.exists()
    lib = ctypes.CDLL(str(rebuilt))
    assert lib.opgen_threads_openmp_launches() == 0 and not marker.exists()
    shutil.rmtree(diskcache.private_scratch_dir(), ignore_errors=True)
