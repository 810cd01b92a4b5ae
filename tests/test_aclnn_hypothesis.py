"""Property test of both ops through the aclnn API: random shapes, dtypes, products, nulls,
layouts (strided, transposed, misaligned, aclTensor, torch), masks and groups, with random
corruptions. Every call must either return 0 and match the float64 reference (inputs
unchanged, masked-off outputs untouched) or return a documented status with a message;
never raise, never crash.

Examples: the "opgen-ci" profile's 3000 (derandomized, so CI runs are stable), or
$OPGEN_HYPOTHESIS_PROFILE / $OPGEN_HYPOTHESIS_EXAMPLES.
"""
from __future__ import annotations

import os

import ml_dtypes
import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from opgen import acl, aclnn
from opgen.ops import get_op
from opgen.ops.group_norm_backward import Problem as GNProblem
from opgen.ops.rms_norm_grad import Problem as RMSProblem
from opgen.verify import compare_outputs

from aclnn_helpers import base_args, product, run_both
from tiers import full_in_environment

try:
    import torch
except ImportError:  # torch is optional: its layouts are simply not drawn
    torch = None

# Settings profiles (registered here, applied only to this test, so other modules keep theirs):
# "opgen-ci" is the default tier's, "opgen-full" the extended tier's (OPGEN_TESTS=full, see
# tests/tiers.py); OPGEN_HYPOTHESIS_PROFILE=opgen-quick for a fast local loop.
_COMMON = dict(derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
settings.register_profile("opgen-ci", max_examples=1000, **_COMMON)
settings.register_profile("opgen-full", max_examples=3000, **_COMMON)
settings.register_profile("opgen-quick", max_examples=300, **_COMMON)
_TIER_PROFILE = "opgen-full" if full_in_environment() else "opgen-ci"
PROFILE = settings.get_profile(os.environ.get("OPGEN_HYPOTHESIS_PROFILE", _TIER_PROFILE))
EXAMPLES = int(os.environ.get("OPGEN_HYPOTHESIS_EXAMPLES", PROFILE.max_examples))
PRODUCTS = ["Ascend950", "AtlasA3", "AtlasA2", "AtlasInference", "AtlasTraining"]
DOCUMENTED = {aclnn.ACLNN_ERR_PARAM_NULLPTR, aclnn.ACLNN_ERR_PARAM_INVALID, aclnn.ACLNN_ERR_INNER_TILING_ERROR}
LAYOUTS = ["contiguous", "strided", "transposed", "misaligned", "acl"] + (["torch"] if torch else [])
ACL_DTYPES = {np.dtype(np.float32): acl.ACL_FLOAT, np.dtype(np.float16): acl.ACL_FLOAT16,
              np.dtype(ml_dtypes.bfloat16): acl.ACL_BF16}


def _lay_out(a: np.ndarray, layout: str):
    """(argument to pass, numpy view of the same memory) with ``a``'s values."""
    if layout == "strided" and a.ndim:
        base = np.zeros(a.shape[:-1] + (a.shape[-1] * 2,), a.dtype)
        view = base[..., ::2]
    elif layout == "transposed" and a.ndim >= 2:
        view = np.swapaxes(np.zeros(a.shape[:-2] + a.shape[::-1][:2], a.dtype), -1, -2)
    elif layout == "misaligned":
        raw = np.zeros(a.nbytes + a.itemsize, np.uint8)
        view = raw[a.itemsize:].view(a.dtype).reshape(a.shape)
    elif layout == "acl" and a.dtype in ACL_DTYPES:
        _, buf = acl.aclrtMalloc(max(a.nbytes, 1))
        t = acl.aclCreateTensor(a.shape, ACL_DTYPES[a.dtype], None, 0, acl.ACL_FORMAT_ND, a.shape, buf)
        t.host_view()[...] = a
        return t, t.host_view()
    elif layout == "torch" and a.dtype in (np.float32, np.float16) and a.ndim:
        t = torch.from_numpy(np.array(a, copy=True))
        return t, t.numpy()
    else:
        view = np.array(a, copy=True)
    view[...] = a
    return view, view


@st.composite
def rms_problems(draw):
    ndim = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=ndim - 1, max_size=ndim - 1))) + \
        (draw(st.sampled_from([0, 1, 3, 8, 16, 17, 40])),)
    return RMSProblem(shape, draw(st.integers(1, ndim)))


