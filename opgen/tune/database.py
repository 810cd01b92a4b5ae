"""The tuning database: JSON lines, one record per measured candidate.

A record's key is (op, dtype combo, target name, hardware description, shape bucket):
  * the hardware description is what makes a measurement transferable: the TVM target
    string (LLVM's ``mcpu``, core count) plus the target dataclass's own fields (an
    Ascend target bound to a product carries its UB size, cores, ...). A record measured
    on a znver4 never tunes a skylake;
  * the shape bucket rounds every extent of the op's first input (in the kernel's
    canonical shape, which carries all of its size variables for the ops here) up to a
    power of two: 3000x4096 and 4096x4096 share the bucket 4096x4096, 4097x4096 does not.

Records are appended atomically: one ``os.write`` of one line under ``flock`` on an
``O_APPEND`` descriptor, so two tuning processes never interleave and an interrupted run
(Ctrl-C) keeps every record it finished. On load, a line that does not parse is skipped
with a warning naming the file and the line number.

Files read: the shipped defaults ``opgen/schedules/tuned/*.jsonl``, then the user's
database (``$OPGEN_TUNE_DB``, else ``<kernel cache dir>/tuning.jsonl``). The best point of
a key is the ``ok`` template point with the smallest median time; MetaSchedule records
are kept for comparison but never chosen (they are not points of a rule's knob space).
"""
from __future__ import annotations

import dataclasses
import fcntl
import functools
import json
import math
import os
import statistics
import warnings
from pathlib import Path

OK, FAILED, WRONG, INVALID = "ok", "failed", "wrong", "invalid"
TEMPLATE, METASCHEDULE = "template", "metaschedule"
SHIPPED_DIR = Path(__file__).resolve().parent.parent / "schedules" / "tuned"


def user_db_path() -> Path:
    """Where ``opgen tune`` appends by default."""
    explicit = os.environ.get("OPGEN_TUNE_DB")
    if explicit:
        return Path(explicit)
    from opgen.kernels import cache_dir

    return cache_dir() / "tuning.jsonl"


def shipped_paths() -> list[Path]:
    """The defaults shipped in the package (``opgen.schedules`` ``tuned/*.jsonl``)."""
    try:
        from opgen import schedules

        root = Path(schedules.__file__).resolve().parent / "tuned"
    except ImportError:
        root = SHIPPED_DIR
    return sorted(root.glob("*.jsonl")) if root.is_dir() else []


@functools.lru_cache(maxsize=None)
def hardware_of(target) -> str:
    """The hardware description of a target: its TVM target and its dataclass fields.

    ``description`` (prose) is left out so that rewording it does not orphan records.
    """
    fields = {f.name: getattr(target, f.name) for f in dataclasses.fields(target)
              if f.name not in ("name", "description")}
    try:
        tvm_target = str(target.tvm_target())
    except Exception:  # a target without a TVM target (an emitter-only one)
        tvm_target = ""
    return json.dumps({"tvm": tvm_target, **{k: repr(v) for k, v in sorted(fields.items())}}, sort_keys=True)


def bucket_of(shape) -> str:
    """The shape bucket: every extent rounded up to a power of two (0 stays 0)."""
    return "x".join(str(0 if d <= 0 else 1 << max(0, math.ceil(math.log2(d)))) for d in shape) or "scalar"


def bucket_for(op, kernel_shapes: dict) -> str:
    """The bucket of a call, from the kernel shapes of its tensors (name -> shape)."""
    return bucket_of(tuple(int(d) for d in kernel_shapes[op.inputs[0]]))


def key_of(op_name: str, combo_tag: str, target, bucket: str) -> tuple:
    return (op_name, combo_tag, target.name, hardware_of(target), bucket)


def record_key(record: dict) -> tuple:
    return (record["op"], record["combo"], record["target"], record["hardware"], record["bucket"])


def append(path: Path, record: dict) -> None:
    """Append one record as one line, atomically with respect to other appenders.

    The line starts on a fresh line: a writer killed mid-line (or an older full disk) may
    have left a fragment without its newline, and a record glued onto it would make both
    unreadable. The last byte is checked under the lock, so no other appender can change
    it in between, and the separator goes out in the same ``os.write`` as the record.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(record, sort_keys=True, default=str) + "\n").encode()
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)   # read: the last byte
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        written = os.write(fd, line)
        if written != len(line):  # a full disk: do not leave half a line for others to append to
            os.write(fd, b"\n")
            raise OSError(f"{path}: short write of a tuning record ({written} of {len(line)} bytes)")
        os.fsync(fd)
    finally:
        os.close(fd)


def load(path: Path) -> list[dict]:
    """Every readable record of ``path``; unreadable lines are skipped with a warning."""
    path = Path(path)
    if not path.exists():
        return []
    records = []
    with open(path, "rb") as stream:
        for number, raw in enumerate(stream, 1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
                record_key(record)
            except (ValueError, KeyError, TypeError) as err:
                warnings.warn(f"{path}:{number}: skipping an unreadable tuning record ({type(err).__name__}: "
                              f"{str(err)[:80]})", stacklevel=2)
                continue
            records.append(record)
    return records


def load_all(paths=None) -> list[dict]:
    """Shipped defaults then the user's database (or the given paths)."""
    paths = list(paths) if paths is not None else [*shipped_paths(), user_db_path()]
    return [r for p in paths for r in load(p)]


def is_candidate(record: dict) -> bool:
    """Whether a record may be chosen as the best: a correct, measured template point."""
    return (record.get("status") == OK and record.get("engine", TEMPLATE) == TEMPLATE
            and isinstance(record.get("median_ms"), (int, float)) and isinstance(record.get("knobs"), dict))


def best_records(records) -> dict:
    """key -> the latest record of the key's fastest point.

    A point measured several times (a confirmation round, a second tuning run) counts with
    the median of its records' medians, so one lucky timing on a noisy machine does not
    crown a point that is not faster.
    """
    by_point: dict = {}
    for record in records:
        if is_candidate(record):
            point = (record_key(record), tuple(sorted(record["knobs"].items())))
            by_point.setdefault(point, []).append(record)
    best: dict = {}
    for (key, _), group in by_point.items():
        cost = statistics.median(r["median_ms"] for r in group)
        if key not in best or cost < best[key][0]:
            best[key] = (cost, group[-1])
    return {key: record for key, (_, record) in best.items()}
