"""The tuning database: round trip, concurrent appends, corrupted lines, and the kernel
selection's use of the best valid record of a shape bucket."""
from __future__ import annotations

import json
import subprocess
import sys
import warnings

import numpy as np
import pytest

from opgen import selection
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


def _plain(records) -> list:
    """Records as written: without the in-memory ``_source``."""
    return [{k: v for k, v in r.items() if k != "_source"} for r in records]


def test_round_trip(tmp_path):
    path = tmp_path / "db.jsonl"
    records = [_record(median=m, knobs={"rows_per_chunk": k}) for m, k in ((2.0, 8), (1.5, 256), (3.0, 64))]
    for r in records:
        database.append(path, r)
    loaded = database.load(path)
    assert _plain(loaded) == records
    assert [r["_source"] for r in loaded] == [f"{path}:{i}" for i in (1, 2, 3)]
    best = database.best_records(loaded)
    assert _plain(best.values()) == [records[1]]
    assert _plain(database.ranked_records(loaded)[database.record_key(records[0])]) == [records[1], records[0],
                                                                                        records[2]]


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
                           "status": "failed", "engine": "template", "knobs": {},
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
    assert _plain(records) == [good, good]
    messages = [str(w.message) for w in caught]
    assert any(f"{path}:2:" in m for m in messages) and any(f"{path}:3:" in m for m in messages)


def test_an_append_after_a_fragment_without_newline_starts_a_fresh_line(tmp_path):
    """A writer killed mid-line leaves a fragment; the next record must not be glued to it."""
    path = tmp_path / "db.jsonl"
    first, second = _record(median=1.0), _record(median=2.0, knobs={"rows_per_chunk": 128})
    path.write_bytes((json.dumps(first) + "\n" + '{"op": "rms_norm_grad", "knobs": {"rows_').encode())
    database.append(path, second)
    with pytest.warns(UserWarning, match=f"{path}:2: skipping an invalid tuning record: not JSON"):
        records = database.load(path)
    assert _plain(records) == [first, second]
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


def _tuned(combo=COMBO, shapes=None) -> dict | None:
    """The knobs a call takes from the tuning database (None: it takes none)."""
    resolution, _ = selection.resolve(OP, combo, TARGET, shapes or _shapes(64, 1000))
    return None if resolution.record is None else {k: v for k, v in resolution.knobs.items()
                                                   if resolution.sources[k].startswith("tuned")}


def test_kernel_selection_uses_the_tuned_record_of_the_matching_bucket_only(tuned_db):
    database.append(tuned_db, _record((64, 1000), {"rows_per_chunk": 256}, median=1.0))
    database.append(tuned_db, _record((64, 1000), {"rows_per_chunk": 8}, median=2.0))
    lookup.reload()
    assert _tuned() == {"rows_per_chunk": 256}
    assert _tuned(shapes=_shapes(40, 600)) == {"rows_per_chunk": 256}  # same bucket
    assert _tuned(shapes=_shapes(64, 1025)) is None                    # 64x2048
    assert _tuned(OP.combo("f16-f32")) is None


def test_a_record_for_other_hardware_is_not_used(tuned_db):
    database.append(tuned_db, {**_record(knobs={"rows_per_chunk": 256}), "hardware": "another cpu"})
    lookup.reload()
    assert _tuned() is None


def test_stale_knobs_are_ignored_with_a_warning_naming_file_and_line(tuned_db):
    database.append(tuned_db, _record(knobs={"rows_per_chunk": 3}))   # outside today's domain
    lookup.reload()
    with pytest.warns(UserWarning, match=f"{tuned_db}:1: ignoring the tuned record"):
        assert _tuned() is None


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
    assert "196608" in database.hardware_of(a2) and "AtlasA2" in database.hardware_of(a2)
    assert '\\"mcpu\\"' in database.hardware_of(TARGET)            # the host CPU is part of the key


# ---- a damaged database never breaks a call ------------------------------------------------

GN = get_op("group_norm_backward")


def _gn_record(knobs=None, median=1.0) -> dict:
    from opgen.ops.group_norm_backward import Problem

    shapes = GN.api.kernel_shapes(Problem(2, 8, 20, 2))
    return {**_record(knobs=knobs or {"parallel": False}, median=median), "op": GN.name,
            "bucket": database.bucket_for(GN, shapes)}


def _damage(path, how: str) -> None:
    """A database with one good record per op, then the damage (ways 1-3 of issue 16)."""
    database.append(path, _record(knobs={"rows_per_chunk": 256}, median=2.0))
    database.append(path, _gn_record(median=2.0))
    if how == "list-valued knob":       # well-formed JSON, a fastest record with a list value
        database.append(path, _record(knobs={"rows_per_chunk": [128]}, median=0.5))
        database.append(path, _gn_record(knobs={"parallel": [False]}, median=0.5))
    elif how == "invalid fastest record":   # unknown knob, out-of-domain value: both fastest
        database.append(path, _record(knobs={"rows_per_chunkz": 128}, median=0.5))
        database.append(path, _gn_record(knobs={"groups_per_chunk": 7}, median=0.5))
    elif how == "fragment without newline":
        with open(path, "ab") as stream:
            stream.write(b'{"op": "rms_norm_grad", "knobs": {"rows_per')      # a killed writer
        database.append(path, _record(knobs={"rows_per_chunk": 128}, median=1.0))


