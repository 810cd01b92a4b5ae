"""Ascend hardware descriptions: data, one per product; a new NPU is a new entry.

The schedule (schedules/ascend.py) derives every tiling decision from these numbers and
the emulation enforces them, so nothing else in opgen hard-codes a UB size or a core
count. Sources (public, named next to each number below): asc-devkit's
kernel_utils_constants.h and platform code, and CANN's platform ini files (public copies in
hicann/pypto). hicann/ops-nn's tiling unit tests are not product specs: each inlines a fake
``hardware_info`` fixture. Its A2 fixtures have UB 196608 with CORE_NUM 40 in
norm/rms_norm_grad/tests/ut/op_host/test_rms_norm_grad_tiling.cpp and 48 in
norm/group_norm_grad/tests/ut/op_host/test_group_norm_grad_tiling.cpp; its arch35 (Ascend 950)
fixtures have CORE_NUM 64 with UB_SIZE 245760, a test value: the 950 platform ini says
253952 (256 KB less CANN's 8 KB reserve), which is what the description below uses.

* UB bytes: Atlas A2/A3 (910B, 910_93) 192 KB; Atlas inference (310P) and Atlas
  training (910) 256 KB; Ascend 950 248 KB. CANN's platform code hands tiling 256 B less
  on A2/A3 (196352): ``ub_reserve_bytes``; the budget uses what is left.
* Vector cores are per SKU and not published in one table (A2: 40 or 48; 950: 56 or 64),
  so the count is a field with a per-product default and an override:
  ``describe(product, vector_cores=N)`` or the environment variable OPGEN_ASCEND_CORES.
* Block 32 B (UB addresses and DataCopy lengths), repeat 256 B (one vector instruction
  iteration), at most 255 repeats per call, at most 64 TQue/TBuf buffers per TPipe, at
  most 4095 bursts (rows) per strided copy.
* DataCopyPad does not exist on the Atlas training and Atlas inference AI cores: there
  DataCopy moves whole 32-byte blocks, so a ragged row needs another plan.
* ``timing`` (``PipeTiming``): the emulation's pipe-level timing model's costs (clock, DMA
  bandwidths and latency, the aggregate GM bandwidth, vector cycles per repeat, scalar, event,
  barrier and SyncAll costs); Atlas A2's come from timing_constants.py, one table with each
  constant's source or assumed range (docs/ascend-timing.md);
  ``reduce_across_tree``: how ReduceSum's count form adds its repeats' partials.
* ``vector_dtypes``: what the vector unit computes in; ``storage_dtypes``: what may live in
  GM/UB and be cast (bfloat16 is storage-only: cast to float32 with round-to-nearest-even
  on the way back; int32 is read as a scalar or cast to float32, int8 is stored from half:
  asc-devkit docs/api/context/Cast.md's table of the A2 vector Cast's type pairs).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace

from .timing_constants import A2 as A2_CONSTANTS, ASSUMED, a2

CORES_ENV = "OPGEN_ASCEND_CORES"


@dataclass(frozen=True)
class PipeTiming:
    """The emulation's timing-model parameters for one product (emu_timing.h's TimingParams,
    same order): cycles, and bytes per cycle of one vector core. Atlas A2's values are the rows
    of timing_constants.A2 (docs/ascend-timing.md: each with its public source, or marked
    assumed with the range it could take); ``assumed`` names the fields no public source pins
    for the product."""

    clock_hz: float = a2("clock_hz")                          # docs/ascend-timing.md row clock_hz
    mte2_bytes_per_cycle: float = a2("mte2_bytes_per_cycle")  # row mte2_bytes_per_cycle (assumed)
    mte3_bytes_per_cycle: float = a2("mte3_bytes_per_cycle")  # row mte3_bytes_per_cycle (assumed)
    dma_latency: float = a2("dma_latency")                    # row dma_latency (assumed)
    gm_bytes_per_cycle: float = a2("gm_bytes_per_cycle")      # row gm_bytes_per_cycle (assumed)
    vec_head: float = a2("vec_head")                          # row vec_head
    vec_simple_elems: float = a2("vec_simple_elems")          # row vec_simple_elems (assumed)
    vec_slow_elems: float = a2("vec_slow_elems")              # row vec_slow_elems
    vec_cast_elems: float = a2("vec_cast_elems")              # row vec_cast_elems (assumed)
    vec_reduce_cycles: float = a2("vec_reduce_cycles")        # row vec_reduce_cycles (assumed)
    scalar_cycles: float = a2("scalar_cycles")                # row scalar_cycles
    gm_scalar_cycles: float = a2("gm_scalar_cycles")          # row gm_scalar_cycles (assumed)
    event_cycles: float = a2("event_cycles")                  # row event_cycles (assumed)
    barrier_cycles: float = a2("barrier_cycles")              # row barrier_cycles (assumed)
    sync_all_cycles: float = a2("sync_all_cycles")            # row sync_all_cycles (assumed)
    assumed: tuple = tuple(c.field for c in A2_CONSTANTS if c.basis == ASSUMED)

    def params(self) -> tuple:
        """The values opgen_emu_set_timing takes, in TimingParams' order."""
        return tuple(float(getattr(self, f)) for f in self.__dataclass_fields__ if f != "assumed")

    @property
    def gm_bytes_per_second(self) -> float:
        return self.gm_bytes_per_cycle * self.clock_hz


