"""opgen compare: CANN's standards computed right, passing against ATen, failing on perturbed
outputs exactly where each standard should; golden dumps read back exactly or refused."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from opgen import baselines, compare, config, dumps, standards
from opgen.cli import main as cli_main
from opgen.dtypes import BFLOAT16, numpy_dtype, round_to
from opgen.ops import all_ops

ROOT = Path(__file__).resolve().parents[1]


def _case(op, tag, shape, rng):
    problem = baselines.parse_problem(op, shape)
    inputs = baselines.random_inputs(op, tag, problem, rng)
    return problem, inputs


@pytest.mark.parametrize("op,shape", [("rms_norm_grad", "64x256"), ("group_norm_backward", "2,32,8x8,8"),
                                      ("rms_norm", "64x256"), ("group_norm", "2,32,8x8,8"), ("layer_norm", "64x256"),
                                      ("batch_norm", "2x16x7x9"), ("batch_norm_backward", "2x16x7x9"),
                                      ("layer_norm_backward", "4x3x40,2"),
                                      ("group_norm_swish", "2,32,8x8,8")])
def test_passes_against_aten(op, shape):
    pytest.importorskip("torch")
    rows = compare.against_aten([op], {op: ("f32-f32", "bf16-bf16")}, {op: (shape,)}, seed=1, repeats=1)
    assert {r.output for r in rows} == set(compare.get_op(op).outputs)
    failed = [r.as_dict() for r in rows if not r.passed]
    assert not failed


@pytest.mark.parametrize("op,shape", [("rms_norm", "7x33"), ("group_norm", "3,6,5x7,3"), ("layer_norm", "3x7x33,2"),
                                      ("batch_norm", "2x3x5x7"), ("batch_norm", "2x3x5x7,eval"),
                                      ("group_norm_swish", "3,6,5x7,3,1e-5,0.5")])
def test_every_forward_peer_computes_the_op(op, shape, rng):
    """The forward ops' peers (the library of opgen compare, the contenders of opgen bench)
    compute the op themselves: in float32 they meet the standards against the reference; in
    bfloat16 ATen's own rounding (statistics and intermediates rounded to bfloat16: a
    BatchNorm y 77% within the double-thousandths band) fails them, so there the mean
    relative error bounds them. A peer computing something else would make every ratio and
    speedup against it meaningless."""
    pytest.importorskip("torch")
    for tag in ("f32-f32", "bf16-bf16"):
        problem, inputs = _case(op, tag, shape, rng)
        for peer in compare.get_op(op).peers:
            theirs = peer.make(problem, {k: baselines.to_torch(v) for k, v in inputs.items()})()
            rows = compare.judge(op, tag, problem, inputs, theirs, peer.name)
            assert {r.output for r in rows} == set(theirs) and "y" in theirs
            if tag == "f32-f32":
                assert all(r.theirs.dt_pass and r.theirs.mm_pass for r in rows), (peer.name, tag)
            else:
                assert all(r.theirs.mere < 2 ** -5 for r in rows), (peer.name, tag, [r.theirs.mere for r in rows])


def test_batch_norm_statistics_are_compared_in_the_rows_dtype(rng):
    """A row asking for float16 saveMean/saveInvstd (f16-f32-f16: float32 weight, float16
    statistics) is compared with ATen's statistics rounded to float16: ATen returns float32
    ones there, and held against them opgen's own float16 rounding read as 6632x "ATen's
    error" (issue 37). Its double benchmark is then level L2, the output's rounding on both
    sides; opgen's statistics stay in the row's dtype."""
    pytest.importorskip("torch")
    rows = compare.against_aten(["batch_norm"], {"batch_norm": ("f16-f32-f16",)}, {"batch_norm": ("2x16x7x9",)},
                                seed=0, repeats=0)
    stats = [r for r in rows if r.output in ("save_mean", "save_invstd")]
    assert len(stats) == 2
    for r in stats:
        assert r.theirs.u == r.ours.u == standards.unit_roundoff("float16"), r.as_dict()
        assert r.passed and r.level == "L2", r.as_dict()


def _ulps(got: np.ndarray, exact: np.ndarray) -> int:
    """Largest distance in float32 ulps between ``got`` and ``exact`` (float64) rounded."""
    want = exact.astype(np.float32)
    return int(np.max(np.abs(got.astype(np.float32).view(np.int32).astype(np.int64)
                             - want.view(np.int32).astype(np.int64))))


def test_cpu_sums_round_once(rng):
    """The CPU accumulates channel and column sums in float64 (schedules/llvm.py,
    _widen_sum; issue 37): BatchNorm's saveMean on channels whose mean is ~1/100 of their
    spread (a float32 accumulation carries tens of u there: opgen's was 53u, ATen's 1u) and
    LayerNormBackward's dbeta (a column sum that cancels) are the float64 results rounded,
    within one ulp."""
    problem = baselines.parse_problem("batch_norm", "2x16x7x9")
    inputs = baselines.random_inputs("batch_norm", "f32-f32", problem, rng)
    inputs["x"] = (rng.standard_normal(problem.x_shape) * 2.0 + 0.02).astype(np.float32)
    mean = baselines.opgen_call("batch_norm", problem, inputs)()["save_mean"]
    assert _ulps(mean, inputs["x"].astype(np.float64).mean(axis=(0, 2, 3))) <= 1
    problem = baselines.parse_problem("layer_norm_backward", "256x1024")
    inputs = baselines.random_inputs("layer_norm_backward", "f32-f32", problem, rng)
    dbeta = baselines.opgen_call("layer_norm_backward", problem, inputs)()["dbeta"]
    dy = inputs["dy"].astype(np.float64).reshape(-1, dbeta.size)
    assert _ulps(dbeta, dy.sum(axis=0)) <= 1


@pytest.mark.parametrize("op", [op.name for op in all_ops() if op.cases.compare])
def test_the_compare_library_runs_every_combo(op, rng):
    """``opgen compare`` runs every combo the product documents: ATen's CPU kernel refused 9
    of LayerNormBackward's 13 mixed-dtype combos until its peer upcast them."""
    pytest.importorskip("torch")
    spec = compare.get_op(op)
    library = next(peer for peer in spec.peers if peer.compare)
    problem = spec.problems[0]
    for combo in spec.combos:
        inputs = baselines.random_inputs(op, combo.tag, problem, rng)
        theirs = library.make(problem, {k: baselines.to_torch(v) for k, v in inputs.items()})()
        assert set(theirs) <= set(spec.outputs) and theirs, (op, combo.tag)


