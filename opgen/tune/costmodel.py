"""Tuning against a cost model: for targets whose hardware is not here (Ascend).

A target may declare a cost model (``TargetSpec.cost_model()``): an object with ``name``
(the label every output carries) and ``estimate(op, combo, target, problem, knobs) ->
seconds``, and optionally ``from_run(kernel) -> seconds | None``: the time of the run the
runner just checked, when the model can read it from that run (ascend-emu: the emulation's
timing model of the emitted code), preferred to ``estimate``. When it does, the tuner builds each candidate in this process, checks it
against the float64 reference by running it where it runs here (Ascend: the CPU
emulation of the emitted AscendC), and records the model's estimate instead of a clock
time, with ``model`` set to the label and ``timer`` "model": never mistaken for a
measurement. A candidate that cannot be checked here is recorded as failed, not estimated.
"""
from __future__ import annotations

from opgen.targets import MODEL
from opgen.tune import database
from opgen.tune.measure import Measurement


class ModelRunner:
    """Checks each candidate by running it here, then records the model's estimate."""

    def __init__(self, target, settings=None, model=None):
        self.target, self.model = target, model or target.cost_model()
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
            # A model that can read the run it just checked (ascend-emu: the emulation's pipe-level
            # timing of the emitted code) measures; otherwise it estimates from the knobs.
            from_run = getattr(self.model, "from_run", None)
            seconds = from_run(built.kernel) if from_run else None
            if seconds is None:
                seconds = self.model.estimate(workload.op, workload.combo, self.target, workload.problem,
                                              built.knobs)
        except Exception as err:
            return Measurement(database.FAILED, error=f"{type(err).__name__}: {err}", device=self.device,
                               model=self.model.name)
        return Measurement(database.OK, [seconds * 1e3], worst, None, self.device, self.model.name, timer=MODEL)
