"""Ascend schedules: the structure of a vector-core kernel, matched by stage pattern.

Four pattern rules (never op names; the same patterns as the CPU and GPU rules) and a refusal:

* ``RowTiles``: an elementwise output over (rows, cols) fed by per-row stages (row
  reductions, per-row scalars) and maybe column sums over the rows, each an output or a
  float32 accumulator rounded by a cast (RmsNorm-like; LayerNorm's half weights; a row
  softmax or RmsNorm's forward match too, per-row stages that are outputs stored per pass). Rows are split over the vector cores; each core
  streams UB tiles of whole rows (split-N / small-D) or column chunks of one row (split-D).
* ``GroupTiles``: reductions over the innermost axis of (outer..., inner) tensors, per-group
  scalars, an elementwise output, and column sums over the first axis (GroupNorm-like);
  or, without column sums, per-group scalars that are outputs and sums that read them
  (GroupNorm's forward: mean and rstd stored, the centred sum a second phase).
  The (n, g) tasks are split over the cores; each task streams its group, a few channels,
  one channel or HxW chunks of one channel.
* ``ChannelTiles``: per-channel sums of (N, C, HW) tensors over N and HW, per-channel
  scalars that read no sum (the statistics, which the sums may read) and scalars that read
  the sums, elementwise outputs over (N, C, HW) and per-channel outputs (BatchNorm-like). The channels are split over the
  cores; per channel a first pass streams its N x HxW elements (several batch rows, or HxW
  chunks of one, per UB pass) for the sums, the scalars run in registers, and a second
  pass streams the data again for the outputs (one pass when the whole channel fits).
  A channel map (no sums: patterns.channel_map) takes the same tiles in one pass per
  channel; its call sums (a counter's total, its reciprocal) run once per core in registers.
  An (N,) input (one value per batch row: a gather's per-rank counts) is read by the sums
  with the scalar unit, batch row by batch row (ChannelOperands.batch_in: no UB buffer).
* ``SegmentTiles``: RowTiles' row pass over (B, S, H) whose column sums restart every S rows
  (patterns.segmented_row_pass), per-segment stages and sums of them over the segments.
  Tasks (one segment's range of rows) are split over the cores; each task streams its rows
  as RowTiles does and leaves its segment's partial column sums in a workspace row; after
  SyncAll a final pass over the columns adds each segment's partials in task order, runs
  the per-segment stages and the sums over the segments.
* ``Unsupported``: anything else, refused by name (NOT EMITTED).

How the work is split between the schedule and the host tiling (CANN's split): kernels are
shape-generic, so every tiling *number* (rows per core, rows or columns per UB pass, the
mode) is a runtime value that the emitted host tiling function computes from the shape and
the hardware description, exactly as ops-nn's *_tiling.cpp do; schedules/ascend_tiling*.py
are that arithmetic in Python (the same formulas, used by `opgen tiling` and tests). The
schedule decides the *structure*: which stages run per row (per task, per channel), which
tensors stream through UB queues, how column sums cross cores (atomic or deterministic),
and the knobs; it records them as block and root annotations ("ascend.*") that the emitter
reads.
Why annotations and not loop splits: s_tir splits only by constants or sampled random
variables; a split by a runtime tiling value is refused (measured, TVM 0.27:
"Cannot find corresponding ExprRV: block_factor" for a PrimFunc parameter as well as for
the symbolic extent itself), and cache_read buffers at the root would be hoisted into
full-size workspace parameters by opgen.kernels (they are used by two loop nests).
"""
from __future__ import annotations

from dataclasses import dataclass

from opgen.lazy import s_tir, tvm
from opgen.schedules import (Block, Knob, PatternRule, ScheduleRule, blocks, pattern_schedule, patterns,
                             same_extent)
from opgen.schedules.ascend_scratch import scratch_tiles
from opgen.schedules.ascend_tiling import (TEMP_TILES, CopyAlignmentError, RowOperands, Tiling,  # noqa: F401
                                           UbBudgetError, plan_rows)
from opgen.schedules.ascend_tiling_channels import ChannelOperands, plan_channels
from opgen.schedules.ascend_tiling_groups import GroupOperands, plan_groups
from opgen.schedules.ascend_tiling_segments import SegmentOperands, plan_segments

BUFFER_NUM = Knob("buffer_num", (2, 1), 2,
                  "buffers per TQue: 2 overlaps the next tile's copy-in with this tile's compute "
                  "(double buffering) at twice the UB of the streamed tiles")
