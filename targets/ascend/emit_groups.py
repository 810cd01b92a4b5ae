"""Scheduled TIR of the group pattern -> an AscendC kernel (GroupNorm-like ops).

The group pattern (schedules/ascend.py, GroupTiles): tensors (N, G, D, HW); the (n, g)
tasks are split over the cores. Per task the kernel sees a (channels x HxW) tile, so the
row machinery of the row pattern applies with rows = channels:
  * ``channel_sum`` blocks (sums over HxW per channel) -> row sums into D-float UB vectors;
  * ``task_stage`` blocks (sums over the channels, per-task scalars) -> scalar code in
    registers (``s_<stage>``);
  * the ``tile`` block -> vector calls over the tile, per-channel values as per-row scalars;
  * ``column_sum`` blocks (sums over N) -> each task's D contributions go to a float32
    workspace: one row per task (deterministic: summed in batch order after SyncAll) or one
    row per group that every core adds into with SetAtomicAdd (atomic); a final pass split
    over the groups writes the outputs, rounding them where a ``cast`` block says so.
Modes (runtime, from the host tiling): group / hw1 (the whole group in one pass), channels /
channel / hw-chunk (a first pass over the group for its sums, a second for the outputs).
"""
from __future__ import annotations

from dataclasses import dataclass

from opgen.lazy import s_tir
from opgen.schedules.ascend import GroupTiles, pass_phases
from opgen.schedules.ascend_tiling_groups import TASKS_PER_STORE
from opgen.targets.ascend.emitter import (CPP_TYPE, as_float32, camel, copy_in, copy_params, store_tile,
                                          pass_items, recorded_stages, store_values)
from opgen.targets.ascend.exprs import (Context, EmitError, Value, emit_expr, load_name, reduction_body, row_sums,
                                        stored_value, sync)

GROUP_FIELDS = ("N", "G", "D", "HW", "tasks", "block_dim", "block_factor", "ub_rows", "ub_cols", "pitch", "mode",
                "ws_pitch", "work")
GROUP_MODES = {"group": 0, "hw1": 1, "channels": 2, "channel": 3, "hw-chunk": 4, "empty": 5}


@dataclass
class GroupKernel:
    symbol: str
    ops: object                # GroupOperands
    stages: list               # (name, role, SBlock) in program order
    args: list                 # (name, dtype, role) kernel GM arguments in parameter order
    sizes: dict                # size variable name -> C++
    knobs: dict
    param_names: tuple
    pad: bool = True           # the product has DataCopyPad (else per-task values are GM reads)
    fields = GROUP_FIELDS
    pattern = "groups"
    modes = GROUP_MODES

    @property
    def struct(self) -> str:
        return f"{camel(self.symbol)}TilingData"

    def size_args(self, by_name: dict) -> tuple:
        tile = next(n for n, _, role in self.args if role == "tile")
        return tuple(int(v) for v in by_name[tile].shape)          # N, G, D, HW

    def workspace_floats(self, t) -> int:
        rows = t.tasks if self.knobs.get("sums") != "atomic" else t.G
        return rows * t.ws_pitch * len(self.ops.chan_sums)


def read_group_kernel(func, symbol: str, knobs: dict) -> GroupKernel:
    sch = s_tir.Schedule(func)
    stages = recorded_stages(sch)
    ops = GroupTiles().operands(func)
    tile = next(b for _, r, b in stages if r == "tile")
    sizes = {str(iv.dom.extent): f"t_.{f}" for iv, f in zip(tile.iter_vars, ("N", "G", "D", "HW"))}
    cast_reads = {load_name(b.body.value.value if _is_cast(b.body.value) else b.body.value)
                  for _, r, b in stages if r == "cast"}
    role = {n: "tile" for n, _ in ops.tiles_in + ops.tiles_out}
    role.update({n: "task" for n, _ in ops.tasks_in + ops.tasks_out})
    role.update({n: "scalar" for n, _ in ops.scalars_in})
    role.update({n: "chan" for n, _ in ops.chans_in + ops.chan_outs})
    role.update({n: "chan" for n, _ in ops.chan_sums if n not in cast_reads})
    args = [(b.name, str(b.dtype), role[b.name]) for b in func.params if b.name in role]
    return GroupKernel(symbol, ops, stages, args, sizes, knobs, tuple(b.name for b in func.params))


