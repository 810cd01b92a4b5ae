"""The stage patterns every target's rules match: what an op's stages look like, not how
they run. One place, so the CPU, GPU and Ascend rules agree on what "RmsNorm-like",
"GroupNorm-like" and "BatchNorm-like" mean, and an op written in these shapes is scheduled
everywhere (rules per pattern: row_pass -> RowPassWithColumnSums, GpuRowPass, RowTiles;
channel_pass -> ChannelPass, GpuChannelPass, ChannelTiles; grouped_pass -> GroupedRowPass,
GpuGroupedRowPass, GroupTiles; segmented_row_pass -> SegmentedRowPass, GpuSegmentedRowPass,
SegmentTiles; column_pass -> ColumnPass on the CPU, the fallbacks elsewhere).

* ``row_pass``: one or more elementwise outputs over the same (rows, cols), per-row
  reductions/scalars over the same rows (per-row scalars may be outputs: a forward norm's
  statistics), and zero or more column sums over all rows of a
  (cols, rows) product (RmsNorm: dx and dgamma; LayerNorm: two column sums; DeepNorm: dx
  and dgx from the same row), plus their casts (a float32 sum rounded once to a half
  output in a stage of its own: LayerNorm's half weights), as in ``grouped_pass``.
* ``channel_pass``: reductions of an (N, C, HW) input over N and HW for every channel
  (BatchNorm-like), per-channel scalars, and elementwise outputs over (N, C, HW); the sums
  may be outputs themselves.
* ``channel_map``: elementwise outputs over (N, C, HW) that read per-channel stages (kind S
  over C) and no sum over the data; the stages may read call sums, one-element sums of an
  input of any length (a total count summed from per-rank counts).
* ``segmented_row_pass``: a ``row_pass`` over (B, S, H) whose column sums restart every S
  rows (sums over S per segment, kept (B, H)), per-segment stages over (B, H) that read
  them, and sums of those over B (plus their casts): per-sample modulation gradients.
* ``grouped_pass``: row reductions over the innermost axis of an (outer..., inner) input,
  per-group stages over the outer axes (per-group scalars may be outputs: a forward norm's
  statistics), an elementwise output sharing them, and zero or more column sums over the
  first axis of the row reductions (plus their casts).
* ``column_pass``: reductions of an (N, C, HW) input over its middle axis C for every (N,
  HW) position (a LayerNorm over the channels of NCHW data), per-position stages over (N,
  HW) (outputs too: the statistics), elementwise outputs over (N, C, HW), and zero or more
  per-channel sums over N and HW (kinds SRR, as ``channel_pass``'s) plus their casts.
"""
from __future__ import annotations

from opgen.schedules import Block, same_extent


def outputs(infos: list[Block], kinds: str) -> list[Block]:
    """Blocks writing a function parameter, with exactly these iterator kinds."""
    return [b for b in infos if b.writes_output and b.kinds == kinds]


