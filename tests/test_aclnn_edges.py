"""Statuses at the edges of the aclnn API (issue 35): values the document's C types cannot
hold, outputs that overlap themselves, tensors changed between the two phases, and sizes
past any memory. Each is the caller's mistake, so each is exactly 161002 with a message
naming what is wrong: never 361001 (our own failure), never an exception past the API.

Properties over every aclnn function (hypothesis, derandomized, a few dozen examples
each: the whole file runs in well under a minute on 2 cores).
"""
from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import as_strided

from opgen import acl, aclnn
from opgen.apispec import INPUT, OUTPUT
from opgen.ops import all_ops, get_op
from opgen.ops.rms_norm_grad import Problem as RMSProblem

from aclnn_helpers import base_args, float32_combo, offering, phase_one, product

torch = pytest.importorskip("torch")

OPS = [op for op in all_ops() if op.api is not None]
INVALID = aclnn.ACLNN_ERR_PARAM_INVALID
INT64_MAX = 2**63 - 1
EDGE = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))


@functools.lru_cache(maxsize=None)
def _base(op_name: str) -> dict:
    """A valid call of the op on its first problem (float32), made once: tests copy it."""
    op = get_op(op_name)
    args, _ = base_args(op, op.problems[0], float32_combo(op), np.random.default_rng(0))
    return args


def fresh_args(op) -> dict:
    """The op's base call with every array copied (a test may write or corrupt them)."""
    return {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in _base(op.name).items()}


def first_phase(op, args):
    """Phase one on a product offering the op: (status, size, executor, message)."""
    with product(offering(op)):
        status, size, executor = phase_one(op, args)
    return status, size, executor, acl.aclGetRecentErrMsg() if status else ""


def second_phase(op, workspace, size, executor):
    status = getattr(aclnn, op.aclnn_name)(workspace, size, executor, None)
    return status, acl.aclGetRecentErrMsg() if status else ""


def assert_refused(status, size, executor, message, *words):
    assert status == INVALID, f"status {status}: {message}"
    assert size == 0 and executor is None
    for word in words:
        assert word in message, message


def test_every_base_call_is_valid():
    for op in OPS:
        status, _, _, message = first_phase(op, fresh_args(op))
        assert status == 0, f"{op.name}: {message}"


# ---- values the document's types cannot hold --------------------------------------------

def _attributes(kinds):
    return [(op, p) for op in OPS for p in op.api.params if p.role == "attr" and p.value_type in kinds]


FLOAT_ATTRS, INT_ATTRS = _attributes({"float"}), _attributes({"int", "ints"})
past_double = st.integers(min_value=2**1024, max_value=10**400).flatmap(lambda n: st.sampled_from([n, -n]))
past_int64 = st.one_of(st.integers(min_value=2**63, max_value=2**200), st.integers(min_value=-2**200,
                                                                                  max_value=-2**63 - 1))


@EDGE
@given(target=st.sampled_from(FLOAT_ATTRS), value=past_double)
def test_a_double_attribute_past_a_double_is_invalid(target, value):
    """eps=10**400 was 361001 "internal error OverflowError"; a long double past 1.8e308 too."""
    op, param = target
    for given_value in (value, np.longdouble(value) if np.finfo(np.longdouble).max > 2**1024 else value):
        args = fresh_args(op)
        args[param.name] = given_value
        assert_refused(*first_phase(op, args), param.name, "double")


@EDGE
@given(target=st.sampled_from(INT_ATTRS), value=past_int64)
def test_an_int64_attribute_past_int64_is_invalid(target, value):
    """group, numGroups, N, C, HxW and aclIntArray items are int64 in C: past that is
    161002 from the reader, naming the range, before any rule of the op (numGroups=2**63
    was GroupNormSwishGrad's 561002 shape rule)."""
    op, param = target
    args = fresh_args(op)
    args[param.name] = [value] + list(args[param.name])[1:] if param.value_type == "ints" else value
    assert_refused(*first_phase(op, args), param.name, "int64")


# ---- outputs that overlap themselves ----------------------------------------------------