def _is_cast(node) -> bool:
    return type(node).__name__ == "Cast"


def _f32(name: str, dtype: str) -> str:
    return f"q_{name}_.GetValue(0)" if dtype == "float32" else f"static_cast<float>(q_{name}_.GetValue(0))"


def _context(k: GroupKernel, blk, axes: dict, row_index: str | None) -> Context:
    """Homes of every load of ``blk``; ``axes`` maps n/g/d/h to its iterator names."""
    a = axes
    loads = {}
    for name, _ in k.ops.tiles_in:
        loads[(name, (a["n"], a["g"], a["d"], a.get("h")))] = Value("tile", f"v_{name}_")
    for name, _ in k.ops.tasks_in:
        loads[(name, (a["n"], a["g"]))] = Value("scalar", f"s_{name}")
    for stage in k.ops.task_stages:
        loads[(stage, (a["n"], a["g"]))] = Value("scalar", f"s_{stage}")
    for name, _ in k.ops.scalars_in:
        loads[(name, ("0",))] = Value("scalar", f"s_{name}")
    for name, _ in k.ops.chans_in:
        loads[(name, (a["g"], a["d"]))] = Value("row", f"cf_{name}_.GetValue({row_index})")
    for stage in k.ops.chan_stages:
        loads[(stage, (a["n"], a["g"], a["d"]))] = Value("row", f"chan_{stage}_t_.GetValue({row_index})")
    return Context(row_var=None, col_var=None, tiles={}, rows={}, cols={}, sizes=k.sizes,
                   temps=[f"tmp{i}_t_" for i in range(k.ops.scratch_tiles)], loads=loads)


def _names(blk) -> list[str]:
    return [str(iv.var) for iv in blk.iter_vars]


def _chan_stage_fn(k: GroupKernel, name: str, blk) -> list[str]:
    n_, g_, d_, h_ = _names(blk)
    ctx = _context(k, blk, {"n": n_, "g": g_, "d": d_, "h": h_}, "d0 + i")
    value = emit_expr(reduction_body(blk.body), ctx)
    if value.kind != "tile":
        raise EmitError(f"{name}: a channel sum of a non-tile value")
    add = lambda i, v: f"chan_{name}_t_.SetValue(d0 + {i}, chan_{name}_t_.GetValue(d0 + {i}) + {v});"  # noqa: E731
    return ([f"__aicore__ inline void Chan_{name}(int32_t d0, int32_t n, int32_t len) {{",
             "    const int32_t P = t_.pitch; (void)P;"]
            + [f"    {line}" for line in ctx.lines + row_sums(value.text, add)] + ["}"])


def _task_stage_lines(k: GroupKernel, name: str, blk) -> list[str]:
    names = _names(blk)
    if len(names) == 3:                                   # a sum over the channels
        ctx = _context(k, blk, {"n": names[0], "g": names[1], "d": names[2]}, "i")
        value = emit_expr(reduction_body(blk.body), ctx)
        if value.kind not in ("row", "scalar") or ctx.lines:
            raise EmitError(f"{name}: a per-task sum must be scalar code")
        return [f"{{ float acc = 0.0f; for (int32_t i = 0; i < t_.D; ++i) acc += {value.text}; s_{name} = acc; }}"]
    ctx = _context(k, blk, {"n": names[0], "g": names[1], "d": "-"}, "i")
    value = emit_expr(stored_value(blk.body)[0], ctx)   # an output's rounding: at its store
    if value.kind != "scalar" or ctx.lines:
        raise EmitError(f"{name}: a per-task stage must be scalar code")
    return [f"s_{name} = {value.text};"]


def _copy(k_rows: str, length: str, itemsize: str, to_ub: bool) -> str:
    """Copy parameters of k channel rows of a group's (D, HW) tile."""
    return copy_params(k_rows, length, itemsize, to_ub, gm_row="t_.HW")


