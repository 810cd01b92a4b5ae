"""The llvm target builds for the features the OS enables, never for what the CPU's name
implies (targets/llvm_host.py).

Hosts this machine is not are simulated: a CPU name with a feature map that lacks what the
name implies (a Zen 4 or Skylake-SP VM that hides AVX-512; a machine whose OS enables no
AVX state at all). A kernel of each llvm schedule pattern is built for each through the
llvm target's own build path, and its library is disassembled: an instruction of a switched
-off set is found by its encoding (EVEX: 0x62, VEX: 0xC4/0xC5 after legacy prefixes; in
64-bit mode those bytes mean nothing else), not by guessing at mnemonics. The positive
controls build the same kernels for the name's own features and must find them.
"""
from __future__ import annotations

import dataclasses
import platform
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from opgen import kernels
from opgen.ops import get_op
from opgen.targets import get_target, llvm_host
from opgen.verify import run_and_compare

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64") or not shutil.which("objdump"),
                                reason="x86-64 encodings, read with binutils' objdump")

LLVM = get_target("llvm")
# One op per llvm schedule pattern (schedules/llvm.py), f32 and a 16-bit combo each: the
# 16-bit ones convert every element (F16C, AVX512-BF16), the f32 ones are the widest loops.
PATTERN_KERNELS = [("rms_norm_grad", "f32-f32"), ("rms_norm_grad", "bf16-f32"),       # RowPassWithColumnSums
                   ("layer_norm", "f16-f16"), ("layer_norm", "f32-f32"),              # RowPass
                   ("group_norm_swish_grad", "bf16-bf16"), ("group_norm", "f32-f32"),  # GroupedRowPass
                   ("batch_norm_backward", "f16-f16"), ("batch_norm_backward", "f32-f32")]  # ChannelPass
LEGACY_PREFIXES = {0x66, 0x67, 0xF2, 0xF3, 0x2E, 0x36, 0x3E, 0x26, 0x64, 0x65, 0xF0}


def simulated_host(name: str, lacks=lambda feature: False, only: frozenset | None = None) -> dict:
    """LLVM's host-feature map of a machine called ``name`` whose OS enables the name's
    features (or only those in ``only``) minus those ``lacks`` picks."""
    universe = llvm_host.probe_host()[1]
    has = llvm_host.CpuSpec(name).features() if only is None else only
    return {f: f in has and not lacks(f) for f in universe}


def no_avx512(feature: str) -> bool:
    return feature.startswith("avx512") or feature.startswith("avx10") or feature.startswith("amx")


X86_64_V2 = llvm_host.CpuSpec("x86-64-v2").features()
HOSTS = {   # name: (simulated CpuSpec, encodings that must not appear)
    "znver4 without AVX-512": (llvm_host.for_host("znver4", simulated_host("znver4", no_avx512)), {"EVEX"}),
    "skylake-avx512 without AVX-512": (llvm_host.for_host("skylake-avx512", simulated_host("skylake-avx512", no_avx512)),
                                       {"EVEX"}),
    "znver4 on an OS with SSE4.2 only": (llvm_host.for_host("znver4", simulated_host("znver4", only=X86_64_V2)),
                                         {"EVEX", "VEX"}),
}


def encodings(library: Path) -> dict:
    """How many instructions of ``library`` use each encoding ("EVEX", "VEX", "legacy")."""
    listing = subprocess.run(["objdump", "-d", "--insn-width=16", str(library)], capture_output=True, text=True,
                             check=True).stdout
    counts = {"EVEX": 0, "VEX": 0, "legacy": 0}
    for line in listing.splitlines():
        fields = line.split("\t")
        if len(fields) < 3 or not fields[0].strip().endswith(":"):
            continue
        code = [int(b, 16) for b in fields[1].split()]
        while code and code[0] in LEGACY_PREFIXES:
            code = code[1:]
        kind = "EVEX" if code[:1] == [0x62] else "VEX" if code[:1] in ([0xC4], [0xC5]) else "legacy"
        counts[kind] += 1
    return counts


def built_encodings(cpu: llvm_host.CpuSpec, op_name: str, tag: str, tmp_path: Path) -> dict:
    op = get_op(op_name)
    kernel = kernels.build(op, op.combo(tag), dataclasses.replace(LLVM, cpu=cpu))
    library = tmp_path / f"{op_name}-{tag}-{cpu.name}.so"
    kernel.export(library)
    return encodings(library), kernel


@pytest.mark.parametrize("host", list(HOSTS))
def test_features_the_os_hides_are_switched_off(host):
    cpu, _ = HOSTS[host]
    enabled = cpu.features()
    assert not any(no_avx512(f) for f in enabled), cpu
    if "SSE4.2 only" in host:
        assert not {"avx", "avx2", "fma", "f16c"} & enabled
    else:
        assert {"avx2", "fma", "f16c"} <= enabled     # what the host does have stays on
    assert "-avx512f" in cpu.mattr and cpu.name in ("znver4", "skylake-avx512")


