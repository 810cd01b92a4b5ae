"""The MLIR path: TE stages printed as linalg (IREE) and as named ops (bishengir).

Structural tests read the printed text and need neither compiler; the numeric tests run
every op x combo on iree-cpu against the float64 reference and through the aclnn API; the
bishengir tests check which kernels reach HIVM, that what bishengir accepted computes the
reference's numbers (run back on IREE), and that its verdicts, rejections included, give
the same kernels on every build. The generic ``target`` fixture runs
iree-cpu on the RmsNormGrad/GroupNorm matrices too (tests/test_kernels.py).
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import te

from aclnn_helpers import assert_matches, base_args, offering, product, run_both
from tiers import covering, tiered
from opgen import config, kernels, verify
from opgen.ops import all_ops, get_op
from opgen.targets import get_target
from opgen.targets.mlir import linalg, named
from opgen.targets.mlir.stages import UnsupportedStage, stage_graph

IREE = get_target("iree-cpu")
ASCEND_MLIR = get_target("ascend-mlir")
needs_iree = pytest.mark.skipif(not IREE.can_build(), reason=f"{IREE.missing()}")
needs_bishengir = pytest.mark.skipif(not ASCEND_MLIR.can_build(), reason=f"{ASCEND_MLIR.missing()}")
ALL = [(op, combo) for op in all_ops() for combo in op.combos]
ALL_IDS = [f"{op.name}-{combo.tag}" for op, combo in ALL]


def _module(op, combo):
    return tvm.IRModule({"k": kernels.prim_func(op, combo).with_attr("global_symbol", "k")})


# ---- structure (no compiler needed) ---------------------------------------------------------

@pytest.mark.parametrize("op,combo", ALL, ids=ALL_IDS)
def test_one_generic_per_stage_with_its_iterator_kinds(op, combo):
    graph = stage_graph(kernels.prim_func(op, combo))
    text = linalg.print_module(_module(op, combo))
    generics = re.findall(r"iterator_types = \[([^\]]*)\]", text)
    non_constant_inits = sum(1 for s in graph.stages if s.init is not None and "Imm" not in type(s.init).__name__)
    assert len(generics) == len(graph.stages) + non_constant_inits
    kinds = ["".join("R" if t.strip() == '"reduction"' else "S" for t in g.split(",")) for g in generics]
    assert kinds == [s.kinds for s in graph.stages]


def test_maps_casts_and_accumulator_of_a_row_sum():
    """bf16 RmsNormGrad: the row dot reads dy/x at (d0, d1) and gamma at (d1) (iterators
    (r, k)), widens each bf16 element to f32, and adds into the output block argument."""
    op = get_op("rms_norm_grad")
    text = linalg.print_module(_module(op, op.combo("bf16-bf16")))
    dot = text[:text.index("rms_norm_grad_coef")]
    assert "affine_map<(d0, d1) -> (d0, d1)>" in dot and "affine_map<(d0, d1) -> (d1)>" in dot
    assert "affine_map<(d0, d1) -> (d0)>" in dot                     # the output: one value per row
    assert dot.count("arith.extf") == 3 and "bf16 to f32" in dot        # dy, gamma, x
    acc = re.search(r"\^bb0\(.*(%acc\d+): f32\)", dot).group(1)
    assert re.search(rf"arith\.addf {acc}, %v\d+ : f32|arith\.addf %v\d+, {acc} : f32", dot)
    assert "arith.truncf" in text and "f32 to bf16" in text           # dx rounded once, at the store
    assert "func.func @k(%dy: tensor<?x?xbf16>" in text and "tensor.dim %dy" in text


@needs_iree
def test_an_index_no_affine_map_spells_is_gathered(rng):
    """``b[i // 2]`` is no affine map of the loop dims: the printer gathers it with
    ``tensor.extract`` at ``linalg.index``-computed indices, and IREE runs it right."""
    n, m = te.var("n"), te.var("m")
    a, b = te.placeholder((n,), "float32", name="a"), te.placeholder((m,), "float32", name="b")
    y = te.compute((n,), lambda i: a[i] * b[i // 2], name="y")
    mod = tvm.IRModule({"gather": te.create_prim_func([a, b, y]).with_attr("global_symbol", "gather")})
    module = IREE.build(mod)
    assert "tensor.extract %b" in module.text and "arith.floordivsi" in module.text
    av, bv = rng.standard_normal(7).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    out = tvm.runtime.tensor(np.zeros(7, np.float32))
    module["gather"](tvm.runtime.tensor(av), tvm.runtime.tensor(bv), out)
    np.testing.assert_array_equal(out.numpy(), av * bv[np.arange(7) // 2])


def _unread_axis_sum(pair: bool = False):
    """``y[c] = sum_{n, h} k[n]``: a reduction over an axis (h) the body never reads; x sizes
    it, (N, C, HW), or with ``pair`` (N, C, HW, 2), whose last axis is no loop's extent."""
    n, c, hw = (te.var(v, "int64") for v in ("N", "C", "HW"))
    x = te.placeholder((n, c, hw, 2) if pair else (n, c, hw), "float32", name="x")
    k = te.placeholder((n,), "float32", name="k")
    rn, rh = te.reduce_axis((0, n), name="rn"), te.reduce_axis((0, hw), name="rh")
    y = te.compute((c,), lambda ci: te.sum(k[rn], axis=[rn, rh]), name="y")
    return tvm.IRModule({"unread": te.create_prim_func([x, k, y]).with_attr("global_symbol", "unread")})


def test_a_loop_dim_no_operand_indexes_gets_a_shape_operand():
    """linalg infers each loop's extent from the operands (its maps must be invertible): the
    h loop, read by nothing, takes its extent from an input every axis of which is a loop's
    (x, read through (c, n, h) -> (n, c, h), never by the body), else from a tensor.empty."""
    text = linalg.print_module(_unread_axis_sum())
    assert "ins(%k, %x : tensor<?xf32>, tensor<?x?x?xf32>)" in text, text
    assert "affine_map<(d0, d1, d2) -> (d1, d0, d2)>" in text and "tensor.empty(%HW" not in text
    assert re.search(r"\^bb0\(%a\d+: f32, %unread\d+: f32, %acc\d+: f32\)", text), text   # k, x, y
    text = linalg.print_module(_unread_axis_sum(pair=True))
    assert re.search(r"%shape\d* = tensor.empty\(%HW\d*\) : tensor<\?xi8>", text), text
    assert "affine_map<(d0, d1, d2) -> (d2)>" in text
    assert re.search(r"\^bb0\(%a\d+: f32, %unread\d+: i8, %acc\d+: f32\)", text), text


@needs_iree
@pytest.mark.parametrize("pair", [False, True], ids=["an input", "tensor.empty"])
def test_a_loop_dim_no_operand_indexes_runs_on_iree(pair, rng):
    module = IREE.build(_unread_axis_sum(pair))
    x = rng.standard_normal((3, 4, 5, 2) if pair else (3, 4, 5)).astype(np.float32)
    k = rng.standard_normal(3).astype(np.float32)
    out = tvm.runtime.tensor(np.zeros(4, np.float32))
    module["unread"](tvm.runtime.tensor(x), tvm.runtime.tensor(k), out)
    np.testing.assert_allclose(out.numpy(), np.full(4, 5 * k.sum()), rtol=1e-6)


def test_an_expression_kind_without_a_lowering_is_refused_by_name():
    from opgen.targets.mlir.exprs import ExprPrinter, Values
    from opgen.targets.mlir.text import Body

    with pytest.raises(UnsupportedStage, match="no MLIR lowering for Shuffle"):
        ExprPrinter(Body(), Values()).print(tvm.tirx.Shuffle([tvm.tirx.IntImm("int32", 1)], [0]))


def test_the_emitters_hold_no_op_names():
    import opgen.targets.ascend_mlir as ascend_mlir_module
    import opgen.targets.iree_cpu as iree_module

    files = [*Path(linalg.__file__).parent.glob("*.py"), Path(ascend_mlir_module.__file__), Path(iree_module.__file__)]
    sources = " ".join(p.read_text() for p in files)
    for op in all_ops():
        assert op.name not in sources, op.name


@pytest.mark.parametrize("name,classes", [
    ("rms_norm_grad", ["rows/2", "axes 0/2"]),              # the row pass; the column sum
    ("rms_norm", ["rows/2", None]),                         # rstd (per row) apart from y: one output rank
    ("layer_norm_backward", ["rows/2", "axes 0/2"]),
])
def test_kernels_split_by_pattern(name, classes):
    op = get_op(name)
    graph = stage_graph(kernels.prim_func(op, op.combo("f32-f32")))
    assert [k.fusion for k in named.kernels(graph)] == classes


def test_a_constant_index_load_is_a_broadcast_not_an_extract():
    """bishengir compiled ``tensor.extract`` feeding vector ops nondeterministically."""
    op = get_op("rms_norm")
    graph = stage_graph(kernels.prim_func(op, op.combo("f32-f32")))
    _, text = named.print_kernels("k", graph, named.kernels(graph))[0]
    assert "tensor.extract " not in text and "tensor.collapse_shape" in text and "linalg.broadcast" in text


def _guarded_shift(condition=None, otherwise=0.0):
    """``if_then_else(N * HW > 0, x[0, c, 0], 0)`` over (C,): a channel's first element,
    read only where the channel has one (BatchNorm's shift, by itself)."""
    n, c, hw = (te.var(v, "int64") for v in ("N", "C", "HW"))
    x = te.placeholder((n, c, hw), "float32", name="x")
    guard = (lambda ci: n * hw > 0) if condition is None else (lambda ci: condition(x, ci))
    shift = te.compute((c,), lambda ci: te.if_then_else(guard(ci), x[0, ci, 0], te.const(otherwise, "float32")),
                       name="shift")
    graph = stage_graph(te.create_prim_func([x, shift]).with_attr("global_symbol", "guarded"))
    return graph, named.print_kernels("guarded", graph, named.kernels(graph))


def test_a_guarded_load_is_a_window_of_one_or_no_element():
    """No branch (bishengir fuses none: an scf.if was "Unknown kernel fusion kind") and no
    read of an empty tensor: a slice whose constant-index axes are select(guard, 1, 0)
    wide, summed over them."""
    _, [(_, text)] = _guarded_shift()
    assert "scf.if" not in text and "tensor.extract " not in text
    width = re.search(r"(%w\d+) = arith.select %v\d+, %c\d+, %c\d+ : index", text).group(1)
    assert re.search(rf"tensor.extract_slice %x\[0, 0, 0\] \[{width}, %C\d+, {width}\] \[1, 1, 1\]", text)
    assert re.search(r"linalg.reduce ins\(%s\d+ : tensor<\?x\?x\?xf32>\) .* dimensions = \[0, 2\]", text)


@pytest.mark.parametrize("condition,otherwise", [
    (lambda x, ci: x[0, ci, 0] > 0, 0.0),      # a condition on data, not sizes
    (None, 1.0),                               # a select (not a window) would read x[0, c, 0] unguarded
])
def test_a_select_reading_an_element_of_a_dynamic_axis_is_refused(condition, otherwise):
    """Any other if_then_else is an eager select: its sides are all read, so one that reads
    x[0, c, 0] (none in an empty tensor) is refused."""
    with pytest.raises(UnsupportedStage, match="a select whose sides read an element of a dynamic axis"):
        _guarded_shift(condition, otherwise)


def _flag_select():
    """``x * (flag[0] != 0 ? 1 / s[0] : s[0])`` over (N, C): a select on data (RmsNormGradQuant's
    divMode), its sides elements of static (1,) tensors."""
    n, c = te.var("N", "int64"), te.var("C", "int64")
    x = te.placeholder((n, c), "float32", name="x")
    flag, s = te.placeholder((1,), "float32", name="flag"), te.placeholder((1,), "float32", name="s")
    y = te.compute((n, c), lambda i, j: x[i, j] * te.if_then_else(flag[0] != 0.0, 1.0 / s[0], s[0]), name="y")
    graph = stage_graph(te.create_prim_func([x, flag, s, y]).with_attr("global_symbol", "flagged"))
    return named.print_kernels("flagged", graph, named.kernels(graph))


def test_a_select_on_data_is_an_hfusion_select_of_a_compare():
    [(name, text)] = _flag_select()
    cmp = re.search(r"(%cmp\d+) = hfusion.compare \{compare_fn = #hfusion.compare_fn<vne>\} ins\(%b\d+, %f\d+ : "
                    r"tensor<\?x\?xf32>, tensor<\?x\?xf32>\) outs\(%e\d+ : tensor<\?x\?xi1>\)", text)
    assert cmp and re.search(rf"hfusion.select ins\({cmp.group(1)}, %w\d+, %b\d+ : tensor<\?x\?xi1>", text), text


def _guarded_mean():
    """A gather's no-rank mean: ``if_then_else(N > 0, shift + s / k, 0)`` over (C,), s and k
    per-channel inputs (0/0 where there is no rank), the shift itself a guarded load."""
    n, c, hw = (te.var(v, "int64") for v in ("N", "C", "HW"))
    x = te.placeholder((n, c, hw), "float32", name="x")
    s, k = (te.placeholder((c,), "float32", name=v) for v in ("s", "k"))
    zero = te.const(0.0, "float32")
    mean = te.compute((c,), lambda ci: te.if_then_else(
        n > 0, te.if_then_else(n * hw > 0, x[0, ci, 0], zero) + s[ci] / k[ci], zero), name="mean")
    graph = stage_graph(te.create_prim_func([x, s, k, mean]).with_attr("global_symbol", "gmean"))
    return named.print_kernels("gmean", graph, named.kernels(graph))


def test_a_size_guarded_select_of_computed_values_is_an_hfusion_select():
    """Both sides computed over the domain, one kept per element by an hfusion.select of the
    size condition filled over it (exact: the 0/0 of no rank never reaches the result, as it
    would through a 0/1 mask); the inner guarded load stays a window. bishengir takes it
    to HIVM where it is installed."""
    [(name, text)] = _guarded_mean()
    mask = re.search(r"(%\w+) = linalg.fill ins\(%v\d+ : i1\) outs\(%e\d+ : tensor<\?xi1>\)", text).group(1)
    assert re.search(rf"hfusion.select ins\({mask}, %w\d+, %f\d+ : tensor<\?xi1>, tensor<\?xf32>, tensor<\?xf32>\)",
                     text), text
    assert "arith.select %v" in text and "dimensions = [0, 2]" in text      # the shift's window
    if ASCEND_MLIR.can_build():
        from opgen.targets.mlir import bishengir

        report = bishengir.compile_kernel(name, text, ASCEND_MLIR.soc)
        assert report.ok, report.error


def _int8_output(shape=(None, None)):
    """int8(clip(nearbyint(x * 3), -128, 127)) of x (N, C): a quantized output."""
    dims = [te.var(v, "int64") if d is None else d for v, d in zip("NC", shape)]
    x = te.placeholder(dims, "float32", name="x")
    q = lambda i, j: te.min(te.max(te.nearbyint(x[i, j] * 3.0), te.const(-128.0, "float32")),  # noqa: E731
                            te.const(127.0, "float32"))
    y = te.compute(dims, lambda i, j: q(i, j).astype("int8"), name="y")
    return stage_graph(te.create_prim_func([x, y]).with_attr("global_symbol", "quantized"))


def test_an_int8_output_is_stored_by_a_flat_kernel_of_its_own():
    """bishengir 1.2.0 refuses a rank-2 dynamic int8 store (dynamic_shape_int8_store.mlir) and
    a flat one after a broadcast (flat_int8_store_after_broadcast.mlir): the value is a float
    intermediate, and a kernel of its own collapses it, casts and returns rank 1."""
    graph = named.split_narrow_stores(_int8_output())
    [(_, value), (_, store)] = named.print_kernels("quantized", graph, named.kernels(graph))
    assert "xi8" not in value and "-> (tensor<?x?xf32>)" in value
    assert re.search(r"tensor.collapse_shape %y_value \[\[0, 1\]\] : tensor<\?x\?xf32> into tensor<\?xf32>", store)
    assert re.search(r"hfusion.cast \{round_mode = #hfusion.round_mode<trunc>\} ins\(%flat\d+ : tensor<\?xf32>\) "
                     r"outs\(%e\d+ : tensor<\?xi8>\)", store) and "-> (tensor<?xi8>)" in store, store
    float_graph = stage_graph(te.create_prim_func(_rounded_te()).with_attr("global_symbol", "rounded"))
    assert named.split_narrow_stores(float_graph) is float_graph      # other ops print as before


@needs_iree
def test_a_guarded_load_reads_the_element_or_nothing(rng):
    """The named-op text of the guard alone is upstream MLIR (tensor, linalg, arith):
    IREE runs it, empty channels included."""
    import iree.runtime as rt

    from opgen.targets.mlir.iree import compile_text
    _, [(name, text)] = _guarded_shift()
    vmfb = compile_text(re.sub(r" attributes \{hacc[^{}]*\}", "", text), "llvm-cpu", ())
    context = rt.SystemContext(config=rt.Config("local-task"))
    context.add_vm_module(rt.VmModule.copy_buffer(context.instance, vmfb))
    for shape in [(3, 5, 7), (1, 4, 1), (0, 4, 6), (2, 4, 0)]:
        x = rng.standard_normal(shape).astype(np.float32)
        want = x[0, :, 0] if shape[0] and shape[2] else np.zeros(shape[1], np.float32)
        np.testing.assert_array_equal(np.asarray(context.modules.module[name](x)), want)


# ---- IREE: numerics and the aclnn API -------------------------------------------------------

# Each op's first and last combo (its float32 and a 16-bit one): every combo is verified by
# `opgen generate`, which CI runs before the tests, and by the bishengir test below.
ENDS = [(op, combo) for op in all_ops() for combo in dict.fromkeys((op.combos[0], op.combos[-1]))]


@needs_iree
@pytest.mark.parametrize("op,combo", tiered(ENDS, covering(ENDS), [f"{op.name}-{combo.tag}" for op, combo in ENDS]))
def test_iree_matches_the_reference_on_every_sample_problem(op, combo, rng):
    kernel = kernels.get_kernel(op, combo, IREE)
    for problem in op.problems:
        comparisons, _ = verify.run_and_compare(kernel, problem, rng)
        failed = [c for c in comparisons if not c.passed]
        assert not failed, f"{problem}: {[(c.name, c.ratio) for c in failed]}"


# The aclnn layer's dispatch to iree-cpu for each schedule pattern's first op (tests/tiers.py);
# every op in the extended tier (the aclnn layer itself is each op's, tested on llvm).
PATTERN_OPS = [op for op, _ in covering([(op, op.combos[0]) for op in all_ops()])]


@needs_iree
@pytest.mark.parametrize("op", tiered(all_ops(), PATTERN_OPS, [op.name for op in all_ops()]))
def test_aclnn_runs_on_iree(op, rng):
    with product(offering(op)), config.using_target("iree-cpu"):
        for combo in op.combos[:2]:
            problem = op.problems[1]
            args, arrays = base_args(op, problem, combo, rng)
            status, message = run_both(op, args)
            assert status == 0, message
            assert_matches(op, combo, problem, arrays, args)


@needs_iree
def test_iree_writes_strided_outputs_and_leaves_inputs_alone(rng):
    op = get_op("rms_norm_grad")
    combo = op.combo("f32-f32")
    kernel = kernels.get_kernel(op, combo, IREE)
    problem = op.problems[1]
    arrays = op.random_inputs(problem, combo, rng)
    before = {k: np.copy(v) for k, v in arrays.items()}
    ref = op.reference(problem, arrays)
    wide = np.full((ref["dx"].shape[0], 2 * ref["dx"].shape[1]), np.nan, np.float32)
    outputs = {"dx": wide[:, ::2], "dgamma": np.full(ref["dgamma"].shape, np.nan, np.float32)}
    kernel(op.kernel_args(problem, {**arrays, **outputs}))
    for c in verify.compare_outputs(op, combo, outputs, ref):
        assert c.passed, c
    assert np.isnan(wide[:, 1::2]).all()
    for k, v in arrays.items():
        np.testing.assert_array_equal(v, before[k])


# ---- bishengir --------------------------------------------------------------------------------

# Ops whose kernels the named-op emitter (targets/mlir/named.py) refuses, with what it says:
# none today (BatchNorm's forward, whose shift is a guarded load, was one until its window
# lowering: see test_a_guarded_load_is_a_window_of_one_or_no_element).
# RmsNormGradQuant (divMode's select on data, its int8 dx) and BatchNormGatherStatsWithCounts
# (a size-guarded select of a computed value) were, until selects printed as hfusion.select
# and int8 outputs as flat stores (issue 37).
BISHENGIR_GAPS: dict = {}


def _rounded_te(shape=(None, None)):
    """nearbyint(x * 3) clipped to int8's range, kept in float32 (x (N, C) or static): [x, y]."""
    dims = [te.var(v, "int64") if d is None else d for v, d in zip("NC", shape)]
    x = te.placeholder(dims, "float32", name="x")
    y = te.compute(dims, lambda i, j: te.min(te.max(te.nearbyint(x[i, j] * 3.0), te.const(-128.0, "float32")),
                                             te.const(127.0, "float32")), name="y")
    return [x, y]


def _rounded(shape=(None, None)):
    graph = stage_graph(te.create_prim_func(_rounded_te(shape)).with_attr("global_symbol", "rounded"))
    return named.print_kernels("rounded", graph, named.kernels(graph))


def test_nearbyint_is_a_float_cast_rounding_half_to_even():
    """hfusion's unary_fn has no rint: round half to even is hfusion.cast f32 -> f32 with
    round_mode rint, which bishengir lowers to HIVM's vcast_float_to_float (checked where
    bishengir is installed)."""
    [(name, text)] = _rounded()
    assert re.search(r"hfusion.cast \{round_mode = #hfusion.round_mode<rint>\} ins\(%w\d+ : tensor<\?x\?xf32>\) "
                     r"outs\(%e\d+ : tensor<\?x\?xf32>\)", text), text
    if ASCEND_MLIR.can_build():
        from opgen.targets.mlir import bishengir

        report = bishengir.compile_kernel(name, text, ASCEND_MLIR.soc)
        assert report.ok and "vcast_float_to_float" in report.hivm, report.error


# bishengir's own spelling of x != y ? rint(x) : y, before its auto-schedule (a select's
# vne condition as vnot(veq); nearbyint as a same-type cast in round mode rint).
NOT_AND_RINT = """module {
  func.func @m(%x: tensor<?xf32>, %y: tensor<?xf32>) -> tensor<?xf32> {
    %c0 = arith.constant 0 : index
    %n = tensor.dim %x, %c0 : tensor<?xf32>
    %b = tensor.empty(%n) : tensor<?xi1>
    %f = tensor.empty(%n) : tensor<?xf32>
    %r = hfusion.cast {round_mode = #hfusion.round_mode<rint>} ins(%x : tensor<?xf32>) outs(%f : tensor<?xf32>) -> tensor<?xf32>
    %eq = hfusion.compare {compare_fn = #hfusion.compare_fn<veq>} ins(%x, %y : tensor<?xf32>, tensor<?xf32>) outs(%b : tensor<?xi1>) -> tensor<?xi1>
    %ne = hfusion.elemwise_unary {fun = #hfusion.unary_fn<vnot>} ins(%eq : tensor<?xi1>) outs(%b : tensor<?xi1>) -> tensor<?xi1>
    %s = hfusion.select ins(%ne, %r, %y : tensor<?xi1>, tensor<?xf32>, tensor<?xf32>) outs(%f : tensor<?xf32>) -> tensor<?xf32>
    return %s : tensor<?xf32>
  }
}
"""


@needs_bishengir
@needs_iree
def test_the_replay_keeps_a_logical_not_and_a_rounding_cast():
    """bishengir-opt's --linalg-generalize-named-ops makes hfusion's vnot and a same-type
    rounding cast copies of their operand (RmsNormGradQuant's replay then chose the wrong
    scale and rounded nothing): the replay writes both out first (replay._explicit)."""
    import iree.runtime as rt

    from opgen.targets.mlir import replay
    from opgen.targets.mlir.iree import compile_text
    vmfb = compile_text("module {\n" + replay.upstream(NOT_AND_RINT) + "\n}\n", "llvm-cpu", ())
    context = rt.SystemContext(config=rt.Config("local-task"))
    context.add_vm_module(rt.VmModule.copy_buffer(context.instance, vmfb))
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 3.0, 7.0], np.float32)
    y = np.array([9.0, 9.0, 9.0, 9.0, 9.0, 3.0, 7.0], np.float32)
    np.testing.assert_array_equal(np.asarray(context.modules.module["m"](x, y)), [0, 2, 2, -0.0, -2, 3, 7])