@st.composite
def gn_problems(draw):
    group = draw(st.integers(1, 3))
    return GNProblem(draw(st.integers(0, 3)), group * draw(st.integers(0, 3)), draw(st.integers(0, 5)), group)


def _corrupt(draw, op, args):
    """Maybe break the call in one documented way (or in a way that is still valid)."""
    kind = draw(st.sampled_from(["none"] * 6 + ["null", "dtype", "count", "group", "mask", "rank"]))
    tensors = [p.name for p in op.api.tensors() if args[p.name] is not None]
    name = draw(st.sampled_from(tensors))
    if kind == "null":
        args[name] = None
    elif kind == "dtype":
        args[name] = args[name].astype(draw(st.sampled_from([np.float16, np.float32, np.float64,
                                                             ml_dtypes.bfloat16])))
    elif kind == "count":
        size = args[name].size + draw(st.sampled_from([-1, 1])) if args[name].size else 1
        args[name] = np.full(size, np.nan, args[name].dtype)
    elif kind == "group" and "group" in args:
        args["group"] = draw(st.integers(-1, 7))
    elif kind == "mask" and "outputMask" in args:
        args["outputMask"] = draw(st.lists(st.booleans(), min_size=2, max_size=4))
    elif kind == "rank":
        args[name] = args[name].reshape((1,) * 8 + (-1,))
    return kind, name


def _expected(op, problem, arrays, args):
    """The float64 reference for the arguments as (possibly legally) reshaped by the draw."""
    if op.name == "group_norm_backward":
        shape = (problem.N, problem.C, problem.HxW)
        a = {k: (np.reshape(v, shape) if k in ("dy", "x") else v) for k, v in arrays.items()}
        a["gamma"] = None if args["gamma"] is None else arrays["gamma"]
        return op.reference(problem, a)
    return op.reference(problem, arrays)


@settings(PROFILE, max_examples=EXAMPLES)
@given(data=st.data())
def test_random_calls(data):
    draw = data.draw
    op = get_op(draw(st.sampled_from(["rms_norm_grad", "group_norm_backward"])))
    problem = draw(rms_problems() if op.name == "rms_norm_grad" else gn_problems())
    combo = draw(st.sampled_from(op.combos))
    prod = draw(st.sampled_from(PRODUCTS))
    args, arrays = base_args(op, problem, combo, np.random.default_rng(draw(st.integers(0, 2**16))))
    if "outputMask" in args:
        args["outputMask"] = [draw(st.booleans()) for _ in range(3)]
        if draw(st.booleans()):
            args["gamma"] = None
    for p in op.api.tensors("output"):
        args[p.name] = np.full(args[p.name].shape, np.nan, args[p.name].dtype)
    kind, broken = _corrupt(draw, op, args)
    before = {k: np.array(v, copy=True) for k, v in args.items() if isinstance(v, np.ndarray)}
    views = {}
    for p in op.api.tensors():
        if isinstance(args[p.name], np.ndarray):
            args[p.name], views[p.name] = _lay_out(args[p.name], draw(st.sampled_from(LAYOUTS)))
    with product(prod):
        status, message = run_both(op, args)
    event(f"{op.name} {kind}: status {status}")
    for p in op.api.tensors("input"):
        if p.name in views:
            assert np.array(views[p.name]).tobytes() == before[p.name].tobytes(), f"{p.name} modified"
    if status != 0:
        assert status in DOCUMENTED and message, (status, message)
        return
    mask = args.get("outputMask")
    if kind == "null":  # only an optional input or an output the mask turned off may be null
        p = op.api.param(broken)
        assert p.optional or (p.mask_bit is not None and not mask[p.mask_bit]), f"null {broken} accepted"
    ref = _expected(op, problem, {k: before.get(n, v) for n, k, v in
                                  ((p.name, p.kernel, arrays.get(p.kernel)) for p in op.api.tensors("input"))},
                    args) if kind == "none" else None
    outs = {}
    for p in op.api.tensors("output"):
        if p.mask_bit is not None and not mask[p.mask_bit]:
            if p.name in views:
                assert np.isnan(views[p.name].astype(np.float32)).all(), f"masked-off {p.name} written"
        elif ref is not None:
            outs[p.kernel] = np.reshape(views[p.name], np.shape(ref[p.kernel]))
    if ref is not None:
        for c in compare_outputs(op, combo, outs, ref):
            assert c.passed, (c, problem, combo.tag, prod)
