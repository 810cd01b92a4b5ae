"""Helpers shared by the aclnn tests: valid base calls built from an op's spec, and runs.

A base call is the op's ``random_inputs`` for a problem, laid out in the aclnn parameters
(inputs from the kernel names, attributes from the Problem's fields, a full outputMask,
zeroed outputs shaped like the reference's), so a rule's example violation can be
replayed on it.
"""
from __future__ import annotations

import contextlib

import numpy as np

from opgen import acl, aclnn, config
from opgen.dtypes import is_integer, numpy_dtype
from opgen.verify import compare_outputs


def offering(op) -> str:
    """A product that offers ``op``: Ascend950 where it does (every op but
    aclnnAdaLayerNormBackward, which is Atlas A3/A2 only), else the first that does."""
    return "Ascend950" if "Ascend950" in op.products else next(iter(op.products))


@contextlib.contextmanager
def product(name: str):
    """Run the body with ``name``'s rules, then restore the environment's choice."""
    config.set_product(name)
    try:
        yield
    finally:
        config.reset()


def float32_combo(op):
    """The op's combo whose floating tensors are all float32 (integer ones as they are): the
    one the generic tests call every op with (``f32-f32`` for most, ``f32-f32-f32-i8`` for a
    quantizing op)."""
    return next(c for c in op.combos if all(dt == "float32" or is_integer(dt) for _, dt in c.dtypes))


def base_args(op, problem, combo, rng) -> tuple[dict, dict]:
    """(aclnn arguments, the op's user-shaped input arrays) of a valid call."""
    arrays = op.random_inputs(problem, combo, rng)
    ref = op.reference(problem, arrays)
    args = {}
    for p in op.api.params:
        if p.role == "input":   # an input the kernel never reads (validated_only): random_inputs may
            # give it by its aclnn name; one the combo goes without (DtypeCombo.absent) is null
            args[p.name] = arrays[p.kernel] if p.kernel in arrays else arrays.get(p.name)
        elif p.role == "output":
            args[p.name] = np.zeros(np.shape(ref[p.kernel]), numpy_dtype(combo[p.kernel]))
        elif p.role == "attr":
            args[p.name] = getattr(problem, p.name)
        else:   # every output asked for
            args[p.name] = [True] * sum(1 for q in op.api.params if q.mask_bit is not None)
    return args, arrays


def phase_one(op, args):
    return getattr(aclnn, f"{op.aclnn_name}GetWorkspaceSize")(**args)


def run_both(op, args, workspace_factory=None):
    """Both phases; returns (status of the failing or last phase, message)."""
    status, size, executor = phase_one(op, args)
    if status:
        return status, acl.aclGetRecentErrMsg()
    workspace = None
    if size:
        workspace = workspace_factory(size) if workspace_factory else acl.aclrtMalloc(size)[1]
    status = getattr(aclnn, op.aclnn_name)(workspace, size, executor, None)
    return status, acl.aclGetRecentErrMsg() if status else ""


def outputs_of(op, args) -> dict:
    """Kernel-name -> output array of the args (as given, user-shaped)."""
    return {p.kernel: np.asarray(args[p.name]) for p in op.api.tensors("output") if args[p.name] is not None}


def assert_matches(op, combo, problem, arrays, args, skip=()):
    """Every output in ``args`` matches the float64 reference within the tolerance table."""
    ref = op.reference(problem, arrays)
    outs = {k: v for k, v in outputs_of(op, args).items() if k not in skip}
    outs = {k: np.reshape(v, np.shape(ref[k])) for k, v in outs.items()}
    for c in compare_outputs(op, combo, outs, ref):
        assert c.passed, f"{c.name}: ratio {c.ratio} at {c.worst_index} (max abs err {c.max_abs_error})"