def row_pass(infos: list[Block], need_column_sums: bool = True):
    """(outs, column_sums, row_stages, casts) of the RmsNorm-like pattern, or None; ``outs``
    are the elementwise outputs, all over the same (rows, cols), in program order.

    A column sum is an output or a float32 accumulator (scratch) that only ``casts`` read:
    per-column stages (kinds S over cols) that write an output from one accumulator alone
    (``dgamma = dgamma_acc.astype(float16)``; grouped_pass's casts, over the columns).
    Without them, an op that sums in float32 and rounds once in a stage of its own
    (LayerNormBackward's half-weight combos) matched no row rule: the CPU and GPU
    fallbacks summed each column sequentially over all rows (beyond the float32 tolerance
    from ~4096 rows) and Ascend emitted nothing. The outputs and row stages must not read a
    column sum (that needs every row first: another pass).

    Without column sums, a row stage may be an output when it is one value per row (kind
    S over rows: a forward norm's rstd, which its backward takes back; ``fuse_row_stages``
    schedules that form); the reductions feeding it stay scratch. ``need_column_sums=False`` matches row-only ops (a forward norm, a softmax):
    the CPU and GPU targets schedule those with a rule of their own, without the
    partial-sum machinery, and the Ascend rule takes both.
    """
    elementwise = outputs(infos, "SS")
    if not elementwise:
        return None
    rows, cols = elementwise[0].extents
    if not all(same_extent(b.extents[0], rows) and same_extent(b.extents[1], cols) for b in elementwise):
        return None
    column_sums = [b for b in infos if b.kinds == "SR"
                   and same_extent(b.extents[0], cols) and same_extent(b.extents[1], rows)]
    sum_names = {n for b in column_sums for n in b.writes}
    accumulators = {n for b in column_sums if not b.writes_output for n in b.writes}
    casts = [b for b in infos if b.writes_output and b.kinds == "S" and same_extent(b.extents[0], cols)
             and len(b.reads) == 1 and b.reads <= accumulators]
    if not accumulators <= {n for b in casts for n in b.reads}:
        return None                     # an accumulator nothing rounds: not this pattern
    others = [b for b in infos if b not in elementwise and b not in column_sums and b not in casts]
    row_stages = [b for b in others if b.kinds[0] == "S" and len(b.kinds) <= 2 and same_extent(b.extents[0], rows)
                  and (not b.writes_output or b.kinds == "S")]
    if (need_column_sums and not column_sums) or len(row_stages) != len(others):
        return None
    if any(b.reads & sum_names for b in elementwise + row_stages):
        return None
    if column_sums and any(b.writes_output for b in row_stages):
        return None                     # fuse_row_pass moves row stages with compute_at: no outputs
    return elementwise, column_sums, row_stages, casts


def segmented_row_pass(infos: list[Block]):
    """(outs, segment_sums, row_stages, segment_stages, batch_sums, casts) of a row pass over
    (segments, rows, cols) whose column sums restart at every segment, or None.

    The data is (B, S, H): B segments of S rows. ``outs``: the elementwise outputs over
    (B, S, H) (kinds SSS); ``row_stages``: scratch per-row reductions over H and per-row
    scalars (kinds SSR over (B, S, H), SS over (B, S)), as ``row_pass``'s; ``segment_sums``:
    column sums over one segment's rows (kinds SSR over (B, H, S)), outputs or scratch;
    ``segment_stages``: per-segment, per-column stages (kinds SS over (B, H)) that read the
    segment sums (outputs or scratch); ``batch_sums``: sums over the segments (kinds SR over
    (H, B)), outputs or float32 accumulators that only ``casts`` (kind S over H, one
    accumulator each) read. A ``row_pass`` whose column sums keep the segment axis, then a
    small second-level sum over it (a per-sample modulation's gradients and
    their weight gradients): no other pattern takes it, since ``row_pass`` sums each column
    over all rows and ``grouped_pass``'s per-group stages read the row sums. None when the
    outputs or the row stages read a segment sum or what follows it (that needs every row
    of a segment first: another pass)."""
    outs = outputs(infos, "SSS")
    if not outs:
        return None
    seg, rows, cols = outs[0].extents
    if not all(_extents_are(b, (seg, rows, cols)) for b in outs):
        return None
    segment_sums = [b for b in infos if b.kinds == "SSR" and _extents_are(b, (seg, cols, rows))]
    if not segment_sums:
        return None
    later = {n for b in segment_sums for n in b.writes}
    segment_stages = []
    for b in infos:                     # program order: a stage may read an earlier one
        if b.kinds == "SS" and _extents_are(b, (seg, cols)) and b.reads & later:
            segment_stages.append(b)
            later |= b.writes
    batch_sums = [b for b in infos if b.kinds == "SR" and _extents_are(b, (cols, seg)) and b.reads & later]
    accumulators = {n for b in batch_sums if not b.writes_output for n in b.writes}
    casts = [b for b in infos if b.writes_output and b.kinds == "S" and _extents_are(b, (cols,))
             and len(b.reads) == 1 and b.reads <= accumulators]
    if not accumulators <= {n for b in casts for n in b.reads}:
        return None                     # an accumulator nothing rounds: not this pattern
    taken = outs + segment_sums + segment_stages + batch_sums + casts
    row_stages = [b for b in infos if b not in taken and not b.writes_output
                  and (b.kinds == "SS" and _extents_are(b, (seg, rows))
                       or b.kinds == "SSR" and _extents_are(b, (seg, rows, cols)))]
    if len(taken) + len(row_stages) != len(infos):
        return None
    if any(b.reads & (later | {n for s in batch_sums for n in s.writes}) for b in outs + row_stages):
        return None
    return outs, segment_sums, row_stages, segment_stages, batch_sums, casts


