"""aclnnGroupNormSwishGrad (opgen.ops.group_norm_swish_grad), end to end.

* The float64 reference against central finite differences of the float64 forward
  (GroupNorm + Swish, statistics recomputed from x), against torch autograd in float64,
  and against the document's C example (its printed values).
* The kernel on llvm and on ascend-emu (AtlasA2 and Ascend950, opgen's own build path)
  against the reference, every dtype combo: sizes 1, 7, 33, 941 and 12,290, ranks 2-8,
  empty batches and spatial dims, swishScale 1, 0.5, -2 and 0; on opencl (PoCL here) every
  combo over a subset; the pattern each target's schedules match.
* The aclnn API: strided views in and out, every IsRequire combination, swishScale and
  dataFormatOptional per call, dgammaOut of shape (C, 1), torch tensors, inputs left
  untouched; on ascend-emu too. Every documented error line as a literal call.
* The sympy proof, and flipped signs in three stages that make it fail.
* opgen.group_norm_swish_grad, torch.ops.opgen.group_norm_swish_grad (opcheck) and
  opgen.torch.GroupNormSwish against torch autograd of F.group_norm + swish, compiled
  with fullgraph=True too.

Cost on the shared 2-core machine: six g++ builds for ascend-emu (run two at a time) and
the default proof dominate.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from tvm import te

import opgen
from opgen import acl, aclnn, config, derive, kernels, schedules, verify
from opgen.ops import get_op
from opgen.ops.group_norm_swish_grad import Problem
from opgen.ops.group_norm_swish_grad import reference as ref
from opgen.targets import get_target

from aclnn_helpers import assert_matches, base_args, product, run_both
from op_checks import assert_gradient as _assert_gradient
from op_checks import central_difference as _central_difference
from op_checks import BuiltOnDemand
from op_checks import flip_first_sign as _flip_first_sign
from tiers import kept_on, tiered

OP = get_op("group_norm_swish_grad")
GNS = aclnn.aclnnGroupNormSwishGradGetWorkspaceSize
BF16 = ml_dtypes.bfloat16
EMU = get_target("ascend-emu")
OPENCL = get_target("opencl")
SCALES = (1.0, 0.5, -2.0, 0.0)


# ================================================================ the reference


FD_CASES = [  # (x shape, numGroups, swishScale)
    ((2, 4, 3), 2, 1.0),
    ((1, 6, 5), 3, 0.5),
    ((2, 3, 4), 1, -2.0),       # the document's example shape, one group
    ((2, 4, 2, 3), 2, 0.7),     # two spatial dims
    ((3, 4), 2, 1.3),           # 2-D x: HxW = 1
    ((2, 4, 1), 4, 0.0),        # one element per group and s = 0: y = beta, out = y / 2
]


@pytest.mark.parametrize("shape,groups,scale", FD_CASES, ids=[f"{s}-G{g}-s{v}" for s, g, v in FD_CASES])
def test_reference_matches_finite_differences_of_the_forward(shape, groups, scale, rng):
    c = shape[1]
    x = rng.standard_normal(shape) * 2 + 0.5
    dy, gamma, beta = rng.standard_normal(shape), rng.uniform(0.5, 1.5, c), rng.standard_normal(c)
    _, mean, rstd = ref.group_norm_swish(x, gamma, beta, groups, scale)
    dx, dgamma, dbeta = ref.group_norm_swish_grad(dy, mean, rstd, x, gamma, beta, groups, scale)

    def loss(x_=x, gamma_=gamma, beta_=beta):
        return np.sum(dy * ref.group_norm_swish(x_, gamma_, beta_, groups, scale)[0])

    _assert_gradient("dx", dx, _central_difference(lambda v: loss(x_=v), x))
    _assert_gradient("dgamma", dgamma, _central_difference(lambda v: loss(gamma_=v), gamma))
    _assert_gradient("dbeta", dbeta, _central_difference(lambda v: loss(beta_=v), beta))


def test_reference_agrees_with_torch_autograd_and_aten_at_any_statistics():
    """Two independent references in float64: torch autograd of F.group_norm + swish (true
    statistics), and the digest's peer at arbitrary statistics (the swish's derivative in
    torch, then ATen's native_group_norm_backward)."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    rng = np.random.default_rng(11)
    shape, groups, s = (3, 6, 5, 2), 3, 0.7
    x, dy = rng.standard_normal(shape), rng.standard_normal(shape)
    gamma, beta = rng.uniform(0.5, 1.5, 6), rng.standard_normal(6)
    tx, tg, tb = (torch.tensor(a, requires_grad=True) for a in (x, gamma, beta))
    y = F.group_norm(tx, groups, tg, tb, 1e-5)
    (y * torch.sigmoid(s * y)).backward(torch.tensor(dy))
    _, mean, rstd = ref.group_norm_swish(x, gamma, beta, groups, s)
    ours = ref.group_norm_swish_grad(dy, mean, rstd, x, gamma, beta, groups, s)
    for mine, theirs in zip(ours, (tx.grad, tg.grad, tb.grad)):
        np.testing.assert_allclose(mine, theirs.numpy(), rtol=1e-10, atol=1e-10)
    mean, rstd = rng.standard_normal((3, groups)), rng.uniform(0.5, 2, (3, groups))   # not x's statistics
    ours = ref.group_norm_swish_grad(dy, mean, rstd, x, gamma, beta, groups, s)
    xhat = (x.reshape(3, groups, -1) - mean[..., None]) * rstd[..., None]
    yy = xhat.reshape(3, 6, -1) * gamma[:, None] + beta[:, None]
    sig = 1 / (1 + np.exp(-s * yy))
    dy_new = torch.tensor((dy.reshape(3, 6, -1) * sig * (1 + s * yy * (1 - sig))).reshape(shape))
    theirs = torch.ops.aten.native_group_norm_backward(dy_new, torch.tensor(x), torch.tensor(mean), torch.tensor(rstd),
                                                       torch.tensor(gamma), 3, 6, 10, groups, [True, True, True])
    for mine, vendor in zip(ours, theirs):
        np.testing.assert_allclose(mine, vendor.numpy(), rtol=1e-12, atol=1e-12)


# ================================================================ the document's C example

DOC_DX = [[[634.1019793, -16.9835438, -673.7368348, -1330.0531491],
           [-1986.2344040, -2642.4095481, -3298.5844883, -3954.7594226],
           [-4610.9343568, -5267.1092909, -5923.2842250, -6579.4591592]],
          [[-55843.3333333, -60914.0, -65984.6666667, -71055.3333333],
           [-76126.0, -81196.6666667, -86267.3333333, -91338.0],
           [-96408.6666667, -101479.3333333, -106550.0, -111620.6666667]]]
