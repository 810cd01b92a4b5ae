"""Stage patterns every target schedules, shown on toy ops defined only in the tests, so a
real op that needs a pattern lands with its package alone.

* A row pass with two elementwise outputs and two column sums (DeepNorm's shape) is
  matched by the row rule of every target (not the fallback) and is correct everywhere.
* Per-channel sums over N and HW with per-channel scalars (BatchNorm's shape): the channel
  rule of every target (ascend-emu: ChannelTiles, tested in depth in
  tests/test_ascend_channels.py); the statistics are told by what they read, not by where
  TE put them (BatchNormBackward's order), and a sum that needs another sum first is no
  channel pattern.
* The group pattern behind an elementwise prologue (GroupNormSwish's shape: a sigmoid
  over the whole data): the prologue is inlined and the group rules take the rest.
"""
from __future__ import annotations

import numpy as np
import pytest

from opgen import schedules
from opgen.schedules import patterns
from opgen.targets import get_target

from toy_ops import (build_toy, channel_pass, channel_pass_blended, channel_pass_reference,
                     channel_two_sums_in_sequence, channel_two_sums_in_sequence_reference, check_blended,
                     group_pass_with_prologue, group_pass_with_prologue_reference, run_toy, two_output_row_pass,
                     two_output_row_pass_reference)

ROW_RULES = {"llvm": "RowPassWithColumnSums", "cuda": "GpuRowPass", "opencl": "GpuRowPass", "ascend-emu": "RowTiles"}


@pytest.mark.parametrize("target_name", sorted(ROW_RULES))
def test_two_elementwise_outputs_are_the_row_pattern_on_every_target(target_name):
    target = get_target(target_name)
    assert type(schedules.match(two_output_row_pass(), target)).__name__ == ROW_RULES[target_name]


@pytest.mark.parametrize("target_name", ["llvm", "opencl", "ascend-emu"])
def test_two_elementwise_outputs_run_correctly(target_name, rng):
    target = get_target(target_name)
    if not target.can_run():
        pytest.skip(f"{target_name} cannot run here: {target.missing()}")
    if target_name == "ascend-emu":
        target = target.for_product("AtlasA2")
    built = build_toy(two_output_row_pass(), target)
    for rows, cols in ((1, 1), (7, 33), (97, 941), (3, 12290), (0, 8)):
        dy, x = (rng.standard_normal((rows, cols)).astype(np.float32) for _ in range(2))
        g = rng.uniform(0.5, 1.5, cols).astype(np.float32)
        got = run_toy(target, built, [dy, x, g], ["float32"] * 4)
        for out, want in zip(got, two_output_row_pass_reference(dy, x, g)):
            assert out.shape == want.shape
            assert np.all(np.abs(out - want) <= 1e-4 * (1 + np.abs(want)) * max(1, rows) ** 0.5), (rows, cols)


def test_two_elementwise_outputs_compile_with_nvcc():
    cuda = get_target("cuda")
    if not cuda.can_build():
        pytest.skip(f"cuda cannot build here: {cuda.missing()}")
    module, _, _ = build_toy(two_output_row_pass(), cuda)
    reports = cuda.compile_check(module)
    assert all(r.ok for r in reports), [r.error for r in reports]


# ---- per-channel sums over N and HW (BatchNorm's shape) ------------------------------------

CHANNEL_RULES = {"llvm": "ChannelPass", "cuda": "GpuChannelPass", "opencl": "GpuChannelPass",
                 "ascend-emu": "ChannelTiles"}


@pytest.mark.parametrize("target_name", sorted(CHANNEL_RULES))
def test_per_channel_sums_are_the_channel_pattern(target_name):
    target = get_target(target_name)
    assert type(schedules.match(channel_pass(), target)).__name__ == CHANNEL_RULES[target_name]


@pytest.mark.parametrize("target_name", ["llvm", "opencl", "ascend-emu"])
def test_per_channel_sums_run_correctly(target_name, rng):
    target = get_target(target_name)
    if not target.can_run():
        pytest.skip(f"{target_name} cannot run here: {target.missing()}")
    if target_name == "ascend-emu":
        target = target.for_product("AtlasA2")
    built = build_toy(channel_pass(), target)
    for shape in ((1, 1, 1), (2, 3, 7), (3, 5, 941), (1, 2, 12290), (4, 33, 49), (0, 3, 5), (2, 0, 4), (2, 3, 0)):
        dy, x = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
        shift = rng.standard_normal(shape[1]).astype(np.float32)
        got = run_toy(target, built, [dy, x, shift], ["float32"] * 3)
        for out, want in zip(got, channel_pass_reference(dy, x, shift)):
            assert out.shape == want.shape
            scale = max(1, shape[0] * shape[2]) ** 0.5
            assert np.all(np.abs(out - want) <= 1e-5 * scale * (1 + np.abs(want))), shape


def test_per_channel_sums_compile_with_nvcc():
    cuda = get_target("cuda")
    if not cuda.can_build():
        pytest.skip(f"cuda cannot build here: {cuda.missing()}")
    module, _, _ = build_toy(channel_pass(), cuda)
    reports = cuda.compile_check(module)
    assert all(r.ok for r in reports), [r.error for r in reports]


