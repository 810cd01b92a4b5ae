"""The tuning database: round trip, concurrent appends, corrupted lines, and the kernel
cache's lookup of the best record by shape bucket."""
from __future__ import annotations

import json
import subprocess
import sys
import warnings

import pytest

from opgen import kernels
from opgen.ops import get_op
from opgen.targets import get_target
from opgen.tune import database, lookup

OP = get_op("rms_norm_grad")
COMBO = OP.combo("f32-f32")
TARGET = get_target("llvm")


def _record(shapes=(64, 1000), knobs=None, median=1.0, status=database.OK, **extra) -> dict:
    bucket = database.bucket_of(shapes)
    return {"op": OP.name, "combo": COMBO.tag, "target": TARGET.name, "hardware": database.hardware_of(TARGET),
            "bucket": bucket, "engine": database.TEMPLATE, "knobs": knobs or {"rows_per_chunk": 64},
            "status": status, "median_ms": median, "times_ms": [median], **extra}


def test_round_trip(tmp_path):
    path = tmp_path / "db.jsonl"
    records = [_record(median=m, knobs={"rows_per_chunk": k}) for m, k in ((2.0, 8), (1.5, 256), (3.0, 64))]
    for r in records:
        database.append(path, r)
    assert database.load(path) == records
    best = database.best_records(database.load(path))
    assert list(best.values()) == [records[1]]


def test_bucket_rounds_each_extent_up_to_a_power_of_two():
    assert database.bucket_of((3000, 4096)) == database.bucket_of((4096, 4096)) == "4096x4096"
    assert database.bucket_of((4097, 4096)) == "8192x4096"
    assert database.bucket_of((0, 1)) == "0x1"


APPENDER = """
import sys
from opgen.tune import database
path, who = sys.argv[1], sys.argv[2]
for i in range(150):
    database.append(path, {"op": "o", "combo": "c", "target": "t", "hardware": "h", "bucket": "b",
                           "who": who, "i": i, "pad": who * 9000})   # lines far above PIPE_BUF
"""


@pytest.mark.timeout(120)
def test_concurrent_appends_from_two_processes_never_interleave(tmp_path):
    path = tmp_path / "db.jsonl"
    procs = [subprocess.Popen([sys.executable, "-c", APPENDER, str(path), who]) for who in "ab"]
    for p in procs:
        assert p.wait(timeout=100) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        records = database.load(path)
    assert sorted((r["who"], r["i"]) for r in records) == sorted((w, i) for w in "ab" for i in range(150))
    assert all(r["pad"] == r["who"] * 9000 for r in records)


def test_unreadable_lines_are_skipped_with_a_warning_naming_file_and_line(tmp_path):
    path = tmp_path / "db.jsonl"
    good = _record()
    path.write_text(json.dumps(good) + "\n" + '{"op": "rms_norm_grad", "knobs": {"rows_' + "\n"
                    + json.dumps({"no": "key"}) + "\n" + json.dumps(good) + "\n")
    with pytest.warns(UserWarning) as caught:
        records = database.load(path)
    assert records == [good, good]
    messages = [str(w.message) for w in caught]
    assert any(f"{path}:2:" in m for m in messages) and any(f"{path}:3:" in m for m in messages)


def test_an_append_after_a_fragment_without_newline_starts_a_fresh_line(tmp_path):
    """A writer killed mid-line leaves a fragment; the next record must not be glued to it."""
    path = tmp_path / "db.jsonl"
    first, second = _record(median=1.0), _record(median=2.0, knobs={"rows_per_chunk": 128})
    path.write_bytes((json.dumps(first) + "\n" + '{"op": "rms_norm_grad", "knobs": {"rows_').encode())
    database.append(path, second)
    with pytest.warns(UserWarning, match=f"{path}:2: skipping an unreadable"):
        records = database.load(path)
    assert records == [first, second]
    database.append(path, first)        # after a complete line: no empty line is added
    assert path.read_bytes().endswith(b"}\n" + (json.dumps(first, sort_keys=True) + "\n").encode())


def test_failed_and_wrong_records_are_never_the_best():
    fast_wrong = _record(median=0.001, status=database.WRONG, knobs={"rows_per_chunk": 8})
    fast_failed = _record(median=0.002, status=database.FAILED, knobs={"rows_per_chunk": 16})
    slow_ok = _record(median=5.0, knobs={"rows_per_chunk": 128})
    metaschedule = _record(median=0.5, engine=database.METASCHEDULE, knobs={})
    best = database.best_records([fast_wrong, fast_failed, slow_ok, metaschedule])
    assert list(best.values()) == [slow_ok]


@pytest.fixture
def tuned_db(tmp_path, monkeypatch):
    path = tmp_path / "user.jsonl"
    monkeypatch.setenv("OPGEN_TUNE_DB", str(path))
    lookup.reload()
    yield path
    lookup.reload()


def _shapes(rows: int, cols: int) -> dict:
    from opgen.ops.rms_norm_grad import Problem

    return OP.api.kernel_shapes(Problem((rows, cols), 1))


def test_kernel_cache_uses_the_tuned_record_of_the_matching_bucket_only(tuned_db):
    database.append(tuned_db, _record((64, 1000), {"rows_per_chunk": 256}, median=1.0))
    database.append(tuned_db, _record((64, 1000), {"rows_per_chunk": 8}, median=2.0))
    lookup.reload()
    assert kernels.tuned_knobs(OP, COMBO, TARGET, _shapes(64, 1000)) == {"rows_per_chunk": 256}
    assert kernels.tuned_knobs(OP, COMBO, TARGET, _shapes(40, 600)) == {"rows_per_chunk": 256}  # same bucket
    assert kernels.tuned_knobs(OP, COMBO, TARGET, _shapes(64, 1025)) is None                  # 64x2048
    assert kernels.tuned_knobs(OP, OP.combo("f16-f32"), TARGET, _shapes(64, 1000)) is None


def test_a_record_for_other_hardware_is_not_used(tuned_db):
    database.append(tuned_db, {**_record(knobs={"rows_per_chunk": 256}), "hardware": "another cpu"})
    lookup.reload()
    assert kernels.tuned_knobs(OP, COMBO, TARGET, _shapes(64, 1000)) is None


def test_stale_knobs_are_ignored_with_a_warning(tuned_db):
    database.append(tuned_db, _record(knobs={"rows_per_chunk": 3}))   # outside today's domain
    lookup.reload()
    with pytest.warns(UserWarning, match="ignoring the tuned record"):
        assert kernels.tuned_knobs(OP, COMBO, TARGET, _shapes(64, 1000)) is None


def test_shipped_defaults_are_installed_and_readable():
    paths = database.shipped_paths()
    assert paths and all(p.parent.name == "tuned" for p in paths)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        records = [r for p in paths for r in database.load(p)]
    assert records and all(r["status"] in (database.OK, database.WRONG, database.FAILED) for r in records)
    best = database.best_records(records)
    assert best and all(database.is_candidate(r) for r in best.values())


def test_the_hardware_description_separates_products_and_cpus():
    ascend = get_target("ascend-emu")
    a2, a950 = ascend.for_product("AtlasA2"), ascend.for_product("Ascend950")
    assert database.hardware_of(a2) != database.hardware_of(a950)
    assert "196608" in database.hardware_of(a2)                 # its UB size is part of the key
    assert '\\"mcpu\\"' in database.hardware_of(TARGET)            # the host CPU is part of the key
