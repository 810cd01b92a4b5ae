"""``opgen new-op NAME --like OP``: a new op's package, test module and spec page, copied
from an existing op with the names replaced.

    opgen new-op layer_norm_grad_v3 --like layer_norm_backward [--root DIR]

Why: an op is one package (``opgen/ops/<name>/``, discovered on import), its op-local tests
(``tests/test_op_<name>.py``) and its specification digest (``docs/specs/aclnn<Name>.md``,
which tests/test_packaging.py requires of every registered aclnn function). Starting from
the closest existing op gives a package that imports, registers and builds from the first
minute; what is still the other op's is said at the top of every copied module's
docstring, so nothing copied passes for the new op's own.

What is written, under ``--root`` (default: the checkout that holds this opgen):
- ``opgen/ops/NAME/``: OP's package but its optional torch_module.py and cann_tiling.py
  (``NOT_COPIED`` says why), OP's snake name replaced by NAME and its
  aclnn CamelCase (``RmsNorm`` of aclnnRmsNorm) by NAME's (``rms_norm_v2`` -> ``RmsNormV2``);
  not where a longer op's name begins there (``rms_norm_grad`` stays) nor in torch's
  namespaces (``F.rms_norm``, ``torch.ops.aten._fused_rms_norm``, ``nn.LayerNorm``);
- ``tests/test_op_NAME.py``: OP's op-local test module renamed the same way, or, for an op
  whose tests live in the generic suites only, a module checking the kernel against the
  reference on every target and the sympy proof;
- ``docs/specs/aclnn<Name>.md``: the headings every spec page has, each saying what goes
  there (the status-code research is its section 8), and the ops-nn document it is to
  follow; the commit it was read at is left for the author to fill in, so
  tests/test_packaging.py fails until the page cites its source.

Refused with one line on stderr and exit status 2: no ``--like``, an unknown OP, a NAME
that is no lowercase identifier, a NAME already registered, any of the three paths already
there, or no ``--root`` when opgen runs from an installed wheel instead of a checkout.
"""
from __future__ import annotations

import importlib
import keyword
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

COMMAND = "new-op"
HELP = "a new op's package, test module and spec page, copied from an existing op (--like) with names replaced"

# What each copied module of an op package still holds of the op it was copied from, and
# what the new op's author changes there (docs/architecture.md, "Adding an op").
TO_CHANGE = {
    "__init__.py": "the math in this docstring (stage names as in kernel.py), CANN's OpDef (``CANN``: its "
                   "inputs, outputs, attributes and source file) and SPEC's sample problems and flops_per_element",
    "kernel.py": "the TE ``compute(combo)`` (stages named <name>_<stage>), the dtype combos per product, the "
                 "``Problem`` (its fields are the aclnn attributes, its spelling every tool's --shape), the "
                 "random inputs, kernel shapes and output shapes",
    "api.py": "the ApiSpec, from the aclnn document: parameters in its order, each error line a Rule with "
              "example violations and the status a real call returns (docs/specs/aclnn<Name>.md section 8), "
              "and the Pythonic description",
    "reference.py": "the float64 numpy reference (the tests check it against finite differences)",
    "model.py": "the sympy forward model ``opgen prove --op <name>`` proves the TE against, and the "
                "document's printed formulas",
    "peers.py": "the peers opgen compare and bench set the op against, and their shapes",
}
# Optional parts that are not copied: a copy would be wrong for the new op without failing.
# torch.nn modules are exported into opgen.torch under their own names (the copy's LayerNorm
# would replace LayerNormBackward's); CANN's tiling is the other op's transcription.
NOT_COPIED = {
    "torch_module.py": "torch.nn modules: opgen.torch exports them by name, so a copy would replace {like}'s",
    "cann_tiling.py": "CANN's tiling of {like}: transcribe {name}'s *_tiling.cpp (opgen tiling shows opgen's "
                      "plan alone without it)",
}
TEST_TO_CHANGE = ("the shapes, edge cases, literal aclnn calls and status codes of the op it was copied from: "
                  "this op's come from docs/specs/aclnn<Name>.md")

