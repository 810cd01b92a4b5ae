"""Schedules are chosen by stage pattern, never by op name; their structure is what we claim.

A toy op written in each pattern gets scheduled with no schedule code of its own and
computes the right answer; a function matching no pattern is refused with a clear error;
every registered kernel on llvm has parallel loops in its TIR and vector instructions in
its LLVM IR.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
import tvm
from tvm import te

from opgen import kernels, schedules, selection
from opgen.ops import all_ops
from opgen.targets import get_target
from tiers import covering, tiered

LLVM = get_target("llvm")


def _compile(tensors, knobs=None):
    func = te.create_prim_func(tensors).with_attr("global_symbol", "toy")
    sch = schedules.schedule(func, LLVM, knobs)
    return tvm.compile(sch.mod, target=LLVM.tvm_target()).mod["toy"], sch


def _run(fn, arrays):
    tensors = [tvm.runtime.tensor(np.ascontiguousarray(a)) for a in arrays]
    fn(*tensors)
    return [t.numpy() for t in tensors]


def toy_row_pass():
    """Row sums + an elementwise output + a column sum: RmsNorm's pattern, other math."""
    rows, cols = te.var("rows", "int64"), te.var("cols", "int64")
    a = te.placeholder((rows, cols), "float32", name="a")
    k = te.reduce_axis((0, cols), name="k")
    row_sum = te.compute((rows,), lambda r: te.sum(a[r, k], axis=k), name="toy_row_sum")
    out = te.compute((rows, cols), lambda r, c: a[r, c] - row_sum[r] / cols.astype("float32"), name="toy_centered")
    j = te.reduce_axis((0, rows), name="j")
    col = te.compute((cols,), lambda c: te.sum(a[j, c] * a[j, c], axis=j), name="toy_col_squares")
    return [a, out, col]


def toy_grouped_pass(prologue=None):
    """Per-channel sums, per-group totals, an elementwise output, batch column sums. With
    ``prologue`` (a TE function of an element), the sums and the output read
    p = prologue(a) where they read a (the sums read p * a)."""
    n, g, d, hw = (te.var(v, "int64") for v in ("n", "g", "d", "hw"))
    a = te.placeholder((n, g, d, hw), "float32", name="a")
    if prologue is None:
        p, term = a, (lambda i, j, c, k: a[i, j, c, k])
    else:
        p = te.compute((n, g, d, hw), lambda i, j, c, h: prologue(a[i, j, c, h]), name="toy_prologue")
        term = lambda i, j, c, k: p[i, j, c, k] * a[i, j, c, k]  # noqa: E731
    k = te.reduce_axis((0, hw), name="k")
    chan = te.compute((n, g, d), lambda i, j, c: te.sum(term(i, j, c, k), axis=k), name="toy_channel_sum")
    e = te.reduce_axis((0, d), name="e")
    grp = te.compute((n, g), lambda i, j: te.sum(chan[i, j, e], axis=e), name="toy_group_sum")
    out = te.compute((n, g, d, hw), lambda i, j, c, h: p[i, j, c, h] - grp[i, j] / (d * hw).astype("float32"),
                     name="toy_centered")
    b = te.reduce_axis((0, n), name="b")
    col = te.compute((g, d), lambda j, c: te.sum(chan[b, j, c], axis=b), name="toy_batch_sum")
    return [a, out, col]


@pytest.mark.parametrize("shape", [(1, 1), (7, 33), (130, 5), (0, 4)], ids=str)
@pytest.mark.parametrize("knobs", [None, {"rows_per_chunk": 8, "final_columns": 64}], ids=["default", "small-chunks"])
def test_row_pass_rule_schedules_a_new_op(shape, knobs):
    fn, _ = _compile(toy_row_pass(), knobs)
    a = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    _, out, col = _run(fn, [a, np.zeros(shape, np.float32), np.full(shape[1], np.nan, np.float32)])
    cols = max(shape[1], 1)
    np.testing.assert_allclose(out, a - a.sum(axis=1, keepdims=True) / cols, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(col, (a.astype(np.float64) ** 2).sum(axis=0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 1, 1, 1), (3, 2, 5, 33), (0, 2, 2, 2)], ids=str)