DOC_DGAMMA = [1482.2620641, 2696.0003371, 4424.0000000]
DOC_DBETA = [67.1293978, 100.0000556, 132.0000000]


def _doc_example_call():
    """aclnnGroupNormSwishGrad.md l.375-590, line by line: ACL_FLOAT tensors in ND, values
    1..24 and 2s, numGroups 1, dataFormatOptional nullptr, swishScale 1.0f, both flags true,
    dgammaOut and dbetaOut of shape (3, 1)."""
    acl.aclInit(None)
    acl.aclrtSetDevice(0)
    _, stream = acl.aclrtCreateStream()
    tensors = {}
    values = {"dy": (np.arange(1, 25), (2, 3, 4)), "mean": ([2, 2], (2, 1)), "rstd": ([2, 2], (2, 1)),
              "x": (np.arange(1, 25), (2, 3, 4)), "gamma": ([2, 2, 2], (3,)), "beta": ([2, 2, 2], (3,)),
              "dxOut": (np.arange(1, 25), (2, 3, 4)), "dgammaOut": ([2, 2, 2], (3, 1)),
              "dbetaOut": ([2, 2, 2], (3, 1))}
    for name, (data, shape) in values.items():
        host = np.asarray(data, np.float32).reshape(shape)
        _, dev = acl.aclrtMalloc(host.nbytes, acl.ACL_MEM_MALLOC_HUGE_FIRST)
        acl.aclrtMemcpy(dev, host.nbytes, host, host.nbytes, acl.ACL_MEMCPY_HOST_TO_DEVICE)
        strides = [int(np.prod(shape[i + 1:])) for i in range(len(shape))]
        tensors[name] = (acl.aclCreateTensor(shape, acl.ACL_FLOAT, strides, 0, acl.ACL_FORMAT_ND, shape, dev), dev, host)
    t = {k: v[0] for k, v in tensors.items()}
    status, size, executor = GNS(t["dy"], t["mean"], t["rstd"], t["x"], t["gamma"], t["beta"], 1, None, 1.0, True, True,
                                 t["dxOut"], t["dgammaOut"], t["dbetaOut"])
    assert status == aclnn.ACLNN_SUCCESS, acl.aclGetRecentErrMsg()
    workspace = acl.aclrtMalloc(size, acl.ACL_MEM_MALLOC_HUGE_FIRST)[1] if size else None
    assert aclnn.aclnnGroupNormSwishGrad(workspace, size, executor, stream) == aclnn.ACLNN_SUCCESS
    assert acl.aclrtSynchronizeStream(stream) == 0
    out = {}
    for name in ("dxOut", "dgammaOut", "dbetaOut"):
        _, dev, host = tensors[name]
        result = np.zeros_like(host)
        acl.aclrtMemcpy(result, result.nbytes, dev, result.nbytes, acl.ACL_MEMCPY_DEVICE_TO_HOST)
        out[name] = result
    for tensor, dev, _ in tensors.values():
        acl.aclDestroyTensor(tensor)
        acl.aclrtFree(dev)
    if workspace is not None:
        acl.aclrtFree(workspace)
    acl.aclrtDestroyStream(stream)
    acl.aclrtResetDevice(0)
    acl.aclFinalize()
    return out


def test_the_documents_c_example_gives_its_values():
    with product("AtlasA2"):
        out = _doc_example_call()
    np.testing.assert_allclose(out["dxOut"], DOC_DX, rtol=2e-6)
    np.testing.assert_allclose(out["dgammaOut"].ravel(), DOC_DGAMMA, rtol=2e-6)
    np.testing.assert_allclose(out["dbetaOut"].ravel(), DOC_DBETA, rtol=2e-6)
    assert out["dgammaOut"].shape == (3, 1)
    # the reference gives the same float64 values (mean/rstd are not x's statistics here)
    x = np.arange(1, 25, dtype=np.float64).reshape(2, 3, 4)
    want = ref.group_norm_swish_grad(x, [[2], [2]], [[2], [2]], x, [2] * 3, [2] * 3, 1, 1.0)
    for got, printed in zip(want, (DOC_DX, DOC_DGAMMA, DOC_DBETA)):
        np.testing.assert_allclose(got, printed, rtol=1e-9, atol=5e-8)    # printed to 7 decimals


# ================================================================ the Problem spelling

@pytest.mark.parametrize("text,want", [
    ("2x320x32x32,32", Problem((2, 320, 32, 32), 32)),
    ("2x64x941,8,0.5", Problem((2, 64, 941), 8, 0.5)),
    ("4x8,2,1.0,1,0", Problem((4, 8), 2, 1.0, True, False)),
    ("(1x3x4,1,-2.0,0,1,NCHW)", Problem((1, 3, 4), 1, -2.0, False, True, "NCHW")),
])
def test_problem_spelling_reads_and_writes_back(text, want):
    got = Problem.parse(text)
    assert got == want and Problem.parse(got.label()) == got
    assert OP.parse_problem(text) == want


@pytest.mark.parametrize("text", ["2x3x4", "2x3x4,1,0.5,1", "2xAx4,1", "2x3x4,1,s", "2x3x4,1,1.0,yes,1", ""])
def test_problem_spelling_errors_say_what_is_expected(text):
    with pytest.raises(ValueError, match="cannot read .* as Problem"):
        Problem.parse(text)


# ================================================================ kernels vs the reference

def _pid(p: Problem) -> str:
    return f"x{'x'.join(map(str, p.x_shape))}-G{p.numGroups}-s{p.swishScale}"


LLVM_PROBLEMS = [
    Problem((1, 1), 1),                         # size 1 everywhere, rank 2
    Problem((2, 7), 7, 0.5),                    # rank 2, a group per channel
    Problem((2, 6, 7), 3, -2.0),                # 7 spatial
    Problem((3, 33, 33), 11, 0.0),              # 33 channels and spatial, s = 0
    Problem((2, 6, 941), 2),                    # ragged 941
    Problem((1, 4, 12290), 2, 0.5),             # 12,290 elements per channel
    Problem((2, 8, 4, 5), 4, -2.0),             # rank 4
    Problem((2, 4, 1, 3, 1, 2, 2, 3), 2, 1.0),  # rank 8
    Problem((33, 6, 7), 3, 0.5),                # 33 samples: column sums over N
]
EMPTY_PROBLEMS = [Problem((0, 4, 5), 2), Problem((2, 4, 0), 2), Problem((2, 4, 3, 0), 2, 0.5)]


def _assert_passes(kernel, problem, rng, inputs=None):
    comparisons, outputs = verify.run_and_compare(kernel, problem, rng, inputs)
    bad = [f"{c.name} ratio {c.ratio:.3g} at {c.worst_index}" for c in comparisons if not c.passed]
    assert not bad, f"{kernel.combo.tag} {problem}: {bad}"
    return outputs


