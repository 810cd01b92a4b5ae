"""The CPU kernels' parallel loops on the host program's OpenMP pool (targets/llvm_threads.py).

Each test goes through the public Python API, so the kernels come through the llvm target's
own build and load path (kernels.build -> LlvmTarget.loaded), not a test-local set-up.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import opgen
from opgen import aclnn, kernels
from opgen.ops.rms_norm_grad.reference import rms_norm_grad as reference
from opgen.targets import llvm_threads

torch = pytest.importorskip("torch")
import opgen.torch  # noqa: E402,F401  (adopts torch's pool, as a user's import does)

SHAPE = (941, 1030)          # ragged; several rows per task of a 2-thread team


def _rms_norm_grad_inputs(seed: int):
    gen = np.random.default_rng(seed)
    dy, x = (gen.standard_normal(SHAPE).astype(np.float32) for _ in range(2))
    rstd = (1.0 / np.sqrt((x.astype(np.float64) ** 2).mean(axis=1) + 1e-6)).astype(np.float32)
    gamma = gen.standard_normal(SHAPE[1]).astype(np.float32)
    return dy, x, rstd, gamma


def _check_against_reference(outs, inputs):
    dx_ref, dgamma_ref = reference(*(a.astype(np.float64) for a in inputs))
    np.testing.assert_allclose(outs[0], dx_ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(outs[1], dgamma_ref, rtol=1e-4, atol=1e-3)


def _forget_kernels():
    """Drop the process's kernels and the aclnn plans holding them: the next call builds."""
    kernels.clear_memory_cache()
    aclnn.clear_plan_cache()


def test_next_to_torch_kernels_run_on_torchs_openmp_pool():
    assert llvm_threads.launcher() is not None, "no C compiler here: the launcher cannot be built"
    assert llvm_threads.adopt_openmp() is not None, "torch is imported but no libgomp was found"
    inputs = _rms_norm_grad_inputs(1)
    before = llvm_threads.openmp_launches()
    outs = opgen.rms_norm_grad(*inputs)
    assert llvm_threads.openmp_launches() > before, "the kernel's parallel loop did not run on torch's pool"
    _check_against_reference(outs, inputs)


def test_results_do_not_depend_on_the_pools_thread_count():
    """The closure's chunking follows the team it is given: one thread or two, the same bits
    (opgen's reductions use fixed chunks, independent of the thread count)."""
    inputs = _rms_norm_grad_inputs(2)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        single = opgen.rms_norm_grad(*inputs)
        torch.set_num_threads(max(2, threads))
        team = opgen.rms_norm_grad(*inputs)
    finally:
        torch.set_num_threads(threads)
    for one, many in zip(single, team):
        np.testing.assert_array_equal(one, many)
    _check_against_reference(team, inputs)


def test_without_a_launcher_kernels_keep_tvms_pool(monkeypatch, tmp_path):
    """No C compiler (simulated): the library is not routed, the kernel is still right."""
    real = llvm_threads.launcher()
    monkeypatch.setattr(llvm_threads, "_launcher", None)
    monkeypatch.setattr(llvm_threads, "_launcher_failed", True)
    monkeypatch.setenv("OPGEN_CACHE_DIR", str(tmp_path))     # a fresh build through the target
    _forget_kernels()
    try:
        inputs = _rms_norm_grad_inputs(3)
        before = real.opgen_threads_openmp_launches()
        outs = opgen.rms_norm_grad(*inputs)
        assert real.opgen_threads_openmp_launches() == before
        _check_against_reference(outs, inputs)
    finally:
        _forget_kernels()


def test_without_torch_kernels_stay_on_tvms_pool(tmp_path):
    """A process that never loads an OpenMP runtime routes its kernels (the launcher
    forwards to TVM's pool), adopts nothing, and computes the same bits. (tvm_ffi imports
    torch when it can: the script makes that import fail, as where torch is absent.)"""
    inputs = _rms_norm_grad_inputs(4)
    np.savez(tmp_path / "inputs.npz", *inputs)
    script = textwrap.dedent(f"""
        import sys
        sys.modules["torch"] = None
        import numpy as np, opgen
        from opgen.targets import llvm_threads
        inputs = list(np.load({str(tmp_path / "inputs.npz")!r}).values())
        np.savez({str(tmp_path / "outputs.npz")!r}, *opgen.rms_norm_grad(*inputs))
        assert sys.modules["torch"] is None
        print(llvm_threads.adopt_openmp(), llvm_threads.openmp_launches())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OPGEN_CACHE_DIR": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2:] == ["None", "0"]
    alone = list(np.load(tmp_path / "outputs.npz").values())
    for theirs, ours in zip(alone, opgen.rms_norm_grad(*inputs)):
        np.testing.assert_array_equal(theirs, ours)
