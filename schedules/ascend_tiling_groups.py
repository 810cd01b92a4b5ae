"""The Ascend tiling of the group pattern (schedules.ascend.GroupTiles): (N, G, D, HW) tiles
split into per-(n, g) tasks over the cores, a task's group streamed whole, a few channels,
one channel or HxW chunks of one per UB pass, per-channel sums over N through the workspace.
The budget rules and shared arithmetic are schedules/ascend_tiling.py's.
"""
from __future__ import annotations

from dataclasses import dataclass

from opgen.schedules.ascend_tiling import (FLOAT32, TEMP_TILES, Tiling, UbBuffer, ceil_div, check_budget,
                                           check_whole_blocks, fits, itemsize, largest_fitting, pitch_of,
                                           reduce_work_elements, split_cores)


# ---- the group pattern: (N, G, D, HW) tiles, per-(n, g) tasks, per-channel sums over N ----

@dataclass(frozen=True)
class GroupOperands:
    """What a group-pattern kernel moves, by role; each entry is (buffer name, dtype)."""

    tiles_in: tuple = ()       # (N, G, D, HW) inputs
    tiles_out: tuple = ()      # (N, G, D, HW) outputs
    tasks_in: tuple = ()       # (N, G) inputs: one value per task
    chans_in: tuple = ()       # (G, D) inputs: D values per task
    chan_sums: tuple = ()      # (G, D) sums over N (float32 accumulators)
    chan_outs: tuple = ()      # (G, D) outputs rounded from an accumulator
    chan_stages: tuple = ()    # per-(n, g, d) reductions over HW (float32, D per task)
    task_stages: tuple = ()    # per-(n, g) scalars
    scalars_in: tuple = ()     # (1,) inputs: one value per call (an attribute passed as data)
    tasks_out: tuple = ()      # (N, G) outputs: task stages stored per TASKS_PER_STORE tasks
    task_out_stages: tuple = ()  # the task stage that computes each of tasks_out, in the same order
    sum_passes: int = 1        # passes over a task's data for its channel sums (pass_steps: a sum that reads
                               # a per-task value of an earlier sum, a centred variance, needs two)
    scratch_tiles: int = TEMP_TILES  # float32 scratch tiles the expressions need (ascend_scratch)

    @property
    def dtypes(self) -> set:
        return {d for _, d in self.tiles_in + self.tiles_out} | {FLOAT32}


# Per-task outputs (a forward norm's mean and rstd) collect in UB for this many tasks of a
# core, then go to GM in one copy (a multiple of every dtype's elements per 32-byte block).
TASKS_PER_STORE = 64


def group_buffers(hw, ops: GroupOperands, channels: int, pitch: int, nbuf: int, d: int) -> list[UbBuffer]:
    """Every UB buffer of one pass over ``channels`` channels of ``pitch`` elements of a task
    whose group has ``d`` channels. Per-task scalars (mean, rstd, the group's sums) live in
    scalar registers after one GetValue, so they take no UB beyond their one-block copy-in."""
    tile, t_expr = channels * pitch, "ub_rows * pitch"
    bufs = [UbBuffer(f"in_{n}", "VECIN", nbuf, tile, t, t_expr) for n, t in ops.tiles_in]
    bufs += [UbBuffer(f"out_{n}", "VECOUT", nbuf, tile, t, t_expr) for n, t in ops.tiles_out]
    if hw.data_copy_pad:   # else per-task values are scalar GM reads
        bufs += [UbBuffer(f"in_{n}", "VECIN", 1, 1, t, "1") for n, t in ops.tasks_in + ops.scalars_in]
    bufs += [UbBuffer(f"in_{n}", "VECIN", 1, d, t, "D") for n, t in ops.chans_in]
    bufs += [UbBuffer(f"f32_{n}", "VECCALC", 1, tile, FLOAT32, t_expr) for n, t in ops.tiles_in if t != FLOAT32]
    bufs += [UbBuffer(f"f32_{n}", "VECCALC", 1, d, FLOAT32, "D") for n, t in ops.chans_in if t != FLOAT32]
    bufs += [UbBuffer(f"tmp{i}", "VECCALC", 1, tile, FLOAT32, t_expr) for i in range(ops.scratch_tiles)]
    bufs += [UbBuffer(f"chan_{s}", "VECCALC", 1, d, FLOAT32, "D") for s in ops.chan_stages]
    bufs += [UbBuffer(f"acc_{n}", "VECCALC", 1, d, FLOAT32, "D") for n, _ in ops.chan_sums]
    bufs += [UbBuffer(f"out_{n}", "VECOUT", 1, d, t, "D") for n, t in ops.chan_outs]
    if hw.data_copy_pad:   # else per-task outputs are scalar GM writes
        store = str(TASKS_PER_STORE)
        bufs += [UbBuffer(f"stat_{n}", "VECCALC", 1, TASKS_PER_STORE, FLOAT32, store) for n, _ in ops.tasks_out]
        bufs += [UbBuffer(f"out_{n}", "VECOUT", 1, TASKS_PER_STORE, t, store) for n, t in ops.tasks_out if t != FLOAT32]
    bufs.append(UbBuffer("reduce_work", "VECCALC", 1, reduce_work_elements(hw, channels, pitch), FLOAT32, "work"))
    return bufs


def _group_mode(channels: int, d: int, hw_elems: int) -> str:
    if channels == d:
        return "hw1" if hw_elems == 1 else "group"
    return "channels" if channels > 1 else "channel"


