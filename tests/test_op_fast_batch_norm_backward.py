"""aclnnFastBatchNormBackward (opgen.ops.fast_batch_norm_backward): what its package adds to
BatchNormBackward's, whose tests (tests/test_op_batch_norm_backward.py) cover the shared
math, reference and checks. Default tier: the TE under this op's own names (kernel against
the reference over the edge shapes on llvm, a mutation failing the proof), the interface
differences (``version``, Atlas A2 as the only product, no channel-last format, the mask
from this op_api), each error line of its document literally, the Pythonic function and the
document's C example. Extended: every combo of the product, through the aclnn API and over
the edge shapes.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import opgen
from opgen import acl, aclnn, derive, kernels
from opgen.apispec import Call
from opgen.ops import get_op
from opgen.ops.batch_norm_backward.api import tagged
from opgen.ops.fast_batch_norm_backward import Problem
from opgen.ops.fast_batch_norm_backward import reference as ref
from opgen.verify import compare_outputs, run_and_compare

from aclnn_helpers import assert_matches, base_args, product, run_both
from op_checks import assert_all_pass
from tiers import tiered

OP = get_op("fast_batch_norm_backward")
BNB = get_op("batch_norm_backward")
A2 = "AtlasA2"
BF16 = ml_dtypes.bfloat16
EPS = 1e-5
OTHER_PRODUCTS = ("Ascend950", "AtlasA3", "AtlasTraining", "AtlasInference")
NULLABLE = ("weight", "runningMean", "runningVar", "saveMean", "saveInvstd")


# ------------------------------------------------------------ the kernel: BatchNormBackward's TE, this op's names

def test_the_te_is_batch_norm_backwards_under_this_ops_stage_names():
    """Stages are <op>_<stage> (a proof mutation, a schedule or an error names them), and the
    kernel symbol is this op's: the two ops never share a compiled kernel."""
    combo = OP.combo("f32-f32")
    ours = [t.op.name for t in OP.compute(combo)[-3:]]
    theirs = [t.op.name for t in BNB.compute(BNB.combo("f32-f32"))[-3:]]
    assert ours == [f"fast_batch_norm_backward_{s}" for s in ("dx", "dweight", "dbias")]
    assert [n.replace("fast_", "", 1) for n in ours] == theirs
    assert kernels.kernel_symbol(OP, combo, "default") != kernels.kernel_symbol(BNB, BNB.combo("f32-f32"), "default")
    assert [c.tag for c in OP.combos] == [c.tag for c in BNB.combos]


EDGES = (Problem((1, 1)), Problem((7, 33)), Problem((3, 7, 33)), Problem((2, 5, 941), False, 1e-3),
         Problem((1, 2, 12290)), Problem((12290, 3), False), Problem((1, 2, 1, 1, 1, 1, 1, 3)), Problem((0, 3, 4)))
KEEP = ("f32-f32", "bf16-bf16-bf16-f32-bf16")


@pytest.mark.parametrize("tag", tiered([c.tag for c in OP.combos], KEEP))
def test_kernel_matches_reference_over_edge_shapes(tag, rng):
    """On llvm: one element per channel, 2-D, ragged, eval, 12290 per channel along HW and
    along N, 8-D, no batch rows."""
    kernel = kernels.get_kernel(OP, tag, "llvm")
    for problem in EDGES:
        comparisons, _ = run_and_compare(kernel, problem, rng)
        assert_all_pass(comparisons, f"{tag} {problem}")


# ------------------------------------------------------------ through the aclnn API

