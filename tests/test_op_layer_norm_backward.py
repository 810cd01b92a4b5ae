"""aclnnLayerNormBackward (opgen.ops.layer_norm_backward), end to end.

The float64 reference against finite differences of the float64 forward; the sympy proof
of the TE and a mutation that must break it; the kernels against the reference on llvm
over every dtype combo of every product (sizes 1, 7, 33, 941, 12290, ranks 1-8, empty
tensors), on opencl and ascend-emu, nvcc for cuda; the aclnn API (the document's C
example, every outputMask with and without weight and bias, strided views, mean layouts,
every error line as a literal call with its status and the parameter it names); the
Pythonic function, the torch custom op and opgen.torch.LayerNorm.
Every combo lands on the row pattern on every target, the float16/bfloat16-weight ones
too (their float32 column sums rounded by a cast stage).
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import opgen
from opgen import acl, aclnn, config, derive, kernels
from opgen import schedules
from opgen.apispec import Call
from opgen.dtypes import numpy_dtype
from opgen.ops import get_op
from opgen.ops.layer_norm_backward import Problem, reference
from opgen.targets import get_target
from opgen.verify import compare_outputs, run_and_compare

from aclnn_helpers import base_args, product, run_both
from op_checks import assert_gradient as _assert_gradient, central_difference as _central_difference
from tiers import kept_on, tiered

OP = get_op("layer_norm_backward")
TAGS = [c.tag for c in OP.combos]
BF16 = ml_dtypes.bfloat16
PRODUCTS = ("Ascend950", "AtlasA3", "AtlasA2", "AtlasInference", "AtlasTraining")
def _kernel(tag: str, target="llvm"):
    return kernels.get_kernel(OP, OP.combo(tag), target)


def _ok(status: int, message: str) -> None:
    assert status == 0, message


# ============================================================ reference vs finite differences


REF_CASES = [((3, 5), 1), ((2, 3, 4), 2), ((7,), 1), ((2, 2), 1), ((2, 4, 1), 1), ((2, 3, 4), 3)]


@pytest.mark.parametrize("weighted", [True, False], ids=["weight", "weight-None"])
@pytest.mark.parametrize("shape,k", REF_CASES, ids=[f"{s}-{k}" for s, k in REF_CASES])
def test_reference_matches_finite_differences(shape, k, weighted, rng):
    """dx, dgamma, dbeta are the derivatives of L = sum(dy * layer_norm(x, w, b)) where the
    forward recomputes mean and rstd from x (the one-element rows: x_hat = 0, dx = 0)."""
    norm = shape[len(shape) - k:]
    x = rng.standard_normal(shape) * 2.0 + 0.5
    dy, w, b = rng.standard_normal(shape), rng.uniform(0.5, 1.5, norm), rng.standard_normal(norm)
    w = w if weighted else np.ones(norm)
    _, mean, rstd = reference.layer_norm(x, norm, w, b)
    assert mean.shape == rstd.shape == shape[: len(shape) - k] + (1,) * k
    dx, dgamma, dbeta = reference.layer_norm_backward(dy, x, norm, mean, rstd, w if weighted else None)

    def loss(x_=x, w_=w, b_=b):
        return np.sum(dy * reference.layer_norm(x_, norm, w_, b_)[0])
    _assert_gradient("dx", dx, _central_difference(lambda v: loss(x_=v), x))
    _assert_gradient("dgamma", dgamma, _central_difference(lambda v: loss(w_=v), w))
    _assert_gradient("dbeta", dbeta, _central_difference(lambda v: loss(b_=v), b))


def test_reference_agrees_with_aten_and_takes_any_stat_layout():
    """ATen's native_layer_norm_backward is a second, independent float64 reference, also
    for statistics that are not x's own; mean/rstd as (M,) or (1, M) give the same bits."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    x, dy = rng.standard_normal((3, 4, 5)), rng.standard_normal((3, 4, 5))
    w, b = rng.uniform(0.5, 1.5, (4, 5)), rng.standard_normal((4, 5))
    mean, rstd = rng.standard_normal((3, 1, 1)), rng.uniform(0.5, 2.0, (3, 1, 1))
    ours = reference.layer_norm_backward(dy, x, (4, 5), mean, rstd, w)
    theirs = torch.ops.aten.native_layer_norm_backward(*(torch.from_numpy(a) for a in (dy, x)), [4, 5],
                                                       *(torch.from_numpy(a) for a in (mean, rstd, w, b)),
                                                       [True, True, True])
    for mine, vendor in zip(ours, theirs):
        np.testing.assert_allclose(mine, vendor.numpy(), rtol=1e-12, atol=1e-12)
    for layout in ((3,), (1, 3)):
        again = reference.layer_norm_backward(dy, x, (4, 5), mean.reshape(layout), rstd.reshape(layout), w)
        for a, c in zip(ours, again):
            np.testing.assert_array_equal(a, c)


# ============================================================ the sympy proof and mutations

def test_proof_holds_including_a_degenerate_case():
    report = derive.prove("layer_norm_backward")
    assert report.ok, report.summary()
    assert {(c.sizes["rows"], c.sizes["cols"]) for c in report.cases} == {(2, 3), (1, 4), (2, 1)}
    assert all(c.checked == c.sizes["rows"] * c.sizes["cols"] + 2 * c.sizes["cols"] for c in report.cases)


@pytest.mark.parametrize("tag", ["bf16-bf16", "f16-f32-f32"])
def test_proof_holds_through_casts_and_rounding_stages(tag):
    report = derive.prove("layer_norm_backward", tag, cases=[(2, 2)])
    assert report.ok, report.summary()


@pytest.mark.parametrize("stage,broken,intact", [
    ("layer_norm_backward_dx", ["dx"], ["dgamma", "dbeta"]),
    ("layer_norm_backward_sum_gxc", ["dx"], ["dgamma", "dbeta"]),          # x - mean inside a row sum
    ("layer_norm_backward_dgamma", ["dgamma"], ["dx", "dbeta"]),           # inside a column sum
])
def test_a_flipped_sign_fails_the_proof(flip_stage, stage, broken, intact):
    hits = flip_stage(stage)
    report = derive.prove("layer_norm_backward", cases=[(2, 3)])
    assert hits, f"stage {stage} was never built"
    assert not report.ok and "MISMATCH" in report.summary()
    bad = report.cases[0].mismatches
    for out in broken:
        assert any(m.startswith(f"layer_norm_backward_{out}[") for m in bad), bad
    for out in intact:
        assert not any(m.startswith(f"layer_norm_backward_{out}[") for m in bad), bad


def test_document_formulas():
    """l.39-57 hold with N the product of the normalized dims; N as their number does not."""
    checks = derive.check_seed_formulas([get_op("layer_norm_backward")])   # this op's alone (every op's: tests/test_derive.py)
    assert [(c.output, c.matches) for c in checks] == [("dx", True), ("dx", False), ("dgamma", True),
                                                       ("dbeta", True)]
    assert "number of normalized axes" in checks[1].formula and "l.59" in checks[1].detail