@needs_bishengir
@pytest.mark.parametrize("op,combo", tiered(ALL, covering(ALL), ALL_IDS))
def test_bishengir_takes_every_kernel_to_hivm(op, combo):
    """Every op x combo, split by pattern, reaches HIVM (verdicts come from the disk cache
    that ``opgen generate`` fills, keyed by bishengir's version and the exact text), but the
    listed gaps, which must still be refused (an entry the emitter now takes is removed)."""
    if op.name in BISHENGIR_GAPS:
        with pytest.raises(NotImplementedError, match=BISHENGIR_GAPS[op.name]):
            ASCEND_MLIR.build(kernels.scheduled_module(op, combo, ASCEND_MLIR)[0])
        return
    module = ASCEND_MLIR.build(kernels.scheduled_module(op, combo, ASCEND_MLIR)[0])
    assert module.reports and all(r.ok and r.stage in ("HIVM", "binary") for r in module.reports), \
        [(r.arch, r.error) for r in module.reports]
    assert all("hivm.hir" in r.hivm for r in module.reports)


@needs_bishengir
@needs_iree
@pytest.mark.parametrize("op,combo", tiered(ALL, covering(ALL), ALL_IDS))
def test_what_bishengir_accepted_matches_the_reference(op, combo, rng):
    """The numeric check of ascend-mlir (targets/mlir/replay.py): each kernel's module as
    bishengir rewrote it before tiling, generalized to upstream linalg and run in order on
    IREE, passes the float64 reference on every sample problem, through the verify path of
    every target; the chain counts its kernels' GM bytes against one pass."""
    if op.name in BISHENGIR_GAPS:
        pytest.skip(f"not emitted: {BISHENGIR_GAPS[op.name]}")
    kernel = kernels.get_kernel(op, combo, ASCEND_MLIR)
    for problem in op.problems:
        comparisons, _ = verify.run_and_compare(kernel, problem, rng)
        failed = [c for c in comparisons if not c.passed]
        assert not failed, f"{problem}: {[(c.name, c.ratio) for c in failed]}"
    moved, one_pass = kernel.module[kernel.symbol].traffic
    assert moved >= one_pass > 0 and "GM" in ASCEND_MLIR.run_summary(kernel.module)


