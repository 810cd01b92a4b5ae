"""The kernel selection's view of the tuning database: key -> records, best first.

The first call reads every database file (shipped defaults, then the user's) and ranks,
per key, one record per point by the median of that point's measurements; later calls are
a dict lookup on (op, combo, target, hardware, bucket), cheap enough for every plan-cache
miss. Records are data: whether a record's knobs are a valid point of today's rules is
decided by the one knob resolver (``opgen.schedules.resolve``), which takes the best valid
one. ``reload()`` forgets the index (after a tuning run, or when ``$OPGEN_TUNE_DB``
changes) and tells whoever subscribed with ``on_reload`` (the aclnn plan cache), so this
module imports nothing above it.
"""
from __future__ import annotations

import threading

from opgen.tune import database

_lock = threading.Lock()
_index: dict | None = None
_subscribers: list = []


def on_reload(callback) -> None:
    """Call ``callback()`` whenever the index is forgotten (plans built on old records go)."""
    with _lock:
        if callback not in _subscribers:
            _subscribers.append(callback)


def reload() -> None:
    """Forget the index; subscribers (cached plans holding the old kernels) are told."""
    global _index
    with _lock:
        _index = None
        subscribers = list(_subscribers)
    for callback in subscribers:
        callback()


def _get_index() -> dict:
    global _index
    with _lock:
        if _index is None:
            _index = database.ranked_records(database.load_all())
        return _index


def records_for(op_name: str, combo_tag: str, target, bucket: str) -> tuple:
    """The tuning records of this key, best first (one per point); () when never tuned."""
    index = _get_index()
    if not index:
        return ()
    return index.get(database.key_of(op_name, combo_tag, target, bucket), ())