# ============================================================ patterns, problems, combos

def test_tags_and_products():
    """The document's 13 rows on Ascend950/A3/A2, the 5 without BFLOAT16 on inference/training."""
    assert TAGS == ["f32-f32", "f16-f16", "f16-f16-f32", "f16-bf16", "f16-bf16-f32", "f16-f32", "f16-f32-f32",
                    "bf16-bf16", "bf16-bf16-f32", "bf16-f16", "bf16-f16-f32", "bf16-f32", "bf16-f32-f32"]
    for name in ("Ascend950", "AtlasA3", "AtlasA2"):
        assert [c.tag for c in OP.products[name]] == TAGS
    for name in ("AtlasInference", "AtlasTraining"):
        assert [c.tag for c in OP.products[name]] == ["f32-f32", "f16-f16", "f16-f16-f32", "f16-f32", "f16-f32-f32"]
    combo = OP.combo("f16-bf16-f32")
    assert (combo["dy"], combo["mean"], combo["gamma"], combo["dx"], combo["dgamma"], combo["dbeta"]) == (
        "float16", "bfloat16", "float32", "float16", "float32", "float32")
    assert all("beta" not in dict(c.dtypes) for c in OP.combos)     # the bias is no kernel tensor


def test_the_bias_is_validated_only():
    """biasOptional (Param.validated_only): no kernel tensor, no fill, no TE placeholder."""
    bias = OP.api.param("biasOptional")
    assert bias.validated_only and bias.kernel is None and bias.optional
    assert OP.inputs == ("dy", "x", "mean", "rstd", "gamma") and "beta" not in OP.api.fill
    names = [t.op.name for t in OP.compute(OP.combo("f32-f32"))]
    assert names[:5] == list(OP.inputs) and "beta" not in names


@pytest.mark.parametrize("text,shape,k", [("4096x4096", (4096, 4096), 1), ("2x3x8,2", (2, 3, 8), 2),
                                          ("(7x33)", (7, 33), 1)])
def test_problem_spelling(text, shape, k):
    p = OP.parse_problem(text)
    assert (p.input_shape, p.norm_ndim) == (shape, k)
    assert OP.parse_problem(p.label()) == p
    assert p.normalizedShape == shape[len(shape) - k:] and p.rows * p.cols == math.prod(shape)


ROW_RULES = {"llvm": "RowPassWithColumnSums", "cuda": "GpuRowPass", "opencl": "GpuRowPass", "ascend-emu": "RowTiles"}


@pytest.mark.parametrize("target_name", list(ROW_RULES))
@pytest.mark.parametrize("tag", TAGS)
def test_schedule_rules_match_by_pattern(tag, target_name):
    """Every combo lands on the row pattern with two column sums, on every target (the
    half-weight combos' float32 sums are rounded by cast stages the pattern takes)."""
    func = kernels.prim_func(OP, OP.combo(tag))
    got = type(schedules.match(func, get_target(target_name))).__name__
    assert got == ROW_RULES[target_name], got


# ============================================================ kernels vs the reference (llvm)

RANK8 = (2, 3, 1, 2, 1, 3, 2, 5)
KERNEL_PROBLEMS = [
    Problem((1, 1), 1),                 # one element: x_hat = 0
    Problem((2, 2), 1),                 # the document's example shape
    Problem((7, 33), 1), Problem((33, 7), 1), Problem((1, 7), 1),
    Problem((4, 941), 1),
    Problem((3, 12290), 1),             # 12,290 columns
    Problem((12290, 3), 1),             # 12,290 rows (column sums over them)
    Problem((33,), 1),                  # 1-D input: one row
    Problem((2, 3, 5), 2), Problem((2, 3, 5), 3),
    *[Problem(RANK8, k) for k in (1, 4, 8)],
]
EMPTY_PROBLEMS = [Problem((0, 16), 1), Problem((2, 0, 3), 1), Problem((3, 0), 1), Problem((4, 0), 2)]


def _fails(comparisons) -> list:
    return [f"{c.name} ratio={c.ratio:.3g} at {c.worst_index}" for c in comparisons if not c.passed]


@pytest.mark.parametrize("tag", TAGS)
def test_kernel_matches_reference_on_llvm(tag):
    kernel = _kernel(tag)
    rng = np.random.default_rng(sum(map(ord, tag)))
    bad = {str(p): _fails(run_and_compare(kernel, p, rng)[0]) for p in KERNEL_PROBLEMS}
    assert not any(bad.values()), {k: v for k, v in bad.items() if v}


@pytest.mark.parametrize("tag", TAGS)
def test_kernel_without_rows_writes_zero_column_sums_on_llvm(tag):
    """M == 0 (a zero leading dim, or one through a middle dim): dgamma and dbeta are zeros
    (CANN's op_api zero-fills them); the outputs start as nan so an unwritten one shows."""
    kernel = _kernel(tag)
    rng = np.random.default_rng(1)
    for p in (Problem((0, 16), 1), Problem((2, 0, 3), 1)):
        comparisons, outputs = run_and_compare(kernel, p, rng)
        assert not _fails(comparisons), p
        for name in ("dgamma", "dbeta"):
            np.testing.assert_array_equal(outputs[name].astype(np.float32), np.zeros(p.normalizedShape))


@pytest.mark.parametrize("tag", TAGS)
def test_kernel_without_columns_on_llvm(tag):
    """N == 0: every output is empty; the kernel runs and writes nothing."""
    kernel = _kernel(tag)
    rng = np.random.default_rng(2)
    for p in (Problem((3, 0), 1), Problem((4, 0), 2), Problem((0,), 1)):
        comparisons, outputs = run_and_compare(kernel, p, rng)
        assert not _fails(comparisons) and outputs["dx"].size == 0 and outputs["dgamma"].size == 0, p


def _fallback(target_name: str):
    rule = schedules.rules_of(get_target(target_name))[-1]
    assert "Fallback" in type(rule).__name__
    return rule


@pytest.mark.parametrize("tag", [t for t in TAGS if t == "f32-f32" or t.count("-") == 2])
def test_te_numerics_under_the_fallback_rule(tag, monkeypatch):
    """The float32-weight TE, scheduled by llvm's fallback rule instead of the row rule that
    takes it: the math itself, on the ragged and wide shapes, apart from any pattern rule."""
    monkeypatch.setattr(kernels, "matching_rule", lambda op, combo, target: _fallback(target.name))
    kernel = kernels.build(OP, OP.combo(tag), get_target("llvm"), variant="fallback")
    rng = np.random.default_rng(5)
    for p in (Problem((7, 33), 1), Problem((3, 12290), 1), Problem((2, 3, 5), 2), Problem((1, 1), 1)):
        assert not _fails(run_and_compare(kernel, p, rng)[0]), p


