"""Every target has a fallback rule: a function no pattern matches still gets a correct
kernel (CPU, GPU), or a clear NOT EMITTED (Ascend, whose emitter prints patterns only).

The toy functions are built the way opgen builds kernels (buffers shared between loop
nests hoisted into parameters, element alignment declared) and run on each target's own
build path, against numpy.
"""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import te

from opgen import kernels, schedules
from opgen.targets import get_target

from toy_ops import row_softmax


def scale_shift():
    """y = 2x + 1: one elementwise nest."""
    n = te.var("n", "int64")
    x = te.placeholder((n,), "float32", name="x")
    y = te.compute((n,), lambda i: x[i] * 2.0 + 1.0, name="toy_scale")
    return te.create_prim_func([x, y]).with_attr("global_symbol", "toy_scale_shift")


def column_center():
    """y[r, c] = x[r, c] - mean_r x[r, c]: a column reduction feeding an elementwise output
    (no row pattern: the reduction runs over the rows)."""
    rows, cols = te.var("rows", "int64"), te.var("cols", "int64")
    x = te.placeholder((rows, cols), "float32", name="x")
    r = te.reduce_axis((0, rows), name="r")
    total = te.compute((cols,), lambda c: te.sum(x[r, c], axis=r), name="toy_colsum")
    y = te.compute((rows, cols), lambda i, c: x[i, c] - total[c] / rows.astype("float32"), name="toy_centered")
    return te.create_prim_func([x, y]).with_attr("global_symbol", "toy_column_center")


def column_sum():
    """s[c] = sum_r x[r, c]: a reduction alone, over an axis that may be empty."""
    rows, cols = te.var("rows", "int64"), te.var("cols", "int64")
    x = te.placeholder((rows, cols), "float32", name="x")
    r = te.reduce_axis((0, rows), name="r")
    s = te.compute((cols,), lambda c: te.sum(x[r, c], axis=r), name="toy_colsum_only")
    return te.create_prim_func([x, s]).with_attr("global_symbol", "toy_column_sum")


def _expected(name: str, x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    if name == "toy_scale_shift":
        return 2 * x64 + 1
    if name == "toy_column_sum":
        return x64.sum(axis=0)
    if name == "toy_column_center":
        return x64 - x64.mean(axis=0, keepdims=True) if x64.shape[0] else x64
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


CASES = {"toy_scale_shift": (scale_shift, [(1,), (7,), (941,), (0,)], "float32"),
         "toy_column_center": (column_center, [(1, 1), (7, 33), (33, 7), (0, 5)], "float32"),
         "toy_column_sum": (column_sum, [(1, 1), (7, 33), (0, 5)], "float32"),
         "test_row_softmax": (row_softmax, [(1, 1), (7, 33), (3, 941)], "float16")}


def _build(func, target):
    """(module, symbol, parameter buffers) through opgen's kernel path."""
    symbol = func.attrs["global_symbol"]
    sch = schedules.schedule(func, target)
    lowered = kernels.declare_element_alignment(kernels.hoist_pass_buffers(sch))
    return target.build(tvm.IRModule({symbol: lowered})), symbol, lowered.params


def _run(module, symbol, params, x: np.ndarray, dtype: str, dev) -> np.ndarray:
    """Run with x, a NaN-filled output and the hoisted scratch sized from x's shape."""
    sizes = {}
    for extent, value in zip(params[0].shape, x.shape):
        if isinstance(extent, tvm.tirx.Var):
            sizes[extent.name] = value
    out_shape = [int(sizes[e.name]) if isinstance(e, tvm.tirx.Var) else int(e) for e in params[1].shape]
    out = np.full(out_shape, np.nan, dtype)
    args = [tvm.runtime.tensor(x, dev), tvm.runtime.tensor(out, dev)]
    for buf in params[2:]:
        shape = [sizes[e.name] if isinstance(e, tvm.tirx.Var) else int(e) for e in buf.shape]
        args.append(tvm.runtime.empty(shape, str(buf.dtype), dev))
    module[symbol](*args)
    return args[1].numpy()


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("target_name", ["llvm", "opencl"])
def test_functions_no_pattern_matches_get_a_correct_kernel(name, target_name, rng):
    target = get_target(target_name)
    if not target.can_run():
        pytest.skip(f"{target_name} cannot run here: {target.missing()}")
    make, shapes, dtype = CASES[name]
    func = make()
    rule = schedules.match(func, target)
    if name == "test_row_softmax":      # a row pass without column sums: the row rules take it
        assert type(rule).__name__ in ("RowPass", "GpuRowReduce"), type(rule).__name__
    else:
        assert type(rule).__name__ in ("Fallback", "GpuFallback"), type(rule).__name__
    module, symbol, params = _build(func, target)
    for shape in shapes:
        x = (rng.standard_normal(shape) * 2).astype(dtype)
        got = _run(module, symbol, params, x, dtype, target.device()).astype(np.float64)
        want = _expected(name, x)
        tolerance = 2e-3 if dtype == "float16" else 1e-5
        assert got.shape == want.shape and np.all(np.abs(got - want) <= tolerance * (1 + np.abs(want))), shape


def test_the_cpu_fallback_parallelizes_and_declares_its_knob():
    llvm = get_target("llvm")
    rule = schedules.match(column_center(), llvm)
    assert [k.name for k in rule.knobs(llvm)] == ["parallel"]
    text = schedules.schedule(column_center(), llvm).mod.script()
    assert text.count("T.parallel") == 2
    serial = schedules.schedule(column_center(), llvm, {"parallel": False}).mod.script()
    assert "T.parallel" not in serial


def test_the_gpu_fallback_compiles_with_nvcc():
    cuda = get_target("cuda")
    if not cuda.can_build():
        pytest.skip(f"cuda cannot build here: {cuda.missing()}")
    module, _, _ = _build(column_center(), cuda)
    reports = cuda.compile_check(module)
    assert reports and all(r.ok for r in reports), [r.error for r in reports]


def test_ascend_says_which_function_has_no_pattern():
    emu = get_target("ascend-emu")
    with pytest.raises(NotImplementedError, match="no Ascend pattern.*toy_column_center"):
        schedules.schedule(column_center(), emu)
