"""``iree-cuda``: the same linalg text compiled by IREE's CUDA backend, compile-only here.

IREE lowers the stages to PTX itself (LLVM's NVPTX backend inside the compiler wheel: no
CUDA toolkit is needed to compile). Nothing runs without an NVIDIA GPU and IREE's CUDA
runtime driver, so ``opgen generate`` reports its rows BUILT: the check is that IREE
accepts and compiles every op for sm_80.
"""
from __future__ import annotations

from dataclasses import dataclass

from opgen.lazy import tvm
from opgen.targets.iree_cpu import IreeTarget


@dataclass(frozen=True)
class IreeCudaTarget(IreeTarget):
    backend: str = "cuda"
    flags: tuple = ("--iree-cuda-target=sm_80",)
    runs_here: bool = False
    peer_name: str = ""              # nothing runs: no peer in compare or bench

    def tvm_target(self):
        return tvm.target.Target({"kind": "cuda", "arch": "sm_80"})

    def hardware_key(self) -> dict:
        return {"iree_backend": self.backend, "flags": list(self.flags)}

    def dlpack_device_types(self) -> tuple[int, ...]:
        return (2,)   # kDLCUDA: tensors on an NVIDIA GPU


TARGET = IreeCudaTarget(name="iree-cuda", description="MLIR linalg compiled by IREE for CUDA sm_80 (compile-only here)")
