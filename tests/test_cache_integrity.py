"""A damaged library in opgen's own cache is set aside and rebuilt, never loaded
(opgen.diskcache: seals). Before seals, a cached library cut to half its size killed the
process with SIGBUS (exit 135) at its first call, and a library without the expected
symbol failed every later call.

Each kind of cached native library (a kernel, the CPU kernels' thread launcher, an Ascend
emulation library) is damaged each way the file system or a user can damage it, and a fresh
process then calls the kernels: it must compute the right answer, say in one line which file
was damaged, and leave an intact file in its place. Each damage runs in a child process,
since a dynamic loader serves a path it has opened from its table, and a SIGBUS must be a
failed test, not a dead test run.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from opgen import diskcache
from tiers import tiered

CALLS = r"""
import sys
import numpy as np
from opgen import kernels
from opgen.ops import get_op
from opgen.targets import get_target
from opgen.verify import run_and_compare

op = get_op("rms_norm_grad")
for target in sys.argv[1:]:
    kernel = kernels.get_kernel(op, "f32-f32", get_target(target))
    comparisons, _ = run_and_compare(kernel, op.problems[0], np.random.default_rng(0))
    print(target, max(c.ratio for c in comparisons))
"""
ANOTHER = r"""
from opgen import kernels
from opgen.targets import get_target
kernels.get_kernel("rms_norm", "f32-f32", get_target("llvm"))
kernels.get_kernel("rms_norm", "f32-f32", get_target("ascend-emu"))
"""


def run_python(code: str, cache: Path, *args, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "OPGEN_CACHE_DIR": str(cache), "OPGEN_DISK_CACHE": "1", **(env or {})}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=600)


def targets_here() -> list[str]:
    from opgen.targets import get_target
    return ["llvm"] + (["ascend-emu"] if get_target("ascend-emu").can_run() else [])


def libraries(cache: Path) -> dict:
    """The cached library of each kind that the calls above use."""
    found = {"kernel": sorted((cache / "kernels").glob("rms_norm_grad_f32_f32-llvm-*.so")),
             "thread launcher": sorted((cache / "llvm-threads").glob("opgen_threads-*.so")),
             "emulation library": sorted((cache / "ascend-emu").glob("rms_norm_grad_f32_f32-*.so"))}
    return {kind: paths[0] for kind, paths in found.items() if paths}


def others(cache: Path) -> dict:
    """A valid library of another kernel, per kind (the launcher has no sibling: a kernel)."""
    return {"kernel": sorted((cache / "kernels").glob("rms_norm_f32_f32-llvm-*.so"))[0],
            "thread launcher": sorted((cache / "kernels").glob("rms_norm_f32_f32-llvm-*.so"))[0],
            "emulation library": next(iter(sorted((cache / "ascend-emu").glob("rms_norm_f32_f32-*.so"))), None)}


def half(path: Path, other) -> None:
    os.truncate(path, path.stat().st_size // 2)


def one_page(path: Path, other) -> None:
    os.truncate(path, 4096)


def zero_filled(path: Path, other) -> None:
    path.write_bytes(bytes(path.stat().st_size))


def another_kernels_library(path: Path, other) -> None:
    path.write_bytes(other.read_bytes())


def another_kernels_library_resealed(path: Path, other) -> None:
    """A valid library of another kernel with a seal that names this file: only the symbol
    check can tell (what an older opgen, or a hand-copied cache, could leave)."""
    path.write_bytes(diskcache.payload(other))
    diskcache.seal(path, path.name)


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    targets = targets_here()
    for code, args in ((CALLS, targets), (ANOTHER, ())):
        done = run_python(code, cache, *args)
        assert done.returncode == 0, done.stderr[-2000:]
    return cache, targets


DAMAGES = [half, one_page, zero_filled, another_kernels_library, another_kernels_library_resealed]


# A file cut short, and the one only the symbol check catches, guard the two checks; the others
# are the same checks on other bytes (the extended tier).
@pytest.mark.parametrize("damage", tiered(DAMAGES, [half, another_kernels_library_resealed],
                                          [f.__name__ for f in DAMAGES]))
def test_a_damaged_cached_library_is_set_aside_and_rebuilt(warm_cache, damage):
    cache, targets = warm_cache
    damaged = {}
    for kind, path in libraries(cache).items():
        other = others(cache)[kind]
        if other is None:
            continue
        damage(path, other)
        damaged[kind] = path
    assert "kernel" in damaged and "thread launcher" in damaged
    done = run_python(CALLS, cache, *targets)
    assert done.returncode == 0, f"exit {done.returncode} (-7 or 135: SIGBUS)\n{done.stderr[-2000:]}"
    ratios = dict(line.split() for line in done.stdout.splitlines())
    assert set(ratios) == set(targets) and all(float(r) <= 1.0 for r in ratios.values()), done.stdout
    for kind, path in damaged.items():
        assert f"cached library {path} is damaged" in done.stderr, (kind, done.stderr[-2000:])
        assert diskcache.damage(path) is None, kind           # rebuilt in its place, sealed
        assert path.with_name(path.name + ".damaged").exists(), kind
    assert done.stderr.count("is damaged") == len(damaged), done.stderr[-2000:]


def test_a_seal_names_its_file_and_covers_every_byte(tmp_path):
    library = tmp_path / "a.so"
    library.write_bytes(b"\x7fELF" + bytes(range(256)) * 8)
    diskcache.seal(library, library.name)
    assert diskcache.damage(library) is None
    assert diskcache.payload(library) == b"\x7fELF" + bytes(range(256)) * 8
    data = bytearray(library.read_bytes())
    data[100] ^= 1
    library.write_bytes(bytes(data))
    assert "do not match" in diskcache.damage(library)
    renamed = tmp_path / "b.so"
    library.write_bytes(b"\x7fELF" + bytes(range(256)) * 8)
    diskcache.seal(library, library.name)
    library.rename(renamed)
    assert "sealed for 'a.so'" in diskcache.damage(renamed)


def test_damaged_opencl_binaries_are_set_aside_and_rebuilt(tmp_path):
    """pyopencl's binary cache under opgen's (native code on a CPU device): Intel's runtime
    writes binaries there (PoCL keeps its own cache). A binary cut short made every later
    build of that program raise (a KeyError inside pyopencl's fallback); now the folder is
    set aside with a warning and the program built again."""
    env_intel = {"PYOPENCL_CTX": "Intel"}
    place = run_python("from opgen.targets import get_target; print(get_target('opencl').run_place())", tmp_path,
                       env=env_intel)
    if place.returncode or "Intel" not in place.stdout:
        pytest.skip(f"no Intel OpenCL CPU runtime here ({place.stdout.strip() or place.stderr[-200:]})")
    first = run_python(CALLS, tmp_path, "opencl", env=env_intel)
    assert first.returncode == 0, first.stderr[-2000:]
    binaries = sorted((tmp_path / "opencl").rglob("binary"))
    assert binaries
    for binary in binaries:
        os.truncate(binary, binary.stat().st_size // 2)
    again = run_python(CALLS, tmp_path, "opencl", env=env_intel)
    assert again.returncode == 0, again.stderr[-2000:]
    assert float(again.stdout.split()[1]) <= 1.0
    assert f"cached library {tmp_path / 'opencl'} is damaged" in again.stderr
    assert (tmp_path / "opencl.damaged").is_dir()
