"""``opgen tune`` and ``opgen tune --show`` through the real command line entry point."""
from __future__ import annotations

import socket
import sys
import time

import pytest

from opgen.cli import main
from opgen.tune import cli as tune_cli
from opgen.tune import database, lookup, measure


@pytest.mark.timeout(180)
def test_opgen_tune_prints_progress_and_the_table_then_show_lists_it(tmp_path, capsys):
    db = tmp_path / "db.jsonl"
    argv = ["tune", "rms_norm_grad", "--target", "llvm", "--shape", "64x1000", "--dtype", "f32-f32",
            "--trials", "3", "--strategy", "random", "--seed", "5", "--jobs", "0", "--repeat", "3", "--confirm", "1", "--db", str(db)]
    try:
        assert main(argv) == 0
    finally:
        lookup.reload()
    out, err = capsys.readouterr()
    assert err.count("/3 best ") == 3 and "ETA" in err
    rows = {name: line for line in out.splitlines() for name in ("best", "default", "metaschedule")
            if line.startswith(name.ljust(14))}
    assert rows.keys() == {"best", "default", "metaschedule"} and "best vs default:" in out
    assert "'rows_per_chunk': " in rows["best"] and "not run" in rows["metaschedule"]
    records = database.load(db)
    assert len(records) in (3, 5) and all(r["seed"] == 5 and r["strategy"] == "random" for r in records)
    assert len([r for r in records if r.get("confirm")]) == len(records) - 3
    assert main(["tune", "--show", "--db", str(db)]) == 0
    shown = capsys.readouterr().out
    assert "rms_norm_grad" in shown and " 64x1024 " in shown and f"{len(records):>6} " in shown


SMALL = ["tune", "rms_norm_grad", "--shape", "64x1000", "--trials", "3", "--strategy", "exhaustive", "--jobs", "0",
         "--repeat", "3", "--confirm", "0"]


