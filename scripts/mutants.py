"""Mutation harness: small source edits the default test tier must catch (issue 34).

    python scripts/mutants.py [--only NAME ...] [--list] [--rev REV] [--tests ARGS] [--keep]

Each mutant is one small edit of one file (``old`` must occur exactly once in it) and the
default-tier tests expected to kill it (pytest node ids, or a file with ``-k EXPR``). For
each mutant the script exports the repository at ``--rev`` (``git archive``, so neither
.git nor opgen-out nor anyone's uncommitted work comes along) into a temporary folder,
applies the edit there, and runs the named tests in that copy against that copy's code
(``-x -q -p no:cacheprovider``; pyproject.toml's addopts apply, so a test outside the
default tier is deselected and reported as ERROR, not as a kill). The verdict is KILLED
when the tests fail (with the first failing test id and one line of its message) and
SURVIVED when they pass. The same tests run once unmutated first, as a control: they must
pass. Exit status 1 if any mutant survives (or errs) or a control fails.

Isolation. The system python has the repository pip-installed in editable mode: a
setuptools finder on sys.meta_path maps opgen.schedules -> <repo>/schedules and
opgen.targets -> <repo>/targets, so pytest run from a copy would import the copy's opgen
but the main tree's schedules and targets. Each run therefore gets PYTHONPATH=<a folder
holding a sitecustomize.py> that drops every ``__editable__`` finder, path hook and path
entry and puts first a finder mapping opgen, opgen.schedules and opgen.targets to the
copy's opgen/, schedules/ and targets/ (site runs sitecustomize after the .pth files, and
subprocesses the tests start inherit PYTHONPATH). Before its tests, every run imports
those packages and a few modules under them in the copy's environment and refuses to go on
unless each __file__ lies in the copy. Every run also gets a fresh OPGEN_CACHE_DIR and
XDG_CACHE_HOME (temporary folders): kernel cache keys need not include the source text,
so a kernel built from unmutated code must never be reused; other OPGEN_* variables of
the caller's environment are dropped.

Cost: the mutants run one at a time (the killing tests build kernels from an empty cache);
see docs/testing.md for the measured time of a whole run.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str            # repo-relative
    old: str             # must occur exactly once in the file
    new: str
    tests: tuple         # pytest arguments: node ids, or a file and "-k", "EXPR"
    what: str            # the edit in a few words (for the table)


MUTANTS = [
    Mutant("backward-sign", "opgen/ops/rms_norm_grad/kernel.py",
           "(rstd[r] * dy_gamma(r, c) - as_float32(x[r, c]) * coef[r])",
           "(rstd[r] * dy_gamma(r, c) + as_float32(x[r, c]) * coef[r])",
           ("tests/test_derive.py::test_proof_of_the_float32_kernel_holds[rms_norm_grad]",),
           "RmsNormGrad dx: `- x*coef` -> `+ x*coef`"),
    Mutant("gpu-barrier", "targets/opencl_source.py",
           "            out.append(pending + _BARRIER)\n",
           "            pass   # the barrier after the thread-0 store, dropped\n",
           ("tests/test_mutant_gaps.py::test_opencl_source_fences_a_thread0_store_after_a_reduction",),
           "OpenCL: the barrier after a cross-thread reduction's thread-0 store dropped"),
    Mutant("gpu-thread0-store", "schedules/gpu.py",
           "            bind_threads(sch, sch.add_unit_loop(store), threads)   # threadIdx.x < 1: thread 0 alone\n",
           "            pass   # the store no longer bound to thread 0: every thread stores\n",
           ("tests/test_gpu_races.py::test_every_combo_is_race_free_and_in_bounds_under_oclgrind",
            "-k", "not backward and not grad"),   # the forward ops: GpuRowReduce's representative among them
           "GpuRowReduce: a per-row output (rstd) stored by every thread, not thread 0"),
    Mutant("cuda-storage-rewrite", "targets/cuda.py",
           'BUILD_CONFIG = {"tirx.disable_storage_rewrite": True}',
           'BUILD_CONFIG = {"tirx.disable_storage_rewrite": False}',
           ("tests/test_gpu_races.py::test_the_cuda_targets_build_config_keeps_the_row_pass_race_free",),
           "CUDA: StorageRewrite back on in the target's build config"),
    Mutant("vector-alignment", "schedules/gpu_vector.py",
           "if any(aligned.get(p.name, 0) < VECTOR_BYTES for p in _column_params(func, outs)):",
           "if any(aligned.get(p.name, 0) < VECTOR_BYTES // 4 for p in _column_params(func, outs)):",
           ("tests/test_gpu_vector.py::test_the_variant_is_chosen_by_row_length_and_alignment",),
           "128-bit variant chosen for 4-byte-aligned tensors (`< 16` -> `< 4`)"),
    Mutant("product-dtype-row", "opgen/ops/rms_norm_grad/kernel.py",
           '"AtlasInference": (F16_F16, F32_F32),',
           '"AtlasInference": (F16_F32, F16_F16, F32_F32),',
           ("tests/test_aclnn_validation.py::test_rms_atlas_inference_dtypes",),
           "RmsNormGrad: f16 x with f32 gamma allowed on AtlasInference"),
    Mutant("ascend-cast-mode", "targets/ascend/cann.py",
           'return self.round_modes.get(dtype, "CAST_RINT")',
           'return self.round_modes.get(dtype, "CAST_ROUND")',
           ("tests/test_ascend_sync.py::test_bf16_outputs_use_canns_round_mode",),
           "AscendC default RoundMode CAST_RINT -> CAST_ROUND"),
    Mutant("ascend-sync", "targets/ascend/emitter.py",
           "out += [f\"    {sync('MTE3_MTE2', 'V_MTE2')}\",",
           "out += [f\"    {sync('V_MTE2')}\",",
           ("tests/test_ascend_target.py::test_split_d_double_buffering_overlaps_copy_in_with_compute",),
           "split-D column sums: the MTE3->MTE2 event before re-reading the workspace row dropped"),
    Mutant("tiling-off-by-one", "targets/ascend/host.py",
           "    t->block_factor = CeilDiv(rows, cores);\n    t->block_dim = CeilDiv(rows, t->block_factor);\n"
           "    const int64_t pitch",
           "    t->block_factor = CeilDiv(rows, cores);\n    t->block_dim = CeilDiv(rows - 1, t->block_factor);\n"
           "    const int64_t pitch",
           ("tests/test_ascend_target.py::test_rms_norm_grad_every_combo_matches_the_reference",),
           "host tiling: block_dim = CeilDiv(rows - 1, factor) (last core dropped)"),
    Mutant("plan-key-strides", "opgen/binding.py",
           'return "numpy", a.dtype, a.shape, a.strides, flags.writeable, flags.aligned',
           'return "numpy", a.dtype, a.shape, (), flags.writeable, flags.aligned',
           ("tests/test_plan_cache.py::test_rms_key_changes_are_never_served_from_the_cache[strides]",),
           "numpy arrays' plan-cache key without strides"),
    Mutant("f32-tolerance-x100", "opgen/verify.py",
           "FLOAT32: (1e-4, 1e-4),",
           "FLOAT32: (1e-2, 1e-2),",
           ("tests/test_compare.py::test_one_percent_on_dgamma_fails_f32",),
           "float32 (rtol, atol) 1e-4 -> 1e-2"),
    Mutant("f32-tolerance-x10", "opgen/verify.py",
           "FLOAT32: (1e-4, 1e-4),",
           "FLOAT32: (1e-3, 1e-3),",
           ("tests/test_mutant_gaps.py::test_float32_tolerance_rule_fails_errors_past_the_table",),
           "float32 (rtol, atol) 1e-4 -> 1e-3 (float16's)"),
    Mutant("optional-fill", "opgen/ops/group_norm_backward/api.py",
           'fill={"gamma": 1.0},',
           'fill={"gamma": 0.0},',
           ("tests/test_aclnn_run.py::test_gn_gamma_absent",),
           "GroupNormBackward null gamma filled with 0 instead of 1"),
    Mutant("llvm-host-features", "targets/llvm_host.py",
           "    return tuple(off + on)\n",
           "    return tuple(on)\n",
           ("tests/test_llvm_host.py::test_features_the_os_hides_are_switched_off",),
           "host CPU edits lose the `-feature`s (AVX-512 kept on a host without it)"),
    Mutant("cache-seal", "opgen/diskcache.py",
           'if fields.get("sha256") != hashlib.sha256(payload).hexdigest():',
           'if False and fields.get("sha256") != hashlib.sha256(payload).hexdigest():',
           ("tests/test_cache_integrity.py::test_a_seal_names_its_file_and_covers_every_byte",),
           "disk cache: the seal's digest check skipped"),
    Mutant("aclnn-status", "opgen/ops/rms_norm_grad/api.py",
           'Rule(ACLNN_ERR_INNER_TILING_ERROR, "Atlas inference products: The last axis',
           'Rule(ACLNN_ERR_PARAM_INVALID, "Atlas inference products: The last axis',
           ("tests/test_aclnn_validation.py::test_rms_atlas_inference_last_axis_32_bytes",),
           "RmsNormGrad 32-byte last-axis rule returns 161002, not 561002"),
    Mutant("derive-first-element", "opgen/derive.py",
           "    for idx, want in expected.items():\n",
           "    for idx, want in list(expected.items())[:1]:\n",
           ("tests/test_mutant_gaps.py::test_a_te_wrong_at_some_elements_only_fails_the_proof_there",),
           "the proof compares only each output's first element"),
    Mutant("derive-outputs", "opgen/derive.py",
           "        for out in spec.outputs:\n",
           "        for out in spec.outputs[:1]:\n",
           ("tests/test_derive.py::test_rms_norm_proof_counts_every_output_element",),
           "the proof checks only an op's first output"),
    Mutant("host-view-quotient", "targets/ascend/host_context.py",
           'return self.local(f"{num} / {den}")',
           'return self.local(f"{num}")',
           ("tests/test_ascend_host_tiling.py::test_group_norm_grad_reads_nchw_and_num_groups",),
           "Ascend host TilingFunc: GroupNorm's D read as C, not C / num_groups"),
    Mutant("ascend-pipe-v-barrier", "targets/ascend/vector_order.py",
           "            if not sources & written:\n",
           "            if True:\n",
           ("tests/test_ascend_hazards.py::test_the_unedited_kernels_pass",),
           "emitter: no PipeBarrier<PIPE_V> between dependent vector instructions"),
    Mutant("mlir-named-sign", "targets/mlir/named.py",
           '"Sub": "sub"', '"Sub": "add"',
           ("tests/test_mlir.py::test_what_bishengir_accepted_matches_the_reference",),
           "ascend-mlir: every TE subtraction printed as an addition (bishengir takes it; the numbers must not)"),
    Mutant("bishengir-rejection-not-kept", "targets/mlir/bishengir.py",
           "    if path is None or not diskcache.trusted_dir(path.parent, \"bishengir verdicts are not kept\"):",
           "    if path is None or not report.ok or not diskcache.trusted_dir(path.parent, \"bishengir verdicts are not kept\"):",
           ("tests/test_mlir.py::test_a_verdict_is_final_after_its_retries_and_kept_rejected_or_not",),
           "bishengir: a rejection not cached (a second build may split an op otherwise)"),
    Mutant("ascend-segment-partials", "targets/ascend/emit_segments.py",
           "'b * t_.seg_chunks + j'",
           "'b * t_.seg_chunks'",
           ("tests/test_patterns.py::test_column_sums_per_segment_run_correctly[ascend-emu]",),
           "segmented row pass on Ascend: a segment's first task's partials counted for every task's"),
]

# Modules whose __file__ must lie in the copy (the three package roots and one module
# under each, including a namespace-package neighbour: targets/ascend/emu).
ISOLATION_PROBE = ("opgen", "opgen.verify", "opgen.schedules", "opgen.schedules.gpu_vector", "opgen.targets",
                   "opgen.targets.ascend.emitter")

SITECUSTOMIZE = '''\
"""Written by scripts/mutants.py: opgen, opgen.schedules and opgen.targets from {root}."""
import sys
from importlib.util import spec_from_file_location
from pathlib import Path

_ROOTS = {{"opgen": Path({root!r}) / "opgen", "opgen.schedules": Path({root!r}) / "schedules",
           "opgen.targets": Path({root!r}) / "targets"}}


def _editable(obj) -> bool:
    module = getattr(obj, "__module__", None) or type(obj).__module__
    return str(module).startswith("__editable__")


class _CopyFinder:
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        root = _ROOTS.get(fullname)
        if root is None:
            return None
        return spec_from_file_location(fullname, root / "__init__.py", submodule_search_locations=[str(root)])


sys.meta_path[:] = [f for f in sys.meta_path if not _editable(f)]
sys.path_hooks[:] = [h for h in sys.path_hooks if not _editable(h)]
sys.path[:] = [p for p in sys.path if not str(p).startswith("__editable__")]
sys.path_importer_cache.clear()
sys.meta_path.insert(0, _CopyFinder)
'''


@dataclass
class Result:
    name: str
    verdict: str          # KILLED, SURVIVED, ERROR (control: PASSED, FAILED)
    test: str = ""
    message: str = ""
    seconds: float = 0.0


def export(rev: str, dest: Path, overlay: list) -> None:
    """The tree at ``rev`` into ``dest`` (plus ``overlay``: working-tree files, for trying a
    new test before it is committed)."""
    dest.mkdir(parents=True)
    archive = subprocess.Popen(["git", "-C", str(REPO), "archive", "--format=tar", rev], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout, check=True)
    archive.stdout.close()
    if archive.wait():
        raise SystemExit(f"git archive {rev} failed")
    for rel in overlay:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, dest / rel)


class Copy:
    """One run's copy of the repository, its site folder and its fresh caches."""

    def __init__(self, pristine: Path, work: Path, label: str):
        self.base = work / label
        self.root = self.base / "repo"
        shutil.copytree(pristine, self.root, symlinks=True)
        site = self.base / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(SITECUSTOMIZE.format(root=str(self.root)))
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("OPGEN_")}
        for var, folder in (("OPGEN_CACHE_DIR", "opgen-cache"), ("XDG_CACHE_HOME", "xdg-cache")):
            (self.base / folder).mkdir()
            self.env[var] = str(self.base / folder)
        self.env["PYTHONPATH"] = os.pathsep.join([str(site)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
        self.env["COLUMNS"] = "240"          # pytest's summary lines, less truncated
        self.env.pop("PYTEST_ADDOPTS", None)

    def apply(self, mutant: Mutant) -> None:
        path = self.root / mutant.path
        text = path.read_text()
        count = text.count(mutant.old)
        if count != 1:
            raise SystemExit(f"mutant {mutant.name}: `old` occurs {count} times in {mutant.path} at this revision "
                             "(expected exactly once): update the mutant")
        path.write_text(text.replace(mutant.old, mutant.new))

    def check_isolation(self) -> None:
        code = ("import importlib, sys\n"
                f"for name in {ISOLATION_PROBE!r}:\n"
                "    print(name, importlib.import_module(name).__file__)\n")
        done = subprocess.run([sys.executable, "-c", code], cwd=self.root, env=self.env, capture_output=True,
                              text=True)
        if done.returncode:
            raise SystemExit(f"isolation probe failed in {self.root}:\n{done.stderr[-2000:]}")
        strays = [line for line in done.stdout.splitlines() if not line.split()[1].startswith(str(self.root) + "/")]
        if strays:
            raise SystemExit("isolation broken: modules imported from outside the copy:\n" + "\n".join(strays))

    def pytest(self, args, timeout: float) -> tuple[int, str]:
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *args]
        try:
            done = subprocess.run(cmd, cwd=self.root, env=self.env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as err:
            out = (err.stdout or b"").decode(errors="replace") if isinstance(err.stdout, bytes) else (err.stdout or "")
            return -1, out + f"\n[mutants.py: pytest ran past {timeout:.0f} s and was stopped]"
        return done.returncode, done.stdout + done.stderr


_SUMMARY = re.compile(r"^(FAILED|ERROR) (.+?)(?: - (.*))?$")


def first_failure(output: str) -> tuple[str, str]:
    """(first failing test id, one line of its message) from pytest's short summary."""
    for line in output.splitlines():
        match = _SUMMARY.match(line.strip())
        if match:
            return match.group(2).strip(), (match.group(3) or match.group(1)).strip()
    tail = [line for line in output.splitlines() if line.strip()]
    return "?", tail[-1].strip() if tail else "no output"


def counts(output: str) -> dict:
    """pytest's final tally ("3 passed, 1 skipped, 2 deselected in 4.1s") as a dict."""
    tally = {}
    for line in reversed(output.splitlines()):
        found = re.findall(r"(\d+) (passed|failed|skipped|deselected|errors?|xfailed|xpassed)", line)
        if found:
            for number, kind in found:
                tally[kind.rstrip("s") if kind.startswith("error") else kind] = int(number)
            return tally
    return tally


def short(text: str, width: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 3] + "..."


def run_mutant(mutant: Mutant, pristine: Path, work: Path, timeout: float) -> Result:
    start = time.monotonic()
    copy = Copy(pristine, work, f"mutant-{mutant.name}")
    copy.apply(mutant)
    copy.check_isolation()
    rc, output = copy.pytest(mutant.tests, timeout)
    tally = counts(output)
    seconds = time.monotonic() - start
    if rc in (1, 2) and (tally.get("failed") or tally.get("error")):
        test, message = first_failure(output)
        return Result(mutant.name, "KILLED", test, short(message), seconds)
    if rc == 0 and tally.get("passed"):
        return Result(mutant.name, "SURVIVED", "", f"{tally.get('passed')} passed, {tally.get('skipped', 0)} skipped",
                      seconds)
    return Result(mutant.name, "ERROR", "", short(f"pytest exit {rc} ({tally}): " + first_failure(output)[1]),
                  seconds)


def control_groups(mutants) -> list[tuple]:
    """The mutants' test arguments for the unmutated run: plain node ids merged into one
    pytest call (deduplicated, in order), argument lists with options each on their own."""
    ids, separate = [], []
    for m in mutants:
        if any(a.startswith("-") for a in m.tests):
            if m.tests not in separate:
                separate.append(m.tests)
        else:
            ids += [a for a in m.tests if a not in ids]
    return ([tuple(ids)] if ids else []) + separate


def run_control(mutants, pristine: Path, work: Path, timeout: float) -> list[Result]:
    copy = Copy(pristine, work, "control")
    copy.check_isolation()
    results = []
    for args in control_groups(mutants):
        start = time.monotonic()
        rc, output = copy.pytest(args, timeout)
        tally = counts(output)
        named = " ".join(args)
        label = f"control: {named}" if len(named) < 120 else f"control: {len(args)} node ids"
        if rc == 0 and tally.get("passed"):
            note = f"{tally['passed']} passed" + (f", {tally['skipped']} skipped" if tally.get("skipped") else "")
            results.append(Result(label, "PASSED", "", note, time.monotonic() - start))
        else:
            test, message = first_failure(output)
            results.append(Result(label, "FAILED", test, short(f"pytest exit {rc} ({tally}): {message}"),
                                  time.monotonic() - start))
    return results


def table(mutants, results) -> str:
    """The results as a markdown table (docs/testing.md)."""
    by_name = {r.name: r for r in results}
    lines = ["| mutant | file | edit | verdict | killing test | failure line |", "|---|---|---|---|---|---|"]
    for m in mutants:
        r = by_name.get(m.name)
        if r is None:
            continue
        cell = lambda s: s.replace("|", "\\|")   # noqa: E731
        test = r.test or " ".join(m.tests)
        lines.append(f"| {m.name} | `{m.path}` | {cell(m.what)} | {r.verdict} | `{cell(test)}` | {cell(r.message)} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", metavar="NAME", help="run only this mutant (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the mutants and their tests, run nothing")
    parser.add_argument("--rev", default="HEAD", help="the revision to copy and mutate (default HEAD)")
    parser.add_argument("--overlay", action="append", default=[], metavar="FILE",
                        help="also copy this working-tree file (repo-relative) into each copy, e.g. a test "
                             "not yet committed")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per pytest run (default 1800)")
    parser.add_argument("--tests", metavar="ARGS",
                        help="pytest arguments to run instead of each chosen mutant's own (quoted, split as a "
                             "shell would): for looking for the test that kills a survivor")
    parser.add_argument("--keep", action="store_true", help="keep the temporary copies (their path is printed)")
    args = parser.parse_args(argv)

    chosen = MUTANTS
    if args.only:
        unknown = sorted(set(args.only) - {m.name for m in MUTANTS})
        if unknown:
            parser.error(f"no mutant named {', '.join(unknown)} (--list shows them)")
        chosen = [m for m in MUTANTS if m.name in args.only]
    if args.tests:
        chosen = [dataclasses.replace(m, tests=tuple(shlex.split(args.tests))) for m in chosen]
    if args.list:
        for m in chosen:
            print(f"{m.name}: {m.path}: {m.what}")
            print(textwrap.indent(f"- {m.old!r}\n+ {m.new!r}\ntests: {' '.join(m.tests)}", "    "))
        return 0

    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="opgen-mutants-"))
    try:
        pristine = work / "pristine"
        export(args.rev, pristine, args.overlay)
        print(f"copies of {args.rev} under {work}", flush=True)
        control = run_control(chosen, pristine, work, args.timeout)
        for r in control:
            print(f"{r.verdict:8} {r.name}: {r.message} [{r.seconds:.0f} s]", flush=True)
            if r.test:
                print(f"         first failure: {r.test}", flush=True)
        results = []
        for m in chosen:
            r = run_mutant(m, pristine, work, args.timeout)
            results.append(r)
            print(f"{r.verdict:8} {m.name}: {r.test or '-'}: {r.message} [{r.seconds:.0f} s]", flush=True)
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    elapsed = time.monotonic() - started
    print()
    print(table(chosen, results))
    killed = sum(r.verdict == "KILLED" for r in results)
    bad_control = [r for r in control if r.verdict != "PASSED"]
    print(f"\n{killed} of {len(results)} mutants killed; control {'FAILED' if bad_control else 'passed'}; "
          f"{elapsed:.0f} s in all ({elapsed / 60:.1f} min)")
    return 1 if bad_control or killed != len(results) else 0


if __name__ == "__main__":
    sys.exit(main())
