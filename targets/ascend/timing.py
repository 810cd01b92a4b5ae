"""The emulation's modelled time of one launch (emu_timing.h), as Python sees it.

``EmuKernel`` hands the product's ``PipeTiming`` to the library before each launch
(opgen_emu_set_timing) and reads the result after it (opgen_emu_last_timing) into a
``ModelledTime``: seconds, per-pipe busy fractions and the fraction of the GM-bandwidth
bound. The model, its rules and its sources are described in emu_timing.h and hardware.py.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

OUT_FIELDS = 10


@dataclass(frozen=True)
class ModelledTime:
    cycles: float
    seconds: float
    busy: dict            # pipe -> charged cycles / (cores x time)
    gm_bytes: int
    bound_seconds: float  # GM bytes / aggregate GM bandwidth
    cores: int

    @property
    def of_bound(self) -> float:
        """The GM-bandwidth bound over the modelled time (1.0: bandwidth-bound, as fast as GM allows)."""
        return self.bound_seconds / self.seconds if self.seconds else 0.0

    def summary(self) -> str:
        pipes = " ".join(f"{p} {100 * f:.0f}%" for p, f in self.busy.items())
        return (f"modelled {self.seconds * 1e6:.1f} us on {self.cores} cores, {100 * self.of_bound:.0f}% of the "
                f"GM bound; busy {pipes}")


def configure(lib, timing) -> None:
    """Give the library's launches from this thread the product's timing parameters."""
    values = timing.params()
    lib.opgen_emu_set_timing.argtypes = [ctypes.POINTER(ctypes.c_double), ctypes.c_int]
    lib.opgen_emu_set_timing((ctypes.c_double * len(values))(*values), len(values))


def last(lib) -> ModelledTime:
    """The model's result for the last launch on this thread."""
    out = (ctypes.c_double * OUT_FIELDS)()
    lib.opgen_emu_last_timing(out)
    busy = dict(zip(("MTE2", "V", "MTE3", "S"), out[2:6]))
    return ModelledTime(out[0], out[1], busy, int(out[6]), out[7], int(out[9]))
