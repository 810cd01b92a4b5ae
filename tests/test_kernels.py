"""Every op x every dtype combo x shapes x runnable target, against the float64 reference.

Comparisons go through opgen.verify (one tolerance table; a comparison passes when its
ratio <= 1), so these tests and ``opgen generate`` judge kernels by the same rule. Kernels
are cached per (op, combo, target) by opgen.kernels.get_kernel: each combo builds once.
Also here: the tolerance rule itself, special values, input immutability and the cache.
"""
from __future__ import annotations

import threading
import uuid

import ml_dtypes
import numpy as np
import pytest

from opgen import diskcache, kernels
from opgen.dtypes import BFLOAT16, FLOAT16, FLOAT32, numpy_dtype, ulp
from opgen.ops import get_op
from opgen.ops.group_norm_backward import Problem as GroupProblem
from opgen.ops.rms_norm_grad import Problem as RmsProblem
from opgen.verify import TOLERANCES, compare, compare_outputs, run_and_compare
from opgen.ops.group_norm_backward import reference as gn_ref

from conftest import TARGET_NAMES
from op_checks import assert_all_pass
from tiers import FULL, covering

RMS = get_op("rms_norm_grad")
GN = get_op("group_norm_backward")
RANK8 = (2, 3, 1, 2, 1, 3, 2, 5)


def _dims(shape) -> str:
    return "[" + ",".join(map(str, shape)) + "]"


def rms_id(p: RmsProblem) -> str:
    n = len(p.x_shape) - p.gamma_ndim
    text = f"x{_dims(p.x_shape)}"
    return text if p.gamma_ndim == 1 else f"{text}-gamma{_dims(p.x_shape[n:])}"


def gn_id(p: GroupProblem) -> str:
    return f"N{p.N}-C{p.C}-HxW{p.HxW}-G{p.group}"


RMS_PROBLEMS = [
    RmsProblem((1, 16), 1),
    RmsProblem((2, 1, 16), 1),          # the seed example
    RmsProblem((7, 33), 1),
    RmsProblem((4, 941), 1),
    RmsProblem((3, 12290), 1),
    RmsProblem((33,), 1),               # 1-D x: gamma covers all of it (n = 0)
    RmsProblem((3, 4, 5), 2),
    RmsProblem((3, 4, 5), 3),
    *[RmsProblem(RANK8, k) for k in range(1, 9)],
]
RMS_EMPTY = [
    RmsProblem((0, 16), 1),             # rows = 0: dgamma must be zeros
    RmsProblem((2, 0, 3), 1),           # rows = 0 through a zero leading axis
    RmsProblem((3, 0), 1),              # cols = 0: dx and dgamma are empty
    RmsProblem((0,), 1),                # 1-D empty x: one row of no columns
    RmsProblem((4, 0), 2),              # gamma covers an empty x
]
GN_PROBLEMS = [
    GroupProblem(2, 3, 4, 1),           # the seed example
    GroupProblem(2, 5, 7, 1),           # group = 1
    GroupProblem(2, 6, 9, 6),           # group = C
    GroupProblem(3, 8, 1, 4),           # HxW = 1
    GroupProblem(2, 4, 1, 4),           # HxW = 1 and group = C: x_hat = 0
    GroupProblem(1, 6, 33, 3),          # N = 1, ragged HxW
    GroupProblem(2, 4, 941, 2),         # ragged HxW
    GroupProblem(1, 2130, 2, 71),       # many groups
    GroupProblem(2, 6, 33, 3),
    GroupProblem(1, 64, 941, 64),
]
GN_EMPTY = [
    GroupProblem(0, 4, 5, 2),           # N = 0: dgamma, dbeta must be zeros
    GroupProblem(2, 4, 0, 2),           # HxW = 0: dx empty, dgamma, dbeta zeros
]


KERNELS = [(op, combo) for op in (RMS, GN) for combo in op.combos]
DEFAULT_TARGET = TARGET_NAMES[0]


def _default_tier_kernels(target_name: str) -> set:
    """The (op, combo tag) pairs whose cases run in the default tier on ``target_name``: every
    kernel on the default target (llvm: the edge shapes of both seed ops, every combo); on the
    others the kernels ``covering`` keeps (each schedule pattern there, each dtype mix), so a
    second target costs a build per pattern and cast, not per combo (an IREE build is ~4 s).
    The rest run in the extended tier, and ``opgen generate`` builds and checks them all."""
    pairs = KERNELS if target_name == DEFAULT_TARGET else covering(KERNELS, target_name)
    return {(op.name, combo.tag) for op, combo in pairs}


