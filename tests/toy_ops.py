"""Ops defined only in the tests, to show that schedules and emitters know patterns, not ops."""
from __future__ import annotations

from tvm import te


def row_softmax():
    """Softmax over the rows of a float16 (rows, cols) input: a max reduction, exp, a sum
    reduction and a division per row; no column sums. Returns the PrimFunc."""
    rows, cols = te.var("rows", "int64"), te.var("cols", "int64")
    x = te.placeholder((rows, cols), "float16", name="x")
    k = te.reduce_axis((0, cols), name="k")
    row_max = te.compute((rows,), lambda r: te.max(x[r, k].astype("float32"), axis=k), name="sm_max")
    k2 = te.reduce_axis((0, cols), name="k2")
    row_sum = te.compute((rows,), lambda r: te.sum(te.exp(x[r, k2].astype("float32") - row_max[r]), axis=k2),
                         name="sm_sum")
    y = te.compute((rows, cols), lambda r, c: (te.exp(x[r, c].astype("float32") - row_max[r]) / row_sum[r])
                   .astype("float16"), name="sm_y")
    return te.create_prim_func([x, y]).with_attr("global_symbol", "test_row_softmax")
