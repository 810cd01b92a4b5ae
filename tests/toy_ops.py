"""Ops defined only in the tests, to show that schedules and emitters know patterns, not ops."""
from __future__ import annotations

import numpy as np
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


def two_output_row_pass():
    """A row pass with two elementwise outputs and two column sums (DeepNorm's shape):
    dot[r] = sum_c dy*g*x; y1 = dy*g - x*dot/cols; y2 = 2*y1 + x; s1[c] = sum_r dy*x;
    s2[c] = sum_r dy. float32 throughout. Returns the PrimFunc (inputs dy, x, g)."""
    rows, cols = te.var("rows", "int64"), te.var("cols", "int64")
    dy = te.placeholder((rows, cols), "float32", name="dy")
    x = te.placeholder((rows, cols), "float32", name="x")
    g = te.placeholder((cols,), "float32", name="g")
    k = te.reduce_axis((0, cols), name="k")
    dot = te.compute((rows,), lambda r: te.sum(dy[r, k] * g[k] * x[r, k], axis=k), name="two_dot")
    coef = te.compute((rows,), lambda r: dot[r] / cols.astype("float32"), name="two_coef")
    y1 = te.compute((rows, cols), lambda r, c: dy[r, c] * g[c] - x[r, c] * coef[r], name="two_y1")
    y2 = te.compute((rows, cols), lambda r, c: (dy[r, c] * g[c] - x[r, c] * coef[r]) * 2.0 + x[r, c],
                    name="two_y2")
    j = te.reduce_axis((0, rows), name="j")
    s1 = te.compute((cols,), lambda c: te.sum(dy[j, c] * x[j, c], axis=j), name="two_s1")
    j2 = te.reduce_axis((0, rows), name="j2")
    s2 = te.compute((cols,), lambda c: te.sum(dy[j2, c], axis=j2), name="two_s2")
    return te.create_prim_func([dy, x, g, y1, y2, s1, s2]).with_attr("global_symbol", "test_two_output_rows")


def two_output_row_pass_reference(dy, x, g) -> list:
    dy, x, g = (a.astype("float64") for a in (dy, x, g))
    dot = (dy * g * x).sum(axis=1, keepdims=True)
    y1 = dy * g - x * dot / max(x.shape[1], 1)
    return [y1, 2 * y1 + x, (dy * x).sum(axis=0), dy.sum(axis=0)]


def build_toy(func, target):
    """(module, symbol, parameter buffers) of a toy PrimFunc, through opgen's kernel path
    (one schedule by the target's matching rule, shared buffers hoisted, element alignment
    declared, the target's own build)."""
    import tvm

    from opgen import kernels, schedules

    symbol = func.attrs["global_symbol"]
    sch = schedules.schedule(func, target)
    lowered = kernels.declare_element_alignment(kernels.hoist_pass_buffers(sch))
    return target.build(tvm.IRModule({symbol: lowered})), symbol, lowered.params


def run_toy(target, built, inputs: list, output_dtypes: list):
    """Run a built toy on numpy ``inputs``; returns the outputs (NaN-filled before, so a
    skipped element shows). Scratch (hoisted buffers) is sized from the inputs' extents,
    unless the target sizes its own (ascend-emu)."""
    import numpy as np
    import tvm

    from tvm.sym.analyzer import Analyzer

    module, symbol, params = built
    dev = target.device()
    analyzer, bound = Analyzer(), set()
    for buf, array in zip(params, inputs):
        for extent, value in zip(buf.shape, array.shape):
            if isinstance(extent, tvm.tirx.Var) and extent.name not in bound:
                analyzer.bind(extent, int(value))
                bound.add(extent.name)

    def concrete(buf):
        return [int(analyzer.simplify(e)) for e in buf.shape]
    n_out = len(output_dtypes)
    out_params = params[len(inputs):len(inputs) + n_out]
    outputs = [np.full(concrete(b), np.nan, dt) for b, dt in zip(out_params, output_dtypes)]
    args = [tvm.runtime.tensor(a, dev) for a in list(inputs) + outputs]
    if target.scratch_of(module) is None:
        args += [tvm.runtime.empty(concrete(b), str(b.dtype), dev) for b in params[len(inputs) + n_out:]]
    module[symbol](*args)
    return [a.numpy() for a in args[len(inputs):len(inputs) + n_out]]


