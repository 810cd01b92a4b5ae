"""Ascend hardware descriptions: data, one per product; a new NPU is a new entry.

The schedule (schedules/ascend.py) derives every tiling decision from these numbers and
the emulation enforces them, so nothing else in opgen hard-codes a UB size or a core
count. Sources (public; ../shared/ASCEND-NOTES.md lists them per product): asc-devkit's
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
* ``vector_dtypes``: what the vector unit computes in; ``storage_dtypes``: what may live in
  GM/UB and be cast (bfloat16 is storage-only: cast to float32 with round-to-nearest-even
  on the way back).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace

CORES_ENV = "OPGEN_ASCEND_CORES"


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
    storage_dtypes: tuple = ("float16", "bfloat16", "float32")
    data_copy_pad: bool = True

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
    "Ascend950": AscendHardware("Ascend950", "Ascend950", 253952, 64),
    "AtlasInference": AscendHardware("AtlasInference", "Ascend310P", 262144, 8,
                                     storage_dtypes=("float16", "float32"), data_copy_pad=False),
    "AtlasTraining": AscendHardware("AtlasTraining", "Ascend910", 262144, 32,
                                    storage_dtypes=("float16", "float32"), data_copy_pad=False),
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
