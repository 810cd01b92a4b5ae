"""The CPU kernels' parallel loops on the host program's OpenMP pool, when it has one.

Why: TVM's parallel loops run on TVM's own thread pool. A program that also runs torch
has a second pool, torch's OpenMP (libgomp) threads, and both spin for a while after each
call waiting for more work. Interleaved, each pool's spinning threads take the cores the
other's work needs next. Measured (2-core VM, GroupNorm f32 (32,32,64x64), G=8, median of
9 interleaved rounds, ms), opgen.torch.GroupNorm's backward (the kernel, then torch
accumulating the gradient) took 6.06 on TVM's pool and 2.97 on torch's, its forward 1.75
and 1.25; the kernel alone, called back to back, 2.20 and 1.99. OMP_WAIT_POLICY=PASSIVE
stops the fight only by slowing torch's own ops (docs/torch.md).

How: TVM compiles a parallel loop into a closure and calls it through a function pointer
the kernel library holds, ``__TVMBackendParallelLaunch`` (and ``__TVMBackendParallel
Barrier``), which TVM's loader points at its runtime. ``route`` points them at a small
launcher compiled here (``_SOURCE``). It forwards to TVM's pool until ``adopt_openmp``
finds an OpenMP runtime loaded in the process (torch's libgomp), and from then on runs
each closure as a ``GOMP_parallel`` team of that runtime: the same threads torch uses, its
thread count (``torch.set_num_threads``) included. The closure's contract is kept: task
ids 0..n-1 of an n-thread team, the barrier a team barrier, the first non-zero status
returned. A barrier is matched to the pool that started its team, so switching pools
between calls is safe.

Anything missing (no C compiler, no ``/proc/self/maps``, a library without the pointer, a
libgomp without ``GOMP_parallel``) leaves the kernels on TVM's pool: slower next to
torch, never wrong. Modules built in memory and not written to the disk cache keep TVM's
pool too (their pointer lives in JIT memory that ctypes cannot name).
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from opgen import diskcache

LAUNCH_POINTER = "__TVMBackendParallelLaunch"
BARRIER_POINTER = "__TVMBackendParallelBarrier"

# TVM's C ABI for parallel closures (tvm/runtime/c_backend_api.h), and a launcher that
# forwards to TVM's runtime or runs the closure on a GOMP team. No libgomp is linked: the
# GOMP entry points are handed over by adopt_openmp from the runtime already loaded.
_SOURCE = r"""
#include <stdint.h>
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif
typedef struct { void* sync_handle; int32_t num_task; } TVMParallelGroupEnv;
typedef int (*Closure)(int task_id, TVMParallelGroupEnv* penv, void* cdata);
typedef int (*Launch)(Closure f, void* cdata, int num_task);
typedef int (*Barrier)(int task_id, TVMParallelGroupEnv* penv);
typedef void (*GompParallel)(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags);
typedef int (*OmpInt)(void);
typedef void (*GompBarrier)(void);

static Launch tvm_launch;
static Barrier tvm_barrier;
static GompParallel gomp_parallel;
static OmpInt omp_thread_num, omp_num_threads;
static GompBarrier gomp_barrier;
static int gomp_team_tag;              /* its address marks a team this launcher started */
static unsigned long long gomp_launches;

void opgen_threads_set_tvm_launch(void* launch) { tvm_launch = (Launch)launch; }
void opgen_threads_set_tvm_barrier(void* barrier) { tvm_barrier = (Barrier)barrier; }

void opgen_threads_set_openmp(void* parallel, void* thread_num, void* num_threads, void* barrier) {
  omp_thread_num = (OmpInt)thread_num;
  omp_num_threads = (OmpInt)num_threads;
  gomp_barrier = (GompBarrier)barrier;
  __atomic_store_n(&gomp_parallel, (GompParallel)parallel, __ATOMIC_RELEASE);
}

unsigned long long opgen_threads_openmp_launches(void) { return gomp_launches; }

typedef struct { Closure f; void* cdata; int status; } Job;

static void run_task(void* arg) {
  Job* job = (Job*)arg;
  TVMParallelGroupEnv env = {&gomp_team_tag, omp_num_threads()};
  int status = job->f(omp_thread_num(), &env, job->cdata);
  if (status != 0) __atomic_store_n(&job->status, status, __ATOMIC_RELAXED);
}

int opgen_parallel_launch(Closure f, void* cdata, int num_task) {
  GompParallel parallel = __atomic_load_n(&gomp_parallel, __ATOMIC_ACQUIRE);
  if (parallel == NULL) return tvm_launch(f, cdata, num_task);
  Job job = {f, cdata, 0};
  __atomic_fetch_add(&gomp_launches, 1, __ATOMIC_RELAXED);
  parallel(run_task, &job, num_task > 0 ? (unsigned)num_task : 0u, 0u);
  return job.status;
}

