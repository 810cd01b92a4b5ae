"""``ascend-mlir``: the op's TE stages as HFusion named ops, lowered by Huawei's bishengir.

The second Ascend path, next to ``ascend-emu``'s AscendC: the same formulas printed as the
MLIR that AscendNPU-IR's ``bishengir-compile`` (pip ``ascendnpu-ir``, the compiler under
triton-ascend) accepts, split by pattern into the kernels it can fuse
(targets/mlir/named.py). bishengir tiles, buffers and synchronises them itself: no
schedule rules of opgen's own. Here it runs up to HIVM (the final ``hivmc`` step ships
with the CANN toolkit); nothing executes, so ``opgen generate`` reports BUILT rows whose
note says how far each kernel got. The SoC bishengir targets follows the product
(``for_product``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from opgen.lazy import tvm
from opgen.targets.mlir import bishengir, named
from opgen.targets.mlir.stages import UnsupportedStage, stage_graph
from opgen.targets.spec import MODEL, TargetSpec

# bishengir's --target per opgen product: a SoC of each family its --target list names
# (910B1 for Atlas A2, 910_9391 for A3, 950PR for the 950). The registered target is A2's:
# the 950 goes through bishengir's separate "-a5" binaries, which this target does not drive.
SOCS = {"Ascend950": "Ascend950PR_9579", "AtlasA3": "Ascend910_9391", "AtlasA2": "Ascend910B1"}


class NamedModule:
    """The kernels of one op in named-op MLIR, and bishengir's report on each."""

    def __init__(self, symbol: str, kernels: list, reports: list):
        self.symbol, self.kernels, self.reports = symbol, kernels, reports

    def __getitem__(self, symbol: str):
        raise RuntimeError(f"{symbol}: ascend-mlir kernels are compiled only (no Ascend device here)")

    @property
    def text(self) -> str:
        return "\n".join(f"// kernel {name}\n{text}" for name, text in self.kernels)


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

    def run_place(self) -> str:
        last = "a device binary" if bishengir.hivmc_present() else "HIVM (hivmc, from the CANN toolkit, is not here)"
        return f"compiled only: bishengir for {self.soc} up to {last}"

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
            graph = stage_graph(func)
            parts = named.kernels(graph)
            kernels, reports = self._compile(gvar.name_hint, graph, parts)
            # bishengir cannot fuse, buffer or even compile what the patterns grouped: its
            # stages one by one. Any rejection, not only its fusion and UB messages: BatchNorm's
            # per-channel chain + y crashed or miscompiled ("'arith.mulf' op operand #1 must
            # be floating-point-like") 7 runs in 8 (f32 and f16 each), where each of its
            # stages alone passed 3 runs of 3 (f32 and bf16-bf16-f32 each).
            unfused = [k for k, r in enumerate(reports) if not r.ok and len(parts[k].stages) > 1]
            if unfused:
                kernels, reports = self._split(gvar.name_hint, graph, parts, unfused, (kernels, reports))
        except UnsupportedStage as err:
            raise NotImplementedError(f"ascend-mlir: {err}") from err
        rejected = [r for r in reports if not r.ok]
        if rejected:   # NOT EMITTED with bishengir's reason (docs/mlir.md lists the open ones)
            raise NotImplementedError(f"ascend-mlir: bishengir rejected {len(rejected)} of {len(reports)} kernels; "
                                      f"{rejected[0].arch}: {rejected[0].error}")
        return NamedModule(gvar.name_hint, kernels, reports)

    def _compile(self, symbol: str, graph, parts: list) -> tuple[list, list]:
        kernels = named.print_kernels(symbol, graph, parts)
        return kernels, [bishengir.compile_kernel(name, text, self.soc) for name, text in kernels]

    def _split(self, symbol: str, graph, parts: list, unfused: list, first: tuple) -> tuple[list, list]:
        """The kernels again with the ``unfused`` ones one stage each (kernel k's stages
        named k_0, k_1, ...). The others keep their names and so their texts, and a kernel
        whose text is what ``first`` (kernels, reports) compiled keeps its report: splitting
        one kernel used to renumber and recompile them all, seconds of bishengir each."""
        labelled = [(str(k) if k not in unfused else f"{k}_{j}", piece) for k, part in enumerate(parts)
                    for j, piece in enumerate(named.one_stage_each(part) if k in unfused else [part])]
        kernels = named.print_kernels(symbol, graph, [piece for _, piece in labelled], [lab for lab, _ in labelled])
        compiled = dict(zip(first[0], first[1]))        # (name, text) -> report
        return kernels, [compiled.get(kernel) or bishengir.compile_kernel(*kernel, self.soc) for kernel in kernels]

    def source_of(self, module):
        return "kernel.mlir", module.text

    def artifacts(self, module) -> dict:
        """The HIVM module bishengir made of each kernel that reached it."""
        return {f"hivm/{r.arch}.hivm.mlir": r.hivm for r in module.reports if r.hivm}

    def compile_check(self, module, out_dir=None) -> list:
        return module.reports


TARGET = AscendMlirTarget(name="ascend-mlir",
                          description="HFusion named-op MLIR for Ascend, lowered by bishengir to HIVM (compile-only)")
