"""Checks every op's tests share: gradients by central differences, kernel comparisons,
and the sign flip the proof's mutation tests apply to one stage (the ``flip_stage`` fixture
in conftest.py)."""
from __future__ import annotations

import numpy as np
from tvm import ir, tirx

H, RTOL, ATOL = 1e-6, 1e-6, 1e-7      # float64 step and tolerances of the reference checks


class BuiltOnDemand(dict):
    """Kernels by key, each built by ``build(key)`` when a test first asks for it: a module
    fixture that built every kernel up front would build the extended tier's too."""

    def __init__(self, build):
        super().__init__()
        self._build = build

    def __missing__(self, key):
        self[key] = self._build(key)
        return self[key]


def central_difference(loss, value: np.ndarray) -> np.ndarray:
    """d loss / d value by central differences, one element at a time."""
    grad = np.zeros_like(value)
    for index in np.ndindex(value.shape):
        plus, minus = value.copy(), value.copy()
        plus[index] += H
        minus[index] -= H
        grad[index] = (loss(plus) - loss(minus)) / (2 * H)
    return grad


def assert_gradient(name: str, analytic, numeric) -> None:
    """``analytic`` equals the finite-difference gradient ``numeric`` (atol scaled by its size)."""
    analytic = np.asarray(analytic, dtype=np.float64)
    assert analytic.shape == numeric.shape, f"{name}: shape {analytic.shape} != {numeric.shape}"
    scale = max(1.0, float(np.max(np.abs(numeric), initial=0.0)))
    np.testing.assert_allclose(analytic, numeric, rtol=RTOL, atol=ATOL * scale, err_msg=name)


def assert_all_pass(comparisons, label: str) -> None:
    """Every opgen.verify comparison passed; else one line per failing output."""
    failed = [c for c in comparisons if not c.passed]
    assert not failed, f"{label}: " + "; ".join(
        f"{c.name} ratio={c.ratio:.3g} max_abs_error={c.max_abs_error:.3g} at {c.worst_index}" for c in failed)


def flip_first_sign(expr):
    """``expr`` with its first Add/Sub (depth first, through casts, products, quotients,
    one-argument math calls and sums) swapped; None when there is none."""
    if isinstance(expr, tirx.Sub):
        return tirx.Add(expr.a, expr.b)
    if isinstance(expr, tirx.Add):
        return tirx.Sub(expr.a, expr.b)
    if isinstance(expr, tirx.Cast):
        inner = flip_first_sign(expr.value)
        return None if inner is None else tirx.Cast(str(expr.ty), inner)
    if isinstance(expr, (tirx.Mul, tirx.Div)):
        for side in ("a", "b"):
            inner = flip_first_sign(getattr(expr, side))
            if inner is not None:
                return type(expr)(inner, expr.b) if side == "a" else type(expr)(expr.a, inner)
        return None
    if isinstance(expr, ir.Call) and len(expr.args) == 1:   # a math call: rsqrt(var + eps)
        inner = flip_first_sign(expr.args[0])
        return None if inner is None else ir.Call(expr.op, [inner], ret_ty=expr.ty)
    if isinstance(expr, tirx.Reduce):
        inner = flip_first_sign(expr.source[0])
        return None if inner is None else tirx.Reduce(
            expr.combiner, [inner], expr.axis, expr.condition, expr.value_index, expr.init)
    return None


def ascend_roles(op, tag: str) -> dict:
    """Stage name -> the ascend.role the ascend-emu schedule gave it (the root's child blocks
    of the op's scheduled kernel)."""
    from tvm import s_tir

    from opgen import kernels
    from opgen.targets import get_target

    mod, symbol = kernels.scheduled_module(op, op.combo(tag), get_target("ascend-emu"))
    sch = s_tir.Schedule(mod[symbol])
    return {b.name_hint: str(b.annotations["ascend.role"])
            for b in map(sch.get, sch.get_child_blocks(sch.get_sblock("root")))}


def assert_kernel_matches_reference(op, tag: str, target, problems, rng, everywhere=None) -> None:
    """op x tag, built for ``target`` through its own build path, against the float64
    reference on every problem. ``everywhere``: the combos checked on every target; the
    others are checked on the default target only (opgen generate verifies every combo on
    every target), which keeps an op with many combos inside the suite's time."""
    import pytest

    from opgen import kernels
    from opgen.targets import default_target
    from opgen.verify import run_and_compare

    if everywhere is not None and tag not in everywhere and target.name != default_target().name:
        pytest.skip("every combo on the default target; opgen generate verifies every combo on every target")
    kernel = kernels.get_kernel(op, tag, target)
    for problem in problems:
        comparisons, _ = run_and_compare(kernel, problem, rng)
        assert_all_pass(comparisons, f"{target.name} {tag} {problem}")
