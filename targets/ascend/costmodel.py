"""An analytic cost model of the Ascend vector kernels, for tuning without a device.

``AscendAnalytic`` models one vector kernel from the rule's own tiling (the host tiling the
schedule computes: cores, rows per core, UB pass sizes, buffers, GM bytes, cross-core sums):

    t = launch + passes * pass_overhead + overlap(t_gm, t_vec) + t_sums
    t_gm  = GM bytes of the busiest core / min(HBM bandwidth / cores used, per-core bandwidth)
    t_vec = vector repeats of the busiest core (elements / elements per 256-byte repeat,
            times VECTOR_OPS per element) / clock
    overlap = max(t_gm, t_vec) with double buffering (buffer_num 2), their sum without
    t_sums = deterministic: SyncAll + the final pass over the partial-sum workspace;
             atomic: serialised atomic adds of each core's column partials (and, for
             float32 accumulators that casts round, SyncAll and the final pass);
             none for the channel pattern (a channel's sums stay on its core).
    passes = UB passes of the busiest core; the channel pattern counts them per channel:
             one read of its data when it fits (mode channel), else two (sums, outputs),
             which its GM bytes count too.

Bandwidth and clock are not in the hardware descriptions; the figures below are assumed
(public ballpark numbers per SoC) and say so in the label. Rankings, not absolute times,
are what tuning needs from them. The Ascend target declares this model
(``TargetSpec.cost_model``); opgen.tune.costmodel runs any target's model.
"""
from __future__ import annotations

import math

from opgen import schedules
from opgen.lazy import te

# SoC -> (HBM bytes/s, per-core GM bytes/s, vector clock Hz): assumptions, not data sheets.
ASSUMED = {
    "Ascend910B": (1.6e12, 60e9, 1.8e9),
    "Ascend910_93": (1.6e12, 60e9, 1.8e9),
    "Ascend950": (1.6e12, 60e9, 1.8e9),
    "Ascend310P": (0.2e12, 40e9, 1.0e9),
    "Ascend910": (1.2e12, 50e9, 1.5e9),
}
LAUNCH_S = 5e-6
PASS_OVERHEAD_S = 0.4e-6      # DMA issue + queue handshakes of one UB pass
SYNC_ALL_S = 2e-6
VECTOR_OPS = 8                # vector instructions per element, both ops here (Muls, Mul, Sub, Adds, casts)


class AscendAnalytic:
    name = "ascend-analytic-v1 (assumed bandwidth/clock)"

    def tiling(self, op, combo, target, problem, knobs: dict):
        func = te.create_prim_func(op.compute(combo))
        shapes = op.api.kernel_shapes(problem)
        rule = schedules.match(func, target)
        return rule.tiling(func, target, {**schedules.default_knobs(rule, target), **knobs},
                           [shapes[n] for n in op.kernel_inputs(combo)])

    def estimate(self, op, combo, target, problem, knobs: dict) -> float:
        return self.time(self.tiling(op, combo, target, problem, knobs), target.hardware, knobs)

    def time(self, t, hw, knobs: dict) -> float:
        """Seconds for one call of a kernel tiled as ``t`` (a Tiling of any Ascend rule)."""
        if not t.block_dim:
            return LAUNCH_S
        hbm, per_core, clock = ASSUMED.get(hw.soc, ASSUMED["Ascend910B"])
        tasks = max(1, t.fields.get("tasks", t.block_dim * t.block_factor))
        share = t.block_factor / tasks                      # the busiest core's part of the work
        gm_core = t.gm_bytes * share
        t_gm = gm_core / min(hbm / t.block_dim, per_core)
        elements = gm_core / 4
        t_vec = math.ceil(elements / hw.elements_per_repeat(4)) * VECTOR_OPS / clock
        if "passes" in t.fields:       # the channel pattern: per channel, one or two reads of its passes
            passes = t.fields["passes"]
        else:
            passes = math.ceil(t.block_factor / max(1, t.ub_rows)) * max(1, math.ceil(t.fields.get("cols", t.ub_cols)
                                                                                       / max(1, t.ub_cols)))
        body = max(t_gm, t_vec) if knobs.get("buffer_num", 2) == 2 else t_gm + t_vec
        if t.sums == "deterministic":
            sums = SYNC_ALL_S + t.workspace_bytes / hbm
        elif t.sums == "atomic":
            sums = t.block_dim * (t.fields.get("cols", t.ub_cols) * 4) / per_core
            if t.workspace_bytes:     # accumulators that casts round: SyncAll, then the final pass
                sums += SYNC_ALL_S + t.workspace_bytes / hbm
        else:
            sums = 0.0
        return LAUNCH_S + passes * PASS_OVERHEAD_S + body + sums


class AscendEmulated(AscendAnalytic):
    """The emulation's pipe-level timing model (emu_timing.h) of the emitted kernel's run:
    the tuner runs every candidate under the emulation to check it, and that run's modelled
    time (the latest core's pipes, as the code's events, queues and barriers order them) is
    what gets recorded. ``estimate`` (no run at hand) stays the analytic formula."""

    name = "ascend-emu-pipes-v1 (emulated pipes; assumed GM bandwidth and event costs)"

    def from_run(self, kernel) -> float | None:
        """Seconds the timing model gave the last launch of ``kernel`` (an opgen Kernel of
        this target), or None when it has not launched (e.g. an empty problem)."""
        emu = getattr(getattr(kernel, "module", None), "kernel", None)
        modelled = getattr(emu, "last_timing", None)
        return None if modelled is None or modelled.cycles <= 0 else modelled.seconds
