"""Instructions a CPU kernel executes per element, counted by Valgrind (callgrind), and its
hot loop's instruction mix from the disassembly: the bound of a row that is not bound by the
bytes it moves (docs/cpu-benchmark.md). No hardware counters needed (VMs rarely expose them).

    python benchmarks/instructions_per_element.py [--op rms_norm_grad] [--dtypes f32-f32 ...]
        [--shape 1024x1024] [--knobs aligned_stream=64 ...]

For each dtype combo and knob setting the kernel is built (or loaded) here through
``kernels.get_kernel``, the llvm target's own build path; then one call runs in a child
process under ``valgrind --tool=callgrind`` on one thread, and the instructions counted are
those of the kernel's library alone (its entry and parallel bodies), not the interpreter's.
The child's imports under Valgrind take most of its time: about 14 CPU-minutes a kernel on
the 2-core Zen 3 VM. Valgrind runs AVX2 code but not AVX-512: on a host whose kernels use
AVX-512, build for AVX2 (``OPGEN_LLVM_TARGET=<cpu>,-avx512f``).

Printed per kernel: instructions per element (element: one of the largest input's), and
from ``objdump -d`` of the kernel's library its innermost loop with the most vector
instructions, by kind (loads, stores, conversions, arithmetic, ...), so a reader sees what
an element costs (``--no-count``: the loop alone, no Valgrind). The loop is found by shape
alone (a backward jump with no other inside): where a kernel's element loop holds guarded
branches (the llvm generic kernels' dx loop), the loop printed is another one (the final
sum's); read the disassembly there.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stream_variant import _placed  # noqa: E402  (a copy of an array at a chosen offset past 64 bytes)

CHILD_FLAG = "--child"


def _kernel(op_name: str, tag: str, knobs: dict):
    from opgen import kernels
    from opgen.ops import get_op
    from opgen.targets import get_target

    op = get_op(op_name)
    return op, kernels.get_kernel(op, op.combo(tag), get_target("llvm"), knobs=knobs or None)


def _prepared_call(op_name: str, tag: str, shape: str, knobs: dict) -> tuple:
    """(kernel, its arguments, elements): random inputs of the problem ``shape`` and zeroed
    outputs, every array at a 64-byte boundary; an element is one of the largest input's."""
    import numpy as np

    from opgen.dtypes import numpy_dtype

    op, kernel = _kernel(op_name, tag, knobs)
    problem, combo = op.parse_problem(shape), op.combo(tag)
    inputs = {n: _placed(a, 0) for n, a in op.random_inputs(problem, combo, np.random.default_rng(0)).items()}
    want = op.reference(problem, inputs)
    outputs = {n: _placed(np.zeros(want[n].shape, numpy_dtype(combo[n])), 0) for n in op.outputs}
    return kernel, op.kernel_args(problem, {**inputs, **outputs}), max(a.size for a in inputs.values())


def run_child(op_name: str, tag: str, shape: str, knobs: dict) -> None:
    """One call of the kernel (runs under Valgrind): prints its element count."""
    kernel, args, elements = _prepared_call(op_name, tag, shape, knobs)
    kernel(args)
    print(f"elements {elements}", flush=True)