int opgen_parallel_barrier(int task_id, TVMParallelGroupEnv* penv) {
  if (penv->sync_handle != &gomp_team_tag) return tvm_barrier(task_id, penv);
  gomp_barrier();
  return 0;
}
#ifdef __cplusplus
}
#endif
"""

_lock = threading.Lock()
_launcher: ctypes.CDLL | None = None
_launcher_failed = False
_adopted: str | None = None


def _compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    return None


def _build_launcher() -> Path | None:
    """The launcher library: the cached one when it is there intact (a damaged one is set
    aside: opgen.diskcache.intact), else compiled once per source; None without a C compiler."""
    compiler = _compiler()
    if compiler is None:
        return None
    name = f"opgen_threads-{hashlib.sha256((diskcache.KEY_FORMAT + _SOURCE).encode()).hexdigest()[:16]}.so"
    lib = diskcache.code_dir("llvm-threads", "thread launchers") / name
    if diskcache.intact(lib):
        return lib
    with tempfile.TemporaryDirectory() as tmp:
        source, out = Path(tmp) / "threads.c", Path(tmp) / "threads.so"
        source.write_text(_SOURCE)
        done = subprocess.run([compiler, "-O2", "-fPIC", "-shared", str(source), "-o", str(out)],
                              capture_output=True, text=True)
        if done.returncode:
            return None
        return diskcache.place(out, lib)


_ENTRIES = ("opgen_threads_set_tvm_launch", "opgen_threads_set_tvm_barrier", "opgen_threads_set_openmp",
            "opgen_threads_openmp_launches", "opgen_parallel_launch", "opgen_parallel_barrier")


def _load(path: Path, retry: bool = True) -> ctypes.CDLL | None:
    """The launcher at ``path``, loaded, if it has every entry. Otherwise it is set aside,
    rebuilt in its place and loaded from a private copy (this process has loaded the old
    file under that name, and the dynamic loader would hand it out again); None when even
    that fails (the kernels stay on TVM's pool: slower next to torch, never wrong)."""
    try:
        lib = ctypes.CDLL(str(path))
    except OSError:
        lib = None
    if lib is not None and all(hasattr(lib, entry) for entry in _ENTRIES):
        return lib
    diskcache.set_aside(path, "the loader refused it" if lib is None else "it lacks the thread launcher's entry points")
    rebuilt = _build_launcher() if retry else None
    return None if rebuilt is None else _load(diskcache.private_copy(rebuilt), retry=False)


def launcher() -> ctypes.CDLL | None:
    """The loaded launcher (built on first use), or None where it cannot be built."""
    global _launcher, _launcher_failed
    with _lock:
        if _launcher is None and not _launcher_failed:
            path = _build_launcher()
            _launcher = None if path is None else _load(path)
            _launcher_failed = _launcher is None
            if _launcher is not None:
                _launcher.opgen_threads_openmp_launches.restype = ctypes.c_ulonglong
        return _launcher


def launcher_loaded() -> bool:
    """Whether the launcher is loaded already (some kernel was routed), without building it."""
    return _launcher is not None


def _address(lib: ctypes.CDLL, symbol: str) -> int:
    return ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value


def _loaded_openmp() -> str | None:
    """Path of the GNU OpenMP runtime mapped into this process (torch's libgomp), or None."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and os.path.basename(fields[5].strip()).startswith("libgomp"):
                    return fields[5].strip()
    except OSError:
        return None
    return None


def adopt_openmp() -> str | None:
    """Run routed kernels' parallel loops on the OpenMP runtime loaded in this process, if
    one is. Called at every kernel routed and by ``LlvmTarget.share_host_threads`` (torch
    may be imported after the first kernel); once adopted, for good. Returns the runtime's
    path, or None (TVM's pool stays)."""
    global _adopted
    if _adopted is not None:
        return _adopted
    lib, path = launcher(), _loaded_openmp()
    if lib is None or path is None:
        return None
    try:
        gomp = ctypes.CDLL(path, mode=getattr(os, "RTLD_NOLOAD", 0) | os.RTLD_LAZY)
        entries = [_address(gomp, name) for name in
                   ("GOMP_parallel", "omp_get_thread_num", "omp_get_num_threads", "GOMP_barrier")]
    except (OSError, AttributeError):
        return None
    with _lock:
        lib.opgen_threads_set_openmp(*(ctypes.c_void_p(a) for a in entries))
        _adopted = path
    return path


def route(library_path: Path) -> bool:
    """Point the parallel loops of the kernel library at ``library_path`` (already loaded by
    TVM) at the launcher; returns whether it did (False: TVM's pool stays, as built)."""
    lib = launcher()
    if lib is None:
        return False
    try:
        kernel = ctypes.CDLL(str(library_path), mode=getattr(os, "RTLD_NOLOAD", 0) | os.RTLD_LAZY)
    except OSError:
        return False                      # not loaded by TVM: nothing to route
    pointers = {LAUNCH_POINTER: ("opgen_parallel_launch", lib.opgen_threads_set_tvm_launch),
                BARRIER_POINTER: ("opgen_parallel_barrier", lib.opgen_threads_set_tvm_barrier)}
    with _lock:
        found = {symbol: _pointer(kernel, symbol) for symbol in pointers}
        if found[LAUNCH_POINTER] is None or not found[LAUNCH_POINTER].value:
            return False                  # no parallel loop, or TVM did not set it up
        for symbol, pointer in found.items():
            if pointer is None or not pointer.value:
                continue
            ours, remember_tvm = pointers[symbol]
            ours = _address(lib, ours)
            if pointer.value != ours:     # TVM's runtime function: where ours forwards
                remember_tvm(ctypes.c_void_p(pointer.value))
                pointer.value = ours
    adopt_openmp()
    return True


def _pointer(lib: ctypes.CDLL, symbol: str) -> ctypes.c_void_p | None:
    try:
        return ctypes.c_void_p.in_dll(lib, symbol)
    except ValueError:
        return None


def openmp_launches() -> int:
    """Parallel loops run on the adopted OpenMP pool so far (0 without the launcher)."""
    lib = launcher()
    return int(lib.opgen_threads_openmp_launches()) if lib is not None else 0
