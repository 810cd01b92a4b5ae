"""Tuning through TVM's RPC tracker: a tracker and two servers on 127.0.0.1, started here.

Every process is started by the fixture in its own session (process group), bounded in
time, and stopped by its PID; ports are free ones chosen at start. The farm is shared by
this module's tests (each process imports TVM: 20-30 s for three on a 2-core machine); a
server a test kills or stops is replaced before the next test, which starts only once the
tracker lists exactly the live servers. The servers are opgen's launcher
(``python -m opgen.tune.rpc_server``): one process each, whose sessions die with it. One test kills a server in the middle of a
measurement: that trial is recorded as failed with the dead server's address and the run
finishes on the other server; another stops one (SIGSTOP) and tunes through ``opgen tune
--rpc-timeout``: the stalled candidate fails in bounded time, naming the stopped server.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip("tornado")  # the tracker needs it (the `tune` extra)

from tvm import rpc  # noqa: E402

from opgen.cli import main  # noqa: E402
from opgen.ops import get_op  # noqa: E402
from opgen.targets import get_target  # noqa: E402
from opgen.tune import Options, Settings, database, lookup, tune  # noqa: E402
from opgen.tune.rpc import RpcRunner  # noqa: E402
from opgen.tune.space import parse_problem, space_for  # noqa: E402

KEY = "opgen-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGCONT)   # a stopped server would hold SIGTERM pending
            os.killpg(proc.pid, signal.SIGTERM)   # the group: the server and its session children
            proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


class Farm:
    SERVERS = 2

    def __init__(self):
        self.tracker_port = _free_port()
        self.tracker = _start(["tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(self.tracker_port),
                               "--port-end", str(self.tracker_port + 1), "--silent"])
        self.servers = {}
        self.paused: set = set()
        for _ in range(self.SERVERS):
            self._add_server()

    def _add_server(self) -> None:
        port = _free_port()
        self.servers[port] = _start(["opgen.tune.rpc_server", "--host", "127.0.0.1", "--port", str(port),
                                     "--port-end", str(port + 1), "--tracker",
                                     f"127.0.0.1:{self.tracker_port}", "--key", KEY, "--silent"])

    def _listed(self) -> tuple[set, int]:
        """(ports of the servers the tracker lists under KEY, how many of them are free)."""
        summary = rpc.connect_tracker("127.0.0.1", self.tracker_port).summary()
        ports = {info["addr"][1] for info in summary.get("server_info", []) if info.get("key") == f"server:{KEY}"}
        return ports, int(summary.get("queue_info", {}).get(KEY, {}).get("free", 0))

    def wait_ready(self, limit_s: float = 90.0) -> None:
        """Until the tracker lists exactly the live servers, all free (a server stopped
        by the previous test must not be counted, nor handed out)."""
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            try:
                ports, free = self._listed()
                if ports == set(self.servers) and free >= len(self.servers):
                    return
            except Exception:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"{len(self.servers)} RPC servers did not register within {limit_s} s")

    def pause(self, port: int) -> None:
        """SIGSTOP a server's group: it stays listed and accepts TCP, but never answers."""
        self.paused.add(port)
        os.killpg(self.servers[port].pid, signal.SIGSTOP)

    def discard_damaged(self) -> None:
        """Forget every server that died; resume and stop (by PID) every paused one."""
        for port, proc in list(self.servers.items()):
            if proc.poll() is not None or port in self.paused:
                _stop(proc)
                del self.servers[port]
                self.paused.discard(port)

    def repair(self) -> None:
        """Back to ``SERVERS`` live servers: the damaged ones replaced by new ones."""
        self.discard_damaged()
        while len(self.servers) < self.SERVERS:
            self._add_server()

    def stop(self) -> None:
        for proc in list(self.servers.values()) + [self.tracker]:
            _stop(proc)


@pytest.fixture(scope="module")
def shared_farm():
    farm = Farm()
    try:
        yield farm
    finally:
        farm.stop()


@pytest.fixture
def farm(shared_farm):
    """The module's farm with two live, free servers."""
    shared_farm.repair()
    shared_farm.wait_ready()
    yield shared_farm
    shared_farm.discard_damaged()   # a paused server is resumed and stopped now, not at module end


class SlowDefaultRunner(RpcRunner):
    """Delays the default point's measurement: in a batch shared with other points, the
    servers would report it last."""

    default: dict = {}

    def run(self, workload, built, **kwargs):
        if built.knobs == self.default:
            time.sleep(1.0)
        return super().run(workload, built, **kwargs)


def _run(farm, tmp_path, on_session=None, trials=5, runner_class=RpcRunner):
    op = get_op("rms_norm_grad")
    target = get_target("llvm")
    problem = parse_problem(op, "64x1000")
    runner = runner_class("127.0.0.1", farm.tracker_port, KEY, target, Settings(repeat=3, timeout_s=60),
                          on_session=on_session)
    runner.default = space_for(op, op.combo("f32-f32"), target, problem).default
    db = tmp_path / "db.jsonl"
    result = tune(op, op.combo("f32-f32"), target, problem,
                  Options(trials=trials, strategy="exhaustive", jobs=0, batch=4, confirm=0), runner=runner, db_path=db)
    return runner, result, database.load(db)