def on_targets(op, cases, ident=None) -> list:
    """Params (target, combo, *case) for every target and every combo of ``op``, the target
    passed to the ``target`` fixture (indirect); tiered by ``_default_tier_kernels``."""
    params = []
    for name in TARGET_NAMES:
        kept = _default_tier_kernels(name)
        for case in cases:
            for combo in op.combos:
                rest = case if isinstance(case, tuple) else (case,)
                label = "-".join([name, combo.tag] + ([ident(case)] if ident else []))
                params.append(pytest.param(name, combo, *rest, id=label,
                                           marks=() if (op.name, combo.tag) in kept else FULL))
    return params


def _cases(op, problems, ident):
    return on_targets(op, problems, ident)


# --------------------------------------------------------------- kernels vs reference

@pytest.mark.parametrize("target,combo,problem", _cases(RMS, RMS_PROBLEMS, rms_id), indirect=["target"])
def test_rms_norm_grad_matches_reference(combo, problem, target, rng):
    kernel = kernels.get_kernel(RMS, combo, target)
    comparisons, _ = run_and_compare(kernel, problem, rng)
    assert [c.name for c in comparisons] == ["dx", "dgamma"]
    assert_all_pass(comparisons, f"{combo.tag} {problem}")


@pytest.mark.parametrize("target,combo,problem", _cases(RMS, RMS_EMPTY, rms_id), indirect=["target"])
def test_rms_norm_grad_empty_tensors(combo, problem, target, rng):
    kernel = kernels.get_kernel(RMS, combo, target)
    comparisons, outputs = run_and_compare(kernel, problem, rng)
    assert_all_pass(comparisons, f"{combo.tag} {problem}")
    # outputs start as nan: an unwritten dgamma would fail here
    np.testing.assert_array_equal(outputs["dgamma"], np.zeros(outputs["dgamma"].shape, np.float32))


@pytest.mark.parametrize("target,combo,problem", _cases(GN, GN_PROBLEMS, gn_id), indirect=["target"])
def test_group_norm_backward_matches_reference(combo, problem, target, rng):
    kernel = kernels.get_kernel(GN, combo, target)
    comparisons, _ = run_and_compare(kernel, problem, rng)
    assert [c.name for c in comparisons] == ["dx", "dgamma", "dbeta"]
    assert_all_pass(comparisons, f"{combo.tag} {problem}")


def _gn_empty_inputs(problem: GroupProblem, combo, rng) -> dict:
    """Inputs of an empty GroupNorm problem, made here so the kernel test does not depend
    on the spec's random_inputs (tested on its own below)."""
    big, stat = (problem.N, problem.C, problem.HxW), (problem.N, problem.group)
    return {
        "dy": np.zeros(big, numpy_dtype(combo["dy"])),
        "x": np.zeros(big, numpy_dtype(combo["x"])),
        "mean": rng.standard_normal(stat).astype(numpy_dtype(combo["mean"])),
        "rstd": rng.uniform(0.5, 2.0, stat).astype(numpy_dtype(combo["rstd"])),
        "gamma": rng.uniform(0.5, 1.5, problem.C).astype(numpy_dtype(combo["gamma"])),
    }


@pytest.mark.parametrize("target,combo,problem", _cases(GN, GN_EMPTY, gn_id), indirect=["target"])
def test_group_norm_backward_empty_tensors(combo, problem, target, rng):
    kernel = kernels.get_kernel(GN, combo, target)
    comparisons, outputs = run_and_compare(kernel, problem, rng, inputs=_gn_empty_inputs(problem, combo, rng))
    assert_all_pass(comparisons, f"{combo.tag} {problem}")
    for name in ("dgamma", "dbeta"):   # outputs start as nan: unwritten ones fail here
        np.testing.assert_array_equal(outputs[name].astype(np.float32), np.zeros(problem.C, np.float32),
                                      err_msg=name)


@pytest.mark.parametrize("problem", GN_EMPTY, ids=gn_id)
def test_group_norm_random_inputs_support_empty_problems(problem, rng):
    arrays = GN.random_inputs(problem, GN.combo("f32-f32"), rng)
    assert arrays["x"].shape == (problem.N, problem.C, problem.HxW)
    assert arrays["mean"].size == arrays["rstd"].size == problem.N * problem.group


