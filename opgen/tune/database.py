"""The tuning database: JSON lines, one record per measured candidate.

A record's key is (op, dtype combo, target name, hardware, shape bucket):
  * the hardware is what makes a measurement transferable: the target's declared
    ``hardware_key()`` (for llvm the TVM target string with LLVM's ``mcpu`` and the core
    count; for opencl the platform, device and driver; for Ascend the product, cores and
    UB), never every field of the target's class, so a field added to a target does not
    orphan records. A record measured on a znver4 never tunes a skylake. Keys written
    before this format (KEY_FORMAT 1: the TVM target plus the class's fields) are migrated
    in memory where the target's key is the TVM target alone; the others are reported
    once per file and not used;
  * the shape bucket rounds every extent of the op's first input (in the kernel's
    canonical shape, which carries all of its size variables for the ops here) up to a
    power of two: 3000x4096 and 4096x4096 share the bucket 4096x4096, 4097x4096 does not.

Records are appended atomically: one ``os.write`` of one line under ``flock`` on an
``O_APPEND`` descriptor, so two tuning processes never interleave and an interrupted run
(Ctrl-C) keeps every record it finished.

A database is input that no bad line may break: on load every line is checked against
the schema below (types, status, knob values that are scalars, finite times); a line that
does not parse or does not conform is skipped with a warning naming the file and the
line, and never reaches a kernel build. Whether a record's knobs are a point of today's
rules is decided later, by the resolver (opgen.schedules.resolve), which uses the best
*valid* record of a key. Loaded records carry ``_source`` ("file:line"), in memory only.

Files read: the shipped defaults ``opgen/schedules/tuned/*.jsonl``, then the user's
database (``$OPGEN_TUNE_DB``, else ``<kernel cache dir>/tuning.jsonl``). Points of a key
rank by the median of their ``ok`` template records' medians; MetaSchedule records are
kept for comparison but never chosen (they are not points of a rule's knob space).
"""
from __future__ import annotations

import fcntl
import functools
import json
import math
import os
import statistics
import warnings
from pathlib import Path

from opgen import diskcache
from opgen.targets import get_target

OK, FAILED, WRONG, INVALID = "ok", "failed", "wrong", "invalid"
TEMPLATE, METASCHEDULE = "template", "metaschedule"
SHIPPED_DIR = Path(__file__).resolve().parent.parent / "schedules" / "tuned"


def user_db_path() -> Path:
    """Where ``opgen tune`` appends by default."""
    explicit = os.environ.get("OPGEN_TUNE_DB")
    if explicit:
        return Path(explicit)
    return diskcache.cache_dir() / "tuning.jsonl"


def shipped_paths() -> list[Path]:
    """The defaults shipped in the package (``opgen.schedules`` ``tuned/*.jsonl``)."""
    try:
        from opgen import schedules

        root = Path(schedules.__file__).resolve().parent / "tuned"
    except ImportError:
        root = SHIPPED_DIR
    return sorted(root.glob("*.jsonl")) if root.is_dir() else []


KEY_FORMAT = 2


@functools.lru_cache(maxsize=None)
def hardware_of(target) -> str:
    """The hardware part of a record's key: the target's declared ``hardware_key()``."""
    return json.dumps({"format": KEY_FORMAT, **target.hardware_key()}, sort_keys=True)


def _legacy_tvm(hardware) -> str | None:
    """The TVM target string of a key written before KEY_FORMAT 2 (None: not such a key)."""
    try:
        value = json.loads(hardware)
    except (TypeError, ValueError):
        return None
    if not isinstance(value, dict) or "format" in value or not isinstance(value.get("tvm"), str):
        return None
    return value["tvm"]


def migrated_hardware(record: dict) -> str | None:
    """Today's hardware key for a record written with an older one, or None when it cannot
    be attributed: only a target whose key is its TVM target string alone (llvm, cuda
    without a GPU) can be, since the old key did not name an OpenCL device or an Ascend
    product in a form today's key can be derived from."""
    tvm_target = _legacy_tvm(record.get("hardware"))
    if tvm_target is None:
        return None
    try:
        target = get_target(record["target"])
    except KeyError:
        return None
    if set(target.hardware_key()) != {"tvm"}:
        return None
    return json.dumps({"format": KEY_FORMAT, "tvm": tvm_target}, sort_keys=True)


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
    if path.parent == diskcache.cache_dir():
        diskcache.private_dir(path.parent)          # the default database: in the private cache root
    # Any other folder must exist: a mistyped path fails (os.open) instead of growing folders.
    stored = {k: v for k, v in record.items() if not k.startswith("_")}   # not in-memory annotations
    line = (json.dumps(stored, sort_keys=True, default=str) + "\n").encode()
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


STATUSES = (OK, FAILED, WRONG, INVALID)
ENGINES = (TEMPLATE, METASCHEDULE)
KEY_FIELDS = ("op", "combo", "target", "hardware", "bucket")