@pytest.mark.timeout(240)
def test_tuning_through_tracker_uses_both_servers_and_the_default_is_trial_0(farm, tmp_path):
    runner, result, records = _run(farm, tmp_path, runner_class=SlowDefaultRunner)
    assert runner.parallel == 2
    assert len(records) == len(result.trials) == 5
    assert records[0]["knobs"] == runner.default and result.default is result.trials[0]
    assert all(r["status"] == database.OK for r in records), [r["error"] for r in records]
    ports = {r["device"].rsplit(":", 1)[1] for r in records}
    assert ports <= {str(p) for p in farm.servers} and len(ports) == 2
    assert result.best.record["median_ms"] == min(r["median_ms"] for r in records)


@pytest.mark.timeout(240)
def test_a_server_killed_mid_run_costs_one_trial(farm, tmp_path):
    victim = next(iter(farm.servers))
    killed = []

    def kill_victim(address: str) -> None:
        if address.endswith(f":{victim}") and not killed:
            killed.append(address)
            os.killpg(farm.servers[victim].pid, signal.SIGKILL)
            farm.servers[victim].wait(timeout=10)

    runner, result, records = _run(farm, tmp_path, on_session=kill_victim, trials=6)
    assert killed, "the victim server never received a candidate"
    failed = [r for r in records if r["status"] == database.FAILED]
    assert len(failed) == 1 and failed[0]["device"].endswith(f":{victim}"), json.dumps(failed)
    assert len(records) == 6
    survivors = [r for r in records if r["status"] == database.OK]
    assert len(survivors) == 5 and all(not r["device"].endswith(f":{victim}") for r in survivors)


def _port_is_free(port: int) -> bool:
    """Whether nothing listens on 127.0.0.1:``port`` (a socket left in TIME_WAIT does not count)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


@pytest.mark.timeout(120)
def test_a_server_killed_with_sigkill_frees_its_port_and_leaves_the_tracker(farm):
    """``kill -9`` of TVM's rpc_server left its worker process holding the port, registered,
    running every later upload. opgen's launcher takes its session processes along: killed
    (the process alone, not its group) in the middle of a session, its port is free and the
    tracker stops listing it within seconds."""
    runner = RpcRunner("127.0.0.1", farm.tracker_port, KEY, get_target("llvm"), Settings(timeout_s=10))
    session, address = runner._request(lambda address: None)
    port = int(address.rsplit(":", 1)[1])
    os.kill(farm.servers[port].pid, signal.SIGKILL)
    farm.servers[port].wait(timeout=10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (_port_is_free(port) and port not in farm._listed()[0]):
        time.sleep(0.2)
    assert _port_is_free(port), f"a process still listens on the killed server's port {port}"
    assert port not in farm._listed()[0], "the tracker still lists the killed server"
    with pytest.raises(Exception):
        session.upload(__file__, "probe.py")     # the session went with the server
    del session


@pytest.mark.timeout(240)
def test_a_stopped_server_fails_one_candidate_within_the_rpc_timeout_naming_its_address(farm, tmp_path, capsys):
    """A SIGSTOPped server stays listed and accepts the TCP connection, then never answers:
    with the old default (120 s) the batch waited 125 s for it."""
    victim, survivor = list(farm.servers)
    farm.pause(victim)
    db = tmp_path / "db.jsonl"
    start = time.monotonic()
    try:
        status = main(["tune", "rms_norm_grad", "--shape", "64x1000", "--trials", "3", "--strategy", "exhaustive",
                       "--jobs", "0", "--repeat", "3", "--confirm", "0", "--db", str(db),
                       "--rpc", f"127.0.0.1:{farm.tracker_port}:{KEY}", "--rpc-timeout", "5"])
    finally:
        lookup.reload()
    elapsed = time.monotonic() - start
    records = database.load(db)
    failed = [r for r in records if r["status"] == database.FAILED]
    assert len(records) == 3 and len(failed) == 1, json.dumps(records)
    assert failed[0]["device"] == f"rpc:{KEY}@127.0.0.1:{victim}", failed[0]
    assert f"127.0.0.1:{victim}" in failed[0]["error"] and "no result within 5 s" in failed[0]["error"]
    ok = [r for r in records if r["status"] == database.OK]
    assert len(ok) == 2 and all(r["device"] == f"rpc:{KEY}@127.0.0.1:{survivor}" for r in ok), json.dumps(ok)
    assert status == 0 and elapsed < 5 + 15, (status, elapsed)     # one timeout, then the run goes on


def test_a_dead_or_stopped_server_costs_at_most_10_s_by_default():
    """The default was 120 s: a stopped server stalled its candidate's batch for 125 s."""
    assert Settings().timeout_s <= 10