SUMS = Knob("sums", ("deterministic", "atomic"), "deterministic",
            "column sums across cores: per-core partials in the workspace summed in a fixed order "
            "after SyncAll (same bits every run), or SetAtomicAdd into GM (no workspace, order varies)")
ROWS_PER_PASS = Knob("rows_per_pass", (0, 1, 2, 4, 8, 16, 32, 64, 128, 255), 0,
                     "rows per UB pass in split-N / small-D; 0: as many as fit the UB")
COLS_PER_PASS = Knob("cols_per_pass", (0, 1024, 2048, 4096, 8192), 0,
                     "columns per UB pass; 0: whole rows when one fits (split-N), else the largest "
                     "whole number of repeats that fits (split-D); a value below cols forces split-D")
CHANNELS_PER_PASS = Knob("channels_per_pass", (0, 1, 2, 4, 8, 16, 32), 0,
                         "channels of a group per UB pass; 0: the whole group if it fits, else as many as fit")
BATCH_ROWS_PER_PASS = Knob("rows_per_pass", (0, 1, 2, 4, 8, 16, 32, 64, 128, 256), 0,
                           "batch rows of a channel (HxW elements each) per UB pass; 0: as many as fit, the "
                           "whole channel when it fits (then its data is read once, not twice)")
HW_PER_PASS = Knob("hw_per_pass", (0, 256, 1024, 2048, 4096, 8192), 0,
                   "HxW elements per UB pass; 0: whole batch rows when one fits, else the largest whole number "
                   "of repeats that fits (hw-chunk); a value below HxW forces hw-chunk")


def _annotate(sch, roles: dict, pattern: str, knobs: dict) -> s_tir.Schedule:
    """Record each block's role and the rule's decisions for the emitter."""
    for name, role in roles.items():
        sch.annotate(sch.get_sblock(name), "ascend.role", role)
    root = sch.get_sblock("root")
    sch.annotate(root, "ascend.pattern", pattern)
    for key, value in sorted(knobs.items()):
        sch.annotate(root, f"ascend.{key}", value)
    return sch


def _roles(sch) -> dict:
    """{block name: "ascend.role" annotation} of an already scheduled function ({} if none)."""
    result = {}
    for rv in sch.get_child_blocks(sch.get_sblock("root")):
        blk = sch.get(rv)
        if "ascend.role" in blk.annotations:
            result[blk.name_hint] = str(blk.annotations["ascend.role"])
    return result


def bind_sizes(func, shapes) -> dict:
    """{size variable name: value} from concrete ``shapes`` of the leading parameters."""
    sizes = {}
    for buf, shape in zip(func.params, shapes):
        for extent, value in zip(buf.shape, shape):
            if not isinstance(extent, (int,)) and hasattr(extent, "name"):
                sizes.setdefault(extent.name, int(value))
    return sizes


def _value(expr, sizes: dict) -> int:
    analyzer = tvm.sym.analyzer.Analyzer()
    text = str(expr)
    if text in sizes:
        return sizes[text]
    return int(analyzer.simplify(expr))


def _param_roles(func, infos):
    """{parameter buffer name: (dtype, shape)} and the names written by some block."""
    written = {n for b in infos for n in b.writes}
    params = {buf.name: (str(buf.dtype), tuple(buf.shape)) for buf in func.params}
    return params, written


def tiling_refusal(rule, func, target, knobs: dict, shapes) -> str | None:
    """Why the host tiling cannot run ``knobs`` for the problem ``shapes`` (the kernel's
    tensor shapes in parameter order) on ``target``'s hardware: the UB budget or, without
    DataCopyPad, the copy alignment. None when it can or when no problem is given."""
    if func is None or not shapes:
        return None
    try:
        rule.tiling(func, target, knobs, list(shapes.values()))
    except (UbBudgetError, CopyAlignmentError) as err:
        return f"infeasible on {target.hardware.product}: {err}"
    return None


def _scratch(sch, stages: list[Block], outs: list[Block], params: dict, column_of) -> int:
    """Float32 scratch tiles the vector stages need (ascend_scratch.scratch_tiles);
    ``column_of(block)`` is the iterator along a tile's innermost, contiguous axis (a row's
    columns, a channel's HxW); each float32 elementwise output (of ``outs``) computes in its
    own queue's tile."""
    items = []
    for b in stages:
        blk = sch.get(sch.get_sblock(b.name))
        if len(blk.iter_vars) >= 2:            # per-row scalars (one iterator) are scalar code
            items.append((b.name, blk, str(column_of(blk).var)))
    slots = {b.name for b in outs if all(params[n][0] == "float32" for n in b.writes)}
    return scratch_tiles(items, slots)


