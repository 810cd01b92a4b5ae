"""Every op on every target that can run here, ascend-emu included, against the float64
reference: the extended tier's op x target matrix.

The default tier checks each op on the default target over its edge shapes (its
``tests/test_op_<name>.py``) and each schedule pattern on every target through
representative kernels; the generic ``target`` fixture leaves out the targets that name
their own suite (ascend-emu, whose g++ builds take seconds per kernel). Without this file a
new op reached ascend-emu, iree-cpu or opencl only through ``opgen generate``. Here every
registered op, with no name written down, runs on every runnable target through that
target's own build path (``kernels.get_kernel``), over the op's sample problems.

Which combos: every combo on the targets whose kernels ``opgen generate`` leaves warm for
the tests (llvm's disk cache, PoCL's kernel cache), and on the slow ones (``SLOW_BUILDS``:
a g++ or IREE compile of seconds per kernel, iree-cpu's never cached on disk) the op's
combos of ``covering``: each op, and each dtype mix it has, once. ``opgen generate``, which CI runs before the tests,
verifies every combo on every target; this matrix is the same judgement in the test
report, where a failure names its op, combo and target.
"""
from __future__ import annotations

import pytest

from opgen import kernels, verify
from opgen.ops import all_ops
from opgen.targets import all_targets, default_target, get_target

from op_checks import assert_all_pass
from tiers import FULL, covering

SLOW_BUILDS = ("ascend-emu", "iree-cpu")
# (op, target) -> what its build must still refuse with (reported NOT EMITTED by opgen
# generate); an entry the target now takes is removed (the SyncBatchNorm gathers' per-rank
# counts on ascend-emu were one until issue 38).
EMIT_GAPS: dict = {
    # the column pattern (sums over the middle axis of (N, C, HW)) has no Ascend rule yet
    ("layer_norm_channels", "ascend-emu"): r"no Ascend pattern .* matches layer_norm_channels_",
    ("layer_norm_channels_backward", "ascend-emu"): r"no Ascend pattern .* matches layer_norm_channels_backward_",
}


def _combos_for(op, target_name: str) -> list:
    if target_name in SLOW_BUILDS:
        return [combo for _, combo in covering([(op, c) for c in op.combos])]
    return list(op.combos)


def _cases() -> list:
    """(op, combo tag, target) for every target but the default one (its matrix is the op
    tests'), all in the extended tier."""
    names = [t.name for t in all_targets() if t.name != default_target().name]
    return [pytest.param(op, combo.tag, name, id=f"{op.name}-{combo.tag}-{name}", marks=FULL)
            for op in all_ops() for name in names for combo in _combos_for(op, name)]


@pytest.mark.parametrize("op,tag,target_name", _cases())
def test_op_matches_reference_on_target(op, tag, target_name, rng):
    target = get_target(target_name)
    if not target.can_run():
        pytest.skip(f"target {target.name} cannot run kernels on this machine ({target.description})")
    if (op.name, target.name) in EMIT_GAPS:
        with pytest.raises(NotImplementedError, match=EMIT_GAPS[op.name, target.name]):
            kernels.get_kernel(op, tag, target)
        return
    kernel = kernels.get_kernel(op, tag, target)
    for problem in op.problems:
        comparisons, _ = verify.run_and_compare(kernel, problem, rng)
        assert_all_pass(comparisons, f"{op.name} {tag} on {target.name}, {problem}")


def test_every_op_and_every_target_is_in_the_matrix():
    """The matrix is built from the registries: an op or target added later joins it, and
    the slow targets still see every op once."""
    ids = {p.id for p in _cases()}
    for op in all_ops():
        for target in all_targets():
            if target.name == default_target().name:
                continue
            assert any(i.startswith(f"{op.name}-") and i.endswith(f"-{target.name}") for i in ids), (op.name, target.name)