def _tile_fns(k: GroupKernel) -> list[str]:
    # IssueTiles starts a pass's copy-in, TakeTiles waits for it: the whole-group modes issue
    # the next task's tiles before computing this one (double buffering).
    out = ["__aicore__ inline void IssueTiles(int64_t task, int64_t d0, int32_t n, int64_t h0, int32_t len) {",
           "    const int32_t P = t_.pitch; (void)P;"]
    for name, d in k.ops.tiles_in:
        ty = CPP_TYPE[d]
        out += [f"    {{ LocalTensor<{ty}> a = in_{name}_.AllocTensor<{ty}>();",
                f"      DataCopyPad(a, g_{name}_[(task * t_.D + d0) * t_.HW + h0], "
                f"{_copy('n', 'len', f'sizeof({ty})', True)}, DataCopyPadExtParams<{ty}>(false, 0, 0, 0));",
                f"      in_{name}_.EnQue(a); }}"]
    out += ["}", "__aicore__ inline void TakeTiles(int32_t n) {", "    const int32_t P = t_.pitch; (void)P; (void)n;"]
    for name, d in k.ops.tiles_in:
        out.append(f"    q_{name}_ = in_{name}_.DeQue<{CPP_TYPE[d]}>();")
        out.append(as_float32(f"v_{name}_", name, d, "n * P"))
    out += ["}", "__aicore__ inline void FreeTiles() {"]
    out += [f"    in_{name}_.FreeTensor(q_{name}_);" for name, _ in k.ops.tiles_in]
    out.append("}")
    tile_blk = next(b for _, r, b in k.stages if r == "tile")
    n_, g_, d_, h_ = _names(tile_blk)
    ctx = _context(k, tile_blk, {"n": n_, "g": g_, "d": d_, "h": h_}, "d0 + i")
    expr, dtype = stored_value(tile_blk.body)
    target, ty = tile_blk.body.buffer.name, CPP_TYPE[dtype]
    out += ["__aicore__ inline void Outputs(int64_t task, int64_t d0, int32_t n, int64_t h0, int32_t len) {",
            "    const int32_t P = t_.pitch;"]
    out += store_tile(expr, ctx, dtype, f"out_{target}_", f"g_{target}_[(task * t_.D + d0) * t_.HW + h0]",
                      _copy('n', 'len', f'sizeof({ty})', False), "n * P", k.face.round_mode(dtype)) + ["}"]
    return out


def scalar_reads_after_load(chans_in) -> list[str]:
    """The scalar pipe reads the loaded channel vectors (GetValue): wait for the copy-in
    (MTE2) of float32 ones, read in place, and for the Cast (V) of the others."""
    events = sorted({"MTE2_S" if d == "float32" else "V_S" for _, d in chans_in})
    return [f"    {sync(*events)}   // the scalar pipe reads the loaded channels"] if events else []


def _empty_task_fn(k: GroupKernel) -> list[str]:
    """EmptyTask(task): a task of no elements (HxW or D of 0) still has its per-task outputs
    (a forward norm's mean of nothing is NaN, as the reference says): its channel sums are
    zeros, its task stages run, its outputs are stored. Only for kernels with such outputs."""
    out = ["__aicore__ inline void EmptyTask(int64_t task) {", "    (void)task;"]
    out += [line for line in _task_input_lines(k)]
    if k.ops.chan_stages:
        out += ["    if (t_.D > 0) {", f"        {sync('S_V')}"]
        out += [f"        Duplicate(chan_{s}_t_, 0.0f, t_.D);" for s in k.ops.chan_stages]
        out += [f"        {sync('V_S')}   // the task stages read them", "    }"]
    out += [f"    TaskStages{p}();" for p in range(len(phases(k)))]
    return out + ["    StoreTask(task);", "}"]


def _task_input_lines(k: GroupKernel) -> list[str]:
    out = []
    for name, d in k.ops.tasks_in:
        ty = CPP_TYPE[d]
        if not k.pad:
            out.append(f"    s_{name} = static_cast<float>(g_{name}_.GetValue(task));")
            continue
        out += [f"    {{ LocalTensor<{ty}> a = in_{name}_.AllocTensor<{ty}>();",
                f"      DataCopyPad(a, g_{name}_[task], DataCopyExtParams(1, sizeof({ty}), 0, 0, 0), "
                f"DataCopyPadExtParams<{ty}>(false, 0, 0, 0));",
                f"      in_{name}_.EnQue(a); q_{name}_ = in_{name}_.DeQue<{ty}>();",
                # the queue orders V after the copy (MTE2_V), not the scalar read below
                f"      {sync('MTE2_S')} s_{name} = {_f32(name, d)};",
                f"      in_{name}_.FreeTensor(q_{name}_); }}"]
    return out