def _extents_are(block: Block, extents: tuple) -> bool:
    """Whether ``block``'s iterators have exactly these (provably equal) extents."""
    return len(block.extents) == len(extents) and all(same_extent(a, e) for a, e in zip(block.extents, extents))


def channel_pass(infos: list[Block]):
    """(outs, channel_sums, channel_stages) of the BatchNorm-like pattern, or None.

    ``outs``: the elementwise outputs over (N, C, HW) (kinds SSS); ``channel_sums``: blocks
    over C reducing N and HW (kinds SRR, extents (C, N, HW)), outputs or scratch;
    ``channel_stages``: per-channel scalars (kind S over C), in program order: those that read
    no sum (the statistics, see ``split_stages``), which the sums may read, and the others,
    which read the sums. None when a sum reads a stage that reads a sum (it needs another
    pass over the data first) or when a statistic is an output (the rules inline them).
    """
    outs = outputs(infos, "SSS")
    if not outs:
        return None
    n, c, hw = outs[0].extents
    if not all(all(same_extent(a, e) for a, e in zip(b.extents, (n, c, hw))) for b in outs):
        return None
    sums = [b for b in infos if b.kinds == "SRR" and all(same_extent(a, e) for a, e in zip(b.extents, (c, n, hw)))]
    if not sums:
        return None
    stages = _channel_stages(infos, sums, c, len(outs))
    return None if stages is None else (outs, sums, stages)


def channel_reduction(infos: list[Block]):
    """([], channel_sums, channel_stages) of a channel pass with no elementwise output (its
    reduce half alone: per-channel sums and what is computed from them, nothing written
    over (N, C, HW)), or None. The same conditions as ``channel_pass``; every target's channel
    rule takes it and leaves out its elementwise-output step."""
    if outputs(infos, "SSS"):
        return None
    sums = [b for b in infos if b.kinds == "SRR"]
    if not sums:
        return None
    c, n, hw = sums[0].extents
    if not all(all(same_extent(a, e) for a, e in zip(b.extents, (c, n, hw))) for b in sums):
        return None
    stages = _channel_stages(infos, sums, c, 0)
    return None if stages is None else ([], sums, stages)


def channel_map(infos: list[Block]):
    """(outs, call_sums, channel_stages) of an elementwise pass over (N, C, HW) with
    per-channel operands and no sum over the data (per-channel sums computed elsewhere and
    passed in), or None.

    ``outs``: the elementwise outputs over (N, C, HW) (kinds SSS); ``call_sums``: scratch
    one-element blocks, in program order: reductions to one element (kinds SR, extents
    (1, K)) that read inputs only, and one-element scalars (kind S over 1, a reciprocal of
    such a sum, computed once so that no per-channel stage divides); ``channel_stages``:
    scratch per-channel scalars (kind S over C), in program order, which may read the call
    sums and each other. None when a block is none of these, a call sum reads a
    per-channel stage, a stage writes an output, or any block sums over N or HW (that is
    ``channel_pass``)."""
    outs = outputs(infos, "SSS")
    if not outs or any("R" in b.kinds and b.kinds != "SR" for b in infos):
        return None
    n, c, hw = outs[0].extents
    if not all(all(same_extent(a, e) for a, e in zip(b.extents, (n, c, hw))) for b in outs):
        return None
    one = [b for b in infos if b.kinds in ("S", "SR") and same_extent(b.extents[0], 1) and not b.writes_output]
    stages = [b for b in infos if b.kinds == "S" and same_extent(b.extents[0], c) and not b.writes_output
              and b not in one]
    staged = {nm for b in stages for nm in b.writes}
    if len(outs) + len(one) + len(stages) != len(infos) or any(b.reads & staged for b in one):
        return None
    return outs, one, stages


