"""aclnnBatchNormReduce: the math in TE and what a kernel sees: tensors, dtype combos, problem sizes.

The formulas and stage names are in the package docstring (opgen.ops.batch_norm_reduce).

Canonical form: the kernel sees x as (N, C, HW), a reshape of the caller's memory, never a
transpose. NCHW (and an untagged 4-D tensor, read as NCHW as CANN's harness tags it): N the
batch, C axis 1, HW = H x W. NHWC (the op_api's second format): the channel is the last axis,
so N = N x H x W and HW = 1: the same kernel sums the same elements.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from opgen.dtypes import BFLOAT16, FLOAT16, FLOAT32, numpy_dtype
from opgen.lazy import te
from opgen.ops.batch_norm_backward.kernel import _per_channel_sum
from opgen.ops.spec import ChannelProblem, DtypeCombo, as_float32

STAGE = "batch_norm_reduce"
INPUTS = ("x",)
OUTPUTS = ("sum", "square_sum")


def _combo(io: str) -> DtypeCombo:
    """x in ``io``; sum and squareSum FLOAT32 whatever x is (the document's table). Tag: x's
    dtype then the outputs' (``f16-f32``)."""
    return DtypeCombo((("x", io), ("sum", FLOAT32), ("square_sum", FLOAT32)), key_tensors=("x", "sum"))


F32, F16, BF16 = _combo(FLOAT32), _combo(FLOAT16), _combo(BFLOAT16)
COMBOS = (F32, F16, BF16)
# The document's table: x FLOAT32/FLOAT16/BFLOAT16, sum and squareSum FLOAT32, on the Ascend
# 950 and Atlas A2/A3; Atlas training, Atlas inference and 200I/500 A2 do not offer it.
PRODUCTS = {"Ascend950": COMBOS, "AtlasA3": COMBOS, "AtlasA2": COMBOS}


def compute(combo: DtypeCombo) -> list[te.Tensor]:
    """TE over symbolic (N, C, HW); returns x then sum and square_sum."""
    n, c, hw = (te.var(v, "int64") for v in ("N", "C", "HW"))
    x = te.placeholder((n, c, hw), combo["x"], name="x")
    f32 = as_float32
    total = _per_channel_sum(f"{STAGE}_total", n, c, hw, lambda a, ci, i: f32(x[a, ci, i]))
    squares = _per_channel_sum(f"{STAGE}_squares", n, c, hw, lambda a, ci, i: f32(x[a, ci, i]) * f32(x[a, ci, i]))
    out_sum = te.compute((c,), lambda ci: total[ci].astype(combo["sum"]), name=f"{STAGE}_sum")
    out_square_sum = te.compute((c,), lambda ci: squares[ci].astype(combo["square_sum"]), name=f"{STAGE}_square_sum")
    return [x, out_sum, out_square_sum]


@dataclass(frozen=True)
class Problem(ChannelProblem):
    """One call: x's shape and whether its channel is the last axis (an NHWC-tagged x).

    Spelling (every tool's ``--shape``): x's shape joined by ``x``, then ``,nhwc`` for a
    channel-last x, e.g. ``32x64x56x56`` or ``32x56x56x64,nhwc``.
    """

    x_shape: tuple[int, ...]
    channel_last: bool = False

    @classmethod
    def parse(cls, text: str) -> "Problem":
        words = [w.strip() for w in str(text).strip().strip("()").split(",")]
        try:
            shape = tuple(int(d) for d in words[0].lower().split("x"))
        except ValueError:
            raise ValueError(f"cannot read {text!r} as {cls.__name__}.x_shape: expected integers joined by 'x' "
                             f"(x's shape, e.g. 32x64x56x56)") from None
        extra = [w.lower() for w in words[1:]]
        if any(w not in ("nhwc", "channel_last") for w in extra):
            raise ValueError(f"cannot read {text!r} as {cls.__name__}: the only option is nhwc")
        if len(shape) < 2:
            raise ValueError(f"cannot read {text!r} as {cls.__name__}: x needs at least 2 dimensions (N, C)")
        return cls(shape, bool(extra))

    def label(self) -> str:
        return "x".join(map(str, self.x_shape)) + (",nhwc" if self.channel_last else "")

    def __str__(self) -> str:
        return f"x{list(self.x_shape)}" + (" channel-last" if self.channel_last else "")


def kernel_shapes(problem: Problem) -> dict:
    """The kernel's (N, C, HW) / (C,) shape of each tensor."""
    return {"x": (problem.N, problem.C, problem.HW), "sum": (problem.C,), "square_sum": (problem.C,)}


def output_shapes(problem: Problem) -> dict:
    """The outputs a caller allocates: two (C,) vectors."""
    return {name: (problem.C,) for name in OUTPUTS}


def random_inputs(problem: Problem, combo: DtypeCombo, rng: np.random.Generator) -> dict:
    """x as a BatchNorm's input: a mean away from zero (so that squareSum is not sum's
    square's scale alone) and a spread of 2."""
    x = rng.standard_normal(problem.x_shape) * 2.0 + 0.5
    return {"x": x.astype(numpy_dtype(combo["x"]))}


def kernel_args(problem: Problem, arrays: dict) -> dict:
    """View user-shaped arrays in the kernel's (N, C, HW) / (C,) shapes."""
    shapes = kernel_shapes(problem)
    return {name: np.reshape(a, shapes[name]) for name, a in arrays.items() if name in shapes}
