"""How many float32 scratch tiles an Ascend kernel's vector expressions need.

The AscendC emitter (targets/ascend/exprs.py) computes a stage's expression over whole UB
tiles: every vector sub-expression that is not a load (a tile, or a column vector computed from a
column load, such as 1 + g[c], in the first P elements of its tile) lives in a float32
scratch tile taken from a pool, and a binary operation writes its result over its left
operand's scratch tile, else its right one's, else a fresh one. The UB budget must hold
exactly that pool: one tile too many is UB that split-N could have used for whole rows
(RmsNormGrad on 5120 float32 columns fits a row with one scratch tile, not with two), one
too few and the emitter refuses the kernel. This module counts the pool the same way (a
Sethi-Ullman count over the expression tree) so the tiling can budget it; the emitter
records what it actually took, and tests/test_ascend.py checks the two agree for every op.

A load is a vector when it is indexed by the column iterator (a tile or a column vector
of the pass); loads by row, constants and sizes are scalar code and take no tile.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

BINARY = ("Add", "Sub", "Mul", "Div", "Max", "Min")
LOADS = ("BufferLoad", "TensorLoad")   # TVM 0.27 names a buffer load TensorLoad


@dataclass(frozen=True)
class Need:
    vector: bool     # the value is a UB vector (a tile or a column), not scalar code
    scratch: bool    # it lives in a scratch tile it owns (a computed vector)
    peak: int        # the most scratch tiles held at once while computing it


SCALAR = Need(False, False, 0)

# Output dtypes a float32 tile reaches only through half: Atlas A2's vector Cast has no
# float -> int8_t (asc-devkit docs/api/context/Cast.md, table 4), so the store rounds the
# value to an integer in float32 (in its own scratch tile, or a fresh one for a loaded tile)
# and stages the half in a second tile before the half -> int8_t Cast (the Ascend emitter's
# via_half).
VIA_HALF = ("int8",)


def _load(node, col_var: str) -> Need:
    vector = any(re.search(rf"\b{re.escape(col_var)}\b", str(index)) for index in node.indices)
    return Need(vector, False, 0)


def _binary(a: Need, b: Need) -> Need:
    if not (a.vector or b.vector):
        return SCALAR
    held = int(a.scratch)                        # a's tile is held while b is computed
    fresh = 0 if (a.scratch or b.scratch) else 1  # the result reuses an operand's tile, else takes one
    return Need(True, True, max(a.peak, held + b.peak, held + int(b.scratch), fresh))


def _unary(a: Need) -> Need:
    if not a.vector:
        return SCALAR
    return Need(True, True, max(a.peak, 1))


def need(node, col_var: str) -> Need:
    """The scratch-tile need of a float32 TIR expression (exprs.emit_expr's pool policy)."""
    kind = type(node).__name__
    if kind in BINARY:
        return _binary(need(node.a, col_var), need(node.b, col_var))
    if kind in LOADS:
        return _load(node, col_var)
    if kind == "Cast":
        return need(node.value, col_var)
    if kind == "Call":
        if node.op.name.endswith(".if_then_else"):
            return SCALAR                         # scalar selects only (exprs refuses vector ones)
        return _unary(need(node.args[0], col_var))
    return SCALAR


def stage_expression(blk):
    """The float32 expression a stage computes over its tiles: the update E of a reduction
    ``acc = acc op E``, or an elementwise value without its final rounding Cast (what
    exprs.reduction_of and exprs.stored_value hand the emitter)."""
    value = blk.body.value
    if any(iv.iter_type == 2 for iv in blk.iter_vars):
        return value.b
    if type(value).__name__ == "Cast" and str(value.dtype if hasattr(value, "dtype") else value.ty) != "float32":
        return value.value
    return value


def stored_dtype(blk) -> str | None:
    """The dtype an elementwise stage's final Cast rounds to (None for a reduction or no Cast)."""
    value = blk.body.value
    if any(iv.iter_type == 2 for iv in blk.iter_vars) or type(value).__name__ != "Cast":
        return None
    return str(value.dtype if hasattr(value, "dtype") else value.ty)


def stage_peak(blk, col_var: str) -> int:
    """Scratch tiles one stage holds at once: its expression's, and for a store through half
    the rounded value plus the half staging tile (two)."""
    peak = need(stage_expression(blk), col_var).peak
    return max(peak, 2) if stored_dtype(blk) in VIA_HALF else peak


def scratch_tiles(stages, output_slots: set) -> int:
    """Scratch tiles of the pool for ``stages`` [(name, SBlock, column iterator name)]: the
    largest need of one stage. A stage named in ``output_slots`` computes straight into its
    output queue's tile (a float32 output), which serves as the first tile of its pool. At
    least one: the final column-sum pass stages its copy-ins in it."""
    most = 1
    for name, blk, col_var in stages:
        peak = stage_peak(blk, col_var)
        most = max(most, peak - 1 if name in output_slots else peak)
    return most