def _group_pass(hw, ops, d, hw_elems, knobs) -> tuple[str, int, int, int]:
    """(mode, channels per pass, HxW elements per pass, pitch) for one task's group."""
    nbuf, wanted = knobs["buffer_num"], knobs["channels_per_pass"]
    pitch = pitch_of(hw, hw_elems, ops.dtypes)
    if wanted:
        channels = min(wanted, d)
        check_budget(hw, group_buffers(hw, ops, channels, pitch, nbuf, d), f"channels_per_pass={wanted}")
        return _group_mode(channels, d, hw_elems), channels, hw_elems, pitch
    channels = largest_fitting(hw, 1, min(d, hw.max_bursts), lambda k: group_buffers(hw, ops, k, pitch, nbuf, d))
    if channels:
        return _group_mode(channels, d, hw_elems), channels, hw_elems, pitch
    step = hw.elements_per_repeat(4)
    repeats = largest_fitting(hw, 1, ceil_div(hw_elems, step), lambda k: group_buffers(hw, ops, 1, k * step, nbuf, d))
    if not repeats:
        check_budget(hw, group_buffers(hw, ops, 1, step, nbuf, d), f"one channel of {step} elements, D={d}")
    return "hw-chunk", 1, min(repeats * step, hw_elems), repeats * step


def plan_groups(hw, ops: GroupOperands, n: int, g: int, d: int, hw_elems: int, knobs: dict) -> Tiling:
    """The group pattern's tiling: the N*G tasks over cores (CANN's split), then per task the
    largest unit that fits: the whole group (hw1 when HxW == 1), several channels, one
    channel, or HxW chunks of one channel. Every mode but group/hw1 reads its tiles twice
    (the group's sums first, then the elementwise outputs)."""
    tasks = n * g
    block_factor, block_dim = split_cores(tasks, hw.vector_cores)
    sums = knobs["sums"] if ops.chan_sums else "none"
    fields = {"N": n, "G": g, "D": d, "HW": hw_elems, "tasks": tasks}
    if tasks == 0 or d == 0 or hw_elems == 0:
        if ops.tasks_out and tasks:
            # Empty groups still have their per-task outputs (the mean of nothing is NaN):
            # the tasks over the cores as usual, no pass over data (EmptyTask).
            pitch = pitch_of(hw, 1, ops.dtypes)
            buffers = tuple(group_buffers(hw, ops, 1, pitch, knobs["buffer_num"], d))
            check_budget(hw, buffers, f"empty groups at N={n} G={g} D={d} HxW={hw_elems}")
            return Tiling("groups", "empty", block_dim, block_factor, 1, 0, pitch, buffers, sums, 0,
                          sum(tasks * itemsize(t) for _, t in ops.tasks_out), fields)
        # Sums over no batch (or of no elements) are zeros: one core writes them.
        if not (ops.chan_sums and g * d):
            return Tiling("groups", "empty", 0, 0, 0, 0, 0, (), sums, 0, 0, fields)
        check_whole_blocks(hw, ops.dtypes, {"D": d})
        pitch = pitch_of(hw, 1, ops.dtypes)
        buffers = tuple(group_buffers(hw, ops, 1, pitch, knobs["buffer_num"], d))
        check_budget(hw, buffers, f"empty at N={n} G={g} D={d} HxW={hw_elems}")
        return Tiling("groups", "empty", 1, 0, 1, 0, pitch, buffers, sums, 0,
                      g * d * (4 * len(ops.chan_sums) + sum(itemsize(t) for _, t in ops.chan_outs)), fields)
    check_whole_blocks(hw, ops.dtypes, {"D": d, "HxW": hw_elems})
    mode, channels, hw_pass, pitch = _group_pass(hw, ops, d, hw_elems, knobs)
    buffers = tuple(group_buffers(hw, ops, channels, pitch, knobs["buffer_num"], d))
    check_budget(hw, buffers, f"{mode} at N={n} G={g} D={d} HxW={hw_elems}")
    size = {nm: itemsize(t) for nm, t in ops.tiles_in + ops.tiles_out + ops.tasks_in + ops.chans_in + ops.chan_outs}
    reread = 1 if mode in ("group", "hw1") else 1 + ops.sum_passes
    elems = tasks * d * hw_elems
    gm = sum(reread * elems * size[nm] for nm, _ in ops.tiles_in) + sum(elems * size[nm] for nm, _ in ops.tiles_out)
    gm += sum(tasks * itemsize(t) for _, t in ops.tasks_out) + sum(block_dim * itemsize(t) for _, t in ops.scalars_in)
    gm += sum(tasks * size[nm] for nm, _ in ops.tasks_in) + sum(tasks * d * size[nm] for nm, _ in ops.chans_in)
    partials = tasks * d * 4 * len(ops.chan_sums)
    final = g * d * 4 * len(ops.chan_sums) + sum(g * d * size[nm] for nm, _ in ops.chan_outs)
    # Both ways sum in a float32 workspace: per-task rows (deterministic, summed in batch
    # order after SyncAll) or one row per group that the cores add into atomically (zeroed
    # first); a final pass then writes (and rounds) the outputs.
    rows_ws = tasks if sums == "deterministic" else g
    workspace = rows_ws * d * 4 * len(ops.chan_sums)
    gm += partials + rows_ws * d * 4 * len(ops.chan_sums) + final
    fields.update({"ub_channels": channels, "ub_hw": hw_pass,
                   "ub_loops": ceil_div(d, channels) * ceil_div(hw_elems, hw_pass) if mode != "hw1" else 1})
    return Tiling("groups", mode, block_dim, block_factor, channels, hw_pass, pitch, buffers, sums, workspace, gm,
                  fields)