@pytest.mark.parametrize("host", list(HOSTS))
def test_no_instruction_of_a_switched_off_set_is_built(host, tmp_path):
    cpu, forbidden = HOSTS[host]
    rng = np.random.default_rng(0)
    for op_name, tag in PATTERN_KERNELS:
        counts, kernel = built_encodings(cpu, op_name, tag, tmp_path)
        assert counts["legacy"] > 0, (op_name, tag)
        assert not any(counts[kind] for kind in forbidden), (host, op_name, tag, counts)
        # This machine has every feature the simulated host has: the kernel runs, and is right.
        comparisons, _ = run_and_compare(kernel, kernel.op.problems[0], rng)
        assert all(c.ratio <= 1.0 for c in comparisons), (host, op_name, tag)


def test_positive_control_the_names_own_features_are_found(tmp_path):
    """The same check finds EVEX in a build that keeps znver4's AVX-512, and VEX in one
    that keeps its AVX2: the disassembly would see the instructions if they were there."""
    avx512 = llvm_host.CpuSpec("znver4")
    avx2 = HOSTS["znver4 without AVX-512"][0]
    for op_name, tag in PATTERN_KERNELS[:2]:
        assert built_encodings(avx512, op_name, tag, tmp_path)[0]["EVEX"] > 0, (op_name, tag)
        assert built_encodings(avx2, op_name, tag, tmp_path)[0]["VEX"] > 0, (op_name, tag)


def test_the_probe_agrees_with_the_kernels_view_of_the_vector_extensions():
    """LLVM's host query (CPUID and XCR0) against Linux's /proc/cpuinfo flags, the same bits
    as the kernel enabled them, on every vector extension opgen's kernels can use: the raw
    query agrees here, and the probe never keeps one the kernel does not list."""
    import tvm_ffi

    flags = llvm_host.linux_cpu_flags()
    if not flags:
        pytest.skip("no /proc/cpuinfo flags")
    raw = tvm_ffi.get_global_func("tvm.codegen.llvm.GetHostCPUFeatures")()
    disagree = {f: (bool(raw.get(f)), name in flags) for f, name in llvm_host.LINUX_FLAGS.items()
                if bool(raw.get(f)) != (name in flags)}
    assert not disagree, disagree
    probed = llvm_host.probe_host()[1]
    assert all(name in flags for f, name in llvm_host.LINUX_FLAGS.items() if probed.get(f))


def test_a_vector_extension_the_kernel_does_not_list_is_switched_off(monkeypatch, tmp_path):
    """The second opinion: a host whose LLVM query claims AVX-512 while Linux lists none."""
    flags = llvm_host.linux_cpu_flags()
    if not flags or "sse2" not in flags:
        pytest.skip("x86 Linux only")
    fake = tmp_path / "cpuinfo"
    fake.write_text("flags\t\t: " + " ".join(sorted(f for f in flags if not f.startswith("avx512"))) + "\n")
    read = llvm_host.linux_cpu_flags
    monkeypatch.setattr(llvm_host, "linux_cpu_flags", lambda: read(str(fake)))
    llvm_host.probe_host.cache_clear()
    try:
        probed = llvm_host.probe_host()[1]
        assert not any(on for f, on in probed.items() if f.startswith("avx512"))
        assert probed.get("avx2") == ("avx2" in flags)
    finally:
        llvm_host.probe_host.cache_clear()


def test_this_host_builds_for_its_probed_features():
    name, features = llvm_host.probe_host()
    cpu = llvm_host.current()
    assert cpu.name == name
    for feature, on in features.items():
        if feature in llvm_host.CpuSpec(name).features() or on:
            assert (feature in cpu.features()) == on, feature


def test_the_feature_set_is_part_of_the_kernel_cache_key():
    """A library built for more features is never the file a host with fewer loads."""
    op = get_op("rms_norm_grad")
    mod, symbol = kernels.scheduled_module(op, op.combos[0], LLVM)
    full = dataclasses.replace(LLVM, cpu=llvm_host.CpuSpec("znver4"))
    hidden = dataclasses.replace(LLVM, cpu=HOSTS["znver4 without AVX-512"][0])
    paths = {kernels._cache_path(t, symbol, mod.script()) for t in (full, hidden)}
    assert len(paths) == 2
    assert "-avx512f" in str(hidden.tvm_target()) and "-avx512f" not in str(full.tvm_target())


@pytest.mark.parametrize("setting, expected", [("znver4,-avx512f", "znver4 with -avx512f"),
                                               ("x86-64-v2", "x86-64-v2; vector: sse4.2")])
