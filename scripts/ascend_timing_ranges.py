"""The timing model's headline ratios across the ranges of its constants (issue 36 item 5).

    python scripts/ascend_timing_ranges.py [--cann DIR] [--no-cann]   # the sweep (minutes)
    python scripts/ascend_timing_ranges.py --table                     # docs/ascend-timing.md's table

The constants and their ranges are targets/ascend/timing_constants.A2 (one table: the docs'
table is its ``markdown_table()``). Each case is built and tiled once; the timing parameters
are runtime inputs of the emulation (opgen_emu_set_timing), so every point of the sweep is
one more launch of the same code on the same inputs: the model's defaults; each ranged
constant at its low and at its high end, the others at their values; and each headline's two
corners, every constant at the end that lowered that ratio on its own, then every one at the
end that raised it (so the range assumes each constant moves the ratio one way). A headline whose range crosses its
threshold (1.25x the GM bound: issue 20's goal; 1.0x CANN's time: faster or slower) is
reported as unknown.
"""
from __future__ import annotations

import argparse
import importlib
import json
from dataclasses import dataclass, replace

import numpy as np

from opgen.targets.ascend.timing_constants import A2, markdown_table

# opgen's kernels, CANN's and the emulation are imported where a sweep runs, so that
# tests/test_ascend_timing_constants.py can check points() and corners() without TVM.

PRODUCT = "AtlasA2"
# opgen's kernels against the GM-bandwidth bound (the modelled time over the bound; 1.25: the goal).
BOUND_CASES = ("rms_norm_grad:f32-f32:2048x1024", "group_norm_backward:f32-f32:8,256,56x56,32",
               "rms_norm_grad:f32-f32:8192x5120")
# opgen's like-for-like kernel against CANN's (ops-nn's hand-written kernels on the same model).
CANN_CASES = ("rms_norm_grad:f32-f32:192x1024", "rms_norm_grad:f16-f16:100x3000",
              "rms_norm_grad:f16-f16:16x12290", "rms_norm_grad:f16-f16:130x16",
              "group_norm_backward:f32-f32:2,60,1664,2", "group_norm_backward:f32-f32:2,4,12000,2",
              "group_norm_backward:f16-f16:2,4,12000,2", "group_norm_backward:f32-f32:12,64,128x128,32")
# The two largest rows of docs/ascend-tiling.md's CANN table (--large): minutes per point.
LARGE_CANN_CASES = ("rms_norm_grad:f32-f32:8192x5120", "rms_norm_grad:f16-f16:8192x5120")


def points() -> list[tuple[str, dict]]:
    """(label, field -> value overrides): the defaults, then each ranged constant at each end."""
    out = [("defaults", {})]
    for c in A2:
        if c.ranged:
            out += [(f"{c.field} low", {c.field: c.low}), (f"{c.field} high", {c.field: c.high})]
    return out


def corners(values: dict) -> list[tuple[str, dict]]:
    """The two corners of one headline: every ranged constant at the end that lowered the
    ratio on its own, then every one at the end that raised it (the one-at-a-time points say
    which; a constant that moved nothing stays at its value)."""
    low, high = {}, {}
    for c in A2:
        if not c.ranged:
            continue
        at_low, at_high = values[f"{c.field} low"], values[f"{c.field} high"]
        if at_low != at_high:
            low[c.field], high[c.field] = (c.low, c.high) if at_low < at_high else (c.high, c.low)
    return [("every constant lowering", low), ("every constant raising", high)]


def evaluate(ratio, base) -> dict:
    """point label -> ``ratio(timing)`` at every point and at the headline's two corners."""
    values = {label: ratio(replace(base, **over)) for label, over in points()}
    values.update({label: ratio(replace(base, **over)) for label, over in corners(values)})
    return values


def opgen_runner(spec: str, target, knobs=None):
    """A function timing -> the modelled time of opgen's kernel for one op:combo:shape."""
    from opgen import kernels
    from opgen.ops import get_op
    from opgen.verify import numpy_dtype

    name, tag, shape = spec.split(":")
    op = get_op(name)
    combo, problem = op.combo(tag), op.parse_problem(shape)
    kernel = kernels.get_kernel(op, combo, target, knobs=knobs)
    arrays = op.random_inputs(problem, combo, np.random.default_rng(0))
    outputs = {n: np.full(s, np.nan, numpy_dtype(combo[n])) for n, s in op.output_shapes(problem).items()}
    args = op.kernel_args(problem, {**arrays, **outputs})
    emu = kernel.module.kernel
    base = emu.hw

    def run(timing):
        emu.hw = replace(base, timing=timing)     # timing only: tiling reads cores and UB
        try:
            kernel(args)
        finally:
            emu.hw = base
        return emu.last_timing

    return run


