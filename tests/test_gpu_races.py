"""The GPU schedules under Oclgrind: data races and invalid accesses caught without a GPU.

The kernels run through the opencl target's own build path on its simulated variant
(``opencl.TARGET.simulated()``): Oclgrind with its data-race detector on, every empty tensor
a NULL pointer, and empty launches made the way TVM's CUDA runtime makes them (a 0 grid
dimension raised to 1). Any race or invalid read/write Oclgrind reports raises
``SimulatorFindings``; results are also checked against the float64 reference (outputs
start as NaN, so an unwritten one fails).

The matrix: every registered op x dtype combo (``all_ops()``: ops added later are in it),
at a small-grid point of its rule's knobs, on small ragged problems and every empty variant
of them; the first combo of each op also at each other knob point that changes the
emitted code (rows per block, block per group, the default thread count) and at the real
defaults. Small shapes keep it near a minute and a half here; a grid of the default 512
blocks costs Oclgrind seconds per call, so the defaults run once per op.

Positive controls: StorageRewrite switched back on (the race schedules/gpu.py documents)
must be reported, and so must the empty-launch bug with the launch guard taken out. The CUDA
target's build config runs here too, on the OpenCL twin (no GPU runs the CUDA kernels).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from opgen import kernels, schedules
from opgen.export import zeroed
from opgen.ops import all_ops, get_op
from opgen.ops.group_norm_backward import Problem as GNProblem
from opgen.targets import get_target
from opgen.targets import opencl as opencl_target
from opgen.targets.gpu_launch import Launch, LaunchPlan
from opgen.verify import run_and_compare
from tiers import covering, tiered

SIM = get_target("opencl").simulated()
CUDA = get_target("cuda")
needs_simulator = pytest.mark.skipif(SIM.missing() is not None, reason=f"no simulator here: {SIM.missing()}")

SMALL_ELEMENTS = 1024      # a problem's largest tensor at most this many elements
RAGGED_ROWS = 37           # leading axis of the stretched problem: ragged against 2, 4, 8, 16 blocks


# ---- the problems: small, stretched (ragged rows) and empty variants -------------------------

def _largest_tensor(op, problem) -> int:
    arrays = op.random_inputs(problem, op.combos[0], np.random.default_rng(0))
    return max(a.size for a in arrays.values())


def _valid(op, problem) -> bool:
    """Whether ``problem`` is one the op can make inputs and a reference for."""
    try:
        with np.errstate(all="ignore"):
            arrays = op.random_inputs(problem, op.combos[0], np.random.default_rng(0))
            op.reference(problem, arrays)
            op.kernel_args(problem, {**arrays})
        return True
    except Exception:   # noqa: BLE001 -- a variant the op does not define (group 0, ...)
        return False


def _stretched(problem):
    """``problem`` with the leading axis of its first tuple field set to RAGGED_ROWS (None
    when it has no tuple field)."""
    for field in dataclasses.fields(problem):
        value = getattr(problem, field.name)
        if isinstance(value, tuple) and value:
            return dataclasses.replace(problem, **{field.name: (RAGGED_ROWS,) + value[1:]})
    return None


def _has_empty_tensor(op, problem) -> bool:
    arrays = op.random_inputs(problem, op.combos[0], np.random.default_rng(0))
    return any(a.size == 0 for a in arrays.values())


def problems_of(op) -> tuple[list, list]:
    """(non-empty, empty) small problems of ``op``: its sample problems up to
    SMALL_ELEMENTS, its smallest one stretched to RAGGED_ROWS rows, and every valid variant
    of the smallest with one size set to 0."""
    small = [p for p in op.problems if _largest_tensor(op, p) <= SMALL_ELEMENTS][:2]
    smallest = min(op.problems, key=lambda p: _largest_tensor(op, p))
    stretched = _stretched(smallest)
    if stretched is not None and _valid(op, stretched):
        small.append(stretched)
    empty = [v for v in zeroed(smallest) if _valid(op, v) and _has_empty_tensor(op, v)]
    return small, list(dict.fromkeys(empty))


# ---- knob points ------------------------------------------------------------------------------

# Points that change the emitted code, named; each applies to a rule that declares the knob
# named first (the others are filled in where declared). None: the rule's own default.
POINTS = {
    "small-grid": ("threads", {"threads": 32, "partials": 16, "column_threads": 32}),
    "rows-per-block": ("rows_per_block", {"rows_per_block": 2, "threads": 64, "column_threads": 32}),
    "block-per-group": ("block_per", {"block_per": "group", "threads": 32, "column_threads": 32}),
    "default-threads": ("threads", {"partials": 16, "column_threads": 32}),
    "defaults": (None, {}),
}


def point_of(op, combo, name: str) -> dict | None:
    """The knobs of point ``name`` for the rule that schedules ``op`` on the GPU targets,
    only those it declares; None when the point does not apply to that rule."""
    rule = kernels.matching_rule(op, combo, SIM)
    declared = {k.name for k in schedules.rule_knobs(rule, SIM)}
    needed, wanted = POINTS[name]
    if needed is not None and needed not in declared:
        return None
    knobs = {k: v for k, v in wanted.items() if k in declared}
    assert schedules.check_knobs(rule, knobs, SIM) is None, (name, knobs)
    return knobs


def _check(op, combo, knobs: dict, problems: list, rng) -> None:
    """Build through the simulated target and run every problem: Oclgrind's findings raise,
    results must match the reference."""
    kernel = kernels.get_kernel(op, combo, SIM, knobs=knobs)
    for problem in problems:
        comparisons, _ = run_and_compare(kernel, problem, rng)
        assert all(c.passed for c in comparisons), (combo.tag, knobs, problem, comparisons)


KERNELS = [(op, combo) for op in all_ops() for combo in op.combos]
FIRST = [(op, op.combos[0]) for op in all_ops()]
EXTRA = [(op, combo, name) for op, combo in FIRST for name in ("rows-per-block", "block-per-group", "default-threads")
         if point_of(op, combo, name) is not None]


@needs_simulator
@pytest.mark.parametrize("op,combo", tiered(KERNELS, covering(KERNELS, "opencl"), [f"{op.name}-{c.tag}" for op, c in KERNELS]))
def test_every_combo_is_race_free_and_in_bounds_under_oclgrind(op, combo, rng):
    small, empty = problems_of(op)
    knobs = point_of(op, combo, "small-grid")
    _check(op, combo, knobs if knobs is not None else {}, small + empty, rng)


@needs_simulator
@pytest.mark.parametrize("op,combo,name", EXTRA, ids=[f"{op.name}-{c.tag}-{n}" for op, c, n in EXTRA])
def test_knob_points_that_change_the_code_under_oclgrind(op, combo, name, rng):
    small, empty = problems_of(op)
    _check(op, combo, point_of(op, combo, name), small + empty, rng)


@needs_simulator
@pytest.mark.parametrize("op,combo", FIRST, ids=[op.name for op, _ in FIRST])
def test_the_default_point_under_oclgrind(op, combo, rng):
    """The knobs every call gets unless tuned: a grid of `partials` blocks, most of them
    idle on a small problem (the costly case for the simulator: 8-16 s for 512 blocks of
    256 work-items, so one problem; the code differs from the small-grid point's only in
    constants, and that point runs the empty problems)."""
    small, _ = problems_of(op)
    _check(op, combo, {}, small[:1], rng)


def test_every_op_has_small_and_empty_problems_in_the_matrix():
    """The matrix cannot lose an op's empty cases silently: each op yields some of both."""
    for op in all_ops():
        small, empty = problems_of(op)
        assert small and empty, (op.name, small, empty)
        assert all(_largest_tensor(op, p) <= 4 * SMALL_ELEMENTS for p in small), op.name