def _outputs():
    """(op, output) pairs whose base tensor has a dimension of more than one element."""
    found = []
    for op in OPS:
        for p in op.api.tensors(OUTPUT):
            value = _base(op.name)[p.name]
            if value is not None and any(d > 1 for d in value.shape):
                found.append((op, p))
    return found


def _overlapping(a: np.ndarray, style: str, axis: int):
    """A writable view of ``a``'s shape and dtype in which two elements share memory."""
    shape, itemsize = a.shape, a.itemsize
    if style == "torch-expand":   # of a's dtype (an int8 output is not refused for its dtype first)
        base = np.zeros(tuple(1 if i == axis else d for i, d in enumerate(shape)), a.dtype)
        if a.dtype.name == "bfloat16":   # ml_dtypes' bfloat16: torch.from_numpy knows it not
            return torch.from_numpy(base.view(np.int16)).view(torch.bfloat16).expand(shape)
        return torch.from_numpy(base).expand(shape)
    strides = list(np.zeros(shape, a.dtype).strides)
    strides[axis] = 0 if style == "zero-stride" else itemsize   # "folded": a step of one element
    if style == "folded" and a.ndim == 1:
        strides[axis] = itemsize // 2                           # half an element: neighbours share bytes
    room = np.zeros(a.size + 8, a.dtype)
    return as_strided(room, shape, tuple(strides), writeable=True)


@EDGE
@given(target=st.sampled_from(_outputs()), style=st.sampled_from(["zero-stride", "folded", "torch-expand"]),
       data=st.data())
def test_an_output_that_overlaps_itself_is_invalid(target, style, data):
    """torch refuses to write such a tensor; so does every aclnn function (it was accepted,
    and written element over element)."""
    op, param = target
    args = fresh_args(op)
    out = args[param.name]
    axis = data.draw(st.sampled_from([i for i, d in enumerate(out.shape) if d > 1]))
    view = _overlapping(out, style, axis)
    if style == "folded" and not _folds(view):
        return   # (a stride of one element along the last axis is no fold)
    if style == "torch-expand":
        args = {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in args.items()}
    args[param.name] = view
    assert_refused(*first_phase(op, args), param.name, "overlap")


def _folds(view) -> bool:
    from opgen.tensorarg import overlaps_itself
    return overlaps_itself(view.shape, view.strides, view.itemsize)


@EDGE
@given(op=st.sampled_from(OPS), data=st.data())
def test_an_input_with_zero_strides_stays_valid(op, data):
    """Inputs are only read: a broadcast view (one element repeated) runs like a copy."""
    args = fresh_args(op)
    names = [p.name for p in op.api.tensors(INPUT) if isinstance(args[p.name], np.ndarray) and args[p.name].size]
    name = data.draw(st.sampled_from(names))
    args[name] = np.broadcast_to(args[name].reshape(-1)[:1].reshape((1,) * args[name].ndim), args[name].shape)
    status, size, executor, message = first_phase(op, args)
    assert status == 0, message
    assert second_phase(op, acl.aclrtMalloc(size)[1] if size else None, size, executor)[0] == 0


# ---- tensors changed between the phases ---------------------------------------------------

def _resized(t):
    t.resize_(1)


def _grown(t):
    t.resize_(*(2 * d for d in t.shape))


def _repointed(t):
    t.set_(torch.zeros(2, dtype=t.dtype))


def _other_dtype(t):
    t.data = torch.zeros(t.shape, dtype=torch.float16)


def _storage_freed(t):
    t.untyped_storage().resize_(0)


CHANGES = {"resize_": _resized, "grown": _grown, "set_": _repointed, "dtype": _other_dtype,
           "storage freed": _storage_freed}
RMS = get_op("rms_norm_grad")


def _torch_call(layout: str) -> dict:
    """RmsNormGrad (6, 40) on torch tensors: contiguous (handed to the kernel in place) or
    every tensor strided (staged through the workspace)."""
    args, _ = base_args(RMS, RMSProblem((6, 40), 1), RMS.combo("f32-f32"), np.random.default_rng(1))
    targs = {}
    for name, a in args.items():
        t = torch.from_numpy(a).clone()   # torch's own allocation: its storage can be resized
        if layout == "strided":
            room = torch.zeros(a.shape[:-1] + (2 * a.shape[-1],))
            room[..., ::2] = t
            t = room[..., ::2]
        targs[name] = t
    return targs


