"""aclnnAdaLayerNormBackward (opgen.ops.ada_layer_norm_backward), end to end.

The float64 reference against finite differences of the float64 AdaLayerNorm forward (and
against ATen); the sympy proof of the TE and mutations that must break it; the kernels
against the reference on llvm over every dtype combo (hidden sizes 1, 7, 33, 941, 12290,
ranks 2-8, both scale layouts); the aclnn API (the document's C example, every subset of
null outputs, null weight and bias, strided views, inputs never written, the products that
offer it, every error line as a literal call with its status and the parameter it names);
the Pythonic function. Every target's segmented row pass rule takes the op (a test pins it
down); on ascend-emu (SegmentTiles) every combo on both products runs ragged sizes in the
extended tier.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import opgen
from opgen import acl, aclnn, derive, kernels
from opgen.dtypes import numpy_dtype
from opgen.ops import get_op
from opgen.ops.ada_layer_norm_backward import Problem, reference
from opgen.targets import get_target
from opgen.verify import compare_outputs, run_and_compare

from aclnn_helpers import product, run_both
from op_checks import BuiltOnDemand, assert_gradient, central_difference
from tiers import each_dtype_mix, tiered

OP = get_op("ada_layer_norm_backward")
TAGS = [c.tag for c in OP.combos]
OFFERED = ("AtlasA3", "AtlasA2")
NOT_OFFERED = ("Ascend950", "AtlasInference", "AtlasTraining")
OUT_NAMES = {"gradInputOut": "dx", "gradScaleOut": "dscale", "gradShiftOut": "dshift", "gradWeightOut": "dgamma",
             "gradBiasOut": "dbeta"}


def _fails(comparisons) -> list:
    return [f"{c.name} ratio={c.ratio:.3g} at {c.worst_index}" for c in comparisons if not c.passed]


# ============================================================ reference vs finite differences

REF_CASES = [((3, 5), (5,)), ((3, 5), (1, 5)), ((2, 3, 4), (2, 4)), ((2, 3, 4), (2, 1, 4)), ((2, 3, 1), (2, 1)),
             ((2, 1, 3, 2), (2, 1, 2))]


@pytest.mark.parametrize("affine", [True, False], ids=["affine", "no-weight-bias"])
@pytest.mark.parametrize("shape,scale_shape", REF_CASES, ids=[f"{s}-{c}" for s, c in REF_CASES])
def test_reference_matches_finite_differences(shape, scale_shape, affine, rng):
    """The five outputs are the derivatives of L = sum(dy * ada_layer_norm(x, ...)) whose
    forward recomputes mean and rstd from x (H = 1: x_hat = 0, dx = 0)."""
    h = shape[-1]
    x, dy = rng.standard_normal(shape) * 2.0 + 0.5, rng.standard_normal(shape)
    scale, shift = rng.uniform(-0.5, 0.5, scale_shape), rng.uniform(-0.5, 0.5, scale_shape)
    w, b = (rng.uniform(0.5, 1.5, h), rng.standard_normal(h)) if affine else (np.ones(h), np.zeros(h))
    _, mean, rstd = reference.ada_layer_norm(x, scale, shift, w, b)
    assert mean.shape == rstd.shape == shape[:-1] + (1,)
    dx, dscale, dshift, dw, db = reference.ada_layer_norm_backward(dy, x, mean, rstd, scale,
                                                                   w if affine else None, b if affine else None)

    def loss(x_=x, scale_=scale, shift_=shift, w_=w, b_=b):
        return np.sum(dy * reference.ada_layer_norm(x_, scale_, shift_, w_, b_)[0])
    assert_gradient("dx", dx, central_difference(lambda v: loss(x_=v), x))
    assert_gradient("dscale", dscale.reshape(scale_shape), central_difference(lambda v: loss(scale_=v), scale))
    assert_gradient("dshift", dshift.reshape(scale_shape), central_difference(lambda v: loss(shift_=v), shift))
    assert_gradient("dweight", dw, central_difference(lambda v: loss(w_=v), w))
    assert_gradient("dbias", db, central_difference(lambda v: loss(b_=v), b))


def test_reference_agrees_with_the_aten_peer_for_any_statistics():
    """The "aten" peer (native_layer_norm_backward on dy * (1 + scale)) is a second,
    independent computation, also for mean/rstd that are not x's own."""
    torch = pytest.importorskip("torch")
    p, rng = Problem((3, 4, 6), 0), np.random.default_rng(11)
    arrays = OP.random_inputs(p, OP.combo("f32-f32"), rng)
    arrays["mean"] = rng.standard_normal(arrays["mean"].shape).astype(np.float32)
    arrays["rstd"] = rng.uniform(0.5, 2.0, arrays["rstd"].shape).astype(np.float32)
    ours = OP.reference(p, arrays)
    aten = next(peer for peer in OP.peers if peer.name == "aten")
    theirs = aten.make(p, {k: torch.from_numpy(v) for k, v in arrays.items()})()
    for name in OP.outputs:
        np.testing.assert_allclose(theirs[name].numpy(), ours[name], rtol=1e-5, atol=1e-4, err_msg=name)