@pytest.mark.parametrize("tag", ["f32-f32", "f16-f16", "bf16-f32"])
def test_kernels_never_write_inputs(tag, rng):
    kernel = _kernel(tag)
    p = Problem((5, 3, 40), 2)
    arrays = OP.random_inputs(p, OP.combo(tag), rng)
    before = {k: a.tobytes() for k, a in arrays.items()}
    run_and_compare(kernel, p, rng, inputs=arrays)
    assert {k: a.tobytes() for k, a in arrays.items()} == before


@pytest.mark.parametrize("tag", ["f32-f32", "bf16-bf16"])
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_nan_reaches_its_row_and_column_only(tag):
    """A nan in x poisons its row of dx and its column of dgamma, nothing else."""
    kernel = _kernel(tag)
    p, rng = Problem((4, 37), 1), np.random.default_rng(3)
    arrays = OP.random_inputs(p, OP.combo(tag), rng)
    arrays["x"] = arrays["x"].copy()
    arrays["x"][1, 5] = np.nan
    comparisons, outputs = run_and_compare(kernel, p, rng, inputs=arrays)
    assert not _fails(comparisons)
    dx = outputs["dx"].astype(np.float32)
    assert np.isnan(dx[1]).all() and np.isfinite(np.delete(dx, 1, axis=0)).all()
    dgamma = outputs["dgamma"].astype(np.float32)
    assert np.isnan(dgamma[5]) and np.isfinite(np.delete(dgamma, 5)).all()


# ============================================================ the aclnn API: calls that succeed

def _args(shape, k=1, tag="f32-f32", weight=True, bias=True, mask=(True, True, True), rng=None, **changes) -> dict:
    """A complete call of ``tag``'s dtypes: realistic inputs, zeroed outputs (None where the
    mask bit is false and ``changes`` gives none)."""
    p, combo = Problem(tuple(shape), k), OP.combo(tag)
    rng = rng if rng is not None else np.random.default_rng(0)
    a = OP.random_inputs(p, combo, rng)
    dt = {name: numpy_dtype(combo[name]) for name in OP.outputs}
    beta = rng.uniform(-0.5, 0.5, p.normalizedShape).astype(dt["dgamma"])    # weight's dtype; no kernel tensor
    args = dict(gradOut=a["dy"], input=a["x"], normalizedShape=list(p.normalizedShape), mean=a["mean"],
                rstd=a["rstd"], weightOptional=a["gamma"] if weight else None, biasOptional=beta if bias else None,
                outputMask=list(mask), gradInputOut=np.zeros(p.input_shape, dt["dx"]),
                gradWeightOut=np.zeros(p.normalizedShape, dt["dgamma"]),
                gradBiasOut=np.zeros(p.normalizedShape, dt["dbeta"]))
    for bit, name in enumerate(("gradInputOut", "gradWeightOut", "gradBiasOut")):
        if not mask[bit]:
            args[name] = None
    args.update(changes)
    return args


def _reference(args) -> dict:
    dx, dgamma, dbeta = reference.layer_norm_backward(args["gradOut"], args["input"], args["normalizedShape"],
                                                      args["mean"], args["rstd"], args["weightOptional"])
    return {"dx": dx, "dgamma": dgamma, "dbeta": dbeta}


def _check_outputs(args, tag, names=("gradInputOut", "gradWeightOut", "gradBiasOut")) -> None:
    ref = _reference(args)
    kernel_name = {"gradInputOut": "dx", "gradWeightOut": "dgamma", "gradBiasOut": "dbeta"}
    outs = {kernel_name[n]: np.reshape(np.asarray(args[n]), np.shape(ref[kernel_name[n]])) for n in names}
    bad = _fails(compare_outputs(OP, OP.combo(tag), outs, {k: ref[k] for k in outs}))
    assert not bad, bad


def _run(args) -> None:
    _ok(*run_both(OP, args))


def _sum(args):
    return sum(np.asarray(v, np.float64).sum() for v in args.values() if isinstance(v, np.ndarray))


def test_document_c_example():
    """doc l.382-610 / examples/test_aclnn_layer_norm_grad_v3.cpp, line by line: aclTensors of
    device memory, normalizedShape by aclCreateIntArray, the mask by aclCreateBoolArray."""
    assert acl.aclInit(None) == 0 and acl.aclrtSetDevice(0) == 0
    ret, stream = acl.aclrtCreateStream()
    assert ret == 0
    buffers = []

    def create(host, shape):
        host = np.asarray(host, np.float32)
        ret, addr = acl.aclrtMalloc(host.nbytes, acl.ACL_MEM_MALLOC_HUGE_FIRST)
        assert ret == 0 and acl.aclrtMemcpy(addr, host.nbytes, host, host.nbytes, acl.ACL_MEMCPY_HOST_TO_DEVICE) == 0
        strides = [int(np.prod(shape[i + 1:])) for i in range(len(shape))]
        buffers.append(addr)
        return addr, acl.aclCreateTensor(shape, acl.ACL_FLOAT, strides, 0, acl.ACL_FORMAT_ND, shape, addr)

    x_shape, mean_shape, norm_shape = [2, 2], [2, 1], [2]
    _, dy = create([2, 3, 4, 5], x_shape)
    _, x = create([2, 3, 4, 5], x_shape)
    norm = acl.aclCreateIntArray([2], 1)
    _, mean = create([2, 3], mean_shape)
    _, rstd = create([4, 5], mean_shape)
    _, weight = create([1, 1], norm_shape)
    _, bias = create([0, 0], norm_shape)
    mask = acl.aclCreateBoolArray([True, True, True], 3)
    out_addr, out = create([0] * 4, x_shape)
    dw_addr, dw = create([0, 0], norm_shape)
    db_addr, db = create([0, 0], norm_shape)
    ret, size, executor = aclnn.aclnnLayerNormBackwardGetWorkspaceSize(dy, x, norm, mean, rstd, weight, bias, mask,
                                                                       out, dw, db)
    _ok(ret, acl.aclGetRecentErrMsg())
    workspace = acl.aclrtMalloc(size, acl.ACL_MEM_MALLOC_HUGE_FIRST)[1] if size else None
    _ok(aclnn.aclnnLayerNormBackward(workspace, size, executor, stream), acl.aclGetRecentErrMsg())
    assert acl.aclrtSynchronizeStream(stream) == 0
    results = []
    for addr, n in ((out_addr, 4), (dw_addr, 2), (db_addr, 2)):
        host = np.zeros(n, np.float32)
        assert acl.aclrtMemcpy(host, host.nbytes, addr, host.nbytes, acl.ACL_MEMCPY_DEVICE_TO_HOST) == 0
        results.append(host.tolist())
    assert results == [[-2, -94, -877.5, -1747.5], [20, 62], [6, 8]]
    for addr in buffers + ([workspace] if workspace is not None else []):
        acl.aclrtFree(addr)
    acl.aclrtDestroyStream(stream)