def cann_runner(spec: str, checkout, hw):
    """(A function timing -> the modelled time of CANN's kernel for one op:combo:shape, how
    CANN's kernel sums on it: "atomic" or "deterministic")."""
    from opgen.ops import get_op
    from opgen.targets.ascend import cann_src
    from opgen.verify import numpy_dtype

    name, tag, shape = spec.split(":")
    op, ck = get_op(name), cann_src.KERNELS[name]
    combo, problem = op.combo(tag), op.parse_problem(shape)
    shapes = importlib.import_module(op.package).kernel_shapes(problem)
    inputs = op.random_inputs(problem, combo, np.random.default_rng(0))
    arrays = {n: np.ascontiguousarray(v).reshape(shapes[n]) for n, v in inputs.items()}
    arrays.update({n: np.full(shapes[n], np.nan, numpy_dtype(combo[n])) for n in op.outputs})
    lib, fields = cann_src.build(ck, combo, hw, checkout)
    tiling = ck.tiling(problem, combo, hw.vector_cores)
    return lambda timing: cann_src.launch(lib, ck, fields, tiling, arrays, replace(hw, timing=timing)), ck.sums(problem)


@dataclass
class Headline:
    label: str
    threshold: float
    values: dict       # point label -> ratio

    def movers(self, n: int = 2) -> list[str]:
        """The ``n`` constants whose two ends move this ratio most on their own."""
        spread = {c.field: abs(self.values[f"{c.field} high"] - self.values[f"{c.field} low"])
                  for c in A2 if f"{c.field} low" in self.values}
        return sorted(spread, key=spread.get, reverse=True)[:n]

    def summary(self) -> str:
        lo_at = min(self.values, key=self.values.get)
        hi_at = max(self.values, key=self.values.get)
        lo, hi, at = self.values[lo_at], self.values[hi_at], self.values["defaults"]
        verdict = ("unknown (crosses {:.2f})" if lo <= self.threshold <= hi else
                   "below {:.2f} throughout" if hi < self.threshold else "above {:.2f} throughout").format(self.threshold)
        return (f"| {self.label} | {at:.2f} | {lo:.2f} ({lo_at}) | {hi:.2f} ({hi_at}) | {verdict} "
                f"| {', '.join(self.movers())} |")


def sweep(cann_checkout=None, large=False, bound=True, record=None, only="") -> list[Headline]:
    """Every headline's ratio at every point; ``record(headlines)`` after each one."""
    from opgen.targets import get_target
    from opgen.targets.ascend.hardware import describe

    hw = describe(PRODUCT)
    target = get_target("ascend-emu").for_product(PRODUCT)
    headlines = []
    if cann_checkout is not None:
        for spec in [s for s in CANN_CASES + (LARGE_CANN_CASES if large else ()) if only in s]:
            theirs, sums = cann_runner(spec, cann_checkout, hw)
            ours = opgen_runner(spec, target, {"sums": "atomic"} if sums == "atomic" else None)
            values = evaluate(lambda t: ours(t).seconds / theirs(t).seconds, hw.timing)
            headlines.append(Headline(f"opgen ({sums}) / CANN {spec}", 1.0, values))
            print(headlines[-1].summary(), flush=True)
            record and record(headlines)
    for spec in [s for s in BOUND_CASES if only in s] if bound else ():
        run = opgen_runner(spec, target)
        values = evaluate(lambda t: 1 / run(t).of_bound, hw.timing)
        headlines.append(Headline(f"opgen {spec} / GM bound", 1.25, values))
        print(headlines[-1].summary(), flush=True)
        record and record(headlines)
    return headlines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", action="store_true", help="print the constants table and stop")
    parser.add_argument("--cann", help="a hicann/ops-nn checkout (default: $OPGEN_CANN_SRC, ~/ops-nn)")
    parser.add_argument("--no-cann", action="store_true", help="only the GM-bound headlines")
    parser.add_argument("--no-bound", action="store_true", help="only the headlines against CANN")
    parser.add_argument("--large", action="store_true", help="also CANN's 8192x5120 RmsNormGrad rows")
    parser.add_argument("--only", help="only the cases whose op:combo:shape contains this text")
    parser.add_argument("--json", help="write every point's ratio of every headline to this file")
    args = parser.parse_args(argv)
    if args.table:
        print(markdown_table())
        return 0
    from opgen.targets.ascend import cann_src

    try:
        checkout = None if args.no_cann else cann_src.check_checkout(cann_src.checkout_dir(args.cann))
    except cann_src.NotACheckout as e:
        parser.exit(2, f"ascend_timing_ranges: {e}\n")
    print(f"{len(points()) + 2} points per headline: the defaults, each ranged constant at each end, two corners")
    print("| headline | at the defaults | lowest (where) | highest (where) | conclusion | moved most by |")
    print("|---|---|---|---|---|---|")
    def record(headlines):
        if args.json:
            with open(args.json, "w") as f:
                json.dump({h.label: h.values for h in headlines}, f, indent=1)

    sweep(checkout, args.large, not args.no_bound, record, args.only or "")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
