"""PipeBarrier<PIPE_V> between dependent vector instructions of an emitted kernel.

asc-devkit's PipeBarrier page (docs/api/context/PipeBarrier(ISASI).md) gives the rule: when a
vector instruction reads what an earlier vector instruction wrote (its example: Mul reading
Add's dst), the two need ``PipeBarrier<PIPE_V>()`` in between; CANN's auto-sync inserts it,
and CANN's own kernels carry dozens. The emulation checks it (emu_tensor.h check_vector_raw).

The printers emit vector calls as statements on one line each; this pass runs over the class
body once they are done and puts a barrier right before every vector call that reads a
tensor some vector call of the kernel writes (its first argument). That is conservative (a
barrier per reading call, also when another sync already ordered the pipe) but holds for
every control flow: loop-carried reads (an accumulator added in a loop), reads in another
function than the write, rows of one buffer. Tensors only copies write (queue inputs) need
none: MTE2 -> V is the queue's or an event's business.
"""
from __future__ import annotations

import re

from opgen.targets.ascend.exprs import EmitError

BARRIER = "PipeBarrier<PIPE_V>();"

# The AscendC vector APIs the printers use (and their relatives in the emulation), each with
# its destination as the first argument.
VECTOR_APIS = ("Abs", "Add", "Adds", "Axpy", "BlockReduceSum", "BroadCast", "Cast", "Div", "Duplicate",
               "Exp", "Ln", "Max", "Maxs", "Min", "Mins", "Mul", "Muls", "Reciprocal", "ReduceMax",
               "ReduceMin", "ReduceSum", "Relu", "Rsqrt", "Sqrt", "Sub", "WholeReduceSum")
_CALL = re.compile(r"\b(" + "|".join(VECTOR_APIS) + r")(?:<[^<>()]*>)?\(")
# A tensor argument: a name, maybe viewed as another type (ReinterpretCast: the same UB bytes),
# maybe indexed.
_TENSOR = re.compile(r"^\s*([A-Za-z_]\w*)\s*(?:\.ReinterpretCast<\w+>\(\))?\s*(?:\[.*\])?\s*$")


def _call_args(line: str, open_at: int) -> tuple[list[str], int]:
    """The top-level arguments of the call whose '(' is at ``open_at``, and the index just
    after its ')'."""
    depth, start, args = 0, open_at + 1, []
    for i in range(open_at, len(line)):
        ch = line[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                args.append(line[start:i])
                return args, i + 1
        elif ch == "," and depth == 1:
            args.append(line[start:i])
            start = i + 1
    raise EmitError(f"a vector call that does not end on its line (the barrier pass reads one line): {line.strip()}")


def _tensor(arg: str) -> str | None:
    """The tensor an argument names (``tmp0_t_[i * P]``, ``tmp0_t_.ReinterpretCast<half>()`` ->
    ``tmp0_t_``), None for a scalar
    expression (a call, arithmetic, a literal)."""
    m = _TENSOR.match(arg)
    return m.group(1) if m else None


def _calls(line: str):
    """(start, end, dst, sources) of each vector call on ``line``."""
    for m in _CALL.finditer(line):
        args, end = _call_args(line, m.end() - 1)
        names = [_tensor(a) for a in args]
        yield m.start(), end, names[0], {n for n in names[1:] if n}


def _braceless_body(prefix: str) -> bool:
    """Whether a statement after ``prefix`` is the whole body of an ``if``/``for`` without
    braces (so a barrier in front of it must go into a block with it)."""
    return prefix.rstrip().endswith(")")


def order_vector_pipe(body: list[str]) -> list[str]:
    """``body`` with a PipeBarrier<PIPE_V> before each vector call reading a vector-written tensor."""
    calls = [list(_calls(line)) for line in body]
    written = {dst for on_line in calls for _, _, dst, _ in on_line if dst}
    out = []
    for line, on_line in zip(body, calls):
        pieces, last = [], 0
        for start, end, _, sources in on_line:
            if not sources & written:
                continue
            stop = end + 1 if line[end:end + 1] == ";" else end
            call = line[start:stop]
            pieces.append(line[last:start])
            prefix = line[:start]
            pieces.append(f"{{ {BARRIER} {call} }}" if _braceless_body(prefix) else f"{BARRIER} {call}")
            last = stop
        out.append("".join(pieces) + line[last:])
    return out
