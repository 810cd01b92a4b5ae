"""The Ascend tiling of the channel pattern (schedules.ascend.ChannelTiles): (N, C, HW)
tensors with per-channel sums over N and HxW, the channels split over the cores, a channel
read once when it fits the UB, else twice (sums, then outputs). The budget rules and shared
arithmetic are schedules/ascend_tiling.py's.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from opgen.schedules.ascend_tiling import (FLOAT32, TEMP_TILES, Tiling, UbBuffer, ceil_div, check_budget,
                                           check_whole_blocks, fits, itemsize, largest_fitting, pitch_of,
                                           reduce_work_elements, split_cores)


# ---- the channel pattern: (N, C, HW) tiles, per-channel sums over N and HW ----

# Per-channel values (inputs and outputs of shape (C,)) move between GM and UB in chunks of
# up to this many channels of a core: one copy per tensor and chunk instead of one per
# channel. A multiple of every dtype's elements per 32-byte block, so on products without
# DataCopyPad every chunk of a block-aligned range is whole blocks.
CHANNELS_PER_COPY = 256


@dataclass(frozen=True)
class ChannelOperands:
    """What a channel-pattern kernel moves, by role; each entry is (buffer name, dtype)."""

    tiles_in: tuple = ()       # (N, C, HW) inputs
    tiles_out: tuple = ()      # (N, C, HW) outputs
    chans_in: tuple = ()       # (C,) inputs: one value per channel
    scalars_in: tuple = ()     # (1,) inputs: one value per call (eps, a mode flag)
    chan_outs: tuple = ()      # (C,) outputs: a sum, or a stage after the sums, per channel
    calls_in: tuple = ()       # (K,) inputs summed whole by a call sum: scalar GM reads, no UB
    batch_in: tuple = ()       # (N,) inputs: one value per batch row, read by the sums as scalar GM reads, no UB
    call_sums: tuple = ()      # buffers of the call sums (float32 registers, once per core)
    sums: tuple = ()           # buffers of the per-channel sums over N and HW (float32 registers)
    statistics: tuple = ()     # buffers of the per-channel stages that read no sum (registers)
    chan_stages: tuple = ()    # buffers of the per-channel stages that read the sums (registers)
    # float32 scratch tiles of the tile expressions: what ascend_scratch counts, at least
    # TEMP_TILES (the pool every channel kernel had before it was counted)
    scratch_tiles: int = TEMP_TILES

    @property
    def dtypes(self) -> set:
        """The dtypes of the streamed tiles (they set the UB row pitch)."""
        return {d for _, d in self.tiles_in + self.tiles_out} | {FLOAT32}

    @property
    def copied_dtypes(self) -> set:
        """Every dtype a copy moves (the block alignment without DataCopyPad)."""
        return self.dtypes | {d for _, d in self.chans_in + self.chan_outs}


def channel_buffers(hw, ops: ChannelOperands, ub_rows: int, pitch: int, chans: int, nbuf: int) -> list[UbBuffer]:
    """Every UB buffer of one pass over ``ub_rows`` batch rows of ``pitch`` elements of one
    channel, with per-channel values staged for ``chans`` channels. A channel's statistics,
    sums and stages live in scalar registers; its (C,) inputs and outputs in chunk vectors."""
    tile, t_expr = ub_rows * pitch, "ub_rows * pitch"
    bufs = [UbBuffer(f"in_{n}", "VECIN", nbuf, tile, d, t_expr) for n, d in ops.tiles_in]
    bufs += [UbBuffer(f"out_{n}", "VECOUT", nbuf, tile, d, t_expr) for n, d in ops.tiles_out]
    bufs += [UbBuffer(f"f32_{n}", "VECCALC", 1, tile, FLOAT32, t_expr) for n, d in ops.tiles_in if d != FLOAT32]
    bufs += [UbBuffer(f"tmp{i}", "VECCALC", 1, tile, FLOAT32, t_expr) for i in range(ops.scratch_tiles)]
    bufs += [UbBuffer(f"in_{n}", "VECIN", 1, chans, d, "ub_chans") for n, d in ops.chans_in]
    bufs += [UbBuffer(f"f32_{n}", "VECCALC", 1, chans, FLOAT32, "ub_chans") for n, d in ops.chans_in if d != FLOAT32]
    bufs += [UbBuffer(f"co_{n}", "VECCALC", 1, chans, FLOAT32, "ub_chans") for n, _ in ops.chan_outs]
    bufs += [UbBuffer(f"out_{n}", "VECOUT", 1, chans, d, "ub_chans") for n, d in ops.chan_outs if d != FLOAT32]
    if hw.data_copy_pad:   # else per-call values are scalar GM reads
        bufs += [UbBuffer(f"in_{n}", "VECIN", 1, 1, d, "1") for n, d in ops.scalars_in]
    bufs.append(UbBuffer("reduce_work", "VECCALC", 1, reduce_work_elements(hw, ub_rows, pitch), FLOAT32, "work"))
    return bufs


def split_channels(hw, ops: ChannelOperands, c: int) -> tuple[int, int]:
    """(block_factor, block_dim): CANN's split of the channels over the cores; without
    DataCopyPad each core's first channel starts a whole block of every per-channel dtype
    (the chunks it copies are then whole blocks, and no two cores write one block)."""
    factor, dim = split_cores(c, hw.vector_cores)
    if hw.data_copy_pad or not factor:
        return factor, dim
    step = max(hw.elements_per_block(itemsize(d)) for d in ops.copied_dtypes)
    factor = ceil_div(factor, step) * step
    return factor, ceil_div(c, factor)


def strided_rows(hw, ops: ChannelOperands, c: int, hw_elems: int) -> bool:
    """Whether one copy can move several batch rows of a channel: the GM gap between them,
    (C - 1) x HW elements, must fit the copy's stride field (DataCopyPad: uint32 bytes;
    DataCopy without it: uint16 32-byte blocks); else a pass holds one batch row."""
    gap = (c - 1) * hw_elems * max(itemsize(d) for d in ops.dtypes)
    return gap <= 0xFFFFFFFF if hw.data_copy_pad else gap // hw.block_bytes <= 0xFFFF


def _channel_pass(hw, ops, n, c, hw_elems, chans, knobs) -> tuple[str, int, int, int]:
    """(mode, batch rows per pass, HxW elements per pass, pitch) of a channel's passes."""
    nbuf, wanted_rows, wanted_hw = knobs["buffer_num"], knobs["rows_per_pass"], knobs["hw_per_pass"]
    buffers_for = lambda rows, pitch: channel_buffers(hw, ops, rows, pitch, chans, nbuf)  # noqa: E731
    pitch = pitch_of(hw, hw_elems, ops.dtypes)
    where = f"N={n} C={c} HxW={hw_elems}"
    if not (wanted_hw and wanted_hw < hw_elems) and (wanted_rows or fits(hw, buffers_for(1, pitch))):
        cap = min(n, hw.max_bursts) if strided_rows(hw, ops, c, hw_elems) else 1
        if wanted_rows:                          # whole rows asked for: refuse, never fall back
            ub_rows = min(wanted_rows, cap)
            check_budget(hw, buffers_for(ub_rows, pitch), f"rows_per_pass={wanted_rows} at {where}")
        else:
            ub_rows = largest_fitting(hw, 1, cap, lambda r: buffers_for(r, pitch))
        return ("channel" if ub_rows == n else "rows"), ub_rows, hw_elems, pitch
    if wanted_hw:
        ub_cols = min(wanted_hw, hw_elems)
        pitch = pitch_of(hw, ub_cols, ops.dtypes)
        check_budget(hw, buffers_for(1, pitch), f"hw_per_pass={wanted_hw} at {where}")
        return "hw-chunk", 1, ub_cols, pitch
    step = hw.elements_per_repeat(4)
    repeats = largest_fitting(hw, 1, ceil_div(hw_elems, step), lambda k: buffers_for(1, k * step))
    if not repeats:
        check_budget(hw, buffers_for(1, step), f"hw-chunk at {where}")
    return "hw-chunk", 1, min(repeats * step, hw_elems), repeats * step