@pytest.mark.parametrize("combo", OP.combos, ids=lambda c: c.tag)
def test_llvm_kernel_matches_the_reference(combo, rng):
    kernel = kernels.get_kernel(OP, combo, "llvm")
    for problem in LLVM_PROBLEMS:
        _assert_passes(kernel, problem, rng)
    for problem in EMPTY_PROBLEMS:      # outputs start as nan: unwritten dgamma/dbeta fail here
        outputs = _assert_passes(kernel, problem, rng)
        for name in ("dgamma", "dbeta"):
            np.testing.assert_array_equal(outputs[name].astype(np.float32), np.zeros(problem.C, np.float32))


@pytest.mark.parametrize("scale", SCALES + (37.0, -1e-3))
def test_llvm_kernel_every_swish_scale(scale, rng):
    """The scale reaches the kernel as data: one kernel, any s (large |s*y| saturates the sigmoid)."""
    kernel = kernels.get_kernel(OP, "f32-f32", "llvm")
    _assert_passes(kernel, Problem((2, 6, 3, 5), 3, scale), rng)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("tensor", ["x", "dy", "gamma", "beta"])
def test_llvm_kernel_propagates_nan_within_its_group(tensor, rng):
    problem = Problem((2, 6, 7), 3, 0.5)
    kernel = kernels.get_kernel(OP, "f32-f32", "llvm")
    arrays = OP.random_inputs(problem, OP.combo("f32-f32"), rng)
    arrays[tensor] = arrays[tensor].copy()
    arrays[tensor][(4,) if tensor in ("gamma", "beta") else (1, 4, 3)] = np.nan
    want = OP.reference(problem, arrays)
    samples = [0, 1] if tensor in ("gamma", "beta") else [1]     # channel 4 is in group 2 (channels 4, 5)
    assert np.isnan(want["dx"][samples, 4:6]).all() and np.isfinite(want["dx"][:, :4]).all()
    _assert_passes(kernel, problem, rng, arrays)


def test_llvm_kernel_never_writes_its_inputs(rng):
    problem = Problem((2, 6, 40), 3, 0.5)
    for combo in OP.combos:
        arrays = OP.random_inputs(problem, combo, rng)
        before = {k: a.tobytes() for k, a in arrays.items()}
        _assert_passes(kernels.get_kernel(OP, combo, "llvm"), problem, rng, arrays)
        assert {k: a.tobytes() for k, a in arrays.items()} == before


# ---- the pattern every target's schedules match -----------------------------------------

GROUP_RULES = {"llvm": "GroupedRowPass", "opencl": "GpuGroupedRowPass", "cuda": "GpuGroupedRowPass",
               "ascend-emu": "GroupTiles"}


@pytest.mark.parametrize("combo", OP.combos, ids=lambda c: c.tag)
@pytest.mark.parametrize("target_name", sorted(GROUP_RULES))
def test_every_target_matches_the_group_pattern_with_the_prologue_inlined(target_name, combo):
    func = te.create_prim_func(OP.compute(combo)).with_attr("global_symbol", "gns")
    assert type(schedules.match(func, get_target(target_name))).__name__ == GROUP_RULES[target_name]
    names = {b.name for b in schedules.blocks(schedules.pattern_schedule(func))}
    assert "group_norm_swish_grad_y" not in names and "group_norm_swish_grad_dy_eff" not in names
    assert {"group_norm_swish_grad_ds", "group_norm_swish_grad_db", "group_norm_swish_grad_dx"} <= names


# ---- ascend-emu ---------------------------------------------------------------------------

EMU_PRODUCTS = ("AtlasA2", "Ascend950")
# group, hw1, channels, channel and hw-chunk modes; empty batch and spatial; several scales.
EMU_PROBLEMS = [Problem((2, 4, 5), 2), Problem((3, 6, 7), 3, 0.5), Problem((1, 8, 1), 4, -2.0),
                Problem((1, 60, 2000), 2, 0.0), Problem((2, 4, 4000), 2, 0.5), Problem((1, 4, 12290), 2, -2.0),
                Problem((33, 6, 7), 3), Problem((2, 4, 3, 5), 2, 1.0), Problem((1, 1), 1),
                Problem((0, 4, 5), 2), Problem((2, 4, 0), 2)]


@pytest.fixture(scope="module")
def emu_kernels():
    """ascend-emu kernels by (product, combo tag), each built (g++, seconds) when first asked for."""
    if not EMU.can_build():
        pytest.skip(f"ascend-emu cannot build here: {EMU.missing()}")
    return BuiltOnDemand(lambda key: kernels.get_kernel(OP, OP.combo(key[1]), EMU.for_product(key[0])))


EMU_CASES = [(prod, combo) for prod in EMU_PRODUCTS for combo in OP.combos]
# Each product once (the 950's rules differ: DataCopyPad, its casts), with the kernels the aclnn
# test below runs (bf16-bf16: built once for both); the group pattern's other casts on ascend-emu
# are GroupNormBackward's (tests/test_ascend_target.py), every combo here in the extended tier.
EMU_DEFAULT = [("Ascend950", OP.combo("bf16-bf16")), ("AtlasA2", OP.combo("bf16-bf16"))]


@pytest.mark.parametrize("prod,combo", tiered(EMU_CASES, [c for c in EMU_CASES if c in EMU_DEFAULT],
                                              [f"{p}-{c.tag}" for p, c in EMU_CASES]))
def test_ascend_emu_kernel_matches_the_reference(emu_kernels, prod, combo, rng):
    kernel = emu_kernels[prod, combo.tag]
    assert "group_norm_swish_grad" in kernel.symbol
    for problem in EMU_PROBLEMS:
        _assert_passes(kernel, problem, rng)


def test_ascend_emu_emits_the_sigmoid_and_keeps_the_scale_in_a_register(emu_kernels):
    files = emu_kernels["AtlasA2", "bf16-bf16"].module.files
    source = next(text for name, text in files.items() if name.startswith("op_kernel/"))
    assert "Exp(" in source and "Reciprocal(" in source                # 1 / (1 + exp(-z)) on the vector unit
    assert "s_swish_scale" in source                                   # a per-task scalar like mean and rstd


