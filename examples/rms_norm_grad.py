"""The aclnnRmsNormGrad example of the seed documentation (000), ported line by line.

C's out-parameters come back as tuples (``ret, stream = aclrtCreateStream()``,
``ret, addr = aclrtMalloc(size, policy)``, ``ret, workspaceSize, executor =
aclnnRmsNormGradGetWorkspaceSize(...)``); everything else keeps its C name and order.
Run: python examples/rms_norm_grad.py
"""
import sys

import numpy as np

from opgen import acl, aclnn
from opgen.acl import ACL_SUCCESS

from acl_sample import CHECK_RET, LOG_PRINT, GetShapeSize, Init, tensor_creator


CreateAclTensor = tensor_creator(acl.ACL_FORMAT_NCDHW)


def main():
    # 1. (Boilerplate) Initialize the device/stream. See the ACL API manual.
    deviceId = 0
    ret, stream = Init(deviceId)
    if CHECK_RET(ret == 0, lambda: LOG_PRINT("Init acl failed. ERROR: %d\n", ret)):
        return ret
    # 2. Construct the input and output.
    gradInputShape = [2, 1, 16]
    xInputShape = [2, 1, 16]  # noqa: F841 (kept from the C program)
    rstdInputShape = [2]  # noqa: F841
    gammaInputShape = [16]
    dxOutputShape = [2, 1, 16]  # noqa: F841
    dgammaOutputShape = [16]  # noqa: F841

    gradInputHostData = list(range(1, 33))
    xInputHostData = list(range(1, 33))
    rstdInputHostData = [1, 2]
    gammaInputHostData = list(range(1, 17))
    dxOutHostData = list(range(1, 33))
    dgammaOutHostData = list(range(1, 17))

    output1SizeData = [2, 1, 16]
    output2SizeData = [16]
    input1SizeData = [2, 1, 16]
    input2SizeData = [2]
    input3SizeData = [16]

    ret, gradInputDeviceAddr, gradInput = CreateAclTensor(gradInputHostData, input1SizeData, acl.ACL_FLOAT)
    if CHECK_RET(ret == ACL_SUCCESS, lambda: None):
        return ret
    ret, xInputDeviceAddr, xInput = CreateAclTensor(xInputHostData, input1SizeData, acl.ACL_FLOAT)
    if CHECK_RET(ret == ACL_SUCCESS, lambda: None):
        return ret
    ret, rstdInputDeviceAddr, rstdInput = CreateAclTensor(rstdInputHostData, input2SizeData, acl.ACL_FLOAT)
    if CHECK_RET(ret == ACL_SUCCESS, lambda: None):
        return ret
    ret, gammaInputDeviceAddr, gammaInput = CreateAclTensor(gammaInputHostData, input3SizeData, acl.ACL_FLOAT)
    if CHECK_RET(ret == ACL_SUCCESS, lambda: None):
        return ret
    ret, dxOutDeviceAddr, dxOut = CreateAclTensor(dxOutHostData, output1SizeData, acl.ACL_FLOAT)
    if CHECK_RET(ret == ACL_SUCCESS, lambda: None):
        return ret
    ret, dgammaOutDeviceAddr, dgammaOut = CreateAclTensor(dgammaOutHostData, output2SizeData, acl.ACL_FLOAT)
    if CHECK_RET(ret == ACL_SUCCESS, lambda: None):
        return ret

    # 3. Call the CANN operator library API.
    # Call the first-phase API of aclnnRmsNormGrad.
    ret, workspaceSize, executor = aclnn.aclnnRmsNormGradGetWorkspaceSize(
        gradInput, xInput, rstdInput, gammaInput, dxOut, dgammaOut)
    if CHECK_RET(ret == ACL_SUCCESS, lambda: LOG_PRINT("aclnnRmsNormGradGetWorkspaceSize failed. ERROR: %d\n", ret)):
        return ret
    # Apply for device memory based on the workspaceSize calculated by the first-phase API.
    workspaceAddr = None
    if workspaceSize > 0:
        ret, workspaceAddr = acl.aclrtMalloc(workspaceSize, acl.ACL_MEM_MALLOC_HUGE_FIRST)
        if CHECK_RET(ret == ACL_SUCCESS, lambda: LOG_PRINT("allocate workspace failed. ERROR: %d\n", ret)):
            return ret
    # Call the second-phase API of aclnnRmsNormGrad.
    ret = aclnn.aclnnRmsNormGrad(workspaceAddr, workspaceSize, executor, stream)
    if CHECK_RET(ret == ACL_SUCCESS, lambda: LOG_PRINT("aclnnRmsNormGrad failed. ERROR: %d\n", ret)):
        return ret
    # 4. (Boilerplate) Wait for task execution to complete synchronously.
    ret = acl.aclrtSynchronizeStream(stream)
    if CHECK_RET(ret == ACL_SUCCESS, lambda: LOG_PRINT("aclrtSynchronizeStream failed. ERROR: %d\n", ret)):
        return ret
    # 5. Obtain the output value and copy the result from the device-side memory to the host side.
    size_dx = GetShapeSize(gradInputShape)
    resultData1 = np.zeros(size_dx, dtype=np.float32)
    ret = acl.aclrtMemcpy(resultData1, resultData1.size * resultData1.itemsize, dxOutDeviceAddr, size_dx * 4,
                          acl.ACL_MEMCPY_DEVICE_TO_HOST)
    if CHECK_RET(ret == ACL_SUCCESS, lambda: LOG_PRINT("copy result from device to host failed. ERROR: %d\n", ret)):
        return ret
    for i in range(size_dx):
        LOG_PRINT("result[%ld] is: %f\n", i, resultData1[i])
    size_dgamma = GetShapeSize(gammaInputShape)
    resultData2 = np.ones(size_dgamma, dtype=np.float32)
    ret = acl.aclrtMemcpy(resultData2, resultData2.size * resultData2.itemsize, dgammaOutDeviceAddr,
                          size_dgamma * 4, acl.ACL_MEMCPY_DEVICE_TO_HOST)
    if CHECK_RET(ret == ACL_SUCCESS, lambda: LOG_PRINT("copy result from device to host failed. ERROR: %d\n", ret)):
        return ret
    for i in range(size_dgamma):
        LOG_PRINT("result[%ld] is: %f\n", i, resultData2[i])

    # 6. Release aclTensor and aclScalar.
    acl.aclDestroyTensor(gradInput)
    acl.aclDestroyTensor(xInput)
    acl.aclDestroyTensor(rstdInput)
    acl.aclDestroyTensor(gammaInput)
    acl.aclDestroyTensor(dxOut)
    acl.aclDestroyTensor(dgammaOut)

    # 7. Release device resources.
    acl.aclrtFree(gradInputDeviceAddr)
    acl.aclrtFree(xInputDeviceAddr)
    acl.aclrtFree(rstdInputDeviceAddr)
    acl.aclrtFree(gammaInputDeviceAddr)
    acl.aclrtFree(dxOutDeviceAddr)
    acl.aclrtFree(dgammaOutDeviceAddr)

    if workspaceSize > 0:
        acl.aclrtFree(workspaceAddr)
    acl.aclrtDestroyStream(stream)
    acl.aclrtResetDevice(deviceId)
    acl.aclFinalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
