"""``ascend-mlir``: the op's TE stages as HFusion named ops, lowered by Huawei's bishengir.

The second Ascend path, next to ``ascend-emu``'s AscendC: the same formulas printed as the
MLIR that AscendNPU-IR's ``bishengir-compile`` (pip ``ascendnpu-ir``, the compiler under
triton-ascend) accepts, split by pattern into the kernels it can fuse
(targets/mlir/named.py). bishengir tiles, buffers and synchronises them itself: no
schedule rules of opgen's own. Here it runs up to HIVM (the final ``hivmc`` step ships
with the CANN toolkit). Nothing runs on a device here; the numbers are checked on this CPU
instead: the module bishengir made of each kernel it accepted (before its tiling), turned
back into upstream linalg and run in order by IREE (targets/mlir/replay.py), compared with
the float64 reference by the same verify path as every target: ``opgen generate``'s PASS
for this target is those kernels' numbers on a CPU, not the device's. Its row also says
how many kernels the op became and their GM bytes against one pass over the op's tensors.
The SoC bishengir targets follows the product (``for_product``).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, replace

from opgen.lazy import tvm
from opgen.targets import llvm_host
from opgen.targets.mlir import bishengir, iree, named, replay
from opgen.targets.mlir.stages import UnsupportedStage, stage_graph
from opgen.targets.spec import MODEL, TargetSpec

# bishengir's --target per opgen product: a SoC of each family its --target list names
# (910B1 for Atlas A2, 910_9391 for A3, 950PR for the 950). The registered target is A2's:
# the 950 goes through bishengir's separate "-a5" binaries, which this target does not drive.
SOCS = {"Ascend950": "Ascend950PR_9579", "AtlasA3": "Ascend910_9391", "AtlasA2": "Ascend910B1"}


class NamedModule:
    """The kernels of one op in named-op MLIR, bishengir's report on each, and (on first use)
    the chain that runs what bishengir accepted on this CPU (``module[symbol]``)."""

    def __init__(self, symbol: str, kernels: list, reports: list, steps: list, graph):
        self.symbol, self.kernels, self.reports, self.steps = symbol, kernels, reports, steps
        self._graph, self._chain, self._lock = graph, None, threading.Lock()

    def __getitem__(self, symbol: str):
        if symbol != self.symbol:
            raise KeyError(f"this module holds {self.symbol}, not {symbol}")
        with self._lock:
            if self._chain is None:
                graph = self._graph
                places = {name: (buf.name, axis) for name, (buf, axis) in graph.size_vars().items()}
                self._chain = replay.Chain(self.steps, [r.hfusion for r in self.reports],
                                           tuple(b.name for b in graph.params), len(graph.inputs), places,
                                           iree.cpu_flags())
        return self._chain

    @property
    def text(self) -> str:
        return "\n".join(f"// kernel {name}\n{text}" for name, text in self.kernels)

    def traffic_note(self) -> str:
        """How many kernels, and their GM bytes against one pass over the op's tensors (of
        the largest call so far)."""
        count = f"{len(self.kernels)} kernel{'s' if len(self.kernels) > 1 else ''}"
        traffic = self._chain.traffic if self._chain is not None else None
        if not traffic or not traffic[1]:
            return count
        moved, one_pass = traffic
        return f"{count}, GM {moved / one_pass:.2f}x one pass ({moved / 1e6:.3g} MB vs {one_pass / 1e6:.3g} MB)"


@dataclass(frozen=True)
class AscendMlirTarget(TargetSpec):
    soc: str = SOCS["AtlasA2"]
    library_suffix: str = ""
    schedule_rules: str | None = None
    timer: str = MODEL

    def missing(self) -> str | None:
        return None if bishengir.compiler() else "bishengir-compile is not installed (pip install -e \".[mlir]\")"

    def can_run(self) -> bool:
        return False

    def numeric_check(self) -> str | None:
        """IREE runs what bishengir accepted on this CPU (targets/mlir/replay.py), where
        IREE is installed and the llvm target's CPU is this one."""
        if iree.iree_missing() or llvm_host.problem() or llvm_host.why_not_here(llvm_host.current()):
            return None
        return "numbers: bishengir's kernels before tiling, on this CPU through IREE (not the device)"

    def run_place(self) -> str:
        last = "a device binary" if bishengir.hivmc_present() else "HIVM (hivmc, from the CANN toolkit, is not here)"
        check = self.numeric_check()
        return f"compiled only: bishengir for {self.soc} up to {last}" + (f"; {check}" if check else "")

    def run_summary(self, module) -> str | None:
        return module.traffic_note()

    def for_product(self, product: str) -> "AscendMlirTarget":
        return replace(self, soc=SOCS.get(product, SOCS["AtlasA2"]))

    def tvm_target(self):
        return tvm.target.Target({"kind": "c"})   # TVM compiles nothing here

    def hardware_key(self) -> dict:
        return {"soc": self.soc}

    def device(self):
        return tvm.cpu(0)

    def build(self, mod):
        (gvar, func), = mod.functions.items()
        try:
            graph = named.split_narrow_stores(stage_graph(func))
            parts = named.kernels(graph)
            kernels, reports = self._compile(gvar.name_hint, graph, parts)
            # bishengir cannot fuse, buffer or even compile what the patterns grouped: its
            # stages one by one. Any settled rejection, not only its fusion and UB messages
            # (BatchNorm's per-channel statistics: "Failed to create and apply schedule", every
            # run). A flaky one splits nothing (a draw must not decide the kernels): refused below.
            unfused = [k for k, r in enumerate(reports) if not r.ok and not r.flaky and len(parts[k].stages) > 1]
            labels = None
            if unfused:
                kernels, reports, parts, labels = self._split(gvar.name_hint, graph, parts, unfused, (kernels, reports))
        except UnsupportedStage as err:
            raise NotImplementedError(f"ascend-mlir: {err}") from err
        rejected = [r for r in reports if not r.ok]
        if rejected:   # NOT EMITTED with bishengir's reason (docs/mlir.md lists the open ones)
            flaky = " (no two runs alike: flaky)" if rejected[0].flaky else ""
            raise NotImplementedError(f"ascend-mlir: bishengir rejected {len(rejected)} of {len(reports)} kernels; "
                                      f"{rejected[0].arch}: {rejected[0].error}{flaky}")
        steps = [replay.Step(name, *map(tuple, named.signature(graph, part, named.later_reads(parts, k))))
                 for k, (name, part) in enumerate(zip(named.kernel_names(gvar.name_hint, parts, labels), parts))]
        return NamedModule(gvar.name_hint, kernels, reports, steps, graph)

    def _compile(self, symbol: str, graph, parts: list) -> tuple[list, list]:
        kernels = named.print_kernels(symbol, graph, parts)
        return kernels, [bishengir.compile_kernel(name, text, self.soc) for name, text in kernels]

    def _split(self, symbol: str, graph, parts: list, unfused: list, first: tuple) -> tuple:
        """The kernels again with the ``unfused`` ones one stage each (kernel k's stages
        named k_0, k_1, ...): (kernels, reports, parts, labels). The others keep their
        names and so their texts, and a kernel whose text is what ``first`` (kernels,
        reports) compiled keeps its report: splitting one kernel used to renumber and
        recompile them all, seconds of bishengir each. Only a settled rejection splits
        (see bishengir.KernelReport.flaky), so the same text always splits the same way."""
        labelled = [(str(k) if k not in unfused else f"{k}_{j}", piece) for k, part in enumerate(parts)
                    for j, piece in enumerate(named.one_stage_each(part) if k in unfused else [part])]
        pieces, labels = [piece for _, piece in labelled], [lab for lab, _ in labelled]
        kernels = named.print_kernels(symbol, graph, pieces, labels)
        compiled = dict(zip(first[0], first[1]))        # (name, text) -> report
        reports = [compiled.get(kernel) or bishengir.compile_kernel(*kernel, self.soc) for kernel in kernels]
        return kernels, reports, pieces, labels

    def source_of(self, module):
        return "kernel.mlir", module.text

    def artifacts(self, module) -> dict:
        """The HIVM module bishengir made of each kernel that reached it."""
        return {f"hivm/{r.arch}.hivm.mlir": r.hivm for r in module.reports if r.hivm}

    def compile_check(self, module, out_dir=None) -> list:
        return module.reports


TARGET = AscendMlirTarget(name="ascend-mlir",
                          description="HFusion named-op MLIR for Ascend, lowered by bishengir to HIVM (compile-only)")
