"""``opgen new-op NAME --like OP`` (opgen.scaffold), always into a temporary ``--root``.

The default tier scaffolds one op (RmsNorm, the smallest package) and imports the copy in
this process, under its new name; it is never registered, so the checkout's registry, and
every test that iterates over it, is untouched. The extended tier scaffolds every op, and
builds the copy's kernel and checks it against the copy's float64 reference.
"""
from __future__ import annotations

import contextlib
import importlib
import re
import sys
from pathlib import Path

import pytest

import opgen.ops
from opgen import cli, scaffold
from opgen.ops import all_ops, get_op

from tiers import FULL


@contextlib.contextmanager
def scaffolded_package(root: Path, name: str):
    """The package ``opgen new-op`` wrote under ``root``, imported as ``opgen.ops.<name>``
    and forgotten afterwards (sys.modules and opgen.ops' search path put back)."""
    folder = str(root / "opgen" / "ops")
    opgen.ops.__path__.append(folder)
    try:
        yield importlib.import_module(f"opgen.ops.{name}")
    finally:
        opgen.ops.__path__.remove(folder)
        for module in [m for m in sys.modules if m == f"opgen.ops.{name}" or m.startswith(f"opgen.ops.{name}.")]:
            del sys.modules[module]


def new_op(tmp_path, name: str, like: str) -> int:
    return cli.main(["new-op", name, "--like", like, "--root", str(tmp_path)])


def test_new_op_writes_a_package_that_imports_under_its_new_names(tmp_path, capsys):
    assert new_op(tmp_path, "rms_norm_v2", "rms_norm") == 0
    assert "rms_norm_v2" in capsys.readouterr().out
    package = tmp_path / "opgen" / "ops" / "rms_norm_v2"
    like_files = {p.name for p in (scaffold.checkout_root() / "opgen" / "ops" / "rms_norm").glob("*.py")}
    assert {p.name for p in package.glob("*.py")} == like_files - set(scaffold.NOT_COPIED)
    for module in package.glob("*.py"):
        text = module.read_text()
        assert '"""SCAFFOLD (opgen new-op rms_norm_v2 --like rms_norm)' in text, module.name
        # RmsNorm's own names are gone; rms_norm_grad's, ATen's and torch's stay
        assert not re.search(r"opgen\.ops\.rms_norm\b|\"rms_norm\"|aclnnRmsNorm(?!Grad|V2)", text), module.name
    assert "torch.nn.functional.rms_norm(" in (package / "peers.py").read_text()
    with scaffolded_package(tmp_path, "rms_norm_v2") as copy:
        spec = copy.SPEC
        assert (spec.name, spec.aclnn_name, spec.package, spec.cann.name) == (
            "rms_norm_v2", "aclnnRmsNormV2", "opgen.ops.rms_norm_v2", "RmsNormV2")
        assert spec.doc.startswith("SCAFFOLD") and spec.model.cases == get_op("rms_norm").model.cases
        stages = [t.name for t in spec.compute(spec.combos[0])]
        assert stages[-2:] == ["rms_norm_v2_y", "rms_norm_v2_rstd"], stages
        from opgen import api
        assert list(api.make_function(spec).__code__.co_varnames[:3]) == ["x", "gamma", "epsilon"]
    assert "opgen.ops.rms_norm_v2" not in sys.modules and "rms_norm_v2" not in [op.name for op in all_ops()]

    tests = (tmp_path / "tests" / "test_op_rms_norm_v2.py").read_text()
    assert 'OP = get_op("rms_norm_v2")' in tests and "aclnnRmsNormV2GetWorkspaceSize" in tests
    page = (tmp_path / "docs" / "specs" / "aclnnRmsNormV2.md").read_text()
    assert page.startswith("# aclnnRmsNormV2: specification digest")
    assert re.search(r"docs/aclnnRmsNormV2[^\s`|]*\.md", page)    # what test_packaging asks of every page
    headings = re.findall(r"^## (\d+)\. (.+)$", page, re.MULTILINE)
    assert [int(n) for n, _ in headings] == list(range(1, 13)) and ("8", "Status codes") in headings


def test_an_op_without_op_local_tests_gets_the_template(tmp_path, capsys):
    """RmsNormGrad's tests live in the generic suites only: its copy gets a module checking
    the kernel and the proof, not nothing."""
    assert not (scaffold.checkout_root() / "tests" / "test_op_rms_norm_grad.py").exists()
    assert new_op(tmp_path, "rms_norm_grad_v2", "rms_norm_grad") == 0
    assert "not copied: torch_module.py" in capsys.readouterr().out
    tests = (tmp_path / "tests" / "test_op_rms_norm_grad_v2.py").read_text()
    assert 'get_op("rms_norm_grad_v2")' in tests and "assert_kernel_matches_reference" in tests
    compile(tests, "test_op_rms_norm_grad_v2.py", "exec")


@pytest.mark.parametrize("argv, complaint", [
    (["rms_norm", "--like", "rms_norm_grad"], "op 'rms_norm' exists"),
    (["foo", "--like", "nosuch"], "unknown op 'nosuch'; registered ops: "),
    (["Foo-Bar", "--like", "rms_norm"], "'Foo-Bar' is no op name"),
    (["taken", "--like", "rms_norm"], "tests/test_op_taken.py exists"),
    (["foo"], "give --like OP, the registered op to copy; registered ops: ")], ids=lambda v: str(v)[:24])
def test_new_op_refuses_in_one_line_and_writes_nothing(argv, complaint, tmp_path, capsys):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_op_taken.py").write_text("")
    assert cli.main(["new-op", *argv, "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("opgen new-op: ") and complaint in err and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["test_op_taken.py", "tests"]


def test_new_op_without_root_refuses_an_installed_opgen(tmp_path, capsys, monkeypatch):
    """Installed from a wheel, opgen's folder is site-packages: without --root new-op says
    so in one line instead of writing tests/ and docs/ there."""
    site_packages = tmp_path / "site-packages"
    (site_packages / "opgen").mkdir(parents=True)
    monkeypatch.setattr(scaffold, "__file__", str(site_packages / "opgen" / "scaffold.py"))
    assert cli.main(["new-op", "rms_norm_v2", "--like", "rms_norm"]) == 2
    err = capsys.readouterr().err
    assert err == (f"opgen new-op: opgen runs from {site_packages}, which is no opgen checkout: give --root, "
                   "the checkout to write into\n"), err
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["opgen", "site-packages"]


@FULL
@pytest.mark.parametrize("like", [op.name for op in all_ops()])
def test_every_ops_copy_imports_and_its_kernel_matches_its_reference(like, tmp_path, capsys, rng, monkeypatch):
    """Every op scaffolds; the copy's first combo builds on llvm through opgen.kernels and
    matches the copy's float64 reference on the copy's sample problems (the kernel path
    looks the op up by name: the copy is registered for this test only)."""
    from op_checks import assert_kernel_matches_reference
    from opgen.targets import get_target

    name = f"{like}_copy"
    assert new_op(tmp_path, name, like) == 0, capsys.readouterr().err
    with scaffolded_package(tmp_path, name) as copy:
        spec = copy.SPEC
        assert spec.name == name and all(t.name.startswith(f"{name}_") for t in spec.compute(spec.combos[0])[-1:])
        monkeypatch.setitem(opgen.ops._REGISTRY._items, name, spec)
        assert_kernel_matches_reference(spec, spec.combos[0].tag, get_target("llvm"), spec.problems, rng)
