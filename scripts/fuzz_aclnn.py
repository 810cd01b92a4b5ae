"""Fuzz every aclnn function with caller mistakes, in batched worker processes.

    python scripts/fuzz_aclnn.py --calls 10000 [--workers 2] [--batch 250] [--timeout 120] [--seed 0]

Each call takes an op's valid base call (its first problem, float32; torch tensors for some
classes) and breaks it one way: wrong types, ranks, shapes, dtypes, None for tensors,
overflowing attribute values, overlapping outputs, tensors swapped or changed between the
phases, short or absurd workspaces, reused executors. Both phases run when the first
succeeds. What counts as a finding (why: the API promises a status and a message for any
argument, and 361001 only for opgen's own failures):
  * escape: an exception out of GetWorkspaceSize or the run phase;
  * internal: status 361001 for a caller's mistake;
  * crash: a worker process that died (it is restarted; its batch is reported);
  * hang: a batch past --timeout seconds (its worker is killed and restarted).
Workers are spawned (no state forked from this process). Exit status 1 if any finding.
"""
from __future__ import annotations

import argparse
import collections
import multiprocessing
import multiprocessing.connection
import random
import sys
import time
import traceback

INTERNAL = 361001
CLASSES = ("wrong_type", "rank", "shape", "dtype", "none", "overflow", "overlap", "swapped", "short_workspace",
           "reused_executor", "absurd_workspace")


# ---- the worker side ---------------------------------------------------------------------