def test_the_aclnn_api_runs_on_ascend_emu(emu_kernels, rng, monkeypatch):
    """OPGEN_TARGET=ascend-emu: the two-phase call runs the emitted AscendC (the product's kernel)."""
    from opgen.targets.ascend import build as emu_build

    launched = []
    real_call = emu_build.EmuKernel.__call__
    monkeypatch.setattr(emu_build.EmuKernel, "__call__",
                        lambda self, *a: (launched.append(self.k.symbol), real_call(self, *a))[1])
    problem, combo = Problem((2, 6, 3, 5), 3, -2.0), OP.combo("bf16-bf16")
    for prod in EMU_PRODUCTS:
        with product(prod):                     # resets the product and the target on leaving
            config.set_target("ascend-emu")
            args, arrays = base_args(OP, problem, combo, rng)
            args["dxOut"] = _strided(args["dxOut"])
            assert run_both(OP, args) == (0, "")
        assert_matches(OP, combo, problem, arrays, args)
    assert launched == ["group_norm_swish_grad_bf16_bf16"] * 2, launched


# ---- opencl ------------------------------------------------------------------------------

@pytest.mark.skipif(not OPENCL.can_run(), reason="no OpenCL device here")
@pytest.mark.parametrize("combo", kept_on(OP, "opencl"))
def test_opencl_kernel_matches_the_reference(combo, rng):
    kernel = kernels.get_kernel(OP, combo, OPENCL)
    for problem in (Problem((2, 6, 7), 3, 0.5), Problem((3, 33, 941), 11, -2.0), Problem((2, 4, 3, 5), 2, 0.0),
                    Problem((0, 4, 5), 2)):
        _assert_passes(kernel, problem, rng)


# ---- cuda: compiled by nvcc here (tests/test_gpu_cuda.py checks every combo; a GPU runs them) ----

# Every kernel's nvcc check runs in the extended tier; the default tier compiles each GPU pattern and
# dtype mix once (tests/test_gpu_cuda.py).
@pytest.mark.full
def test_cuda_kernel_compiles_with_nvcc_without_spills():
    cuda = get_target("cuda")
    if not cuda.can_build():
        pytest.skip(f"cuda cannot build here: {cuda.missing()}")
    reports = cuda.compile_check(kernels.get_kernel(OP, "bf16-bf16", cuda).module)
    assert [r.arch for r in reports] == ["sm_80", "sm_90"]
    assert all(r.ok and r.spill_bytes == 0 for r in reports), [(r.arch, r.error, r.kernels) for r in reports]


# ================================================================ the aclnn API (llvm)

def _strided(a):
    """A non-contiguous view holding ``a``'s values (every other element of a wider buffer)."""
    a = np.asarray(a)
    wide = np.zeros(a.shape + (2,), a.dtype)
    wide[..., 0] = a
    return wide[..., 0]


@pytest.mark.parametrize("combo", OP.combos, ids=lambda c: c.tag)
def test_aclnn_strided_views_in_and_out(combo, rng):
    """Every input and output a strided view: inputs are staged, outputs copied back, and
    nothing the caller passed changes but the outputs."""
    problem = Problem((2, 6, 3, 7), 3, 0.5)
    with product("AtlasA2"):
        args, arrays = base_args(OP, problem, combo, rng)
        args = {k: _strided(v) if isinstance(v, np.ndarray) else v for k, v in args.items()}
        before = {k: args[k].copy() for k in ("dy", "mean", "rstd", "x", "gamma", "beta")}
        assert not args["dy"].flags.c_contiguous and not args["dxOut"].flags.c_contiguous
        assert run_both(OP, args) == (0, "")
    assert_matches(OP, combo, problem, arrays, args)
    for k, v in before.items():
        np.testing.assert_array_equal(args[k], v, err_msg=k)


def test_aclnn_dx_may_overwrite_dy(rng):
    """An output aliasing an input is staged: the kernel never reads what it already wrote."""
    problem, combo = Problem((2, 6, 33), 3, 0.5), OP.combo("f32-f32")
    args, arrays = base_args(OP, problem, combo, rng)
    args["dy"] = arrays["dy"] = arrays["dy"].copy()
    want = OP.reference(problem, dict(arrays))
    args["dxOut"] = args["dy"]
    assert run_both(OP, args) == (0, "")
    assert verify.compare("dx", args["dy"], want["dx"], "float32", "float32").passed


FLAGGED = (("dgammaIsRequire", "dgammaOut", "dgamma"), ("dbetaIsRequire", "dbetaOut", "dbeta"))


@pytest.mark.parametrize("dgamma,dbeta", [(True, True), (True, False), (False, True), (False, False)])
def test_aclnn_every_require_combination(dgamma, dbeta, rng):
    """S13: an IsRequire flag asks for its output. True: the gradient is written; false: the
    output (still required) is left bit for bit as the caller passed it, in every dtype
    (the kernel's result goes to scratch); dxOut is written either way."""
    problem = Problem((2, 6, 5), 2, 0.5, dgamma, dbeta)
    for combo in OP.combos:
        args, arrays = base_args(OP, problem, combo, rng)
        assert (args["dgammaIsRequire"], args["dbetaIsRequire"]) == (dgamma, dbeta)
        for name in ("dxOut", "dgammaOut", "dbetaOut"):
            args[name][...] = rng.standard_normal(args[name].shape)
            args[name].flat[0] = np.nan
        before = {name: args[name].tobytes() for name in ("dgammaOut", "dbetaOut")}
        assert run_both(OP, args) == (0, "")
        off = [(name, kernel) for flag, name, kernel in FLAGGED if not args[flag]]
        assert_matches(OP, combo, problem, arrays, args, skip=[kernel for _, kernel in off])
        for name, _ in off:
            assert args[name].tobytes() == before[name], f"{combo.tag}: {name} was written with its flag false"


def test_aclnn_an_output_not_asked_for_is_planned_as_scratch_and_never_touched(rng):
    """A false flag makes its output the kernel's scratch (in the host arena: no workspace),
    so the caller's tensor is neither read nor written: a read-only or strided dbetaOut is
    accepted (the format, dtype and C-elements rules still apply). The flag is part of the
    plan's key: the same arrays with the flag true get their gradient."""
    problem, combo = Problem((2, 6, 5), 3, 0.5, True, False), OP.combo("f32-f32")
    args, arrays = base_args(OP, problem, combo, rng)
    status, size, executor = GNS(**args)
    assert status == 0 and size == 0
    kinds = {p.kernel: p.kind for p in executor.plan.placements}
    assert kinds["dbeta"] == "scratch" and kinds["dgamma"] == "direct"
    for dbeta in (np.broadcast_to(np.float32(7.0), (6,)), _strided(np.full(6, 7.0, np.float32))):
        assert run_both(OP, {**args, "dbetaOut": dbeta}) == (0, "")
        assert (dbeta == 7.0).all()
    args["dbetaOut"][...] = 7.0
    assert run_both(OP, args) == (0, "") and (args["dbetaOut"] == 7.0).all()
    args["dbetaIsRequire"] = True
    assert run_both(OP, args) == (0, "")
    assert_matches(OP, combo, Problem((2, 6, 5), 3, 0.5), arrays, args)
    status, _ = gns_status(dbetaIsRequire=False, dbetaOut=np.zeros(6, np.float16))
    assert status == 161002
    status, _ = gns_status(dgammaIsRequire=False, dgammaOut=np.zeros(7, np.float32))
    assert status == 561002