class InterruptAfterOne:
    """A progress callback that is Ctrl-C after the first trial, as a user's would be."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, trial, result, budget):
        raise KeyboardInterrupt


@pytest.mark.timeout(120)
def test_opgen_tune_exits_130_after_an_interrupt_and_keeps_the_finished_trial(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tune_cli, "Progress", InterruptAfterOne)
    db = tmp_path / "db.jsonl"
    try:
        assert main([*SMALL, "--db", str(db)]) == 130
    finally:
        lookup.reload()
    assert "interrupted: 1 finished trials" in capsys.readouterr().out
    assert [r["status"] for r in database.load(db)] == [database.OK]


def test_opgen_tune_exits_130_when_interrupted_before_the_search(tmp_path, monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(measure, "Workload", interrupted)   # Ctrl-C while the inputs are made
    try:
        status = main([*SMALL, "--db", str(tmp_path / "db.jsonl")])
    except KeyboardInterrupt:   # escaping, it would stop pytest itself
        pytest.fail("KeyboardInterrupt escaped opgen tune's main")
    assert status == 130
    assert "interrupted" in capsys.readouterr().err


@pytest.mark.timeout(120)
def test_opgen_tune_exits_1_when_every_build_fails(tmp_path, monkeypatch, capsys):
    def failing_build(op_name, combo_tag, target, knobs, *args, **kwargs):
        return measure.Built(knobs, None, error="build: injected failure")

    monkeypatch.setattr(measure, "build_candidate", failing_build)
    db = tmp_path / "db.jsonl"
    try:
        assert main([*SMALL, "--db", str(db)]) == 1
    finally:
        lookup.reload()
    records = database.load(db)
    assert len(records) == 3 and all(r["status"] == database.FAILED and "injected" in r["error"] for r in records)
    assert "none of the 3 trials was measured ok" in capsys.readouterr().err


def test_opgen_tune_exits_1_with_one_line_when_the_tracker_cannot_be_reached(tmp_path, monkeypatch, capsys):
    err = _tune_through_an_unreachable_tracker(tmp_path, monkeypatch, capsys, "127.0.0.1")
    assert err.startswith("opgen tune: cannot reach the RPC tracker at 127.0.0.1:9190: ConnectionRefusedError")
    assert err.count("\n") == 1, err     # and no warning: loopback


def test_opgen_tune_without_an_op_explains_itself(capsys):
    assert main(["tune", "--shape", "8x8"]) == 2
    assert "give an op" in capsys.readouterr().err


@pytest.mark.parametrize("extra, message", [
    (["--rpc", "tracker-without-port"], "--rpc wants HOST:PORT:KEY"),
    (["--rpc", "127.0.0.1:9190:"], "--rpc wants HOST:PORT:KEY"),
    (["--rpc", "127.0.0.1:http:key"], "the port must be a number from 1 to 65535"),
    (["--rpc", "127.0.0.1:9190:k", "--rpc-timeout", "-1"], "--rpc-timeout wants a number of seconds >= 1, got '-1'"),
    (["--rpc", "127.0.0.1:9190:k", "--rpc-timeout", "0.5"], "--rpc-timeout wants a number of seconds >= 1"),
    (["--rpc", "127.0.0.1:9190:k", "--rpc-timeout", "soon"], "--rpc-timeout wants a number of seconds >= 1"),
    (["--rpc", "127.0.0.1:9190:k", "--rpc-timeout", "nan"], "--rpc-timeout wants a number of seconds >= 1"),
    (["--rpc-timeout", "5"], "--rpc-timeout applies to measurements through --rpc only"),
])
def test_a_malformed_rpc_argument_is_one_line_and_exit_2(extra, message, capsys):
    assert main(["tune", "rms_norm_grad", "--shape", "8x8", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("opgen tune: ") and message in err and err.count("\n") == 1, err


RMS_8x8 = ["rms_norm_grad", "--shape", "8x8"]


@pytest.mark.parametrize("argv, message", [
    (["no_such_op", "--shape", "8x8"], "unknown op 'no_such_op'"),
    ([*RMS_8x8, "--dtype", "f64-f64"], "rms_norm_grad has no dtype combo 'f64-f64'"),
    ([*RMS_8x8, "--target", "tpu"], "unknown target 'tpu'"),
    ([*RMS_8x8, "--target", "ascend-emu", "--product", "Atlas9000"], "product 'Atlas9000'"),
    (["rms_norm_grad", "--shape", "64xrows"], "--shape '64xrows': "),
    ([*RMS_8x8, "--trials", "0"], "--trials wants a number >= 1, got 0"),
    ([*RMS_8x8, "--jobs", "-1"], "--jobs wants a number >= 0, got -1"),
])
def test_an_unknown_name_or_a_malformed_number_is_one_line_and_exit_2(argv, message, capsys):
    assert main(["tune", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("opgen tune: ") and message in err and err.count("\n") == 1, err


def test_metaschedule_without_the_tune_extra_is_one_line_and_exit_2(monkeypatch, capsys):
    for module in tune_cli.METASCHEDULE_NEEDS:   # what an install without the extra finds
        monkeypatch.setitem(sys.modules, module, None)
    assert main(["tune", *RMS_8x8, "--engine", "metaschedule", "--trials", "1"]) == 2
    err = capsys.readouterr().err
    assert err == "opgen tune: --engine metaschedule needs cloudpickle, psutil, xgboost: pip install 'opgen[tune]'\n"


def test_rpc_addresses_parse_with_ipv6_hosts():
    from opgen.tune.rpc import parse_address

    assert parse_address("10.0.0.7:9190:gpu") == ("10.0.0.7", 9190, "gpu")
    assert parse_address("[::1]:9190:k") == parse_address("::1:9190:k") == ("::1", 9190, "k")


# ---- --rpc off the trusted network: a warning ----------------------------------------------

FAKE_DNS = {"localhost": ["127.0.0.1", "::1"], "farm.lan": ["10.0.0.8", "fd00::8"],
            "mixed.example": ["10.0.0.8", "8.8.4.4"]}


@pytest.fixture
def fake_dns(monkeypatch):
    """getaddrinfo from FAKE_DNS, without the network; any other name does not resolve."""
    def getaddrinfo(host, port, *args, **kwargs):
        if host not in FAKE_DNS:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, 0))
                for a in FAKE_DNS[host]]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "localhost",                 # loopback
                                  "10.1.2.3", "172.16.5.4", "192.168.0.5", "fd12:3456::1", "::ffff:10.0.0.1",
                                  "farm.lan"])                                                    # private
def test_loopback_and_private_trackers_do_not_warn(host, fake_dns):
    assert tune_cli.rpc_exposure(host) is None


@pytest.mark.parametrize("host, shown", [("8.8.8.8", "8.8.8.8 is not"), ("2001:4860:4860::8888", "8888 is not"),
                                         ("::ffff:8.8.8.8", "8.8.8.8 is not"),   # Python calls ::ffff:0:0/96 private
                                         ("mixed.example", "resolves to 8.8.4.4, not"),
                                         ("nowhere.invalid", "does not resolve")])
def test_public_and_unresolvable_trackers_warn(host, shown, fake_dns):
    assert shown in tune_cli.rpc_exposure(host)


def _tune_through_an_unreachable_tracker(tmp_path, monkeypatch, capsys, host: str) -> str:
    """stderr of opgen tune --rpc HOST:9190:k, the tracker refusing (no network used)."""
    from opgen.tune import rpc

    def refused(host, port, key):
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(rpc, "free_servers", refused)
    assert main([*SMALL, "--db", str(tmp_path / "db.jsonl"), "--rpc", f"{host}:9190:k"]) == 1
    return capsys.readouterr().err


def test_opgen_tune_warns_in_one_line_when_rpc_points_off_the_trusted_network(tmp_path, monkeypatch, capsys,
                                                                              fake_dns):
    err = _tune_through_an_unreachable_tracker(tmp_path, monkeypatch, capsys, "mixed.example")
    warning, unreachable = err.splitlines()
    assert warning.startswith("opgen tune: warning: --rpc mixed.example resolves to 8.8.4.4")
    assert "without authentication" in warning and "SSH tunnel" in warning
    assert unreachable.startswith("opgen tune: cannot reach the RPC tracker at mixed.example:9190")
    err = _tune_through_an_unreachable_tracker(tmp_path, monkeypatch, capsys, "farm.lan")
    assert "warning" not in err and err.count("\n") == 1


def test_the_rpc_help_carries_the_warning(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["tune", "--help"])
    assert exit_.value.code == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--rpc HOST:PORT:KEY measure on the servers of a TVM RPC tracker. WARNING:" in help_text
    assert "runs any code it is sent, without authentication" in help_text and "127.0.0.1" in help_text


# ---- the table reports what a call would use ------------------------------------------------

def _stale_record(knobs: dict, median_ms: float) -> dict:
    """An ok record of SMALL's key whose knobs today's rule may not accept."""
    from opgen.targets import get_target

    return {"op": "rms_norm_grad", "combo": "f32-f32", "target": "llvm",
            "hardware": database.hardware_of(get_target("llvm")), "bucket": "64x1024",
            "engine": database.TEMPLATE, "knobs": knobs, "status": database.OK,
            "median_ms": median_ms, "times_ms": [median_ms]}


@pytest.mark.timeout(120)
def test_opgen_tune_never_reports_a_record_the_resolver_refuses_as_the_best(tmp_path, capsys):
    """A faster record with an unknown knob was printed as the best (8318.83x the default)
    although the call path and --show refuse it: the table now shows the resolver's choice
    and names each refused record with its reason."""
    db = tmp_path / "db.jsonl"
    database.append(db, _stale_record({"no_such_knob": 1}, 0.001))
    database.append(db, _stale_record({"rows_per_chunk": 3}, 0.002))    # outside the domain
    try:
        assert main([*SMALL, "--trials", "1", "--db", str(db)]) == 0
    finally:
        lookup.reload()
    out = capsys.readouterr().out
    best = next(line for line in out.splitlines() if line.startswith("best ".ljust(14)))
    assert "no_such_knob" not in best and "'rows_per_chunk': 3," not in best, out
    assert "best vs default: 1.00x" in out, out
    assert "2 faster record(s) refused" in out, out
    assert f"  {db}:1: " in out and "no_such_knob" in out.split(f"{db}:1: ")[1].splitlines()[0], out
    assert f"  {db}:2: " in out, out


# ---- paths: no folder is created that was not asked for --------------------------------------

@pytest.mark.parametrize("show", [False, True])
def test_a_db_in_a_missing_folder_is_one_line_and_exit_2_and_creates_nothing(show, tmp_path, capsys):
    """``opgen tune --db /nonexistent/dir/db.jsonl`` created the folder."""
    missing = tmp_path / "no" / "such"
    argv = ["tune", "--show"] if show else [*SMALL]
    assert main([*argv, "--db", str(missing / "db.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err == f"opgen tune: --db {missing / 'db.jsonl'}: the folder {missing} does not exist (create it first)\n"
    assert not (tmp_path / "no").exists()


def test_opgen_tune_db_in_a_missing_folder_is_refused_too(tmp_path, monkeypatch, capsys):
    missing = tmp_path / "no"
    monkeypatch.setenv("OPGEN_TUNE_DB", str(missing / "db.jsonl"))
    assert main([*SMALL]) == 2
    assert "$OPGEN_TUNE_DB=" in capsys.readouterr().err and not missing.exists()


def test_opgen_tune_without_a_shape_names_the_op(capsys):
    assert main(["tune", "rms_norm_grad"]) == 2
    assert capsys.readouterr().err == "opgen tune: give --shape, the problem of rms_norm_grad to tune\n"


# ---- an unreachable tracker: one line, within the connect timeout ------------------------

@pytest.fixture
def silent_tracker():
    """A port on 127.0.0.1 that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]


def _refused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]     # closed again: nothing listens there


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["refused", "silent"])
def test_an_unreachable_tracker_fails_within_the_connect_timeout_in_one_line(kind, tmp_path, capsys, request):
    """TVM's client retried a refused tracker for 60 s and waited for a silent one forever."""
    from opgen.tune.rpc import CONNECT_TIMEOUT_S

    port = request.getfixturevalue("silent_tracker") if kind == "silent" else _refused_port()
    start = time.monotonic()
    assert main([*SMALL, "--db", str(tmp_path / "db.jsonl"), "--rpc", f"127.0.0.1:{port}:k"]) == 1
    assert time.monotonic() - start < CONNECT_TIMEOUT_S + 3
    err = capsys.readouterr().err
    assert err.startswith(f"opgen tune: cannot reach the RPC tracker at 127.0.0.1:{port}: ") and err.count("\n") == 1
    assert ("ConnectionRefusedError" if kind == "refused" else "no answer within") in err, err
