"""A wheel built from the tree holds everything the editable install uses.

CI installs with ``pip install -e``, which reads the source folders directly and so hides
a package or data file missing from the package list (a wheel once had no
``opgen/targets/ascend/`` and none of the emulation headers). This builds the wheel,
compares its files with the tree's, installs it into a private directory and imports the
Ascend target from there, with its emulation headers.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ROOTS = {"opgen": "opgen", "schedules": "opgen/schedules", "targets": "opgen/targets"}
SHIPPED_SUFFIXES = {".py", ".h", ".jsonl", ".md"}


def tree_files() -> set[str]:
    """Every file an install needs, as its path inside the installed ``opgen`` package."""
    files = set()
    for folder, installed in ROOTS.items():
        for path in (REPO / folder).rglob("*"):
            if path.is_file() and path.suffix in SHIPPED_SUFFIXES and "__pycache__" not in path.parts:
                files.add(f"{installed}/{path.relative_to(REPO / folder).as_posix()}")
    return files


def source_copy(destination: Path) -> Path:
    """The files a build reads, copied (setuptools writes build/ and *.egg-info/ beside them)."""
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, destination / name)
    for folder in ROOTS:
        shutil.copytree(REPO / folder, destination / folder, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    return destination


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    source = source_copy(tmp_path_factory.mktemp("source"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(out), str(source)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (path,) = out.glob("opgen-*.whl")
    return path


@pytest.mark.timeout(900)
def test_the_wheel_holds_every_module_and_data_file_of_the_tree(wheel):
    with zipfile.ZipFile(wheel) as archive:
        shipped = {n for n in archive.namelist() if not n.split("/")[0].endswith(".dist-info")}
    needed = tree_files()
    assert any(f.startswith("opgen/targets/ascend/emu/") and f.endswith(".h") for f in needed)
    assert "opgen/schedules/tuned/llvm.jsonl" in needed
    assert not needed - shipped, f"missing from the wheel: {sorted(needed - shipped)}"
    assert not {f for f in shipped if f.endswith(".py")} - needed, "the wheel ships Python files the tree lacks"


@pytest.mark.timeout(900)
def test_a_target_imports_from_an_install_of_the_wheel(wheel, tmp_path):
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site),
                           str(wheel)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    probe = ("import opgen, opgen.schedules, opgen.targets.ascend as ascend\n"
             "from opgen.targets import all_targets\n"
             "from opgen.targets.ascend.build import EMU_DIR\n"
             "from opgen.tune import database\n"
             "print(opgen.__file__); print(EMU_DIR); print(ascend.TARGET.can_build())\n"
             "print(sorted(t.name for t in all_targets())); print(len(database.load_all(database.shipped_paths())))\n")
    env = {**os.environ, "PYTHONPATH": str(site), "OPGEN_TUNE_DB": str(tmp_path / "none.jsonl")}
    ran = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         env=env)
    assert ran.returncode == 0, ran.stderr[-2000:]
    module_file, emu_dir, can_build, names, shipped_records = ran.stdout.splitlines()
    assert module_file.startswith(str(site)) and emu_dir.startswith(str(site))
    assert (Path(emu_dir) / "kernel_operator.h").is_file()
    assert can_build == "True" and "ascend-emu" in names and int(shipped_records) > 0


def test_no_tracked_file_refers_outside_the_repository():
    """A clone has nothing beside it: no file may point at a sibling folder or at the
    machine it was written on (relative ``../<folder>/`` paths that leave the repository, or
    absolute paths under the workspace)."""
    root = Path(__file__).resolve().parents[1]
    tracked = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True)
    if tracked.returncode:
        pytest.skip("not a git checkout")
    outside = ("../" + "shared", "/work" + "/")
    found = []
    for name in tracked.stdout.splitlines():
        try:
            text = (root / name).read_text()
        except (UnicodeDecodeError, OSError):
            continue
        found += [f"{name}:{i}" for i, line in enumerate(text.splitlines(), 1) if any(o in line for o in outside)]
    assert not found, found


def test_every_aclnn_function_has_a_spec_page_naming_its_public_source():
    """Each aclnn function opgen registers (an op spec's ``aclnn_name``) has its digest,
    ``docs/specs/<aclnn name>.md``, and each page there names the public document it follows:
    a ``docs/<aclnn name>...md`` path in hicann/ops-nn (aclnnLayerNorm's document also covers
    aclnnLayerNormWithImplMode), and a line citing hicann/ops-nn with the commit it was read at. A
    page whose title says it is an opgen extension (no CANN function of that name) names no
    document of its own, and still cites the CANN documents its conventions come from."""
    import re

    from opgen.ops import all_ops

    specs = REPO / "docs" / "specs"
    names = sorted(op.aclnn_name for op in all_ops())
    missing = [f"docs/specs/{name}.md" for name in names if not (specs / f"{name}.md").is_file()]
    pinned = re.compile(r"hicann/ops-nn\b.*?\b(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
    unsourced = []
    for page in sorted(specs.glob("*.md")):
        text = page.read_text()
        extension = "an opgen extension" in text.splitlines()[0]    # no CANN document exists to name
        if not extension and not re.search(rf"docs/{re.escape(page.stem)}[^\s`|]*\.md", text):
            unsourced.append(f"{page.name}: never names its document, docs/{page.stem}...md in hicann/ops-nn")
        if not any(pinned.search(line) for line in text.splitlines()):
            unsourced.append(f"{page.name}: no line cites hicann/ops-nn with a commit")
    assert not missing and not unsourced, {"registered aclnn functions without a page": missing,
                                           "pages without their public source": unsourced}
