"""Writes the example golden dump beside this file: what a CANN user's dump looks like.

The outputs here come from ATen on the CPU (a stand-in: no NPU was at hand), through the
same calls as ``opgen compare --against aten``; a real dump holds the outputs of the aclnn
library on the NPU, written with aclrtMemcpy + fwrite, and the same manifest.

    python examples/golden/make_example.py && opgen compare --against examples/golden
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from opgen import baselines
from opgen.dumps import GoldenCase, write_dump

CASES = (("rms_norm_grad", "bf16-f32", "8x64", {}), ("group_norm_backward", "f16-f16", "2,16,4x4,4", {"group": 4}))


def main() -> None:
    rng = np.random.default_rng(2026)
    cases = []
    for op, tag, shape, attributes in CASES:
        problem = baselines.parse_problem(op, shape)
        inputs = baselines.random_inputs(op, tag, problem, rng)
        tensors = {k: baselines.to_torch(v) for k, v in inputs.items()}
        outputs = baselines.aten_call(op, problem, tensors)()
        as_numpy = {k: _numpy(v, inputs["x"] if k == "dx" else None) for k, v in outputs.items()}
        cases.append(GoldenCase(op, tag, problem, inputs, as_numpy, attributes))
    path = write_dump(Path(__file__).parent, cases, "ATen 2.13 CPU (stand-in for an NPU's aclnn outputs)", fmt="bin")
    print(f"wrote {path}")


def _numpy(tensor, like):
    """A torch output as numpy in its own dtype (bfloat16 through uint16)."""
    import ml_dtypes
    import torch

    if tensor.dtype == torch.bfloat16:
        return tensor.contiguous().view(torch.uint16).numpy().view(ml_dtypes.bfloat16)
    return tensor.detach().numpy().copy()


if __name__ == "__main__":
    main()
