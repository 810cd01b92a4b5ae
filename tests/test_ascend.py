"""The Ascend target: hardware descriptions, the tiling the schedule derives, `opgen tiling`.

No test here needs an NPU or the emulation; each runs in well under a second after the
TE functions are built (the module takes ~5 s on a shared 2-core machine).
"""
from __future__ import annotations

import argparse
import functools
from dataclasses import replace

import pytest
from tvm import te

from opgen.targets.ascend import tiling_report
from opgen.ops import get_op
from opgen.schedules import InvalidKnobs, default_knobs, schedule_with_rule
from opgen.schedules.ascend import GroupTiles, RowTiles
from opgen.schedules.ascend_tiling import CopyAlignmentError, UbBudgetError
from opgen.targets import get_target

from toy_ops import row_softmax
from opgen.targets.ascend import hardware

A2 = get_target("ascend-emu").for_product("AtlasA2")


@functools.lru_cache(maxsize=None)
def _func(op_name: str, combo: str):
    op = get_op(op_name)
    return te.create_prim_func(op.compute(op.combo(combo)))


def _tiling(op_name, combo, shape, target=A2, **knobs):
    func = _func(op_name, combo)
    rule, _ = schedule_with_rule(func, target, knobs)
    return rule.tiling(func, target, {**default_knobs(rule, target), **knobs}, [shape])


def rms(shape, combo="f32-f32", target=A2, **knobs):
    return _tiling("rms_norm_grad", combo, shape, target, **knobs)