# ============================================================ the sympy proof and mutations

def test_proof_holds_including_a_degenerate_case():
    report = derive.prove("ada_layer_norm_backward")
    assert report.ok, report.summary()
    assert {(c.sizes["batch"], c.sizes["seq"], c.sizes["hidden"]) for c in report.cases} == {
        (2, 2, 3), (1, 3, 2), (2, 2, 1)}


@pytest.mark.parametrize("tag", tiered(["bf16-bf16", "f16-f32"], keep=["bf16-bf16"]))
def test_proof_holds_through_casts_and_rounding_stages(tag):
    report = derive.prove("ada_layer_norm_backward", tag, cases=[(1, 2, 2)])
    assert report.ok, report.summary()


@pytest.mark.parametrize("stage,broken,intact", [
    ("ada_layer_norm_backward_sum_gxc", ["dx"], ["dscale", "dshift", "dgamma", "dbeta"]),   # x - mean in a row sum
    ("ada_layer_norm_backward_dscale", ["dscale"], ["dx", "dshift", "dgamma", "dbeta"]),    # weight * P + bias * Q
    ("ada_layer_norm_backward_dbeta", ["dbeta"], ["dx", "dscale", "dshift", "dgamma"]),     # 1 + scale in a B sum
])
def test_a_flipped_sign_fails_the_proof(flip_stage, stage, broken, intact):
    hits = flip_stage(stage)
    report = derive.prove("ada_layer_norm_backward", cases=[(2, 2, 3)])
    assert hits, f"stage {stage} was never built"
    assert not report.ok and "MISMATCH" in report.summary()
    bad = report.cases[0].mismatches
    for out in broken:
        assert any(m.startswith(f"ada_layer_norm_backward_{out}[") for m in bad), bad
    for out in intact:
        assert not any(m.startswith(f"ada_layer_norm_backward_{out}[") for m in bad), bad


def test_document_formulas_hold():
    checks = derive.check_seed_formulas([get_op("ada_layer_norm_backward")])   # this op's alone (every op's: tests/test_derive.py)
    assert [(c.output, c.matches) for c in checks] == [(n, True) for n in OP.outputs]


# ============================================================ combos, products, schedules

def test_tags_and_products():
    """The document's mixed-precision table (5 rows) on Atlas A3 and A2, nowhere else."""
    assert TAGS == ["f32-f32", "f16-f16", "f16-f32", "bf16-bf16", "bf16-f32"]
    assert set(OP.products) == set(OFFERED) and all(OP.products[p] == OP.combos for p in OFFERED)


def test_shift_is_validated_only():
    shift = OP.api.param("shift")
    assert shift.validated_only and shift.kernel is None and not shift.optional
    assert "shift" not in OP.inputs


SEGMENTED_RULES = {"llvm": "SegmentedRowPass", "cuda": "GpuSegmentedRowPass", "opencl": "GpuSegmentedRowPass",
                   "ascend-emu": "SegmentTiles"}