def channel_pass():
    """BatchNorm's shape: a per-channel stage the sums read (the statistics), per-channel
    sums over N and the spatial axis of x (N, C, HW), per-channel scalars, an elementwise
    output over (N, C, HW) and the sums as outputs: sh[c] = 2*shift[c]; s1[c] = sum dy;
    s2[c] = sum dy*(x - sh[c]); k[c] = s2[c] / (N*HW); y = dy - (x - sh[c])*k[c] - s1[c]/(N*HW).
    float32 throughout. Returns the PrimFunc (inputs dy, x, shift; outputs y, s1, s2)."""
    n, c, hw = (te.var(v, "int64") for v in ("n", "c", "hw"))
    dy = te.placeholder((n, c, hw), "float32", name="dy")
    x = te.placeholder((n, c, hw), "float32", name="x")
    shift = te.placeholder((c,), "float32", name="shift")
    sh = te.compute((c,), lambda ch: shift[ch] * 2.0, name="chan_sh")
    bn, bhw = te.reduce_axis((0, n), name="bn"), te.reduce_axis((0, hw), name="bhw")
    s1 = te.compute((c,), lambda ch: te.sum(dy[bn, ch, bhw], axis=[bn, bhw]), name="chan_s1")
    bn2, bhw2 = te.reduce_axis((0, n), name="bn2"), te.reduce_axis((0, hw), name="bhw2")
    s2 = te.compute((c,), lambda ch: te.sum(dy[bn2, ch, bhw2] * (x[bn2, ch, bhw2] - sh[ch]), axis=[bn2, bhw2]),
                    name="chan_s2")
    count = (n * hw).astype("float32")
    k = te.compute((c,), lambda ch: s2[ch] / count, name="chan_k")
    m = te.compute((c,), lambda ch: s1[ch] / count, name="chan_m")
    y = te.compute((n, c, hw), lambda i, ch, j: dy[i, ch, j] - (x[i, ch, j] - sh[ch]) * k[ch] - m[ch],
                   name="chan_y")
    return te.create_prim_func([dy, x, shift, y, s1, s2]).with_attr("global_symbol", "test_channel_pass")


def channel_pass_reference(dy, x, shift) -> list:
    dy, x, sh = dy.astype("float64"), x.astype("float64"), 2 * shift.astype("float64")[None, :, None]
    count = max(dy.shape[0] * dy.shape[2], 1)
    s1, s2 = dy.sum(axis=(0, 2)), (dy * (x - sh)).sum(axis=(0, 2))
    return [dy - (x - sh) * (s2 / count)[None, :, None] - (s1 / count)[None, :, None], s1, s2]


def group_pass_with_prologue():
    """GroupNorm's shape behind an elementwise prologue (GroupNormSwish's): x, dy (N, G, D,
    HW); p = dy * sigmoid(x) (the prologue, over the whole data); ds = sum_hw p*x, db =
    sum_hw p per (n, g, d); c[n, g] = sum_d ds / (D*HW); y = p - x*c[n, g]; s[g, d] = sum_n db.
    float32. Returns the PrimFunc (inputs dy, x; outputs y, s)."""
    n, g, d, hw = (te.var(v, "int64") for v in ("n", "g", "d", "hw"))
    dy = te.placeholder((n, g, d, hw), "float32", name="dy")
    x = te.placeholder((n, g, d, hw), "float32", name="x")
    p = te.compute((n, g, d, hw), lambda a, b, c, i: dy[a, b, c, i] * te.sigmoid(x[a, b, c, i]), name="pro_p")
    k = te.reduce_axis((0, hw), name="k")
    ds = te.compute((n, g, d), lambda a, b, c: te.sum(p[a, b, c, k] * x[a, b, c, k], axis=k), name="pro_ds")
    k2 = te.reduce_axis((0, hw), name="k2")
    db = te.compute((n, g, d), lambda a, b, c: te.sum(p[a, b, c, k2], axis=k2), name="pro_db")
    e = te.reduce_axis((0, d), name="e")
    total = te.compute((n, g), lambda a, b: te.sum(ds[a, b, e], axis=e), name="pro_total")
    cg = te.compute((n, g), lambda a, b: total[a, b] / (d * hw).astype("float32"), name="pro_c")
    y = te.compute((n, g, d, hw), lambda a, b, c, i: p[a, b, c, i] - x[a, b, c, i] * cg[a, b], name="pro_y")
    j = te.reduce_axis((0, n), name="j")
    s = te.compute((g, d), lambda b, c: te.sum(db[j, b, c], axis=j), name="pro_s")
    return te.create_prim_func([dy, x, y, s]).with_attr("global_symbol", "test_group_prologue")