MASKS = [(a, b, c) for a in (True, False) for b in (True, False) for c in (True, False)]


@pytest.mark.parametrize("weight,bias", [(True, True), (True, False), (False, True), (False, False)],
                         ids=["w-b", "w", "b", "none"])
@pytest.mark.parametrize("tag", ["f32-f32", "f16-f16", "bf16-f32-f32", "bf16-bf16"])
def test_every_mask_with_and_without_weight_and_bias(tag, weight, bias):
    """Each asked-for output matches the reference (a null weight is ones); an output the
    mask turns off is never written, whether it is null or an array."""
    rng = np.random.default_rng(sum(map(ord, tag)))
    for mask in MASKS:
        for off_given in (False, True):
            args = _args((3, 4, 6), 2, tag, weight, bias, mask, rng)
            sentinels = {}
            for bit, name in enumerate(("gradInputOut", "gradWeightOut", "gradBiasOut")):
                if not mask[bit] and off_given:
                    shape = args["input"].shape if bit == 0 else (4, 6)
                    sentinels[name] = args[name] = np.full(shape, 7.0, np.float32)
            _run(args)
            _check_outputs(args, tag, [n for bit, n in enumerate(("gradInputOut", "gradWeightOut", "gradBiasOut"))
                                       if mask[bit]])
            assert all((a == 7.0).all() for a in sentinels.values()), mask


@pytest.mark.parametrize("tag", ["f32-f32", "bf16-bf16"])
def test_strided_views_in_and_out(tag):
    """Transposed and every-other-element views as inputs and outputs: written in place,
    the elements between them untouched."""
    rng = np.random.default_rng(9)
    args = _args((5, 12), 1, tag, rng=rng)
    dt = args["gradOut"].dtype
    args["gradOut"] = np.ascontiguousarray(args["gradOut"].T).T                 # transposed
    wide = np.zeros((5, 24), dt)
    wide[:, ::2] = args["input"]
    args["input"] = wide[:, ::2]                                                # every other column
    args["mean"] = np.repeat(args["mean"], 2, axis=1)[:, ::2]                   # (5, 1) strided
    args["rstd"] = np.repeat(args["rstd"], 3, axis=0)[::3]
    args["weightOptional"] = np.repeat(args["weightOptional"], 2)[::2]
    gi_base = np.full((12, 5), 3.0, dt)
    gw_base = np.full(24, 3.0, args["gradWeightOut"].dtype)
    gb_base = np.full((12, 2), 3.0, args["gradBiasOut"].dtype)
    args.update(gradInputOut=gi_base.T, gradWeightOut=gw_base[::2], gradBiasOut=gb_base[:, 1])
    assert not any(args[n].flags.c_contiguous for n in ("gradOut", "input", "gradInputOut", "gradWeightOut"))
    _run(args)
    _check_outputs(args, tag)
    assert (gw_base[1::2] == 3.0).all() and (gb_base[:, 0] == 3.0).all()


@pytest.mark.parametrize("tag", ["f32-f32", "f16-f16"])
def test_ranks_one_to_eight(tag):
    """input of 1 to 8 dims, normalizedShape of 1 to all of them, through the aclnn API."""
    rng = np.random.default_rng(4)
    for rank in range(1, 9):
        shape = RANK8[:rank]
        for k in range(1, rank + 1):
            args = _args(shape, k, tag, rng=rng)
            _run(args)
            _check_outputs(args, tag)


@pytest.mark.parametrize("tag", ["f32-f32", "f16-f16"])
def test_empty_tensors_succeed(tag):
    """M == 0: asked-for gradWeightOut/gradBiasOut are zeros (digest L2; they start as nan);
    N == 0: nothing to write; every mask off: nothing run, nothing written."""
    for shape, k in (((0, 8), 1), ((3, 0, 4), 1)):
        args = _args(shape, k, tag)
        for name in ("gradWeightOut", "gradBiasOut"):
            args[name] = np.full(args[name].shape, np.nan, args[name].dtype)
        _run(args)
        zeros = all((args[n].astype(np.float32) == 0).all() for n in ("gradWeightOut", "gradBiasOut"))
        assert zeros, (args["gradWeightOut"], args["gradBiasOut"])
    for shape, k in (((3, 0), 1), ((2, 4, 0), 2)):
        _run(_args(shape, k, tag))
    args = _args((3, 8), 1, tag, mask=(False, False, False))
    _run(args)


@pytest.mark.parametrize("layout", ["keepdim", "flat", "one-row", "leading"])
def test_mean_and_rstd_layouts(layout):
    """Any shape of M values, the same for both (op_api l.189-195, digest L5); 0-d when M == 1."""
    shape = {"keepdim": (3, 1, 1), "flat": (3,), "one-row": (1, 3), "leading": (3, 1)}[layout]
    args = _args((3, 4, 5), 2, "f16-f16")
    args["mean"], args["rstd"] = args["mean"].reshape(shape), args["rstd"].reshape(shape)
    _run(args)
    _check_outputs(args, "f16-f16")
    single = _args((1, 8), 1, "f16-f16")
    single["mean"], single["rstd"] = single["mean"].reshape(()), single["rstd"].reshape(())
    _run(single)
    _check_outputs(single, "f16-f16")


def test_one_element_per_row_takes_any_one_element_weight_grads():
    """N == 1: gradWeightOut/gradBiasOut of any 1-element shape, 0-d included (digest L6/L7)."""
    for out_shape in ((), (1,), (1, 1)):
        args = _args((4, 1), 1, "f16-f16")
        args["gradWeightOut"] = np.zeros(out_shape, np.float16)
        args["gradBiasOut"] = np.zeros(out_shape, np.float16)
        _run(args)
        _check_outputs(args, "f16-f16")


def test_bias_is_never_read_and_inputs_never_written():
    args = _args((6, 10), 1, "f16-f16")
    args["biasOptional"] = np.full(10, np.nan, np.float16)
    inputs = ("gradOut", "input", "mean", "rstd", "weightOptional", "biasOptional")
    before = {n: args[n].tobytes() for n in inputs}
    _run(args)
    _check_outputs(args, "f16-f16")
    assert {n: args[n].tobytes() for n in inputs} == before


