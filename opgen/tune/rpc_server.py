"""``python -m opgen.tune.rpc_server``: TVM's RPC server in one process that takes its
sessions along when it dies.

    python -m opgen.tune.rpc_server --tracker 127.0.0.1:9190 --key mykey --port 9090 --port-end 9091

Why not ``python -m tvm.exec.rpc_server``: that process only starts a second one (TVM's
PopenWorker), which listens, registers with the tracker and forks one process per session.
``kill -9`` of the process one started leaves that worker behind, holding the port, still
registered, and running every later upload. Here the listening loop (TVM's own) runs in the
launched process itself, and every process forked from it is given ``PR_SET_PDEATHSIG``
(SIGKILL, Linux): however this process ends (SIGTERM, SIGKILL, Ctrl-C), its sessions end
with it, the port is free and the tracker drops the server. Elsewhere (no prctl) stop the
process group instead: ``kill -- -PGID``.

The host defaults to 127.0.0.1, not TVM's 0.0.0.0: the server runs any code it is sent,
without authentication (docs/tuning.md, Security).
"""
from __future__ import annotations

import argparse
import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
_forking_pid: list = []      # the pid of the process that is forking (set just before each fork)


def _die_with_parent() -> None:
    """In a freshly forked child: be killed when the process that forked it ends. The
    parent may have died between the fork and the prctl; then end now (the kernel would
    not signal a death that already happened)."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if _forking_pid and os.getppid() != _forking_pid[-1]:
        os._exit(1)


def _note_forking_pid() -> None:
    _forking_pid[:] = [os.getpid()]


def children_die_with_their_parent() -> bool:
    """Make every process forked from now on (in this process or its children) die with
    the process that forked it; False where the platform has no PR_SET_PDEATHSIG."""
    if _libc is None:
        return False
    os.register_at_fork(before=_note_forking_pid, after_in_child=_die_with_parent)
    return True


def tracker_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port); argparse's error for anything else."""
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"wants HOST:PORT, got {text!r}")
    return host.removeprefix("[").removesuffix("]"), int(port)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m opgen.tune.rpc_server", description=__doc__.splitlines()[0])
    parser.add_argument("--tracker", type=tracker_address, required=True, help="the tracker's HOST:PORT")
    parser.add_argument("--key", required=True, help="the key this server registers under")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=9090, help="first port to try (default 9090)")
    parser.add_argument("--port-end", type=int, default=9199, help="one past the last port to try (default 9199)")
    parser.add_argument("--custom-addr", default=None, help="the address to report to the tracker")
    parser.add_argument("--silent", action="store_true", help="log errors only")
    return parser


def serve(args) -> int:
    """Listen (TVM's loop, on a thread of this process) until this process is ended."""
    from tvm.rpc import server

    children_die_with_their_parent()
    state = server.PopenRPCServerState(args.host, args.port, args.port_end, tracker_addr=args.tracker, key=args.key,
                                       custom_addr=args.custom_addr, silent=args.silent)
    print(f"opgen rpc server: listening on {args.host}:{state.port} (pid {os.getpid()}), key {args.key!r}, "
          f"tracker {args.tracker[0]}:{args.tracker[1]}", flush=True)
    try:
        while state.thread.is_alive():
            state.thread.join(1.0)
    except KeyboardInterrupt:
        pass
    os._exit(0)   # the listening thread never returns by itself; the sessions die with us


def main(argv=None) -> int:
    return serve(build_parser().parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