@pytest.mark.parametrize("target_name", sorted(SEGMENTED_RULES))
def test_the_segmented_row_pass_takes_the_op(target_name):
    """The per-sample sums over S (blocks SSR over (B, H, S)) are a segmented row pass
    (schedules/patterns.py): every target's rule for it takes the op."""
    rule = kernels.matching_rule(OP, OP.combo("f32-f32"), get_target(target_name))
    assert type(rule).__name__ == SEGMENTED_RULES[target_name]


@pytest.mark.parametrize("text,shape,keepdim", [("4x1024x1152", (4, 1024, 1152), 1), ("77x64,0", (77, 64), 0),
                                                ("2x3x5x7,1", (2, 3, 5, 7), 1)])
def test_problem_spelling(text, shape, keepdim):
    p = Problem.parse(text)
    assert (p.input_shape, p.scale_keepdim) == (shape, keepdim)
    assert p.scale_shape == shape[:-2] + ((1, shape[-1]) if keepdim else (shape[-1],))


# ============================================================ kernels vs the reference (llvm)

RANK8 = (2, 1, 2, 1, 3, 1, 5, 7)
KERNEL_PROBLEMS = [
    Problem((1, 1), 1),                 # one element: x_hat = 0
    Problem((2, 2), 0), Problem((2, 2, 2), 0),        # the document's example shapes
    Problem((7, 33), 1), Problem((33, 7), 0), Problem((1, 7), 1),
    Problem((3, 4, 941), 0),
    Problem((2, 3, 12290), 1),          # 12,290 hidden
    Problem((2, 12290, 3), 0),          # 12,290 steps of the per-sample sums
    Problem((33, 1, 7), 1),             # S = 1
    Problem(RANK8, 1), Problem(RANK8, 0),
]


@pytest.mark.parametrize("combo", each_dtype_mix(OP))
def test_kernel_matches_reference_on_llvm(combo):
    kernel = kernels.get_kernel(OP, combo, "llvm")
    rng = np.random.default_rng(sum(map(ord, combo.tag)))
    bad = {str(p): _fails(run_and_compare(kernel, p, rng)[0]) for p in KERNEL_PROBLEMS}
    assert not any(bad.values()), {k: v for k, v in bad.items() if v}


def test_large_mean_does_not_cancel():
    """|mean| >> std: x - mean is kept explicit, so dx and dscale stay within tolerance."""
    kernel = kernels.get_kernel(OP, OP.combo("f32-f32"), "llvm")
    p, rng = Problem((2, 5, 64), 1), np.random.default_rng(2)
    arrays = OP.random_inputs(p, OP.combo("f32-f32"), rng)
    x = (rng.standard_normal(p.input_shape) * 0.01 + 1000.0).astype(np.float32)
    rows = x.astype(np.float64)
    arrays.update(x=x, mean=rows.mean(-1, keepdims=True).astype(np.float32),
                  rstd=(1 / np.sqrt(rows.var(-1, keepdims=True) + 1e-5)).astype(np.float32))
    assert not _fails(run_and_compare(kernel, p, rng, inputs=arrays)[0])


# ============================================================ kernels vs the reference (ascend-emu)

EMU = get_target("ascend-emu")
# Ragged sizes: S = 1, 7, 33 rows a sample, H = 1, 7, 33, 941 columns, B = 1 (a 2-d input) and 3
# samples; both scale layouts. On 40 or 48 cores a sample's rows are split into several tasks
# (partials summed per sample), and the samples' sums restart at the task edges.
EMU_PROBLEMS = [Problem(((3,) if b == 3 else ()) + (s, h), (s + h) % 2)
                for b in (1, 3) for s in (1, 7, 33) for h in (1, 7, 33, 941)]
EMU_CASES = [(prod, combo) for prod in OFFERED for combo in OP.combos]


@pytest.fixture(scope="module")
def emu_kernels():
    """ascend-emu kernels by (product, combo tag), each built (g++, seconds) when first asked for."""
    if not EMU.can_build():
        pytest.skip(f"ascend-emu cannot build here: {EMU.missing()}")
    return BuiltOnDemand(lambda key: kernels.get_kernel(OP, OP.combo(key[1]), EMU.for_product(key[0])))