def test_the_override_names_cpu_and_features(monkeypatch, setting, expected):
    monkeypatch.setenv(llvm_host.OVERRIDE_VARIABLE, setting)
    cpu = llvm_host.current()
    assert cpu.describe().startswith(expected)
    assert str(LLVM.tvm_target()).count(f'"mcpu":"{setting.split(",")[0]}"') == 1
    assert LLVM.hardware_summary().startswith(expected)


@pytest.mark.parametrize("setting, says", [("nosuchcpu", "does not know the CPU 'nosuchcpu'"),
                                           ("znver4,avx2", "a feature edit is +name or -name"),
                                           ("znver4,+nosuchfeature", "does not know the feature 'nosuchfeature'")])
def test_a_bad_override_means_the_llvm_target_cannot_build(monkeypatch, setting, says):
    monkeypatch.setenv(llvm_host.OVERRIDE_VARIABLE, setting)
    assert not LLVM.can_build() and says in LLVM.missing()
    assert LLVM.missing().startswith(f"{llvm_host.OVERRIDE_VARIABLE}=")


def test_a_bad_override_is_one_line_on_the_command_line(tmp_path, monkeypatch, capsys):
    """Through the command line's entry point in this process (the override is read at each
    use, as the test above shows): two fresh interpreters cost 14 s and checked nothing more."""
    from opgen import cli

    monkeypatch.setenv(llvm_host.OVERRIDE_VARIABLE, "nosuchcpu")
    cli.main(["targets"])
    llvm_row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("llvm "))
    assert llvm_row.split()[1:3] == ["no", "no"] and "does not know the CPU 'nosuchcpu'" in llvm_row
    status = cli.main(["generate", "--target", "llvm", "--op", "rms_norm", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert "does not know the CPU 'nosuchcpu'" in err


def test_iree_builds_for_the_same_cpu_and_features(monkeypatch, tmp_path):
    """iree-cpu compiles for the llvm target's CPU (IREE's own cpu=host would probe alike, but
    ignore OPGEN_LLVM_TARGET): AVX-512 hidden, its embedded ELF has no EVEX instruction;
    the name's own features, it has some (the positive control)."""
    iree = get_target("iree-cpu")
    if not iree.can_build():
        pytest.skip(f"iree-cpu: {iree.missing()}")
    op = get_op("rms_norm_grad")
    found = {}
    for label, cpu in (("hidden", HOSTS["znver4 without AVX-512"][0]), ("named", llvm_host.CpuSpec("znver4"))):
        monkeypatch.setattr(llvm_host, "current", lambda cpu=cpu: cpu)
        vmfb = iree.build(kernels.scheduled_module(op, op.combo("bf16-f32"), iree)[0]).vmfb
        library = tmp_path / f"{label}.so"
        library.write_bytes(vmfb[vmfb.index(b"\x7fELF"):])
        found[label] = encodings(library)
    assert found["hidden"]["EVEX"] == 0 and found["hidden"]["VEX"] > 0, found
    assert found["named"]["EVEX"] > 0, found


def test_kernels_built_for_features_this_host_lacks_are_built_not_run(monkeypatch):
    """A cross build (OPGEN_LLVM_TARGET naming more than the host has) compiles, but its
    kernels are not run here, where their first instruction of a missing set would be
    SIGILL: opgen generate makes BUILT rows, the aclnn API refuses with the reason. The
    host is simulated: a Zen 4 without AVX-512, asked to build for Sapphire Rapids."""
    zen4_without_avx512 = simulated_host("znver4", no_avx512)
    monkeypatch.setattr(llvm_host, "probe_host", lambda: ("znver4", zen4_without_avx512))
    cross = dataclasses.replace(LLVM, cpu=llvm_host.CpuSpec("sapphirerapids"))
    assert cross.can_build() and not cross.can_run()
    assert "avx512f" in llvm_host.lacking_here(cross.built_for()) and "avx512fp16" in cross.run_place()
    native = dataclasses.replace(LLVM, cpu=HOSTS["znver4 without AVX-512"][0])
    assert native.can_run() and native.run_place() == "here"


def test_a_cross_build_is_refused_by_the_api_with_the_reason(monkeypatch):
    import opgen
    from opgen import AclnnError

    zen4_without_avx512 = simulated_host("znver4", no_avx512)
    monkeypatch.setattr(llvm_host, "probe_host", lambda: ("znver4", zen4_without_avx512))
    monkeypatch.setenv(llvm_host.OVERRIDE_VARIABLE, "znver4")
    with pytest.raises(AclnnError, match="cannot run kernels on this machine .*avx512f"):
        opgen.rms_norm_grad(np.ones((4, 8), np.float32), np.ones((4, 8), np.float32), np.ones(4, np.float32),
                            np.ones(8, np.float32))