class Fuzzer:
    """One worker's state: the ops and their base calls, made once per process."""

    def __init__(self):
        import numpy as np
        import torch
        from opgen import acl, aclnn
        from opgen.ops import all_ops
        self.np, self.torch, self.acl, self.aclnn = np, torch, acl, aclnn
        self.ops = [op for op in all_ops() if op.api is not None]
        self.bases = {}

    def base(self, op) -> dict:
        """A valid call of ``op`` (its first problem, float32, every output asked for)."""
        if op.name not in self.bases:
            np = self.np
            from opgen.dtypes import numpy_dtype
            problem, combo = op.problems[0], op.combo("f32-f32")
            arrays = op.random_inputs(problem, combo, np.random.default_rng(0))
            ref = op.reference(problem, arrays)
            args = {}
            for p in op.api.params:
                if p.role == "input":
                    args[p.name] = arrays[p.kernel] if p.kernel else arrays.get(p.name)
                elif p.role == "output":
                    args[p.name] = np.zeros(np.shape(ref[p.kernel]), numpy_dtype(combo[p.kernel]))
                elif p.role == "attr":
                    args[p.name] = getattr(problem, p.name)
                else:
                    args[p.name] = [True] * sum(1 for q in op.api.params if q.mask_bit is not None)
            self.bases[op.name] = args
        return {k: v.copy() if isinstance(v, self.np.ndarray) else v for k, v in self.bases[op.name].items()}

    def call(self, rng: random.Random, kind: str) -> tuple:
        """One fuzzed call: (op name, what was done, status or None, escape text or None)."""
        op = rng.choice(self.ops)
        args = self.base(op)
        what = getattr(self, f"_{kind}")(rng, op, args)
        first = getattr(self.aclnn, f"{op.aclnn_name}GetWorkspaceSize")
        second = getattr(self.aclnn, op.aclnn_name)
        try:
            status, size, executor = first(**args)
            if status == 0:
                status = self._second(rng, kind, second, size, executor, args)
        except Exception as exc:   # an escape: the finding this script exists for
            return op.name, what, None, _line(f"{type(exc).__name__}: {exc}")
        message = self.acl.aclGetRecentErrMsg() if status else ""
        return op.name, what, status, _line(message)

    # -- phase two by class
    def _second(self, rng, kind, second, size, executor, args):
        acl = self.acl
        workspace = acl.aclrtMalloc(size)[1] if size else None
        if kind == "swapped":
            self._change(rng, args)
        if kind == "short_workspace":
            return second(rng.choice([None, bytearray(max(size - 65, 0))]), size, executor, None) if size else \
                second(None, rng.choice([-1, "8", None]), executor, None)
        if kind == "absurd_workspace":
            return second(workspace, rng.choice([2**63, 2**64, 2**70, 10**30]), executor, None)
        status = second(workspace, size, executor, None)
        if kind == "reused_executor" and status == 0:
            status = second(workspace, size, executor, None)
        return status

    # -- mutations (each edits args in place and says what it did)
    def _tensor_names(self, op, args, role=None):
        return [p.name for p in op.api.tensors(role) if isinstance(args[p.name], self.np.ndarray)]

    def _wrong_type(self, rng, op, args):
        name = rng.choice([p.name for p in op.api.params])
        args[name] = rng.choice(["x", 3.5, [1, 2], object(), {}, b"\0", 1j, (None,)])
        return f"{name}={type(args[name]).__name__}"

    def _rank(self, rng, op, args):
        name = rng.choice(self._tensor_names(op, args))
        a = args[name]
        shape = a.shape[1:] if a.ndim and rng.random() < 0.5 else (1,) * rng.randint(1, 8) + a.shape
        args[name] = self.np.zeros(shape, a.dtype)
        return f"{name} rank {a.ndim}->{len(shape)}"

    def _shape(self, rng, op, args):
        name = rng.choice(self._tensor_names(op, args))
        a = args[name]
        shape = list(a.shape) or [1]
        axis = rng.randrange(len(shape))
        shape[axis] = rng.choice([0, 1, shape[axis] + 1, shape[axis] * 2, 7])
        args[name] = self.np.zeros(shape, a.dtype)
        return f"{name} shape {a.shape}->{tuple(shape)}"

    def _dtype(self, rng, op, args):
        import ml_dtypes
        np = self.np
        names = self._tensor_names(op, args)
        dtype = rng.choice([np.float64, np.float16, np.int32, np.int64, np.bool_, np.uint8, ml_dtypes.bfloat16])
        chosen = names if rng.random() < 0.3 else [rng.choice(names)]
        for name in chosen:
            args[name] = args[name].astype(dtype)
        return f"{','.join(chosen)} as {np.dtype(dtype).name}"

    def _none(self, rng, op, args):
        name = rng.choice([p.name for p in op.api.tensors()] + [p.name for p in op.api.params if p.role == "mask"])
        args[name] = None
        return f"{name}=None"

    def _overflow(self, rng, op, args):
        attrs = [p for p in op.api.params if p.role == "attr" and p.value_type in ("int", "float", "ints")]
        if not attrs:
            return self._shape(rng, op, args)
        p = rng.choice(attrs)
        value = rng.choice([10**400, -10**400, 2**63, -2**63 - 1, 2**64, float("inf"), float("nan"), -0.0,
                            self.np.longdouble(10) ** 400, 2**1024])
        args[p.name] = [value] if p.value_type == "ints" else value
        return f"{p.name}={str(value)[:12]}"

    def _overlap(self, rng, op, args):
        np = self.np
        outs = [n for n in self._tensor_names(op, args, "output") if args[n].size > 1]
        if not outs:
            return self._none(rng, op, args)
        name = rng.choice(outs)
        a = args[name]
        how = rng.choice(["zero-stride", "expand", "alias-input"])
        if how == "alias-input":   # an output over an input's memory: valid (staged), must run
            inputs = [n for n in self._tensor_names(op, args, "input")
                      if args[n].shape == a.shape and args[n].dtype == a.dtype]
            if inputs:
                args[name] = args[rng.choice(inputs)]
                return f"{name} aliases an input"
        axis = rng.choice([i for i, d in enumerate(a.shape) if d > 1])
        if how == "expand":
            for k, v in list(args.items()):
                if isinstance(v, np.ndarray):
                    args[k] = self.torch.from_numpy(v)
            args[name] = self.torch.zeros(tuple(1 if i == axis else d for i, d in enumerate(a.shape)),
                                          dtype=args[name].dtype).expand(a.shape)
        else:
            strides = list(a.strides)
            strides[axis] = 0
            args[name] = np.lib.stride_tricks.as_strided(np.zeros(a.size, a.dtype), a.shape, strides,
                                                         writeable=True)
        return f"{name} overlapping ({how}, axis {axis})"

    def _as_torch(self, args):
        for k, v in list(args.items()):
            if isinstance(v, self.np.ndarray):
                args[k] = self.torch.from_numpy(v).clone()   # torch's allocation: resizable storage
        return args

    def _swapped(self, rng, op, args):
        """A valid call on torch tensors; one of them is changed after phase one (_change)."""
        self._as_torch(args)
        name = rng.choice(sorted(n for n, v in args.items() if isinstance(v, self.torch.Tensor)))
        how = rng.choice(["resize_", "grow", "set_", "dtype", "freed", "same", "reshape"])
        self.pending = (name, how)
        return f"{name} {how} between the phases"

    def _change(self, rng, args):
        torch = self.torch
        name, how = self.pending
        t = args[name]
        if how == "resize_":
            t.resize_(1)
        elif how == "grow":
            t.resize_(*(2 * d + 1 for d in t.shape))
        elif how == "set_":
            t.set_(torch.zeros(3, dtype=t.dtype))
        elif how == "dtype":
            t.data = torch.zeros(t.shape, dtype=torch.float64)
        elif how == "freed":
            t.untyped_storage().resize_(0)
        elif how == "same":
            t.data = torch.zeros(t.shape, dtype=t.dtype)
        elif t.dim():
            t.data = t.data.reshape(-1)

    def _short_workspace(self, rng, op, args):
        return "short workspace"

    def _reused_executor(self, rng, op, args):
        return "executor run twice"

    def _absurd_workspace(self, rng, op, args):
        return "workspaceSize past 2**63"


