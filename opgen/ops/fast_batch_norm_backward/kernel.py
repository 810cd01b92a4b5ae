"""aclnnFastBatchNormBackward: the kernel is BatchNormBackward's TE (opgen.ops.batch_norm_backward.kernel)
under this op's stage names, and the dtype combos the one product that offers the op takes.

Random inputs, kernel and output shapes are BatchNormBackward's, imported: the two aclnn
functions compute the same math over the same tensors (ops-nn's op_api of both ends in the
same BatchNormGradV3 kernel on Atlas A2). The Problem is BatchNormBackward's plus ``version``,
the one attribute this op adds.
"""
from __future__ import annotations

from dataclasses import dataclass

from opgen.ops.batch_norm_backward import kernel as bnb
from opgen.ops.batch_norm_backward.kernel import (  # noqa: F401  (re-exported)
    BF16, COMBOS, F16, F32, INPUTS, OUTPUTS, kernel_args, kernel_shapes, output_shapes, random_inputs)

STAGE = "fast_batch_norm_backward"

# The document offers the op on Atlas A2 alone (aclnnFastBatchNormBackward.md l.5-24). Its
# note (l.281-283) asks weight, the statistics and the gradients in gradOut's dtype; the
# op_api checks each against the support list alone and casts them to float32 (ops-nn
# aclnn_fast_batch_norm_backward.cpp l.146-166, l.438-467): the sources win, so the A2 takes
# every mixed row opgen has kernels for, as BatchNormBackward's A2 does (its B6).
PRODUCTS = {"AtlasA2": COMBOS}


def compute(combo):
    """BatchNormBackward's TE with its stages named fast_batch_norm_backward_<stage>."""
    return bnb.compute(combo, stage=STAGE)


@dataclass(frozen=True)
class Problem(bnb.Problem):
    """BatchNormBackward's problem plus ``version`` (the aclnn attribute; CANN's op_api never
    reads it, nor does the kernel: it only travels into the call).

    Spelling: BatchNormBackward's, plus ``version=<int>``, e.g. ``32x64x56x56,version=1``;
    the channel is axis 1 (this op has no channel-last format)."""

    version: int = 0

    @classmethod
    def _option(cls, part: str, text: str) -> dict:
        word = part.strip().lower()
        if word.startswith("version="):
            try:
                return {"version": int(word[len("version="):])}
            except ValueError:
                raise ValueError(f"cannot read {part!r} in {text!r} as {cls.__name__}.version: expected an "
                                 f"integer") from None
        if word in ("nhwc", "channel_last"):
            raise ValueError(f"cannot read {part!r} in {text!r}: aclnnFastBatchNormBackward has no channel-last "
                             f"format (NC, NCL, NCHW, NCDHW, ND)")
        try:
            return super()._option(part, text)
        except ValueError:
            raise ValueError(f"cannot read {part!r} in {text!r} as a {cls.__name__} option: expected eval, train, "
                             f"eps=<number> or version=<int>") from None

    def label(self) -> str:
        return super().label() + (f",version={self.version}" if self.version else "")

    def __str__(self) -> str:
        return super().__str__() + (f" version={self.version}" if self.version else "")