# A spec page's sections (docs/specs/*.md): heading, and what the section holds.
SPEC_SECTIONS = (
    ("1. Products", "which products the document lists the op on, and which opgen offers it on"),
    ("2. Math", "the document's formulas, stage by stage, and what opgen's TE computes"),
    ("3. Prototype and the two-phase call", "the GetWorkspaceSize / run pair, parameters in the document's order"),
    ("4. Parameters", "each parameter: role, dtypes, ranks, formats, optional or not"),
    ("5. Dtypes per product", "the dtype combinations each product accepts"),
    ("6. Shape rules", "the shape and value checks, in the order the op_api runs them, each with its status"),
    ("7. Attributes", "each attribute, its default and its legal values"),
    ("8. Status codes", "the status-code research: the document's error table translated line by line, what "
                        "a real call returns for each (op_api and tiling sources, with lines), and checks the "
                        "document does not list; each becomes a Rule in api.py and a test in "
                        "tests/test_op_<name>.py"),
    ("9. Constraints", "the document's constraints (约束说明), translated"),
    ("10. The C example", "the document's example program and the values it prints"),
    ("11. What opgen does, and where it differs", "where opgen departs from the document or the sources, and "
                                                  "why (docs/validation-vs-cann.md keeps the per-op differences)"),
    ("12. Peers", "what opgen compare and bench set the op against"),
)

FOREIGN = ("F.", "functional.", "torch.", "nn.", "transformers.")   # names that are torch's, not opgen's
NAME_PATTERN = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)*")


@dataclass(frozen=True)
class Plan:
    """What ``new-op`` writes: the source package and test module, and the three targets."""

    name: str
    like: object           # the OpSpec copied
    root: Path
    package_from: Path
    tests_from: Path | None

    @property
    def camel(self) -> str:
        return camel(self.name)

    @property
    def package_to(self) -> Path:
        return self.root / "opgen" / "ops" / self.name

    @property
    def tests_to(self) -> Path:
        return self.root / "tests" / f"test_op_{self.name}.py"

    @property
    def spec_page(self) -> Path:
        return self.root / "docs" / "specs" / f"aclnn{self.camel}.md"


