"""``opgen tiling``: opgen's Ascend tiling next to CANN's hand-written formulas.

For every registered op, one row from opgen's schedule (schedules/ascend.py on the
product's hardware description) per case, and one from CANN's formulas where the op's
package transcribes them: an op package may hold ``cann_tiling.py`` with ``LABEL``,
``CASES`` (problem spellings and dtype tags: ops-nn's tiling-test shapes) and ``plan(problem,
itemsize, cores)``, the fields of CANN's line (or a ``NOTE`` saying why there is none);
``PRODUCTS`` names the products where CANN runs those formulas, and ``ELSEWHERE`` says per
other product which CANN kernel applies instead (no CANN line is printed there). An op
without one shows opgen's rows for its benchmark shapes. No op is named here.

Columns: mode; cores used; rows (tasks, channels) per core; rows x columns (channels x HxW
elements, batch rows x HxW elements) per UB pass; UB bytes; GM bytes moved; column sums; GM
workspace bytes. CANN's UB bytes are what its formulas budget (its kernels' exact
allocations are not in the tiling code); CANN's GM bytes apply opgen's traffic model to
CANN's tiling (same counting: every tile read once per pass over it, broadcast inputs once
per core or per row, column-sum partials written and read back), so the two columns compare
plans, not measurements.

The Ascend target declares this module among its ``tools``: ``opgen`` adds the command
``COMMAND`` with ``add_arguments`` and ``main`` (opgen.cli).
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass, replace

from tvm import te

from opgen import schedules
from opgen.ops import all_ops
from opgen.products import PRODUCTS
from opgen.schedules.ascend_tiling import CopyAlignmentError, UbBudgetError
from opgen.targets.ascend import TARGET
from opgen.targets.ascend.hardware import DESCRIPTIONS

COMMAND = "tiling"
HELP = "opgen's Ascend tiling next to CANN's formulas, on ops-nn's test shapes"
CANN_UB = 196608           # the UB of ops-nn's A2 tiling-test fixtures (the A2/A3 product's too)
NO_FORMULA = "CANN: no formula transcribed (an op package's cann_tiling.py holds one)"


@dataclass(frozen=True)
class Line:
    source: str            # "opgen" or "CANN"
    mode: str
    cores: int
    per_core: int
    per_pass: str
    ub_bytes: int | None
    gm_bytes: int | None
    sums: str
    workspace: int | None


@dataclass(frozen=True)
class Case:
    label: str
    opgen: Line
    cann: Line | None
    note: str = ""         # why there is no CANN line


def _itemsize(tag: str) -> int:
    return 4 if tag.startswith("f32") else 2


def cann_formulas(op):
    """The op package's cann_tiling module, or None."""
    name = f"{op.package}.cann_tiling" if op.package else None
    return importlib.import_module(name) if name and importlib.util.find_spec(name) else None


def opgen_line(op, tag: str, problem, target, knobs: dict | None = None) -> Line:
    """opgen's line for ``op`` on ``problem``: its kernel's tensors in parameter order."""
    combo = op.combo(tag)
    func = te.create_prim_func(op.compute(combo))
    shapes = op.api.kernel_shapes(problem)
    return opgen_line_of(func, [shapes[name] for name in op.kernel_inputs(combo)], target, knobs)


def opgen_line_of(func, shapes: list, target, knobs: dict | None = None) -> Line:
    """opgen's line for a PrimFunc and its tensor ``shapes`` in parameter order."""
    rule = schedules.match(func, target)
    if not hasattr(rule, "tiling"):                      # no Ascend pattern: nothing emitted
        return Line("opgen", "NOT EMITTED", 0, 0, "-", None, None, "-", None)
    try:
        t = rule.tiling(func, target, schedules.full_point(rule, target, knobs), shapes)
    except (UbBudgetError, CopyAlignmentError) as err:     # the product cannot run this shape
        return Line("opgen", f"refused: {type(err).__name__}", 0, 0, "-", None, None, "-", None)
    return Line("opgen", t.mode, t.block_dim, t.block_factor, f"{t.ub_rows} x {t.ub_cols}",
                t.ub_bytes(target.hardware.block_bytes), t.gm_bytes, t.sums, t.workspace_bytes)