def test_aclnn_swish_scale_per_call(rng):
    """The same arrays with another swishScale: the cached plan is per attribute value, so
    each call gets its own scale; an int is a double too; a double rounds to float32."""
    combo = OP.combo("f32-f32")
    base = Problem((2, 6, 9), 3)
    args, arrays = base_args(OP, base, combo, rng)
    for scale in SCALES + (3, 0.1):
        args["swishScale"] = scale
        assert run_both(OP, args) == (0, "")
        assert_matches(OP, combo, Problem(base.x_shape, 3, scale), arrays, args)
    args["swishScale"] = 1e300                      # float32(1e300) = inf: C's cast, no crash
    assert run_both(OP, args)[0] == 0


def test_aclnn_data_format_is_never_read(rng):
    problem = Problem((2, 6, 4), 3, -2.0)
    results = []
    for fmt in (None, "NCHW", "ND", "anything"):
        args, _ = base_args(OP, problem, OP.combo("f16-f16"), np.random.default_rng(5))   # the same inputs
        args["dataFormatOptional"] = fmt
        assert run_both(OP, args) == (0, "")
        results.append([args[n].tobytes() for n in ("dxOut", "dgammaOut", "dbetaOut")])
    assert all(r == results[0] for r in results) and np.asarray(args["dxOut"]).any()


@pytest.mark.parametrize("shape", [(3, 1), (1, 3), (3,), (1, 1, 3)])
def test_aclnn_dgamma_and_dbeta_of_any_shape_holding_c_elements(shape, rng):
    """S4: the document prints gamma's shape, rank 2, and its example passes (C, 1)."""
    problem = Problem((2, 3, 4), 1)
    args, arrays = base_args(OP, problem, OP.combo("f32-f32"), rng)
    args["dgammaOut"], args["dbetaOut"] = np.zeros(shape, np.float32), np.zeros(shape, np.float32)
    assert run_both(OP, args) == (0, "")
    assert_matches(OP, OP.combo("f32-f32"), problem, arrays, args)


@pytest.mark.parametrize("shape", [(3, 8), (2, 4, 1, 3, 1, 2, 2, 3), (2, 8, 4, 5)])
def test_aclnn_ranks_2_to_8(shape, rng):
    problem = Problem(shape, 2, 0.5)
    args, arrays = base_args(OP, problem, OP.combo("bf16-bf16"), rng)
    assert run_both(OP, args) == (0, "")
    assert_matches(OP, OP.combo("bf16-bf16"), problem, arrays, args)


def _acl_tensor(a: np.ndarray, fmt: int):
    """``a`` copied into an aclTensor of format ``fmt``; returns (tensor, device buffer)."""
    types = {np.dtype(np.float32): acl.ACL_FLOAT, np.dtype(np.float16): acl.ACL_FLOAT16, np.dtype(BF16): acl.ACL_BF16}
    _, dev = acl.aclrtMalloc(a.nbytes)
    acl.aclrtMemcpy(dev, a.nbytes, np.ascontiguousarray(a), a.nbytes, acl.ACL_MEMCPY_HOST_TO_DEVICE)
    return acl.aclCreateTensor(a.shape, types[a.dtype], None, 0, fmt, a.shape, dev), dev


def test_aclnn_formats_cann_treats_as_nd_are_accepted(rng):
    """S7: NCHW (and NHWC, NCDHW) tensors are taken as ND; NDHWC is refused (below)."""
    problem = Problem((2, 6, 3, 4), 3)
    args, arrays = base_args(OP, problem, OP.combo("f32-f32"), rng)
    for name, fmt in (("dy", acl.ACL_FORMAT_NCHW), ("x", acl.ACL_FORMAT_NHWC), ("gamma", acl.ACL_FORMAT_NCDHW)):
        args[name], _ = _acl_tensor(args[name], fmt)
    assert run_both(OP, args) == (0, "")
    assert_matches(OP, OP.combo("f32-f32"), problem, arrays, args)


def test_aclnn_torch_tensors(rng):
    torch = pytest.importorskip("torch")
    problem = Problem((2, 6, 5), 3, -2.0)
    args, arrays = base_args(OP, problem, OP.combo("bf16-bf16"), rng)
    targs = {k: torch.from_numpy(v.view(np.uint16)).view(torch.bfloat16) if isinstance(v, np.ndarray) else v
             for k, v in args.items()}
    assert run_both(OP, targs) == (0, "")
    outs = {k: targs[k].float().numpy().astype(BF16) for k in ("dxOut", "dgammaOut", "dbetaOut")}
    assert_matches(OP, OP.combo("bf16-bf16"), problem, arrays, {**args, **outs})


# ================================================================ every documented error line

def gns(shape=(2, 6, 4), groups=3, dtype=np.float32):
    n, c = shape[0], shape[1]
    return dict(dy=np.ones(shape, dtype), mean=np.zeros((n, groups), dtype), rstd=np.ones((n, groups), dtype),
                x=np.ones(shape, dtype), gamma=np.ones(c, dtype), beta=np.zeros(c, dtype), numGroups=groups,
                dataFormatOptional=None, swishScale=1.0, dgammaIsRequire=True, dbetaIsRequire=True,
                dxOut=np.zeros(shape, dtype), dgammaOut=np.zeros(c, dtype), dbetaOut=np.zeros(c, dtype))


def gns_status(prod="Ascend950", args=None, **changes):
    args = dict(gns() if args is None else args)
    args.update(changes)
    with product(prod):
        status, size, executor = GNS(**args)
    if status:
        assert executor is None and size == 0
    return status, acl.aclGetRecentErrMsg()


TENSORS = ("dy", "mean", "rstd", "x", "gamma", "beta", "dxOut", "dgammaOut", "dbetaOut")


@pytest.mark.parametrize("name", TENSORS)
def test_error_null_tensor_is_161001(name):
    """doc l.297: any of the nine tensors null, the outputs whatever their IsRequire flag
    (S13: a false flag leaves its output unwritten, but the def keeps it REQUIRED)."""
    status, msg = gns_status(**{name: None}, dgammaIsRequire=False, dbetaIsRequire=False)
    assert status == 161001 and f"{name} is a null pointer" in msg


@pytest.mark.parametrize("dtype", [np.float64, np.int32])
def test_error_dy_dtype_outside_the_supported_range(dtype):
    """doc l.302."""
    status, msg = gns_status(dy=np.ones((2, 6, 4), dtype))
    assert status == 161002 and "dy" in msg


