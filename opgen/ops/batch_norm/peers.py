"""BatchNorm's peers (opgen compare, opgen bench) and the shapes the tools use.

The library side of ``opgen compare`` is ATen's hand-written ``native_batch_norm``: in
training it returns y and the batch's mean and 1/sqrt(var + eps), as this op's saveMean
and saveInvstd; in eval only y is compared (ATen's saved statistics are empty there, and
the aclnn face writes none). Its running statistics are copies with momentum 0, so they
stay as given, as opgen's kernel leaves them. ATen takes mixed dtypes only as half data
with float32 parameters and statistics, so those reach it upcast to float32 (exactly), and
its saveMean/saveInvstd come back in float32 whatever the row asks; they are rounded to the
row's statistics dtype (the dtype of the runningMean it was given), as opgen's are: a
float16 saveMean held against ATen's float32 one would measure the output's dtype, not the
kernel (opgen's f16-f32-f16 saveMean was 6632x "ATen's error": its own f16 rounding).
``opgen bench`` also times the eager ``F.batch_norm``. A channels-last problem is moved to
channels-second for ATen and back.
"""
from __future__ import annotations

from opgen.ops.spec import Cases, Peer
from opgen.peers import import_torch

_PER_CHANNEL = ("weight", "bias", "running_mean", "running_var")


def _arguments(problem, t: dict) -> tuple:
    """(x with channels second, weight, bias, running_mean, running_var) as ATen takes them."""
    x = t["x"].movedim(problem.channel_axis, 1).contiguous()
    per = [t.get(name) for name in _PER_CHANNEL]
    if any(p is not None and p.dtype != x.dtype for p in per):
        per = [None if p is None else p.float() for p in per]
    return (x, *(None if p is None else p.clone() for p in per))


def _statistics_dtype(t: dict):
    """The dtype the row asks for saveMean/saveInvstd: its runningMean's (one dtype for all
    four statistics, kernel.py's rows); None when no runningMean is given (ATen's own)."""
    given = t.get("running_mean")
    return None if given is None else given.dtype


def _native(problem, t: dict):
    torch = import_torch()
    x, weight, bias, mean, var = _arguments(problem, t)
    stat_dtype = _statistics_dtype(t)

    def run():
        y, save_mean, save_invstd = torch.native_batch_norm(x, weight, bias, mean, var, problem.training, 0.0,
                                                            problem.eps)
        out = {"y": y.movedim(1, problem.channel_axis)}
        if not problem.training:
            return out
        if stat_dtype is not None:
            save_mean, save_invstd = save_mean.to(stat_dtype), save_invstd.to(stat_dtype)
        return {**out, "save_mean": save_mean, "save_invstd": save_invstd}
    return run


def _functional(problem, t: dict):
    torch = import_torch()
    x, weight, bias, mean, var = _arguments(problem, t)

    def run():
        with torch.no_grad():
            y = torch.nn.functional.batch_norm(x, mean, var, weight, bias, problem.training, 0.0, problem.eps)
            return {"y": y.movedim(1, problem.channel_axis)}
    return run


PEERS = (
    Peer("aten", "ATen's native_batch_norm (y; saveMean, saveInvstd in training)", _native, compare=True),
    Peer("eager", "eager F.batch_norm, forward only", _functional),
)

CASES = Cases(compare=("2x16x7x9", "2x16x7x9,eval"), bench=("32x64x32x32", "32x64x56x56", "16x512x7x7"),
              quick="32x64x32x32", tiny="1x4x2x2")
