"""The kernel cache's view of the tuning database: key -> best knobs, loaded once.

The first call reads every database file (shipped defaults, then the user's) and keeps
only the best record per key; later calls are a dict lookup on (op, combo, target,
hardware, bucket), cheap enough for every GetWorkspaceSize. A best record whose knobs the
current rules no longer accept (a knob renamed since it was tuned) is ignored with a
warning, checked once per key. ``reload()`` forgets the index (after a tuning run, or
when ``$OPGEN_TUNE_DB`` changes).
"""
from __future__ import annotations

import threading
import warnings

from opgen.tune import database

_lock = threading.Lock()
_index: dict | None = None
_validated: dict = {}


def reload() -> None:
    """Forget the index; the aclnn layer's cached plans go too (they hold the old kernels)."""
    global _index
    with _lock:
        _index = None
        _validated.clear()
    from opgen import aclnn

    aclnn.clear_plan_cache()


def _get_index() -> dict:
    global _index
    with _lock:
        if _index is None:
            _index = database.best_records(database.load_all())
        return _index


def _still_valid(key: tuple, record: dict, op, combo, target) -> bool:
    """Whether the record's knobs are a valid point of the rule that schedules this op now."""
    if key in _validated:
        return _validated[key]
    from opgen.tune.space import matching_rule
    from opgen.schedules import check_knobs

    try:
        problem = check_knobs(matching_rule(op, combo, target), record["knobs"], target)
    except Exception as err:  # no rule matches any more: the record is stale
        problem = f"{type(err).__name__}: {err}"
    if problem:
        warnings.warn(f"ignoring the tuned record for {key[0]} {key[1]} {key[2]} bucket {key[4]}: {problem}")
    _validated[key] = not problem
    return not problem


def tuned_knobs(op, combo, target, kernel_shapes: dict) -> dict | None:
    """The best tuned knobs for a call of ``op`` with these kernel shapes, or None."""
    index = _get_index()
    if not index:
        return None
    key = database.key_of(op.name, combo.tag, target, database.bucket_for(op, kernel_shapes))
    record = index.get(key)
    if record is None or not _still_valid(key, record, op, combo, target):
        return None
    return dict(record["knobs"])
