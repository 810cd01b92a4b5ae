"""Measuring through TVM's RPC tracker: any number of servers under one key.

TVM's tracker (``python -m tvm.exec.rpc_tracker``) hands each request the next free server
registered under the key (``python -m tvm.exec.rpc_server --tracker H:P --key K``), so
candidates go to free servers by themselves. This runner keeps one measuring thread per
server the tracker reports; each thread requests a session, uploads the candidate's
library, loads it and runs the same check-then-time measurement as the local runner
(opgen.tune.measure.measure_module) on the server's device.

Failures cost one trial, never the run, and every failed record names the server it
failed on (``rpc:<key>@host:port``; a build error, which never reached a server, says
``rpc:<key>``):
  * a server that dies mid-measurement breaks its session: that candidate is recorded as
    FAILED with the server's address, and the next request goes to a live server;
  * a candidate without a result ``settings.timeout_s`` (default 10 s) after its thread
    picked it up (``opgen tune --rpc-timeout``) is recorded as FAILED with the address the tracker
    handed its thread: the address is noted as soon as the tracker replies, because a
    stopped (SIGSTOP) or hung server stalls the client inside ``rpc.connect``'s handshake,
    which has no timeout. The thread is abandoned (daemon) and replaced, and the server
    ends the session itself (``session_timeout``);
  * a server the tracker still lists but that refuses connections is skipped when the
    session is requested (retried, bounded); no candidate is charged for it;
  * a tracker that refuses, or accepts and never answers, fails within
    ``CONNECT_TIMEOUT_S`` (TVM's own client retries for 60 s, or waits forever).

Servers started with ``python -m opgen.tune.rpc_server`` (opgen.tune.rpc_server) take
their sessions along when they are killed, even with SIGKILL; TVM's own leave a worker
process behind that keeps the port and the tracker's listing.
"""
from __future__ import annotations

import contextlib
import functools
import os
import queue
import socket
import struct
import threading
import time

from tvm import rpc
from tvm.rpc import base
from tvm.rpc import client as rpc_client

from opgen.tune import database
from opgen.tune.measure import Measurement, Settings, measure_module


def parse_address(text: str) -> tuple[str, int, str]:
    """``HOST:PORT:KEY`` -> (host, port, key); ValueError with a one-line message.

    The host may be an IPv6 address, bracketed or not (``[::1]:9190:K``, ``::1:9190:K``):
    the port and the key are the last two fields."""
    parts = text.rsplit(":", 2)
    if len(parts) != 3 or not all(parts):
        raise ValueError(f"--rpc wants HOST:PORT:KEY (the tracker's address and the servers' key), got {text!r}")
    host, port, key = parts
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--rpc {text!r}: the port must be a number from 1 to 65535, got {port!r}")
    return host.removeprefix("[").removesuffix("]"), int(port), key


CONNECT_TIMEOUT_S = 5.0


def connect_tracker(host: str, port: int, timeout_s: float = CONNECT_TIMEOUT_S):
    """A session with the tracker (TVM's TrackerSession), connected and greeted within
    ``timeout_s``, whose later replies are bounded by it too; OSError otherwise. TVM's own
    ``rpc.connect_tracker`` retries a refused connection for 60 s and waits for a silent
    tracker's greeting forever: a mistyped or dead tracker would hang ``opgen tune``."""
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except TimeoutError as err:
        raise TimeoutError(f"no connection within {timeout_s:g} s") from err
    try:
        sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
        magic = struct.unpack("<i", base.recvall(sock, 4))[0]
    except TimeoutError as err:
        sock.close()
        raise TimeoutError(f"connected, but no answer within {timeout_s:g} s") from err
    except BaseException:
        sock.close()
        raise
    if magic != base.RPC_TRACKER_MAGIC:
        sock.close()
        raise ConnectionError(f"{host}:{port} answered, but is not a TVM RPC tracker")
    session = rpc_client.TrackerSession.__new__(rpc_client.TrackerSession)   # its __init__ would retry 60 s
    session._addr, session._sock = (host, port), sock
    return session


def free_servers(host: str, port: int, key: str) -> int:
    """How many servers the tracker lists as free under ``key``."""
    with contextlib.closing(connect_tracker(host, port)) as tracker:
        summary = tracker.summary()
    return int(summary.get("queue_info", {}).get(key, {}).get("free", 0))


