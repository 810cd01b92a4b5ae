"""The float64 references against central finite differences of the float64 forwards.

Every kernel is judged by its op's float64 reference (opgen.ops.<op>.reference), so the references themselves are checked here
independently of the closed-form algebra: with L = sum(dy * forward(x, gamma[, beta])),
where the forward recomputes rstd (and mean) from x, the backward's outputs must equal
dL/dx, dL/dgamma (and dL/dbeta) by central differences. In float64 with h = 1e-6 the
difference quotient is good to ~1e-8 absolute for O(1) values, inside rtol = 1e-6 plus
atol = 1e-7 * scale, while a wrong term in a formula changes the result at order one.
"""
from __future__ import annotations

import numpy as np
import pytest

from opgen.ops.group_norm_backward import reference as gn_ref
from opgen.ops.rms_norm_grad import reference as rms_ref

from op_checks import assert_gradient, central_difference


# ---------------------------------------------------------------------------- RmsNorm

RMS_CASES = [  # (x shape, gamma shape)
    ((3, 5), (5,)),
    ((2, 3, 4), (3, 4)),
    ((7,), (7,)),          # 1-D x: n = 0, one row, rstd is a scalar
    ((2, 1, 16), (16,)),   # the seed example's shape
]


def _shape_id(shape) -> str:
    return "[" + ",".join(map(str, shape)) + "]"


@pytest.mark.parametrize(
    "x_shape,gamma_shape", RMS_CASES,
    ids=[f"x{_shape_id(x)}-gamma{_shape_id(g)}" for x, g in RMS_CASES])
def test_rms_norm_grad_reference_matches_finite_differences(x_shape, gamma_shape, rng):
    x = rng.standard_normal(x_shape)
    gamma = rng.uniform(0.5, 1.5, gamma_shape)
    dy = rng.standard_normal(x_shape)
    _, rstd = rms_ref.rms_norm(x, gamma)
    assert rstd.shape == x_shape[: len(x_shape) - len(gamma_shape)]

    dx, dgamma = rms_ref.rms_norm_grad(dy, x, rstd, gamma)

    assert_gradient("dx", dx, central_difference(lambda v: np.sum(dy * rms_ref.rms_norm(v, gamma)[0]), x))
    assert_gradient("dgamma", dgamma,
                    central_difference(lambda v: np.sum(dy * rms_ref.rms_norm(x, v)[0]), gamma))


def test_rms_norm_grad_reference_accepts_flat_rstd():
    """rstd with prod(x.shape[:n]) elements in any shape (the seed passes (2,) for x (2,1,16))."""
    rng = np.random.default_rng(1)
    x, dy, gamma = rng.standard_normal((2, 1, 16)), rng.standard_normal((2, 1, 16)), rng.uniform(0.5, 1.5, 16)
    _, rstd = rms_ref.rms_norm(x, gamma)
    keepdim = rms_ref.rms_norm_grad(dy, x, rstd, gamma)
    flat = rms_ref.rms_norm_grad(dy, x, rstd.reshape(-1), gamma)
    for a, b in zip(keepdim, flat):
        np.testing.assert_array_equal(a, b)


# -------------------------------------------------------------------------- GroupNorm

GROUP_CASES = [  # (N, C, HxW, group)
    (2, 4, 3, 2),
    (1, 6, 5, 3),
    (2, 3, 4, 1),   # the seed example: one group
    (2, 4, 1, 4),   # HxW = 1 and group = C: one element per group, x_hat = 0
]


def _group_id(case) -> str:
    n, c, hw, g = case
    return f"N{n}-C{c}-HxW{hw}-G{g}"


def _group_norm_inputs(case, rng):
    n, c, hw, _ = case
    x = rng.standard_normal((n, c, hw)) * 2.0 + 0.5
    return x, rng.standard_normal((n, c, hw)), rng.uniform(0.5, 1.5, c), rng.standard_normal(c)


@pytest.mark.parametrize("gamma_absent", [False, True], ids=["gamma", "gamma-None"])
@pytest.mark.parametrize("case", GROUP_CASES, ids=[_group_id(c) for c in GROUP_CASES])
def test_group_norm_backward_reference_matches_finite_differences(case, gamma_absent, rng):
    """dx, dgamma, dbeta are the derivatives of the forward; gamma=None means ones."""
    group = case[3]
    x, dy, gamma, beta = _group_norm_inputs(case, rng)
    if gamma_absent:
        gamma = np.ones(case[1])
    _, mean, rstd = gn_ref.group_norm(x, gamma, beta, group)

    dx, dgamma, dbeta = gn_ref.group_norm_backward(dy, x, mean, rstd, None if gamma_absent else gamma, group)

    def loss(x_=x, gamma_=gamma, beta_=beta):
        return np.sum(dy * gn_ref.group_norm(x_, gamma_, beta_, group)[0])

    assert_gradient("dx", dx, central_difference(lambda v: loss(x_=v), x))
    assert_gradient("dgamma", dgamma, central_difference(lambda v: loss(gamma_=v), gamma))
    assert_gradient("dbeta", dbeta, central_difference(lambda v: loss(beta_=v), beta))


def test_group_norm_backward_reference_one_element_groups_give_zero_dx():
    """With one element per group x_hat is identically 0, so y = beta and dL/dx = 0 exactly."""
    rng = np.random.default_rng(2)
    x, dy, gamma, beta = _group_norm_inputs((2, 4, 1, 4), rng)
    _, mean, rstd = gn_ref.group_norm(x, gamma, beta, 4)
    dx, dgamma, dbeta = gn_ref.group_norm_backward(dy, x, mean, rstd, gamma, 4)
    np.testing.assert_array_equal(dx, np.zeros_like(dx))
    np.testing.assert_array_equal(dgamma, np.zeros_like(dgamma))
    np.testing.assert_allclose(dbeta, dy.sum(axis=(0, 2)), rtol=1e-15)


def test_group_norm_reference_agrees_with_torch_native_kernel():
    """The hand-written vendor kernel (aten.native_group_norm_backward) is a second,
    independent reference: it must agree with ours to float64 rounding."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    n, c, hw, group = 3, 6, 5, 3
    x = rng.standard_normal((n, c, hw))
    dy = rng.standard_normal((n, c, hw))
    gamma = rng.uniform(0.5, 1.5, c)
    _, mean, rstd = gn_ref.group_norm(x, gamma, np.zeros(c), group)
    ours = gn_ref.group_norm_backward(dy, x, mean, rstd, gamma, group)
    theirs = torch.ops.aten.native_group_norm_backward(
        torch.from_numpy(dy), torch.from_numpy(x), torch.from_numpy(mean), torch.from_numpy(rstd),
        torch.from_numpy(gamma), n, c, hw, group, [True, True, True])
    for mine, vendor in zip(ours, theirs):
        np.testing.assert_allclose(mine, vendor.numpy(), rtol=1e-12, atol=1e-12)
