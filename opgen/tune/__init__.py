"""opgen.tune: schedule search over the knobs the schedule rules declare.

    from opgen.tune import tune, Options
    result = tune(op, combo, target, problem, Options(trials=32, strategy="model", seed=0))

Pieces: ``space`` (the matched rule's knob space, pruned by its constraints),
``strategies`` (exhaustive, random, model-guided), ``measure`` (parallel builds, checked
and timed measurements), ``rpc`` (measurement through TVM's RPC tracker), ``database``
(JSON lines; ``lookup`` is the kernel cache's view of it), ``metaschedule`` (TVM's
auto-scheduler on the same workload), ``costmodel`` (targets tuned against a model),
``replay`` (strategies compared on a recorded space), ``cli`` (``opgen tune``).
"""
from __future__ import annotations

import importlib

__all__ = ["tune", "Options", "Settings", "TuneResult"]
_HOME = {"tune": "opgen.tune.driver", "Options": "opgen.tune.driver", "TuneResult": "opgen.tune.driver",
         "Settings": "opgen.tune.measure"}


def __getattr__(name: str):
    """The tuner's entry points, loaded on first use: the kernel selection reads the
    database (``opgen.tune.lookup``) on every plan-cache miss and must not load the tuner."""
    if name in _HOME:
        return getattr(importlib.import_module(_HOME[name]), name)
    raise AttributeError(f"module 'opgen.tune' has no attribute {name!r}")
