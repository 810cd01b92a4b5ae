"""Shared fixtures: the ``target`` parameter and a reproducible per-test random generator.

``target`` is parametrized over every registered target (opgen.targets.all_targets()) and
skips, with the reason, a target whose kernels cannot execute on this machine (cuda without
a GPU). Compile-only checks must not use it: they take ``build_target``, which never skips.
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from opgen.targets import all_targets, default_target, get_target

from tiers import FULL, everything_requested, kernels_kept_on

TARGET_NAMES = [t.name for t in all_targets()]


def _target_or_skip(name: str, usable, why: str):
    spec = get_target(name)
    if not usable(spec):
        pytest.skip(f"target {spec.name} {why} ({spec.description})")
    return spec


@pytest.fixture(params=TARGET_NAMES)
def target(request):
    """A TargetSpec whose kernels can run here; other targets are skipped, not passed. A
    target that names its own suite (``own_suite``: ascend-emu, whose g++ builds take
    seconds per kernel) is skipped here and tested there; every op still runs on it in
    the extended tier (tests/test_every_target.py)."""
    spec = _target_or_skip(request.param, lambda t: t.can_run(), "cannot run kernels on this machine")
    if spec.own_suite:
        pytest.skip(f"target {spec.name} is tested by {spec.own_suite}")
    return spec


@pytest.fixture(params=TARGET_NAMES)
def build_target(request):
    """A TargetSpec that kernels are built for, whether or not they can run here."""
    return _target_or_skip(request.param, lambda t: t.can_build(), "cannot build on this machine")


def seed_for(name: str) -> int:
    """A stable seed derived from a name (a test id): reruns see the same data."""
    return zlib.crc32(name.encode())


def data_id(node) -> str:
    """The node id with any target parameter named as the default target: every target
    of a parametrized test sees the inputs the default target sees, so a failure that
    follows the data (an ill-conditioned sample) shows on every target, not on whichever
    target's id happened to seed it."""
    nodeid = node.nodeid
    params = getattr(getattr(node, "callspec", None), "params", {})
    for fixture in ("target", "build_target"):
        name = params.get(fixture)
        if isinstance(name, str) and "[" in nodeid:
            head, _, tail = nodeid.partition("[")
            nodeid = f"{head}[{tail.replace(name, default_target().name, 1)}"
    return nodeid


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A generator seeded from the test's node id (targets aside, see data_id):
    reproducible, different per test."""
    return np.random.default_rng(seed_for(data_id(request.node)))


@pytest.fixture
def flip_stage(monkeypatch):
    """Make ``te.compute`` flip one sign in the stage named ``stage`` (op_checks.flip_first_sign):
    the mutation the proof must catch. ``flip_stage(stage)`` returns the list of hits."""
    from tvm import te

    from op_checks import flip_first_sign

    original = te.compute

    def apply(stage):
        hits = []

        def compute(shape, fcompute, name="compute", *args, **kwargs):
            if name == stage:
                body = fcompute

                def fcompute(*idx):
                    flipped = flip_first_sign(body(*idx))
                    assert flipped is not None, f"no Add/Sub to flip in {stage}"
                    hits.append(stage)
                    return flipped
            return original(shape, fcompute, name, *args, **kwargs)

        monkeypatch.setattr(te, "compute", compute)
        return hits

    return apply


# A worker holds TVM, torch and the kernels its tests built: up to about 2.4 GiB (measured,
# the default tier on one worker), so workers are also bounded by the memory there is.
WORKER_MEMORY_BYTES = 3 << 30
MAX_WORKERS = 8


def available_memory_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (Linux), else None (no bound from memory)."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (pyproject's addopts): one worker per CPU this process may run on (the
    affinity mask, not the machine's CPU count: a container or taskset may allow fewer),
    at most MAX_WORKERS and what memory holds; 0 (no workers, one process) with one CPU."""
    from opgen.environment import usable_cpus

    workers = min(usable_cpus(), MAX_WORKERS)
    memory = available_memory_bytes()
    if memory is not None:
        workers = min(workers, max(1, memory // WORKER_MEMORY_BYTES))
    return workers if workers > 1 else 0


def pytest_collection_modifyitems(config, items):
    """The default tier leaves out the cases marked ``full`` (tests/tiers.py), unless both
    tiers were asked for; an op module's generic-target cases off the default target are
    marked so first when covering keeps their kernel there for no op (below)."""
    for item in items:
        if off_the_default_target_and_not_kept(item):
            item.add_marker(FULL)
    if everything_requested(config):
        return
    extended = [item for item in items if item.get_closest_marker("full")]
    if extended:
        config.hook.pytest_deselected(items=extended)
        items[:] = [item for item in items if not item.get_closest_marker("full")]


def off_the_default_target_and_not_kept(item) -> bool:
    """A case of an op module's test that takes the generic ``target`` fixture and a combo
    ``tag``, on a target other than the default, whose kernel is not one that ``covering``
    keeps there over every op (tests/tiers.py: kernels_kept_on): the extended tier's. The
    module names its op ``OP``; a test without both parameters is left as it is."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    target, tag, op = params.get("target"), params.get("tag"), getattr(item.module, "OP", None)
    if not (isinstance(target, str) and isinstance(tag, str) and op is not None):
        return False
    return target != default_target().name and (op.name, tag) not in kernels_kept_on(target)