def _shape_is(shape, extents) -> bool:
    return len(shape) == len(extents) and all(same_extent(a, b) for a, b in zip(shape, extents))


@dataclass(frozen=True)
class RowTiles(PatternRule):
    """Knobs: rows_per_pass, cols_per_pass, buffer_num, sums (see the Knob docs)."""

    def knobs(self, target) -> tuple:
        return (ROWS_PER_PASS, COLS_PER_PASS, BUFFER_NUM, SUMS)

    def check_knobs(self, knobs: dict, target, shapes=None, func=None) -> str | None:
        """Refuse contradictory points and, for a known problem (``shapes``: the kernel's
        tensor shapes), points that tile exactly like another one (the tuner need not build
        them) and points whose tiling does not fit the hardware (``func`` gives the dtypes)."""
        if knobs.get("rows_per_pass") and knobs.get("cols_per_pass"):
            return "rows_per_pass applies to whole rows and cols_per_pass forces split-D: set one of them"
        tile = next((s for s in (shapes or {}).values() if len(s) == 2), None)
        if tile is None:
            return None
        rows, cols = tile
        per_core = -(-rows // target.hardware.vector_cores) if rows else 0
        if knobs.get("cols_per_pass", 0) >= cols > 0:
            return f"cols_per_pass={knobs['cols_per_pass']} >= cols={cols}: the same tiling as cols_per_pass=0"
        wanted = knobs.get("rows_per_pass", 0)
        if wanted and per_core and wanted > per_core and wanted // 2 >= per_core:
            return f"rows_per_pass={wanted}: a core has only {per_core} rows (a smaller value tiles the same)"
        return tiling_refusal(self, func, target, knobs, shapes)

    def match(self, infos: list[Block]):
        """The row pattern (patterns.row_pass), column sums optional. A per-row stage may be
        an output (a forward norm's rstd, or mean and rstd): the kernel computes it in UB
        like any row stage and stores each pass's values to GM (RowOperands.rows_out)."""
        return patterns.row_pass(infos, need_column_sums=False)

    def operands(self, func) -> RowOperands:
        sch = pattern_schedule(func)
        infos = blocks(sch)
        roles = _roles(sch)
        if roles:   # a scheduled function: kernels.hoist_pass_buffers may have made the row
            # stages' buffers parameters, so read the roles the schedule recorded instead
            outs = [b for b in infos if roles[b.name] == "tile"]
            column_sums = [b for b in infos if roles[b.name] == "column_sum"]
            row_stages = [b for b in infos if roles[b.name] in ("row_stage", "row_output")]
            casts = [b for b in infos if roles[b.name] == "cast"]
            stored = [b for b in row_stages if roles[b.name] == "row_output"]
        else:
            outs, column_sums, row_stages, casts = self.match(infos)
            stored = [b for b in row_stages if b.writes_output]
        out = outs[0]
        rows, cols = out.extents
        params, written = _param_roles(func, infos)
        sum_names = {b.name for b in column_sums}
        # the column iterator: a tile stage's second (rows, cols), a column sum's first (cols, rows)
        scratch = _scratch(sch, outs + row_stages + column_sums, outs, params,
                           lambda blk: blk.iter_vars[0 if blk.name_hint in sum_names else 1])
        pick = lambda pred: tuple((n, d) for n, (d, s) in params.items() if pred(n, s))  # noqa: E731
        # A column sum's buffer: an output (its dtype) or a float32 accumulator that casts round.
        sums = tuple((n, params.get(n, ("float32",))[0]) for b in column_sums for n in sorted(b.writes))
        return RowOperands(
            tiles_in=pick(lambda n, s: n not in written and _shape_is(s, (rows, cols))),
            tiles_out=pick(lambda n, s: n in written and _shape_is(s, (rows, cols))),
            rows_in=pick(lambda n, s: n not in written and _shape_is(s, (rows,))),
            cols_in=pick(lambda n, s: n not in written and _shape_is(s, (cols,))),
            scalars_in=pick(lambda n, s: n not in written and _shape_is(s, (1,))),
            col_sums=sums,
            col_outs=pick(lambda n, s: any(n in b.writes for b in casts)),
            accumulators=tuple(n for n, _ in sums if any(n in b.reads for b in casts)),
            row_stages=tuple(b.name for b in row_stages),
            row_reductions=tuple(b.name for b in row_stages if "R" in b.kinds),
            row_passes=pass_count(block_items(row_stages, [b for b in row_stages if "R" in b.kinds])),
            rows_out=tuple((n, params[n][0]) for b in stored for n in sorted(b.writes)),
            row_out_stages=tuple(b.name for b in stored for _ in b.writes),
            scratch_tiles=scratch)

    def schedule(self, sch, matched, target, knobs):
        outs, column_sums, row_stages, casts = matched
        roles = {b.name: "row_output" if b.writes_output else "row_stage" for b in row_stages}
        roles.update({b.name: "column_sum" for b in column_sums})
        roles.update({b.name: "cast" for b in casts})
        roles.update({b.name: "tile" for b in outs})
        return _annotate(sch, roles, "rows", knobs)

    def tiling(self, func, target, knobs: dict, shapes) -> Tiling:
        """The tiling of ``func`` for concrete ``shapes`` (of its leading parameters)."""
        out = self.match(blocks(pattern_schedule(func)))[0][0]
        sizes = bind_sizes(func, shapes)
        rows, cols = (_value(e, sizes) for e in out.extents)
        return plan_rows(target.hardware, self.operands(func), rows, cols, knobs)


def pass_steps(items) -> list[tuple[str, list]]:
    """The order in which a kernel that streams its data from GM computes its stages:
    ("pass", [reductions]) is one pass over the data computing those reductions together,
    ("stage", [name]) a scalar (per row, per task). ``items`` are (name, is_reduction, reads,
    writes) in program order. A reduction joins the open pass unless it reads a value the
    pass computes or a scalar waiting for it; a scalar that reads the open pass's values
    waits for it, one that does not runs first. Both the tilings' GM traffic and the
    emitters follow it, so the report counts the passes the kernel makes. Examples:
    LayerNormBackward's sum of dy*gamma*(x-mean) reads neither the sum of dy*gamma nor the
    scalar made from it (one split-D pass for both: 2.35 -> 1.85 GB on 8192x5120);
    GroupNormBackward's sum of dy*x follows the stage folding the sum of dy but does not
    read it (one pass: counting two read x and dy a third time, 128 -> 180 MB on
    (8,256,56x56,32)); a centred variance reads its mean (two passes)."""
    steps, open_pass, waiting, pending = [], [], [], set()    # pending: what the pass and waiting write

    def flush():
        if open_pass:
            steps.append(("pass", list(open_pass)))
        steps.extend(("stage", [name]) for name in waiting)
        open_pass.clear(), waiting.clear(), pending.clear()
    for name, is_reduction, reads, writes in items:
        if is_reduction:
            if set(reads) & pending:
                flush()
            open_pass.append(name)
            pending.update(writes)
        elif set(reads) & pending:
            waiting.append(name)
            pending.update(writes)
        else:
            steps.append(("stage", [name]))
    flush()
    return steps


def pass_count(items) -> int:
    """Passes over the data for ``items``' reductions (pass_steps), at least one."""
    return max(1, sum(kind == "pass" for kind, _ in pass_steps(items)))


def pass_phases(items) -> list[tuple[list, list]]:
    """pass_steps as [(reductions of a pass, the scalars run after it)], the group
    emitter's phases (scalars before the first pass make a phase of no reductions)."""
    result: list = []
    for kind, names in pass_steps(items):
        if kind == "pass":
            result.append((names, []))
        elif result:
            result[-1][1].extend(names)
        else:
            result.append(([], list(names)))
    return result or [([], [])]


def block_items(infos: list[Block], reductions: list[Block]) -> list[tuple]:
    """pass_steps' items of scheduled blocks, in program order."""
    names = {b.name for b in reductions}
    return [(b.name, b.name in names, b.reads, b.writes) for b in sorted(infos, key=lambda b: b.order)]


@dataclass(frozen=True)
class GroupTiles(PatternRule):
    """Knobs: channels_per_pass, buffer_num, sums (see the Knob docs)."""

    def knobs(self, target) -> tuple:
        return (CHANNELS_PER_PASS, BUFFER_NUM, SUMS)

    def check_knobs(self, knobs: dict, target, shapes=None, func=None) -> str | None:
        """For a known problem, refuse channels_per_pass values that tile like a smaller one
        and points whose tiling does not fit the hardware."""
        tile = next((s for s in (shapes or {}).values() if len(s) == 4), None)
        wanted = knobs.get("channels_per_pass", 0)
        if tile and wanted and wanted // 2 >= tile[2] > 0:
            return f"channels_per_pass={wanted}: a group has only {tile[2]} channels (a smaller value tiles the same)"
        return tiling_refusal(self, func, target, knobs, shapes)

    def match(self, infos: list[Block]):
        """The grouped pattern (patterns.grouped_pass) as the kernel runs it: (out, row sums,
        task stages, column sums, casts, per-channel stages). A group stage that sums a
        channel over HxW after reading a per-task value (a centred variance: the data's sum
        of (x - mean)^2) is a channel sum of a later pass over the data; one computed per
        (batch, group, channel) without a reduction (a forward norm's scale and shift) is
        inlined into its readers by ``schedule``; per-task stages may be outputs (a forward
        norm's mean and rstd), stored per TASKS_PER_STORE tasks. Anything else: None."""
        matched = patterns.grouped_pass(infos)
        if matched is None:
            return None
        out, outer, row_sums, group_stages, column_sums, casts = matched
        chan = "S" * (len(out.kinds) - 1)
        per_chan = lambda b: all(same_extent(a, e) for a, e in zip(b.extents, out.extents[:-1]))  # noqa: E731
        later_sums = [b for b in group_stages if b.kinds == chan + "R" and per_chan(b) and not b.writes_output]
        inlined = [b for b in group_stages if b.kinds == chan and per_chan(b) and not b.writes_output]
        tasks = [b for b in group_stages if b not in later_sums and b not in inlined]
        if any(len(b.kinds) > outer + 1 or (len(b.kinds) == outer + 1 and not b.kinds.endswith("R"))
               or (b.writes_output and (column_sums or len(b.kinds) != outer)) for b in tasks):
            return None
        sums = sorted(row_sums + later_sums, key=lambda b: b.order)
        return out, sums, tasks, column_sums, casts, inlined

    def operands(self, func) -> GroupOperands:
        sch = pattern_schedule(func)
        infos = blocks(sch)
        roles = _roles(sch)
        if roles:   # scheduled (and maybe hoisted): the recorded roles, as in RowTiles.operands
            by_role = lambda role: [b for b in infos if roles[b.name] == role]  # noqa: E731
            out = by_role("tile")[0]
            row_sums = by_role("channel_sum")
            group_stages = [b for b in infos if roles[b.name] in ("task_stage", "task_output")]
            stored = by_role("task_output")
            column_sums, casts = by_role("column_sum"), by_role("cast")
        else:
            out, row_sums, group_stages, column_sums, casts, _ = self.match(infos)
            stored = [b for b in group_stages if b.writes_output]
        n, g, d, _ = out.extents
        params, written = _param_roles(func, infos)
        pick = lambda pred: tuple((nm, t) for nm, (t, s) in params.items() if pred(nm, s))  # noqa: E731
        return GroupOperands(
            tiles_in=pick(lambda nm, s: nm not in written and _shape_is(s, out.extents)),
            tiles_out=pick(lambda nm, s: nm in written and _shape_is(s, out.extents)),
            tasks_in=pick(lambda nm, s: nm not in written and _shape_is(s, (n, g))),
            chans_in=pick(lambda nm, s: nm not in written and _shape_is(s, (g, d))),
            scalars_in=pick(lambda nm, s: nm not in written and _shape_is(s, (1,))),
            chan_sums=tuple((next(iter(b.writes)), "float32") for b in column_sums),
            chan_outs=pick(lambda nm, s: any(nm in b.writes for b in casts)),
            chan_stages=tuple(b.name for b in row_sums),
            task_stages=tuple(b.name for b in group_stages),
            tasks_out=tuple((nm, params[nm][0]) for b in stored for nm in sorted(b.writes)),
            task_out_stages=tuple(b.name for b in stored for _ in b.writes),
            sum_passes=pass_count(block_items(row_sums + group_stages, row_sums)),
            scratch_tiles=_scratch(sch, [out] + row_sums, [out], params, lambda blk: blk.iter_vars[-1]))

    def schedule(self, sch, matched, target, knobs):
        out, row_sums, group_stages, column_sums, casts, inlined = matched
        for info in reversed(inlined):
            sch.compute_inline(sch.get_sblock(info.name))
        roles = {b.name: "channel_sum" for b in row_sums}
        roles.update({b.name: "task_output" if b.writes_output else "task_stage" for b in group_stages})
        roles.update({b.name: "column_sum" for b in column_sums})
        roles.update({b.name: "cast" for b in casts})
        roles[out.name] = "tile"
        return _annotate(sch, roles, "groups", knobs)

    def tiling(self, func, target, knobs: dict, shapes) -> Tiling:
        out = self.match(blocks(pattern_schedule(func)))[0]
        sizes = bind_sizes(func, shapes)
        n, g, d, hw_elems = (_value(e, sizes) for e in out.extents)
        return plan_groups(target.hardware, self.operands(func), n, g, d, hw_elems, knobs)


def _call_sums(infos: list[Block]) -> list[Block]:
    """A channel map's call sums (patterns.channel_map): one-element sums of a short input
    and one-element scalars of them, computed once per core into registers."""
    mapped = patterns.channel_map(infos)
    return list(mapped[1]) if mapped is not None else []


@dataclass(frozen=True)
class ChannelTiles(PatternRule):
    """Knobs: rows_per_pass, hw_per_pass, buffer_num (see the Knob docs). The channels are
    split over the cores; a channel belongs to one core, so its sums need no cross-core step
    (no workspace, no atomics, the same bits every run)."""

    def knobs(self, target) -> tuple:
        return (BATCH_ROWS_PER_PASS, HW_PER_PASS, BUFFER_NUM)

    def check_knobs(self, knobs: dict, target, shapes=None, func=None) -> str | None:
        """Refuse contradictory points and, for a known problem, points that tile exactly
        like another one and points whose tiling does not fit the hardware."""
        rows, chunk = knobs.get("rows_per_pass", 0), knobs.get("hw_per_pass", 0)
        if rows and chunk:
            return "rows_per_pass applies to whole batch rows and hw_per_pass forces hw-chunk: set one of them"
        tile = next((s for s in (shapes or {}).values() if len(s) == 3), None)
        if tile is None:
            return None
        n, _, hw_elems = tile
        if chunk >= hw_elems > 0:
            return f"hw_per_pass={chunk} >= HxW={hw_elems}: the same tiling as hw_per_pass=0"
        if rows and n and rows // 2 >= n:
            return f"rows_per_pass={rows}: a channel has only {n} batch rows (a smaller value tiles the same)"
        return tiling_refusal(self, func, target, knobs, shapes)

    def match(self, infos: list[Block]):
        """(outs, channel sums, channel stages): a channel pass, a channel reduction, or a
        channel map (no sums; its call sums are told apart by ``_call_sums``)."""
        found = patterns.channel_pass(infos) or patterns.channel_reduction(infos)
        if found is not None:
            return found
        mapped = patterns.channel_map(infos)
        return None if mapped is None else (mapped[0], [], mapped[2])

    def operands(self, func) -> ChannelOperands:
        sch = pattern_schedule(func)
        infos = blocks(sch)
        roles = _roles(sch)
        if roles:   # scheduled (and maybe hoisted): the recorded roles, as in RowTiles.operands
            by_role = lambda role: [b for b in infos if roles[b.name] == role]  # noqa: E731
            outs, calls = by_role("tile"), by_role("call_sum")
            sums, statistics, later = by_role("channel_sum"), by_role("statistic"), by_role("channel_stage")
            outputs = {n for rv in sch.get_child_blocks(sch.get_sblock("root")) if "ascend.output" in
                       sch.get(rv).annotations for n in (r.source.name for r in sch.get(rv).writes)}
        else:
            outs, sums, stages = self.match(infos)
            statistics, later = patterns.split_stages(stages, sums)
            calls = _call_sums(infos)
            outputs = {n for b in infos if b.writes_output for n in b.writes}
        extents = patterns.channel_extents(outs, sums)
        n, c = extents[:2]
        params, written = _param_roles(func, infos)
        pick = lambda pred: tuple((nm, t) for nm, (t, s) in params.items() if pred(nm, s))  # noqa: E731
        buffer = lambda b: next(iter(b.writes))  # noqa: E731
        called = lambda nm: any(nm in b.reads for b in calls)  # noqa: E731
        return ChannelOperands(
            tiles_in=pick(lambda nm, s: nm not in written and _shape_is(s, extents)),
            tiles_out=pick(lambda nm, s: nm in written and _shape_is(s, extents)),
            chans_in=pick(lambda nm, s: nm not in written and _shape_is(s, (c,))),
            scalars_in=pick(lambda nm, s: nm not in written and _shape_is(s, (1,))),
            chan_outs=pick(lambda nm, s: nm in outputs and _shape_is(s, (c,))),
            calls_in=pick(lambda nm, s: nm not in written and called(nm) and not _shape_is(s, (c,))),
            batch_in=pick(lambda nm, s: nm not in written and not called(nm) and _shape_is(s, (n,))),
            call_sums=tuple(buffer(b) for b in calls),
            sums=tuple(buffer(b) for b in sums),
            statistics=tuple(buffer(b) for b in statistics),
            chan_stages=tuple(buffer(b) for b in later),
            scratch_tiles=max(TEMP_TILES, _scratch(sch, outs + sums, [], params, lambda blk: blk.iter_vars[-1])))

    def schedule(self, sch, matched, target, knobs):
        outs, sums, stages = matched
        statistics, later = patterns.split_stages(stages, sums)
        roles = {b.name: "statistic" for b in statistics}
        roles.update({b.name: "channel_sum" for b in sums})
        roles.update({b.name: "channel_stage" for b in later})
        roles.update({b.name: "tile" for b in outs})
        roles.update({b.name: "call_sum" for b in _call_sums(blocks(sch))})
        for info in sums + later:    # the per-channel outputs: hoisting makes scratch look alike
            if info.writes_output:
                sch.annotate(sch.get_sblock(info.name), "ascend.output", 1)
        return _annotate(sch, roles, "channels", knobs)

    def tiling(self, func, target, knobs: dict, shapes) -> Tiling:
        infos = blocks(pattern_schedule(func))
        outs, sums, _ = self.match(infos)
        sizes = bind_sizes(func, shapes)
        n, c, hw_elems = (_value(e, sizes) for e in patterns.channel_extents(outs, sums))
        calls = [_value(b.extents[1], sizes) for b in _call_sums(infos) if b.kinds == "SR"]
        return plan_channels(target.hardware, self.operands(func), n, c, hw_elems, knobs, calls[0] if calls else None)


def _outputs_of(sch) -> set:
    """Names of the buffers written by blocks the schedule marked "ascend.output" (after
    hoisting, scratch buffers are parameters too: only the mark tells an output)."""
    found = set()
    for rv in sch.get_child_blocks(sch.get_sblock("root")):
        blk = sch.get(rv)
        if "ascend.output" in blk.annotations:
            found |= {r.source.name for r in blk.writes}
    return found


@dataclass(frozen=True)
class SegmentTiles(PatternRule):
    """Knobs: rows_per_pass, cols_per_pass, buffer_num (see the Knob docs). The row pass of
    RowTiles over tasks, a task being one segment's range of rows: its column sums are that
    segment's partial, written to a workspace row of its own; after SyncAll a final pass
    (the columns split over the cores) adds each segment's partials in task order (the same
    bits every run: there are no atomic sums), computes the per-segment stages and adds
    them over the segments, in segment order."""

    def knobs(self, target) -> tuple:
        return (ROWS_PER_PASS, COLS_PER_PASS, BUFFER_NUM)

    def check_knobs(self, knobs: dict, target, shapes=None, func=None) -> str | None:
        """Refuse contradictory points and, for a known problem, points that tile exactly
        like another one and points whose tiling does not fit the hardware."""
        if knobs.get("rows_per_pass") and knobs.get("cols_per_pass"):
            return "rows_per_pass applies to whole rows and cols_per_pass forces split-D: set one of them"
        tile = next((s for s in (shapes or {}).values() if len(s) == 3), None)
        if tile is not None and knobs.get("cols_per_pass", 0) >= tile[2] > 0:
            return f"cols_per_pass={knobs['cols_per_pass']} >= cols={tile[2]}: the same tiling as cols_per_pass=0"
        return tiling_refusal(self, func, target, knobs, shapes)

    def match(self, infos: list[Block]):
        """The segmented row pattern (patterns.segmented_row_pass)."""
        return patterns.segmented_row_pass(infos)

    def schedule(self, sch, matched, target, knobs):
        outs, segment_sums, row_stages, segment_stages, batch_sums, casts = matched
        roles = {b.name: "row_stage" for b in row_stages}
        roles.update({b.name: "column_sum" for b in segment_sums})
        roles.update({b.name: "segment_stage" for b in segment_stages})
        roles.update({b.name: "batch_sum" for b in batch_sums})
        roles.update({b.name: "cast" for b in casts})
        roles.update({b.name: "tile" for b in outs})
        for info in segment_sums + segment_stages + batch_sums:
            if info.writes_output:
                sch.annotate(sch.get_sblock(info.name), "ascend.output", 1)
        return _annotate(sch, roles, "segments", knobs)

    def operands(self, func) -> SegmentOperands:
        sch = pattern_schedule(func)
        infos = blocks(sch)
        roles = _roles(sch)
        if roles:   # scheduled (and maybe hoisted): the recorded roles, as in RowTiles.operands
            by_role = lambda role: [b for b in infos if roles[b.name] == role]  # noqa: E731
            outs, sums, row_stages = by_role("tile"), by_role("column_sum"), by_role("row_stage")
            stages, batch, casts = by_role("segment_stage"), by_role("batch_sum"), by_role("cast")
            outputs = _outputs_of(sch)
        else:
            outs, sums, row_stages, stages, batch, casts = self.match(infos)
            outputs = {n for b in infos if b.writes_output for n in b.writes}
        seg, rows, cols = outs[0].extents
        params, written = _param_roles(func, infos)
        pick = lambda pred: tuple((n, d) for n, (d, s) in params.items() if pred(n, s))  # noqa: E731
        buffer = lambda b: next(iter(b.writes))  # noqa: E731
        segs_in = pick(lambda n, s: n not in written and _shape_is(s, (seg, cols)))
        accumulators = tuple(buffer(b) for b in batch if buffer(b) not in outputs)
        # The column iterator of each vector stage: (B, S, H) tiles and row sums, (B, H, S) segment
        # sums and (B, H) stages, (H, B) batch sums. Only the row pass's float32 outputs compute
        # in their queue's tile; the final pass computes its outputs in scratch and copies them.
        column = {b.name: 2 for b in outs + row_stages}
        column.update({b.name: 1 for b in sums + stages})
        column.update({b.name: 0 for b in batch})
        vector = outs + sums + stages + batch + [b for b in row_stages if "R" in b.kinds]
        return SegmentOperands(
            tiles_in=pick(lambda n, s: n not in written and _shape_is(s, (seg, rows, cols))),
            tiles_out=pick(lambda n, s: n in written and _shape_is(s, (seg, rows, cols))),
            rows_in=pick(lambda n, s: n not in written and _shape_is(s, (seg, rows))),
            cols_in=pick(lambda n, s: n not in written and _shape_is(s, (cols,))) + segs_in,
            scalars_in=pick(lambda n, s: n not in written and _shape_is(s, (1,))),
            col_sums=tuple((buffer(b), "float32") for b in sums),
            col_outs=pick(lambda n, s: any(n in b.writes for b in casts)),
            row_stages=tuple(b.name for b in row_stages),
            row_reductions=tuple(b.name for b in row_stages if "R" in b.kinds),
            row_passes=pass_count(block_items(row_stages, [b for b in row_stages if "R" in b.kinds])),
            scratch_tiles=_scratch(sch, vector, outs, params,
                                   lambda blk: blk.iter_vars[column[blk.name_hint]]),
            segs_in=segs_in,
            seg_outs=tuple((buffer(b), params[buffer(b)][0]) for b in sums + stages if buffer(b) in outputs),
            seg_stages=tuple(b.name for b in stages),
            seg_scratch=tuple(buffer(b) for b in stages if buffer(b) not in outputs),
            batch_sums=tuple((buffer(b), params[buffer(b)][0] if buffer(b) in outputs else "float32")
                             for b in batch),
            batch_accumulators=accumulators)

    def tiling(self, func, target, knobs: dict, shapes) -> Tiling:
        out = self.match(blocks(pattern_schedule(func)))[0][0]
        sizes = bind_sizes(func, shapes)
        seg, rows, cols = (_value(e, sizes) for e in out.extents)
        return plan_segments(target.hardware, self.operands(func), seg, rows, cols, knobs)


@dataclass(frozen=True)
class Unsupported(ScheduleRule):
    """Any function the patterns above do not match: the AscendC emitter prints code for
    patterns only (it has no scalar fallback worth running on a vector core), so this says
    which function has none, as NotImplementedError: ``opgen generate`` reports the row as
    NOT EMITTED and the aclnn API as 361001, never a crash."""

    def matches(self, func, target) -> bool:
        return True

    def apply(self, func, target, knobs):
        symbol = func.attrs["global_symbol"] if func.attrs and "global_symbol" in func.attrs else "this function"
        names = [b.name for b in blocks(s_tir.Schedule(func))]
        raise NotImplementedError(f"ascend-emu: no Ascend pattern (rows, groups, channels, segments) matches {symbol} "
                                  f"(stages {names})")


RULES = [RowTiles(), GroupTiles(), ChannelTiles(), SegmentTiles(), Unsupported()]