@pytest.mark.parametrize("weight", [True, False], ids=["weight", "weight-None"])
def test_the_bias_never_reaches_the_plan(weight):
    """Param.validated_only: null, nan, strided or (without a weight) FLOAT32 under float16
    data (doc l.180), the bias leaves the outputs bit for bit and the plan never names it."""
    def run(args):
        status, size, executor = aclnn.aclnnLayerNormBackwardGetWorkspaceSize(**args)
        assert status == 0, acl.aclGetRecentErrMsg()
        workspace = acl.aclrtMalloc(size)[1] if size else None
        _ok(aclnn.aclnnLayerNormBackward(workspace, size, executor, None), acl.aclGetRecentErrMsg())
        assert "biasOptional" not in {p.param for p in executor.plan.placements}
        return [(p.kernel, p.kind) for p in executor.plan.placements], size

    base = _args((6, 10), 1, "f16-f16", weight=weight, bias=False)
    placements = run(base)
    want = [base[n].tobytes() for n in ("gradInputOut", "gradWeightOut", "gradBiasOut")]
    wide = np.full((10, 2), np.nan, np.float16)
    biases = [np.full(10, np.nan, np.float16), wide[:, 1]] + ([] if weight else [np.ones(10, np.float32)])
    for bias in biases:
        args = _args((6, 10), 1, "f16-f16", weight=weight, biasOptional=bias)
        assert run(args) == placements
        assert [args[n].tobytes() for n in ("gradInputOut", "gradWeightOut", "gradBiasOut")] == want


@pytest.mark.parametrize("prod", PRODUCTS)
def test_offered_on_every_product(prod):
    """Doc l.5-24: all five opgen products; a float16 call runs on each."""
    with product(prod):
        args = _args((7, 33), 1, "f16-f16")
        _run(args)
        _check_outputs(args, "f16-f16")


# ============================================================ every error line, as literal calls

def _status(prod="Ascend950", args=None, **changes):
    args = dict(_args((2, 3, 8), 2) if args is None else args)
    args.update(changes)
    with product(prod):
        status, size, executor = aclnn.aclnnLayerNormBackwardGetWorkspaceSize(**args)
    message = acl.aclGetRecentErrMsg()
    if status:
        assert executor is None and size == 0 and str(status) in message
    return status, message


def _valid(args, prod="Ascend950"):
    """Phase one's validation alone (no kernel is built): None, or (status, reason)."""
    values = aclnn._describe_all(OP, tuple(args[p.name] for p in OP.api.params))
    return aclnn._check_call(Call(OP, prod, values))


@pytest.mark.parametrize("name", ["gradOut", "input", "normalizedShape", "mean", "rstd", "outputMask"])
def test_l277_required_null_pointers(name):
    status, msg = _status(**{name: None})
    assert status == 161001 and f"{name} is a null pointer" in msg


@pytest.mark.parametrize("bit,name", [(0, "gradInputOut"), (1, "gradWeightOut"), (2, "gradBiasOut")])
def test_l280_l286_asked_for_outputs_must_not_be_null(bit, name):
    status, msg = _status(**{name: None})
    assert status == 161001 and f"outputMask[{bit}] is true but {name} is a null pointer" in msg
    mask = [True] * 3
    mask[bit] = False
    args = _args((2, 3, 8), 2, "f16-f16", mask=mask)
    assert args[name] is None
    _ok(*_status(args=args))


def test_l318_mask_length_and_the_order_of_the_checks():
    """Digest L14: outputMask's length is checked before the null outputs; a null asked-for
    output before any dtype; dtypes before shapes."""
    for mask in ([True, True], [True] * 4, []):
        status, msg = _status(outputMask=mask)
        assert status == 161002 and f"outputMask has {len(mask)} elements; expected 3" in msg
    assert _status(outputMask=[True, True], gradInputOut=None)[0] == 161002
    status, msg = _status(gradInputOut=None, gradOut=np.ones((2, 3, 8), np.float64))
    assert status == 161001 and "gradInputOut" in msg
    status, msg = _status(gradOut=np.ones((2, 3, 8), np.float64), input=np.ones((2, 3, 9), np.float32))
    assert status == 161002 and "gradOut has dtype float64" in msg
    assert _status(outputMask=[1, 1, 1])[0] == 161002          # ints are not bools
    _ok(*_status(args=_args((2, 3, 8), 2, "f16-f16"), outputMask=acl.aclCreateBoolArray([True, True, True])))


@pytest.mark.parametrize("name,dtype", [("gradOut", np.float64), ("input", np.float64), ("mean", np.int32),
                                        ("rstd", np.float64), ("weightOptional", np.float64),
                                        ("biasOptional", np.int32), ("gradInputOut", np.float64),
                                        ("gradWeightOut", np.float64), ("gradBiasOut", np.float64)])
def test_l291_dtypes_outside_the_supported_range(name, dtype):
    args = _args((2, 3, 8), 2)
    status, msg = _status(**{name: args[name].astype(dtype)})
    assert status == 161002 and f"{name} has dtype {np.dtype(dtype).name}" in msg


def test_l291_outputs_are_dtype_checked_whatever_their_mask():
    """op_api l.96-104: a non-null output's dtype is checked even when its mask bit is false."""
    args = _args((2, 3, 8), 2, mask=(True, True, False), gradBiasOut=np.zeros((3, 8), np.float64))
    status, msg = _status(args=args)
    assert status == 161002 and "gradBiasOut has dtype float64" in msg
    ok = _args((2, 3, 8), 2, "f16-f16", mask=(True, True, False), gradBiasOut=np.zeros(99, np.float32))
    _ok(*_status(args=ok))                     # a float of any shape: no other check when masked off


@pytest.mark.parametrize("prod", ["AtlasInference", "AtlasTraining"])
def test_l249_no_bfloat16_on_atlas_inference_and_training(prod):
    for name in ("gradOut", "mean", "weightOptional", "biasOptional", "gradWeightOut"):
        args = _args((2, 3, 8), 2, "f16-f16")
        args[name] = args[name].astype(BF16)
        status, msg = _status(prod, args)
        assert status == 161002 and f"{name} has dtype bfloat16" in msg and prod in msg
    with product("AtlasA2"):
        _run(_args((2, 3, 8), 2, "bf16-bf16"))