@pytest.mark.parametrize("name", ["mean", "rstd", "x", "gamma", "beta"])
def test_error_input_dtype_differs_from_dy(name):
    """doc l.305."""
    args = gns()
    status, msg = gns_status(**{name: args[name].astype(np.float16)})
    assert status == 161002 and f"{name} has dtype float16" in msg and "dy" in msg


@pytest.mark.parametrize("name", ["dxOut", "dgammaOut", "dbetaOut"])
def test_error_output_dtype_differs_from_dy(name):
    """doc l.308 (dxOut); def l.63-74 (dgammaOut, dbetaOut: S6)."""
    args = gns()
    status, msg = gns_status(**{name: args[name].astype(BF16)})
    assert status == 161002 and f"{name} has dtype bfloat16" in msg


@pytest.mark.parametrize("prod", ["Ascend950", "AtlasA3", "AtlasA2"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16])
def test_every_column_of_the_definition_on_every_product(prod, dtype):
    assert gns_status(prod, gns(dtype=dtype))[0] == 0


def test_error_mixed_dtypes_of_the_forward_are_refused():
    """The forward allows float32 gamma with half x; the backward's definition does not."""
    args = gns(dtype=np.float16)
    status, msg = gns_status(args=args, gamma=np.ones(6, np.float32), beta=np.zeros(6, np.float32),
                             mean=np.zeros((2, 3), np.float32), rstd=np.ones((2, 3), np.float32))
    assert status == 161002 and "mean has dtype float32" in msg


@pytest.mark.parametrize("prod", ["AtlasTraining", "AtlasInference"])
def test_error_products_without_the_op(prod):
    """doc l.5-24: not supported on Atlas training and inference products (S8)."""
    status, msg = gns_status(prod)
    assert status == 161002 and f"not supported on {prod}" in msg


def test_error_formats_cann_refuses():
    _, buf = acl.aclrtMalloc(48 * 4)
    status, msg = gns_status(dy=acl.aclCreateTensor([2, 6, 4], acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_NDHWC,
                                                    [2, 6, 4], buf))
    assert status == 161002 and "dy has format NDHWC" in msg
    status, msg = gns_status(dbetaOut=acl.aclCreateTensor([6], acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_FRACTAL_NZ,
                                                          [6], buf))
    assert status == 161002 and "dbetaOut has format FRACTAL_NZ" in msg


SHAPE_ERRORS = [  # (changes to gns(), what the message must say): all 561002 (S1)
    (dict(dy=np.ones(48, np.float32)), "dy has 1 dimensions; expected 2 to 8"),
    (dict(dy=np.ones((1,) * 7 + (2, 6, 4), np.float32)), "dy has 10 dimensions; expected 2 to 8"),
    (dict(x=np.ones((2, 6, 2, 2), np.float32)), "x has shape (2, 6, 2, 2); expected dy's (2, 6, 4)"),
    (dict(numGroups=0), "numGroups is 0; expected a value greater than 0"),
    (dict(numGroups=-3), "numGroups is -3"),
    (dict(mean=np.zeros(6, np.float32)), "mean has shape (6,); expected 2 dimensions (N, numGroups)"),
    (dict(rstd=np.ones((2, 3, 1), np.float32)), "rstd has shape (2, 3, 1); expected 2 dimensions"),
    (dict(mean=np.zeros((3, 2), np.float32), rstd=np.ones((3, 2), np.float32)),
     "mean has shape (3, 2); expected (N, numGroups) with N = dy's 2"),
    (dict(numGroups=2), "mean has shape (2, 3); expected (N, numGroups) with numGroups = 2"),
    (dict(rstd=np.ones((2, 1), np.float32), mean=np.zeros((2, 3), np.float32)), "rstd has shape (2, 1)"),
    (dict(gamma=np.ones(7, np.float32)), "gamma has shape (7,); expected (C,) = (6,)"),
    (dict(gamma=np.ones((6, 1), np.float32)), "gamma has shape (6, 1); expected (C,) = (6,)"),
    (dict(beta=np.zeros((2, 3), np.float32)), "beta has shape (2, 3); expected (C,) = (6,)"),
    (dict(gns((0, 6, 4), 3)), "N = 0 (empty tensors are not supported)"),
    (dict(gns((2, 6, 0), 3)), "HxW = 0 (empty tensors are not supported)"),
    (dict(gns((2, 6, 3, 0), 3)), "HxW = 0"),
    (dict(gns((2, 0, 4), 1)), "C = 0: no channels per group"),
    (dict(gns((2, 6, 4), 4)), "C = 6 is not divisible by numGroups = 4"),
    (dict(gns((1, 4001, 1), 1)), "C / numGroups = 4001 / 1 = 4001; at most 4000 channels per group"),
    (dict(gns((1, 8002, 2), 2)), "C / numGroups = 8002 / 2 = 4001"),
    (dict(dxOut=np.zeros((2, 24), np.float32)), "dxOut has shape (2, 24); expected x's (2, 6, 4)"),
    (dict(dgammaOut=np.zeros(5, np.float32)), "dgammaOut has shape (5,); expected C = 6 elements"),
    (dict(dbetaOut=np.zeros((2, 6), np.float32)), "dbetaOut has shape (2, 6); expected C = 6 elements"),
    (dict(dbetaOut=np.zeros((1,) * 8 + (6,), np.float32)), "in at most 8 dimensions"),
]


@pytest.mark.parametrize("prod", ["Ascend950", "AtlasA2"])
@pytest.mark.parametrize("changes,message", SHAPE_ERRORS, ids=[m[:40] for _, m in SHAPE_ERRORS])
def test_error_shapes_are_the_tilings_561002(prod, changes, message):
    """The tiling's checks (CheckInputShape, Init) and the document's 约束说明 (doc
    l.360-369), each refused in phase one with 561002 and a message naming the parameter."""
    status, msg = gns_status(prod, **changes)
    assert status == 561002 and message in msg, msg


def test_limits_that_are_accepted():
    assert gns_status(args=gns((1, 4000, 1), 1))[0] == 0           # C / numGroups = 4000 exactly
    assert gns_status(args=gns((1, 8000, 3), 2))[0] == 0
    assert gns_status(args=gns((3, 5), 5))[0] == 0                 # 2-D x, a group per channel
    assert gns_status(dataFormatOptional="NHWC", swishScale=-7)[0] == 0