def _line(text: str) -> str:
    """A message on one line, cut to 300 characters (TVM-FFI's errors quote the kernel)."""
    return " ".join(text.split())[:300]


def _serve(conn) -> None:
    """A worker: run batches (seed, count, classes) until told to stop (None)."""
    import warnings
    warnings.simplefilter("ignore")
    fuzzer = Fuzzer()
    conn.send("ready")
    while True:
        task = conn.recv()
        if task is None:
            return
        seed, count = task
        rng = random.Random(seed)
        findings, statuses = [], collections.Counter()
        for i in range(count):
            kind = CLASSES[i % len(CLASSES)]
            try:
                op, what, status, text = fuzzer.call(rng, kind)
            except Exception:   # the fuzzer's own mutation failed: not the API's finding
                statuses["fuzzer-error"] += 1
                continue
            statuses[status] += 1
            if status is None:
                findings.append(("escape", kind, op, what, text))
            elif status == INTERNAL:
                findings.append(("internal", kind, op, what, text))
        conn.send((seed, count, findings, statuses))


# ---- the parent side ---------------------------------------------------------------------

class Worker:
    """One spawned worker process and the batch it is running."""

    def __init__(self, context):
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child,), daemon=True)
        self.process.start()
        child.close()
        self.task, self.since = None, None

    def give(self, task) -> None:
        self.task, self.since = task, time.monotonic()
        self.conn.send(task)

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.process.join(5)
        if self.process.is_alive():
            self.process.kill()   # this worker only, by its own handle
            self.process.join()


def _waiting_for_ready(workers) -> None:
    for w in workers:
        if w.conn.recv() != "ready":
            raise SystemExit("a worker failed to start")


def fuzz(calls: int, workers: int, batch: int, timeout: float, seed: int) -> tuple[list, collections.Counter]:
    """Run ``calls`` fuzzed calls in batches; returns (findings, status counts)."""
    context = multiprocessing.get_context("spawn")
    tasks = [(seed + i, min(batch, calls - i * batch)) for i in range((calls + batch - 1) // batch)]
    pool = [Worker(context) for _ in range(workers)]
    _waiting_for_ready(pool)
    findings, statuses = [], collections.Counter()
    while tasks or any(w.task for w in pool):
        for w in pool:
            if w.task is None and tasks:
                w.give(tasks.pop(0))
        busy = [w for w in pool if w.task]
        ready = multiprocessing.connection.wait([w.conn for w in busy] + [w.process.sentinel for w in busy], 1.0)
        for i, w in enumerate(pool):
            if not w.task:
                continue
            if w.conn in ready:
                try:
                    _, count, found, counts = w.conn.recv()
                except EOFError:
                    found, counts = None, None
                if counts is not None:
                    findings += found
                    statuses.update(counts)
                    w.task = None
                    continue
            if w.process.sentinel in ready or not w.process.is_alive():
                findings.append(("crash", "-", "-", f"batch seed {w.task[0]}",
                                 f"worker died with exit code {w.process.exitcode}"))
            elif time.monotonic() - w.since > timeout:
                findings.append(("hang", "-", "-", f"batch seed {w.task[0]}", f"no result in {timeout:.0f} s"))
            else:
                continue
            w.stop()
            pool[i] = Worker(context)
            _waiting_for_ready([pool[i]])
    for w in pool:
        w.stop()
    return findings, statuses


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=10000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=250)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per batch")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    start = time.monotonic()
    findings, statuses = fuzz(args.calls, args.workers, args.batch, args.timeout, args.seed)
    took = time.monotonic() - start
    print(f"{sum(statuses.values())} calls in {took:.1f} s; statuses: "
          + ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items(), key=lambda kv: str(kv[0]))))
    by_kind = collections.Counter(f[0] for f in findings)
    print(f"findings: {dict(by_kind) or 'none'}")
    seen = set()
    for kind, klass, op, what, text in findings:
        key = (kind, klass, op, text[:80])
        if key not in seen:
            seen.add(key)
            print(f"  {kind:8} {klass:16} {op:22} {what}: {text}")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