# The segmented pattern on ascend-emu is guarded in the default tier by its toy (tests/test_patterns.py,
# tests/test_ascend_segments.py); the op's kernels, every combo on both products, in the extended one.
@pytest.mark.full
@pytest.mark.parametrize("prod,combo", EMU_CASES, ids=[f"{p}-{c.tag}" for p, c in EMU_CASES])
def test_ascend_emu_kernel_matches_the_reference(emu_kernels, prod, combo):
    kernel = emu_kernels[prod, combo.tag]
    rng = np.random.default_rng(sum(map(ord, prod + combo.tag)))
    bad = {str(p): _fails(run_and_compare(kernel, p, rng)[0]) for p in EMU_PROBLEMS}
    assert not any(bad.values()), {k: v for k, v in bad.items() if v}


# ============================================================ the aclnn API: calls that succeed

def _args(shape, keepdim=1, tag="f32-f32", weight=True, bias=True, rng=None, **changes) -> dict:
    """A complete call of ``tag``'s dtypes: realistic inputs, zeroed outputs."""
    p, combo = Problem(tuple(shape), keepdim), OP.combo(tag)
    a = OP.random_inputs(p, combo, rng if rng is not None else np.random.default_rng(0))
    shapes = OP.output_shapes(p)
    args = dict(gradOut=a["dy"], input=a["x"], normalizedShape=[p.hidden], rstd=a["rstd"], mean=a["mean"],
                scale=a["scale"], shift=a["shift"], weightOptional=a["gamma"] if weight else None,
                biasOptional=a["beta"] if bias else None)
    for name, kernel_name in OUT_NAMES.items():
        args[name] = np.zeros(shapes[kernel_name], numpy_dtype(combo[kernel_name]))
    args.update(changes)
    return args


def _reference(args) -> dict:
    dx, dscale, dshift, dw, db = reference.ada_layer_norm_backward(
        args["gradOut"], args["input"], args["mean"], args["rstd"], args["scale"], args["weightOptional"],
        args["biasOptional"])
    return {"dx": dx, "dscale": dscale, "dshift": dshift, "dgamma": dw, "dbeta": db}


def _check_outputs(args, tag, names=tuple(OUT_NAMES)) -> None:
    ref = _reference(args)
    outs = {OUT_NAMES[n]: np.reshape(np.asarray(args[n]), np.shape(ref[OUT_NAMES[n]])) for n in names}
    bad = _fails(compare_outputs(OP, OP.combo(tag), outs, {k: ref[k] for k in outs}))
    assert not bad, bad


def _run(args, prod="AtlasA2") -> None:
    with product(prod):
        status, message = run_both(OP, args)
    assert status == 0, message