@EDGE
@given(layout=st.sampled_from(["contiguous", "strided"]), name=st.sampled_from([p.name for p in RMS.api.tensors()]),
       change=st.sampled_from(sorted(CHANGES)))
def test_a_torch_tensor_changed_between_the_phases_is_invalid(layout, name, change):
    """Whatever changed (shape, dtype, storage, freed memory) and however the plan placed
    the tensor, phase two says 161002 naming it, and writes no output (3 of 9 such calls
    were 361001: the staged path met numpy's reshape error, a freed storage the kernel's
    null pointer)."""
    targs = _torch_call(layout)
    status, size, executor, message = first_phase(RMS, targs)
    assert status == 0, message
    CHANGES[change](targs[name])
    before = {k: targs[k].clone() for k in ("dxOut", "dgammaOut") if k != name}
    status, message = second_phase(RMS, acl.aclrtMalloc(size)[1] if size else None, size, executor)
    assert status == INVALID, message
    assert f"{name} was changed" in message, message
    for other, old in before.items():
        assert torch.equal(targs[other], old), f"{other} was written"


# ---- sizes past any memory ------------------------------------------------------------------

@EDGE
@given(op=st.sampled_from(OPS), claimed=st.integers(min_value=2**63, max_value=2**200))
def test_a_workspace_size_past_the_address_space_is_invalid(op, claimed):
    """workspaceSize is uint64 in C, but no buffer reaches 2**63 bytes: 161002 (2**70 ran).
    Such an argument error leaves the executor unused: the right size then runs."""
    status, size, executor, message = first_phase(op, fresh_args(op))
    assert status == 0, message
    workspace = acl.aclrtMalloc(size)[1] if size else None
    status, message = second_phase(op, workspace, claimed, executor)
    assert status == INVALID and "address space" in message, message
    assert second_phase(op, workspace, size, executor)[0] == 0


def _huge_shape(ndim: int, itemsize: int, data) -> tuple:
    """A shape of ``ndim`` dims with fewer than 2**63 elements but more than 2**63 bytes."""
    low = (INT64_MAX // itemsize + 1)
    count = data.draw(st.integers(min_value=low, max_value=INT64_MAX), label="elements")
    shape = [1] * ndim
    shape[data.draw(st.integers(0, ndim - 1), label="axis")] = count
    return tuple(shape)


@EDGE
@given(op=st.sampled_from(OPS), kind=st.sampled_from(["torch", "acl"]), data=st.data())
def test_a_tensor_whose_bytes_overflow_int64_is_invalid_in_phase_one(op, kind, data):
    """torch's expand() and an aclTensor's zero strides describe such a tensor over 4
    bytes; it was 361001 (numpy's "array is too big")."""
    args = fresh_args(op)
    names = [p.name for p in op.api.tensors(INPUT) if isinstance(args[p.name], np.ndarray) and args[p.name].ndim]
    name = data.draw(st.sampled_from(names), label="input")
    shape = _huge_shape(args[name].ndim, 4, data)
    if kind == "torch":
        args[name] = torch.zeros((1,) * len(shape)).expand(shape)
    else:
        _, buffer = acl.aclrtMalloc(4)
        args[name] = acl.aclCreateTensor(shape, acl.ACL_FLOAT, [0] * len(shape), 0, acl.ACL_FORMAT_ND, [1], buffer)
        assert args[name] is not None, acl.aclGetRecentErrMsg()
    assert_refused(*first_phase(op, args), name, "overflow int64")


def test_a_workspace_past_int64_is_invalid_in_phase_one():
    """Two staged inputs of 2**62 bytes each (expanded over one element) and the scratch of
    an output not asked for: the plan's workspace passes 2**63 bytes (it was handed out)."""
    op = get_op("batch_norm_backward")
    args = {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in fresh_args(op).items()}
    shape = (2**18, args["gradWeight"].shape[0], 2**20, 2**20)
    args.update(gradOut=torch.zeros(1).expand(*shape), input=torch.zeros(1).expand(*shape), gradInput=None,
                outputMask=[False, True, True])
    assert_refused(*first_phase(op, args), "workspace", "address space")