def _run(tag, rng, edit=None, problem=Problem((2, 3, 4, 5)), skip=()):
    """A complete two-phase call on the A2 on random inputs (``edit(args, arrays)`` changes
    it; None in ``arrays`` is a null the reference fills too); checks the outputs against the
    reference and that no input was modified."""
    combo = OP.combo(tag)
    with product(A2):
        args, arrays = base_args(OP, problem, combo, rng)
        if edit:
            edit(args, arrays)
        before = {k: np.array(v, copy=True) for k, v in args.items() if isinstance(v, np.ndarray)}
        status, msg = run_both(OP, args)
    assert status == 0, msg
    for name in ("gradOut", "input") + NULLABLE:
        if args[name] is not None:
            np.testing.assert_array_equal(args[name], before[name], err_msg=f"input {name} was modified")
    assert_matches(OP, combo, problem, arrays, args, skip)
    return args


@pytest.mark.parametrize("prod,tag,training", tiered(
    [(A2, c.tag, i % 2 == 0) for i, c in enumerate(OP.products[A2])],
    [(A2, "f32-f32", True), (A2, "f16-f16-f16-f32-f16", False)],
    [f"{A2}-{c.tag}" for c in OP.products[A2]]))
def test_aclnn_every_combo_of_the_a2(prod, tag, training, rng):
    _run(tag, rng, problem=Problem((4, 8, 32, 32), training, 1e-3))


@pytest.mark.parametrize("version", [0, 1, 7, -1])
def test_version_selects_nothing(version, rng):
    """doc l.218-221 lists 0 and 1; the op_api only logs it (l.599-601): every value runs and
    gives the same bits as version 0 and as aclnnBatchNormBackward on the same call (F1)."""
    problem = Problem((2, 3, 4, 5), version=version)
    args = _run("f32-f32", rng, problem=problem)
    zero = dict(args, version=0, gradInput=np.zeros_like(args["gradInput"]),
                gradWeight=np.zeros_like(args["gradWeight"]), gradBias=np.zeros_like(args["gradBias"]))
    sister = {k: v for k, v in zero.items() if k != "version"}
    sister.update({n: np.zeros_like(args[n]) for n in ("gradInput", "gradWeight", "gradBias")})
    with product(A2):
        assert run_both(OP, zero) == (0, "")
        assert run_both(BNB, sister) == (0, "")
    for name in ("gradInput", "gradWeight", "gradBias"):
        np.testing.assert_array_equal(args[name], zero[name])
        np.testing.assert_array_equal(args[name], sister[name])


def test_version_is_an_int_by_its_c_type():
    for value in (1.5, True, None, "0"):
        status, msg = fbn_status(version=value)
        assert status == 161002 and "version must be an integer" in msg, (value, msg)


def test_null_optional_inputs_are_filled(rng):
    """FastBatchNormBackwardPrepare (l.485-513): the same fills as BatchNormBackward's."""
    for training in (True, False):
        def edit(args, arrays):
            args.update({n: None for n in NULLABLE})
            arrays.update({p.kernel: None for p in OP.api.params if p.name in NULLABLE})
        _run("f32-f32", rng, edit, problem=Problem((2, 3, 4, 5), training))


def test_mask_bits_off_leave_outputs_alone(rng):
    def edit(args, arrays):
        args.update(outputMask=[True, False, False, True], gradWeight=np.full(3, 5.0, np.float32), gradBias=None)
    args = _run("f32-f32", rng, edit, skip=("dweight", "dbias"))
    assert (args["gradWeight"] == 5).all()


# ------------------------------------------------------------ every error line, literally

def fbn(shape=(2, 3, 4), io=np.float32, stat=np.float32, training=True, c=None):
    c = shape[1] if c is None else c
    return dict(gradOut=np.ones(shape, io), input=np.ones(shape, io), weight=np.ones(c, stat),
                runningMean=np.zeros(c, stat), runningVar=np.ones(c, stat), saveMean=np.zeros(c, stat),
                saveInvstd=np.ones(c, stat), training=training, eps=EPS, outputMask=[True, True, True], version=0,
                gradInput=np.zeros(shape, io), gradWeight=np.zeros(c, stat), gradBias=np.zeros(c, stat))


def fbn_status(prod=A2, args=None, **changes):
    args = dict(fbn() if args is None else args)
    args.update(changes)
    with product(prod):
        status, _, _ = aclnn.aclnnFastBatchNormBackwardGetWorkspaceSize(**args)
    return status, acl.aclGetRecentErrMsg() if status else ""


