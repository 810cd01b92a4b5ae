"""The segmented row pattern on ascend-emu (schedules.ascend.SegmentTiles, targets/ascend/emit_segments.py).

Toy ops only (tests/toy_ops.py ``segmented_row_pass``: a row sum, an elementwise output, two
per-segment column sums, a per-segment output, a sum over segments and a float32 accumulator
rounded to float16); no op names. What each test guards:

* the host TilingFunc (op_host sources alone, a host-only build) against the Python plan
  (plan_segments) over ragged sizes: tasks split per segment, split-N, small-D, split-D and
  the empty modes (default tier; the knobs' variants in the extended one);
* split-D, single-buffered and no-DataCopyPad runs of the toy against float64 (the default
  tier runs it split-N / small-D in tests/test_patterns.py);
* the events the segment kernel adds: dropping the one between the final pass's partial
  copy-ins and the Add that read the last one, or the one between a task's copy of its
  partials and the next task's zeros, is caught by the emulation.

Cost: the default tier builds the host sources once (~1.5 s of g++); the extended tier
four kernels (g++ 7-8 s each) and two host builds.
"""
from __future__ import annotations

import numpy as np
import pytest
import tvm

from toy_ops import build_toy, run_toy, segmented_row_pass, segmented_row_pass_reference

from opgen import kernels, schedules
from opgen.schedules import default_knobs
from opgen.schedules.ascend_tiling import UbBudgetError
from opgen.targets import get_target
from opgen.targets.ascend import build as emu_build

EMU = get_target("ascend-emu")
pytestmark = pytest.mark.skipif(not EMU.can_build(), reason="g++ or the AscendC emulation header is missing")
A2 = EMU.for_product("AtlasA2")

# (segments, rows a segment, cols): fewer and more segments than cores, one row, rows split
# into tasks unevenly, columns for small-D, split-N and split-D, and every empty axis.
SIZES = [(1, 1, 1), (3, 7, 33), (3, 33, 941), (1, 130, 7), (A2.hardware.vector_cores + 3, 2, 40), (2, 5, 20000),
         (0, 3, 8), (2, 0, 8), (2, 3, 0), (0, 0, 0)]


def _scheduled(target, knobs: dict):
    func = segmented_row_pass()
    sch = schedules.schedule(func, target, knobs)
    return func, kernels.declare_element_alignment(kernels.hoist_pass_buffers(sch))


def _host_replays_the_plan(target, knobs: dict, folder) -> None:
    func, lowered = _scheduled(target, knobs)
    symbol = func.attrs["global_symbol"]
    k, files = emu_build.project(lowered, symbol, target.hardware)
    host = emu_build.HostTiling(emu_build.compile_host(files, symbol, target.hardware, folder), k, target.hardware)
    rule = schedules.match(func, target)
    full = {**default_knobs(rule, target), **knobs}
    for segs, rows, cols in SIZES:
        try:
            plan = rule.tiling(func, target, full, [(segs, rows, cols), (segs, rows, cols), (segs, cols)])
        except UbBudgetError:           # whole rows asked for that do not fit: the C++ refuses too
            with pytest.raises(RuntimeError, match="do not fit the UB"):
                host.tiling(segs, rows, cols)
            continue
        cpp = host.tiling(segs, rows, cols).as_dict()
        want = {"block_dim": plan.block_dim, "block_factor": plan.block_factor, "ub_rows": plan.ub_rows,
                "ub_cols": plan.ub_cols, "pitch": plan.pitch, "mode": k.modes[plan.mode], **plan.fields}
        assert {f: cpp[f] for f in want} == want, ((segs, rows, cols), knobs, cpp, want)
        assert cpp["ws_pitch"] * cpp["tasks"] * 2 * 4 == plan.workspace_bytes, (segs, rows, cols)


def test_the_host_tiling_replays_the_python_plan(tmp_path):
    _host_replays_the_plan(A2, {}, tmp_path)


@pytest.mark.full
@pytest.mark.parametrize("knobs", [{"rows_per_pass": 4, "buffer_num": 1}, {"cols_per_pass": 1024}],
                         ids=["rows4-single", "cols1024"])
