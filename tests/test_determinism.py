"""Reductions are deterministic: the same bits every run and for any thread count.

TVM's thread pool reads TVM_NUM_THREADS once, at start-up, so each thread count runs in
its own Python process. Each process runs every case twice on fresh (nan-filled) output
buffers, reports the pool size it really got and how the outputs compare with the
reference (so a kernel that wrote nothing could not pass), and saves the outputs' bytes.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

CASES = {  # id -> (op, combo tag, problem constructor arguments)
    "rms_norm_grad-f32-f32-x[333,1000]": ("rms_norm_grad", "f32-f32", [[333, 1000], 1]),
    "rms_norm_grad-bf16-bf16-x[333,1000]": ("rms_norm_grad", "bf16-bf16", [[333, 1000], 1]),
    "rms_norm_grad-bf16-f32-x[333,1000]": ("rms_norm_grad", "bf16-f32", [[333, 1000], 1]),
    "group_norm_backward-f32-f32-N3-C64-HxW300-G8": ("group_norm_backward", "f32-f32", [3, 64, 300, 8]),
}
THREAD_COUNTS = (1, 2)

SCRIPT = r"""
import json, sys
import numpy as np
import tvm
from opgen import kernels
from opgen.ops import get_op
from opgen.dtypes import numpy_dtype
from opgen.verify import compare_outputs
import opgen.ops.rms_norm_grad as rms, opgen.ops.group_norm_backward as gn

cases, out_dir = json.loads(sys.argv[1]), sys.argv[2]
problems = {"rms_norm_grad": lambda a: rms.Problem(tuple(a[0]), a[1]), "group_norm_backward": lambda a: gn.Problem(*a)}
meta = {"num_threads": int(tvm.get_global_func("runtime.NumThreads")()), "ratios": {}}
saved = {}
for i, (case, (op_name, tag, args)) in enumerate(sorted(cases.items())):
    op = get_op(op_name)
    combo, problem = op.combo(tag), problems[op_name](args)
    arrays = op.random_inputs(problem, combo, np.random.default_rng(1234 + i))
    ref = op.reference(problem, arrays)
    kernel = kernels.get_kernel(op, combo, "llvm")
    for run in ("a", "b"):
        outputs = {n: np.full(ref[n].shape, np.nan, numpy_dtype(combo[n])) for n in op.outputs}
        kernel(op.kernel_args(problem, {**arrays, **outputs}))
        for n, a in outputs.items():
            saved[f"{case}|{n}|{run}"] = a.view(np.uint8 if a.dtype.itemsize == 1 else f"u{a.dtype.itemsize}")
        meta["ratios"][f"{case}|{run}"] = max(c.ratio for c in compare_outputs(op, combo, outputs, ref))
np.savez(f"{out_dir}/outputs.npz", **saved)
with open(f"{out_dir}/meta.json", "w") as f:
    json.dump(meta, f)
"""


def _run(threads: int, out_dir) -> tuple[dict, dict]:
    out_dir.mkdir()
    env = {**os.environ, "TVM_NUM_THREADS": str(threads)}
    done = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(CASES), str(out_dir)],
                          env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"threads={threads}:\n{done.stdout}\n{done.stderr}"
    with np.load(out_dir / "outputs.npz") as npz:
        outputs = {k: npz[k].tobytes() for k in npz.files}
    return outputs, json.loads((out_dir / "meta.json").read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """thread count -> (outputs' bytes by 'case|tensor|run', meta) from its own process."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("TVM caps its pool at the core count: 1 vs 2 threads needs 2 cores")
    base = tmp_path_factory.mktemp("determinism")
    return {n: _run(n, base / f"threads{n}") for n in THREAD_COUNTS}


def _keys(outputs: dict, case: str, run: str) -> list[str]:
    keys = sorted(k for k in outputs if k.startswith(case + "|") and k.endswith("|" + run))
    assert keys, f"no outputs saved for {case}"
    return keys


def test_each_process_got_the_requested_thread_count(runs):
    assert {n: meta["num_threads"] for n, (_, meta) in runs.items()} == {n: n for n in THREAD_COUNTS}


@pytest.mark.parametrize("case", list(CASES))
def test_outputs_are_correct(runs, case):
    for threads, (_, meta) in runs.items():
        for run in ("a", "b"):
            ratio = meta["ratios"][f"{case}|{run}"]
            assert ratio <= 1.0, f"threads={threads} run {run}: ratio {ratio}"


@pytest.mark.parametrize("case", list(CASES))
def test_two_runs_give_identical_bits(runs, case):
    for threads, (outputs, _) in runs.items():
        for key in _keys(outputs, case, "a"):
            assert outputs[key] == outputs[key[:-1] + "b"], f"threads={threads}: {key} differs between runs"


@pytest.mark.parametrize("case", list(CASES))
def test_one_and_two_threads_give_identical_bits(runs, case):
    one, two = runs[1][0], runs[2][0]
    for key in _keys(one, case, "a"):
        assert one[key] == two[key], f"{key} differs between 1 and 2 threads"
