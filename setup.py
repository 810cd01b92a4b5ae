"""Package discovery for opgen's three top-level folders (metadata: pyproject.toml).

The source tree keeps the user's layout: ``opgen/`` (the core and the op packages),
``schedules/`` and ``targets/``; installed, the outer two are ``opgen.schedules`` and
``opgen.targets`` (README.md, Layout). pyproject.toml cannot discover packages under
three roots mapped into one namespace, so this file does: every directory below the roots
is a package (a folder of headers too), and the data files it holds are package data. A
new op, schedule or target package, or a file of shipped tuning records, needs no edit
here; tests/test_packaging.py builds a wheel and compares it with the tree.
"""
from setuptools import find_namespace_packages, setup

ROOTS = {"opgen": "opgen", "opgen.schedules": "schedules", "opgen.targets": "targets"}
DATA = ["*.h", "*.jsonl", "*.md"]   # AscendC emulation headers, shipped tuning records, their notes


def packages() -> list[str]:
    found = []
    for package, folder in ROOTS.items():
        found.append(package)
        found += [f"{package}.{sub}" for sub in find_namespace_packages(folder, exclude=["*__pycache__*"])]
    return found


setup(packages=packages(), package_dir=ROOTS, package_data={"": DATA})