@pytest.mark.parametrize("target,combo", on_targets(GN, [()]), indirect=["target"])
def test_group_norm_backward_gamma_none_is_ones(combo, target, rng):
    """CANN's null gamma: the caller passes ones; the reference with gamma=None must agree."""
    problem = GroupProblem(2, 6, 10, 3)
    kernel = kernels.get_kernel(GN, combo, target)
    arrays = GN.random_inputs(problem, combo, rng)
    arrays["gamma"] = np.ones(problem.C, numpy_dtype(combo["gamma"]))
    comparisons, outputs = run_and_compare(kernel, problem, rng, inputs=arrays)
    assert_all_pass(comparisons, combo.tag)
    ref = dict(zip(GN.outputs, gn_ref.group_norm_backward(
        arrays["dy"], arrays["x"], arrays["mean"], arrays["rstd"], None, problem.group)))
    assert_all_pass(compare_outputs(GN, combo, outputs, ref), f"{combo.tag} vs gamma=None")


# ------------------------------------------------------------------- special values

RMS_SPECIALS = [("x", np.inf), ("x", -np.inf), ("x", np.nan), ("dy", np.inf), ("dy", np.nan), ("gamma", np.nan)]
GN_SPECIALS = [("x", np.nan), ("dy", np.nan), ("gamma", np.nan)]


def _special_id(case) -> str:
    tensor, value = case
    return f"{tensor}={value}"


def _inject(arrays: dict, tensor: str, index, value) -> dict:
    arrays = dict(arrays)
    arrays[tensor] = arrays[tensor].copy()
    arrays[tensor][index] = value
    return arrays


@pytest.mark.parametrize("special", RMS_SPECIALS, ids=_special_id)
@pytest.mark.parametrize("target,combo", on_targets(RMS, [()]), indirect=["target"])
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_rms_norm_grad_propagates_inf_and_nan(combo, special, target, rng):
    """The seed: inf in -> inf out, nan in -> nan out, exactly where the reference has them."""
    problem = RmsProblem((4, 37), 1)
    tensor, value = special
    index = (5,) if tensor == "gamma" else (1, 5)
    arrays = _inject(RMS.random_inputs(problem, combo, rng), tensor, index, value)
    ref = RMS.reference(problem, arrays)
    assert not np.all(np.isfinite(ref["dx"][1])), "the injected value must reach the reference"
    if tensor != "gamma":
        assert np.all(np.isfinite(np.delete(ref["dx"], 1, axis=0))), "other rows stay finite"
    comparisons, _ = run_and_compare(kernels.get_kernel(RMS, combo, target), problem, rng, inputs=arrays)
    assert_all_pass(comparisons, f"{combo.tag} {tensor}{list(index)}={value}")


@pytest.mark.parametrize("special", GN_SPECIALS, ids=_special_id)
@pytest.mark.parametrize("target,combo", on_targets(GN, [()]), indirect=["target"])
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_group_norm_backward_propagates_nan(combo, special, target, rng):
    problem = GroupProblem(2, 6, 7, 3)
    tensor, value = special
    index = (4,) if tensor == "gamma" else (1, 4, 3)
    arrays = _inject(GN.random_inputs(problem, combo, rng), tensor, index, value)
    ref = GN.reference(problem, arrays)
    samples = [0, 1] if tensor == "gamma" else [1]     # channel 4 lies in group 2 (channels 4, 5)
    assert np.isnan(ref["dx"][samples, 4:6]).all(), "nan must reach its whole group in the reference"
    assert np.isfinite(ref["dx"][:, :4]).all(), "the other groups stay finite"
    comparisons, _ = run_and_compare(kernels.get_kernel(GN, combo, target), problem, rng, inputs=arrays)
    assert_all_pass(comparisons, f"{combo.tag} {tensor}{list(index)}={value}")


# ---------------------------------------------------------- inputs are never written