def test_dtype_relations():
    """l.120, l.170 (checked by the op_api) and the relations opgen checks because its kernels
    take the document's rows (digest L8)."""
    f16 = _args((2, 3, 8), 2, "f16-f16")
    status, msg = _status(args=f16, input=f16["input"].astype(np.float32))
    assert status == 161002 and "gradOut has dtype float16; expected float32" in msg
    status, msg = _status(weightOptional=np.ones((3, 8), np.float16))
    assert status == 161002 and "weightOptional has dtype float16" in msg and "FLOAT32" in msg
    status, msg = _status(args=f16, rstd=f16["rstd"].astype(np.float32))
    assert status == 161002 and "rstd has dtype float32; expected mean's float16" in msg
    status, msg = _status(mean=np.ones((2, 1, 1), np.float16), rstd=np.ones((2, 1, 1), np.float16))
    assert status == 161002 and "mean has dtype float16; expected a bit width not lower than input's float32" in msg
    status, msg = _status(gradInputOut=np.zeros((2, 3, 8), np.float16))
    assert status == 161002 and "gradInputOut has dtype float16" in msg
    status, msg = _status(gradWeightOut=np.zeros((3, 8), np.float16))
    assert status == 161002 and "gradWeightOut has dtype float16" in msg and "do not cast" in msg
    status, msg = _status(biasOptional=np.zeros((3, 8), np.float16))
    assert status == 161002 and "biasOptional has dtype float16; expected float32 (weightOptional's)" in msg
    status, msg = _status(args=f16, biasOptional=np.zeros((3, 8), np.float32))
    assert status == 161002 and "biasOptional has dtype float32; expected float16 (weightOptional's)" in msg
    no_weight = _args((2, 3, 8), 2, "f16-f16", weight=False, bias=False)     # doc l.180: input's or FLOAT32
    for dtype in (np.float16, np.float32):
        _ok(*_status(args=no_weight, biasOptional=np.zeros((3, 8), dtype)))
    status, msg = _status(args=no_weight, biasOptional=np.zeros((3, 8), BF16))
    assert status == 161002 and "biasOptional has dtype bfloat16; expected float16 or float32" in msg
    mixed = _args((2, 3, 8), 2, "f16-f16", mask=(True, False, True), gradWeightOut=np.zeros((3, 8), np.float32))
    _ok(*_status(args=mixed))                  # a masked-off output takes no part in the relations
    for tag in TAGS:                         # the document's rows, cross-16-bit ones included
        assert _valid(_args((2, 3, 8), 2, tag)) is None, tag


def test_l294_grad_out_shape():
    status, msg = _status(gradOut=np.ones((2, 24), np.float32))
    assert status == 161002 and "gradOut has shape (2, 24); expected input's (2, 3, 8)" in msg


def test_l297_normalized_shape_length():
    status, msg = _status(normalizedShape=[])
    assert status == 161002 and "normalizedShape has 0 elements; expected 1 to 8" in msg
    assert _status(normalizedShape=[1] * 9)[0] == 161002
    assert _status(normalizedShape=acl.aclCreateIntArray([3, 9]))[0] == 161002
    assert _status(normalizedShape=[3.0, 8.0])[0] == 161002          # not integers


def test_l300_l303_mean_and_rstd_counts():
    status, msg = _status(mean=np.ones(3, np.float32), rstd=np.ones(3, np.float32))
    assert status == 161002 and "mean and rstd have 3 elements" in msg and "M" in msg and "= 2" in msg
    status, msg = _status(rstd=np.ones((2,), np.float32))
    assert status == 161002 and "rstd has shape (2,); expected mean's (2, 1, 1)" in msg
    # l.300 read inclusively ("axis 0 to axis len(input) - len(normalizedShape)") would want 6 values: refused
    assert _status(mean=np.ones((2, 3), np.float32), rstd=np.ones((2, 3), np.float32))[0] == 161002


def test_l306_l309_weight_and_bias_shapes():
    status, msg = _status(weightOptional=np.ones(24, np.float32))
    assert status == 161002 and "weightOptional has shape (24,); expected normalizedShape (3, 8)" in msg
    status, msg = _status(biasOptional=np.ones((1, 3, 8), np.float32))
    assert status == 161002 and "biasOptional has shape (1, 3, 8)" in msg


def test_l312_input_rank():
    status, msg = _status(normalizedShape=[1, 2, 3, 8])
    assert status == 161002 and "input has 3 dimensions; expected at least len(normalizedShape) = 4" in msg


@pytest.mark.parametrize("prod", PRODUCTS)
@pytest.mark.parametrize("shape,norm", [((2, 3, 8), [3, 9]), ((2, 3, 8), [7, 8]), ((2, 3, 8), [24]),
                                        ((4, 8), [5]), ((2, 3, 8), [-3, 8])])
def test_l315_trailing_dims_against_normalized_shape(prod, shape, norm):
    """Every right-aligned dim is compared (digest L4, decision (a)): also those the op_api's
    loop skips (input (2, 3, 8) with [7, 8]: index 0; (4, 8) with [5]: every index), which a
    real A2/A3/950 call refuses only in phase 2 (561103)."""
    args = _args(shape, 1)
    args.update(normalizedShape=norm, weightOptional=None, biasOptional=None, outputMask=[True, False, False],
                gradWeightOut=None, gradBiasOut=None)
    status, msg = _status(prod, args)
    assert status == 161002 and f"input has shape {tuple(shape)}" in msg and "normalizedShape" in msg


def test_l321_more_than_eight_dimensions():
    nine = (1,) * 7 + (2, 8)
    status, msg = _status(gradOut=np.ones(nine, np.float32), input=np.ones(nine, np.float32),
                          gradInputOut=np.zeros(nine, np.float32), normalizedShape=[8], mean=np.ones(2, np.float32),
                          rstd=np.ones(2, np.float32), weightOptional=None, biasOptional=None,
                          gradWeightOut=np.zeros(8, np.float32), gradBiasOut=np.zeros(8, np.float32))
    assert status == 161002 and "gradOut has 9 dimensions; expected at most 8" in msg
    status, msg = _status(mean=np.ones((1,) * 8 + (2,), np.float32), rstd=np.ones((1,) * 8 + (2,), np.float32))
    assert status == 161002 and "mean has 9 dimensions" in msg
    status, msg = _status(gradBiasOut=np.zeros((1,) * 7 + (3, 8), np.float32))
    assert status == 161002 and "gradBiasOut has 9 dimensions" in msg
    off = _args((2, 3, 8), 2, "f16-f16", mask=(True, True, False), gradBiasOut=np.zeros((1,) * 9, np.float16))
    _ok(*_status(args=off))                  # masked off: no rank or shape check (op_api l.145-153)


def test_output_shapes_when_asked_for():
    """l.200 (gradInputOut = input's shape), l.210/l.220 (normalizedShape; digest L7: a
    same-count other shape is refused while N > 1; any one element when N == 1)."""
    status, msg = _status(gradInputOut=np.zeros((2, 24), np.float32))
    assert status == 161002 and "gradInputOut has shape (2, 24); expected input's (2, 3, 8)" in msg
    status, msg = _status(gradWeightOut=np.zeros(24, np.float32))
    assert status == 161002 and "gradWeightOut has shape (24,); expected normalizedShape (3, 8) (24 elements)" in msg
    status, msg = _status(gradBiasOut=np.zeros((3, 7), np.float32))
    assert status == 161002 and "gradBiasOut has shape (3, 7)" in msg
    off = _args((2, 3, 8), 2, "f16-f16", mask=(False, True, True), gradInputOut=np.zeros(5, np.float16))
    _ok(*_status(args=off))


