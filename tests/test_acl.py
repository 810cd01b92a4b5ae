"""The acl runtime port: memory, copies, tensors, streams, errors."""
from __future__ import annotations

import threading

import numpy as np

from opgen import acl


def test_constants():
    assert acl.ACL_SUCCESS == 0
    assert (acl.ACL_FLOAT, acl.ACL_FLOAT16, acl.ACL_BF16) == (0, 1, 27)
    assert (acl.ACL_FORMAT_ND, acl.ACL_FORMAT_NCDHW) == (2, 30)
    assert (acl.ACL_MEMCPY_HOST_TO_DEVICE, acl.ACL_MEMCPY_DEVICE_TO_HOST) == (1, 2)
    assert acl.ACL_MEM_MALLOC_HUGE_FIRST == 0


def test_init_device_stream_lifecycle():
    assert acl.aclInit(None) == 0
    assert acl.aclrtSetDevice(0) == 0
    ret, stream = acl.aclrtCreateStream()
    assert ret == 0 and stream is not None
    assert acl.aclrtSynchronizeStream(stream) == 0
    assert acl.aclrtDestroyStream(stream) == 0
    assert acl.aclrtDestroyStream(stream) == acl.ACL_ERROR_INVALID_PARAM
    assert acl.aclrtSynchronizeStream(stream) == acl.ACL_ERROR_INVALID_PARAM
    assert acl.aclrtSetDevice(-1) == acl.ACL_ERROR_INVALID_PARAM and "deviceId" in acl.aclGetRecentErrMsg()
    assert acl.aclrtResetDevice(0) == 0
    assert acl.aclFinalize() == 0


def test_malloc_is_aligned_host_memory():
    for size in (1, 7, 100, 4096):
        ret, buf = acl.aclrtMalloc(size, acl.ACL_MEM_MALLOC_HUGE_FIRST)
        assert ret == 0 and buf.size == size
        assert buf.host.ctypes.data % 64 == 0 and buf.host.size == size
        assert acl.aclrtFree(buf) == 0
        assert acl.aclrtFree(buf) == acl.ACL_ERROR_INVALID_PARAM
    assert acl.aclrtMalloc(0)[0] == acl.ACL_ERROR_INVALID_PARAM
    assert acl.aclrtMalloc(16, 99)[0] == acl.ACL_ERROR_INVALID_PARAM


def test_memcpy_round_trip_and_kinds():
    data = np.arange(10, dtype=np.float32)
    _, buf = acl.aclrtMalloc(40)
    assert acl.aclrtMemcpy(buf, 40, data, 40, acl.ACL_MEMCPY_HOST_TO_DEVICE) == 0
    _, buf2 = acl.aclrtMalloc(40)
    assert acl.aclrtMemcpy(buf2, 40, buf, 40, acl.ACL_MEMCPY_DEVICE_TO_DEVICE) == 0
    back = np.zeros(10, np.float32)
    assert acl.aclrtMemcpy(back, 40, buf2, 40, acl.ACL_MEMCPY_DEVICE_TO_HOST) == 0
    np.testing.assert_array_equal(back, data)
    partial = np.zeros(10, np.float32)
    assert acl.aclrtMemcpy(partial, 40, buf, 8, acl.ACL_MEMCPY_DEVICE_TO_HOST) == 0
    np.testing.assert_array_equal(partial, [0, 1] + [0] * 8)
    assert acl.aclrtMemcpy(back, 40, buf, 44, acl.ACL_MEMCPY_DEVICE_TO_HOST) == acl.ACL_ERROR_INVALID_PARAM
    assert acl.aclrtMemcpy(back, 80, buf, 44, acl.ACL_MEMCPY_DEVICE_TO_HOST) == acl.ACL_ERROR_INVALID_PARAM
    assert acl.aclrtMemcpy(buf, 40, data, 40, acl.ACL_MEMCPY_DEVICE_TO_HOST) == acl.ACL_ERROR_INVALID_PARAM
    assert "dst" in acl.aclGetRecentErrMsg() or "src" in acl.aclGetRecentErrMsg()
    assert acl.aclrtMemcpy(buf, 40, data, 40, 17) == acl.ACL_ERROR_INVALID_PARAM
    host = bytearray(40)
    assert acl.aclrtMemcpy(host, 40, data, 40, acl.ACL_MEMCPY_HOST_TO_HOST) == 0
    assert np.frombuffer(host, np.float32)[9] == 9


def test_create_tensor_honours_shape_strides_offset():
    _, buf = acl.aclrtMalloc(4 * 24)
    src = np.arange(24, dtype=np.float32)
    acl.aclrtMemcpy(buf, 96, src, 96, acl.ACL_MEMCPY_HOST_TO_DEVICE)
    t = acl.aclCreateTensor([3, 2], acl.ACL_FLOAT, [1, 6], 4, acl.ACL_FORMAT_ND, [24], buf)
    np.testing.assert_array_equal(t.host_view(), src[4:].reshape(-1)[np.array([[0, 6], [1, 7], [2, 8]])])
    assert t.format_name == "ND" and t.dtype == "float32"
    c = acl.aclCreateTensor([2, 3, 4], acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_NCDHW, [2, 3, 4], buf)
    assert c.strides == (12, 4, 1) and c.format_name == "NCDHW"
    h = acl.aclCreateTensor([4], acl.ACL_FLOAT16, [1], 0, acl.ACL_FORMAT_ND, [4], buf)
    assert h.host_view().dtype == np.float16


def test_create_tensor_rejects_bad_views():
    _, buf = acl.aclrtMalloc(16)
    assert acl.aclCreateTensor([5], acl.ACL_FLOAT, [1], 0, acl.ACL_FORMAT_ND, [5], buf) is None
    assert "bytes" in acl.aclGetRecentErrMsg()
    assert acl.aclCreateTensor([4], acl.ACL_FLOAT, [1], 1, acl.ACL_FORMAT_ND, [4], buf) is None
    assert "past storage" in acl.aclGetRecentErrMsg()
    assert acl.aclCreateTensor([2], 999, [1], 0, acl.ACL_FORMAT_ND, [2], buf) is None
    assert acl.aclCreateTensor([2], acl.ACL_FLOAT, [1, 1], 0, acl.ACL_FORMAT_ND, [2], buf) is None
    assert acl.aclCreateTensor([2], acl.ACL_FLOAT, [1], 0, acl.ACL_FORMAT_ND, [2], None) is None
    empty = acl.aclCreateTensor([0, 3], acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, [0, 3], None)
    assert empty is not None and empty.host_view().shape == (0, 3)
    t = acl.aclCreateTensor([2], acl.ACL_FLOAT, None, 0, acl.ACL_FORMAT_ND, [2], buf)
    assert acl.aclDestroyTensor(t) == 0 and acl.aclDestroyTensor(t) == acl.ACL_ERROR_INVALID_PARAM


def test_bool_array():
    mask = acl.aclCreateBoolArray([True, False, True], 3)
    assert tuple(mask) == (True, False, True) and len(mask) == 3
    assert tuple(acl.aclCreateBoolArray([True, False, True], 2)) == (True, False)
    assert acl.aclCreateBoolArray([True], 5) is None


def test_error_message_is_per_thread():
    acl.aclrtFree(object())
    mine = acl.aclGetRecentErrMsg()
    seen = []
    t = threading.Thread(target=lambda: seen.append(acl.aclGetRecentErrMsg()))
    t.start()
    t.join()
    assert mine and seen == [""]
