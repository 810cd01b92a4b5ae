"""The LLVM target's float32 exp (targets/llvm_math.py), built through the target's own build.

A vectorized exp over a float32 array, compared with float64 exp: within EXP_MAX_ULP ulp
over the whole normal range, and exact at the edges (inf above ln(FLT_MAX), 0 below
ln(FLT_MIN), nan for nan). The machine code has no libm call. A positive control checks
that TVM's own lowering, outside the target's build, still calls expf there.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tvm
from tvm import te

from opgen.targets import get_target
from opgen.targets.llvm_math import EXP_MAX_ULP

LLVM = get_target("llvm")
F32 = np.finfo(np.float32)


def vector_exp_module():
    """exp over an (n,) float32 array, vectorized by 8 as opgen's CPU rules vectorize."""
    n = te.var("n", "int64")
    a = te.placeholder((n,), "float32", name="a")
    b = te.compute((n,), lambda i: te.exp(a[i]), name="b")
    sch = tvm.s_tir.Schedule(te.create_prim_func([a, b]).with_attr("global_symbol", "vexp"))
    (i,) = sch.get_loops(sch.get_sblock("b"))
    sch.vectorize(sch.split(i, [None, 8])[1])
    return sch.mod


def run(module, x: np.ndarray) -> np.ndarray:
    dev = tvm.cpu()
    out = tvm.runtime.tensor(np.empty_like(x), dev)
    module["vexp"](tvm.runtime.tensor(x, dev), out)
    return out.numpy()


@pytest.fixture(scope="module")
def built():
    return LLVM.build(vector_exp_module())


def test_exp_is_within_its_ulp_bound_over_the_normal_range(built, rng):
    x = np.concatenate([rng.uniform(-87.3, 88.7, 1 << 20), rng.uniform(-1, 1, 1 << 16),
                        np.linspace(-87.33, 88.72, 4097)]).astype(np.float32)
    got = run(built, x).astype(np.float64)
    want = np.exp(x.astype(np.float64))
    normal = (want >= F32.tiny) & (want <= F32.max)
    ulp = np.abs(got[normal] - want[normal]) / np.spacing(want[normal].astype(np.float32)).astype(np.float64)
    assert ulp.max() <= EXP_MAX_ULP, (ulp.max(), x[normal][ulp.argmax()])


def test_exp_edges_and_special_values(built):
    x = np.array([0.0, -0.0, 88.72, 88.723, 89.0, 1e30, np.inf, -87.33, -87.34, -100.0, -np.inf, np.nan],
                 np.float32)
    got = run(built, x)
    assert got[0] == got[1] == 1.0
    assert np.isfinite(got[2]) and got[2] > 3e38                  # just below ln(FLT_MAX): finite
    assert np.all(np.isposinf(got[3:7]))                          # overflow is inf, as libm's
    assert F32.tiny <= got[7] < 1.2e-38                           # just above ln(FLT_MIN): normal
    assert np.all(got[8:11] == 0.0)                               # below: 0 (no denormals)
    assert np.isnan(got[11])


def test_the_targets_build_calls_no_libm_exp_and_tvms_own_lowering_still_does(built):
    assert "expf" not in built.inspect_source("asm")
    plain = tvm.compile(vector_exp_module(), target=LLVM.tvm_target()).mod     # not the target's build
    assert "expf" in plain.inspect_source("asm")
    libm = dataclasses.replace(LLVM, polynomial_exp=False)                       # the target's switch
    assert "expf" in libm.build(vector_exp_module()).inspect_source("asm")
    assert repr(libm) != repr(LLVM)                                              # never one cache entry