@pytest.mark.parametrize("how", ["list-valued knob", "invalid fastest record", "fragment without newline"])
def test_a_damaged_database_leaves_every_aclnn_call_working_and_correct(how, tuned_db, rng):
    import opgen
    from opgen.ops.group_norm_backward import Problem as GNProblem
    from opgen.ops.rms_norm_grad import Problem as RMSProblem
    from opgen.verify import compare_outputs

    _damage(tuned_db, how)
    lookup.reload()
    with pytest.warns(UserWarning) as caught:
        for op, problem in ((OP, RMSProblem((64, 1000), 1)), (GN, GNProblem(2, 8, 20, 2))):
            inputs = op.random_inputs(problem, op.combo("f32-f32"), rng)
            outputs = getattr(opgen, op.name)(*(inputs[n] for n in op.inputs), **(
                {"group": problem.group} if op is GN else {}))
            reference = op.reference(problem, inputs)
            got = {n: np.reshape(v, np.shape(reference[n])) for n, v in zip(op.outputs, outputs)}
            assert all(c.passed for c in compare_outputs(op, op.combo("f32-f32"), got, reference)), how
    assert any(f"{tuned_db}:" in str(w.message) for w in caught), [str(w.message) for w in caught]
    resolution, _ = selection.resolve(OP, COMBO, TARGET, _shapes(64, 1000))
    expected = 128 if how == "fragment without newline" else 256    # the best *valid* record
    assert resolution.knobs["rows_per_chunk"] == expected and resolution.record is not None


@pytest.mark.parametrize("how", ["list-valued knob", "invalid fastest record", "fragment without newline"])
def test_show_lists_a_damaged_database_with_the_bad_lines_marked(how, tuned_db, capsys):
    from opgen.tune import cli as tune_cli

    _damage(tuned_db, how)
    assert tune_cli.show(str(tuned_db)) == 0
    out = capsys.readouterr().out
    marked = [line for line in out.splitlines() if line.strip().startswith("SKIPPED")]
    bad_lines = {"list-valued knob": (3, 4), "invalid fastest record": (3, 4), "fragment without newline": (3,)}[how]
    assert {int(line.split(":")[1]) for line in marked} == set(bad_lines), out
    rms = next(line for line in out.splitlines() if line.startswith(OP.name))
    assert "'rows_per_chunk': 128" in rms if how == "fragment without newline" else "'rows_per_chunk': 256" in rms


# ---- the hardware key names the device ----------------------------------------------------

class _FakeDevice:
    def __init__(self, platform, name, driver):
        self.platform = type("P", (), {"name": platform})()
        self.name, self.driver_version = name, driver


def test_opencl_records_name_the_platform_device_and_driver(monkeypatch):
    from opgen.targets import opencl

    target = get_target("opencl")
    keys = []
    for device in (_FakeDevice("Portable Computing Language", "cpu-znver3", "3.0"),
                   _FakeDevice("Intel(R) OpenCL", "AMD EPYC", "2024.18.6")):
        runtime = opencl.Runtime(None, None, None, device, device.name)
        monkeypatch.setattr(opencl, "_runtime", lambda simulator=False, runtime=runtime: runtime)
        database.hardware_of.cache_clear()
        keys.append(database.hardware_of(target))
    database.hardware_of.cache_clear()
    assert keys[0] != keys[1]
    assert all(part in keys[1] for part in ("Intel(R) OpenCL", "AMD EPYC", "2024.18.6"))


def _legacy(target, **fields) -> str:
    """A hardware key as opgen wrote it before format 2: the TVM target plus class fields."""
    return json.dumps({"tvm": str(target.tvm_target()), **fields}, sort_keys=True)


def test_old_format_keys_are_migrated_where_they_can_be_and_reported_otherwise(tuned_db):
    database.append(tuned_db, {**_record(knobs={"rows_per_chunk": 256}),
                               "hardware": _legacy(TARGET, library_suffix="'.so'")})
    opencl = get_target("opencl")
    database.append(tuned_db, {**_record(knobs={"threads": 64}), "target": "opencl",
                               "hardware": _legacy(opencl, library_suffix="''", max_threads="1024")})
    lookup.reload()
    with pytest.warns(UserWarning, match="1 tuning record.*older format") as caught:
        records = database.load(tuned_db)
    assert len([w for w in caught if "older format" in str(w.message)]) == 1
    assert [r["target"] for r in records] == ["llvm"] and records[0]["_migrated"]
    assert records[0]["hardware"] == database.hardware_of(TARGET)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert _tuned() == {"rows_per_chunk": 256}


def test_model_estimates_are_labelled_as_models():
    from opgen.tune.costmodel import ModelRunner
    from opgen.tune.measure import Built, Workload
    from opgen.tune.space import parse_problem

    emu = get_target("ascend-emu").for_product("AtlasA2")
    if not emu.can_run():
        pytest.skip("the Ascend emulation cannot run here")
    from opgen import kernels

    problem = parse_problem(OP, "8x64")
    workload = Workload(OP, COMBO, problem)
    built = Built({}, None, kernel=kernels.get_kernel(OP, COMBO, emu))
    measured = ModelRunner(emu).run(workload, built)
    assert measured.status == database.OK and measured.timer == "model" and measured.model