def gn(n, c, hxw, g, combo="f32-f32", target=A2, **knobs):
    return _tiling("group_norm_backward", combo, (n, g, c // g, hxw), target, **knobs)


# ---- hardware descriptions ------------------------------------------------------------

def test_descriptions_follow_the_public_numbers():
    assert hardware.describe("AtlasA2").ub_bytes == 196608 and hardware.describe("AtlasA2").usable_ub_bytes == 196352
    assert hardware.describe("Ascend950").ub_bytes == 253952
    assert hardware.describe("AtlasTraining").ub_bytes == hardware.describe("AtlasInference").ub_bytes == 262144
    assert not any(hardware.describe(p).data_copy_pad for p in ("AtlasTraining", "AtlasInference"))
    assert hardware.describe("AtlasA3").data_copy_pad
    assert "bfloat16" not in hardware.describe("AtlasTraining").storage_dtypes
    hw = hardware.describe("AtlasA2")
    assert (hw.block_bytes, hw.repeat_bytes, hw.max_repeats, hw.align(33), hw.align(32)) == (32, 256, 255, 64, 32)


def test_core_count_override_by_argument_and_environment(monkeypatch):
    assert hardware.describe("AtlasA2", vector_cores=40).vector_cores == 40
    monkeypatch.setenv(hardware.CORES_ENV, "56")
    assert hardware.describe("Ascend950").vector_cores == 56
    with pytest.raises(ValueError):
        hardware.describe("AtlasA2", vector_cores=0)
    with pytest.raises(KeyError, match="known"):
        hardware.describe("Atlas9000")


def test_target_is_bound_to_the_product_and_keyed_by_it():
    base = get_target("ascend-emu")
    a2, t950 = base.for_product("AtlasA2"), base.for_product("Ascend950")
    assert a2.hardware.product == "AtlasA2" and t950.hardware.vector_cores == 64
    assert a2 != t950 and hash(a2) != hash(t950) and a2 == base.for_product("AtlasA2")
    assert a2.schedule_module == "ascend"
    # More cores split the same rows differently: the tiling follows the description.
    assert rms((100, 16)).block_dim == 34 and rms((100, 16), target=t950).block_dim == 50


# ---- the schedule: rules by pattern, annotations, knobs -------------------------------

def test_rules_match_by_pattern_and_annotate_the_structure():
    rule, sch = schedule_with_rule(_func("rms_norm_grad", "f16-f32"), A2)
    assert isinstance(rule, RowTiles)
    script = sch.mod.script()
    assert '"ascend.pattern": "rows"' in script and '"ascend.role": "column_sum"' in script
    assert '"ascend.sums": "deterministic"' in script and '"ascend.role": "row_stage"' in script
    rule, sch = schedule_with_rule(_func("group_norm_backward", "f16-f16"), A2, {"sums": "atomic"})
    assert isinstance(rule, GroupTiles)
    script = sch.mod.script()
    assert '"ascend.sums": "atomic"' in script and '"ascend.role": "task_stage"' in script
    assert '"ascend.role": "cast"' in script and '"ascend.role": "channel_sum"' in script


def test_a_row_softmax_defined_here_matches_the_row_rule_without_schedule_changes():
    func = row_softmax()
    rule, _ = schedule_with_rule(func, A2)
    assert isinstance(rule, RowTiles)
    ops = rule.operands(func)
    assert ops.tiles_in == (("x", "float16"),) and ops.col_sums == () and len(ops.row_stages) == 2
    t = rule.tiling(func, A2, default_knobs(rule, A2), [(941, 7)])
    assert (t.mode, t.block_dim, t.block_factor, t.sums) == ("small-D", 48, 20, "none")


def test_an_unmatched_function_is_refused_by_name():
    a = te.placeholder((te.var("n", "int64"),), "float32", name="a")
    cumsum_like = te.compute(a.shape, lambda i: a[i] * 2.0, name="toy_scale")
    with pytest.raises(NotImplementedError, match="no Ascend pattern .* matches toy .*toy_scale"):
        schedule_with_rule(te.create_prim_func([a, cumsum_like]).with_attr("global_symbol", "toy"), A2)


def test_knobs_are_declared_and_checked():
    func = _func("rms_norm_grad", "f32-f32")
    with pytest.raises(InvalidKnobs, match="no knob"):
        schedule_with_rule(func, A2, {"rows_per_chunk": 64})
    with pytest.raises(InvalidKnobs, match="outside its domain"):
        schedule_with_rule(func, A2, {"buffer_num": 3})
    with pytest.raises(InvalidKnobs, match="set one"):
        schedule_with_rule(func, A2, {"rows_per_pass": 8, "cols_per_pass": 1024})
    assert rms((48 * 64, 1000), rows_per_pass=4).ub_rows == 4
    rule = RowTiles()
    shapes = {"dy": (96, 3000), "rstd": (96,), "gamma": (3000,)}          # 2 rows per core on 48 cores
    assert "same tiling" in rule.check_knobs({"cols_per_pass": 4096}, A2, shapes)
    assert rule.check_knobs({"cols_per_pass": 2048}, A2, shapes) is None
    assert "only 2 rows" in rule.check_knobs({"rows_per_pass": 8}, A2, shapes)
    assert rule.check_knobs({"rows_per_pass": 2}, A2, shapes) is None
    assert "only 4 channels" in GroupTiles().check_knobs({"channels_per_pass": 8}, A2, {"dy": (2, 3, 4, 5)})
    assert rms((8, 3000), cols_per_pass=1024).mode == "split-D"
    single, double = rms((4096, 4000), buffer_num=1), rms((4096, 4000), buffer_num=2)
    assert single.ub_rows > double.ub_rows >= 1


# ---- the tiling: modes, core split, exact budget --------------------------------------

@pytest.mark.parametrize("shape, mode", [
    ((16, 16), "small-D"), ((7, 640), "small-D"), ((7, 641), "split-N"), ((4, 941), "split-N"),
    ((16, 5000), "split-N"), ((3, 12290), "split-D"), ((2, 16384), "split-D"), ((1, 1), "small-D"),
])
def test_row_modes(shape, mode):
    t = rms(shape, "f16-f32")
    assert t.mode == mode
    assert t.ub_bytes() <= A2.hardware.usable_ub_bytes
    if mode == "split-D":
        assert t.ub_rows == 1 and t.ub_cols % 64 == 0 and t.ub_cols < shape[1] and t.fields["ub_loops"] >= 2
    else:
        assert t.ub_cols == shape[1] and 1 <= t.ub_rows <= t.block_factor


@pytest.mark.parametrize("rows, cores_used, per_core", [(1, 1, 1), (5, 5, 1), (48, 48, 1), (49, 25, 2), (941, 48, 20)])
def test_rows_split_over_cores_like_cann(rows, cores_used, per_core):
    t = rms((rows, 64))
    assert (t.block_dim, t.block_factor) == (cores_used, per_core)
    assert 1 <= t.tail_rows <= per_core and (t.block_dim - 1) * per_core + t.tail_rows == rows


def test_row_budget_is_exact_to_the_byte():
    # f16 dy/x/dx, f32 rstd, f16 gamma, f32 dgamma; 4 rows of 20 columns, pitch 32 (16-element blocks).
    t = rms((1000, 20), "f16-f16", rows_per_pass=4)
    tile, pitch = 4 * 32, 32
    expected = {
        "in_dy": 2 * tile * 2, "in_x": 2 * tile * 2, "in_rstd": 2 * 32, "in_gamma": 64,
        "out_rms_norm_grad_dx": 2 * tile * 2, "acc_rms_norm_grad_dgamma": pitch * 4,
        "f32_dy": tile * 4, "f32_x": tile * 4, "f32_gamma": pitch * 4, "tmp0": tile * 4, "tmp1": tile * 4,
        "row_rms_norm_grad_dot": 32, "row_rms_norm_grad_coef": 32, "reduce_work": 32 + 32,  # 8 results | 8 partials
    }
    assert {b.name: b.total() for b in t.buffers} == expected
    assert t.ub_bytes() == sum(expected.values()) and t.pitch == pitch


def test_scratch_tiles_are_what_the_expressions_need():
    """The budget holds the float32 scratch tiles the op's expressions take (ascend_scratch),
    not a fixed two: RmsNormGrad f32 computes dx in its output queue's tile and needs one
    more, so a 5120-column float32 row fits the UB whole (split-N, each input read once);
    half-precision dx is Cast from scratch, which needs two."""
    f32, half = rms((8192, 5120)), rms((8192, 5120), "f16-f16")
    assert [b.name for b in f32.buffers if b.name.startswith("tmp")] == ["tmp0"] and f32.mode == "split-N"
    assert [b.name for b in half.buffers if b.name.startswith("tmp")] == ["tmp0", "tmp1"]
    assert gn(8, 256, 56 * 56, 32).buffers and GroupTiles().operands(_func("group_norm_backward", "f32-f32")) \
        .scratch_tiles == 1


# Ops a pattern takes but the emitter cannot print yet, each with what it lacks: none today.
# RmsNormGradQuant, whose round-half-even int8 store had no Cast, was one (see via_half); the two
# gathers of issue 38 were, until the channel pattern read a per-rank (N,) input by the scalar unit.
ASCEND_EMIT_GAPS: dict = {}


def test_scratch_counts_are_tight_for_the_emitter(monkeypatch):
    """Every emitted kernel emits with the counted scratch tiles (else EmitError), and where
    the count is above the one-tile floor, one fewer makes the emitter refuse: the count and
    the emitter's pool agree, so the UB budget holds exactly the pool. The channel pattern's
    floor is TEMP_TILES (its pool before it was counted), the others' one tile."""
    from opgen import kernels
    from opgen.ops import all_ops
    from opgen.schedules import ascend as ascend_rules
    from opgen.targets.ascend.build import project
    from opgen.targets.ascend.exprs import EmitError
    from opgen.schedules.ascend_tiling import TEMP_TILES

    counted, tight = ascend_rules.scratch_tiles, 0
    for op in all_ops():
        for combo in op.combos:
            if isinstance(kernels.matching_rule(op, combo, A2), ascend_rules.Unsupported):
                continue    # no pattern takes it: nothing is emitted
            floor = TEMP_TILES if isinstance(kernels.matching_rule(op, combo, A2), ascend_rules.ChannelTiles) else 1
            mod, symbol = kernels.scheduled_module(op, combo, A2, "default", kernels.kernel_point(op, combo, A2, None))
            func = mod[symbol]
            monkeypatch.setattr(ascend_rules, "scratch_tiles", counted)
            if op.name in ASCEND_EMIT_GAPS:   # a known gap must still be one (drop the entry when it emits)
                with pytest.raises(EmitError, match=ASCEND_EMIT_GAPS[op.name]):
                    project(func, symbol, A2.hardware)
                continue
            project(func, symbol, A2.hardware)
            seen = []
            monkeypatch.setattr(ascend_rules, "scratch_tiles", lambda *a: seen.append(counted(*a)) or seen[-1] - 1)
            try:
                project(func, symbol, A2.hardware)
            except EmitError as err:
                assert "more float32 temporaries" in str(err)
                tight += 1
            else:
                assert max(seen, default=1) <= floor, (op.name, combo.tag, seen)   # only the floor may be slack
    assert tight > 40, tight


@pytest.mark.parametrize("n, c, hxw, g, mode", [
    (12, 64, 128 * 128, 32, "hw-chunk"), (1, 2130, 1664, 71, "channels"), (32, 64, 1, 64, "hw1"),
    (2, 8, 49, 2, "group"), (2, 4, 4000, 2, "channel"),
])
def test_group_modes(n, c, hxw, g, mode):
    t = gn(n, c, hxw, g)
    assert t.mode == mode and t.ub_bytes() <= A2.hardware.usable_ub_bytes
    assert (t.block_dim - 1) * t.block_factor < n * g <= t.block_dim * t.block_factor


def test_empty_tensors_plan_no_passes_but_zero_column_sums():
    t = rms((0, 16))
    assert t.mode == "empty" and t.block_dim == 1 and t.block_factor == 0    # dgamma of no rows: zeros
    assert rms((4, 0)).block_dim == 0
    assert gn(0, 4, 5, 2).mode == "empty" and gn(0, 4, 5, 2).block_dim == 1
    assert gn(2, 4, 0, 2).mode == "empty"


def test_sums_knob_sets_workspace():
    det, atomic = rms((941, 64), sums="deterministic"), rms((941, 64), sums="atomic")
    assert det.workspace_bytes == 48 * 64 * 4 and atomic.workspace_bytes == 0
    assert det.gm_bytes > atomic.gm_bytes
    assert gn(4, 8, 16, 2, sums="deterministic").workspace_bytes == 4 * 2 * 4 * 4 * 2    # tasks x D x 4 B x 2 sums
    assert gn(4, 8, 16, 2, sums="atomic").workspace_bytes == 2 * 4 * 4 * 2                # groups x D x 4 B x 2 sums


def test_over_budget_tilings_are_refused_with_the_buffer_list():
    with pytest.raises(UbBudgetError) as err:
        rms((48 * 300, 2000), rows_per_pass=255)
    message = str(err.value)
    for name in ("in_dy", "in_x", "out_rms_norm_grad_dx", "tmp0", "reduce_work", "196352"):
        assert name in message
    with pytest.raises(UbBudgetError, match="chan_group_norm_backward_ds"):
        gn(2, 200000, 4, 2)          # the per-channel sums of one group alone exceed the UB


def test_every_tiling_fits_every_product():
    for product in hardware.DESCRIPTIONS:
        target = get_target("ascend-emu").for_product(product)
        ragged = target.hardware.data_copy_pad          # else rows must be whole 32-byte blocks
        for shape in ((1, 1), (941, 7), (3, 12290), (48, 640), (2, 100000)) if ragged else \
                ((1, 16), (941, 16), (3, 12288), (48, 640), (2, 100000)):
            t = rms(shape, "f32-f32", target)
            assert 0 < t.ub_bytes() <= target.hardware.usable_ub_bytes
            assert sum(b.count for b in t.buffers) <= target.hardware.max_buffers


# ---- opgen tiling ----------------------------------------------------------------------

def test_cann_formulas_by_hand():
    from opgen.ops.group_norm_backward.cann_tiling import group_norm_grad
    from opgen.ops.rms_norm_grad.cann_tiling import rms_norm_grad

    # (12, 64, 16384, 32) f32: reserve 1024 + 8*4*3 = 1120; a channel needs 16384*4*3 > UB -> mode 3.
    assert group_norm_grad(12, 64, 16384, 32, 4, 48)["mode"] == "hw-chunk (3)"
    # (1, 2130, 1664, 71): reserve 1024 + 32*12 = 1408; (196608-1408) // (1664*12) = 9 channels -> mode 2.
    line = group_norm_grad(1, 2130, 1664, 71, 4, 48)
    assert (line["mode"], line["per_pass"], line["cores"], line["per_core"]) == ("channels (2)", "9 x 1664", 36, 2)
    assert group_norm_grad(32, 64, 1, 64, 4, 48)["sums"] == "deterministic"    # N > 2
    line = rms_norm_grad(16, 12290, 2, 48)
    assert (line["mode"], line["per_pass"], line["cores"]) == ("split-D", "1 x 4096", 16)
    line = rms_norm_grad(130, 16, 2, 48)     # ubFactor = (195584-160)//652 = 299
    assert (line["mode"], line["per_pass"], line["per_core"]) == ("small-D", "3 x 16", 3)


def test_opgen_tiling_report_lists_every_case_with_matching_modes():
    cases = [c for c in tiling_report.report_lines("AtlasA2") if c.cann is not None]   # with a CANN formula
    assert len(cases) == 7
    for case in cases:
        assert case.cann.mode.split()[0] == case.opgen.mode, case.label
        assert (case.opgen.cores, case.opgen.per_core) == (case.cann.cores, case.cann.per_core), case.label


def test_the_report_covers_every_registered_op_without_naming_one():
    """Each op shows up, with its package's CANN cases or its benchmark shapes; the module
    itself names no op."""
    from opgen.ops import all_ops

    labels = [c.label for c in tiling_report.report_lines("AtlasA2")]
    for op in all_ops():
        formulas = tiling_report.cann_formulas(op)
        label = getattr(formulas, "LABEL", op.aclnn_name.removeprefix("aclnn"))
        expected = len(formulas.CASES) if formulas else len(op.cases.bench)
        assert sum(lbl.startswith(label + " ") for lbl in labels) == expected, op.name
    source = open(tiling_report.__file__).read()
    assert not any(op.name in source or op.aclnn_name in source for op in all_ops())


def test_opgen_tiling_command(capsys):
    from opgen import cli

    assert cli.main(["tiling", "--product", "AtlasA2", "--cores", "40"]) == 0
    out = capsys.readouterr().out
    assert "40 vector cores" in out and out.count("CANN ") == 7 and out.count("opgen ") >= 7
    assert "RmsNormGrad x[16, 12290] gamma_ndim=1 bf16" in out and "GroupNormGrad N=1 C=2130 HxW=1664 G=71" in out


def test_tiling_report_main_without_the_cli(capsys):
    assert tiling_report.main(argparse.Namespace(product="Ascend950", cores=None)) == 0
    assert "Ascend950" in capsys.readouterr().out


def test_products_without_data_copy_pad_need_whole_block_rows():
    inference = get_target("ascend-emu").for_product("AtlasInference")
    assert rms((7, 64), "f16-f16", inference).mode == "small-D"
    assert "in_rstd" not in {b.name for b in rms((7, 64), "f16-f16", inference).buffers}   # scalar GM reads
    with pytest.raises(CopyAlignmentError, match="multiples of 16"):
        rms((7, 33), "f16-f16", inference)
    with pytest.raises(CopyAlignmentError, match="HxW=5"):
        gn(2, 32, 5, 2, "f32-f32", get_target("ascend-emu").for_product("AtlasTraining"))


def test_cann_lines_only_where_cann_runs_those_formulas():
    """A2/A3 get CANN's line; elsewhere the report names the CANN kernel that applies
    (positive control: the same op packages do give a line on AtlasA2)."""
    from opgen.ops.rms_norm_grad import cann_tiling as rms_cann

    assert any(c.cann is not None for c in tiling_report.report_lines("AtlasA3"))
    for product, word in (("AtlasTraining", "whole_reduce"), ("Ascend950", "regbase"), ("AtlasInference", "310P")):
        cases = tiling_report.report_lines(product)
        assert all(c.cann is None for c in cases), product
        assert any(word in c.note for c in cases if c.label.startswith(rms_cann.LABEL + " ")), product


def test_cann_test_cores_reproduce_ops_nn_splits():
    """ops-nn's RmsNormGrad tiling tests inline CORE_NUM 40: (130, 16) splits 33 cores x 4 rows
    there, 44 x 3 on a 48-core A2."""
    from opgen.ops.rms_norm_grad.cann_tiling import TEST_CORES, rms_norm_grad

    assert TEST_CORES == 40
    line = rms_norm_grad(130, 16, 2, TEST_CORES)
    assert (line["cores"], line["per_core"]) == (33, 4)
    assert (rms_norm_grad(130, 16, 2, 48)["cores"], rms_norm_grad(130, 16, 2, 48)["per_core"]) == (44, 3)


def test_split_d_traffic_gap_to_cann_is_the_deterministic_sums():
    """split-D RmsNormGrad (16, 12288) f16: each core's first row writes its float32 workspace
    row and later rows read-modify-write it, so deterministic sums cost exactly one float32
    read of the per-core partials more than atomic ones (the final pass, which adds them in
    core order); with atomic sums, CANN's default, opgen's plan moves what CANN's does to
    within CANN's 48 KB of dgamma zeroing. (Zeroing the workspace first, as the emitter did,
    made it 5.95 MB, 1.68x CANN's.)"""
    from opgen.ops import get_op
    from opgen.ops.rms_norm_grad.cann_tiling import rms_norm_grad

    target = replace(get_target("ascend-emu").for_product("AtlasA2"),
                     hardware=get_target("ascend-emu").for_product("AtlasA2").hardware.with_cores(40))
    op = get_op("rms_norm_grad")
    problem = op.parse_problem("16x12288")
    det = tiling_report.opgen_line(op, "f16-f16", problem, target, {"sums": "deterministic"})
    atomic = tiling_report.opgen_line(op, "f16-f16", problem, target, {"sums": "atomic"})
    cann = rms_norm_grad(16, 12288, 2, 40)["gm_bytes"]
    assert det.gm_bytes - atomic.gm_bytes == 16 * 12288 * 4   # the partials read back once
    assert abs(atomic.gm_bytes - cann) <= 12288 * 4 + 64      # CANN zeroes no float32 dgamma row
    assert det.gm_bytes / cann < 1.25


@pytest.mark.parametrize("argv,needle", [(["tiling", "--product", "Nope"], "unknown product 'Nope'"),
                                         (["generate", "--op", "nosuch"], "unknown op 'nosuch'"),
                                         (["tiling", "--cores", "0"], "--cores must be at least 1")])
def test_bad_cli_input_is_one_line_exit_2(capsys, argv, needle):
    from opgen import cli

    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert needle in captured.err and captured.err.strip().count("\n") == 0 and "Traceback" not in captured.err


@pytest.mark.parametrize("op_name,passes",
                         [("group_norm_backward", 1), ("group_norm_swish_grad", 1), ("group_norm", 2)])
def test_channel_sums_take_a_second_pass_only_for_a_value_they_read(op_name, passes):
    """GroupNormBackward's sum of dy*x comes after the stage folding the sum of dy in
    program order but does not read it: one pass over the task's data for both sums (a
    second one read x and dy a third time: 128 -> 180 MB modelled on (8,256,56x56,32)).
    GroupNorm's centred variance reads the mean: two."""
    from tvm import te

    from opgen.ops import get_op
    from opgen.schedules.ascend import GroupTiles

    op = get_op(op_name)
    func = te.create_prim_func(op.compute(op.combo("f32-f32")))
    assert GroupTiles().operands(func).sum_passes == passes


@pytest.mark.parametrize("op_name,passes", [("layer_norm_backward", 1), ("rms_norm_grad", 1), ("layer_norm", 2)])
def test_split_d_reductions_share_a_pass_unless_one_reads_the_other(op_name, passes):
    """LayerNormBackward's two row sums (dy*gamma, dy*gamma*(x-mean)) read neither each other
    nor the scalar between them: one pass over a row's column chunks for both (before, one
    each: 2.35 -> 1.85 GB modelled on 8192x5120). LayerNorm's centred variance reads the
    mean: two."""
    from tvm import te

    from opgen.ops import get_op
    from opgen.schedules.ascend import RowTiles

    op = get_op(op_name)
    func = te.create_prim_func(op.compute(op.combos[0]))
    assert RowTiles().operands(func).row_passes == passes
