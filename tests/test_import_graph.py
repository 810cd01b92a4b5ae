"""No import cycles inside opgen, counting imports inside functions (import linting).

Moving an import into a function hides a cycle from Python's loader, not from the design:
the modules still need each other. So every ``import``/``from ... import`` anywhere in a
module counts, as does the parent package a dotted import executes first (``import
opgen.tune.lookup`` runs ``opgen/tune/__init__.py``) and every plugin module a registry
package discovers (``opgen.targets`` imports each target module). The analysis maps the source tree as
it is installed: ``opgen/`` is ``opgen``, ``schedules/`` is ``opgen.schedules``,
``targets/`` is ``opgen.targets``.
"""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LAYOUT = {"opgen": "opgen", "schedules": "opgen.schedules", "targets": "opgen.targets"}


def modules(root: Path, layout: dict) -> dict:
    """Dotted module name -> (file, is a package)."""
    found = {}
    for folder, package in layout.items():
        for path in (root / folder).rglob("*.py"):
            parts = [p for p in path.relative_to(root / folder).with_suffix("").parts if p != "__init__"]
            found[".".join([package, *parts])] = (path, path.name == "__init__.py")
    return found


def _targets_of(node, importer: str, is_package: bool, known: dict) -> list[str]:
    """The modules one import statement executes (named ones, and their parent packages)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = importer if is_package else importer.rsplit(".", 1)[0]
            for _ in range(node.level - 1):
                package = package.rsplit(".", 1)[0]
            base = f"{package}.{base}" if base else package
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    result = []
    for name in names:
        while name and name not in known:
            name = name.rsplit(".", 1)[0] if "." in name else ""
        parent = name.rsplit(".", 1)[0] if "." in name else ""
        while parent.count("."):          # parent packages below the root run first
            if not importer.startswith(parent + ".") and importer != parent:
                result.append(parent)
            parent = parent.rsplit(".", 1)[0]
        if name and name.count("."):      # the root package's __init__ is light and lazy
            result.append(name)
    return [n for n in result if n != importer]


def _discovers(node) -> bool:
    """A registry's ``discover(__name__, __path__, ...)``: the package imports every module
    in its folder (opgen.ops, opgen.targets find their plugins this way)."""
    return (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "discover"
            and [getattr(a, "id", None) for a in node.args[:2]] == ["__name__", "__path__"])


def import_graph(root: Path = REPO, layout: dict = LAYOUT) -> dict:
    """Module -> {imported module: first line}, over every import statement in the file and
    the plugin modules a registry package discovers."""
    known = modules(root, layout)
    graph = {}
    for name, (path, is_package) in known.items():
        edges = graph.setdefault(name, {})
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _targets_of(node, name, is_package, known):
                    edges.setdefault(target, node.lineno)
            elif is_package and _discovers(node):
                for child in known:
                    if child.rsplit(".", 1)[0] == name:
                        edges.setdefault(child, node.lineno)
    return graph


def cycles(graph: dict) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _describe(graph: dict, component: list) -> str:
    inside = set(component)
    return "; ".join(f"{m} -> {', '.join(f'{t} (line {graph[m][t]})' for t in sorted(graph[m]) if t in inside)}"
                     for m in component)


def test_opgen_has_no_import_cycles():
    graph = import_graph()
    assert len(graph) > 50, "the analysis found too few modules: is the layout right?"
    found = cycles(graph)
    assert not found, "import cycles: " + " | ".join(_describe(graph, c) for c in found)


def test_the_analysis_sees_cycles_through_function_level_imports_and_packages(tmp_path):
    """Positive control: a cycle closed by an import inside a function, and one closed
    through a package's __init__, are both found."""
    (tmp_path / "opgen" / "sub").mkdir(parents=True)
    (tmp_path / "opgen" / "__init__.py").write_text("")
    (tmp_path / "opgen" / "a.py").write_text("from opgen import b\n")
    (tmp_path / "opgen" / "b.py").write_text("def f():\n    from opgen.a import thing\n")
    (tmp_path / "opgen" / "sub" / "__init__.py").write_text("from opgen.sub.heavy import x\n")
    (tmp_path / "opgen" / "sub" / "heavy.py").write_text("import opgen.c\n")
    (tmp_path / "opgen" / "sub" / "light.py").write_text("")
    (tmp_path / "opgen" / "c.py").write_text("def g():\n    import opgen.sub.light\n")
    (tmp_path / "opgen" / "plugins").mkdir()
    (tmp_path / "opgen" / "plugins" / "__init__.py").write_text("REGISTRY.discover(__name__, __path__, 'X')\n")
    (tmp_path / "opgen" / "plugins" / "one.py").write_text("def h():\n    from opgen import d\n")
    (tmp_path / "opgen" / "d.py").write_text("from opgen.plugins import REGISTRY\n")
    found = cycles(import_graph(tmp_path, {"opgen": "opgen"}))
    assert ["opgen.a", "opgen.b"] in found
    assert ["opgen.c", "opgen.sub", "opgen.sub.heavy"] in found
    assert ["opgen.d", "opgen.plugins", "opgen.plugins.one"] in found
