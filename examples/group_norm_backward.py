"""The aclnnGroupNormBackward example of the seed documentation (002), ported line by line.

C's out-parameters come back as tuples (``ret, stream = aclrtCreateStream()``,
``ret, addr = aclrtMalloc(size, policy)``, ``ret, workspaceSize, executor =
aclnnGroupNormBackwardGetWorkspaceSize(...)``); everything else keeps its C name and order.
Run: python examples/group_norm_backward.py
"""
import sys

import numpy as np

from opgen import acl, aclnn
from opgen.acl import ACL_SUCCESS

from acl_sample import CHECK_RET, LOG_PRINT, GetShapeSize, Init, tensor_creator


CreateAclTensor = tensor_creator(acl.ACL_FORMAT_ND)


def main():
    # 1. (Boilerplate) Initialize the device/stream. Refer to the acl API manual.
    deviceId = 0
    ret, stream = Init(deviceId)
    if CHECK_RET(ret == 0, lambda: LOG_PRINT("Init acl failed. ERROR: %d\n", ret)):
        return ret

    # 2. Construct the input and output.
    gradOutShape = [2, 3, 4]
    inputShape = [2, 3, 4]
    meanShape = [2, 1]
    rstdShape = [2, 1]
    gammaShape = [3]
    gradInputShape = [2, 3, 4]
    gradGammaOutShape = [3]
    gradBetaOutShape = [3]
    gradOutHostData = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0,
                       13.0, 14.0, 15.0, 16.0, 17.0, 18.0, 19.0, 20.0, 21.0, 22.0, 23.0, 24.0]
    inputHostData = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0,
                     13.0, 14.0, 15.0, 16.0, 17.0, 18.0, 19.0, 20.0, 21.0, 22.0, 23.0, 24.0]
    meanHostData = [6.5, 18.5]
    rstdHostData = [0.2896827, 0.2896827]
    gammaHostData = [1.0, 1.0, 1.0]
    gradInputHostData = [0.0] * 24
    gradGammaOutHostData = [0.0, 0.0, 0.0]
    gradBetaOutHostData = [0.0, 0.0, 0.0]
    N = 2
    C = 3
    HxW = 4
    group = 1
    outputMaskData = [True, True, True]
    # Create the gradOut aclTensor.
    ret, gradOutDeviceAddr, gradOut = CreateAclTensor(gradOutHostData, gradOutShape, acl.ACL_FLOAT)
    if CHECK_RET(ret == ACL_SUCCESS, lambda: None):
        return ret
    # Create the input aclTensor.
    ret, inputDeviceAddr, input = CreateAclTensor(inputHostData, inputShape, acl.ACL_FLOAT)
    if CHECK_RET(ret == ACL_SUCCESS, lambda: None):
        return ret
    # Create the mean aclTensor.
    ret, meanDeviceAddr, mean = CreateAclTensor(meanHostData, meanShape, acl.ACL_FLOAT)
    if CHECK_RET(ret == ACL_SUCCESS, lambda: None):
        return ret
    # Create the rstd aclTensor.
    ret, rstdDeviceAddr, rstd = CreateAclTensor(rstdHostData, rstdShape, acl.ACL_FLOAT)
    if CHECK_RET(ret == ACL_SUCCESS, lambda: None):
        return ret
    # Create the gamma aclTensor.
    ret, gammaDeviceAddr, gamma = CreateAclTensor(gammaHostData, gammaShape, acl.ACL_FLOAT)
    if CHECK_RET(ret == ACL_SUCCESS, lambda: None):
        return ret

    outputMask = acl.aclCreateBoolArray(outputMaskData, len(outputMaskData))
    if CHECK_RET(outputMask is not None, lambda: None):
        return acl.ACL_ERROR_INTERNAL_ERROR
    # Create the gradInput aclTensor.
    ret, gradInputDeviceAddr, gradInput = CreateAclTensor(gradInputHostData, gradInputShape, acl.ACL_FLOAT)
    if CHECK_RET(ret == ACL_SUCCESS, lambda: None):
        return ret
    # Create the gradGammaOut aclTensor.
    ret, gradGammaOutDeviceAddr, gradGammaOut = CreateAclTensor(
        gradGammaOutHostData, gradGammaOutShape, acl.ACL_FLOAT)
    if CHECK_RET(ret == ACL_SUCCESS, lambda: None):
        return ret
    # Create the gradBetaOut aclTensor.
    ret, gradBetaOutDeviceAddr, gradBetaOut = CreateAclTensor(
        gradBetaOutHostData, gradBetaOutShape, acl.ACL_FLOAT)
    if CHECK_RET(ret == ACL_SUCCESS, lambda: None):
        return ret

    # 3. Call the CANN operator library API.
    # Call the first-phase API of aclnnGroupNormBackward.
    ret, workspaceSize, executor = aclnn.aclnnGroupNormBackwardGetWorkspaceSize(
        gradOut, input, mean, rstd, gamma, N, C, HxW, group, outputMask, gradInput, gradGammaOut, gradBetaOut)
    if CHECK_RET(ret == ACL_SUCCESS,
                 lambda: LOG_PRINT("aclnnGroupNormBackwardGetWorkspaceSize failed. ERROR: %d\n", ret)):
        return ret
    # Apply for device memory based on the workspaceSize calculated by the first-phase API.
    workspaceAddr = None
    if workspaceSize > 0:
        ret, workspaceAddr = acl.aclrtMalloc(workspaceSize, acl.ACL_MEM_MALLOC_HUGE_FIRST)
        if CHECK_RET(ret == ACL_SUCCESS, lambda: LOG_PRINT("allocate workspace failed. ERROR: %d\n", ret)):
            return ret
    # Call the second-phase API of aclnnGroupNormBackward.
    ret = aclnn.aclnnGroupNormBackward(workspaceAddr, workspaceSize, executor, stream)
    if CHECK_RET(ret == ACL_SUCCESS, lambda: LOG_PRINT("aclnnGroupNormBackward failed. ERROR: %d\n", ret)):
        return ret

    # 4. (Boilerplate) Synchronize and wait for task execution to complete.
    ret = acl.aclrtSynchronizeStream(stream)
    if CHECK_RET(ret == ACL_SUCCESS, lambda: LOG_PRINT("aclrtSynchronizeStream failed. ERROR: %d\n", ret)):
        return ret

    # 5. Obtain the output value and copy the result from the device memory to the host memory.
    size = GetShapeSize(gradInputShape)
    gradInputResultData = np.zeros(size, dtype=np.float32)
    ret = acl.aclrtMemcpy(gradInputResultData, gradInputResultData.size * gradInputResultData.itemsize, gradInputDeviceAddr, size * 4,
                          acl.ACL_MEMCPY_DEVICE_TO_HOST)
    if CHECK_RET(ret == ACL_SUCCESS, lambda: LOG_PRINT("copy result from device to host failed. ERROR: %d\n", ret)):
        return ret
    for i in range(size):
        LOG_PRINT("gradInputResultData[%ld] is: %f\n", i, gradInputResultData[i])

    size = GetShapeSize(gradGammaOutShape)
    gradGammaOutResultData = np.zeros(size, dtype=np.float32)
    ret = acl.aclrtMemcpy(gradGammaOutResultData, gradGammaOutResultData.size * gradGammaOutResultData.itemsize, gradGammaOutDeviceAddr, size * 4,
                          acl.ACL_MEMCPY_DEVICE_TO_HOST)
    if CHECK_RET(ret == ACL_SUCCESS, lambda: LOG_PRINT("copy result from device to host failed. ERROR: %d\n", ret)):
        return ret
    for i in range(size):
        LOG_PRINT("gradGammaOutResultData[%ld] is: %f\n", i, gradGammaOutResultData[i])

    size = GetShapeSize(gradBetaOutShape)
    gradBetaOutResultData = np.zeros(size, dtype=np.float32)
    ret = acl.aclrtMemcpy(gradBetaOutResultData, gradBetaOutResultData.size * gradBetaOutResultData.itemsize, gradBetaOutDeviceAddr, size * 4,
                          acl.ACL_MEMCPY_DEVICE_TO_HOST)
    if CHECK_RET(ret == ACL_SUCCESS, lambda: LOG_PRINT("copy result from device to host failed. ERROR: %d\n", ret)):
        return ret
    for i in range(size):
        LOG_PRINT("gradBetaOutResultData[%ld] is: %f\n", i, gradBetaOutResultData[i])

    # 6. Release aclTensor and aclScalar.
    acl.aclDestroyTensor(gradOut)
    acl.aclDestroyTensor(input)
    acl.aclDestroyTensor(mean)
    acl.aclDestroyTensor(rstd)
    acl.aclDestroyTensor(gamma)
    acl.aclDestroyTensor(gradInput)
    acl.aclDestroyTensor(gradGammaOut)
    acl.aclDestroyTensor(gradBetaOut)

    # 7. Release device resources.
    acl.aclrtFree(gradOutDeviceAddr)
    acl.aclrtFree(inputDeviceAddr)
    acl.aclrtFree(meanDeviceAddr)
    acl.aclrtFree(rstdDeviceAddr)
    acl.aclrtFree(gammaDeviceAddr)
    acl.aclrtFree(gradInputDeviceAddr)
    acl.aclrtFree(gradGammaOutDeviceAddr)
    acl.aclrtFree(gradBetaOutDeviceAddr)

    if workspaceSize > 0:
        acl.aclrtFree(workspaceAddr)
    acl.aclrtDestroyStream(stream)
    acl.aclrtResetDevice(deviceId)
    acl.aclFinalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