def _channel_stages(infos: list[Block], sums: list[Block], c, n_outs: int):
    """The per-channel stages (kind S over ``c``) of a channel pass with ``n_outs``
    elementwise outputs and ``sums``, in program order; None when a block is none of these,
    a sum reads a stage that reads a sum, or a statistic is an output (``channel_pass``)."""
    stages = [b for b in infos if b.kinds == "S" and same_extent(b.extents[0], c)]
    if n_outs + len(sums) + len(stages) != len(infos):
        return None
    statistics, _ = split_stages(stages, sums)
    sum_names = {nm for b in sums for nm in b.writes}
    later = {nm for b in stages if b not in statistics for nm in b.writes}
    if any(b.reads & (sum_names | later) for b in sums) or any(b.writes_output for b in statistics):
        return None
    return stages


def channel_extents(outs: list[Block], sums: list[Block]) -> tuple:
    """(N, C, HW) of a channel pass: its elementwise output's extents, or, with none
    (``channel_reduction``), its sums' (C, N, HW) reordered."""
    if outs:
        return tuple(outs[0].extents)
    c, n, hw = sums[0].extents
    return n, c, hw


def split_stages(stages: list[Block], sums: list[Block]) -> tuple[list, list]:
    """(the stages that read no sum, directly or through other stages: the statistics, which
    the sums may read; the others), each in program order.

    By dependency, not by program order: TE orders blocks by a walk from the outputs, which
    can put a statistic after a sum (BatchNormBackward's mean comes after sum_dy, before its
    reader sum_dy_xmu; its invstd and weight * invstd after both sums). Taken for later
    stages, they were computed after the sums that read them, and a later stage that reads
    no sum is not tied to its channel (the CPU rule computed it for every channel in every
    channel's iteration)."""
    tainted = {n for b in sums for n in b.writes}
    after: set = set()
    changed = True
    while changed:
        changed = False
        for b in stages:
            if b.name not in after and b.reads & tainted:
                after.add(b.name)
                tainted |= b.writes
                changed = True
    return [b for b in stages if b.name not in after], [b for b in stages if b.name in after]


def inline_statistics(sch, stages: list[Block], sums: list[Block]) -> list[Block]:
    """Inline the per-channel stages that read no sum (the statistics: BatchNorm's mean and
    invstd, chosen by the mode, and weight * invstd) into their readers; returns the other
    stages.

    They feed both the sums and the elementwise outputs, and TVM moves a producer under a
    loop only once all its consumers are there, a consumer only once all its producers are:
    neither can go first. Inlined, they are per-channel expressions that do not change in
    a channel's inner loops, which the compiler hoists out of them."""
    before, after = split_stages(stages, sums)
    for info in reversed(before):
        sch.compute_inline(sch.get_sblock(info.name))
    return after


