"""``opgen tiling``: opgen's Ascend tiling next to CANN's hand-written formulas.

For the shapes of ops-nn's tiling tests, one row from opgen's schedule (schedules/ascend.py
on the product's hardware description) and one from CANN's formulas, transcribed from
ops-nn's norm/rms_norm_grad/op_host/rms_norm_grad_tiling.cpp (LargeNSmallD, LargeNLargeD,
CalcSmallDBufferSize) and norm/group_norm_grad/op_host/group_norm_grad_tiling.cpp
(PlanStepCoreUsage, CalStage1TilingInfo, CalStage2TilingInfo): their Atlas A2/A3 paths.
BatchNormGrad (the channel pattern) has opgen's rows only, once that op is registered:
CANN's A2/A3 tiling for it lives in TBE kernels outside ops-nn.

Columns: mode; cores used; rows (tasks, channels) per core; rows x columns (channels x HxW
elements, batch rows x HxW elements) per UB pass; UB bytes; GM bytes moved; column sums; GM workspace bytes.
CANN's UB bytes are what its formulas budget (its kernels' exact allocations are not in
the tiling code); CANN's GM bytes apply opgen's traffic model to CANN's tiling (same
counting: every tile read once per pass over it, broadcast inputs once per core or per
row, column-sum partials written and read back), so the two columns compare plans, not
measurements. Op names are fine here: this module compares against per-op CANN code.

The Ascend target declares this module among its ``tools``: ``opgen`` adds the command
``COMMAND`` with ``add_arguments`` and ``main`` (opgen.cli).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, replace

from tvm import te

from opgen import schedules
from opgen.products import PRODUCTS
from opgen.ops import all_ops, get_op
from opgen.schedules.ascend_tiling import CopyAlignmentError, UbBudgetError, ceil_div
from opgen.targets.ascend import TARGET
from opgen.targets.ascend.hardware import DESCRIPTIONS

COMMAND = "tiling"
HELP = "opgen's Ascend tiling next to CANN's formulas, on ops-nn's test shapes"


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


RMS_CASES = (((16, 16), "f16-f16"), ((16, 12288), "f16-f16"), ((130, 16), "bf16-bf16"), ((16, 12290), "bf16-bf16"))
GN_CASES = (((12, 64, 128 * 128, 32), "f32-f32"), ((1, 2130, 1664, 71), "f32-f32"), ((32, 64, 1, 64), "f32-f32"))
# BatchNormGrad (the channel pattern), shown when the op is registered: ResNet-50 layers and a
# ragged one, in its problem spelling. No CANN formula beside them: on Atlas A2/A3 the
# op_api runs TBE kernels (BNTrainingUpdateGrad / BNTrainingReduceGrad / BNInferGrad) whose
# tiling is not in ops-nn (docs/specs/aclnnBatchNormBackward.md); the Ascend 950's AscendC
# tiling (batch_norm_grad_v3) is not transcribed here.
BN_OP = "batch_norm_backward"
BN_CASES = (("32x64x56x56", "f32-f32"), ("256x2048x7x7", "f16-f16"), ("2x33x941", "f32-f32"))
NO_CANN_LINE = "(CANN: TBE kernels on A2/A3, their tiling is not public; nothing to set beside)"
CANN_UB = 196608           # the UB size of ops-nn's tiling tests (Atlas A2)


def _itemsize(tag: str) -> int:
    return 4 if tag.startswith("f32") else 2


def opgen_line(op_name: str, combo: str, shapes: list, target, knobs: dict | None = None) -> Line:
    op = get_op(op_name)
    return opgen_line_of(te.create_prim_func(op.compute(op.combo(combo))), shapes, target, knobs)


def opgen_line_of(func, shapes: list, target, knobs: dict | None = None) -> Line:
    """opgen's line for a PrimFunc and its tensor ``shapes`` in parameter order."""
    rule = schedules.match(func, target)
    try:
        t = rule.tiling(func, target, schedules.full_point(rule, target, knobs), shapes)
    except (UbBudgetError, CopyAlignmentError) as err:     # the product cannot run this shape
        return Line("opgen", f"refused: {type(err).__name__}", 0, 0, "-", None, None, "-", None)
    return Line("opgen", t.mode, t.block_dim, t.block_factor, f"{t.ub_rows} x {t.ub_cols}",
                t.ub_bytes(target.hardware.block_bytes), t.gm_bytes, t.sums, t.workspace_bytes)