def test_document_c_example():
    """The document's example (调用示例), line by line: aclTensors of device memory,
    normalizedShape by aclCreateIntArray, x [2, 2, 2], mean/rstd [2, 2, 1], scale/shift [2, 2]."""
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

    data = {"dy": [2, 3, 4, 5, 2, 3, 4, 5], "x": [2, 3, 4, 5, 2, 3, 4, 5], "mean": [2, 3, 4, 5], "rstd": [4, 5, 6, 7],
            "scale": [1, 1, 2, 2], "shift": [2, 2, 1, 1], "weight": [1, 1], "bias": [0, 0]}
    shapes = {"dy": [2, 2, 2], "x": [2, 2, 2], "mean": [2, 2, 1], "rstd": [2, 2, 1], "scale": [2, 2], "shift": [2, 2],
              "weight": [2], "bias": [2]}
    t = {k: create(data[k], shapes[k])[1] for k in data}
    outs = {k: create([0] * int(np.prod(s)), s) for k, s in (("out", [2, 2, 2]), ("ds", [2, 2]), ("dt", [2, 2]),
                                                            ("dw", [2]), ("db", [2]))}
    norm = acl.aclCreateIntArray([2], 1)
    with product("AtlasA2"):
        ret, size, executor = aclnn.aclnnAdaLayerNormBackwardGetWorkspaceSize(
            t["dy"], t["x"], norm, t["rstd"], t["mean"], t["scale"], t["shift"], t["weight"], t["bias"],
            *(outs[k][1] for k in ("out", "ds", "dt", "dw", "db")))
        assert ret == 0, acl.aclGetRecentErrMsg()
        workspace = acl.aclrtMalloc(size, acl.ACL_MEM_MALLOC_HUGE_FIRST)[1] if size else None
        assert aclnn.aclnnAdaLayerNormBackward(workspace, size, executor, stream) == 0, acl.aclGetRecentErrMsg()
    assert acl.aclrtSynchronizeStream(stream) == 0
    got = {}
    for k, (addr, _) in outs.items():
        host = np.zeros(int(np.prod({"out": 8, "ds": 4, "dt": 4}.get(k, 2))), np.float32)
        assert acl.aclrtMemcpy(host, host.nbytes, addr, host.nbytes, acl.ACL_MEMCPY_DEVICE_TO_HOST) == 0
        got[k] = host
    arr = {k: np.asarray(data[k], np.float64).reshape(shapes[k]) for k in data}
    want = reference.ada_layer_norm_backward(arr["dy"], arr["x"], arr["mean"], arr["rstd"], arr["scale"],
                                             arr["weight"], arr["bias"])
    for k, w in zip(("out", "ds", "dt", "dw", "db"), want):
        np.testing.assert_allclose(got[k], w.reshape(-1), rtol=1e-6, err_msg=k)
    assert got["dt"].tolist() == [6, 8, 6, 8]          # sum over S of dy, by hand
    for addr in buffers + ([workspace] if workspace is not None else []):
        acl.aclrtFree(addr)
    acl.aclrtDestroyStream(stream)


@pytest.mark.parametrize("prod", OFFERED)
@pytest.mark.parametrize("tag", tiered(TAGS, keep=["f32-f32", "bf16-f32"]))
def test_every_combo_on_the_products_that_offer_it(prod, tag):
    args = _args((2, 5, 40), 1, tag)
    _run(args, prod)
    _check_outputs(args, tag)


@pytest.mark.parametrize("prod", NOT_OFFERED)
def test_not_offered_elsewhere(prod):
    with product(prod):
        status, _, executor = aclnn.aclnnAdaLayerNormBackwardGetWorkspaceSize(**_args((2, 3, 8)))
        message = acl.aclGetRecentErrMsg()
    assert status == 161002 and executor is None and prod in message and "not supported" in message


NULL_SETS = [(), ("gradInputOut",), ("gradScaleOut", "gradShiftOut"), ("gradWeightOut", "gradBiasOut"),
             ("gradInputOut", "gradWeightOut"), tuple(OUT_NAMES)]


@pytest.mark.parametrize("nulls", tiered([(n,) for n in NULL_SETS], keep=[(n,) for n in NULL_SETS[:4] + NULL_SETS[-1:]]),
                         ids=["+".join(n) or "none" for n in NULL_SETS])
def test_null_outputs_are_declined(nulls):
    """A null output is not computed (the document: each is written "when the pointer is not
    null"); the others are right. All five null: a success that writes nothing."""
    args = _args((3, 4, 24), 0, "f16-f32", **{n: None for n in nulls})
    _run(args)
    _check_outputs(args, "f16-f32", [n for n in OUT_NAMES if n not in nulls])


@pytest.mark.parametrize("weight,bias", [(False, False), (True, False), (False, True)],
                         ids=["neither", "weight-only", "bias-only"])
@pytest.mark.parametrize("tag", tiered(["f32-f32", "bf16-f32", "f16-f16"], keep=["bf16-f32"]))
def test_null_weight_and_bias_are_ones_and_zeros(tag, weight, bias):
    args = _args((2, 3, 16), 1, tag, weight=weight, bias=bias)
    if not weight and not bias and tag == "f16-f16":     # without both, the weight grads are f32 or input's
        args["gradWeightOut"], args["gradBiasOut"] = (np.zeros(16, np.float16) for _ in range(2))
    _run(args)
    _check_outputs(args, tag)