@needs_bishengir
@needs_iree
def test_a_sign_flipped_stage_bishengir_accepts_fails_the_numbers(monkeypatch, rng):
    """A wrong stage that bishengir compiles happily (dx's difference printed as a sum)
    reaches HIVM and must FAIL the numeric check, on dx alone: the check runs what
    bishengir made of the text, not opgen's own formulas."""
    op = get_op("rms_norm_grad")
    combo, problem = op.combo("f32-f32"), op.problems[1]
    mod, symbol = kernels.scheduled_module(op, combo, ASCEND_MLIR)
    printer = named.print_kernel

    def flipped(name, graph, kernel, later):
        text = printer(name, graph, kernel, later)
        return text.replace("binary_fn<sub>", "binary_fn<add>") if name.endswith("_k0") else text
    monkeypatch.setattr(named, "print_kernel", flipped)
    module = ASCEND_MLIR.build(mod)
    assert all(r.ok for r in module.reports) and "binary_fn<add>" in module.kernels[0][1]
    wrong = dataclasses.replace(kernels.get_kernel(op, combo, ASCEND_MLIR), module=module)
    comparisons, _ = verify.run_and_compare(wrong, problem, rng)
    assert {c.name: c.passed for c in comparisons} == {"dx": False, "dgamma": True}, comparisons