def plan_channels(hw, ops: ChannelOperands, n: int, c: int, hw_elems: int, knobs: dict,
                  k: int | None = None) -> Tiling:
    """The channel pattern's tiling: the C channels over the cores (CANN's split; without
    DataCopyPad in whole blocks), then per channel the largest pass that fits: the whole
    channel (mode channel: its N x HxW elements read once for the sums and the outputs),
    several batch rows (rows) or HxW chunks of one batch row (hw-chunk); both of those read
    the channel twice, the sums first, then the elementwise outputs. N = 0 or HxW = 0 (mode
    empty): no passes, but the per-channel outputs are written (sums of nothing are 0).
    A channel map (no sums) reads each channel once whatever the mode; ``k``: its call
    inputs' length (the field K; each core reads them once)."""
    fields = {"N": n, "C": c, "HW": hw_elems, "tasks": c}
    if k is not None:
        fields["K"] = k
    data = n * hw_elems > 0
    if c == 0 or not (data or ops.chan_outs):
        return Tiling("channels", "empty", 0, 0, 0, 0, 0, (), "none", 0, 0, fields)
    check_whole_blocks(hw, ops.dtypes, {"HxW": hw_elems})
    check_whole_blocks(hw, ops.copied_dtypes, {"C": c})
    block_factor, block_dim = split_channels(hw, ops, c)
    chans = min(block_factor, CHANNELS_PER_COPY)
    size = {nm: itemsize(d) for nm, d in ops.tiles_in + ops.tiles_out + ops.chans_in + ops.scalars_in + ops.chan_outs}
    gm = sum(c * size[nm] for nm, _ in ops.chans_in + ops.chan_outs)
    gm += sum(block_dim * size[nm] for nm, _ in ops.scalars_in)
    gm += sum(block_dim * (k or 0) * itemsize(d) for _, d in ops.calls_in)
    gm += sum(c * n * itemsize(d) for _, d in ops.batch_in)     # each channel's sums read every batch row's value
    fields["ub_chans"] = chans
    if not data:
        pitch = pitch_of(hw, 1, ops.dtypes)
        buffers = tuple(channel_buffers(hw, ops, 1, pitch, chans, knobs["buffer_num"]))
        check_budget(hw, buffers, f"empty at N={n} C={c} HxW={hw_elems}")
        fields.update({"ub_loops": 0, "passes": 0})
        return Tiling("channels", "empty", block_dim, block_factor, 1, 0, pitch, buffers, "none", 0, gm, fields)
    mode, ub_rows, ub_cols, pitch = _channel_pass(hw, ops, n, c, hw_elems, chans, knobs)
    buffers = tuple(channel_buffers(hw, ops, ub_rows, pitch, chans, knobs["buffer_num"]))
    check_budget(hw, buffers, f"{mode} at N={n} C={c} HxW={hw_elems}")
    reread = 1 if mode == "channel" or not ops.sums else 2
    elems = n * c * hw_elems
    gm += sum(reread * elems * size[nm] for nm, _ in ops.tiles_in) + sum(elems * size[nm] for nm, _ in ops.tiles_out)
    loops = ceil_div(n, ub_rows) * ceil_div(hw_elems, ub_cols)
    fields.update({"ub_loops": loops, "passes": block_factor * loops * reread})
    return Tiling("channels", mode, block_dim, block_factor, ub_rows, ub_cols, pitch, buffers, "none", 0, gm, fields)