def test_one_percent_on_dgamma_fails_f32(rng):
    """The issue's example: every dgamma element 1% off fails DT, MERE/MARE and the double benchmark."""
    problem, inputs = _case("rms_norm_grad", "f32-f32", "32x128", rng)
    ours = baselines.opgen_call("rms_norm_grad", problem, inputs)()
    library = {k: np.array(v, copy=True) for k, v in ours.items()}
    ours["dgamma"] = (ours["dgamma"] * np.float32(1.01)).astype(np.float32)
    rows = {r.output: r for r in compare.judge("rms_norm_grad", "f32-f32", problem, inputs, library, "lib", ours)}
    bad, good = rows["dgamma"], rows["dx"]
    assert not bad.ours.dt_pass and bad.ours.within == 0.0
    assert not bad.ours.mm_pass and bad.ours.mere == pytest.approx(0.01, rel=0.01)
    assert bad.level is None and bad.ratios[1] > 100
    assert not bad.passed
    assert good.passed and good.level == "L2" and good.ratios == (1.0, 1.0, 1.0)


def test_sparse_error_fails_only_double_thousandths(rng):
    """0.5% of f16 elements off by 0.5%: more than a thousandth outside, yet MERE/MARE hold."""
    ref = rng.standard_normal(20000)
    out = round_to(ref, "float16")
    idx = rng.choice(ref.size, ref.size // 200, replace=False)
    out[idx] = ref[idx] * 1.005
    e = standards.errors(out, ref, "float16", "float16")
    assert 0.994 < e.within < 0.996
    assert not e.dt_pass and e.mm_pass


def test_uniform_drift_fails_only_the_double_benchmark(rng):
    """5e-6 relative everywhere on f32: inside DT and MERE/MARE, 100x a correctly rounded library."""
    ref = rng.standard_normal(20000)
    library = standards.errors(round_to(ref, "float32"), ref, "float32", "float32")
    ours = standards.errors(ref * (1 + 5e-6), ref, "float32", "float32")
    assert ours.dt_pass and ours.mm_pass
    ratios = standards.benchmark_ratios(ours, library)
    assert min(ratios) > 10 and standards.level(ratios) is None


@pytest.mark.parametrize("ratios,level", [((2, 1.2, 1.2), "L2"), ((2.01, 1.2, 1.2), "L1"), ((5, 1.5, 1.5), "L1"),
                                          ((1, 1, 1.6), "L0"), ((10, 2, 2), "L0"), ((10.5, 1, 1), None)])
def test_levels(ratios, level):
    assert standards.level(ratios) == level


def test_relative_error_near_zero(rng):
    """Exact zeros and tiny values in the reference: last-bit absolute noise is not 'infinite'
    relative error (the floor), while a 1% relative error on normal values still shows."""
    ref = rng.standard_normal(10000)
    ref[::100] = 0.0
    ref[1::100] = 1e-12
    noisy = ref + rng.standard_normal(ref.size) * 1e-8
    e = standards.errors(noisy, ref, "float32", "float32")
    assert np.isfinite(e.mare) and e.mm_pass
    assert standards.errors(ref * 1.01, ref, "float32", "float32").mare == pytest.approx(0.01)


def test_integer_output_is_judged_in_steps(rng):
    """An int8 output (the reference unrounded, saturated): correct rounding passes MM, and so
    do flips to the other neighbour near a .5 (what a float32 value within its error of a tie
    rounds to); a relative MARE failed both (1.0 on every rms_norm_grad_quant row, ATen's too).
    Truncation (a bias of ~1/4 step) and an element 1.4 steps away fail."""
    ref = np.clip(rng.uniform(-140.0, 140.0, 20000), -128, 127)
    ref[:50] = np.arange(-25, 25) + 0.5 + 1e-6       # ties, just above
    rounded = round_to(ref, "int8")
    e = standards.errors(rounded, ref, "float32", "int8")
    assert e.integer and e.dt_pass and e.mm_pass and e.mare <= 0.5 and 0.2 < e.mere < 0.3
    flipped = rounded.copy()
    flipped[:50] -= 1                                 # the other neighbour of a near-tie
    assert standards.errors(flipped, ref, "float32", "int8").mm_pass
    truncated = np.trunc(ref)
    e = standards.errors(truncated, ref, "float32", "int8")
    assert e.mare < 1 and not e.mm_pass
    far = rounded.copy()
    far[100] = np.floor(ref[100]) - 1 if ref[100] - np.floor(ref[100]) < 0.5 else np.ceil(ref[100]) + 1
    e = standards.errors(far, ref, "float32", "int8")
    assert e.mare > 1 and not e.mm_pass


def test_quantized_rows_pass_against_aten():
    """rms_norm_grad_quant's int8 dx against ATen's composite, both sides judged in steps:
    every element one of the two integers around the float64 reference."""
    pytest.importorskip("torch")
    op = "rms_norm_grad_quant"
    rows = compare.against_aten([op], {op: ("f32-f32-f32-i8",)}, {op: ("64x256", "64x256,1,0")}, seed=1, repeats=0)
    dx = [r for r in rows if r.output == "dx"]
    assert len(dx) == 2 and all(r.ours.integer and r.theirs.integer for r in dx)
    failed = [r.as_dict() for r in rows if not (r.passed and r.theirs.mm_pass)]
    assert not failed


def test_specials_must_match():
    ref = np.array([1.0, np.nan, np.inf, 2.0])
    assert standards.errors(ref.copy(), ref, "float32", "float32").mm_pass
    wrong = np.array([1.0, 0.0, np.inf, 2.0])
    e = standards.errors(wrong, ref, "float32", "float32")
    assert not e.specials_ok and not e.dt_pass and not e.mm_pass


def _golden(rng):
    """Two cases with opgen-made 'library' outputs, bf16 included."""
    cases = []
    for op, tag, shape, attributes in (("rms_norm_grad", "bf16-f32", "6x40", {}),
                                       ("group_norm_backward", "bf16-bf16", "2,12,3x5,3", {"group": 3})):
        problem, inputs = _case(op, tag, shape, rng)
        outputs = baselines.opgen_call(op, problem, inputs)()
        cases.append(dumps.GoldenCase(op, tag, problem, inputs, outputs, attributes))
    return cases


@pytest.mark.parametrize("fmt", ["bin", "npy"])
def test_dump_round_trip(tmp_path, rng, fmt):
    cases = _golden(rng)
    dumps.write_dump(tmp_path, cases, "test library", fmt=fmt)
    assert {p.suffix for p in tmp_path.iterdir()} == {f".{fmt}", ".json"}
    library, back = dumps.read_dump(tmp_path)
    assert library == "test library" and len(back) == len(cases)
    for want, got in zip(cases, back):
        assert (got.op, got.tag, got.problem, got.attributes) == (want.op, want.tag, want.problem, want.attributes)
        for name, array in {**want.inputs, **want.outputs}.items():
            again = {**got.inputs, **got.outputs}[name]
            assert again.dtype == array.dtype and again.shape == array.shape
            assert np.array_equal(again.view(np.uint8), np.ascontiguousarray(array).view(np.uint8)), name
    assert back[1].inputs["x"].dtype == numpy_dtype(BFLOAT16)


def test_dump_shape_mismatch_is_refused(tmp_path, rng):
    dumps.write_dump(tmp_path, _golden(rng)[:1], "lib", fmt="bin")
    manifest = json.loads((tmp_path / dumps.MANIFEST).read_text())
    entry = next(t for t in manifest["cases"][0]["tensors"] if t["role"] == "x")
    entry["shape"] = [6, 41]
    (tmp_path / dumps.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(dumps.DumpError, match=r"case0_x\.bin: manifest.json says shape \[6, 41\] bfloat16 = 492 "
                                              r"bytes, but the file has 480 bytes"):
        dumps.read_dump(tmp_path)


def test_npy_mismatch_and_unknown_role_are_refused(tmp_path, rng):
    dumps.write_dump(tmp_path, _golden(rng)[:1], "lib", fmt="npy")
    manifest = json.loads((tmp_path / dumps.MANIFEST).read_text())
    manifest["cases"][0]["tensors"][0]["shape"] = [3, 80]
    (tmp_path / dumps.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(dumps.DumpError, match=r"holds bfloat16 \[6, 40\]; manifest.json says bfloat16 \[3, 80\]"):
        dumps.read_dump(tmp_path)
    manifest["cases"][0]["tensors"][0].update(shape=[6, 40], role="dz")
    (tmp_path / dumps.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(dumps.DumpError, match="unknown role 'dz'"):
        dumps.read_dump(tmp_path)


def test_cli_against_the_example_dump(tmp_path, capfd):
    """Through the CLI (in this process: the fresh-process rerun is bench's test's)."""
    out = tmp_path / "rows.json"
    assert cli_main(["compare", "--against", str(ROOT / "examples" / "golden"), "--repeats", "1",
                     "--omp-wait", "inherit", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert {(r["op"], r["output"]) for r in rows} >= {("rms_norm_grad", "dgamma"), ("group_norm_backward", "dbeta")}
    assert all(r["passed"] for r in rows)
    assert "5 of 5 rows meet every standard" in capfd.readouterr().out


def test_perturbed_library_and_perturbed_opgen(tmp_path, monkeypatch, capsys):
    dump = tmp_path / "golden"
    shutil.copytree(ROOT / "examples" / "golden", dump)
    path = dump / "case1_gradInput.bin"   # the GroupNorm f16 dx the library "computed"
    dx = np.fromfile(path, np.float16)
    (dx * np.float16(1.02)).astype(np.float16).tofile(path)
    # the dump's library is now 2% off, so opgen's ratios are tiny: its own verdicts all pass
    rows = compare.against_dump(dump, repeats=1)
    assert all(r.passed for r in rows)
    # and the other way round: opgen judged against the reference, its output perturbed, fails
    case = dumps.read_dump(dump)[1][1]
    ours = baselines.opgen_call(case.op, case.problem, case.inputs)()
    ours["dx"] = (ours["dx"] * np.float16(1.02)).astype(np.float16)
    bad = compare.judge(case.op, case.tag, case.problem, case.inputs, case.outputs, "lib", ours)
    assert not bad[0].passed and not bad[0].ours.mm_pass and not bad[0].ours.dt_pass
    csv_out = tmp_path / "rows.csv"
    compare.write_rows(bad, csv_out)
    assert csv_out.read_text().splitlines()[0].startswith("op,dtypes,shape,output,library")
    # a failing row makes the command exit 1
    monkeypatch.setattr(compare, "against_dump", lambda directory, repeats: bad)
    assert cli_main(["compare", "--against", str(dump), "--omp-wait", "inherit"]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_cli_refuses_bad_arguments_clearly(tmp_path, capfd):
    names = [op.name for op in all_ops() if op.cases.compare]
    chosen = sum((["--op", name] for name in names), [])
    assert cli_main(["compare", *chosen, "--shape", "4096*4096", "--omp-wait", "inherit"]) == 2
    assert f"--shape 4096*4096: not valid for {', '.join(names)}" in capfd.readouterr().err
    # a bare shape with no --op would run every op whose spelling reads it (a GroupNorm of N=16M)
    assert cli_main(["compare", "--shape", "4096x4096", "--omp-wait", "inherit"]) == 2
    assert "say which op it is for: --shape OP=4096x4096 or --op OP" in capfd.readouterr().err
    for value, why in (("nosuch=4x4", "'nosuch' is not among the compared ops"),
                       ("rms_norm_grad=4*4", "--shape rms_norm_grad=4*4: cannot read")):
        assert cli_main(["compare", "--shape", value, "--omp-wait", "inherit"]) == 2
        err = capfd.readouterr().err
        assert why in err and err.count("\n") == 1, err
    assert cli_main(["compare", "--against", str(tmp_path), "--omp-wait", "inherit"]) == 2
    assert f"{tmp_path}: no manifest.json" in capfd.readouterr().err


def test_an_op_the_product_does_not_offer_is_compared_on_one_that_does(capsys, monkeypatch):
    """On a product that does not offer an op, compare runs it on the first product that
    does and says so on stderr (aclnnFastBatchNormBackward on the default Ascend950 printed
    a bare "0 of 0 rows")."""
    monkeypatch.setenv("OPGEN_PRODUCT", "AtlasInference")
    op = next(op for op in all_ops() if "AtlasInference" not in op.products)
    home = next(iter(op.products))
    assert compare._product_of(op.name) == home
    assert f"{op.aclnn_name} is not offered on AtlasInference: compared on {home}" in capsys.readouterr().err
    with config.using_product(home):
        assert compare._product_tags(op.name) == tuple(c.tag for c in op.products[home])
    assert config.get_product() == "AtlasInference"