def camel(name: str) -> str:
    """rms_norm_v2 -> RmsNormV2: the aclnn spelling of a snake-case op name."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def checkout_root() -> Path:
    """The folder that holds this opgen package (a checkout, for an editable install)."""
    return Path(__file__).resolve().parents[1]


def default_root() -> Path | str:
    """Where ``new-op`` writes without ``--root``: the checkout this opgen runs from, or the
    one-line complaint when it runs from an installed wheel (its folder is site-packages,
    where an op's tests and spec page do not belong)."""
    root = checkout_root()
    if not (root / "setup.py").is_file() or not (root / "tests").is_dir():
        return f"opgen runs from {root}, which is no opgen checkout: give --root, the checkout to write into"
    return root


def _foreign(head: str, others: tuple[str, ...]) -> bool:
    """Whether the dotted name a match continues is torch's (F.layer_norm, nn.LayerNorm) or
    another op's (opgen.ops.rms_norm_grad.reference.rms_norm)."""
    if head.startswith(FOREIGN) and "opgen" not in head:
        return True
    return any(f"ops.{other}." in head for other in others)


def imported_from_others(text: str, like: str) -> set[str]:
    """Names ``text`` imports from another op's package (RmsNorm's reference imports
    ``rms_norm`` from rms_norm_grad's): they keep their names wherever they occur."""
    names = set()
    for match in re.finditer(r"from opgen\.ops\.(\w+)[\w.]* import (\([^)]*\)|[^\n]*)", text):
        if match.group(1) != like:
            imported = re.sub(r"#[^\n]*", "", match.group(2)).strip("()")
            names.update(n.split(" as ")[0].strip() for n in imported.split(","))
    return names


def replace_name(text: str, old: str, new: str, keep: tuple[str, ...] = (), others: tuple[str, ...] = (),
                 kept_words: frozenset = frozenset()) -> str:
    """``old`` -> ``new`` where it starts a name (``rms_norm_y``, ``opgen.ops.rms_norm``) or
    follows ``aclnn`` or ``test_``/``test_op_`` (``aclnnRmsNorm``, ``test_op_rms_norm``);
    not where one of ``keep`` (longer names of other ops) begins, nor inside another word
    (``_fused_rms_norm``, ``rms_normal``), nor in torch's namespaces or another op's
    (``others``: op names), nor in the identifiers ``kept_words``."""
    longer = tuple(k for k in keep if k.startswith(old) and k != old)
    tail = "[a-z0-9]" if old[:1].islower() else "[a-z]"
    pieces, last = [], 0
    for match in re.finditer(re.escape(old), text):
        start, end = match.span()
        head = re.search(r"[\w.]*$", text[:start]).group(0)
        word = re.search(r"\w*$", text[:start]).group(0) + old + re.match(r"\w*", text[end:]).group(0)
        follows = re.search(r"\w*$", head).group(0)
        inside_a_word = follows not in ("", "aclnn", "test_", "test_op_")
        if (inside_a_word or re.match(tail, text[end:end + 1]) or _foreign(head, others) or word in kept_words
                or any(text.startswith(k, start) for k in longer)):
            continue
        pieces += [text[last:start], new]
        last = end
    return "".join(pieces) + text[last:]


def renamer(plan: Plan):
    """The text edit every copied file gets: OP's snake name and aclnn CamelCase replaced."""
    from opgen.ops import all_ops

    others = tuple(op.name for op in all_ops() if op.name != plan.like.name)
    keep = others + tuple(op.aclnn_name[len("aclnn"):] for op in all_ops() if op.name != plan.like.name)
    pairs = ((plan.like.name, plan.name), (plan.like.aclnn_name[len("aclnn"):], plan.camel))

    def rename(text: str) -> str:
        kept_words = frozenset(imported_from_others(text, plan.like.name))
        for old, new in pairs:
            text = replace_name(text, old, new, keep, others, kept_words)
        return text
    return rename


def with_note(source: str, note: str) -> str:
    """``source`` with ``note`` opening its module docstring (a docstring made if none)."""
    note = textwrap.fill(note, width=96, break_on_hyphens=False)
    match = re.match(r'(\s*(?:#[^\n]*\n\s*)*)("""|\'\'\')', source)
    if match is None:
        return f'"""{note}\n"""\n{source}'
    at = match.end()
    return f"{source[:at]}{note}\n\n{source[at:]}"


def scaffold_note(plan: Plan, what: str) -> str:
    """The line opening a copied module: where it came from and what in it is still OP's."""
    what = what.replace("<name>", plan.name).replace("<Name>", plan.camel)
    return (f"SCAFFOLD (opgen new-op {plan.name} --like {plan.like.name}): copied from {plan.like.name}; "
            f"still {plan.like.name}'s until changed: {what}.")


def write_package(plan: Plan, rename) -> list[Path]:
    written = []
    for source in sorted(plan.package_from.iterdir()):
        if (source.name.startswith(".") or source.name == "__pycache__" or not source.is_file()
                or source.name in NOT_COPIED):
            continue
        text = rename(source.read_text())
        if source.suffix == ".py":
            text = with_note(text, scaffold_note(plan, TO_CHANGE.get(source.name, f"whatever is {plan.like.name}'s")))
        target = plan.package_to / source.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        written.append(target)
    return written


def test_module_template(plan: Plan) -> str:
    """For an op whose tests are the generic suites' only: the two checks every op-local
    module starts with."""
    return f'''"""aclnn{plan.camel} (opgen.ops.{plan.name}) against independent truths:

* the kernel, built through opgen.kernels on every target that runs here, against the
  float64 reference over every dtype combo and the op's sample problems;
* the sympy proof of its TE.
"""
from __future__ import annotations

import pytest

from opgen import derive
from opgen.ops import get_op

from op_checks import assert_kernel_matches_reference

OP = get_op("{plan.name}")


@pytest.mark.parametrize("tag", [c.tag for c in OP.combos])
def test_kernel_matches_the_float64_reference(target, tag, rng):
    assert_kernel_matches_reference(OP, tag, target, OP.problems, rng)


def test_proof_of_the_float32_kernel_holds():
    report = derive.prove(OP.name)
    assert report.ok, report.summary()
'''


def write_tests(plan: Plan, rename) -> Path:
    text = rename(plan.tests_from.read_text()) if plan.tests_from else test_module_template(plan)
    what = TEST_TO_CHANGE
    if plan.tests_from and (plan.package_from / "torch_module.py").is_file():
        what += (f"; its tests of {plan.like.name}'s torch.nn modules (opgen.torch), which were not copied, "
                 f"still run {plan.like.name}'s ops and fail until <name> has modules of its own or they go")
    plan.tests_to.parent.mkdir(parents=True, exist_ok=True)
    plan.tests_to.write_text(with_note(text, scaffold_note(plan, what)))
    return plan.tests_to


def spec_page_stub(plan: Plan) -> str:
    document = f"norm/{plan.name}/docs/aclnn{plan.camel}.md"
    intro = (f"What CANN's public document for `aclnn{plan.camel}` says, in English and in summary, what its "
             f"public sources add, and what opgen does with each point. The page follows the document "
             f"`{document}` of **hicann/ops-nn at commit `COMMIT`** (fill in the commit read, and the "
             f"document's path where ops-nn keeps it elsewhere).")
    note = (f"SCAFFOLD (opgen new-op {plan.name} --like {plan.like.name}): every section below is still to "
            f"be written; opgen/ops/{plan.name}/ is {plan.like.name}'s copy until then.")
    lines = [f"# aclnn{plan.camel}: specification digest", "",
             textwrap.fill(intro, width=100, break_on_hyphens=False), "",
             textwrap.fill(note, width=100, break_on_hyphens=False), "",
             "**Sources** (line numbers are at these commits):", "",
             "| short name | repository @ commit | path |", "|---|---|---|",
             f"| doc | hicann/ops-nn @ COMMIT | `{document}` |", ""]
    for heading, holds in SPEC_SECTIONS:
        lines += [f"## {heading}", "", f"*To write: {holds.replace('<name>', plan.name)}.*", ""]
    return "\n".join(lines)


def write_spec_page(plan: Plan) -> Path:
    plan.spec_page.parent.mkdir(parents=True, exist_ok=True)
    plan.spec_page.write_text(spec_page_stub(plan))
    return plan.spec_page


def make_plan(name: str, like_name: str, root: Path) -> Plan | str:
    """The plan, or the one-line complaint (unknown OP, bad or taken NAME, a path there)."""
    from opgen.ops import all_ops, get_op, unknown_op

    complaint = unknown_op([like_name])
    if complaint:
        return complaint
    if not NAME_PATTERN.fullmatch(name) or keyword.iskeyword(name):
        return f"{name!r} is no op name: lowercase words joined by '_' (e.g. layer_norm_grad_v3)"
    if name in {op.name for op in all_ops()}:
        return f"op {name!r} exists (opgen/ops/{name}/): pick another name"
    like = get_op(like_name)
    package_from = Path(importlib.import_module(like.package).__file__).parent
    tests_from = checkout_root() / "tests" / f"test_op_{like.name}.py"
    plan = Plan(name, like, root, package_from, tests_from if tests_from.is_file() else None)
    taken = [path for path in (plan.package_to, plan.tests_to, plan.spec_page) if path.exists()]
    if taken:
        return f"{taken[0]} exists: pick another name, or remove it"
    return plan


def add_arguments(parser) -> None:
    parser.add_argument("name", help="the new op's name, snake_case (its aclnn name is aclnn + CamelCase)")
    # Required, but checked in main: a missing --like is one line, not argparse's usage.
    parser.add_argument("--like", help="the registered op to copy (required)")
    parser.add_argument("--root", default=None, help="the checkout to write into (default: the one holding opgen)")


def request(args) -> Plan | str:
    """The plan of ``opgen new-op``'s arguments, or the one-line complaint."""
    if not args.like:
        from opgen.ops import all_ops

        return (f"give --like OP, the registered op to copy; registered ops: "
                f"{', '.join(op.name for op in all_ops())}")
    root = Path(args.root) if args.root else default_root()
    return root if isinstance(root, str) else make_plan(args.name, args.like, root)


def main(args) -> int:
    plan = request(args)
    if isinstance(plan, str):
        print(f"opgen {COMMAND}: {plan}", file=sys.stderr)
        return 2
    rename = renamer(plan)
    written = write_package(plan, rename) + [write_tests(plan, rename), write_spec_page(plan)]
    for path in written:
        print(f"wrote {path}")
    for part, why in NOT_COPIED.items():
        if (plan.package_from / part).is_file():
            print(f"not copied: {part} ({why.format(like=plan.like.name, name=plan.name)})")
    print(f"next: each file's SCAFFOLD note says what is still {plan.like.name}'s; "
          f"opgen prove --op {plan.name}; python -m pytest -q {plan.tests_to}")
    return 0