def group_pass_with_prologue_reference(dy, x) -> list:
    dy, x = dy.astype("float64"), x.astype("float64")
    p = dy / (1 + np.exp(-x))
    c = (p * x).sum(axis=(2, 3)) / max(x.shape[2] * x.shape[3], 1)
    return [p - x * c[:, :, None, None], p.sum(axis=(0, 3))]


def channel_pass_with_output_stages():
    """BatchNorm's shape as its TE orders it: the statistic the sums read (sh) placed after
    the first sum in program order, a stage of inputs alone read after the sums (inv),
    and per-channel outputs that are stages of the sums (g = s2 * inv, b = s1), not the sums
    themselves: sh[c] = 2*shift[c]; inv[c] = 1/(1 + shift[c]^2); s1 = sum dy;
    s2 = sum dy*(x - sh); y = (dy - s1/(N*HW) - (x - sh)*s2/(N*HW)) * inv; g = s2*inv; b = s1.
    Returns the PrimFunc (inputs dy, x, shift; outputs y, g, b)."""
    n, c, hw = (te.var(v, "int64") for v in ("n", "c", "hw"))
    dy = te.placeholder((n, c, hw), "float32", name="dy")
    x = te.placeholder((n, c, hw), "float32", name="x")
    shift = te.placeholder((c,), "float32", name="shift")
    bn, bhw = te.reduce_axis((0, n), name="bn"), te.reduce_axis((0, hw), name="bhw")
    s1 = te.compute((c,), lambda ch: te.sum(dy[bn, ch, bhw], axis=[bn, bhw]), name="cho_s1")
    count = (n * hw).astype("float32")
    m = te.compute((c,), lambda ch: s1[ch] / count, name="cho_m")
    sh = te.compute((c,), lambda ch: shift[ch] * 2.0, name="cho_sh")
    bn2, bhw2 = te.reduce_axis((0, n), name="bn2"), te.reduce_axis((0, hw), name="bhw2")
    s2 = te.compute((c,), lambda ch: te.sum(dy[bn2, ch, bhw2] * (x[bn2, ch, bhw2] - sh[ch]), axis=[bn2, bhw2]),
                    name="cho_s2")
    inv = te.compute((c,), lambda ch: 1.0 / (1.0 + shift[ch] * shift[ch]), name="cho_inv")
    y = te.compute((n, c, hw), lambda i, ch, j: (dy[i, ch, j] - m[ch] - (x[i, ch, j] - sh[ch]) * s2[ch] / count)
                   * inv[ch], name="cho_y")
    g = te.compute((c,), lambda ch: s2[ch] * inv[ch], name="cho_g")
    b = te.compute((c,), lambda ch: s1[ch], name="cho_b")
    return te.create_prim_func([dy, x, shift, y, g, b]).with_attr("global_symbol", "test_channel_output_stages")


def channel_pass_with_output_stages_reference(dy, x, shift) -> list:
    dy, x, shift = dy.astype("float64"), x.astype("float64"), shift.astype("float64")
    sh, inv = 2 * shift[None, :, None], 1 / (1 + shift * shift)
    count = max(dy.shape[0] * dy.shape[2], 1)
    s1, s2 = dy.sum(axis=(0, 2)), (dy * (x - sh)).sum(axis=(0, 2))
    y = (dy - (s1 / count)[None, :, None] - (x - sh) * (s2 / count)[None, :, None]) * inv[None, :, None]
    return [y, s2 * inv, s1]
