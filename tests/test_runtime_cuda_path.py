"""The CUDA backend's code path (opgen.runtime.backends.CupyBackend) with real numerics, here.

No GPU here, so CuPy is replaced by a stand-in whose device memory is host memory and whose
kernels are the same kernels compiled as OpenCL C (the cuda and opencl plans are the same
launch for launch, kernel names included: tests/test_export.py). What runs is the exported
CUDA plan, through CupyBackend's own bind / alloc / launch / copy-back, judged against the
float64 golden cases: a wrong argument order, workspace or copy-back shows as a mismatch.
What the stand-in cannot show (the driver loading the cubin, CUDA's launch itself) is
scripts/gpu_check.sh's job on a GPU.
"""
from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from opgen import cli
from opgen.runtime import check
from opgen.runtime import plan as plans
from opgen.targets import get_target

OPENCL, CUDA = get_target("opencl"), get_target("cuda")


class FakeArray:
    """"Device" memory: host bytes."""

    def __init__(self, data: np.ndarray):
        self.data = data

    @property
    def nbytes(self):
        return self.data.nbytes

    def get(self):
        return self.data.copy()


def fake_cupy(opencl_source: Path, loaded: list):
    """A module with the CuPy names CupyBackend uses; kernels run on the OpenCL device."""
    runtime = OPENCL._runtime()
    cl, ctx, queue = runtime.cl, runtime.ctx, runtime.queue
    program = cl.Program(ctx, opencl_source.read_text()).build()

    def launch(name):
        def run(grid, block, args):
            flags = cl.mem_flags.READ_WRITE | cl.mem_flags.USE_HOST_PTR
            bufs = [(cl.Buffer(ctx, flags, hostbuf=a.data) if a.nbytes else cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4), a)
                    if isinstance(a, FakeArray) else (a, None) for a in args]
            kernel = cl.Kernel(program, name)
            kernel.set_args(*[b for b, _ in bufs])
            cl.enqueue_nd_range_kernel(queue, kernel, tuple(g * b for g, b in zip(grid, block)), block)
            for buf, array in bufs:
                if array is not None and array.nbytes:
                    mapped, _ = cl.enqueue_map_buffer(queue, buf, cl.map_flags.READ, 0, array.data.shape, np.uint8)
                    mapped.base.release(queue)
            queue.finish()
        return run

    class RawModule:
        def __init__(self, path):
            loaded.append(Path(path).name)

        def get_function(self, name):
            return launch(name)

    garbage = lambda n, dtype: FakeArray(np.full(n, 0xA5, np.uint8))   # noqa: E731 -- uninitialized memory
    cuda = types.SimpleNamespace(Device=lambda: types.SimpleNamespace(compute_capability="90"),
                                 runtime=types.SimpleNamespace(deviceSynchronize=lambda: None))
    return types.SimpleNamespace(ndarray=FakeArray, uint8=np.uint8, RawModule=RawModule, cuda=cuda, empty=garbage,
                                 asarray=lambda a: FakeArray(np.array(a, np.uint8)))


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
        source = tmp_path / "opencl" / op / tag / variant / "kernel.cl"
        monkeypatch.setitem(sys.modules, "cupy", fake_cupy(source, loaded))
        results = check.check_plan(tmp_path / "cuda" / op / tag / variant / "plan.json")
        assert loaded == ["kernel.sm_90.cubin"]
        assert results and all(r.passed for r in results), [r for r in results if not r.passed]
        plan = plans.load(tmp_path / "cuda" / op / tag / variant / "plan.json")
        ptx = plan.code_file(plan.code["archs"]["sm_90"]["ptx"]).read_text()
        assert {k.name for k in plan.kernels} <= set(re.findall(r"\.entry\s+(\w+)\(", ptx))
        assert (".v4." in ptx) == (variant == "vector")       # the variant's 128-bit accesses, compiled