@pytest.mark.parametrize("changes,message", [
    (dict(numGroups=3.0), "numGroups must be an integer"),
    (dict(swishScale="1.0"), "swishScale must be a number"),
    (dict(swishScale=True), "swishScale must be a number"),
    (dict(dgammaIsRequire=1), "dgammaIsRequire must be a bool"),
    (dict(dbetaIsRequire=None), "dbetaIsRequire must be a bool"),
    (dict(dataFormatOptional=1), "dataFormatOptional must be a str or None"),
])
def test_error_attribute_of_the_wrong_c_type(changes, message):
    status, msg = gns_status(**changes)
    assert status == 161002 and message in msg


# ================================================================ the proof

@pytest.mark.full   # tests/test_derive.py proves every op in the default tier; this adds the group cases
def test_the_proof_holds_and_covers_one_and_several_groups():
    report = derive.prove(OP.name)
    assert report.ok, report.summary()
    assert {c.sizes["G"] for c in report.cases} == {1, 2} and all(c.checked for c in report.cases)
    assert "PROVEN" in report.summary()


@pytest.mark.parametrize("tag", ["f16-f16", "bf16-bf16"])
def test_the_half_combos_prove_through_their_casts(tag):
    assert derive.prove(OP.name, tag, cases=[(1, 2, 1, 2)]).ok


@pytest.mark.parametrize("stage,broken,intact", [
    ("y", ("dx", "dgamma_acc", "dbeta_acc"), ()),          # +beta -> -beta: the swish sees another y
    ("dy_eff", ("dx", "dgamma_acc", "dbeta_acc"), ()),     # 1 + z(1 - sig) -> 1 - z(1 - sig)
    ("c3", ("dx",), ("dgamma_acc", "dbeta_acc")),
    ("dgamma_acc", ("dgamma_acc",), ("dx", "dbeta_acc")),
])
def test_a_flipped_sign_in_a_stage_fails_the_proof(monkeypatch, stage, broken, intact):
    original, hits = te.compute, []
    name = f"group_norm_swish_grad_{stage}"

    def compute(shape, fcompute, name_=None, *args, **kwargs):
        label = kwargs.pop("name", name_ or "compute")
        if label == name:
            body = fcompute

            def fcompute(*idx):
                flipped = _flip_first_sign(body(*idx))
                assert flipped is not None, f"no Add/Sub to flip in {name}"
                hits.append(name)
                return flipped
        return original(shape, fcompute, label, *args, **kwargs)

    monkeypatch.setattr(te, "compute", compute)
    report = derive.prove(OP.name, cases=[(1, 2, 1, 2)])
    assert hits and not report.ok
    bad = report.cases[0].mismatches
    for out in broken:
        assert any(m.startswith(f"group_norm_swish_grad_{out}[") for m in bad), (out, bad)
    for out in intact:
        assert not any(m.startswith(f"group_norm_swish_grad_{out}[") for m in bad), (out, bad)


def test_the_documents_formulas_judged():
    checks = derive.check_seed_formulas([OP])   # this op's alone (every op's: tests/test_derive.py)
    by = {(c.output, c.formula): c.matches for c in checks}
    assert [c.matches for c in checks if c.output in ("dbeta", "dgamma")] == [True, True]
    printed, partial, corrected = [c for c in checks if c.output == "dx"]
    assert "as printed" in printed.formula and not printed.matches
    assert not partial.matches and "no 1/M" in partial.detail
    assert corrected.matches and "/ M" in corrected.formula
    assert len(by) == 5 and all(c.seed == "aclnnGroupNormSwishGrad" for c in checks)


# ================================================================ Pythonic and torch

def _gns_inputs(rng, shape=(2, 6, 3, 4), groups=3, dtype=np.float32):
    x = (rng.standard_normal(shape) * 2 + 0.5).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    gamma, beta = rng.uniform(0.5, 1.5, shape[1]).astype(dtype), rng.uniform(-0.5, 0.5, shape[1]).astype(dtype)
    _, mean, rstd = ref.group_norm_swish(x, gamma, beta, groups, 1.0)
    return dy, mean.astype(dtype), rstd.astype(dtype), x, gamma, beta


def test_pythonic_function(rng):
    dy, mean, rstd, x, gamma, beta = _gns_inputs(rng)
    import inspect
    assert list(inspect.signature(opgen.group_norm_swish_grad).parameters) == [
        "dy", "mean", "rstd", "x", "gamma", "beta", "num_groups", "data_format", "swish_scale", "dgamma_is_require",
        "dbeta_is_require", "dx", "dgamma", "dbeta"]
    for scale in (1.0, -2.0):
        kwargs = {} if scale == 1.0 else {"swish_scale": scale}
        outs = opgen.group_norm_swish_grad(dy, mean, rstd, x, gamma, beta, 3, **kwargs)
        for got, want in zip(outs, ref.group_norm_swish_grad(dy, mean, rstd, x, gamma, beta, 3, scale)):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    given = np.zeros((6, 1), np.float32)
    outs = opgen.group_norm_swish_grad(dy, mean, rstd, x, gamma, beta, 3, dgamma=given)
    assert outs[1] is given and given.any()
    with pytest.raises(opgen.AclnnError) as info:
        opgen.group_norm_swish_grad(dy, mean, rstd, x, gamma, beta, 4)
    assert info.value.status == 561002 and "numGroups" in info.value.message
    with pytest.raises(opgen.AclnnError) as info:
        opgen.group_norm_swish_grad(dy, mean, rstd, x, None, beta, 3)
    assert info.value.status == 161001 and "gamma" in info.value.message


def test_pythonic_function_allocates_nothing_for_an_output_not_asked_for(rng, monkeypatch):
    """As for GroupNorm's mask: a false IsRequire flag's output is None and nothing of its
    size is allocated (the aclnn call, which keeps it required, gets a one-element
    placeholder broadcast to its shape); a given one is left untouched; torch tensors alike."""
    dy, mean, rstd, x, gamma, beta = _gns_inputs(rng)
    want = ref.group_norm_swish_grad(dy, mean, rstd, x, gamma, beta, 3, 1.0)
    made = []
    real_alloc = opgen.api._MAKERS["alloc"]
    monkeypatch.setitem(opgen.api._MAKERS, "alloc", lambda t, shape, *rest: made.append(tuple(shape)) or real_alloc(
        t, shape, *rest))
    for flags, kept in (((False, True), (0, 2)), ((True, False), (0, 1)), ((False, False), (0,))):
        made.clear()
        outs = opgen.group_norm_swish_grad(dy, mean, rstd, x, gamma, beta, 3, dgamma_is_require=flags[0],
                                           dbeta_is_require=flags[1])
        assert [i for i, o in enumerate(outs) if o is not None] == list(kept)
        assert made == [np.shape(want[i]) for i in kept]
        for i in kept:
            np.testing.assert_allclose(outs[i], want[i], rtol=1e-4, atol=1e-4)
    given = np.full(6, 3.0, np.float32)
    outs = opgen.group_norm_swish_grad(dy, mean, rstd, x, gamma, beta, 3, dgamma_is_require=False, dgamma=given)
    assert outs[1] is None and (given == 3.0).all()
    torch = pytest.importorskip("torch")
    t = [torch.from_numpy(a) for a in (dy, mean, rstd, x, gamma, beta)]
    made.clear()
    outs = opgen.group_norm_swish_grad(*t, 3, dbeta_is_require=False)
    assert outs[2] is None and isinstance(outs[1], torch.Tensor) and made == [dy.shape, (6,)]