def _first_f32(op) -> str:
    return next((c.tag for c in op.combos if c.tag.startswith("f32")), op.combos[0].tag)


def op_cases(op, target) -> list[Case]:
    """The report's cases of one op: its package's CANN cases and formula, else its
    benchmark shapes with opgen's line alone."""
    formulas = cann_formulas(op)
    label = getattr(formulas, "LABEL", op.aclnn_name.removeprefix("aclnn"))
    cases = getattr(formulas, "CASES", [(shape, _first_f32(op)) for shape in op.cases.bench])
    plan = getattr(formulas, "plan", None)
    note = getattr(formulas, "NOTE", NO_FORMULA)
    product = target.hardware.product
    if plan and product not in getattr(formulas, "PRODUCTS", (product,)):
        # CANN runs other kernels there: A2's formulas would compare against nothing real.
        plan, note = None, getattr(formulas, "ELSEWHERE", {}).get(product, f"CANN: these formulas are not "
                                                                           f"CANN's tiling on {product}")
    result = []
    for spelling, tag in cases:
        problem = op.parse_problem(spelling)
        mine = opgen_line(op, tag, problem, target)
        cann = plan(problem, _itemsize(tag), target.hardware.vector_cores) if plan else None
        result.append(Case(f"{label} {problem} {tag.split('-')[0]}", mine,
                           Line("CANN", **cann) if cann else None, "" if cann else note))
    return result


def report_lines(product: str, cores: int | None = None) -> list[Case]:
    """Every registered op's cases on ``product`` (with ``cores`` vector cores if given)."""
    target = TARGET.for_product(product)
    if cores is not None:
        target = replace(target, hardware=target.hardware.with_cores(cores))
    return [case for op in all_ops() for case in op_cases(op, target)]


def _fmt(value) -> str:
    return "-" if value is None else f"{value:,}" if isinstance(value, int) else str(value)


def render(product: str, cores: int | None = None) -> str:
    target = TARGET.for_product(product)
    hw = target.hardware if cores is None else target.hardware.with_cores(cores)
    head = (f"{'':6} {'mode':<14} {'cores':>5} {'per core':>8} {'per UB pass':>13} {'UB bytes':>9} "
            f"{'GM bytes':>13} {'sums':<13} {'workspace':>9}")
    out = [f"opgen tiling on {hw.summary()}",
           f"CANN's formulas (on the products where ops-nn runs them) with this product's {hw.vector_cores} cores "
           f"and {CANN_UB} B UB; ops-nn's tiling tests inline their own core count per op (a cann_tiling.py's "
           f"TEST_CORES): --cores N reproduces their splits", ""]
    for case in report_lines(product, cores):
        out += [case.label, head]
        for ln in (case.opgen, case.cann):
            if ln is None:
                out.append(f"{'':6} ({case.note})")
                continue
            out.append(f"{ln.source:<6} {ln.mode:<14} {ln.cores:>5} {ln.per_core:>8} {ln.per_pass:>13} "
                       f"{_fmt(ln.ub_bytes):>9} {_fmt(ln.gm_bytes):>13} {ln.sums:<13} {_fmt(ln.workspace):>9}")
        out.append("")
    return "\n".join(out)


def add_arguments(parser) -> None:
    parser.add_argument("--product", default="AtlasA2", help="product whose hardware description applies "
                        f"(default AtlasA2: the platform of ops-nn's tiling tests; one of {', '.join(PRODUCTS)})")
    parser.add_argument("--cores", type=int, default=None, help="override the product's vector core count")


def main(args) -> int:
    if args.product not in DESCRIPTIONS:
        print(f"opgen {COMMAND}: unknown product {args.product!r}; known: {', '.join(sorted(DESCRIPTIONS))}",
              file=sys.stderr)
        return 2
    if args.cores is not None and args.cores < 1:
        print(f"opgen {COMMAND}: --cores must be at least 1, got {args.cores}", file=sys.stderr)
        return 2
    print(render(args.product, args.cores))
    return 0

