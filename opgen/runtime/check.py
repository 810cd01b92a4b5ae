"""Golden cases of an exported plan, run through a backend and judged (no TVM, no opgen
compiler): what scripts/gpu_check.sh runs on a GPU machine and tests/test_export.py on
the OpenCL device here.

    python -m opgen.runtime.check [--no-pool] EXPORT_DIR...   # one row per plan; exit 1 when one fails,
                                                              # 2 when one cannot run (after the others)

``--no-pool`` turns CuPy's memory pool off, so every array is its own device allocation of
its exact size: under compute-sanitizer an access past an array's end is then outside any
allocation and reported, where with the pool it could land in a neighbouring pooled buffer.

Outputs start as NaN, so an output a kernel never writes fails. An element passes when
|out - ref| <= allowed (opgen.verify's rule, computed at export), and inf/nan must
appear exactly where the reference has them. Every array starts at a 64-byte-aligned
address, as a device allocation does; a variant plan runs the cases its ``requires``
admits (the others are counted, not run), and a variant no case admits fails: a kernel
never checked is never reported as passing.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from opgen.runtime import backends
from opgen.runtime import plan as plans

NAN_BITS = {"float32": (np.float32, np.float32(np.nan)), "float16": (np.float16, np.float16(np.nan)),
            "bfloat16": (np.uint16, np.uint16(0x7FC0)),
            # an integer has no nan: its minimum (opgen.dtypes.fill_value) stands in for one
            "int32": (np.int32, np.int32(np.iinfo(np.int32).min)), "int8": (np.int8, np.int8(-128))}


@dataclass(frozen=True)
class Result:
    plan: str
    problem: str
    output: str
    ratio: float          # worst |err| / allowed; <= 1 passes

    @property
    def passed(self) -> bool:
        return bool(self.ratio <= 1.0)


def as_float64(raw: np.ndarray, dtype: str) -> np.ndarray:
    """An output's values (bfloat16 read from its bits)."""
    if dtype == "bfloat16":
        return (raw.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return raw.astype(np.float64)


def ratio(got: np.ndarray, ref: np.ndarray, allowed: np.ndarray) -> float:
    """Worst error as a fraction of the allowed one; inf where nan/inf differ."""
    if got.size == 0:
        return 0.0
    special = (np.isnan(got) != np.isnan(ref)) | (np.isinf(ref) & (got != ref)) | (np.isinf(got) & ~np.isinf(ref))
    finite = np.isfinite(ref) & np.isfinite(got)
    with np.errstate(all="ignore"):
        r = np.where(finite, np.abs(np.where(finite, got - ref, 0.0)) / allowed, 0.0)
    return float(np.where(special, np.inf, r).max())


ALIGN = 64   # bytes: where the checker's arrays start


def aligned(shape, dtype, fill=None, offset: int = 0) -> np.ndarray:
    """A C-contiguous array whose first element lies ``offset`` bytes past a multiple of
    ALIGN (numpy promises only 16; a misaligned one shows the variants' selection)."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    raw = np.empty(count * dtype.itemsize + ALIGN + offset, np.uint8)
    start = (-raw.ctypes.data) % ALIGN + offset
    array = raw[start:start + count * dtype.itemsize].view(dtype).reshape(shape)
    if fill is not None:
        array[...] = fill
    return array


def aligned_copy(array: np.ndarray) -> np.ndarray:
    out = aligned(array.shape, array.dtype)
    out[...] = array
    return out


def check_plan(path, backend=None, **options) -> list:
    """Run every golden case the plan at ``path`` admits; a Result per case and output."""
    return check_cases(path, backend, **options)[0]


def check_cases(path, backend=None, **options) -> tuple:
    """(results, cases the plan does not admit): ``check_plan``'s work and its count."""
    plan = plans.load(path)
    backend = backend or backends.for_plan(plan, **options)
    meta = json.loads(plan.code_file("cases.json").read_text())
    with np.load(plan.code_file("cases.npz"), allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    outputs = [p for p in plan.caller_params() if p.role == "output"]
    results, skipped = [], 0
    for i, case in enumerate(meta):
        inputs = [aligned_copy(arrays[f"c{i}_in{j}"]) for j in range(case["inputs"])]
        refs = [arrays[f"c{i}_ref{k}"] for k in range(len(outputs))]
        outs = [aligned(r.shape, NAN_BITS[p.dtype][0], NAN_BITS[p.dtype][1]) for p, r in zip(outputs, refs)]
        if plan.requires and plans.refusal(plan, inputs + outs):
            skipped += 1
            continue
        plans.run(plan, inputs + outs, backend)
        for k, (param, out) in enumerate(zip(outputs, outs)):
            got = as_float64(out, param.dtype)
            results.append(Result(str(path), case["problem"], param.name, ratio(got, refs[k], arrays[f"c{i}_allowed{k}"])))
    return results, skipped


def pool_off() -> None:
    """CuPy allocates each array with cudaMalloc, exactly sized (BackendMissing without CuPy)."""
    try:
        import cupy
    except ImportError:
        raise backends.BackendMissing("--no-pool is CuPy's memory pool: CuPy is not installed") from None
    cupy.cuda.set_allocator(None)
    cupy.cuda.set_pinned_memory_allocator(None)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m opgen.runtime.check", description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", help="opgen export folders (searched for plan.json)")
    parser.add_argument("--no-pool", action="store_true", help="CuPy's memory pool off (compute-sanitizer runs)")
    args = parser.parse_args(argv)
    if args.no_pool:
        try:
            pool_off()
        except backends.BackendMissing as err:
            print(f"cannot turn the memory pool off: {err}", file=sys.stderr)
            return 2
    failed, found = 0, sorted(p for folder in args.folders for p in Path(folder).rglob("plan.json"))
    if not found:
        print(f"no plan.json under {' '.join(args.folders)}", file=sys.stderr)
        return 2
    unrunnable = 0
    for path in found:
        try:
            results, skipped = check_cases(path)
        except backends.BackendMissing as err:      # no device API: no plan can run
            print(f"cannot run {path}: {err}", file=sys.stderr)
            return 2
        except (plans.PlanError, OSError) as err:     # this plan (its code, its files): the others still run
            unrunnable += 1
            print(f"CANNOT RUN {path.parent}: {type(err).__name__}: {err}")
            continue
        worst = max((r.ratio for r in results), default=0.0)
        ok = all(r.passed for r in results) and bool(results or not skipped)   # a variant run on no case fails
        failed += not ok
        note = f" ({skipped} cases not admitted)" if skipped else ""
        print(f"{'PASS' if ok else 'FAIL'} {worst:9.3g}  {len(results):3d} checks  {path.parent}{note}")
    return 2 if unrunnable else 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