# ---- BatchNorm's own order: statistics after a sum, a mode flag and eps as data -------------

def test_statistics_are_told_by_what_they_read_not_by_program_order():
    infos = schedules.blocks(schedules.pattern_schedule(channel_pass_blended()))
    order = {b.name: b.order for b in infos}
    # TE walks from dx: the first sum comes before the statistics (BatchNormBackward's order too).
    assert order["bl_s_dy"] < order["bl_mean"] < order["bl_s_xmu"] and order["bl_s_dy"] < order["bl_inv"]
    _, sums, stages = patterns.channel_pass(infos)
    statistics, later = patterns.split_stages(stages, sums)
    assert [b.name for b in statistics] == ["bl_mean", "bl_inv"]
    assert [b.name for b in later] == ["bl_mdy", "bl_proj", "bl_dw", "bl_db"]


@pytest.mark.parametrize("target_name", ["llvm", "opencl", "ascend-emu"])
def test_statistics_after_a_sum_run_correctly(target_name, rng):
    """Every channel's stages once per channel (a stage of inputs alone under the CPU's
    channel loop was computed for all C channels in every iteration, dx with it), and the
    per-channel outputs (dw, db) written by one thread each on GPUs (their own kernel)."""
    target = get_target(target_name)
    if not target.can_run():
        pytest.skip(f"{target_name} cannot run here: {target.missing()}")
    if target_name == "ascend-emu":
        target = target.for_product("AtlasA2")
    for dtype in (np.float32, np.float16):
        built = build_toy(channel_pass_blended(np.dtype(dtype).name), target)
        for shape in ((1, 1, 1), (2, 3, 7), (3, 5, 941), (0, 3, 5), (2, 0, 4), (2, 3, 0)):
            for training in (True, False):
                check_blended(target, built, rng, shape, dtype, training)


def test_statistics_after_a_sum_compile_with_nvcc():
    cuda = get_target("cuda")
    if not cuda.can_build():
        pytest.skip(f"cuda cannot build here: {cuda.missing()}")
    assert type(schedules.match(channel_pass_blended(), cuda)).__name__ == "GpuChannelPass"
    module, _, _ = build_toy(channel_pass_blended(), cuda)
    reports = cuda.compile_check(module)
    assert all(r.ok for r in reports), [r.error for r in reports]


@pytest.mark.parametrize("target_name", ["llvm", "opencl", "ascend-emu"])
def test_a_sum_of_values_that_need_another_sum_is_not_the_channel_pattern(target_name, rng):
    """seq_s2 reads seq_mu, which reads seq_s1: two passes over the data before the output,
    which no channel rule schedules; the CPU and GPU fallbacks run it (correctly, on llvm)."""
    func = channel_two_sums_in_sequence()
    assert patterns.channel_pass(schedules.blocks(schedules.pattern_schedule(func))) is None
    target = get_target(target_name)
    if target_name == "ascend-emu":
        with pytest.raises(NotImplementedError, match="no Ascend pattern .*test_channel_two_sums"):
            schedules.match(func, target).apply(func, target, {})
        return
    assert "Fallback" in type(schedules.match(func, target)).__name__
    if target_name == "llvm":
        built = build_toy(func, target)
        x = rng.standard_normal((3, 4, 33)).astype(np.float32)
        (got,), (want,) = run_toy(target, built, [x], ["float32"]), channel_two_sums_in_sequence_reference(x)
        assert np.allclose(got, want, rtol=1e-4, atol=1e-3)


# ---- the group pattern behind an elementwise prologue (GroupNormSwish's shape) -------------

GROUP_RULES = {"llvm": "GroupedRowPass", "cuda": "GpuGroupedRowPass", "opencl": "GpuGroupedRowPass",
               "ascend-emu": "GroupTiles"}


@pytest.mark.parametrize("target_name", sorted(GROUP_RULES))
def test_a_prologue_before_the_group_pattern_is_inlined_and_matched(target_name):
    target = get_target(target_name)
    assert type(schedules.match(group_pass_with_prologue(), target)).__name__ == GROUP_RULES[target_name]
    names = [b.name for b in schedules.blocks(schedules.pattern_schedule(group_pass_with_prologue()))]
    assert "pro_p" not in names and {"pro_ds", "pro_db", "pro_y"} <= set(names)


@pytest.mark.parametrize("target_name", ["llvm", "opencl", "ascend-emu"])
def test_a_prologue_before_the_group_pattern_runs_correctly(target_name, rng):
    target = get_target(target_name)
    if not target.can_run():
        pytest.skip(f"{target_name} cannot run here: {target.missing()}")
    if target_name == "ascend-emu":
        target = target.for_product("AtlasA2")
    built = build_toy(group_pass_with_prologue(), target)
    for shape in ((1, 1, 1, 1), (2, 3, 4, 7), (2, 2, 3, 941), (0, 2, 2, 3), (2, 2, 2, 0)):
        dy, x = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
        got = run_toy(target, built, [dy, x], ["float32"] * 2)
        for out, want in zip(got, group_pass_with_prologue_reference(dy, x)):
            assert out.shape == want.shape
            assert np.all(np.abs(out - want) <= 1e-5 * max(1, shape[3]) ** 0.5 * (1 + np.abs(want))), shape