def test_products():
    """doc l.5-24: Atlas A2 alone."""
    assert fbn_status()[0] == 0
    assert fbn_status(args=fbn(io=BF16, stat=BF16))[0] == 0
    assert fbn_status(args=fbn(io=np.float16, stat=np.float32))[0] == 0      # the op_api casts (F3)
    for prod in OTHER_PRODUCTS:
        status, msg = fbn_status(prod)
        assert status == 161002 and f"not supported on {prod} (supported: AtlasA2)" in msg


@pytest.mark.parametrize("name", ["gradOut", "input"])
def test_l308_gradout_or_input_null(name):
    status, msg = fbn_status(**{name: None})
    assert status == 161001 and f"{name} is a null pointer" in msg


@pytest.mark.parametrize("bit,name", [(0, "gradInput"), (1, "gradWeight"), (2, "gradBias")])
def test_l311_l317_mask_bit_true_and_output_null(bit, name):
    status, msg = fbn_status(**{name: None})
    assert status == 161001 and f"outputMask[{bit}] is true but {name} is a null pointer" in msg
    mask = [True] * 3
    mask[bit] = False
    assert fbn_status(**{name: None, "outputMask": mask})[0] == 0


def test_l322_input_gradout_dtype_format_shape():
    status, msg = fbn_status(gradOut=np.ones((2, 3, 4), np.float64))
    assert status == 161002 and "gradOut has dtype float64" in msg
    nz = {n: tagged(np.ones((2, 3, 4), np.float32), "FRACTAL_NZ") for n in ("gradOut", "input", "gradInput")}
    status, msg = fbn_status(**nz)
    assert status == 161002 and "gradOut has the private format FRACTAL_NZ" in msg
    nhwc = {n: tagged(np.ones((2, 3, 4, 5), np.float32), "NHWC") for n in ("gradOut", "input", "gradInput")}
    status, msg = fbn_status(**nhwc)                                   # F5: no channel-last format
    assert status == 161002 and "does not support NHWC or NDHWC" in msg


def test_l325_small_tensors_when_non_null():
    status, msg = fbn_status(runningMean=np.zeros(3, np.float64))
    assert status == 161002 and "runningMean has dtype float64" in msg
    for name in NULLABLE:
        assert fbn_status(**{name: None})[0] == 0


def test_l328_mask_length():
    """F2: null or empty is the op_api's 161001; 1-2 bits the doc's 161002; 4 read as 3."""
    assert fbn_status(outputMask=None)[0] == 161001
    assert fbn_status(outputMask=[])[0] == 161001
    status, msg = fbn_status(outputMask=[True, True])
    assert status == 161002 and "outputMask has 2 elements; expected 3" in msg
    assert fbn_status(outputMask=[True])[0] == 161002
    assert fbn_status(outputMask=[True, True, True, False])[0] == 0


def test_l331_l337_outputs_asked_for():
    assert fbn_status(gradWeight=np.zeros(3, np.float64))[0] == 161002
    status, msg = fbn_status(gradInput=np.zeros((2, 12), np.float32))
    assert status == 161002 and "gradInput has shape (2, 12); expected gradOut's (2, 3, 4)" in msg
    assert fbn_status(gradBias=np.zeros(4, np.float32), outputMask=[True, True, False])[0] == 0


def test_l340_lengths_differ_from_the_channel_axis():
    for name in NULLABLE + ("gradWeight", "gradBias"):
        status, msg = fbn_status(**{name: np.ones(4, np.float32)})
        assert status == 161002 and f"{name} has shape (4,); expected (3,)" in msg, name


def test_l343_formats_differ():
    four = {n: np.ones((2, 3, 4, 5), np.float32) for n in ("gradOut", "input", "gradInput")}
    status, msg = fbn_status(**dict(four, gradOut=tagged(four["gradOut"], "NCDHW")))
    assert status == 161002 and "expected gradOut's NCDHW" in msg
    assert fbn_status(**dict(four, input=tagged(four["input"], "NCHW")))[0] == 0     # ND 4-D reads as NCHW