def test_the_host_tiling_replays_the_python_plan_for_knobs(knobs, tmp_path):
    _host_replays_the_plan(A2, knobs, tmp_path)


def _check(target, built, shapes, rng) -> None:
    for shape in shapes:
        dy, x = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
        w = rng.uniform(0.5, 1.5, (shape[0], shape[2])).astype(np.float32)
        got = run_toy(target, built, [dy, x, w], ["float32", "float32", "float32", "float16"])
        for out, want in zip(got, segmented_row_pass_reference(dy, x, w)):
            assert out.shape == want.shape, shape
            tol = (1e-4 if out.dtype == np.float32 else 1e-3) * (1 + np.abs(want)) * max(1, shape[0] * shape[1]) ** 0.5
            assert np.all(np.abs(out - want) <= tol), (shape, out.dtype)


@pytest.mark.full
@pytest.mark.parametrize("prod,knobs", [("AtlasA2", {"cols_per_pass": 1024, "buffer_num": 1}),
                                        ("Ascend950", {"buffer_num": 1})], ids=["A2-split-D", "950-single"])
def test_the_toy_runs_split_d_and_single_buffered(prod, knobs, rng):
    """Split-D (a task's rows one at a time in column chunks, the partials read back and
    added per row) and one buffer per queue, against float64 over ragged sizes."""
    target = EMU.for_product(prod)
    built = build_toy(segmented_row_pass(), target, knobs)
    _check(target, built, ((1, 1, 1), (3, 7, 3000), (1, 33, 1025), (5, 9, 941), (2, 0, 2000), (0, 2, 1500)), rng)


@pytest.mark.full
def test_the_toy_runs_without_data_copy_pad(rng):
    """Atlas training has no DataCopyPad: columns in whole 32-byte blocks of the half output
    (16), and the final pass's column slices too (a slice of 8 columns copied no block)."""
    target = EMU.for_product("AtlasTraining")
    built = build_toy(segmented_row_pass(), target)
    _check(target, built, ((3, 7, 64), (2, 33, 1024), (target.hardware.vector_cores + 8, 2, 32), (0, 3, 16),
                           (2, 0, 48)), rng)


# The line dropped -> what the emulation must say (the two pipes of the dependency), and the
# shape that exercises it: several tasks a segment (the final pass copies a second partial
# into the tile the last Add read), or several tasks a core (split-N copies a task's partials
# out of the accumulators the next task zeroes).
FAULTS = {
    "the copy-in overwrites what the last Add read": (r"on pipe MTE2 \(GM->UB copy\) while pipe V \(vector\) may "
                                                      r"still be reading", (2, 40, 33)),
    "the next task zeroes the accumulators": (r"on pipe V \(vector\) while pipe MTE3 \(UB->GM copy\) may still be "
                                              r"reading", (A2.hardware.vector_cores + 1, 1, 33)),
}


@pytest.mark.full
@pytest.mark.parametrize("comment", sorted(FAULTS))
def test_a_missing_event_of_the_segment_kernel_is_caught(comment, rng):
    func, lowered = _scheduled(A2, {})
    symbol = func.attrs["global_symbol"]
    k, files = emu_build.project(lowered, symbol, A2.hardware)
    rel = f"op_kernel/{symbol}.cpp"
    lines = [line for line in files[rel].splitlines() if line.endswith(f"// {comment}")]
    assert lines, comment
    files[rel] = "\n".join(line for line in files[rel].splitlines() if line not in lines)   # each column sum's
    faulty = emu_build.EmuKernel(emu_build.compile_project(files, symbol, A2.hardware), k, A2.hardware)
    pattern, (segs, rows, cols) = FAULTS[comment]
    dy, x = (rng.standard_normal((segs, rows, cols)).astype(np.float32) for _ in range(2))
    arrays = (dy, x, np.ones((segs, cols), np.float32), np.zeros_like(dy), np.zeros((segs, cols), np.float32),
              np.zeros(cols, np.float32), np.zeros(cols, np.float16))
    with pytest.raises(RuntimeError, match=pattern):
        faulty(*[tvm.runtime.tensor(a) for a in arrays])