def _task_fns(k: GroupKernel) -> list[str]:
    out = ["__aicore__ inline void LoadTask(int64_t task, int64_t g) {"]
    out += _task_input_lines(k)
    for name, d in k.ops.chans_in:
        out += copy_in(name, d, "g * t_.D", f"DataCopyExtParams(1, t_.D * sizeof({CPP_TYPE[d]}), 0, 0, 0)")
        out.append(as_float32(f"cf_{name}_", name, d, "t_.D"))
    out += scalar_reads_after_load(k.ops.chans_in)
    if k.ops.chan_stages:       # zero the per-channel sums with one vector op each, not D scalar stores
        out.append(f"    {sync('S_V')}   // the scalar pipe's last accesses to them come first")
        out += [f"    Duplicate(chan_{s}_t_, 0.0f, t_.D);" for s in k.ops.chan_stages]
        out.append(f"    {sync('V_S')}   // the scalar pipe adds into them next")
    out += ["}", "__aicore__ inline void FreeTask() {"]
    out += [f"    in_{name}_.FreeTensor(q_{name}_);" for name, _ in k.ops.chans_in]
    out.append("}")
    if k.ops.tasks_out:
        out += _empty_task_fn(k)
    for p, (_, stages) in enumerate(phases(k)):
        out.append(f"__aicore__ inline void TaskStages{p}() {{")
        for name in stages:
            blk = next(b for n, _, b in k.stages if n == name)
            out += [f"    {line}" for line in _task_stage_lines(k, name, blk)]
        out.append("}")
    return out + _store_task_fns(k)


def phases(k: GroupKernel) -> list[tuple[list, list]]:
    """[(channel sums, task stages)] (schedules.ascend.pass_phases, the passes the tiling's
    GM traffic counts): each phase's sums read the task's data once (a pass over it, or the
    tile already in UB), then its task stages run in registers."""
    return pass_phases(pass_items(k.stages, ("channel_sum", "task_stage", "task_output"),
                                  lambda role, _: role == "channel_sum"))


def _store_task_fns(k: GroupKernel) -> list[str]:
    """StoreTask(task): each per-task output's value (a task stage's register) into its UB
    vector; every TASKS_PER_STORE tasks of a core, and after its last, FlushTasks copies them
    to GM in one copy per output (a narrower dtype Cast into its queue first). Without
    DataCopyPad each value is a scalar GM write, flushed from the data cache by FlushStats."""
    out = ["__aicore__ inline void StoreTask(int64_t task) {", "    (void)task;"]
    if k.ops.tasks_out and not k.pad:
        for (target, dtype), stage in zip(k.ops.tasks_out, k.ops.task_out_stages):
            ty = CPP_TYPE[dtype]
            value = f"s_{stage}" if dtype == "float32" else f"static_cast<{ty}>(s_{stage})"
            out.append(f"    g_{target}_.SetValue(task, {value});")
    elif k.ops.tasks_out:
        out.append(f"    const int64_t j = (task - task0_) % {TASKS_PER_STORE};")
        out += [f"    stat_{target}_t_.SetValue(j, s_{stage});"
                for (target, _), stage in zip(k.ops.tasks_out, k.ops.task_out_stages)]
        out.append(f"    if (j == {TASKS_PER_STORE - 1} || task + 1 == task0_ + ntasks_) FlushTasks(task - j, j + 1);")
    out += ["}", "__aicore__ inline void FlushTasks(int64_t first, int32_t n) {", "    (void)first; (void)n;"]
    for target, dtype in (k.ops.tasks_out if k.pad else ()):
        out += store_values(k, target, dtype, f"stat_{target}_t_", "first",
                            ("the next tasks' values overwrite what the copy-out read",
                             "the next tasks' values overwrite what the Cast read"))
    out += ["}", "__aicore__ inline void FlushStats() {"]
    if k.ops.tasks_out and not k.pad:
        name, dtype = k.ops.tasks_out[0]
        out.append(f"    if (ntasks_ > 0) DataCacheCleanAndInvalid<{CPP_TYPE[dtype]}, CacheLine::ENTIRE_DATA_CACHE>(g_{name}_);")
    return out + ["}"]