def _finite_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _knob_problem(knobs) -> str | None:
    if not isinstance(knobs, dict):
        return f"knobs is {type(knobs).__name__}, not an object"
    for name, value in knobs.items():
        scalar = isinstance(value, (bool, int, str)) or (isinstance(value, float) and math.isfinite(value))
        if not scalar:
            return f"knob {name!r} has the value {json.dumps(value)[:40]}, not a number, bool or string"
    return None


def schema_problem(record) -> str | None:
    """Why ``record`` does not conform to the record schema (None: it does)."""
    if not isinstance(record, dict):
        return f"a JSON {type(record).__name__}, not an object"
    for name in KEY_FIELDS:
        if not isinstance(record.get(name), str):
            return f"{name} is {json.dumps(record.get(name))[:40]}, not a string"
    if record.get("status") not in STATUSES:
        return f"status {json.dumps(record.get('status'))[:40]} is not one of {', '.join(STATUSES)}"
    engine = record.get("engine", TEMPLATE)
    if engine not in ENGINES:
        return f"engine {json.dumps(engine)[:40]} is not one of {', '.join(ENGINES)}"
    if engine == TEMPLATE or record.get("knobs") is not None:
        problem = _knob_problem(record.get("knobs"))
        if problem:
            return problem
    median = record.get("median_ms")
    if median is not None and not (_finite_number(median) and median > 0):
        return f"median_ms {json.dumps(median)[:40]} is not a finite positive number"
    if record["status"] == OK and engine == TEMPLATE and median is None:
        return "an ok record without median_ms"
    times = record.get("times_ms", [])
    if not isinstance(times, list) or not all(_finite_number(t) for t in times):
        return "times_ms is not a list of finite numbers"
    return None


def _read_line(raw: bytes):
    """(record, None) or (None, why the line is skipped)."""
    try:
        record = json.loads(raw)
    except ValueError as err:
        return None, f"not JSON ({str(err)[:60]})"
    problem = schema_problem(record)
    return (None, problem) if problem else (record, None)


def load(path: Path, skipped: list | None = None) -> list[dict]:
    """Every valid record of ``path``, each with ``_source`` ("file:line"). Invalid lines are
    skipped with a warning naming file and line (and listed in ``skipped`` as (source,
    reason) when given); records with an older hardware key are migrated or, when they
    cannot be, reported in one warning for the file."""
    path = Path(path)
    if not path.exists():
        return []
    records, orphans = [], 0
    with open(path, "rb") as stream:
        for number, raw in enumerate(stream, 1):
            if not raw.strip():
                continue
            source = f"{path}:{number}"
            record, problem = _read_line(raw)
            if problem is None and _legacy_tvm(record["hardware"]) is not None:
                hardware = migrated_hardware(record)
                if hardware is None:
                    orphans += 1
                    problem = "an old-format hardware key that names no device (retune)"
                else:
                    record = {**record, "hardware": hardware, "_migrated": True}
            if problem is not None:
                if skipped is not None:
                    skipped.append((source, problem))
                if not problem.startswith("an old-format"):
                    warnings.warn(f"{source}: skipping an invalid tuning record: {problem}", stacklevel=2)
                continue
            records.append({**record, "_source": source})
    if orphans:
        warnings.warn(f"{path}: {orphans} tuning record(s) have a hardware key of an older format that does not "
                      f"name their device; they are not used (rerun opgen tune for them)", stacklevel=2)
    return records


def load_all(paths=None, skipped: list | None = None) -> list[dict]:
    """Shipped defaults then the user's database (or the given paths)."""
    paths = list(paths) if paths is not None else [*shipped_paths(), user_db_path()]
    return [r for p in paths for r in load(p, skipped)]


def is_candidate(record: dict) -> bool:
    """Whether a record may be chosen as the best: a correct, measured template point."""
    return (record.get("status") == OK and record.get("engine", TEMPLATE) == TEMPLATE
            and isinstance(record.get("median_ms"), (int, float)) and isinstance(record.get("knobs"), dict))


def ranked_records(records) -> dict:
    """key -> the key's points best first, each as the latest record of that point.

    A point measured several times (a confirmation round, a second tuning run) counts with
    the median of its records' medians, so one lucky timing on a noisy machine does not
    crown a point that is not faster.
    """
    by_point: dict = {}
    for record in records:
        if is_candidate(record):
            point = (record_key(record), tuple(sorted(record["knobs"].items())))
            by_point.setdefault(point, []).append(record)
    ranked: dict = {}
    for (key, _), group in by_point.items():
        ranked.setdefault(key, []).append((statistics.median(r["median_ms"] for r in group), group[-1]))
    return {key: tuple(record for _, record in sorted(points, key=lambda p: p[0])) for key, points in ranked.items()}


def best_records(records) -> dict:
    """key -> the latest record of the key's fastest point (see ``ranked_records``)."""
    return {key: points[0] for key, points in ranked_records(records).items()}
