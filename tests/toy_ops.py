"""Ops defined only in the tests, to show that schedules and emitters know patterns, not ops."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tvm import te

from opgen.ops.spec import TrailingAxesProblem


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


def row_pass_rounded_column_sums(dtype: str = "float32"):
    """A row pass whose column sums are float32 accumulators rounded to half outputs in
    stages of their own (LayerNormBackward's half-weight shape): dot[r] = sum_c dy*x;
    y = dy - x*dot/cols; s16[c] = float16(sum_r dy*x); sbf[c] = bfloat16(sum_r dy), each
    sum in float32 and rounded once. Data (dy, x, y) in ``dtype``. Returns the PrimFunc
    (inputs dy, x; outputs y, s16, sbf)."""
    rows, cols = te.var("rows", "int64"), te.var("cols", "int64")
    dy = te.placeholder((rows, cols), dtype, name="dy")
    x = te.placeholder((rows, cols), dtype, name="x")
    f32 = lambda e: e.astype("float32")  # noqa: E731
    k = te.reduce_axis((0, cols), name="k")
    dot = te.compute((rows,), lambda r: te.sum(f32(dy[r, k]) * f32(x[r, k]), axis=k), name="rnd_dot")
    y = te.compute((rows, cols), lambda r, c: (f32(dy[r, c]) - f32(x[r, c]) * dot[r] / cols.astype("float32"))
                   .astype(dtype), name="rnd_y")
    j = te.reduce_axis((0, rows), name="j")
    acc16 = te.compute((cols,), lambda c: te.sum(f32(dy[j, c]) * f32(x[j, c]), axis=j), name="rnd_s16_acc")
    s16 = te.compute((cols,), lambda c: acc16[c].astype("float16"), name="rnd_s16")
    j2 = te.reduce_axis((0, rows), name="j2")
    acc_bf = te.compute((cols,), lambda c: te.sum(f32(dy[j2, c]), axis=j2), name="rnd_sbf_acc")
    sbf = te.compute((cols,), lambda c: acc_bf[c].astype("bfloat16"), name="rnd_sbf")
    return te.create_prim_func([dy, x, y, s16, sbf]).with_attr("global_symbol", f"test_rounded_sums_{dtype}")


def row_pass_rounded_column_sums_reference(dy, x) -> list:
    dy, x = dy.astype("float64"), x.astype("float64")
    dot = (dy * x).sum(axis=1, keepdims=True)
    return [dy - x * dot / max(x.shape[1], 1), (dy * x).sum(axis=0), dy.sum(axis=0)]


def row_pass_with_sums(row_sums: int, column_sums: int):
    """LayerNormBackward's float32 shape with ``row_sums`` (1-4) reductions over each row and
    ``column_sums`` (1-4) sums over the rows, to count accumulators: s0 = sum_c dy*g,
    s1 = sum_c dy*g*(x - mean), s2 = sum_c x*x, s3 = sum_c dy*x; y = rstd*dy*g - s0/cols -
    (x - mean)*s1*rstd - x*(s2 + s3)/cols; column sums of dy*(x - mean)*rstd, dy, x, dy*x.
    Returns the PrimFunc (inputs dy, x, mean, rstd, g; outputs y and the column sums)."""
    rows, cols = te.var("rows", "int64"), te.var("cols", "int64")
    dy = te.placeholder((rows, cols), "float32", name="dy")
    x = te.placeholder((rows, cols), "float32", name="x")
    mean = te.placeholder((rows,), "float32", name="mean")
    rstd = te.placeholder((rows,), "float32", name="rstd")
    g = te.placeholder((cols,), "float32", name="g")
    n = cols.astype("float32")
    row_bodies = [lambda r, k: dy[r, k] * g[k], lambda r, k: dy[r, k] * g[k] * (x[r, k] - mean[r]),
                  lambda r, k: x[r, k] * x[r, k], lambda r, k: dy[r, k] * x[r, k]]
    def summed(body, axis):   # fcompute takes no default arguments: bind each body here
        return lambda i: te.sum(body(i, axis), axis=axis)
    sums = [te.compute((rows,), summed(body, te.reduce_axis((0, cols), name=f"k{i}")), name=f"acc_s{i}")
            for i, body in enumerate(row_bodies[:row_sums])]

    def value(r, c):
        v = rstd[r] * dy[r, c] * g[c] - sums[0][r] / n
        if row_sums > 1:
            v = v - (x[r, c] - mean[r]) * sums[1][r] * rstd[r]
        for extra in sums[2:]:
            v = v - x[r, c] * extra[r] / n
        return v
    y = te.compute((rows, cols), value, name="acc_y")
    column_bodies = [lambda c, j: dy[j, c] * (x[j, c] - mean[j]) * rstd[j], lambda c, j: dy[j, c],
                     lambda c, j: x[j, c], lambda c, j: dy[j, c] * x[j, c]]
    outs = [te.compute((cols,), summed(body, te.reduce_axis((0, rows), name=f"j{i}")), name=f"acc_c{i}")
            for i, body in enumerate(column_bodies[:column_sums])]
    return te.create_prim_func([dy, x, mean, rstd, g, y] + outs).with_attr(
        "global_symbol", f"test_sums_{row_sums}_{column_sums}")


def build_toy(func, target, knobs: dict | None = None):
    """(module, symbol, parameter buffers) of a toy PrimFunc, through opgen's kernel path
    (one schedule by the target's matching rule at ``knobs``, shared buffers hoisted,
    element alignment declared, the target's own build)."""
    import tvm

    from opgen import kernels, schedules

    symbol = func.attrs["global_symbol"]
    sch = schedules.schedule(func, target, knobs)
    lowered = kernels.declare_element_alignment(kernels.hoist_pass_buffers(sch))
    return target.build(tvm.IRModule({symbol: lowered})), symbol, lowered.params


def run_toy(target, built, inputs: list, output_dtypes: list, fill=float("nan")):
    """Run a built toy on numpy ``inputs``; returns the outputs (filled with ``fill`` before,
    NaN by default, so a skipped element shows). Scratch (hoisted buffers) is sized from the inputs' extents,
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
    outputs = [np.full(concrete(b), fill, dt) for b, dt in zip(out_params, output_dtypes)]
    args = [tvm.runtime.tensor(a, dev) for a in list(inputs) + outputs]
    if target.scratch_of(module) is None:
        args += [tvm.runtime.empty(concrete(b), str(b.dtype), dev) for b in params[len(inputs) + n_out:]]
    module[symbol](*args)
    return [a.numpy() for a in args[len(inputs):len(inputs) + n_out]]


def segmented_row_pass():
    """A row pass over (segments, rows, cols) whose column sums restart at every segment
    (AdaLayerNorm's per-sample shape): dot[b, r] = sum_c dy*x; y = dy - x*dot/cols;
    s1[b, c] = sum_r dy*x and s2[b, c] = sum_r dy (scratch); p[b, c] = 2*s1 + s2 (an output
    per segment); t[c] = sum_b w*s2 (an output); u[c] = float16(sum_b s1) (a float32
    accumulator rounded by a cast). float32 data. Returns the PrimFunc (inputs dy, x, w;
    outputs y, p, t, u)."""
    segs, rows, cols = (te.var(n, "int64") for n in ("segs", "rows", "cols"))
    dy = te.placeholder((segs, rows, cols), "float32", name="dy")
    x = te.placeholder((segs, rows, cols), "float32", name="x")
    w = te.placeholder((segs, cols), "float32", name="w")
    k = te.reduce_axis((0, cols), name="k")
    dot = te.compute((segs, rows), lambda b, r: te.sum(dy[b, r, k] * x[b, r, k], axis=k), name="seg_dot")
    y = te.compute((segs, rows, cols), lambda b, r, c: dy[b, r, c] - x[b, r, c] * dot[b, r] / cols.astype("float32"),
                   name="seg_y")
    j = te.reduce_axis((0, rows), name="j")
    s1 = te.compute((segs, cols), lambda b, c: te.sum(dy[b, j, c] * x[b, j, c], axis=j), name="seg_s1")
    j2 = te.reduce_axis((0, rows), name="j2")
    s2 = te.compute((segs, cols), lambda b, c: te.sum(dy[b, j2, c], axis=j2), name="seg_s2")
    p = te.compute((segs, cols), lambda b, c: s1[b, c] * 2.0 + s2[b, c], name="seg_p")
    i = te.reduce_axis((0, segs), name="i")
    t = te.compute((cols,), lambda c: te.sum(w[i, c] * s2[i, c], axis=i), name="seg_t")
    i2 = te.reduce_axis((0, segs), name="i2")
    acc = te.compute((cols,), lambda c: te.sum(s1[i2, c], axis=i2), name="seg_u_acc")
    u = te.compute((cols,), lambda c: acc[c].astype("float16"), name="seg_u")
    return te.create_prim_func([dy, x, w, y, p, t, u]).with_attr("global_symbol", "test_segmented_row_pass")


def segmented_row_pass_reference(dy, x, w) -> list:
    dy, x, w = (a.astype("float64") for a in (dy, x, w))
    dot = (dy * x).sum(axis=2, keepdims=True)
    s1, s2 = (dy * x).sum(axis=1), dy.sum(axis=1)
    return [dy - x * dot / max(x.shape[2], 1), 2 * s1 + s2, (w * s2).sum(axis=0), s1.sum(axis=0)]


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


def channel_reduction():
    """SyncBatchNorm's reduce half: per-channel sums over N and the spatial axis of x (N, C,
    HW) and per-channel outputs computed from them, no elementwise output: s1[c] = sum dy;
    s2[c] = sum dy*(x - shift[c]); w[c] = s2[c] * scale[c]. float32 throughout. Returns the
    PrimFunc (inputs dy, x, shift, scale; outputs s1, s2, w)."""
    n, c, hw = (te.var(v, "int64") for v in ("n", "c", "hw"))
    dy = te.placeholder((n, c, hw), "float32", name="dy")
    x = te.placeholder((n, c, hw), "float32", name="x")
    shift = te.placeholder((c,), "float32", name="shift")
    scale = te.placeholder((c,), "float32", name="scale")
    bn, bhw = te.reduce_axis((0, n), name="bn"), te.reduce_axis((0, hw), name="bhw")
    s1 = te.compute((c,), lambda ch: te.sum(dy[bn, ch, bhw], axis=[bn, bhw]), name="red_s1")
    bn2, bhw2 = te.reduce_axis((0, n), name="bn2"), te.reduce_axis((0, hw), name="bhw2")
    s2 = te.compute((c,), lambda ch: te.sum(dy[bn2, ch, bhw2] * (x[bn2, ch, bhw2] - shift[ch]), axis=[bn2, bhw2]),
                    name="red_s2")
    w = te.compute((c,), lambda ch: s2[ch] * scale[ch], name="red_w")
    return te.create_prim_func([dy, x, shift, scale, s1, s2, w]).with_attr("global_symbol", "test_channel_reduction")


def channel_map():
    """SyncBatchNorm's elemt half: an elementwise output over (N, C, HW) reading per-channel
    coefficients computed from a one-element sum of an input of any length (no sum over the
    data): total = sum counts; inv = 1 / total (a one-element scalar); a[c] = shift[c] * inv;
    b[c] = scale[c] * 2; y = (dy - a[c]) * b[c] - x. float32. Returns the PrimFunc (inputs dy, x, shift, scale, counts; output y)."""
    n, c, hw, k = (te.var(v, "int64") for v in ("n", "c", "hw", "k"))
    dy = te.placeholder((n, c, hw), "float32", name="dy")
    x = te.placeholder((n, c, hw), "float32", name="x")
    shift = te.placeholder((c,), "float32", name="shift")
    scale = te.placeholder((c,), "float32", name="scale")
    counts = te.placeholder((k,), "float32", name="counts")
    rk = te.reduce_axis((0, k), name="rk")
    total = te.compute((1,), lambda _: te.sum(counts[rk], axis=rk), name="map_total")
    inv = te.compute((1,), lambda _: te.const(1.0, "float32") / total[0], name="map_inv")
    a = te.compute((c,), lambda ch: shift[ch] * inv[0], name="map_a")
    b = te.compute((c,), lambda ch: scale[ch] * 2.0, name="map_b")
    y = te.compute((n, c, hw), lambda i, ch, j: (dy[i, ch, j] - a[ch]) * b[ch] - x[i, ch, j], name="map_y")
    return te.create_prim_func([dy, x, shift, scale, counts, y]).with_attr("global_symbol", "test_channel_map")


def channel_batch_weights():
    """A gather's shape: a per-batch-row input w (N,) weighting each batch row of x (N, C, HW)
    in the per-channel sums, one of which also reads the channel's first element (a shift
    guarded for an empty channel), and a per-channel output guarded by a size (no batch row:
    0): x0[c] = x[0, c, 0] if N*HW > 0 else 0; sw[c] = sum w[n]; s1[c] = sum w[n]*(x - x0[c]);
    m[c] = x0[c] + s1[c]/sw[c] if N > 0 else 0. float32. Returns the PrimFunc (inputs x, w;
    outputs sw, s1, m)."""
    n, c, hw = (te.var(v, "int64") for v in ("n", "c", "hw"))
    x = te.placeholder((n, c, hw), "float32", name="x")
    w = te.placeholder((n,), "float32", name="w")
    zero = te.const(0.0, "float32")

    def x0(ch):
        return te.if_then_else(n * hw > 0, x[0, ch, 0], zero)
    bn, bhw = te.reduce_axis((0, n), name="bn"), te.reduce_axis((0, hw), name="bhw")
    sw = te.compute((c,), lambda ch: te.sum(w[bn], axis=[bn, bhw]), name="wt_sw")
    bn2, bhw2 = te.reduce_axis((0, n), name="bn2"), te.reduce_axis((0, hw), name="bhw2")
    s1 = te.compute((c,), lambda ch: te.sum(w[bn2] * (x[bn2, ch, bhw2] - x0(ch)), axis=[bn2, bhw2]), name="wt_s1")
    m = te.compute((c,), lambda ch: te.if_then_else(n > 0, x0(ch) + s1[ch] / sw[ch], zero), name="wt_m")
    return te.create_prim_func([x, w, sw, s1, m]).with_attr("global_symbol", "test_channel_batch_weights")


def channel_batch_weights_reference(x, w) -> list:
    x, w = x.astype("float64"), w.astype("float64")
    n, c, hw = x.shape
    x0 = x[0, :, 0] if n * hw else np.zeros(c)
    sw = np.full(c, w.sum() * hw)
    s1 = (w[:, None, None] * (x - x0[None, :, None])).sum(axis=(0, 2))
    with np.errstate(divide="ignore", invalid="ignore"):
        m = x0 + s1 / sw if n else np.zeros(c)
    return [sw, s1, m]


def channel_map_reference(dy, x, shift, scale, counts) -> list:
    dy, x = dy.astype("float64"), x.astype("float64")
    a = shift.astype("float64") / counts.astype("float64").sum()
    return [(dy - a[None, :, None]) * 2 * scale.astype("float64")[None, :, None] - x]


def channel_reduction_reference(dy, x, shift, scale) -> list:
    dy, x = dy.astype("float64"), x.astype("float64")
    s1, s2 = dy.sum(axis=(0, 2)), (dy * (x - shift.astype("float64")[None, :, None])).sum(axis=(0, 2))
    return [s1, s2, s2 * scale]


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


def channel_pass_blended(dtype: str = "float32"):
    """The PrimFunc of ``channel_pass_blended_tensors``."""
    return te.create_prim_func(channel_pass_blended_tensors(dtype)).with_attr(
        "global_symbol", f"test_channel_blended_{dtype}")


def channel_pass_blended_tensors(dtype: str = "float32") -> list:
    """BatchNorm's shape as its backward writes it: a mode flag ``t`` and ``eps`` as (1,)
    float32 data, per-channel inputs w, m, v and data dy, x in ``dtype``; statistics blended
    by the mode (mean = t*m + (1-t)*m/2, inv = rsqrt(v + eps)), two scratch sums (s_dy = sum
    dy, s_xmu = sum (x - mean)*dy), stages after them (mdy = t*s_dy/M, proj =
    t*s_xmu*inv*inv/M), dx = (dy - mdy - (x - mean)*proj)*w*inv and the per-channel outputs
    dw = s_xmu*inv, db = s_dy, each rounded to ``dtype`` once. TE orders the blocks by a walk
    from dx: s_dy comes first, the statistics after it. Returns the TE tensors (inputs dy,
    x, w, m, v, eps, t; outputs dx, dw, db), like an op's ``compute``."""
    n, c, hw = (te.var(v, "int64") for v in ("n", "c", "hw"))
    dy = te.placeholder((n, c, hw), dtype, name="dy")
    x = te.placeholder((n, c, hw), dtype, name="x")
    w, m, v = (te.placeholder((c,), dtype, name=name) for name in ("w", "m", "v"))
    eps = te.placeholder((1,), "float32", name="eps")
    flag = te.placeholder((1,), "float32", name="t")
    f32 = lambda e: e.astype("float32")  # noqa: E731
    t = flag[0]
    mean = te.compute((c,), lambda ch: t * f32(m[ch]) + (1.0 - t) * f32(m[ch]) * 0.5, name="bl_mean")
    inv = te.compute((c,), lambda ch: te.rsqrt(f32(v[ch]) + eps[0]), name="bl_inv")
    bn, bh = te.reduce_axis((0, n), name="bn"), te.reduce_axis((0, hw), name="bh")
    s_dy = te.compute((c,), lambda ch: te.sum(f32(dy[bn, ch, bh]), axis=[bn, bh]), name="bl_s_dy")
    bn2, bh2 = te.reduce_axis((0, n), name="bn2"), te.reduce_axis((0, hw), name="bh2")
    s_xmu = te.compute((c,), lambda ch: te.sum((f32(x[bn2, ch, bh2]) - mean[ch]) * f32(dy[bn2, ch, bh2]),
                                               axis=[bn2, bh2]), name="bl_s_xmu")
    inv_m = 1.0 / (n * hw).astype("float32")
    mdy = te.compute((c,), lambda ch: t * s_dy[ch] * inv_m, name="bl_mdy")
    proj = te.compute((c,), lambda ch: t * s_xmu[ch] * inv[ch] * inv[ch] * inv_m, name="bl_proj")
    dx = te.compute((n, c, hw), lambda a, ch, i: ((f32(dy[a, ch, i]) - mdy[ch] - (f32(x[a, ch, i]) - mean[ch])
                                                   * proj[ch]) * f32(w[ch]) * inv[ch]).astype(dtype), name="bl_dx")
    dw = te.compute((c,), lambda ch: (s_xmu[ch] * inv[ch]).astype(dtype), name="bl_dw")
    db = te.compute((c,), lambda ch: s_dy[ch].astype(dtype), name="bl_db")
    return [dy, x, w, m, v, eps, flag, dx, dw, db]


def channel_pass_blended_reference(dy, x, w, m, v, eps, t) -> list:
    dy, x = dy.astype("float64"), x.astype("float64")
    w, m, v = (a.astype("float64")[None, :, None] for a in (w, m, v))
    eps, t = float(eps[0]), float(t[0])
    count = dy.shape[0] * dy.shape[2]
    mean = t * m + (1 - t) * m * 0.5
    inv = 1 / np.sqrt(v + np.float32(eps))
    s_dy, s_xmu = dy.sum(axis=(0, 2), keepdims=True), ((x - mean) * dy).sum(axis=(0, 2), keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        dx = (dy - t * s_dy / count - (x - mean) * t * s_xmu * inv * inv / count) * w * inv
    return [dx, (s_xmu * inv).reshape(-1), s_dy.reshape(-1)]


def channel_two_sums_in_sequence():
    """A sum over values that need another sum first (a centred second moment): s1 = sum x,
    mu = s1 / M, s2 = sum (x - mu)^2, y = (x - mu) * s2. One pass over the data cannot give
    s2, so no channel rule matches it. Returns the PrimFunc (input x; output y)."""
    n, c, hw = (te.var(v, "int64") for v in ("n", "c", "hw"))
    x = te.placeholder((n, c, hw), "float32", name="x")
    bn, bh = te.reduce_axis((0, n), name="bn"), te.reduce_axis((0, hw), name="bh")
    s1 = te.compute((c,), lambda ch: te.sum(x[bn, ch, bh], axis=[bn, bh]), name="seq_s1")
    mu = te.compute((c,), lambda ch: s1[ch] / (n * hw).astype("float32"), name="seq_mu")
    bn2, bh2 = te.reduce_axis((0, n), name="bn2"), te.reduce_axis((0, hw), name="bh2")
    s2 = te.compute((c,), lambda ch: te.sum((x[bn2, ch, bh2] - mu[ch]) * (x[bn2, ch, bh2] - mu[ch]),
                                            axis=[bn2, bh2]), name="seq_s2")
    y = te.compute((n, c, hw), lambda a, ch, i: (x[a, ch, i] - mu[ch]) * s2[ch], name="seq_y")
    return te.create_prim_func([x, y]).with_attr("global_symbol", "test_channel_two_sums")


def channel_two_sums_in_sequence_reference(x) -> list:
    x = x.astype("float64")
    centred = x - x.mean(axis=(0, 2), keepdims=True)
    return [centred * (centred * centred).sum(axis=(0, 2), keepdims=True)]


def blended_inputs(rng, shape, dtype, training: bool) -> list:
    """Inputs of ``channel_pass_blended``: data and per-channel values in ``dtype``, eps and
    the mode flag (1.0 training, 0.0 eval) as float32 (1,) arrays."""
    dy, x = (rng.standard_normal(shape).astype(dtype) for _ in range(2))
    w = rng.uniform(0.5, 1.5, shape[1]).astype(dtype)
    m = rng.standard_normal(shape[1]).astype(dtype)
    v = rng.uniform(0.5, 2.0, shape[1]).astype(dtype)
    return [dy, x, w, m, v, np.full(1, 1e-5, np.float32), np.full(1, float(training), np.float32)]


def check_blended(target, built, rng, shape, dtype, training: bool) -> float:
    """Run a built ``channel_pass_blended`` on random inputs and compare every output with
    the float64 reference through opgen.verify (asserting); returns the worst ratio."""
    from opgen import verify

    inputs = blended_inputs(rng, shape, dtype, training)
    name = np.dtype(dtype).name
    got = run_toy(target, built, inputs, [name] * 3)
    worst = 0.0
    for out_name, out, want in zip(("dx", "dw", "db"), got, channel_pass_blended_reference(*inputs)):
        result = verify.compare(out_name, out, want, name, name)
        assert result.passed, (shape, training, result)
        worst = max(worst, result.ratio)
    return worst


def row_statistics_forward():
    """A LayerNorm-like forward with two per-row outputs: mean (float32) and rstd (float16,
    rounded in a stage of its own from the float32 rstd the elementwise output reads):
    sum[r] = sum_c x; mean[r] = sum / cols; sq[r] = sum_c (x - mean)^2;
    rstd32[r] = 1 / sqrt(sq / cols + 1e-5); rstd[r] = float16(rstd32);
    y = float16((x - mean) * rstd32 * gamma). Returns the PrimFunc (inputs x, gamma)."""
    rows, cols = te.var("rows", "int64"), te.var("cols", "int64")
    x = te.placeholder((rows, cols), "float16", name="x")
    gamma = te.placeholder((cols,), "float16", name="gamma")
    f32 = lambda v: v.astype("float32")  # noqa: E731
    k = te.reduce_axis((0, cols), name="k")
    total = te.compute((rows,), lambda r: te.sum(f32(x[r, k]), axis=k), name="stat_sum")
    mean = te.compute((rows,), lambda r: total[r] / cols.astype("float32"), name="stat_mean")
    k2 = te.reduce_axis((0, cols), name="k2")
    sq = te.compute((rows,), lambda r: te.sum((f32(x[r, k2]) - mean[r]) * (f32(x[r, k2]) - mean[r]), axis=k2),
                    name="stat_sq")
    rstd32 = te.compute((rows,), lambda r: te.rsqrt(sq[r] / cols.astype("float32") + 1e-5), name="stat_rstd32")
    rstd = te.compute((rows,), lambda r: rstd32[r].astype("float16"), name="stat_rstd")
    y = te.compute((rows, cols), lambda r, c: ((f32(x[r, c]) - mean[r]) * rstd32[r] * f32(gamma[c]))
                   .astype("float16"), name="stat_y")
    return te.create_prim_func([x, gamma, y, mean, rstd]).with_attr("global_symbol", "test_row_statistics")


def row_statistics_forward_reference(x, gamma) -> list:
    """[y, mean, rstd] in float64."""
    x, gamma = x.astype(np.float64), gamma.astype(np.float64)
    mean = x.mean(axis=1)
    rstd = 1.0 / np.sqrt(((x - mean[:, None]) ** 2).mean(axis=1) + 1e-5)
    return [(x - mean[:, None]) * rstd[:, None] * gamma, mean, rstd]


def column_vectors_with_constants():
    """A row pass whose outputs combine per-column vectors with constants before the tile
    (Gemma's RMSNorm shape, x * (1 + gamma)): sum[r] = sum_c x;
    y1 = x * (1 + g) (float32); y2 = float16((2 - g * h) * x + (g * 2 - sum)), float32
    inside. Column op constant, constant op column, column op column, column op per-row
    value, and a tile written over the scratch tile of the column it reads. Returns the
    PrimFunc (inputs x, g, h; outputs y1, y2)."""
    rows, cols = te.var("rows", "int64"), te.var("cols", "int64")
    x = te.placeholder((rows, cols), "float32", name="x")
    g = te.placeholder((cols,), "float32", name="g")
    h = te.placeholder((cols,), "float32", name="h")
    k = te.reduce_axis((0, cols), name="k")
    total = te.compute((rows,), lambda r: te.sum(x[r, k], axis=k), name="colc_sum")
    y1 = te.compute((rows, cols), lambda r, c: x[r, c] * (1.0 + g[c]), name="colc_y1")
    y2 = te.compute((rows, cols), lambda r, c: ((2.0 - g[c] * h[c]) * x[r, c] + (g[c] * 2.0 - total[r]))
                    .astype("float16"), name="colc_y2")
    return te.create_prim_func([x, g, h, y1, y2]).with_attr("global_symbol", "test_column_constants")


def column_vectors_with_constants_reference(x, g, h) -> list:
    """[y1, y2] in float64."""
    x, g, h = (a.astype(np.float64) for a in (x, g, h))
    return [x * (1 + g), (2 - g * h) * x + (g * 2 - x.sum(axis=1, keepdims=True))]


# Problems normalized over trailing axes (opgen.ops.spec.TrailingAxesProblem) with each kind
# of attribute an op may have: none, an int, a bool, a float without a default.

@dataclass(frozen=True)
class RowsProblem(TrailingAxesProblem):
    """x and how many trailing axes gamma covers; no attribute."""

    x_shape: tuple[int, ...]
    gamma_ndim: int = 1


@dataclass(frozen=True)
class IntAttributeProblem(TrailingAxesProblem):
    x_shape: tuple[int, ...]
    gamma_ndim: int = 1
    groups: int = 4


@dataclass(frozen=True)
class BoolAttributeProblem(TrailingAxesProblem):
    x_shape: tuple[int, ...]
    gamma_ndim: int = 1
    training: bool = True


@dataclass(frozen=True)
class RequiredAttributeProblem(TrailingAxesProblem):
    """A float attribute without a default: every spelling gives it."""

    x_shape: tuple[int, ...]
    gamma_ndim: int
    alpha: float