# ---- positive controls -------------------------------------------------------------------------

@needs_simulator
def test_oclgrind_reports_the_storage_rewrite_race(monkeypatch, rng):
    """StorageRewrite back on (the build config schedules/gpu.py turns it off for): the row
    pass's per-row scalar shares the reduction's __local buffer, and Oclgrind says so."""
    monkeypatch.setattr(opencl_target, "BUILD_CONFIG", {})
    op = get_op("rms_norm_grad")
    combo = op.combo("f32-f32")
    kernel = kernels.build(op, combo, SIM, knobs=point_of(op, combo, "small-grid"))
    with pytest.raises(opencl_target.SimulatorFindings, match="data race"):
        run_and_compare(kernel, op.problems[1], rng)


@needs_simulator
def test_the_cuda_targets_build_config_keeps_the_row_pass_race_free(monkeypatch, rng):
    """targets/cuda.py's own BUILD_CONFIG (the object, not a copy) on the OpenCL twin under
    Oclgrind: the GPU targets share the schedule and TVM's TIR passes (StorageRewrite among
    them), so a CUDA config that lets the row pass's per-row scalar share the reduction's
    shared buffer is reported as a race here. Without this test, StorageRewrite switched back
    on in targets/cuda.py passed every GPU test (no device runs the CUDA kernels here)."""
    from opgen.targets import cuda as cuda_target

    monkeypatch.setattr(opencl_target, "BUILD_CONFIG", cuda_target.BUILD_CONFIG)
    op = get_op("rms_norm_grad")
    combo = op.combo("f32-f32")
    kernel = kernels.build(op, combo, SIM, knobs=point_of(op, combo, "small-grid"))
    comparisons, _ = run_and_compare(kernel, op.problems[1], rng)
    assert comparisons and all(c.passed for c in comparisons)


