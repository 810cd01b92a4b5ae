"""Tuning against a cost model: for targets whose hardware is not here (Ascend).

The hook is generic: a target class may declare ``cost_model``, an object with ``name``
(the label every output carries) and ``estimate(op, combo, target, problem, knobs) ->
seconds``. When it does, the tuner builds each candidate in this process, checks it
against the float64 reference by running it where it runs here (Ascend: the CPU
emulation of the emitted AscendC), and records the model's estimate instead of a clock
time, with ``model`` set to the label: never mistaken for a measurement. A candidate that
cannot be checked here is recorded as failed, not estimated.

``AscendAnalytic`` models one vector kernel from the rule's own tiling (the host tiling the
schedule computes: cores, rows per core, UB pass sizes, buffers, GM bytes, cross-core sums):

    t = launch + passes * pass_overhead + overlap(t_gm, t_vec) + t_sums
    t_gm  = GM bytes of the busiest core / min(HBM bandwidth / cores used, per-core bandwidth)
    t_vec = vector repeats of the busiest core (elements / elements per 256-byte repeat,
            times VECTOR_OPS per element) / clock
    overlap = max(t_gm, t_vec) with double buffering (buffer_num 2), their sum without
    t_sums = deterministic: SyncAll + the final pass over the partial-sum workspace;
             atomic: serialised atomic adds of each core's column partials.

Bandwidth and clock are not in the hardware descriptions; the figures below are assumed
(public ballpark numbers per SoC) and say so in the label. Rankings, not absolute times,
are what tuning needs from them. Until the Ascend target declares ``cost_model`` itself,
``cost_model_of`` binds this model to targets whose schedules are the Ascend rules.
"""
from __future__ import annotations

import math

from tvm import te

from opgen.tune import database
from opgen.tune.measure import Measurement
from opgen.tune.space import kernel_shapes, matching_rule

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
        shapes = kernel_shapes(op, problem)
        rule = matching_rule(op, combo, target)
        from opgen.schedules import default_knobs

        return rule.tiling(func, target, {**default_knobs(rule, target), **knobs},
                           [shapes[n] for n in op.inputs])

    def estimate(self, op, combo, target, problem, knobs: dict) -> float:
        hw = target.hardware
        t = self.tiling(op, combo, target, problem, knobs)
        if not t.block_dim:
            return LAUNCH_S
        hbm, per_core, clock = ASSUMED.get(hw.soc, ASSUMED["Ascend910B"])
        tasks = max(1, t.fields.get("tasks", t.block_dim * t.block_factor))
        share = t.block_factor / tasks                      # the busiest core's part of the work
        gm_core = t.gm_bytes * share
        t_gm = gm_core / min(hbm / t.block_dim, per_core)
        elements = gm_core / 4
        t_vec = math.ceil(elements / hw.elements_per_repeat(4)) * VECTOR_OPS / clock
        passes = math.ceil(t.block_factor / max(1, t.ub_rows)) * max(1, math.ceil(t.fields.get("cols", t.ub_cols)
                                                                                   / max(1, t.ub_cols)))
        body = max(t_gm, t_vec) if knobs.get("buffer_num", 2) == 2 else t_gm + t_vec
        if t.sums == "deterministic":
            sums = SYNC_ALL_S + t.workspace_bytes / hbm
        elif t.sums == "atomic":
            sums = t.block_dim * (t.fields.get("cols", t.ub_cols) * 4) / per_core
        else:
            sums = 0.0
        return LAUNCH_S + passes * PASS_OVERHEAD_S + body + sums


def cost_model_of(target):
    """The target's declared cost model, else the built-in one for its schedule family."""
    declared = getattr(target, "cost_model", None)
    if declared is not None:
        return declared
    return AscendAnalytic() if getattr(target, "schedule_module", "") == "ascend" else None


class ModelRunner:
    """Checks each candidate by running it here, then records the model's estimate."""

    def __init__(self, target, settings=None, model=None):
        self.target, self.model = target, model or cost_model_of(target)
        self.device = f"model:{self.model.name}"

    def run_all(self, workload, builds):
        for built in builds:
            yield built, self.run(workload, built)

    def run(self, workload, built) -> Measurement:
        if built.error:
            return Measurement(database.FAILED, error=built.error, device=self.device, model=self.model.name)
        if built.kernel is None or not self.target.can_run():
            return Measurement(database.FAILED, error="cannot check this candidate here (no emulation)",
                               device=self.device, model=self.model.name)
        try:
            arrays = workload.kernel_arrays()
            built.kernel(arrays)
            ratios = workload.checker.ratios({n: arrays[n] for n in workload.op.outputs})
            worst = max(ratios.values(), default=0.0)
            if not worst <= 1.0:
                return Measurement(database.WRONG, [], worst, f"error {worst:.3g}x the tolerance", self.device,
                                   self.model.name)
            seconds = self.model.estimate(workload.op, workload.combo, self.target, workload.problem, built.knobs)
        except Exception as err:
            return Measurement(database.FAILED, error=f"{type(err).__name__}: {err}", device=self.device,
                               model=self.model.name)
        return Measurement(database.OK, [seconds * 1e3], worst, None, self.device, self.model.name)
