"""The ``--shape`` spelling of problems normalized over trailing axes
(opgen.ops.spec.TrailingAxesProblem), on toy Problems with each kind of attribute: none, an
int, a bool, a float without a default. RmsNorm's, LayerNorm's and DeepNorm's float
attribute with a default is tested in their own test modules."""
from __future__ import annotations

import pytest

from toy_ops import BoolAttributeProblem, IntAttributeProblem, RequiredAttributeProblem, RowsProblem


@pytest.mark.parametrize("problem, label", [
    (RowsProblem((4096, 4096)), "4096x4096"), (RowsProblem((4, 8, 64), 2), "4x8x64,2"),
    (IntAttributeProblem((8, 16)), "8x16"), (IntAttributeProblem((8, 16), 1, 3), "8x16,1,3"),
    (BoolAttributeProblem((8, 16), 2), "8x16,2"), (BoolAttributeProblem((8, 16), 1, False), "8x16,1,0"),
    (RequiredAttributeProblem((8, 16), 1, 0.5), "8x16,1,0.5")])
def test_label_is_the_spelling_parse_reads_back(problem, label):
    assert problem.label() == label
    assert type(problem).parse(label) == problem


def test_an_attribute_is_read_as_its_annotated_type():
    groups = IntAttributeProblem.parse("4x8x64,2,3").groups
    assert groups == 3 and type(groups) is int
    assert [BoolAttributeProblem.parse(f"8x16,1,{text}").training for text in ("false", "0", "True", "1")] == [
        False, False, True, True]
    assert RowsProblem.parse("(4x8x64,2)").rows == 4 and str(RowsProblem((4, 8))) == "x[4, 8] gamma_ndim=1"


@pytest.mark.parametrize("problem_class, text, message", [
    (RowsProblem, "8x16,1,0.5", r"expected X\[,GAMMA_NDIM\], e\.g\. "),
    (IntAttributeProblem, "8x16,1,1.5", "groups an integer"),
    (BoolAttributeProblem, "8x16,1,yes", "training 1/0/true/false"),
    (RequiredAttributeProblem, "8x16", r"expected X,GAMMA_NDIM,ALPHA, e\.g\. 4096x4096,1,1e-05"),
    (RequiredAttributeProblem, "8x16,1", "expected X,GAMMA_NDIM,ALPHA")])
def test_a_wrong_spelling_says_what_is_expected(problem_class, text, message):
    with pytest.raises(ValueError, match=message):
        problem_class.parse(text)
