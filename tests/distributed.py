"""Running a function on several processes joined by torch.distributed (gloo, CPU), for the
tests of opgen.torch.SyncBatchNorm: no test can hang.

    outcomes = run_ranks(2, worker, arg, timeout=120)   # worker(rank, world_size, arg) -> picklable result
    results = succeeded(outcomes)                        # every rank's result, or AssertionError with each failure

Each rank is a spawned process (a fresh interpreter: it imports this module and the worker's
module by name, so the worker is a top-level function of a module on sys.path, and it inherits
the environment, PYTHONPATH included, so it imports the same opgen). The ranks meet at a free
TCP port of 127.0.0.1; the process group's timeout (``pg_timeout``) bounds every collective,
and the whole run is bounded by ``timeout``: a rank still alive then is killed and reported.
Each rank writes its result, or its traceback, to a file the parent reads back.
"""
from __future__ import annotations

import datetime
import multiprocessing
import os
import socket
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def free_port() -> int:
    """A TCP port of 127.0.0.1 nothing listens on now (the OS's choice for port 0); the ranks'
    store binds it moments later."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Outcome:
    """What one rank did: its exit code (None: killed at the timeout), its result (when it
    returned one) and its error text (its traceback, or why it has none)."""

    rank: int
    exitcode: int | None
    result: Any = None
    error: str = ""


def _rank_main(rank: int, world_size: int, port: int, pg_timeout: float, threads: int, folder: str, fn, args) -> None:
    """One rank: join the gloo process group, run ``fn(rank, world_size, *args)``, save what it
    returns (or the traceback) in ``folder``. Exits with 1 on an exception."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(threads)       # the ranks share the machine's cores
    out = Path(folder)
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=pg_timeout))
        try:
            result = fn(rank, world_size, *args)
        finally:
            dist.destroy_process_group()
        torch.save(result, out / f"rank{rank}.pt")
    except BaseException:
        (out / f"rank{rank}.err").write_text(traceback.format_exc())
        os._exit(1)


def run_ranks(world_size: int, fn, *args, timeout: float = 180.0, pg_timeout: float = 60.0,
              threads: int = 1) -> list[Outcome]:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` spawned processes; every process
    ends within ``timeout`` seconds (the ones left are killed) and each one's Outcome is
    returned, whatever happened to the others."""
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="opgen-dist-") as folder:
        port = free_port()
        procs = [context.Process(target=_rank_main, args=(r, world_size, port, pg_timeout, threads, folder, fn, args))
                 for r in range(world_size)]
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
        outcomes = []
        for rank, p in enumerate(procs):
            if p.is_alive():
                p.kill()
                p.join(10)
                outcomes.append(Outcome(rank, None, error=f"still running after {timeout:.0f} s: killed"))
                continue
            result_file, error_file = Path(folder, f"rank{rank}.pt"), Path(folder, f"rank{rank}.err")
            import torch
            result = torch.load(result_file, weights_only=False) if result_file.exists() else None
            error = error_file.read_text() if error_file.exists() else ""
            if p.exitcode != 0 and not error:
                error = f"exited with {p.exitcode} and no traceback"
            outcomes.append(Outcome(rank, p.exitcode, result, error))
        return outcomes


def succeeded(outcomes: list[Outcome]) -> list[Any]:
    """Every rank's result, or an AssertionError that shows each failed rank's error."""
    failed = [o for o in outcomes if o.exitcode != 0]
    assert not failed, "\n".join(f"rank {o.rank} (exit {o.exitcode}):\n{o.error}" for o in failed)
    return [o.result for o in outcomes]