def grouped_pass(infos: list[Block]):
    """(out, outer, row_sums, group_stages, column_sums, casts) of the GroupNorm-like
    pattern, or None; ``outer`` is the number of outer (batch, group) axes. A group stage
    may be an output when it holds one value per (batch, group): a forward norm's mean and
    rstd, which its backward takes back (the rules move group stages with
    reverse_compute_at, which TVM allows for output blocks)."""
    big = [b for b in infos if b.writes_output and "R" not in b.kinds and len(b.kinds) >= 3]
    if len(big) != 1:
        return None
    out = big[0]
    rank, outer = len(out.kinds), len(out.kinds) - 2
    scratch_names = {n for b in infos if not b.writes_output for n in b.writes}
    row_sums = [b for b in infos if not b.writes_output and not (b.reads & scratch_names)
                and b.kinds == "S" * (rank - 1) + "R"
                and all(same_extent(a, e) for a, e in zip(b.extents, out.extents[:-1]))]
    group_stages = [b for b in infos if b not in row_sums and (not b.writes_output or b.kinds == "S" * outer)
                    and b.kinds[:outer] == "S" * outer and b.reads & scratch_names
                    and all(same_extent(a, e) for a, e in zip(b.extents[:outer], out.extents[:outer]))]
    column = [b for b in infos if b not in row_sums and b not in group_stages and b is not out]
    column_sums = [b for b in column if b.kinds.endswith("R") and same_extent(b.extents[-1], out.extents[0])]
    casts = [b for b in column if b not in column_sums and "R" not in b.kinds]
    if not row_sums or len(column_sums) + len(casts) != len(column):
        return None
    return out, outer, row_sums, group_stages, column_sums, casts


def fuse_row_pass(sch, outs: list[Block], column_sums: list[Block], row_stages: list[Block], factors: list,
                  outer: int = 0):
    """The ``row_pass`` pattern as one loop nest, the form the CPU and GPU rules share.

    The first output's rows are split by ``factors`` into (chunk, row); every other output
    and each column sum (rfactored by the same split) is merged into that nest, so they all
    come from the same read of a row; the per-row stages are computed at the row loop.
    Returns (chunk loop, row loop, [(column sum block, its rfactor block)]); the caller
    decides how the loops run and how the partials are summed (then ``zero_partials``).

    ``outer`` leading spatial axes (``segmented_row_pass``'s segment axis: outputs over
    (B, S, H), column sums over (B, H, S)) are kept and merged level by level above the
    chunk loop, so a chunk never crosses a segment and its partials are per segment; the
    chunk loop returned is then the innermost of ``outer + 1`` loops (the caller fuses them,
    after this: the region analysis cannot bound a fused (b, chunk)).
    """
    main = sch.get_sblock(outs[0].name)
    chunk_loop, row_loop = sch.split(sch.get_loops(main)[outer], factors)
    for info in outs[1:]:
        block = sch.get_sblock(info.name)
        sch.split(sch.get_loops(block)[outer], factors)
        for level in range(outer):
            sch.merge(sch.get_loops(main)[level], sch.get_loops(block)[level])
        chunk_loop = sch.merge(sch.get_loops(main)[outer], sch.get_loops(block)[outer])
        row_loop = sch.merge(sch.get_loops(main)[outer + 1], sch.get_loops(block)[outer + 1])
        sch.merge(sch.get_loops(main)[outer + 2], sch.get_loops(block)[outer + 2])
    partials = []
    # Last column sum first: a merged loop takes the place of the last loop merged, so the
    # fused nest ends up before the first column sum's final block, which reads it (merged
    # in program order, it landed after that block and the sum read partials not yet
    # written: seen with two column sums, TVM 0.27 does not check it).
    for info in reversed(column_sums):
        block = sch.get_sblock(info.name)
        rf = sch.rfactor(sch.split(sch.get_loops(block)[outer + 1], factors)[0], 0)
        rf_col, rf_chunk, rf_row = sch.get_loops(rf)[outer:]
        sch.reorder(rf_chunk, rf_row, rf_col)
        for level in range(outer):
            sch.merge(sch.get_loops(main)[level], sch.get_loops(rf)[level])
        chunk_loop = sch.merge(sch.get_loops(main)[outer], sch.get_loops(rf)[outer])
        row_loop = sch.merge(sch.get_loops(main)[outer + 1], sch.get_loops(rf)[outer + 1])
        sch.merge(sch.get_loops(main)[outer + 2], sch.get_loops(rf)[outer + 2])
        partials.insert(0, (block, rf))
    for info in reversed(row_stages):
        sch.compute_at(sch.get_sblock(info.name), row_loop)
    return chunk_loop, row_loop, partials


