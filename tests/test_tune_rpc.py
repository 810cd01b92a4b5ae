"""Tuning through TVM's RPC tracker: a tracker and two servers on 127.0.0.1, started here.

Every process is started by the fixture in its own session (process group), bounded in
time, and stopped by its PID; ports are free ones chosen at start. One test kills a server
in the middle of a measurement: that trial is recorded as failed with the dead server's
address and the run finishes on the other server.
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

from opgen.ops import get_op  # noqa: E402
from opgen.targets import get_target  # noqa: E402
from opgen.tune import Options, Settings, database, tune  # noqa: E402
from opgen.tune.rpc import RpcRunner, free_servers  # noqa: E402
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
            os.killpg(proc.pid, signal.SIGTERM)   # the group: the server and its session children
            proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


class Farm:
    def __init__(self):
        self.tracker_port = _free_port()
        self.tracker = _start(["tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(self.tracker_port),
                               "--port-end", str(self.tracker_port + 1), "--silent"])
        self.servers = {}
        for _ in range(2):
            port = _free_port()
            self.servers[port] = _start(["tvm.exec.rpc_server", "--host", "127.0.0.1", "--port", str(port),
                                         "--port-end", str(port + 1), "--tracker",
                                         f"127.0.0.1:{self.tracker_port}", "--key", KEY, "--silent"])

    def wait_ready(self, count: int, limit_s: float = 60.0) -> None:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            try:
                if free_servers("127.0.0.1", self.tracker_port, KEY) >= count:
                    return
            except Exception:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"{count} RPC servers did not register within {limit_s} s")

    def stop(self) -> None:
        for proc in list(self.servers.values()) + [self.tracker]:
            _stop(proc)


@pytest.fixture
def farm():
    farm = Farm()
    try:
        farm.wait_ready(2)
        yield farm
    finally:
        farm.stop()


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
