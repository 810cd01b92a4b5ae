"""The Pythonic layer: call an op like a function, get its outputs, or an AclnnError.

Built on the aclnn layer (same validation, same kernels): it derives what the aclnn
signature wants from the tensors (GroupNorm's N, C, HxW), allocates the outputs that are
not given (numpy arrays, or torch tensors when the data input is one) and runs both
phases with a workspace from aclrtMalloc. Outputs that are given are written in place.
"""
from __future__ import annotations

import math

import numpy as np

from opgen import acl
from opgen.apispec import ACLNN_ERR_PARAM_INVALID, STATUS_NAMES, ArgError
from opgen.dtypes import numpy_dtype
from opgen.tensorarg import describe


class AclnnError(RuntimeError):
    """An aclnn call returned ``status`` (non-zero); ``message`` says why."""

    def __init__(self, status: int, message: str):
        super().__init__(f"{STATUS_NAMES.get(status, status)} ({status}): {message}")
        self.status = status
        self.message = message


def _info(name: str, obj):
    try:
        return describe(name, obj)
    except ArgError as err:
        raise AclnnError(err.status, err.message) from None


def _alloc(template, shape, dtype: str):
    """A zeroed output in the template's library (torch or numpy)."""
    if type(template).__module__.startswith("torch"):
        import torch

        return torch.zeros(tuple(shape), dtype=getattr(torch, dtype))
    try:
        return np.zeros(shape, numpy_dtype(dtype))
    except KeyError:
        return np.zeros(shape, np.dtype(dtype))


def run_aclnn(aclnn_name: str, **args) -> None:
    """Both phases of ``aclnn_name`` with ``args``; raises AclnnError on a non-zero status."""
    from opgen import aclnn

    status, size, executor = getattr(aclnn, f"{aclnn_name}GetWorkspaceSize")(**args)
    if status:
        raise AclnnError(status, acl.aclGetRecentErrMsg())
    workspace = None
    if size:
        ret, workspace = acl.aclrtMalloc(size, acl.ACL_MEM_MALLOC_HUGE_FIRST)
        if ret:
            raise AclnnError(ret, acl.aclGetRecentErrMsg())
    try:
        status = getattr(aclnn, aclnn_name)(workspace, size, executor, None)
    finally:
        if workspace is not None:
            acl.aclrtFree(workspace)
    if status:
        raise AclnnError(status, acl.aclGetRecentErrMsg())


def rms_norm_grad(dy, x, rstd, gamma, *, dx=None, dgamma=None):
    """(dx, dgamma) of RmsNorm: dx like dy, dgamma float32 shaped like gamma."""
    d, g = _info("dy", dy), _info("gamma", gamma)
    if dx is None and d is not None:
        dx = _alloc(dy, d.shape, d.dtype)
    if dgamma is None and g is not None:
        dgamma = _alloc(dy, g.shape, "float32")
    run_aclnn("aclnnRmsNormGrad", dy=dy, x=x, rstd=rstd, gamma=gamma, dxOut=dx, dgammaOut=dgamma)
    return dx, dgamma


def group_norm_backward(grad_out, input, mean, rstd, gamma, group, output_mask=(True, True, True), *,
                        grad_input=None, grad_gamma=None, grad_beta=None):
    """(grad_input, grad_gamma, grad_beta) of GroupNorm over input (N, C, *); a masked-off
    output is None. N, C and HxW come from input's shape; gamma may be None (ones)."""
    x, d, m = _info("input", input), _info("grad_out", grad_out), _info("mean", mean)
    if x is not None and x.ndim < 2:
        raise AclnnError(ACLNN_ERR_PARAM_INVALID, f"input has shape {x.shape}; expected (N, C, ...)")
    n, c, hw = (x.shape[0], x.shape[1], math.prod(x.shape[2:])) if x is not None else (0, 0, 0)
    mask = tuple(output_mask)
    want = [len(mask) > i and bool(mask[i]) for i in range(3)]
    stat = m.dtype if m is not None else "float32"
    gshape = _info("gamma", gamma).shape if gamma is not None else (c,)
    if grad_input is None and want[0] and d is not None:
        grad_input = _alloc(grad_out, d.shape, d.dtype)
    if grad_gamma is None and want[1]:
        grad_gamma = _alloc(grad_out, gshape, stat)
    if grad_beta is None and want[2]:
        grad_beta = _alloc(grad_out, gshape, stat)
    run_aclnn("aclnnGroupNormBackward", gradOut=grad_out, input=input, mean=mean, rstd=rstd, gamma=gamma,
              N=n, C=c, HxW=hw, group=group, outputMask=mask, gradInput=grad_input,
              gradGammaOut=grad_gamma, gradBetaOut=grad_beta)
    return tuple(out if w else None for out, w in zip((grad_input, grad_gamma, grad_beta), want))