@needs_simulator
def test_an_empty_grid_launched_as_cuda_does_reads_and_writes_out_of_bounds_without_the_guard(monkeypatch, rng):
    """Part of the matrix's purpose: GroupNorm with N = 0 makes kernels whose grid is N*C
    blocks. Launched as TVM's CUDA runtime launches (0 raised to 1) without the host-side
    guard, block 0 reads and writes row 0 of empty tensors; with the guard, nothing runs."""
    op = get_op("group_norm_backward")
    combo = op.combo("f32-f32")
    problem = GNProblem(0, 4, 5, 2)
    guarded = kernels.build(op, combo, SIM)
    comparisons, _ = run_and_compare(guarded, problem, rng)
    assert all(c.passed for c in comparisons)
    monkeypatch.setattr(opencl_target, "guard_empty_launches", lambda mod: mod)
    unguarded = kernels.build(op, combo, SIM)
    with pytest.raises(opencl_target.SimulatorFindings, match=r"Invalid (read|write)"):
        run_and_compare(unguarded, problem, rng)


@needs_simulator
def test_findings_name_each_kind_and_count():
    runtime = opencl_target._runtime(True)
    assert runtime.log is not None and runtime.findings() == []   # nothing left over from other tests
    text = opencl_target.summarize_findings(["Invalid read of size 4 at global memory address 0x10\n\tKernel: k",
                                             "Invalid read of size 4 at global memory address 0x20\n\tKernel: k",
                                             "Read-write data race at local memory address 0x8\n\tKernel: k"])
    assert "3 problem(s)" in text and "Invalid read of size 4 at global memory address 0x... (x2)" in text
    assert "Read-write data race at local memory address 0x... (x1)" in text


# ---- the launcher and the host code's guards ------------------------------------------------

def _module(empty_launch: str):
    """An OpenclModule shell for launch_sizes (no program, no device)."""
    module = object.__new__(opencl_target.OpenclModule)
    module.empty_launch = empty_launch
    return module


def test_launch_sizes_skip_or_raise_empty_dimensions_as_cuda_does():
    plan = LaunchPlan((), (("v0", 0, 0),), ())
    launch = Launch("k", (), ("e['v0']", "1", "1"), ("256", "1", "1"))
    guarded = dataclasses.replace(launch, condition="(0 < e['v0'])")
    empty, full = plan.environment([(0,)]), plan.environment([(3,)])
    skip, cuda = _module(opencl_target.SKIP_EMPTY), _module(opencl_target.CUDA_EMPTY)
    assert skip.launch_sizes(plan, launch, full) == ((768, 1, 1), (256, 1, 1))
    assert skip.launch_sizes(plan, launch, empty) is None
    assert cuda.launch_sizes(plan, launch, empty) == ((256, 1, 1), (256, 1, 1))   # TVM: 0 -> 1
    assert cuda.launch_sizes(plan, guarded, empty) is None                      # the host code skips it
    assert cuda.launch_sizes(plan, guarded, full) == ((768, 1, 1), (256, 1, 1))