def count(kernel, op_name: str, tag: str, shape: str, knobs: dict) -> tuple[int, int]:
    """(instructions executed in ``kernel``'s library, elements) of one call, in a child
    under callgrind: the Ir of every function of the object that holds the kernel's entry
    (``__tvm_ffi_<symbol>``; a private copy of the cached library), its parallel bodies
    included. ``kernel`` is built here, so the child only loads it (no build under Valgrind)."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "callgrind.out"
        argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, __file__,
                CHILD_FLAG, "--op", op_name, "--dtypes", tag, "--shape", shape]
        argv += [a for k, v in knobs.items() for a in ("--knobs", f"{k}={v}")]
        env = {**os.environ, "TVM_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        done = subprocess.run(argv, capture_output=True, text=True, env=env)
        found = re.search(r"elements (\d+)", done.stdout)
        if done.returncode or not found:
            raise SystemExit(f"the callgrind child failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        summary = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", str(out)],
                                 capture_output=True, text=True, check=True).stdout
    by_object, entry_object = collections.Counter(), None
    for line in summary.splitlines():
        row = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+(.*):(.*) \[(.+)\]$", line)
        if row:
            by_object[row.group(4)] += int(row.group(1).replace(",", ""))
            entry_object = row.group(4) if row.group(3) == f"__tvm_ffi_{kernel.symbol}" else entry_object
    if entry_object is None:
        raise SystemExit(f"callgrind did not see __tvm_ffi_{kernel.symbol}")
    return by_object[entry_object], int(found.group(1))


KINDS = (("store", r"^v?mov\w*\s+%\w+,[^,]*\("),
         ("load", r"^v?(mov|pbroadcast|broadcast)\w*\s+[^,]*\("),
         ("convert", r"^v?cvt|^vpmov[sz]x|^vpack"),
         ("shift/shuffle", r"^vps[lr]|^vperm|^vpshuf|^vshuf|^vinsert|^vextract|^vunpck|^vpunpck|^v?p?blend"),
         ("fp arithmetic", r"^v(add|sub|mul|fmadd|fmsub|fnmadd|fnmsub|div|max|min)\w*[ps][sd]\s"),
         ("int arithmetic", r"^vp(add|sub|and|or|xor|cmp|andn|srl|sll)|^v(and|or|xor)p"),
         ("scalar and loop", r"^(add|sub|inc|dec|cmp|test|lea|mov)\w*\s|^j\w+\s"))
JUMP = re.compile(r"^j\w+\s+([0-9a-f]+)")


def _kernel_functions(text: str) -> dict:
    """The kernel's own functions in ``objdump -d`` text (its entry's compute body and the
    parallel lambdas), each as [(address, instruction)]."""
    functions, name = {}, None
    for line in text.splitlines():
        header = re.match(r"^[0-9a-f]+ <(.+)>:$", line)
        if header:
            name = header.group(1) if re.search(r"parallel_lambda|_compute_", header.group(1)) else None
            if name:
                functions[name] = []
            continue
        row = re.match(r"^\s*([0-9a-f]+):\s+(.*)$", line)
        if name and row:
            functions[name].append((int(row.group(1), 16), row.group(2).strip()))
    return functions


def _innermost_loops(rows: list) -> list:
    """Bodies between a backward jump and its target that hold no other backward jump."""
    targets = [(i, addr, JUMP.match(ins)) for i, (addr, ins) in enumerate(rows)]
    backward = [(i, int(m.group(1), 16)) for i, addr, m in targets if m and int(m.group(1), 16) < addr]
    loops = []
    for i, target in backward:
        inside = [j for j, _ in backward if j != i and rows[j][0] >= target and j < i]
        if not inside:
            loops.append([ins for addr, ins in rows[:i + 1] if addr >= target])
    return loops


def hot_loop(library: Path) -> tuple[int, collections.Counter]:
    """(instructions, kinds) of the kernel's innermost loop with the most vector
    instructions (a ymm, xmm or zmm operand): the loop an element's work is in."""
    text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(library)], capture_output=True, text=True,
                          check=True).stdout
    loops = [body for rows in _kernel_functions(text).values() for body in _innermost_loops(rows)]
    vector = [body for body in loops if any(re.search(r"%[xyz]mm", ins) for ins in body)]
    if not vector:
        return 0, collections.Counter()
    body = max(vector, key=lambda b: sum(bool(re.search(r"%[xyz]mm", ins)) for ins in b))
    kinds = collections.Counter()
    for ins in body:
        kinds[next((k for k, pattern in KINDS if re.search(pattern, ins)), "other")] += 1
    return len(body), kinds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(CHILD_FLAG, action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--op", default="rms_norm_grad")
    parser.add_argument("--dtypes", action="append", help="dtype combo tag (repeatable; default f32-f32, bf16-bf16)")
    parser.add_argument("--shape", default="1024x1024", help="the op's problem text (opgen bench's)")
    parser.add_argument("--knobs", action="append", default=[], help="KNOB=INT, one setting (repeatable)")
    parser.add_argument("--no-count", action="store_true", help="the hot loop only (no Valgrind)")
    args = parser.parse_args(argv)
    knobs = {k: int(v) for k, v in (s.split("=", 1) for s in args.knobs)}
    tags = args.dtypes or ["f32-f32", "bf16-bf16"]
    if args.child:
        run_child(args.op, tags[0], args.shape, knobs)
        return 0
    for tool in ("objdump",) if args.no_count else ("valgrind", "callgrind_annotate", "objdump"):
        if shutil.which(tool) is None:
            raise SystemExit(f"instructions_per_element: {tool} is not on PATH")
    print(f"{'op':<20} {'dtypes':<10} {'knobs':<18} {'instructions/element':>20}  hot loop: instructions by kind")
    for tag in tags:
        _, kernel = _kernel(args.op, tag, knobs)
        instructions, elements = (float("nan"), 1) if args.no_count else count(kernel, args.op, tag, args.shape, knobs)
        size, kinds = hot_loop(kernel.library_path)
        mix = ", ".join(f"{k} {n}" for k, n in kinds.most_common())
        setting = ",".join(f"{k}={v}" for k, v in knobs.items()) or "-"
        print(f"{args.op:<20} {tag:<10} {setting:<18} {instructions / max(elements, 1):>20.2f}  {size}: {mix}",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
