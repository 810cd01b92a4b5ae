"""The tier machinery itself (tests/tiers.py, tests/conftest.py): what the default tier keeps of
a matrix off the default target. A mistake here drops a pattern or a cast from the default
tier without any test failing, so it is checked on the registry, not assumed."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from opgen.ops import all_ops, get_op
from opgen.targets import default_target

from conftest import off_the_default_target_and_not_kept
from tiers import FULL, dtype_set, kept_on, kernels_kept_on, pattern_of


@pytest.mark.parametrize("target", ["opencl", "ascend-emu"])
def test_every_pattern_and_dtype_mix_keeps_a_kernel(target):
    kept = kernels_kept_on(target)
    combos = {(op.name, c.tag): (op, c) for op in all_ops() for c in op.combos}
    assert kept <= set(combos)
    assert {pattern_of(op, target) for op in all_ops()} == {pattern_of(combos[k][0], target) for k in kept}
    assert {dtype_set(c) for _, c in combos.values()} == {dtype_set(combos[k][1]) for k in kept}
    assert len(kept) < len(combos) / 4        # representatives, not the matrix


def _item(op_name, target, tag):
    module = SimpleNamespace(OP=get_op(op_name)) if op_name else SimpleNamespace()
    return SimpleNamespace(callspec=SimpleNamespace(params={"target": target, "tag": tag}), module=module)


def test_the_generic_target_cases_off_the_default_target_keep_the_covering_kernels():
    (kept_op, kept_tag), = [k for k in kernels_kept_on("opencl") if k[0] == "group_norm"]
    other_tag = next(c.tag for c in get_op("group_norm").combos if c.tag != kept_tag)
    assert not off_the_default_target_and_not_kept(_item("group_norm", "opencl", kept_tag))
    assert off_the_default_target_and_not_kept(_item("group_norm", "opencl", other_tag))
    assert not off_the_default_target_and_not_kept(_item("group_norm", default_target().name, other_tag))
    assert not off_the_default_target_and_not_kept(_item(None, "opencl", other_tag))     # no OP: left alone


def test_kept_on_marks_the_others_full():
    op = get_op("layer_norm_backward")
    params = kept_on(op, "opencl", lambda combo: combo.tag)
    kept = {p.values[0] for p in params if FULL not in p.marks}
    assert kept == {tag for name, tag in kernels_kept_on("opencl") if name == op.name}
    assert len(params) == len(op.combos)