def cann_rms_norm_grad(rows: int, cols: int, item: int, cores: int) -> Line:
    """rms_norm_grad_tiling.cpp, Tiling4RmsNormGrad (non-regbase path), atomic dgamma
    (fixed_output = GetDeterministic(), 0 by default)."""
    align = 8 if item == 4 else 16
    col_align = ceil_div(cols, align) * align
    block_factor = ceil_div(rows, cores)
    block_dim = ceil_div(rows, block_factor)
    if cols <= 6080:
        buffer_size, mode, ub_bytes = 6080, "split-N", None
        if col_align <= 640:
            ub_rows = (195584 - col_align * 10) // (col_align * 24 + 268)
            buffer_size, mode = ub_rows * col_align, "small-D"
            ub_bytes = min(ub_rows, block_factor) * (col_align * 24 + 268) + col_align * 10
        ub_rows, ub_cols, reread = min(buffer_size // col_align, block_factor), cols, 1
    else:
        mode, ub_rows, ub_cols, reread, ub_bytes = "split-D", 1, 4096, 2, None
    gm = reread * 2 * rows * cols * item + rows * cols * item + rows * 4
    gm += (block_dim if mode != "split-D" else reread * rows) * cols * item + block_dim * cols * 4
    return Line("CANN", mode, block_dim, block_factor, f"{ub_rows} x {ub_cols}", ub_bytes, gm, "atomic",
                8 * block_dim * 4)


def cann_group_norm_grad(n: int, c: int, hxw: int, g: int, item: int, cores: int, ub: int = CANN_UB) -> Line:
    """group_norm_grad_tiling.cpp, GroupNormGradTiling::Init (non-regbase path)."""
    dtype_bytes = 4 if item == 4 else item + 4          # fp16/bf16 budget their fp32 copies
    epb = 32 // (4 if item == 4 else item)
    rnd = lambda a, b: ceil_div(a, b) * b                # noqa: E731  (CANN's Ceil)
    cpg, nxg = c // g, n * g
    reserve = 1024 + rnd(cpg, epb) * dtype_bytes * 3
    per_core = ceil_div(nxg, cores)
    used = ceil_div(nxg, per_core)
    extra = 0 if (hxw % 8 == 0 or cpg == 1) else 2 * rnd(hxw, epb) * 4
    cap_g = max(ub - reserve - extra, 0) // (rnd(cpg * hxw, epb) * dtype_bytes * 3)
    cap_c = (ub - reserve) // (rnd(hxw, epb) * dtype_bytes * 3)
    unit = rnd(hxw, epb) * dtype_bytes * 3
    if hxw == 1:
        mode, chans, elems, ub_bytes = "hw1 (5)", cpg, 1, reserve + rnd(cpg, epb) * dtype_bytes * 3
    elif cap_g > 0:
        mode, chans, elems, ub_bytes = "group (0)", cpg, hxw, reserve + extra + rnd(cpg * hxw, epb) * dtype_bytes * 3
    elif cap_c == 1:
        mode, chans, elems, ub_bytes = "channel (1)", 1, hxw, reserve + unit
    elif cap_c > 1:
        mode, chans, elems, ub_bytes = "channels (2)", cap_c, hxw, reserve + cap_c * unit
    else:
        cap_e = (ub - reserve) // (dtype_bytes * 3) // (epb * 8) * (epb * 8)
        mode, chans, elems, ub_bytes = "hw-chunk (3)", 1, cap_e, reserve + cap_e * dtype_bytes * 3
    deterministic = n > 2
    workspace = 2 * ceil_div(n, 2) * c * 4 if deterministic else 0
    reread = 1 if mode.startswith(("group", "hw1")) else 2
    elems_total = n * c * hxw
    gm = reread * 2 * elems_total * item + elems_total * item + 2 * nxg * item + nxg * cpg * item
    gm += 2 * nxg * cpg * 4 + (2 * workspace if deterministic else 0) + 2 * c * item
    return Line("CANN", mode, used, per_core, f"{chans} x {elems}", ub_bytes, gm,
                "deterministic" if deterministic else "atomic", workspace)


def report_lines(product: str, cores: int | None = None) -> list[tuple[str, Line, Line | None]]:
    """(case label, opgen's line, CANN's line or None where no formula is public) for every
    tiling-test shape, and BatchNormGrad's cases when that op is registered."""
    target = TARGET.for_product(product)
    if cores is not None:
        target = replace(target, hardware=target.hardware.with_cores(cores))
    n_cores = target.hardware.vector_cores
    result = []
    for (rows, cols), combo in RMS_CASES:
        label = f"RmsNormGrad ({rows},{cols}) {combo.split('-')[0]}"
        mine = opgen_line("rms_norm_grad", combo, [(rows, cols)], target)
        result.append((label, mine, cann_rms_norm_grad(rows, cols, _itemsize(combo), n_cores)))
    for (n, c, hxw, g), combo in GN_CASES:
        label = f"GroupNormGrad N={n} C={c} HxW={hxw} G={g} {combo.split('-')[0]}"
        mine = opgen_line("group_norm_backward", combo, [(n, g, c // g, hxw)], target)
        result.append((label, mine, cann_group_norm_grad(n, c, hxw, g, _itemsize(combo), n_cores)))
    if BN_OP in {op.name for op in all_ops()}:
        op = get_op(BN_OP)
        for text, combo in BN_CASES:
            shapes = op.api.kernel_shapes(type(op.problems[0]).parse(text))
            mine = opgen_line(BN_OP, combo, [shapes[name] for name in op.inputs], target)
            result.append((f"BatchNormGrad {text} {combo.split('-')[0]}", mine, None))
    return result


def _fmt(value) -> str:
    return "-" if value is None else f"{value:,}" if isinstance(value, int) else str(value)


def render(product: str, cores: int | None = None) -> str:
    target = TARGET.for_product(product)
    hw = target.hardware if cores is None else target.hardware.with_cores(cores)
    head = (f"{'':6} {'mode':<14} {'cores':>5} {'per core':>8} {'per UB pass':>13} {'UB bytes':>9} "
            f"{'GM bytes':>13} {'sums':<13} {'workspace':>9}")
    out = [f"opgen tiling on {hw.summary()}",
           f"CANN's formulas with {hw.vector_cores} cores and {CANN_UB} B UB (its tiling tests' platform)", ""]
    for label, *lines in report_lines(product, cores):
        out += [label, head]
        for ln in lines:
            if ln is None:
                out.append(f"{'':6} {NO_CANN_LINE}")
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