def _placed(a: np.ndarray, offset: int) -> np.ndarray:
    """A copy of ``a`` whose data starts ``offset`` bytes past a 64-byte boundary.

    Every offset takes the kernels' zero-copy path (TVM tensors alias the numpy memory at
    any element-aligned address), so a kernel writing an input would show.
    """
    buf = np.empty(a.nbytes + 128, np.uint8)
    start = (-buf.ctypes.data) % 64 + offset
    out = buf[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


OPS_AND_PROBLEMS = [(op, problem, f"{op.name}-{ident(problem)}")
                    for op, problem, ident in ((RMS, RmsProblem((5, 3, 40), 2), rms_id),
                                               (GN, GroupProblem(2, 6, 40, 3), gn_id))]


@pytest.mark.parametrize("offset", [0, 16], ids=["aligned", "unaligned"])
@pytest.mark.parametrize("target,combo,op,problem",
                         [param for op, problem, label in OPS_AND_PROBLEMS
                          for param in on_targets(op, [(op, problem)], lambda case, label=label: label)],
                         indirect=["target"])
def test_kernels_never_modify_inputs(op, combo, problem, offset, target, rng):
    arrays = {name: _placed(a, offset) for name, a in op.random_inputs(problem, combo, rng).items()}
    if offset == 0:
        assert all(a.ctypes.data % 64 == 0 for a in arrays.values())
    before = {name: a.tobytes() for name, a in arrays.items()}
    ref = op.reference(problem, arrays)
    outputs = {name: _placed(np.full(ref[name].shape, np.nan, numpy_dtype(combo[name])), offset)
               for name in op.outputs}
    kernels.get_kernel(op, combo, target)(op.kernel_args(problem, {**arrays, **outputs}))
    for name, a in arrays.items():
        assert a.tobytes() == before[name], f"{combo.tag}: input {name} was modified"
    assert_all_pass(compare_outputs(op, combo, outputs, ref), f"{combo.tag} offset={offset}")


# ---------------------------------------------------------------- the tolerance rule

def _bf16_steps(values: np.ndarray, steps: int) -> np.ndarray:
    """The bfloat16 numbers ``steps`` representable values away from positive ``values``."""
    bits = np.asarray(values).astype(ml_dtypes.bfloat16).view(np.uint16).astype(np.int32)
    return (bits + steps).astype(np.uint16).view(ml_dtypes.bfloat16)


def test_tolerance_rule_passes_correctly_rounded_bf16():
    ref = np.random.default_rng(3).uniform(-100, 100, 1000)
    result = compare("dx", ref.astype(ml_dtypes.bfloat16), ref, BFLOAT16, BFLOAT16)
    assert result.passed, result


@pytest.mark.parametrize("steps", [1, 2], ids=["1ulp", "2ulps"])
def test_tolerance_rule_fails_bf16_ulps_beyond_tolerance(steps):
    """The largest bf16 value inside atol + rtol*|ref| + ulp/2 passes; one or two steps past it fail."""
    rtol, atol = TOLERANCES[BFLOAT16]
    ref = np.random.default_rng(4).uniform(0.1, 100, 200)
    limit = ref + atol + rtol * ref + 0.5 * ulp(ref, BFLOAT16)
    edge = limit.astype(ml_dtypes.bfloat16)
    edge = np.where(edge.astype(np.float64) > limit, _bf16_steps(edge, -1), edge).astype(ml_dtypes.bfloat16)
    assert compare("dx", edge, ref, BFLOAT16, BFLOAT16).passed
    for i in range(0, ref.size, 10):
        out = edge.copy()
        out[i] = _bf16_steps(edge[i], steps)
        result = compare("dx", out, ref, BFLOAT16, BFLOAT16)
        assert not result.passed and result.worst_index == (i,), (i, result)


def test_tolerance_rule_bf16_around_one():
    """At ref = 1 allowed = 1e-3 + 1e-3 + 2^-8 (~0.0059): 1 passes, its neighbour 1 + 2^-7
    fails. At the midpoint ref = 1 + 2^-8 both neighbours are 2^-8 away and pass."""
    one, one_up = np.array([1.0], ml_dtypes.bfloat16), np.array([1 + 2.0 ** -7], ml_dtypes.bfloat16)
    assert compare("dx", one, np.ones(1), BFLOAT16, BFLOAT16).passed
    assert not compare("dx", one_up, np.ones(1), BFLOAT16, BFLOAT16).passed
    midpoint = np.array([1 + 2.0 ** -8])
    assert compare("dx", one, midpoint, BFLOAT16, BFLOAT16).passed
    assert compare("dx", one_up, midpoint, BFLOAT16, BFLOAT16).passed


@pytest.mark.parametrize("got,want", [
    (np.nan, 1.0), (np.inf, 1.0), (1.0, np.nan), (-np.inf, np.inf), (1.0, np.inf),
], ids=["nan-for-finite", "inf-for-finite", "finite-for-nan", "wrong-sign-inf", "finite-for-inf"])
def test_tolerance_rule_fails_special_value_mismatch(got, want):
    ref = np.array([0.5, want, 2.0])
    out = np.array([0.5, got, 2.0], np.float32)
    result = compare("dx", out, ref, FLOAT32, FLOAT32)
    assert not result.passed and result.worst_index == (1,), result


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_tolerance_rule_accepts_matching_special_values():
    ref = np.array([np.nan, np.inf, -np.inf, 1.0])
    assert compare("dx", ref.astype(np.float16), ref, FLOAT16, FLOAT16).passed


def test_tolerance_rule_rejects_shape_mismatch():
    with pytest.raises(ValueError, match="shape"):
        compare("dx", np.zeros((2, 3), np.float32), np.zeros((3, 2)), FLOAT32, FLOAT32)


def test_tolerance_rule_empty_outputs_pass():
    assert compare("dx", np.zeros((0, 3), np.float32), np.zeros((0, 3)), FLOAT32, FLOAT32).passed


# ------------------------------------------------------------------- the kernel cache

def test_get_kernel_returns_the_cached_object(target):
    combo = RMS.combo("f32-f32")
    assert kernels.get_kernel(RMS, combo, target) is kernels.get_kernel("rms_norm_grad", "f32-f32", target.name)


def _check_computes(kernel, rng):
    problem = RmsProblem((3, 20), 1)
    comparisons, _ = run_and_compare(kernel, problem, rng)
    assert_all_pass(comparisons, kernel.symbol)


def test_disk_cache_round_trip_and_corrupt_file_rebuild(target, tmp_path, monkeypatch, rng):
    if not target.library_suffix:
        pytest.skip(f"{target.name} kernels are not exported to the disk cache")
    monkeypatch.setenv("OPGEN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("OPGEN_DISK_CACHE", raising=False)
    combo = RMS.combo("f16-f32")

    first = kernels.build(RMS, combo, target)
    assert not first.from_disk
    files = list((tmp_path / "kernels").iterdir())
    assert len(files) == 1 and files[0].suffix == target.library_suffix, files
    # Corrupt before this process loads the file: a path already dlopen()ed would be
    # served from the loader's table whatever the file now holds.
    files[0].write_bytes(b"not a shared library\n" * 64)
    with pytest.warns(UserWarning, match="is damaged: no intact seal"):
        rebuilt = kernels.build(RMS, combo, target)
    assert not rebuilt.from_disk
    assert files[0].read_bytes()[:4] == b"\x7fELF"
    loaded = kernels.build(RMS, combo, target)
    assert loaded.from_disk and loaded.tir == first.tir
    damaged = files[0].with_name(files[0].name + ".damaged")       # set aside (opgen.diskcache)
    assert sorted((tmp_path / "kernels").iterdir()) == sorted(files + [damaged]), "no stray temp files"
    for kernel in (first, rebuilt, loaded):
        _check_computes(kernel, rng)


def test_disk_cache_off_writes_nothing(target, tmp_path, monkeypatch):
    monkeypatch.setenv("OPGEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("OPGEN_DISK_CACHE", "0")
    kernel = kernels.build(RMS, RMS.combo("f32-f32"), target)
    assert not kernel.from_disk
    assert not (tmp_path / "kernels").exists()


def test_concurrent_get_kernel_builds_once(target, tmp_path, monkeypatch, rng):
    monkeypatch.setenv("OPGEN_CACHE_DIR", str(tmp_path))
    calls = []
    real_build = kernels.build

    def counting_build(*args, **kwargs):
        calls.append(threading.get_ident())
        return real_build(*args, **kwargs)

    monkeypatch.setattr(kernels, "build", counting_build)
    variant = f"concurrency_{uuid.uuid4().hex[:8]}"   # a key no other test has built
    barrier = threading.Barrier(8)
    results, errors = [None] * 8, []

    def worker(i):
        try:
            barrier.wait()
            results[i] = kernels.get_kernel(RMS, "f32-f32", target, variant)
        except Exception as exc:  # surfaced below with the thread's index
            errors.append((i, exc))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert len(calls) == 1, f"built {len(calls)} times"
    assert all(r is results[0] for r in results)
    assert results[0].symbol.endswith(variant)
    _check_computes(results[0], rng)


def test_cache_dir_follows_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("OPGEN_CACHE_DIR", str(tmp_path / "a"))
    assert diskcache.cache_dir() == tmp_path / "a"
    monkeypatch.delenv("OPGEN_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert diskcache.cache_dir() == tmp_path / "xdg" / "opgen"
