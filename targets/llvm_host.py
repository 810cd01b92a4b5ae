"""The CPU the llvm target's kernels are built for: a name and the features the OS enables.

Why not the name alone: LLVM's name for a CPU (``znver4``, ``skylake-avx512``) implies a
feature set, and a kernel built for the name uses all of it. A hypervisor, a container's
CPU mask or a ``-cpu`` model can hide features the name implies (a Zen 4 cloud VM without
AVX-512 is common): every kernel then dies with SIGILL. So the features are probed, and
those the name implies but the machine lacks are switched off (``-feature`` in the TVM
target's ``mattr``), those it has beyond the name switched on.

The probe is LLVM's own host query (``llvm::sys::getHostCPUFeatures``, which TVM exposes
as ``tvm.codegen.llvm.GetHostCPUFeatures``), chosen over ``/proc/cpuinfo`` because it asks
exactly what decides whether an instruction runs: CPUID as the hypervisor presents it, and
for the AVX and AVX-512 register states XGETBV, i.e. whether the OS saves them (XCR0). It is
also the query ``clang -march=native`` and IREE's ``cpu=host`` use, it names features in the
spelling ``mattr`` takes, and it works where /proc does not (macOS, Windows). On Linux the
vector extensions are also checked against /proc/cpuinfo, the kernel's view of the same
bits: one the kernel does not list is switched off (``probe_host``).

``OPGEN_LLVM_TARGET`` overrides the probe: ``CPU[,+feature|-feature...]``, e.g.
``znver4,-avx512f`` (AVX-512 off, and with it every extension that needs it) or
``x86-64-v3``. Kernels are then built for exactly that, whether or not this machine has it
(a cross build; ``opgen generate`` runs a smoke kernel in a child process first, so a kernel
this host cannot run is a FAIL row, not a dead process). The setting is read when the llvm
target first builds in a process.

The CPU name and its edits are part of the TVM target string, which is part of the kernel
disk cache's key (``opgen.kernels``) and of a tuning record's key: a cache copied from a
machine with more features is never loaded on one with fewer.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field

from opgen.lazy import tvm, tvm_ffi

OVERRIDE_VARIABLE = "OPGEN_LLVM_TARGET"

# The vector extensions worth naming in a one-line description, widest last.
_VECTOR_FAMILIES = (("sse4.2",), ("avx",), ("avx2", "fma", "f16c"),
                    ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512bf16", "avx512fp16", "avx512vnni"),
                    ("neon",), ("sve",), ("sve2",))


@dataclass(frozen=True)
class CpuSpec:
    """A CPU as LLVM builds for it: its name (``mcpu``) and the feature edits (``mattr``:
    "+avx2", "-avx512f") applied to the name's defaults. ``source`` says where it came
    from, for ``opgen targets``; it is not part of the identity."""

    name: str
    mattr: tuple = ()
    source: str = field(default="", compare=False, repr=False)

    def tvm_config(self) -> dict:
        """The ``mcpu``/``mattr`` entries of a TVM llvm target for this CPU."""
        return {"mcpu": self.name, **({"mattr": list(self.mattr)} if self.mattr else {})}

    def features(self) -> frozenset:
        """Every feature LLVM enables for this CPU after the edits (ISA and tuning)."""
        return _enabled_features(self.name, self.mattr)

    def describe(self) -> str:
        """One line: the name, its edits and the vector extensions in use."""
        enabled = self.features()
        vector = [" ".join(f for f in family if f in enabled) for family in _VECTOR_FAMILIES]
        edits = f" with {','.join(self.mattr)}" if self.mattr else ""
        source = f" ({self.source})" if self.source else ""
        return f"{self.name}{edits}; vector: {' '.join(v for v in vector if v) or 'none'}{source}"


@functools.lru_cache(maxsize=None)
def _enabled_features(name: str, mattr: tuple) -> frozenset:
    target = tvm.target.Target({"kind": "llvm", "mcpu": name, **({"mattr": list(mattr)} if mattr else {})})
    return frozenset(str(f) for f in tvm.target.codegen.llvm_get_cpu_features(target))


# LLVM's names of the vector extensions kernels use, as Linux spells them in /proc/cpuinfo.
LINUX_FLAGS = {"sse4.2": "sse4_2", "avx": "avx", "avx2": "avx2", "fma": "fma", "f16c": "f16c",
               "avx512f": "avx512f", "avx512bw": "avx512bw", "avx512vl": "avx512vl", "avx512dq": "avx512dq",
               "avx512cd": "avx512cd", "avx512bf16": "avx512_bf16", "avx512vnni": "avx512_vnni",
               "avx512fp16": "avx512_fp16", "avx512ifma": "avx512ifma", "avx512vbmi": "avx512vbmi",
               "avx512vbmi2": "avx512_vbmi2", "avx512bitalg": "avx512_bitalg",
               "avx512vpopcntdq": "avx512_vpopcntdq", "avx512vp2intersect": "avx512_vp2intersect"}


def linux_cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset | None:
    """The flags the Linux kernel lists for the first CPU, or None (not Linux, not x86)."""
    try:
        with open(cpuinfo) as text:
            line = next((line for line in text if line.startswith("flags")), None)
    except OSError:
        return None
    return frozenset(line.split(":", 1)[1].split()) if line else None


@functools.lru_cache(maxsize=None)
def probe_host() -> tuple[str, dict]:
    """LLVM's name for this CPU and its host-feature map (feature -> enabled), as the running
    OS allows them (CPUID and XCR0). An empty map where LLVM cannot query features.

    On Linux, a vector extension the kernel does not list in /proc/cpuinfo is switched off
    too: a second opinion over the same CPUID bits, for the rare host where LLVM's query
    misfires (seen reported: AVX-512 claimed on an EPYC whose CPUID had none). A kernel
    too old to know a flag's name costs only speed, never a SIGILL."""
    name = str(tvm.target.codegen.llvm_get_system_cpu())
    features = {str(k): bool(v) for k, v in tvm_ffi.get_global_func("tvm.codegen.llvm.GetHostCPUFeatures")().items()}
    flags = linux_cpu_flags()
    if flags and "sse2" in flags:          # x86 Linux: the kernel's view of the same bits
        for feature, flag in LINUX_FLAGS.items():
            if features.get(feature) and flag not in flags:
                features[feature] = False
        if not features.get("avx512f"):    # every AVX-512 extension needs the foundation
            features.update({f: False for f in features if f.startswith("avx512")})
    return name, features