def _empty_problems(pairs):
    return [(op, combo, problem) for op, combo in pairs for problem in problems_of(op)[1]]


# Every GPU rule and every cast once in the default tier (covering); every kernel in the extended one.
_REPRESENTATIVES = (tuple(covering(KERNELS, "cuda")),)   # one-tuples: tiered unpacks a tuple into the test's arguments
EMPTY_GRID_KERNELS = tiered([_REPRESENTATIVES, (tuple(KERNELS),)], [_REPRESENTATIVES],
                            ids=["representatives", "every-kernel"])


@pytest.mark.skipif(CUDA.missing() is not None, reason=f"cuda cannot build here: {CUDA.missing()}")
@pytest.mark.parametrize("pairs", EMPTY_GRID_KERNELS)
def test_cuda_host_code_never_launches_an_empty_grid(pairs):
    """What TVM's CUDA runtime would be asked to launch, read from the cuda target's own
    build (its host code after SplitHostDevice): on every empty problem of each kernel, each
    launch is either skipped by its guard or has no 0 dimension. (With a GPU the module is
    TVM's, and tests/test_gpu_cuda.py runs empty problems for real.)"""
    checked = 0
    for op, combo, problem in _empty_problems(pairs):
        kernel = kernels.get_kernel(op, combo, CUDA)
        if not hasattr(kernel.module, "plans"):
            pytest.skip("a GPU is present: the cuda module is TVM's own (see tests/test_gpu_cuda.py)")
        assert kernel.symbol in kernel.module.plans, kernel.module.plan_error
        plan = kernel.module.plans[kernel.symbol]
        arrays = op.random_inputs(problem, combo, np.random.default_rng(0))
        outputs = {name: np.zeros(shape, np.float32) for name, shape in _output_shapes(op, problem, arrays).items()}
        args = op.kernel_args(problem, {**arrays, **outputs})
        names = op.kernel_tensors(combo)   # an optional input's variant goes without it
        shapes = [args[name].shape for name in names]
        shapes += [tuple(s) for s in kernel.scratch_shapes(dict(zip(names, shapes))).values()]
        env = plan.environment(shapes)
        for launch in plan.launches:
            if plan.evaluate(launch.condition, env):
                sizes = [plan.evaluate(e, env) for e in launch.grid + launch.block]
                assert 0 not in sizes, (op.name, combo.tag, problem, launch.kernel, sizes)
            checked += 1
    assert checked > 0


def _output_shapes(op, problem, arrays) -> dict:
    with np.errstate(all="ignore"):
        return {name: value.shape for name, value in op.reference(problem, arrays).items()}


@pytest.mark.parametrize("pairs", EMPTY_GRID_KERNELS)
def test_the_guard_is_in_the_host_code_of_every_gpu_kernel_that_needs_one(pairs):
    """Every launch whose grid or block depends on the shapes is guarded (cuda's build, no
    device needed: TVM emits CUDA host code without one): each GPU rule and cast in the
    default tier, every kernel in the extended one."""
    if CUDA.missing() is not None:
        pytest.skip(f"cuda cannot build here: {CUDA.missing()}")
    for op, combo in pairs:
        kernel = kernels.get_kernel(op, combo, CUDA)
        if not hasattr(kernel.module, "plans"):
            pytest.skip("a GPU is present: the cuda module is TVM's own")
        assert kernel.symbol in kernel.module.plans, kernel.module.plan_error
        for launch in kernel.module.plans[kernel.symbol].launches:
            symbolic = [e for e in launch.grid + launch.block if not e.isdigit()]
            assert not symbolic or launch.condition != "1", (op.name, combo.tag, launch)