_NOT_PUBLIC = ("clock_hz (not public)", "gm_bytes_per_cycle (not public)",
               "mte2/mte3 bytes per cycle (A2's measured curves)")
A2_TIMING = PipeTiming()
# 950DT ini: 80 B/cycle x 32 AI cores x 1.65 GHz = 4.2 TB/s (announced 4 TB/s); per-core DMA rates
# of the 950 are in msKPP's tables but not transcribed: A2's stay, named as assumed.
A950_TIMING = PipeTiming(clock_hz=1.65e9, gm_bytes_per_cycle=80 * 32,
                         assumed=("mte2/mte3 bytes per cycle (A2's)", "gm_scalar_cycles", "barrier_cycles",
                                  "sync_all_cycles"))
# Atlas inference (310P) and training (910): no public clock or bandwidth; the analytic cost
# model's assumptions (costmodel.ASSUMED: 0.2 TB/s at 1.0 GHz, 1.2 TB/s at 1.5 GHz) stand in.
INFERENCE_TIMING = PipeTiming(clock_hz=1.0e9, gm_bytes_per_cycle=200, assumed=_NOT_PUBLIC)
TRAINING_TIMING = PipeTiming(clock_hz=1.5e9, gm_bytes_per_cycle=800, assumed=_NOT_PUBLIC)


@dataclass(frozen=True)
class AscendHardware:
    """What one Ascend product offers a vector kernel (all sizes in bytes)."""

    product: str
    soc: str
    ub_bytes: int
    vector_cores: int
    ub_reserve_bytes: int = 0
    block_bytes: int = 32
    repeat_bytes: int = 256
    max_repeats: int = 255
    max_buffers: int = 64
    max_bursts: int = 4095        # blockCount of one DataCopy/DataCopyPad: rows of a strided copy
    vector_dtypes: tuple = ("float16", "float32")
    storage_dtypes: tuple = ("float16", "bfloat16", "float32", "int32", "int8")
    data_copy_pad: bool = True
    timing: PipeTiming = A2_TIMING   # the emulation's timing model (emu_timing.h)
    # ReduceSum's count form sums its repeats' partials by a tree (the docs' method 1: Atlas
    # training, Atlas inference), not in sequence (method 2: A2/A3); emulated to the bit.
    reduce_across_tree: bool = False

    def __post_init__(self):
        if self.vector_cores < 1:
            raise ValueError(f"{self.product}: vector_cores must be >= 1, got {self.vector_cores}")
        if self.ub_bytes <= self.ub_reserve_bytes or self.ub_bytes % self.block_bytes:
            raise ValueError(f"{self.product}: bad UB size {self.ub_bytes} (reserve {self.ub_reserve_bytes})")

    @property
    def usable_ub_bytes(self) -> int:
        """The UB a kernel's buffers may take: what tiling sees after the platform's reserve."""
        return self.ub_bytes - self.ub_reserve_bytes

    def align(self, nbytes: int) -> int:
        """``nbytes`` rounded up to whole 32-byte blocks (UB addresses and copy lengths)."""
        return -(-nbytes // self.block_bytes) * self.block_bytes

    def elements_per_block(self, itemsize: int) -> int:
        return self.block_bytes // itemsize

    def elements_per_repeat(self, itemsize: int) -> int:
        return self.repeat_bytes // itemsize

    def with_cores(self, vector_cores: int) -> "AscendHardware":
        """The same product with another SKU's core count."""
        return replace(self, vector_cores=int(vector_cores))

    def summary(self) -> str:
        pad = "DataCopyPad" if self.data_copy_pad else "no DataCopyPad"
        return (f"{self.product} ({self.soc}): {self.vector_cores} vector cores, UB {self.ub_bytes} B "
                f"({self.usable_ub_bytes} usable), {pad}")


_A2_A3_UB = 196608
DESCRIPTIONS = {
    "AtlasA2": AscendHardware("AtlasA2", "Ascend910B", _A2_A3_UB, 48, ub_reserve_bytes=256),
    "AtlasA3": AscendHardware("AtlasA3", "Ascend910_93", _A2_A3_UB, 48, ub_reserve_bytes=256),
    "Ascend950": AscendHardware("Ascend950", "Ascend950", 253952, 64, timing=A950_TIMING),
    "AtlasInference": AscendHardware("AtlasInference", "Ascend310P", 262144, 8,
                                     storage_dtypes=("float16", "float32"), data_copy_pad=False,
                                     timing=INFERENCE_TIMING, reduce_across_tree=True),
    "AtlasTraining": AscendHardware("AtlasTraining", "Ascend910", 262144, 32,
                                    storage_dtypes=("float16", "float32"), data_copy_pad=False,
                                    timing=TRAINING_TIMING, reduce_across_tree=True),
}


def describe(product: str, vector_cores: int | None = None) -> AscendHardware:
    """The description of ``product``; ``vector_cores`` (else $OPGEN_ASCEND_CORES) overrides
    the product's default core count (another SKU of the same product)."""
    try:
        hw = DESCRIPTIONS[product]
    except KeyError:
        raise KeyError(f"no Ascend description for product {product!r}; known: {sorted(DESCRIPTIONS)}") from None
    cores = vector_cores if vector_cores is not None else os.environ.get(CORES_ENV)
    return hw.with_cores(int(cores)) if cores not in (None, "") else hw