def edits_for_host(name: str, host_features: dict) -> tuple:
    """The ``mattr`` edits that make the CPU ``name`` build for exactly the probed features:
    "-f" for each feature the name implies that the host lacks, "+f" for each the host has
    beyond the name. Only features in the probe's map are edited (LLVM probes ISA
    extensions; tuning flags such as "fast-15bytenop" come from the name)."""
    implied = _enabled_features(name, ())
    off = sorted(f"-{f}" for f, on in host_features.items() if not on and f in implied)
    on = sorted(f"+{f}" for f, on in host_features.items() if on and f not in implied)
    return tuple(off + on)


def for_host(name: str, host_features: dict, source: str = "probed: LLVM's host query") -> CpuSpec:
    """The CpuSpec a host with this LLVM name and feature map builds for (tests simulate
    hosts by calling it with a name and map of their own)."""
    return CpuSpec(name, edits_for_host(name, host_features), source)


def lacking_here(cpu: CpuSpec) -> list:
    """The features ``cpu`` builds with that this machine's OS does not enable (probed): a
    kernel built for it may stop at its first instruction of one with SIGILL. Empty for the
    probed host itself, and for any CPU whose features this host has."""
    host = probe_host()[1]
    vector = [f for family in _VECTOR_FAMILIES for f in family]     # named first: what kernels use
    return sorted((f for f in cpu.features() if f in host and not host[f]),
                  key=lambda f: (vector.index(f) if f in vector else len(vector), f))


def why_not_here(cpu: CpuSpec) -> str | None:
    """One line saying why kernels built for ``cpu`` must not run here, or None."""
    lacking = lacking_here(cpu)
    if not lacking:
        return None
    named = ", ".join(lacking[:6]) + (f" and {len(lacking) - 6} more" if len(lacking) > 6 else "")
    return f"built for {cpu.name} with {named}, which this CPU (or its OS) does not enable"


def feature_string(cpu: CpuSpec) -> str:
    """The ISA features ``cpu`` has, each spelled "+f", then the name's features switched off
    as "-f": the form compilers that read features literally need (IREE). Only features
    LLVM probes are listed (tuning flags come with the name), and no "-f" for a feature the
    CPU never had: IREE's LLVM is older than TVM's and warns about names it does not know."""
    enabled, probed = cpu.features(), probe_host()[1]
    switched_off = [edit for edit in cpu.mattr if edit.startswith("-")]
    return ",".join([f"+{f}" for f in sorted(enabled) if f in probed] + switched_off)


def parse_override(text: str) -> CpuSpec:
    """``CPU[,+feature|-feature...]`` as a CpuSpec; ValueError with a one-line reason for a
    CPU LLVM does not know or a feature it would ignore."""
    name, *edits = [part.strip() for part in text.split(",")]
    where = f"{OVERRIDE_VARIABLE}={text!r}"
    triple = str(tvm.target.codegen.llvm_get_system_triple())
    if not name or not tvm.target.codegen.llvm_is_valid_cpu(name, triple):
        raise ValueError(f"{where}: LLVM does not know the CPU {name!r} (try the name `opgen targets` prints, "
                         "or x86-64-v2, x86-64-v3, x86-64-v4)")
    bad = [e for e in edits if len(e) < 2 or e[0] not in "+-"]
    if bad:
        raise ValueError(f"{where}: a feature edit is +name or -name, not {bad[0]!r}")
    spec = CpuSpec(name, tuple(edits), f"set by {OVERRIDE_VARIABLE}")
    enabled, known = spec.features(), set(probe_host()[1]) | _enabled_features(name, ())
    unknown = [e for e in edits if (e[0] == "+" and e[1:] not in enabled) or (e[0] == "-" and e[1:] not in known)]
    if unknown:
        raise ValueError(f"{where}: LLVM does not know the feature {unknown[0][1:]!r}")
    return spec


@functools.lru_cache(maxsize=None)
def _resolve(override: str | None) -> CpuSpec:
    if override:
        return parse_override(override)
    name, features = probe_host()
    if not features:
        return CpuSpec(name, (), "LLVM cannot query this host's features: the name's are used")
    return for_host(name, features)


def current() -> CpuSpec:
    """The CPU the llvm target builds for in this process: ``OPGEN_LLVM_TARGET``, else the
    probed host. ValueError (one line) for an override LLVM cannot use."""
    return _resolve(os.environ.get(OVERRIDE_VARIABLE) or None)


def problem() -> str | None:
    """Why the llvm target cannot build (a bad override), or None."""
    try:
        current()
    except ValueError as err:
        return str(err)
    return None