def test_generic_constraints():
    """Format ND (private formats 161002, ND-family accepted), writable outputs, tensor kinds."""
    _, buf = acl.aclrtMalloc(24 * 4)
    nz = acl.aclCreateTensor([3, 8], acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_FRACTAL_NZ, [3, 8], buf)
    status, msg = _status(weightOptional=nz)
    assert status == 161002 and "FRACTAL_NZ" in msg
    ro = np.zeros((3, 8), np.float32)
    ro.flags.writeable = False
    status, msg = _status(gradWeightOut=ro)
    assert status == 161002 and "read-only" in msg
    status, msg = _status(gradOut=[[1.0] * 8] * 3)
    assert status == 161002 and "gradOut" in msg


def test_each_example_violation_breaks_its_own_rule_first():
    """Stronger than the replay in tests/test_aclnn_validation.py (which checks the status):
    on every product each example violation is caught by the rule that owns it, not earlier."""
    rng = np.random.default_rng(0)
    for prod in PRODUCTS:
        for i, rule in enumerate(OP.api.rules):
            if rule.products is not None and prod not in rule.products:
                continue
            for violation in rule.violations:
                if violation.products is not None and prod not in violation.products:
                    continue
                args, _ = base_args(OP, OP.problems[0], OP.combo("f32-f32"), rng)
                violation.mutate(args)
                call = Call(OP, prod, aclnn._describe_all(OP, tuple(args[p.name] for p in OP.api.params)))
                first = next(j for j, r in enumerate(OP.api.rules)
                             if (r.products is None or prod in r.products) and r.check(call))
                assert first == i, (prod, violation.description, OP.api.rules[first].seed)


# ============================================================ the Pythonic function

@pytest.mark.parametrize("tag", ["f32-f32", "f16-f16"])
def test_pythonic_allocates_and_matches(tag):
    a = _args((3, 4, 6), 2, tag)
    ns, w, b = a["normalizedShape"], a["weightOptional"], a["biasOptional"]
    gi, gw, gb = opgen.layer_norm_backward(a["gradOut"], a["input"], ns, a["mean"], a["rstd"], w, b)
    assert gi.dtype == a["input"].dtype and gi.shape == (3, 4, 6) and gw.shape == gb.shape == (4, 6)
    _check_outputs(dict(a, gradInputOut=gi, gradWeightOut=gw, gradBiasOut=gb), tag)
    gi, gw, gb = opgen.layer_norm_backward(a["gradOut"], a["input"], tuple(ns), a["mean"], a["rstd"],
                                           output_mask=(False, True, False))
    assert gi is None and gb is None and gw.dtype == a["input"].dtype            # no weight: input's dtype
    _check_outputs(dict(a, weightOptional=None, gradWeightOut=gw), tag, ["gradWeightOut"])


def test_pythonic_writes_given_outputs_in_place():
    a = _args((5, 8), 1, "f16-f16")
    base = np.zeros((5, 16), np.float16)
    gi, _, _ = opgen.layer_norm_backward(a["gradOut"], a["input"], [8], a["mean"], a["rstd"], a["weightOptional"],
                                         grad_input=base[:, ::2])
    assert gi.base is base and (base[:, 1::2] == 0).all()
    _check_outputs(dict(a, gradInputOut=gi), "f16-f16", ["gradInputOut"])


def test_pythonic_errors():
    a = _args((2, 3, 8), 2, "f16-f16")
    with pytest.raises(opgen.AclnnError) as info:
        opgen.layer_norm_backward(None, a["input"], [3, 8], a["mean"], a["rstd"])
    assert info.value.status == 161001 and "gradOut" in info.value.message
    for bad in ([3, 9], [-3, 8], [1, 1, 1, 3, 8]):            # refused by the rules, never a crash in allocation
        with pytest.raises(opgen.AclnnError) as info:
            opgen.layer_norm_backward(a["gradOut"], a["input"], bad, a["mean"], a["rstd"])
        assert info.value.status == 161002 and "normalizedShape" in info.value.message
    with pytest.raises(opgen.AclnnError) as info:
        opgen.layer_norm_backward(a["gradOut"], a["input"], [3, 8], a["mean"], a["rstd"], output_mask=(True,))
    assert info.value.status == 161002 and "outputMask" in info.value.message


# ============================================================ torch: the custom op and the module

@pytest.fixture
def torch():
    torch = pytest.importorskip("torch")
    pytest.importorskip("opgen.torch")       # registers torch.ops.opgen.*
    return torch


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_custom_op_passes_opcheck(torch, dtype):
    torch.manual_seed(0)
    dt = getattr(torch, dtype)
    x, dy = torch.randn(3, 4, 8).to(dt), torch.randn(3, 4, 8).to(dt)
    mean, rstd = x.float().mean((1, 2), keepdim=True), torch.rand(3, 1, 1) + 0.5
    w, b = (torch.rand(4, 8) + 0.5).to(dt), torch.randn(4, 8).to(dt)
    for mask in ([True, True, True], [True, False, True], [False, True, False]):
        torch.library.opcheck(torch.ops.opgen.layer_norm_backward.default, (dy, x, [4, 8], mean, rstd, w, b, mask))
    outs = torch.ops.opgen.layer_norm_backward(dy, x, [4, 8], mean, rstd, None, None, [True, False, False])
    assert outs[0].shape == x.shape and outs[1].numel() == 0 and outs[2].numel() == 0


def _pair(torch, ours, theirs):
    with torch.no_grad():
        for p in ours.parameters():
            p.uniform_(0.5, 1.5)
    theirs.load_state_dict(ours.state_dict())
    return ours, theirs


def _grads(module, x, dy):
    x = x.detach().clone().requires_grad_(True)
    module.zero_grad()
    module(x).backward(dy)
    return [x.grad] + [p.grad for p in module.parameters()]


def test_module_is_a_drop_in(torch):
    ot = pytest.importorskip("opgen.torch")
    for kwargs in ({}, {"bias": False}, {"elementwise_affine": False}):
        ours, theirs = ot.LayerNorm((6, 8), **kwargs), torch.nn.LayerNorm((6, 8), **kwargs)
        assert isinstance(ours, torch.nn.LayerNorm) and ours.state_dict().keys() == theirs.state_dict().keys()
        ours.load_state_dict(theirs.state_dict())
        assert repr(ours).endswith(repr(theirs)[len("LayerNorm"):])