def test_l346_dtypes_differ():
    status, msg = fbn_status(input=np.ones((2, 3, 4), np.float16))
    assert status == 161002 and "input has dtype float16" in msg
    status, msg = fbn_status(gradInput=np.zeros((2, 3, 4), np.float16))            # F4: the doc stands
    assert status == 161002 and "gradInput has dtype float16" in msg


def test_l349_shapes_differ_or_rank():
    status, msg = fbn_status(input=np.ones((2, 3, 5), np.float32))
    assert status == 161002 and "input has shape (2, 3, 5); expected gradOut's (2, 3, 4)" in msg
    status, msg = fbn_status(**{n: np.ones(6, np.float32) for n in ("gradOut", "input", "gradInput")})
    assert status == 161002 and "has 1 dimensions; expected 2 to 8" in msg


def test_mixed_rows_beyond_the_kernels_are_refused_clearly():
    status, msg = fbn_status(weight=np.ones(3, BF16))
    assert status == 161002 and "weight has dtype bfloat16; opgen's AtlasA2 kernels take float32" in msg


def _violations():
    for i, rule in enumerate(OP.api.rules):
        for v in rule.violations:
            yield pytest.param(i, v, id=f"r{i}-{v.description}")


@pytest.mark.parametrize("index,violation", list(_violations()))
def test_each_example_violation_breaks_its_own_rule_first(index, violation):
    """Beyond test_aclnn_validation's status check: every earlier rule passes the mutated call,
    and the reported reason is this rule's (the rules are BatchNormBackward's checks in this
    op_api's order)."""
    with product(A2):
        args, _ = base_args(OP, OP.problems[0], OP.combo("f32-f32"), np.random.default_rng(0))
        violation.mutate(args)
        call = Call(OP, A2, aclnn._describe_all(OP, tuple(args[p.name] for p in OP.api.params)))
        status, _, _ = aclnn.aclnnFastBatchNormBackwardGetWorkspaceSize(**args)
        message = acl.aclGetRecentErrMsg()
    assert [r.seed for r in OP.api.rules[:index] if r.check(call)] == []
    reason = OP.api.rules[index].check(call)
    assert reason and status == OP.api.rules[index].code and message.endswith(f": {reason}.")


def test_empty_calls_succeed_unchecked_and_write_nothing():
    """l.610-614: an empty input or gradOut returns success after the null checks."""
    args = fbn((0, 3, 4))
    args.update(gradWeight=np.full(3, 5.0, np.float32), outputMask=None, version=12)
    with product(A2):
        assert run_both(OP, args) == (0, "")
    assert (args["gradWeight"] == 5).all()
    assert fbn_status(args=args, input=None)[0] == 161001


# ------------------------------------------------------------ the proof, and a mutation it catches

def test_proof_and_the_documents_formulas():
    report = derive.prove("fast_batch_norm_backward")
    assert report.ok, report.summary()
    assert {c.sizes["training"] for c in report.cases} == {0, 1}
    checks = OP.model.seed_checks()      # this op's alone (derive.check_seed_formulas() runs every op's)
    assert {c.seed for c in checks} == {"aclnnFastBatchNormBackward.md"}
    assert [(c.output, c.matches) for c in checks] == [
        ("dx", True), ("dx", False), ("dx", False), ("dweight", True), ("dbias", True),
        ("dx", True), ("dweight", True), ("dbias", True)]


def test_a_flipped_sign_in_this_ops_stage_fails_its_proof(flip_stage):
    hits = flip_stage("fast_batch_norm_backward_sum_dy_xmu")
    report = derive.prove("fast_batch_norm_backward", cases=[(2, 2, 2, 1)])
    assert hits and not report.ok, report.summary()
    assert any(m.startswith("fast_batch_norm_backward_dweight[") for m in report.cases[0].mismatches)