class RpcRunner:
    def __init__(self, host: str, port: int, key: str, target, settings: Settings = Settings(),
                 parallel: int | None = None, on_session=None, connect_retries: int = 5):
        self.host, self.port, self.key, self.target, self.settings = host, port, key, target, settings
        self.parallel = parallel or max(1, free_servers(host, port, key))
        self.on_session = on_session            # test hook: called with the server's "host:port"
        self.connect_retries = connect_retries

    @property
    def tracker(self) -> str:
        return f"{self.host}:{self.port}"

    def _device(self, address: str | None) -> str:
        """A record's device: the server's address when one was handed out."""
        return f"rpc:{self.key}@{address}" if address else f"rpc:{self.key}"

    def _request(self, on_address):
        """(session, "host:port") of a free server; waits at most settings.timeout_s for the
        tracker. ``on_address`` gets each server's address as soon as the tracker hands it
        out, before connecting: a hung server stalls ``rpc.connect`` itself."""
        with contextlib.closing(connect_tracker(self.host, self.port)) as tracker:
            tracker._sock.settimeout(self.settings.timeout_s)    # a busy farm: waiting for a free server
            return self._request_through(tracker, on_address)

    def _request_through(self, tracker, on_address):
        """``_request`` on an open tracker session."""
        tried, last = [], None
        for _ in range(self.connect_retries):
            base.sendjson(tracker._sock, [base.TrackerCode.REQUEST, self.key, "", 1])
            value = base.recvjson(tracker._sock)
            if value[0] != base.TrackerCode.SUCCESS:
                raise RuntimeError(f"tracker {self.tracker} refused the request: {value}")
            url, port, match_key = value[1]
            tried.append(f"{url}:{port}")
            on_address(tried[-1])
            try:
                session = rpc.connect(url, port, match_key, int(self.settings.timeout_s) + 1)
                return session, tried[-1]
            except Exception as err:  # a dead server still listed: try the next one
                last = err
        raise RuntimeError(f"no live server under key {self.key!r} after {self.connect_retries} tries "
                           f"({', '.join(tried)}): {last}")

    def run(self, workload, built, on_address=None) -> Measurement:
        """Measure one candidate on the next free server. ``on_address`` (run_all's
        bookkeeping) is told the server's address as soon as the tracker names it."""
        if built.error:
            return Measurement(database.FAILED, error=built.error, device=self._device(None))
        handed: list = []

        def note(address: str) -> None:
            handed.append(address)
            if on_address is not None:
                on_address(address)

        try:
            session, address = self._request(note)
        except Exception as err:
            where = f"server {handed[-1]}" if handed else f"tracker {self.tracker}"
            return Measurement(database.FAILED, error=f"rpc request ({where}): {type(err).__name__}: {err}",
                               device=self._device(handed[-1] if handed else None))
        device = self._device(address)
        try:
            if self.on_session is not None:
                self.on_session(address)
            name = os.path.basename(built.path)
            session.upload(built.path, name)
            module = session.load_module(name)
            dev = session.device(self.target.device().dlpack_device_type(), 0)
            return measure_module(module, workload, built, dev, self.settings, device)
        except Exception as err:  # the server died or the session broke: one failed trial
            return Measurement(database.FAILED, error=f"rpc {address}: {type(err).__name__}: {str(err)[:200]}",
                               device=device)

    def run_all(self, workload, builds):
        """Yield (built, measurement) as they finish, ``parallel`` at a time."""
        tasks, results = queue.Queue(), queue.Queue()
        for item in enumerate(builds):
            tasks.put(item)
        started: dict = {}
        addresses: dict = {}    # index -> the server the tracker handed its thread

        def worker():
            while True:
                try:
                    index, built = tasks.get_nowait()
                except queue.Empty:
                    return
                started[index] = time.monotonic()
                note = functools.partial(addresses.__setitem__, index)
                results.put((index, self.run(workload, built, on_address=note)))

        threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(self.parallel, len(builds)))]
        for t in threads:
            t.start()
        done: set = set()
        while len(done) < len(builds):
            try:
                index, m = results.get(timeout=1.0)
            except queue.Empty:
                index, m = self._overdue(started, done, addresses)
                if index is None:
                    continue
                replacement = threading.Thread(target=worker, daemon=True)  # the stuck thread's slot
                replacement.start()
            if index in done:
                continue
            done.add(index)
            yield builds[index], m

    def _overdue(self, started: dict, done: set, addresses: dict):
        """(index, FAILED measurement) of a candidate past its time, naming the server it
        was handed (or the tracker, when none was handed out yet); (None, None) if none."""
        limit = self.settings.timeout_s
        for index, t0 in list(started.items()):
            if index not in done and time.monotonic() - t0 > limit:
                address = addresses.get(index)
                where = f"server {address}" if address else f"tracker {self.tracker} (no server handed out)"
                return index, Measurement(database.FAILED, error=f"rpc: no result within {limit:g} s from {where}",
                                          device=self._device(address))
        return None, None