def fuse_row_stages(sch, outs: list[Block], row_stages: list[Block]):
    """The ``row_pass`` pattern without column sums as one loop nest over rows; returns the
    row loop. The row stages that read no other row stage (the reductions of the data)
    share one row loop (merged); every later row stage and then each elementwise output
    is computed inside it, in program order, so a row's statistics are ready before its
    outputs and the row is read once from memory. Consumers move into the producers' loop
    (reverse_compute_at), not the other way: a per-row stage that is an output (a forward
    norm's rstd) cannot be moved with compute_at (TVM moves no output block that way)."""
    produced = {n for b in row_stages for n in b.writes}
    roots = [b for b in row_stages if not b.reads & produced]
    loops = [sch.get_loops(sch.get_sblock(b.name))[0] for b in reversed(roots)]
    row_loop = sch.merge(*loops) if len(loops) > 1 else loops[0]
    for info in [b for b in row_stages if b not in roots] + list(outs):
        sch.reverse_compute_at(sch.get_sblock(info.name), row_loop)
    return row_loop


def zero_partials(sch, partials: list, row_loop) -> None:
    """Zero each chunk's partials once, before its rows, instead of testing for the first
    row inside the column loop: the first rfactor block's init is split out at the row loop.

    Only the first: TVM 0.27 recomputes the affine-binding flags of the scope after the
    split, and judges the other rfactor blocks (vj_0 = chunk, vj_1 = row under the
    predicate chunk * k + row < rows) not quasi-affine, so it refuses to split them
    (measured with two column sums, even on a fresh Schedule). They keep their init: the
    partials are zeroed at a chunk's first row, so every chunk must own a row (the CPU's
    chunks do; GpuRowPass sizes its grid so). Call after the loops are parallelized or
    bound: TVM refuses those on a loop holding a split-out update ("compact dataflow")."""
    if partials:
        sch.decompose_reduction(partials[0][1], row_loop)


def column_pass(infos: list[Block]):
    """(outs, column_sums, column_stages, channel_sums, casts) of a pass whose reductions run
    over the middle axis of (N, C, HW), or None.

    ``outs``: elementwise outputs over (N, C, HW) (kinds SSS); ``column_sums``: scratch
    reductions over C for every (n, p) (kinds SSR, extents (N, HW, C)); ``column_stages``:
    per-position stages (kinds SS over (N, HW)), outputs or scratch, in program order;
    ``channel_sums``: per-channel sums over N and HW (kinds SRR, extents (C, N, HW)),
    outputs or float32 accumulators that only ``casts`` (kind S over C, one accumulator
    each) read. None without a column sum, when a block is none of these, or when an output
    or a column stage reads a channel sum (that needs every position first: another pass).
    Unlike ``grouped_pass`` (sums over the innermost axis) a column sum's elements lie HW
    apart, and the positions next to one another are the contiguous ones."""
    outs = outputs(infos, "SSS")
    if not outs:
        return None
    n, c, hw = outs[0].extents
    if not all(_extents_are(b, (n, c, hw)) for b in outs):
        return None
    column_sums = [b for b in infos if b.kinds == "SSR" and not b.writes_output and _extents_are(b, (n, hw, c))]
    column_stages = [b for b in infos if b.kinds == "SS" and _extents_are(b, (n, hw))]
    channel_sums = [b for b in infos if b.kinds == "SRR" and _extents_are(b, (c, n, hw))]
    accumulators = {nm for b in channel_sums if not b.writes_output for nm in b.writes}
    casts = [b for b in infos if b.writes_output and b.kinds == "S" and _extents_are(b, (c,))
             and len(b.reads) == 1 and b.reads <= accumulators]
    if not column_sums or not accumulators <= {nm for b in casts for nm in b.reads}:
        return None
    taken = outs + column_sums + column_stages + channel_sums + casts
    if len(taken) != len(infos):
        return None
    later = {nm for b in channel_sums + casts for nm in b.writes}
    if any(b.reads & later for b in outs + column_sums + column_stages):
        return None
    return outs, column_sums, column_stages, channel_sums, casts