@pytest.mark.parametrize("kwargs", [{}, {"bias": False}, {"elementwise_affine": False}], ids=["affine", "no-bias",
                                                                                            "no-affine"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_module_gradients_equal_torch_nn(torch, dtype, kwargs):
    """f32: equal to torch.nn.LayerNorm's to f32 rounding; bf16: as close to the float64
    truth (torch.nn on float64 copies) as bf16 outputs can be, and near torch's bf16 module."""
    ot = pytest.importorskip("opgen.torch")
    torch.manual_seed(1)
    dt = getattr(torch, dtype)
    ours, theirs = _pair(torch, ot.LayerNorm((6, 8), dtype=dt, **kwargs), torch.nn.LayerNorm((6, 8), dtype=dt,
                                                                                            **kwargs))
    x, dy = (torch.randn(4, 6, 8) * 2 + 0.5).to(dt), torch.randn(4, 6, 8).to(dt)
    torch.testing.assert_close(ours(x), theirs(x), rtol=1e-5 if dtype == "float32" else 2 ** -7, atol=1e-5)
    got = _grads(ours, x, dy)
    if dtype == "float32":
        for a, b in zip(got, _grads(theirs, x, dy)):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
        return
    exact = torch.nn.LayerNorm((6, 8), dtype=torch.float64, **kwargs)
    exact.load_state_dict({k: v.double() for k, v in ours.state_dict().items()})
    for a, t, e in zip(got, _grads(theirs, x, dy), _grads(exact, x.double(), dy.double())):
        assert a.dtype == torch.bfloat16
        scale = e.abs().max().item()
        torch.testing.assert_close(a.double(), e, rtol=2 ** -7, atol=2e-2 * scale)
        torch.testing.assert_close(a.double(), t.double(), rtol=2 ** -6, atol=2 ** -5 * scale)


def test_module_gradcheck_through_a_float64_wrapper(torch):
    ot = pytest.importorskip("opgen.torch")
    torch.manual_seed(5)
    module = ot.LayerNorm(6)
    x = torch.randn(3, 6, dtype=torch.float64, requires_grad=True)
    params = [torch.rand(p.shape, dtype=torch.float64).add(0.5).requires_grad_() for p in module.parameters()]

    def wrapped(x, *ps):
        overrides = {name: p.float() for (name, _), p in zip(module.named_parameters(), ps)}
        return torch.func.functional_call(module, overrides, (x.float(),)).double()
    assert torch.autograd.gradcheck(wrapped, (x, *params), eps=1e-2, atol=2e-3, rtol=2e-3)


def test_module_compiles_without_graph_break(torch, monkeypatch):
    ot = pytest.importorskip("opgen.torch")
    calls = []
    real = opgen.api.call_op
    monkeypatch.setattr(opgen.api, "call_op", lambda op, *a, **k: (calls.append(op.name), real(op, *a, **k))[1])
    torch.manual_seed(6)
    model, x = ot.LayerNorm(16), torch.randn(4, 16, requires_grad=True)
    w = torch.randn(4, 16)
    torch.compile(lambda t: (model(t) * w).sum(), fullgraph=True)(x).backward()
    compiled = [x.grad.clone()] + [p.grad.clone() for p in model.parameters()]
    assert calls == ["layer_norm", "layer_norm_backward"]   # the forward is opgen's too
    x.grad = None
    model.zero_grad()
    (model(x) * w).sum().backward()
    for a, b in zip(compiled, [x.grad] + [p.grad for p in model.parameters()]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_aten_peer_matches_the_reference(torch):
    """The compare peer (opgen compare --against aten) on a normalizedShape of two dims."""
    from opgen.baselines import to_torch
    p, combo = OP.parse_problem("4x3x40,2"), OP.combo("f32-f32")
    arrays = OP.random_inputs(p, combo, np.random.default_rng(2))
    (peer,) = [q for q in OP.peers if q.compare]
    got = peer.make(p, {k: to_torch(v) for k, v in arrays.items()})()
    ref = OP.reference(p, arrays)
    assert not _fails(compare_outputs(OP, combo, {k: v.numpy() for k, v in got.items()}, ref))
    del arrays["gamma"]                                        # ATen needs ones for a null weight
    got = peer.make(p, {k: to_torch(v) for k, v in arrays.items()})()
    assert got["dgamma"].shape == (3, 40)


# ============================================================ other targets

# The combos covering keeps on opencl over every op (tests/tiers.py: kernels_kept_on); the rest extended.
OPENCL_TAGS = kept_on(OP, "opencl", lambda combo: combo.tag)


@pytest.mark.parametrize("tag", OPENCL_TAGS)
def test_opencl_every_combo(tag):
    """The GPU schedules for real on PoCL through the aclnn API: ragged rows, more rows than
    the row pass has blocks, two normalized dims, no rows (dgamma/dbeta start as nan)."""
    target = get_target("opencl")
    if not target.can_run():
        pytest.skip(f"opencl cannot run here: {target.missing()}")
    config.set_target("opencl")
    try:
        rng = np.random.default_rng(7)
        for shape, k in (((7, 33), 1), ((3, 941), 1), ((1100, 7), 1), ((2, 3, 5), 2), ((0, 16), 1)):
            args = _args(shape, k, tag, rng=rng)
            for name in ("gradWeightOut", "gradBiasOut"):     # no rows: zeros must be written
                args[name] = np.full(args[name].shape, np.nan, args[name].dtype)
            _run(args)
            _check_outputs(args, tag)
    finally:
        config.reset()


# Every kernel's nvcc check runs in the extended tier; the default tier compiles each GPU pattern and
# dtype mix once (tests/test_gpu_cuda.py).
@pytest.mark.full
@pytest.mark.skipif(not get_target("cuda").can_build(), reason="nvcc is not on PATH")
@pytest.mark.parametrize("tag", ["f32-f32", "f16-f16", "bf16-f32-f32"])
def test_nvcc_compiles(tag):
    cuda = get_target("cuda")
    kernel = _kernel(tag, cuda)
    for report in cuda.compile_check(kernel.module):
        assert report.ok and report.spill_bytes == 0, f"{report.arch}: {report.error} {report.kernels}"


ROW_PATTERN_TAGS = ["f32-f32", "f16-f32-f32", "f16-f16", "bf16-bf16"]


# float32 in the default tier; on ascend-emu the row pattern's half casts are RmsNormGrad's (every
# combo in tests/test_ascend_target.py) and half column sums rounded from float32 accumulators are
# tests/test_patterns.py's (test_column_sums_rounded_by_casts_are_emitted_for_ascend); the
# half combos here in the extended tier.
@pytest.mark.parametrize("tag", tiered(ROW_PATTERN_TAGS, ["f32-f32"], ROW_PATTERN_TAGS))
def test_ascend_emu_emits_and_runs_the_row_pattern(tag):
    """The row pattern RowTiles emits, run under the emulation (the half-weight combos'
    dgamma/dbeta rounded from float32 accumulators by the final pass)."""
    kernel = _kernel(tag, "ascend-emu")
    rng = np.random.default_rng(8)
    for p in (Problem((2, 3, 8), 2), Problem((7, 33), 1), Problem((3, 12290), 1), Problem((70, 64), 1)):
        assert not _fails(run_and_compare(kernel, p, rng)[0]), p