# ------------------------------------------------------------ the Pythonic function, the document's example

def test_pythonic_function(rng):
    problem = Problem((2, 3, 4, 5))
    a = OP.random_inputs(problem, OP.combo("f16-f32"), rng)
    with product(A2):
        dx, dweight, dbias = opgen.fast_batch_norm_backward(a["dy"], a["x"], a["weight"], save_mean=a["save_mean"],
                                                            save_invstd=a["save_invstd"], version=1)
        with pytest.raises(opgen.AclnnError) as info:
            opgen.fast_batch_norm_backward(a["dy"], a["x"][:1], a["weight"])
    assert info.value.status == 161002
    assert dx.dtype == np.float16 and dweight.dtype == dbias.dtype == np.float32
    want = ref.batch_norm_backward(a["dy"], a["x"], a["weight"], None, None, a["save_mean"], a["save_invstd"], True,
                                   EPS)
    assert_all_pass(compare_outputs(OP, OP.combo("f16-f32"), {"dx": dx, "dweight": dweight, "dbias": dbias},
                                    dict(zip(OP.outputs, want))), "pythonic")


def test_document_example():
    """The C example (doc l.401-618): (1, 2, 4) float32 ND tensors, training, eps 1e-5,
    version 0, every output asked for; BatchNormBackward's digest gives the values."""
    assert acl.aclInit(None) == 0 and acl.aclrtSetDevice(0) == 0
    ret, stream = acl.aclrtCreateStream()

    def create(host, shape):
        host = np.asarray(host, np.float32)
        ret, addr = acl.aclrtMalloc(host.nbytes, acl.ACL_MEM_MALLOC_HUGE_FIRST)
        assert acl.aclrtMemcpy(addr, host.nbytes, host, host.nbytes, acl.ACL_MEMCPY_HOST_TO_DEVICE) == 0
        return addr, acl.aclCreateTensor(shape, acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, shape, addr)

    data = list(range(8))
    tensors = [create(data, [1, 2, 4])[1], create(data, [1, 2, 4])[1]] + [
        create(v, [2])[1] for v in ([1, 1], [0, 0], [1, 1], [0, 0], [1, 1])]
    out_mask = acl.aclCreateBoolArray([True, True, True], 3)
    outs = [create([0] * 8, [1, 2, 4]), create([0, 0], [2]), create([0, 0], [2])]
    with product(A2):
        status, workspace_size, executor = aclnn.aclnnFastBatchNormBackwardGetWorkspaceSize(
            *tensors, True, 1e-5, out_mask, 0, *(t for _, t in outs))
    assert status == 0, acl.aclGetRecentErrMsg()
    workspace = acl.aclrtMalloc(workspace_size, acl.ACL_MEM_MALLOC_HUGE_FIRST)[1] if workspace_size > 0 else None
    assert aclnn.aclnnFastBatchNormBackward(workspace, workspace_size, executor, stream) == 0
    assert acl.aclrtSynchronizeStream(stream) == 0
    results = []
    for (addr, _), n in zip(outs, (8, 2, 2)):
        host = np.zeros(n, np.float32)
        assert acl.aclrtMemcpy(host, host.nbytes, addr, host.nbytes, acl.ACL_MEMCPY_DEVICE_TO_HOST) == 0
        results.append(host)
    np.testing.assert_allclose(results[0], [-1.5, -4.0, -6.5, -9.0, -127.5, -158.0, -188.5, -219.0], rtol=1e-6)
    np.testing.assert_allclose(results[1], [14, 126], rtol=1e-6)
    np.testing.assert_allclose(results[2], [6, 22], rtol=1e-6)
    for t in tensors + [t for _, t in outs]:
        assert acl.aclDestroyTensor(t) == 0
    if workspace is not None:
        assert acl.aclrtFree(workspace) == 0
    assert acl.aclrtDestroyStream(stream) == 0
