"""The boilerplate both seed C examples define for themselves, ported once.

CHECK_RET and LOG_PRINT are the C macros; GetShapeSize, Init and CreateAclTensor the C
helper functions, with C's out-parameters returned as tuples. The two seeds differ only in
the format their CreateAclTensor passes (ACL_FORMAT_NCDHW vs ACL_FORMAT_ND), hence
``tensor_creator(format)``.
"""
import numpy as np

from opgen import acl
from opgen.acl import ACL_SUCCESS


def CHECK_RET(cond, return_expr):
    if not cond:
        return_expr()
        return True
    return False


def LOG_PRINT(message, *args):
    print(message % args, end="")


def GetShapeSize(shape):
    shape_size = 1
    for i in shape:
        shape_size *= i
    return shape_size


def Init(deviceId):
    # Boilerplate: resource initialization.
    ret = acl.aclInit(None)
    if CHECK_RET(ret == ACL_SUCCESS, lambda: LOG_PRINT("aclInit failed. ERROR: %d\n", ret)):
        return ret, None
    ret = acl.aclrtSetDevice(deviceId)
    if CHECK_RET(ret == ACL_SUCCESS, lambda: LOG_PRINT("aclrtSetDevice failed. ERROR: %d\n", ret)):
        return ret, None
    ret, stream = acl.aclrtCreateStream()
    if CHECK_RET(ret == ACL_SUCCESS, lambda: LOG_PRINT("aclrtCreateStream failed. ERROR: %d\n", ret)):
        return ret, None
    return 0, stream


def tensor_creator(tensorFormat):
    """The seed's CreateAclTensor, for the format constant its aclCreateTensor call passes."""
    return lambda hostData, shape, dataType: CreateAclTensor(hostData, shape, dataType, tensorFormat)


def CreateAclTensor(hostData, shape, dataType, tensorFormat):
    """Returns (ret, deviceAddr, tensor): C's two out-parameters."""
    hostData = np.asarray(hostData, dtype=np.float32)  # std::vector<float>
    size = GetShapeSize(shape) * hostData.itemsize
    # Call aclrtMalloc to apply for device-side memory.
    ret, deviceAddr = acl.aclrtMalloc(size, acl.ACL_MEM_MALLOC_HUGE_FIRST)
    if CHECK_RET(ret == ACL_SUCCESS, lambda: LOG_PRINT("aclrtMalloc failed. ERROR: %d\n", ret)):
        return ret, None, None
    # Copy data from the host side to the device memory.
    ret = acl.aclrtMemcpy(deviceAddr, size, hostData, size, acl.ACL_MEMCPY_HOST_TO_DEVICE)
    if CHECK_RET(ret == ACL_SUCCESS, lambda: LOG_PRINT("aclrtMemcpy failed. ERROR: %d\n", ret)):
        return ret, None, None
    # Compute strides for a contiguous tensor.
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = shape[i + 1] * strides[i + 1]
    # Call the aclCreateTensor API to create an aclTensor.
    tensor = acl.aclCreateTensor(shape, dataType, strides, 0, tensorFormat, shape, deviceAddr)
    return 0, deviceAddr, tensor
