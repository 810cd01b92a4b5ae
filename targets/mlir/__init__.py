"""The MLIR path: opgen's TE stages printed as MLIR for compilers that schedule for themselves.

Shared by the targets iree-cpu, iree-cuda (``targets/iree_*.py``) and ascend-mlir
(``targets/ascend_mlir.py``); docs/mlir.md describes both lowerings and what was measured.

* ``stages``: the stage graph read off an unscheduled PrimFunc (what both printers print);
* ``text``, ``exprs``: MLIR types, constants, sizes, and TIR expressions as arith/math;
* ``linalg``: one ``linalg.generic`` per stage (IREE's input);
* ``named``: whole-tensor named ops split by pattern into the kernels bishengir can fuse;
* ``iree``, ``bishengir``: driving the two compilers (and IREE's runtime);
* ``replay``: what bishengir accepted, back in upstream linalg, run on IREE (its numbers).

Nothing here names an op (tests/test_mlir.py checks); no module defines a TARGET.
"""