def test_grouped_rule_schedules_a_new_op(shape):
    fn, sch = _compile(toy_grouped_pass())
    assert "T.parallel" in sch.mod.script()
    a = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    n, g, d, hw = shape
    _, out, col = _run(fn, [a, np.zeros(shape, np.float32), np.full((g, d), np.nan, np.float32)])
    group_mean = a.astype(np.float64).sum(axis=(2, 3), keepdims=True) / max(d * hw, 1)
    np.testing.assert_allclose(out, a - group_mean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(col, a.astype(np.float64).sum(axis=(0, 3)), rtol=1e-5, atol=1e-5)


def toy_grouped_with_prologue():
    """The grouped pattern over a prologue with an exp (a per-element transcendental, like
    GroupNormSwish's sigmoid): its sums and its output read p = exp(a / 4)."""
    return toy_grouped_pass(lambda v: te.exp(v * 0.25))


def _prologue_reference(a):
    p = np.exp(a.astype(np.float64) / 4)
    chan = (p * a).sum(axis=3)
    d, hw = a.shape[2:]
    return p - chan.sum(axis=2)[:, :, None, None] / max(d * hw, 1), chan.sum(axis=0)


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 1, 1, 1), (3, 2, 5, 33), (0, 2, 2, 2), (2, 2, 3, 0)], ids=str)
@pytest.mark.parametrize("once", [True, False], ids=["once", "twice"])
def test_grouped_rule_computes_a_prologue_once_per_group(shape, once):
    """prologue_once (the default): the prologue is a block under the group loop, written
    once and read by the sums and the output (one exp in the TIR); False: inlined into both
    (two). The same math either way, over ragged, unit and empty shapes."""
    fn, sch = _compile(toy_grouped_with_prologue(), {"prologue_once": once})
    script = sch.mod.script()
    assert script.count("T.exp(") == (1 if once else 2)
    assert ('T.sblock("toy_prologue")' in script) is once
    a = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    n, g, d, hw = shape
    _, out, col = _run(fn, [a, np.zeros(shape, np.float32), np.full((g, d), np.nan, np.float32)])
    want_out, want_col = _prologue_reference(a)
    np.testing.assert_allclose(out, want_out, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(col, want_col, rtol=1e-5, atol=1e-4)


def test_prologue_once_is_pruned_where_there_is_no_prologue_and_off_for_huge_groups():
    """The tuner never builds prologue_once=False for a function without a prologue (the
    same kernel twice), and groups past PROLOGUE_ONCE_UP_TO recompute it (no per-thread
    buffer of that size)."""
    from opgen.schedules.llvm import PROLOGUE_ONCE_UP_TO, GroupedRowPass

    rule = GroupedRowPass()
    plain = te.create_prim_func(toy_grouped_pass())
    with_prologue = te.create_prim_func(toy_grouped_with_prologue())
    assert "no prologue" in rule.check_knobs({"prologue_once": False}, LLVM, func=plain)
    assert rule.check_knobs({"prologue_once": True}, LLVM, func=plain) is None
    assert rule.check_knobs({"prologue_once": False}, LLVM, func=with_prologue) is None
    assert "prologue_once" not in rule.knobs_for_shapes(LLVM, {"a": (2, 32, 10, 4096)})
    assert rule.knobs_for_shapes(LLVM, {"a": (1, 1, 2, PROLOGUE_ONCE_UP_TO)})["prologue_once"] is False


@pytest.mark.parametrize("knobs,message", [({"rows_per_chunks": 64}, "no knob 'rows_per_chunks'"),
                                           ({"rows_per_chunk": 3}, "outside its domain")], ids=["misspelt", "domain"])
def test_knobs_outside_the_rules_declaration_are_refused(knobs, message):
    with pytest.raises(schedules.InvalidKnobs, match=message):
        _compile(toy_row_pass(), knobs)


def test_rules_declare_their_knob_spaces():
    rule = schedules.rules_of(LLVM)[0]
    knobs = schedules.rule_knobs(rule, LLVM)
    assert [k.name for k in knobs] == ["rows_per_chunk", "final_columns", "parallel", "stream_stores", "aligned_stream"]
    assert all(k.default in k.values for k in knobs)
    assert schedules.default_knobs(rule, LLVM) == {k.name: k.default for k in knobs}


@pytest.mark.parametrize("tensors", [toy_row_pass, toy_grouped_pass], ids=["row-pass", "grouped"])
def test_serial_knob_drops_the_thread_launch_and_keeps_the_math(tensors):
    fn, sch = _compile(tensors(), {"parallel": False})
    assert "T.parallel" not in sch.mod.script()
    reference_fn, reference_sch = _compile(tensors())
    assert "T.parallel" in reference_sch.mod.script()
    shape = (3, 2, 5, 33) if tensors is toy_grouped_pass else (130, 5)
    a = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    col_shape = (shape[1], shape[2]) if len(shape) == 4 else (shape[1],)
    outs = [_run(f, [a, np.zeros(shape, np.float32), np.zeros(col_shape, np.float32)]) for f in (fn, reference_fn)]
    for serial, parallel in zip(*outs):
        np.testing.assert_array_equal(serial, parallel)


def test_tiny_problems_default_to_the_calling_thread():
    from opgen.ops import get_op
    from opgen.ops.rms_norm_grad import Problem, kernel_shapes

    op = get_op("rms_norm_grad")
    rule = kernels.matching_rule(op, op.combo("f32-f32"), LLVM)
    assert rule.knobs_for_shapes(LLVM, kernel_shapes(Problem((4, 64), 1))) == {"parallel": False}
    assert rule.knobs_for_shapes(LLVM, kernel_shapes(Problem((512, 512), 1))) == {}
    assert rule.knobs_for_shapes(LLVM, kernel_shapes(Problem((4096, 4096), 1))) == {}   # no streaming by default
    resolution, _ = selection.resolve(op, op.combo("f32-f32"), LLVM, kernel_shapes(Problem((4, 64), 1)))
    assert resolution.knobs["parallel"] is False and resolution.sources["parallel"] == "shape default"


def test_a_target_without_a_matching_rule_is_refused_by_name():
    """Every target of opgen's ends its rules with a fallback (tests/test_fallback.py); a
    rule list without one refuses by name."""
    n = te.var("n", "int64")
    a = te.placeholder((n,), "float32", name="a")
    doubled = te.compute((n,), lambda i: a[i] * 2.0, name="toy_doubled")
    func = te.create_prim_func([a, doubled]).with_attr("global_symbol", "toy_elementwise")
    no_fallback = type("PatternsOnly", (), {"RULES": schedules.rules_of(LLVM)[:-1]})
    import sys
    sys.modules["opgen.schedules.patterns_only"] = no_fallback
    try:
        target = type(LLVM)(name="patterns-only", description="llvm without its fallback")
        with pytest.raises(schedules.NoScheduleRule, match="toy_elementwise.*RowPassWithColumnSums"):
            schedules.schedule(func, target)
    finally:
        del sys.modules["opgen.schedules.patterns_only"]


KERNELS = [(op, combo) for op in all_ops() for combo in op.combos]


@pytest.mark.parametrize("op,combo", tiered(KERNELS, covering(KERNELS), [f"{o.name}-{c.tag}" for o, c in KERNELS]))
def test_llvm_kernels_are_parallel_and_vectorized(op, combo):
    """Parallel, vectorized, and no division per element: the per-row and per-group
    scalars divide once (LLVM's reassociation sank RmsNorm's ``/ cols`` into the inner
    loop as a vector fdiv until the row rule fenced it). A per-element sigmoid in the math
    (GroupNormSwish's) is a reciprocal per element, 1 / (1 + exp(-z)): those are allowed, and
    so is the reciprocal of a one-element input (RmsNormGradQuant's 1 / scalesX), which LLVM
    leaves in the loop for a half scale (one division per vector in a memory-bound pass)."""
    mod, symbol = kernels.scheduled_module(op, combo, LLVM)
    assert "T.parallel" in mod.script()
    llvm_ir = LLVM.build(mod).inspect_source("ll")
    widths = {int(w) for w in re.findall(r"<(\d+) x float>", llvm_ir)}
    assert widths and max(widths) >= 4, f"{symbol}: no float vectors in the LLVM IR ({widths})"
    divisions = re.findall(r"= fdiv [^\n]*<\d+ x float>[^\n]*", llvm_ir)
    script = kernels.prim_func(op, combo).script()
    if "T.sigmoid(" in script or re.search(r"T\.float32\(1\.0\) / (T\.Cast\(\"float32\", )?\w+\[0\]", script):
        divisions = [d for d in divisions if "splat (float 1.000000e+00)," not in d]
    assert not divisions, f"{symbol}: a vector division in the LLVM IR: {divisions[:2]}"


def test_llvm_kernels_compute_the_prologues_their_groups_read_once():
    """Through the registered kernels' own build (kernels.get_kernel, default knobs): each
    llvm kernel scheduled by the grouped rule that has a prologue keeps it as one block per
    group (GroupNormSwishGrad's swish derivative, with its sigmoid, evaluated once)."""
    from opgen.schedules.llvm import GroupedRowPass

    checked = []
    for op, combo in KERNELS:
        if not isinstance(kernels.matching_rule(op, combo, LLVM), GroupedRowPass):
            continue
        read = schedules.prologues(schedules.blocks(schedules.pattern_schedule(kernels.prim_func(op, combo),
                                                                               keep_prologues=True)))
        if not read:
            continue
        tir = kernels.get_kernel(op, combo, LLVM).tir
        for info in read:
            assert f'T.sblock("{info.name}")' in tir, f"{op.name} {combo.tag}: {info.name} inlined"
        stores = [line for line in tir.splitlines() if "T.sigmoid(" in line]    # one statement: the prologue's
        assert len(stores) <= 1, f"{op.name} {combo.tag}: the sigmoid is evaluated in {len(stores)} stages"
        checked.append(op.name)
    assert checked, "no registered op has a prologue in the grouped pattern: the check checked nothing"


@pytest.mark.parametrize("batch_rows", [True, False], ids=["batch-rows", "channels"])
def test_channel_rule_in_batch_rows_sums_partials_of_each_row_then_each_channel(batch_rows, rng):
    """batch_row_sums: three nests (partials over n in parallel, totals per channel, the
    outputs over n in parallel) with (N, C) partials in the workspace; otherwise one
    parallel pass over the channels. The same math either way, through the registered
    BatchNormBackward kernel's own build (the op tests' shapes, below
    BATCH_ROWS_MIN_ELEMENTS, take the channel pass by their shape defaults: this test is
    what runs batch rows by default in the default tier)."""
    from opgen.ops import get_op
    from opgen.ops.batch_norm_backward import Problem

    op = get_op("batch_norm_backward")
    combo = op.combo("f32-f32")
    kernel = kernels.get_kernel(op, combo, LLVM, knobs={"batch_row_sums": batch_rows})
    assert kernel.tir.count("T.parallel(") == (3 if batch_rows else 1)
    assert any(b.name.endswith(".rf") for b in kernel.scratch) is batch_rows
    problem = Problem((5, 3, 40))
    arrays = op.random_inputs(problem, combo, rng)
    outs = {name: np.full(shape, np.nan, np.float32) for name, shape in op.output_shapes(problem).items()}
    kernel(op.kernel_args(problem, {**arrays, **outs}))
    other = {name: np.full(shape, np.nan, np.float32) for name, shape in op.output_shapes(problem).items()}
    kernels.get_kernel(op, combo, LLVM, knobs={"batch_row_sums": not batch_rows})(
        op.kernel_args(problem, {**arrays, **other}))
    for name in outs:
        np.testing.assert_allclose(outs[name], other[name], rtol=2e-6, atol=2e-6)


def test_channel_rule_takes_batch_rows_for_short_channel_rows_of_large_data_only():
    from opgen.schedules.llvm import ChannelPass

    rule = ChannelPass()
    assert rule.knobs_for_shapes(LLVM, {"dy": (16, 512, 49), "weight": (512,)})["batch_row_sums"] is True
    # long rows, N=1, NHWC, empty, data that fits the caches (ResNet's at opgen bench --models)
    for shape in [(8, 128, 784), (1, 512, 49), (50176, 64, 1), (0, 3, 49), (8, 64, 64), (32, 128, 64)]:
        assert "batch_row_sums" not in rule.knobs_for_shapes(LLVM, {"dy": shape, "weight": (shape[1],)}), shape


def toy_two_row_sums():
    """Two row sums, a scalar of each, an elementwise output and a column sum (LayerNorm's
    shape, other math)."""
    rows, cols = te.var("rows", "int64"), te.var("cols", "int64")
    a = te.placeholder((rows, cols), "float32", name="a")
    k1, k2 = te.reduce_axis((0, cols), name="k1"), te.reduce_axis((0, cols), name="k2")
    s1 = te.compute((rows,), lambda r: te.sum(a[r, k1], axis=k1), name="toy_sum")
    m1 = te.compute((rows,), lambda r: s1[r] / cols.astype("float32"), name="toy_mean")
    s2 = te.compute((rows,), lambda r: te.sum(a[r, k2] * a[r, k2], axis=k2), name="toy_sum_squares")
    m2 = te.compute((rows,), lambda r: s2[r] / cols.astype("float32"), name="toy_mean_square")
    out = te.compute((rows, cols), lambda r, c: a[r, c] * m2[r] - m1[r], name="toy_out")
    j = te.reduce_axis((0, rows), name="j")
    col = te.compute((cols,), lambda c: te.sum(a[j, c], axis=j), name="toy_col_sum")
    return [a, out, col]


@pytest.mark.parametrize("shape", [(1, 1), (7, 33), (130, 5), (0, 4), (3, 0)], ids=str)
def test_row_rule_reads_a_row_once_for_all_its_row_sums(shape):
    """Both row sums update in one loop over the row's columns, before the scalars that
    read them, and the math is right over ragged, unit and empty shapes."""
    fn, sch = _compile(toy_two_row_sums())
    script = sch.mod.script()
    loop_of = {}
    for name in ("toy_sum_update", "toy_sum_squares_update"):
        loop_of[name] = script[:script.index(f'T.sblock("{name}")')].rindex("for ")
    assert loop_of["toy_sum_update"] == loop_of["toy_sum_squares_update"]
    a = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    _, out, col = _run(fn, [a, np.zeros(shape, np.float32), np.full(shape[1], np.nan, np.float32)])
    a64, cols = a.astype(np.float64), max(shape[1], 1)
    want = a64 * ((a64 ** 2).sum(axis=1, keepdims=True) / cols) - a64.sum(axis=1, keepdims=True) / cols
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(col, a64.sum(axis=0), rtol=1e-5, atol=1e-5)


def toy_dependent_row_sums():
    """A row sum that reads a row scalar (the variance about the mean), an output and a
    column sum: the mean's sum must finish before the variance's starts."""
    rows, cols = te.var("rows", "int64"), te.var("cols", "int64")
    a = te.placeholder((rows, cols), "float32", name="a")
    k1, k2 = te.reduce_axis((0, cols), name="k1"), te.reduce_axis((0, cols), name="k2")
    s1 = te.compute((rows,), lambda r: te.sum(a[r, k1], axis=k1), name="toy_sum")
    mean = te.compute((rows,), lambda r: s1[r] / cols.astype("float32"), name="toy_mean")
    s2 = te.compute((rows,), lambda r: te.sum((a[r, k2] - mean[r]) * (a[r, k2] - mean[r]), axis=k2),
                    name="toy_centered_squares")
    out = te.compute((rows, cols), lambda r, c: (a[r, c] - mean[r]) * s2[r], name="toy_out")
    j = te.reduce_axis((0, rows), name="j")
    col = te.compute((cols,), lambda c: te.sum(a[j, c], axis=j), name="toy_col_sum")
    return [a, out, col]


@pytest.mark.parametrize("shape", [(1, 1), (7, 33), (130, 5), (0, 4)], ids=str)
def test_row_rule_leaves_a_sum_that_reads_a_row_scalar_in_its_own_loop(shape):
    """Only sums of the data alone share a loop: merged, the variance read a mean not yet
    computed (TVM does not check it)."""
    fn, _ = _compile(toy_dependent_row_sums())
    a = np.random.default_rng(6).standard_normal(shape).astype(np.float32)
    _, out, col = _run(fn, [a, np.zeros(shape, np.float32), np.full(shape[1], np.nan, np.float32)])
    a64 = a.astype(np.float64)
    centered = a64 - a64.mean(axis=1, keepdims=True) if shape[1] else a64
    np.testing.assert_allclose(out, centered * (centered ** 2).sum(axis=1, keepdims=True), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(col, a64.sum(axis=0), rtol=1e-5, atol=1e-5)


def test_merging_row_sums_refuses_an_order_that_reads_a_sum_before_it_is_summed():
    """The positive control of the order check: merged the other way round, TVM puts the
    loop after the first sum's scalar, which then reads a sum not yet computed."""
    from opgen.schedules import patterns
    from opgen.schedules.llvm import _merge_row_sums

    sch = schedules.pattern_schedule(te.create_prim_func(toy_two_row_sums()))
    outs, column_sums, row_stages, _ = patterns.row_pass(schedules.blocks(sch))
    patterns.fuse_row_pass(sch, outs, column_sums, row_stages, [None, 4])
    with pytest.raises(RuntimeError, match="before the sums they read"):
        _merge_row_sums(sch, list(reversed(row_stages)))


def test_llvm_builds_16bit_float_kernels_with_512_bit_vectors_where_llvm_caps_them():
    """targets/llvm.py: bf16/f16 kernels widen past LLVM's 256-bit cap (instruction
    bound), f32 kernels keep it (memory bound; 512 bits measured slower). Built for
    skylake-avx512, a CPU LLVM caps (compiled only: any host can check it)."""
    import dataclasses

    from opgen.targets.llvm import prefers_256_bit_vectors
    from opgen.targets.llvm_host import CpuSpec

    capped = dataclasses.replace(LLVM, cpu=CpuSpec("skylake-avx512"))
    assert prefers_256_bit_vectors(capped.built_for())
    op = next(o for o in all_ops() if o.name == "rms_norm_grad")
    widths = {}
    for tag in ("bf16-bf16", "f32-f32"):
        llvm_ir = capped.build(kernels.scheduled_module(op, op.combo(tag), capped)[0]).inspect_source("ll")
        widths[tag] = max(int(w) for w in re.findall(r"<(\d+) x float>", llvm_ir))
    assert widths == {"bf16-bf16": 16, "f32-f32": 8}, widths


def test_partial_sums_are_kernel_parameters():
    """The buffers one loop nest hands to the next are parameters (the workspace owns them).
    A column sum that is an output is accumulated in a float64 buffer of its own (``_global``,
    schedules/llvm.py _sums_in_float64): its per-chunk partials are float64 too."""
    kernel = kernels.get_kernel("rms_norm_grad", "f32-f32", LLVM)
    partials = "rms_norm_grad_dgamma_global.rf"
    assert [(b.name, b.dtype) for b in kernel.scratch] == [(partials, "float64")]
    assert kernel.scratch_shapes({"dy": (5, 7), "x": (5, 7), "rstd": (5,), "gamma": (7,),
                                  "dx": (5, 7), "dgamma": (7,)}) == {partials: (1, 7)}
    assert kernel.scratch_shapes({"dy": (4097, 3)}) == {partials: (65, 3)}
    gn = kernels.get_kernel("group_norm_backward", "f32-f32", LLVM)
    assert sorted(b.name for b in gn.scratch) == ["group_norm_backward_db", "group_norm_backward_ds"]
