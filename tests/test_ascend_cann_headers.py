"""The emitted CANN project compiled against Huawei's own headers, not opgen's emulation.

``OPGEN_CANN_HEADERS`` names a folder holding hicann/metadef, hicann/ge, hicann/runtime,
hicann/asc-devkit and libboundscheck at the commits targets/ascend/cann_headers.PINNED names
(scripts/fetch_cann_headers.sh clones them); without it every test here skips (CI has no
network). Per op: the op_host sources (the OpDef, the op-level TilingFunc/InferShape/
InferDataType and each combo's tiling included by it) pass g++ -fsyntax-only against those
headers alone. The kernel side stops where asc-devkit needs the toolkit's tikicpulib
(stub_def.h): that is asserted, so a folder that gains it is noticed.

Cost without the folder: nothing (skipped). With it: ~1 s of g++ per op_host file, plus the
kernels other ascend tests build (disk cache).
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from opgen import kernels
from opgen.ops import all_ops, get_op
from opgen.targets import get_target
from opgen.targets.ascend import cann_headers
from opgen.targets.ascend.build import write_project
from tiers import dtype_set, tiered

EMU = get_target("ascend-emu")
ROOT = cann_headers.headers_root()


def _skip_reason() -> str | None:
    if ROOT is None:
        return f"{cann_headers.ENV} is unset (scripts/fetch_cann_headers.sh fills such a folder)"
    absent = cann_headers.missing_repos(ROOT)
    if absent:
        return f"{cann_headers.ENV}={ROOT} lacks {', '.join(absent)}"
    if not EMU.can_build():
        return "g++ or the AscendC emulation header is missing"
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")


def _combos(op) -> list[str]:
    """The op's documented combos on the product, one per dtype mix: every cast the host
    tiling and the dtype dispatch emit, without building all of them."""
    kept, mixes = [], set()
    for combo in op.products.get(EMU.hardware.product, ()):
        if dtype_set(combo) not in mixes:
            kept.append(combo.tag)
            mixes.add(dtype_set(combo))
    return kept


def _project(op, tmp_path):
    try:
        built = [(tag, kernels.get_kernel(op, tag, EMU).module) for tag in _combos(op)]
    except NotImplementedError as err:    # no Ascend pattern for the op: no project to check
        pytest.skip(str(err))
    files = EMU.op_artifacts(op, built)
    write_project(files, tmp_path / "project")
    return files, tmp_path / "project"


def _syntax_only(source, flags) -> subprocess.CompletedProcess:
    return subprocess.run(["g++", "-fsyntax-only", *flags, str(source)], capture_output=True, text=True)


def _host_flags(tmp_path) -> list[str]:
    return cann_headers.host_flags(ROOT, cann_headers.write_missing(tmp_path / "missing"))


OPS = [op for op in all_ops() if _combos(op)]


@pytest.mark.parametrize("op", tiered(OPS, [get_op("rms_norm_grad")], ids=[op.name for op in OPS]))
def test_op_host_compiles_against_metadef_and_asc_devkit(op, tmp_path):
    files, project = _project(op, tmp_path)
    sources = sorted(rel for rel in files if rel.startswith("op_host/") and rel.endswith(".cpp"))
    assert len(sources) == 2     # the OpDef and the op-level tiling
    flags = _host_flags(tmp_path)
    for rel in sources:
        done = _syntax_only(project / rel, flags)
        assert done.returncode == 0, f"{rel}:\n{done.stderr[-4000:]}"


def test_the_flags_reach_metadef_not_opgens_emulation(tmp_path):
    """The control: an OpDef naming a dtype metadef's ge::DataType lacks is rejected, and the
    emulation headers are on none of the include paths."""
    files, project = _project(get_op("rms_norm_grad"), tmp_path)
    flags = _host_flags(tmp_path)
    emulation = str(Path(cann_headers.__file__).parent / "emu")
    assert not any(emulation in flag for flag in flags)
    bad = project / "op_host/bad_def.cpp"
    bad.write_text(files["op_host/rms_norm_grad_def.cpp"].replace("ge::DT_FLOAT}", "ge::DT_FLOAT32}"))
    done = _syntax_only(bad, flags)
    assert done.returncode != 0 and "DT_FLOAT32" in done.stderr


def test_op_kernel_stops_only_at_the_toolkits_cpu_debug_header(tmp_path):
    """The kernel entry in asc-devkit's CPU-debug mode: every header it reaches resolves in the
    public repositories up to stub_def.h, which only the toolkit's tikicpulib ships."""
    files, project = _project(get_op("rms_norm_grad"), tmp_path)
    generated = tmp_path / "generated"
    (generated / "kernel_tiling").mkdir(parents=True)
    devkit = ROOT / "asc-devkit"
    subprocess.run(["python3", str(devkit / "impl/adv_api/cmake/scripts/gen_kernel_tiling_data_def.py"),
                    str(devkit / "include/adv_api"), str(generated / "kernel_tiling/kernel_tiling.h")],
                   check=True, capture_output=True)
    done = _syntax_only(project / "op_kernel/rms_norm_grad.cpp", cann_headers.kernel_flags(ROOT, generated, "Ascend950"))
    fatal = [line for line in done.stderr.splitlines() if "fatal error" in line]
    assert done.returncode != 0 and len(fatal) == 1 and "stub_def.h: No such file" in fatal[0], done.stderr[-3000:]