@pytest.fixture
def opgen_calls(monkeypatch):
    """Counts the calls of this op reaching opgen's Pythonic layer (what the custom op calls)."""
    calls = []
    real = opgen.api.call_op

    def counted(op, *a, **k):
        calls.append(op.name)
        return real(op, *a, **k)
    monkeypatch.setattr(opgen.api, "call_op", counted)
    return calls


def test_torch_custom_op_passes_opcheck():
    torch = pytest.importorskip("torch")
    pytest.importorskip("opgen.torch")
    torch.manual_seed(0)
    x = torch.randn(2, 4, 3)
    mean, rstd = x.reshape(2, 2, -1).mean(-1), x.reshape(2, 2, -1).var(-1, unbiased=False).add(1e-5).rsqrt()
    for flags in ((True, False), (False, True), (False, False)):
        torch.library.opcheck(torch.ops.opgen.group_norm_swish_grad.default,
                              (torch.randn(2, 4, 3), mean, rstd, x, torch.rand(4) + 0.5, torch.randn(4), 2, None, 0.5,
                               *flags))


def test_torch_custom_op_returns_an_empty_tensor_for_an_output_not_asked_for():
    """As for GroupNorm's mask: the real op and its fake (from the same ApiSpec.wanted)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("opgen.torch")
    from torch._subclasses.fake_tensor import FakeTensorMode

    x = torch.randn(2, 4, 3)
    args = (torch.randn(2, 4, 3), torch.zeros(2, 2), torch.ones(2, 2), x, torch.ones(4), torch.zeros(4), 2, None, 1.0)
    for flags in ((False, True), (True, False)):
        real = torch.ops.opgen.group_norm_swish_grad(*args, *flags)
        with FakeTensorMode(allow_non_fake_inputs=True):
            fake = torch.ops.opgen.group_norm_swish_grad(*args, *flags)
        assert [tuple(o.shape) for o in real] == [tuple(o.shape) for o in fake] == [
            (2, 4, 3), (4,) if flags[0] else (0,), (4,) if flags[1] else (0,)]


def _torch_pair(torch, groups, channels, affine, scale, dtype=None):
    import opgen.torch as ot

    ours = ot.GroupNormSwish(groups, channels, affine=affine, swish_scale=scale, dtype=dtype)
    theirs = torch.nn.GroupNorm(groups, channels, affine=affine, dtype=dtype)
    with torch.no_grad():
        for p in ours.parameters():
            p.uniform_(0.5, 1.5)
    theirs.load_state_dict(ours.state_dict())           # strict: GroupNorm's names and shapes
    return ours, (lambda x: (lambda y: y * torch.sigmoid(scale * y))(theirs(x))), theirs


def _grads(torch, fn, params, x, dy):
    x = x.detach().clone().requires_grad_(True)
    for p in params:
        p.grad = None
    fn(x).backward(dy)
    return [x.grad] + [p.grad for p in params]


@pytest.mark.parametrize("scale", [1.0, 0.5, -2.0])
@pytest.mark.parametrize("affine", [True, False])
def test_torch_module_f32_matches_autograd_of_group_norm_and_swish(affine, scale, opgen_calls):
    torch = pytest.importorskip("torch")
    torch.manual_seed(2)
    ours, reference, theirs = _torch_pair(torch, 4, 12, affine, scale)
    x, dy = torch.randn(3, 12, 5, 7) * 2 + 0.5, torch.randn(3, 12, 5, 7)
    torch.testing.assert_close(ours(x), reference(x), rtol=1e-5, atol=1e-5)
    got = _grads(torch, ours, list(ours.parameters()), x, dy)
    want = _grads(torch, reference, list(theirs.parameters()), x, dy)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    assert opgen_calls == ["group_norm_swish", "group_norm_swish", "group_norm_swish_grad"]  # ours(x), then _grads


@pytest.mark.parametrize("affine", [True, False])
def test_torch_module_bf16_within_tolerance_of_float64(affine):
    """bf16: opgen's gradients as close to float64 autograd (of the same bf16 values) as bf16
    outputs can be, and within bf16's tolerance of torch's own bf16 autograd."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(4)
    ours, reference, theirs = _torch_pair(torch, 4, 16, affine, 0.5, torch.bfloat16)
    exact_gn = torch.nn.GroupNorm(4, 16, affine=affine, dtype=torch.float64)
    exact_gn.load_state_dict({k: v.double() for k, v in ours.state_dict().items()})
    exact_fn = lambda x: (lambda y: y * torch.sigmoid(0.5 * y))(exact_gn(x))  # noqa: E731
    x, dy = torch.randn(2, 16, 6, 6).bfloat16(), torch.randn(2, 16, 6, 6).bfloat16()
    got = _grads(torch, ours, list(ours.parameters()), x, dy)
    torch_bf16 = _grads(torch, reference, list(theirs.parameters()), x, dy)
    want = _grads(torch, exact_fn, list(exact_gn.parameters()), x.double(), dy.double())
    assert len(got) == (3 if affine else 1)
    for a, t, b in zip(got, torch_bf16, want):
        assert a.dtype == torch.bfloat16
        scale = b.abs().max().item()
        torch.testing.assert_close(a.double(), b, rtol=2 ** -7, atol=2e-2 * scale)
        torch.testing.assert_close(a.double(), t.double(), rtol=2 ** -6, atol=2 ** -5 * scale)


def test_torch_module_compiles_without_a_graph_break(opgen_calls):
    torch = pytest.importorskip("torch")
    import opgen.torch as ot

    torch.manual_seed(6)
    model = ot.GroupNormSwish(2, 8, swish_scale=0.5)
    x = torch.randn(2, 8, 4, 4, requires_grad=True)
    torch.compile(model, fullgraph=True)(x).sum().backward()
    compiled = [x.grad.clone()] + [p.grad.clone() for p in model.parameters()]
    assert opgen_calls == ["group_norm_swish", "group_norm_swish_grad"]
    x.grad = None
    model.zero_grad()
    model(x).sum().backward()
    for a, b in zip(compiled, [x.grad] + [p.grad for p in model.parameters()]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert "swish_scale=0.5" in repr(model)