def test_scale_and_shift_layouts_may_differ():
    """scale [B, H] with shift [B, 1, H]: each checked alone (op_api l.195-208)."""
    args = _args((2, 3, 8), 0)
    args["shift"], args["gradShiftOut"] = args["shift"][:, None], np.zeros((2, 1, 8), np.float32)
    _run(args)
    _check_outputs(args, "f32-f32")


def test_weight_grads_take_any_shape_of_h_elements():
    """op_api CheckOutputShapes compares gradWeightOut's/gradBiasOut's element counts only."""
    args = _args((2, 3, 8), 1, gradWeightOut=np.zeros((1, 8), np.float32), gradBiasOut=np.zeros((2, 4), np.float32))
    _run(args)
    _check_outputs(args, "f32-f32")


def test_strided_views_in_and_out():
    base = _args((2, 4, 16), 1, "bf16-bf16")
    wide = np.zeros((2, 4, 32), ml_dtypes.bfloat16)
    args = dict(base, gradOut=np.repeat(base["gradOut"], 2, axis=-1)[..., ::2], gradInputOut=wide[..., ::2])
    _run(args)
    _check_outputs(args, "bf16-bf16")
    assert (wide[..., 1::2].astype(np.float32) == 0).all()


def test_inputs_are_never_written():
    args = _args((3, 5, 33), 1, "f16-f16")
    before = {k: v.tobytes() for k, v in args.items() if isinstance(v, np.ndarray) and not k.startswith("grad")
              or k == "gradOut"}
    _run(args)
    assert {k: args[k].tobytes() for k in before} == before


# ============================================================ every error line, as literal calls

def _status(args=None, prod="AtlasA2", **changes):
    args = dict(_args((2, 3, 8)) if args is None else args)
    args.update(changes)
    with product(prod):
        status, size, executor = aclnn.aclnnAdaLayerNormBackwardGetWorkspaceSize(**args)
    message = acl.aclGetRecentErrMsg()
    if status:
        assert executor is None and size == 0 and str(status) in message
    return status, message


@pytest.mark.parametrize("name", ["gradOut", "input", "normalizedShape", "rstd", "mean", "scale", "shift"])
def test_required_null_pointers(name):
    status, message = _status(**{name: None})
    assert status == 161001 and name in message


def test_dtype_lines():
    a = _args((2, 3, 8))
    f16 = {k: v.astype(np.float16) for k, v in a.items() if isinstance(v, np.ndarray)}
    cases = [
        (dict(gradOut=a["gradOut"].astype(np.float64)), "gradOut"),
        (dict(mean=a["mean"].astype(np.float16)), "mean"),
        (dict(shift=a["shift"].astype(np.float16)), "shift"),
        (dict(f16, weightOptional=a["weightOptional"].astype(ml_dtypes.bfloat16)), "weightOptional"),
        (dict(biasOptional=a["biasOptional"].astype(np.float16)), "biasOptional"),
        (dict(f16, biasOptional=a["biasOptional"]), "biasOptional"),        # f16 weight, f32 bias
        (dict(gradScaleOut=a["gradScaleOut"].astype(np.float16)), "gradScaleOut"),
        (dict(f16, gradWeightOut=a["gradWeightOut"]), "gradWeightOut"),      # f16 weight, f32 grad
        (dict(weightOptional=None, biasOptional=None, gradBiasOut=a["gradBiasOut"].astype(np.float16)),
         "gradBiasOut"),
    ]
    for changes, name in cases:
        status, message = _status(dict(a, **changes))
        assert status == 161002 and name in message, (name, message)


def test_weight_grads_without_weight_or_bias_are_float32_or_input_dtype():
    a = _args((2, 3, 8), 1, "f16-f16", weight=False, bias=False)
    for dtype in (np.float32, np.float16):
        args = dict(a, gradWeightOut=np.zeros(8, dtype), gradBiasOut=np.zeros(8, dtype))
        _run(args)
        _check_outputs(args, "f16-f16" if dtype == np.float16 else "f16-f32")
    status, message = _status(dict(a, gradWeightOut=np.zeros(8, ml_dtypes.bfloat16)))
    assert status == 161002 and "gradWeightOut" in message
    status, message = _status(dict(a, gradWeightOut=np.zeros(8, np.float32), gradBiasOut=np.zeros(8, np.float16)))
    assert status == 161002 and "gradBiasOut" in message and "one dtype row" in message