@needs_bishengir
def test_a_kernel_bishengir_rejects_is_not_emitted_with_its_message(monkeypatch):
    op = get_op("rms_norm")
    mod = kernels.scheduled_module(op, op.combo("f32-f32"), ASCEND_MLIR)[0]
    monkeypatch.setattr(named, "print_kernel", lambda *a: '  func.func @bad() {\n    "no.such_op"() : () -> ()\n  }')
    with pytest.raises(NotImplementedError, match=r"bishengir rejected (\d) of \1 kernels"):
        ASCEND_MLIR.build(mod)


@needs_bishengir
def test_a_verdict_is_kept_for_the_exact_text(tmp_path, monkeypatch):
    from opgen.targets.mlir import bishengir

    monkeypatch.setenv("OPGEN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("OPGEN_DISK_CACHE", raising=False)
    op = get_op("rms_norm")
    graph = stage_graph(kernels.prim_func(op, op.combo("f32-f32")))
    name, text = named.print_kernels("k", graph, named.kernels(graph))[0]
    first = bishengir.compile_kernel(name, text, ASCEND_MLIR.soc)
    assert first.ok and len(list((tmp_path / "bishengir").glob("*.json"))) == 1
    monkeypatch.setattr(bishengir, "_compile", lambda *a: pytest.fail("compiled again"))
    assert bishengir.compile_kernel(name, text, ASCEND_MLIR.soc) == first
    with pytest.raises(pytest.fail.Exception, match="compiled again"):     # another text is compiled
        bishengir.compile_kernel(name, text.replace("@k_k0", "@k_k1"), ASCEND_MLIR.soc)


@pytest.mark.parametrize("message", [
    "error: Unknown kernel fusion kind",
    # not a fusion message: BatchNorm's per-channel chain + y, rejected 7 runs in 8 (crashes
    # or this), each of its stages alone in none of 3 runs
    "error: 'arith.mulf' op operand #1 must be floating-point-like, but got 'index'",
])
def test_splitting_a_kernel_bishengir_cannot_fuse_recompiles_only_its_stages(monkeypatch, message):
    """The fallback splits only the refused kernel into one kernel per stage, whatever
    bishengir said; the others keep their names and texts, and are not compiled again
    (they were renumbered and all recompiled before). Runs without bishengir: its
    verdicts are faked."""
    from opgen.targets.mlir import bishengir

    op = get_op("rms_norm_grad")
    mod = kernels.scheduled_module(op, op.combo("f32-f32"), ASCEND_MLIR)[0]
    parts = named.kernels(stage_graph(next(iter(mod.functions.values()))))
    refused = next(k for k, part in enumerate(parts) if len(part.stages) > 1)
    calls = []

    def verdict(name, text, soc):
        calls.append((name, text))
        ok = not name.endswith(f"_k{refused}")
        return bishengir.KernelReport(name, ok, "HIVM" if ok else "rejected", "" if ok else message)
    monkeypatch.setattr(bishengir, "compile_kernel", verdict)
    module = ASCEND_MLIR.build(mod)
    names = [r.arch for r in module.reports]
    assert len(calls) == len(set(calls)), "a kernel text was compiled twice"
    assert len(calls) == len(parts) + len(parts[refused].stages)
    symbol = names[0].rsplit("_k", 1)[0]
    assert names == [f"{symbol}_k{k}" for k in range(refused)] \
        + [f"{symbol}_k{refused}_{j}" for j in range(len(parts[refused].stages))] \
        + [f"{symbol}_k{k}" for k in range(refused + 1, len(parts))]


def _fake_runs(monkeypatch, tmp_path, logs):
    """bishengir faked: each run says the next of ``logs`` ("" passes); returns the calls."""
    from opgen.targets.mlir import bishengir

    monkeypatch.setenv("OPGEN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("OPGEN_DISK_CACHE", raising=False)
    monkeypatch.setattr(bishengir, "compiler", lambda: "/bin/false")
    calls = []

    def run(text, soc, flags, timeout):
        calls.append(flags)
        log = logs[min(len(calls), len(logs)) - 1]
        if not log:
            return bishengir.HIVM, "hivm.hir", "// -----// IR Dump Before AutoSchedule\nmodule {\n}\n"
        return bishengir.REJECTED, "", log
    monkeypatch.setattr(bishengir, "_run", run)
    return calls


@pytest.mark.parametrize("logs,runs,ok,flaky", [
    (["error: A"], 2, False, False),                        # the same message twice: settled
    (["error: A", "error: B"], 10, False, True),             # never twice alike in a row: flaky
    (["error: A", "error: B", "error: B"], 3, False, False),
    (["error: operand #0 does not dominate this use"], 10, False, True),   # a known draw: never settled
    (["error: operand #0 does not dominate this use", ""], 2, True, False),
    (["error: ub overflow, requires 2 bits", "error: ub overflow, requires 2 bits", ""], 3, True, False),
])
def test_a_verdict_is_final_after_its_retries_and_kept_rejected_or_not(monkeypatch, tmp_path, logs, runs, ok, flaky):
    """bishengir is not deterministic: a rejection is final when two runs in a row say the
    same (never for a message it was seen to retract), else flaky after ATTEMPTS runs;
    either way the verdict is cached, so a second build sees what the first saw."""
    from opgen.targets.mlir import bishengir

    calls = _fake_runs(monkeypatch, tmp_path, logs * (10 if len(logs) == 2 and logs[1] else 1))
    report = bishengir.compile_kernel("k_k0", "module {}", "soc")
    assert (len(calls), report.ok, report.flaky) == (runs, ok, flaky), report
    assert report.ok == (report.hfusion == "module {\n}\n")
    again = bishengir.compile_kernel("k_k0", "module {}", "soc")
    assert len(calls) == runs and again == report                # from the cache, rejections too


def test_a_run_that_lacked_a_tool_is_no_verdict_and_not_kept(monkeypatch, tmp_path):
    """"Cannot find bishengir-compile-a5" (the wheel's compiler handing an Ascend 950 target to
    its sibling, not on PATH) says nothing of the kernel: it was cached as a settled rejection
    and stayed after the tool was found. Now the next build runs bishengir again, with the
    compiler's own folder first on PATH."""
    from opgen.targets.mlir import bishengir

    calls = _fake_runs(monkeypatch, tmp_path, ["error: Cannot find bishengir-compile-a5"])
    first = bishengir.compile_kernel("k_k0", "module {}", "soc")
    assert not first.ok and "Cannot find" in first.error
    again = bishengir.compile_kernel("k_k0", "module {}", "soc")
    assert not again.ok and len(calls) == 4, calls                # run again: nothing was kept
    assert not list(tmp_path.glob("bishengir/*.json"))
    path = bishengir._tool_env()["PATH"].split(":")
    assert path[0] == "/bin", path                                  # the fake compiler's folder first


@needs_bishengir
def test_a_flaky_kernel_is_not_split_but_refused(monkeypatch):
    """Only a settled rejection splits a kernel: a flaky one (a draw) refuses the op, so the
    kernels an op becomes never depend on the run."""
    from opgen.targets.mlir import bishengir

    op = get_op("rms_norm_grad")
    mod = kernels.scheduled_module(op, op.combo("f32-f32"), ASCEND_MLIR)[0]
    monkeypatch.setattr(bishengir, "compile_kernel", lambda name, text, soc: bishengir.KernelReport(
        name, not name.endswith("_k0"), "HIVM", "a crash", flaky=name.endswith("_k0")))
    with pytest.raises(NotImplementedError, match=r"rejected 1 of 2 kernels; .*_k0: a crash \(no two runs alike"):
        ASCEND_MLIR.build(mod)


def test_an_elementwise_kernel_returns_one_rank():
    """BatchNorm's per-channel chain beside y returned a per-channel value and y: bishengir
    took it on some runs only, so it is one kernel per stage by construction."""
    for op, combo in ENDS:
        graph = stage_graph(kernels.prim_func(op, combo))
        parts = named.kernels(graph)
        for k, part in enumerate(parts):
            if part.fusion is None and len(part.stages) > 1:
                _, _, returns = named.signature(graph, part, named.later_reads(parts, k))
                ranks = {len(s.buffer.shape) for s in part.stages if s.buffer.name in returns}
                assert len(ranks) == 1, (op.name, combo.tag, k, returns)


@needs_bishengir
@pytest.mark.full
@pytest.mark.parametrize("tag", ["f32-f32", "bf16-f32-bf16"])
def test_two_cold_builds_split_an_op_alike(tmp_path, monkeypatch, tag):
    """Two builds, each with a fresh cache (no verdict shared), give the same kernels with the
    same texts for BatchNorm, whose split once was 5 or 10 kernels from one build to the next."""
    op = get_op("batch_norm")
    mod = kernels.scheduled_module(op, op.combo(tag), ASCEND_MLIR)[0]
    monkeypatch.delenv("OPGEN_DISK_CACHE", raising=False)
    built = []
    for cold in ("a", "b"):
        monkeypatch.setenv("OPGEN_CACHE_DIR", str(tmp_path / cold))
        built.append(ASCEND_MLIR.build(mod).kernels)
    assert built[0] == built[1] and len(built[0]) > 5


REPRODUCERS = Path(__file__).resolve().parents[1] / "docs" / "bishengir"


@needs_bishengir
@pytest.mark.parametrize("name,message", [
    ("unknown_fusion_kind_two_row_sum_ranks", "Unknown kernel fusion kind"),
    ("cannot_fuse_two_column_sums_rank3", "operations cannot be fused"),
    ("ub_overflow_f16_sum_of_squares", "ub overflow"),
    ("dynamic_shape_int8_store", "only support store ub to gm"),
    ("flat_int8_store_after_broadcast", "'tensor.expand_shape' op expected number of static shape dims"),
    ("flat_int8_store", "ub overflow"),      # and HIVM with the UB options: opgen's int8 store
])
def test_the_documented_bishengir_limits_still_hold(name, message):
    """docs/mlir.md lists these with their reproducers: a bishengir that lifts one fails
    here, and the doc (and the workaround in named.py / bishengir.py) can go."""
    from opgen.targets.mlir import bishengir

    text = (REPRODUCERS / f"{name}.mlir").read_text()
    stage, _, log = bishengir._run(text, ASCEND_MLIR.soc, (), 120.0)
    assert stage == bishengir.REJECTED and message in log
    if message == "ub overflow":    # the UB options opgen retries with take it to HIVM
        stage, _, _ = bishengir._run(text, ASCEND_MLIR.soc, bishengir.UB_FLAGS[1], 120.0)
        assert stage in (bishengir.HIVM, bishengir.BINARY)