def test_shape_lines():
    a = _args((2, 3, 8))
    cases = [
        (dict(gradOut=a["gradOut"][:, :2]), "gradOut"),
        (dict(rstd=a["rstd"].reshape(2, 3)), "rstd"),
        (dict(normalizedShape=[3, 8]), "normalizedShape"),
        (dict(normalizedShape=[9]), "normalizedShape"),
        (dict(gradOut=a["gradOut"][0, 0], input=a["input"][0, 0]), "input"),
        (dict(weightOptional=a["weightOptional"][:4]), "weightOptional"),   # CANN drops this check: opgen keeps it
        (dict(scale=a["scale"][:, :, :4]), "scale"),
        (dict(shift=a["shift"].reshape(2, 8, 1)), "shift"),
        (dict(mean=a["mean"].reshape(2, 1, 3), rstd=a["rstd"].reshape(2, 1, 3)), "mean"),
        (dict(gradInputOut=a["gradInputOut"][:1]), "gradInputOut"),
        (dict(gradScaleOut=a["gradScaleOut"].reshape(2, 8)), "gradScaleOut"),
        (dict(gradWeightOut=np.zeros(9, np.float32)), "gradWeightOut"),
        (dict(gradOut=a["gradOut"].reshape((1,) * 6 + a["gradOut"].shape)), "gradOut"),   # 9 dimensions
    ]
    for changes, name in cases:
        status, message = _status(dict(a, **changes))
        assert status == 161002 and name in message, (name, message)


def test_empty_input_is_refused():
    """The document: no empty tensors; the op_api: B, S and H greater than 0 (l.190-193)."""
    a = _args((2, 3, 8))
    for cut in (np.s_[:0], np.s_[:, :0]):
        x = a["input"][cut]
        status, message = _status(dict(a, gradOut=a["gradOut"][cut], input=x, gradInputOut=None,
                                       mean=np.zeros(x.shape[:-1] + (1,), np.float32),
                                       rstd=np.zeros(x.shape[:-1] + (1,), np.float32)))
        assert status == 161002 and "greater than 0" in message


# ============================================================ the Pythonic function

def test_pythonic_allocates_and_matches():
    a = _args((2, 5, 24), 0, "bf16-f32")
    with product("AtlasA2"):
        outs = opgen.ada_layer_norm_backward(a["gradOut"], a["input"], [24], a["rstd"], a["mean"], a["scale"],
                                             a["shift"], a["weightOptional"], a["biasOptional"])
    assert [o.shape for o in outs] == [(2, 5, 24), (2, 24), (2, 24), (24,), (24,)]
    _check_outputs(dict(a, **dict(zip(OUT_NAMES, outs))), "bf16-f32")
    with product("AtlasA2"):
        outs = opgen.ada_layer_norm_backward(a["gradOut"], a["input"], [24], a["rstd"], a["mean"], a["scale"],
                                             a["shift"])
    assert outs[3].dtype == np.float32 and outs[4].dtype == np.float32    # op_api infer_dtype: FLOAT32
    _check_outputs(dict(a, weightOptional=None, biasOptional=None, **dict(zip(OUT_NAMES, outs))), "bf16-f32")


def test_pythonic_errors():
    a = _args((2, 3, 8))
    with product("AtlasA2"), pytest.raises(opgen.AclnnError) as info:
        opgen.ada_layer_norm_backward(a["gradOut"], a["input"], [8], a["rstd"], a["mean"], None, a["shift"])
    assert info.value.status == 161001 and "scale" in info.value.message
    with product("AtlasA2"), pytest.raises(opgen.AclnnError) as info:
        opgen.ada_layer_norm_backward(a["gradOut"], a["input"], [7], a["rstd"], a["mean"], a["scale"], a["shift"])
    assert info.value.status == 161002 and "normalizedShape" in info.value.message
