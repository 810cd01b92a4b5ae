"""The strict AscendC CPU emulation (targets/ascend/emu/kernel_operator.h).

Hand-written AscendC kernels (tests/ascend_emu_cases/) are built with g++ against the
emulation header, loaded with ctypes and launched through the documented C ABI
(opgen_emu_launch_<kernel>(block_dim, args, sizes, nargs), opgen_emu_last_error()). A correct
kernel must match numpy bit for bit where the math is exact; every injected violation must be
reported with a precise message, without taking the Python process down.

Cost: three g++ runs (run concurrently, ~10 s of CPU), then ~60 launches of small kernels
(~5 s of CPU); 30-60 s wall on the shared 2-core machine.
"""
from __future__ import annotations

import ctypes
import os
import pathlib
import re
import shutil
import subprocess

import ml_dtypes
import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
EMU = ROOT / "targets" / "ascend" / "emu"
CASES = ROOT / "tests" / "ascend_emu_cases"
CXX = shutil.which("g++")
CXXFLAGS = ["-Wall", "-Werror", "-std=c++17", "-O1", "-pthread", "-shared", "-fPIC"]

pytestmark = pytest.mark.skipif(CXX is None, reason="g++ not found: the AscendC emulation needs a C++17 compiler")

# Libraries built once per session: (source, macros). Compiled concurrently.
BUILDS = {
    "ew": ("elementwise_reduce.cpp", []),
    # Atlas training: 256 KB UB and no DataCopyPad.
    "ew_training": ("elementwise_reduce.cpp", ["-DOPGEN_NO_DATACOPYPAD", "-DOPGEN_UB_BYTES=262144"]),
    "cases": ("cases.cpp", ["-DOPGEN_VECTOR_CORES=8", "-DOPGEN_EMU_CHECK_WAR"]),
}


class EmuLib:
    """A built kernel library and its launcher ABI."""

    def __init__(self, path: pathlib.Path):
        self.lib = ctypes.CDLL(str(path))
        self.lib.opgen_emu_last_error.restype = ctypes.c_char_p
        self.lib.opgen_emu_ub_bytes.restype = ctypes.c_uint64

    def launch(self, kernel: str, block_dim: int, arrays: list) -> tuple[int, str]:
        fn = getattr(self.lib, f"opgen_emu_launch_{kernel}")
        fn.argtypes = [ctypes.c_uint32, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_uint64), ctypes.c_uint32]
        fn.restype = ctypes.c_int
        n = len(arrays)
        args = (ctypes.c_void_p * n)(*[None if a is None else a.ctypes.data for a in arrays])
        sizes = (ctypes.c_uint64 * n)(*[0 if a is None else a.nbytes for a in arrays])
        status = fn(block_dim, args, sizes, n)
        return status, self.lib.opgen_emu_last_error().decode()


def build_libs(source: pathlib.Path, builds: dict, out: pathlib.Path) -> dict[str, EmuLib]:
    """``source`` compiled once per entry of ``builds`` (name -> extra g++ flags), in parallel."""
    procs = {name: subprocess.Popen([CXX, *CXXFLAGS, f"-I{EMU}", *flags, str(source), "-o", str(out / f"{name}.so")],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for name, flags in builds.items()}
    for name, p in procs.items():
        log, _ = p.communicate()
        assert p.returncode == 0, f"g++ failed on {source.name} ({name}):\n{log[-4000:]}"
    return {name: EmuLib(out / f"{name}.so") for name in builds}


@pytest.fixture(scope="session")
def libs(tmp_path_factory) -> dict[str, EmuLib]:
    out = tmp_path_factory.mktemp("ascend_emu")
    # Build from copies that are deleted before any kernel runs: messages must not need them.
    srcdir = out / "src"
    shutil.copytree(CASES, srcdir)
    procs = {}
    for name, (src, macros) in BUILDS.items():
        cmd = [CXX, *CXXFLAGS, f"-I{EMU}", *macros, str(srcdir / src), "-o", str(out / f"{name}.so")]
        procs[name] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for name, p in procs.items():
        log, _ = p.communicate()
        assert p.returncode == 0, f"g++ failed on {BUILDS[name][0]}:\n{log[-4000:]}"
    shutil.rmtree(srcdir)
    return {name: EmuLib(out / f"{name}.so") for name in BUILDS}


# ---------------------------------------------------------------- a correct kernel matches numpy
DTYPES = {"float": np.float32, "half": np.float16, "bf16": ml_dtypes.bfloat16}


def run_ew(lib: EmuLib, dtype: str, total: int, tile: int, cores: int, rng):
    dt = DTYPES[dtype]
    x = rng.standard_normal(total).astype(dt)
    y = rng.standard_normal(total).astype(dt)
    z = np.zeros(total, dt)
    tiles = -(-total // tile)
    sums = np.zeros(tiles * 8, np.float32)
    tiling = np.array([total, tile], np.uint32)
    status, msg = lib.launch(f"ew_reduce_{dtype}", cores, [x, y, z, sums, None, tiling])
    return status, msg, x, y, z, sums.reshape(tiles, 8)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("total,tile,cores", [(1000, 256, 3), (4096, 512, 4), (7, 64, 2)])
def test_elementwise_reduce_matches_numpy(libs, rng, dtype, total, tile, cores):
    status, msg, x, y, z, sums = run_ew(libs["ew"], dtype, total, tile, cores, rng)
    assert status == 0, msg
    exact = x.astype(np.float32) * 2 + y.astype(np.float32)  # exact in float32, then one RNE cast
    bits = np.uint16 if z.itemsize == 2 else np.uint32
    np.testing.assert_array_equal(z.view(bits), exact.astype(DTYPES[dtype]).view(bits))
    for i in range(sums.shape[0]):
        ref = exact[i * tile:(i + 1) * tile].astype(np.float64).sum()
        assert abs(sums[i, 0] - ref) <= 1e-6 * np.abs(exact[i * tile:(i + 1) * tile]).sum() + 1e-30
        assert np.all(sums[i, 1:] == 0)


def test_no_datacopypad_product_rejects_datacopypad(libs, rng):
    lib = libs["ew_training"]
    assert lib.lib.opgen_emu_has_datacopypad() == 0 and libs["ew"].lib.opgen_emu_has_datacopypad() == 1
    status, msg, *_ = run_ew(lib, "half", 1000, 256, 2, rng)  # 232-element tail: 464 B, ragged
    assert status == 1
    assert "DataCopyPad GM->UB: DataCopyPad is not available on this product" in msg
    status, msg, x, y, z, _ = run_ew(lib, "half", 1024, 256, 2, rng)  # whole blocks: DataCopy only
    assert status == 0, msg
    assert np.array_equal(z, (x.astype(np.float32) * 2 + y.astype(np.float32)).astype(np.float16))


def test_ub_capacity_comes_from_the_build(libs, rng):
    # float, tile 6144: 3 queues x 2 x 24 KB + 2 x 32 B + 2 scratch x 24 KB = 196672 B (fails at yfBuf)
    assert libs["ew"].lib.opgen_emu_ub_bytes() == 196608
    assert libs["ew_training"].lib.opgen_emu_ub_bytes() == 262144
    status, msg, *_ = run_ew(libs["ew"], "float", 12288, 6144, 2, rng)
    assert status == 1 and "UB over-allocation: 196672 B > 196608 B" in msg
    for name in ("inQueueX", "inQueueY", "outQueueZ", "outQueueSum", "xfBuf", "yfBuf"):
        assert f"'{name}'" in msg
    status, msg, *_ = run_ew(libs["ew_training"], "float", 12288, 6144, 2, rng)
    assert status == 0, msg


# ---------------------------------------------------------------- cases.cpp: one mode per case
MODES = dict(OVER_UB=1, MISALIGNED_UB=2, RAGGED_DATACOPY=3, GM_OVERRUN=4, SETGLOBAL_OVERRUN=5,
             REPEAT_OVER_255=6, DEQUE_EMPTY=7, ENQUE_FULL=8, USE_AFTER_FREE=9, POISON_READ=10,
             GM_RACE=11, GM_ATOMIC=12, SYNCALL_ORDER=13, SYNCALL_MISSING=14, MISSING_PIPE_SYNC=15,
             SYNCALL_MISMATCH=16, TOO_MANY_BUFFERS=17, GETVALUE_POISON=18, REPEAT_FORMS=19,
             CAST_MODES=20, LEAK=21, PAD_BURSTS=22, SETFLAG_SYNC=23, VS_MISSING=24, SETVALUE_DMA=25,
             INIT_ATOMIC=26, REDUCE_MAX_AXPY=27, WS_UNINIT_ATOMIC=28, WS_UNINIT_READ=29, ATOMIC_LEFT_ON=30,
             GM_GETVALUE_AFTER_MTE3=31, REPEAT_STRIDE_OVERRUN=32, PARTIAL_OVERLAP=33, DOUBLE_WRITE=34,
             MASK_RANGE=35, CAST_BAD_MODE=36, HALF_FORMS=37, RESET_REUSE=38, STALE_AFTER_RESET=39,
             DATACOPY_PARAMS=40, FAIL_WHILE_OTHERS_WAIT=41, FAIL_WHILE_OTHERS_WORK=42,
             WAR_MTE3_V=43, WAR_SYNCED=44, DATACOPY_ZERO=45, DATACOPYPAD_ZERO=46,
             ALLOC_ALL_IN_USE=47, DOUBLE_FREE=48, FOREIGN_FREE=49, TBUF_GET_OVER=50, TBUF_OFFSET_MISALIGNED=51,
             SUBTENSOR_OVER=52, SETVALUE_UNFLUSHED=53, SETVALUE_FLUSHED=54,
             MTE2_OVERLAP=55, MTE2_OVERLAP_BARRIER=56, MTE3_OVERLAP=57, RAW_WORKSPACE=58,
             WRONG_EVENT=59, WRONG_EVENT_WAR=60, MTE3_V_THEN_MTE2_GM=61, VECTOR_RAW=62, VECTOR_RAW_BARRIER=63,
             VECTOR_ROWS=64, QUEUE_GETVALUE=65, QUEUE_GETVALUE_SYNCED=66, DANGLING_SETFLAG=67, COPY_TWICE=99)


def run_case(libs, mode: str, cores: int = 1, x=None, n: int = 256):
    x = np.arange(n, dtype=np.float32) if x is None else x
    out = np.zeros(12 * n, np.float32)
    ws = np.zeros(n, np.float32)
    tiling = np.array([MODES[mode], n], np.int32)
    status, msg = libs["cases"].launch("emu_case", cores, [x, out, ws, tiling])
    return status, msg, out


VIOLATIONS = [
    ("OVER_UB", 1, r"InitBuffer: UB over-allocation: 196640 B > 196608 B of UB\. Buffers: "
                   r"TQue 'qa' \(.*cases\.cpp:\d+\): 2 x 32768 B; TQue 'qb' .*: 2 x 32768 B; "
                   r"TBuf 'tmpBuf' .*: 1 x 65568 B"),
    ("TOO_MANY_BUFFERS", 1, r"would make 65 buffers; at most 64 are allowed"),
    ("MISALIGNED_UB", 1, r"DataCopy GM->UB: UB address 12 of TQue 'qi' .* is not 32-byte aligned"),
    ("RAGGED_DATACOPY", 1, r"DataCopy GM->UB: 10 elements of float = 40 B is not a multiple of 32 B"),
    ("GM_OVERRUN", 1, r"DataCopy GM->UB: GM elements \[0, 264\) beyond the GlobalTensor's 256 elements"),
    ("SETGLOBAL_OVERRUN", 1, r"SetGlobalBuffer: 264 elements of float at byte offset 0 overrun argument 0 \(1024 B\)"),
    ("REPEAT_OVER_255", 1, r"Add: repeatTimes 300 outside \[0, 255\]"),
    ("DEQUE_EMPTY", 1, r"DeQue on an empty queue TQue 'qi'"),
    ("ENQUE_FULL", 1, r"EnQue on a full queue TQue 'qi' .*\(depth 1, holds 1\)"),
    ("USE_AFTER_FREE", 1, r"Add: LocalTensor of TQue 'qi' .* used after FreeTensor"),
    ("POISON_READ", 1, r"DataCopy UB->GM: copies never-written UB data to GM: element 248 of TQue 'qo'"),
    ("GETVALUE_POISON", 1, r"LocalTensor::GetValue\(8\): reads never-written UB of TQue 'qi'"),
    ("MISSING_PIPE_SYNC", 1, r"Muls: reads TBuf 'buf' .* on pipe V \(vector\) right after a write on MTE2"),
    ("GM_RACE", 4, r"DataCopy UB->GM: GM race on argument 1 byte 0: write to bytes also written by core \d "
                   r"in the same SyncAll epoch 0"),
    # core 3 reads what core 0 writes: whichever comes first, the other access is reported; or
    # core 3 read the workspace before core 0 wrote it and stores that never-written data.
    ("SYNCALL_MISSING", 4, r"GM race on argument 2 byte 0: (read of bytes written by core 0|"
                           r"write to bytes read by core 3) in the same SyncAll epoch 0|"
                           r"core 3: DataCopy UB->GM: copies never-written UB data .* never-written workspace"),
    ("LEAK", 1, r"kernel ended with a tensor of TQue 'q' .* never freed \(missing FreeTensor\)"),
    ("VS_MISSING", 1, r"LocalTensor::GetValue: reads TBuf 'sum' .* on pipe S \(scalar\) right after a write on V"),
    ("SETVALUE_DMA", 1, r"DataCopy GM->UB: copies GM bytes this core wrote with GlobalTensor::SetValue .*"
                        r"DataCacheCleanAndInvalid"),
    ("WS_UNINIT_ATOMIC", 2, r"DataCopy UB->GM: SetAtomicAdd accumulates into workspace bytes never written"),
    ("WS_UNINIT_READ", 1, r"DataCopy UB->GM: copies never-written UB data to GM: element 0 of TQue 'qo' .*"
                          r"never-written workspace"),
    ("ATOMIC_LEFT_ON", 1, r"kernel ended with SetAtomicAdd<float> still on"),
    ("GM_GETVALUE_AFTER_MTE3", 1, r"GlobalTensor::GetValue\(1\): reads GM this core wrote by a UB->GM copy \(MTE3\)"),
    ("SYNCALL_ORDER", 9, r"SyncAll with block_dim 9 > 8 vector cores: not every core is resident"),
    ("REPEAT_STRIDE_OVERRUN", 1, r"Add: UB elements \[0, 448\) beyond the 256-element LocalTensor of TBuf 'buf'"),
    ("PARTIAL_OVERLAP", 1, r"Add: dst UB \[32, 288\) partially overlaps src UB \[0, 256\)"),
    ("DOUBLE_WRITE", 1, r"Add: writes dst element 0 twice in one instruction"),
    ("MASK_RANGE", 1, r"Add: mask 65 outside \[1, 64\]"),
    ("CAST_BAD_MODE", 1, r"Cast: CAST_NONE is not a valid RoundMode for float -> bfloat16_t \(use CAST_RINT"),
    ("STALE_AFTER_RESET", 1, r"Duplicate: LocalTensor of TBuf 'big' .* used after TPipe::Reset"),
    ("WAR_MTE3_V", 1, r"Duplicate: writes TBuf 'buf' .* on pipe V \(vector\) while pipe MTE3 \(UB->GM copy\) "
                      r"may still be reading it"),
    ("DATACOPY_ZERO", 1, r"DataCopy GM->UB: 0 elements \(the copy becomes blockLen 0, outside \[1, 65535\]\)"),
    ("ALLOC_ALL_IN_USE", 1, r"AllocTensor on TQue 'qa' .*: all 1 buffers are in use \(missing FreeTensor"),
    ("DOUBLE_FREE", 1, r"FreeTensor: tensor of TQue 'qa' .* was already freed"),
    ("FOREIGN_FREE", 1, r"FreeTensor on TQue 'qb' .*: the tensor belongs to TQue 'qa'"),
    ("TBUF_GET_OVER", 1, r"TBuf::Get<float>\(65\) on TBuf 'buf' .*: 260 B exceeds the buffer's 256 B"),
    ("TBUF_OFFSET_MISALIGNED", 1, r"TBuf::GetWithOffset on TBuf 'buf' .*: offset 16 B is not 32-byte aligned"),
    ("SUBTENSOR_OVER", 1, r"Duplicate: UB elements \[0, 16\) beyond the 8-element LocalTensor of TQue 'qa'"),
    ("SETVALUE_UNFLUSHED", 2, r"core 1: DataCopy GM->UB: reads GM that core 0 wrote with GlobalTensor::SetValue and "
                              r"did not flush \(DataCacheCleanAndInvalid\) before SyncAll"),
    ("MTE2_OVERLAP", 1, r"DataCopy GM->UB: writes UB bytes an earlier copy on the same pipe also wrote, with no "
                        r"PipeBarrier<PIPE_MTE2>"),
    ("MTE3_OVERLAP", 1, r"DataCopy UB->GM: writes GM bytes an earlier copy on the same pipe also wrote, with no "
                        r"PipeBarrier<PIPE_MTE3>"),
    ("RAW_WORKSPACE", 1, r"SetGlobalBuffer: touches CANN's reserved system workspace \(16 MB in front of the user "
                         r"workspace\): take the workspace with GetUserWorkspace\(workspace\)"),
    # Event-level ordering: a WaitFlag orders only its own destination pipe.
    ("WRONG_EVENT", 1, r"Muls: reads TBuf 'buf' .* on pipe V \(vector\) right after a write on MTE2"),
    ("WRONG_EVENT_WAR", 1, r"DataCopy GM->UB: writes TBuf 'buf' .* on pipe MTE2 \(GM->UB copy\) while pipe V "
                           r"\(vector\) may still be reading it"),
    ("MTE3_V_THEN_MTE2_GM", 1, r"DataCopy GM->UB: reads GM this core wrote by a UB->GM copy \(MTE3\)"),
    # Issue 36: dependent vector instructions need PipeBarrier<PIPE_V>; a queue hand-over orders
    # V (not S) after the copy-in; a SetFlag needs its WaitFlag.
    ("VECTOR_RAW", 1, r"Adds: reads TBuf 'buf' .* on pipe V \(vector\) right after Muls \(.*cases\.cpp:\d+\) wrote "
                      r"it on pipe V \(vector\) with no PipeBarrier<PIPE_V> in between \(kernel line .*cases\.cpp:\d+\)"),
    ("QUEUE_GETVALUE", 1, r"LocalTensor::GetValue: reads TQue 'qi' .* on pipe S \(scalar\) right after a write on "
                          r"MTE2 \(GM->UB copy\) .*\(kernel line .*cases\.cpp:\d+\)"),
    ("DANGLING_SETFLAG", 1, r"kernel ended with SetFlag<HardEvent::MTE2_V>\(3\) never waited for"),
    ("SYNCALL_MISMATCH", 4, r"core 0: SyncAll: 3 core\(s\) returned from the kernel without reaching this SyncAll"),
]


@pytest.mark.parametrize("mode,cores,pattern", VIOLATIONS, ids=[f"{v[0]}-{v[1]}" for v in VIOLATIONS])
def test_violation_is_reported(libs, mode, cores, pattern):
    status, msg, _ = run_case(libs, mode, cores)
    assert status == 1
    assert msg.startswith("emu_case: core "), msg
    assert re.search(pattern, msg), msg


def test_process_survives_and_next_launch_is_clean(libs):
    status, msg, _ = run_case(libs, "GM_RACE", 4)
    assert status == 1 and msg
    status, msg, out = run_case(libs, "COPY_TWICE", 1)
    assert status == 0 and msg == ""
    np.testing.assert_array_equal(out[:256], 2 * np.arange(256, dtype=np.float32))
    fn_status, fn_msg = libs["cases"].launch("emu_case", 1, [None, None, None])
    assert fn_status == 2 and "launched with 3 arguments, the kernel takes 4" in fn_msg


def test_workspace_is_poisoned_by_the_launcher(libs):
    x = np.arange(256, dtype=np.float32)
    out, ws = np.zeros(12 * 256, np.float32), np.zeros(256, np.float32)
    tiling = np.array([MODES["COPY_TWICE"], 256], np.int32)
    status, msg = libs["cases"].launch("emu_case", 1, [x, out, ws, tiling])
    assert status == 0, msg
    assert np.all(ws.view(np.uint32) == 0xFFFFFFFF)  # device workspace is garbage: NaN bytes here


def test_atomic_add_accumulates_across_cores(libs):
    status, msg, out = run_case(libs, "GM_ATOMIC", 4)
    assert status == 0, msg
    np.testing.assert_array_equal(out[:8], np.full(8, 1 + 2 + 3 + 4, np.float32))


def test_syncall_orders_cross_core_work(libs, rng):
    x = rng.standard_normal(256).astype(np.float32)
    for _ in range(3):  # threads interleave differently each run; the result must not
        status, msg, out = run_case(libs, "SYNCALL_ORDER", 4, x=x)
        assert status == 0, msg
        np.testing.assert_array_equal(out[:256], 4 * x)


def test_repeat_forms_and_reductions(libs, rng):
    x = rng.standard_normal(256).astype(np.float32)
    status, msg, out = run_case(libs, "REPEAT_FORMS", 1, x=x)
    assert status == 0, msg
    np.testing.assert_array_equal(out[:256], 2 * x)
    np.testing.assert_allclose(out[256:260], x.reshape(4, 64).astype(np.float64).sum(1), rtol=1e-6)
    np.testing.assert_allclose(out[512:544], x.reshape(32, 8).astype(np.float64).sum(1), rtol=1e-6, atol=1e-6)
    assert np.all(out[260:512] == 0) and np.all(out[544:768] == 0)


# ---------------------------------------------------------------- Cast round modes
def _bits_value(bits: np.ndarray, fmt) -> np.ndarray:
    return bits.astype(np.uint16).view(fmt).astype(np.float64)


def _neighbours(x: np.ndarray, fmt):
    """RNE result and the representable pair (small, big) by magnitude that brackets x."""
    rne = x.astype(fmt).view(np.uint16).astype(np.int64)
    v = _bits_value(rne, fmt)
    above = np.abs(v) > np.abs(x.astype(np.float64))
    small = np.where(above, rne - 1, rne)
    big = np.where(above, rne, rne + 1)
    return rne, v, small, big


def reference_cast(x: np.ndarray, fmt, mode: str) -> np.ndarray:
    """float32 -> 16-bit float under an AscendC RoundMode, from numpy's RNE and bit neighbours."""
    with np.errstate(all="ignore"):  # overflow to inf and the neighbours of inf/0 are expected
        return _reference_cast(x, fmt, mode)


def _reference_cast(x: np.ndarray, fmt, mode: str) -> np.ndarray:
    rne, v, small, big = _neighbours(x, fmt)
    xd = x.astype(np.float64)
    exact = v == xd
    neg = np.signbit(xd)
    ds = np.abs(xd - _bits_value(small, fmt))
    db = np.abs(_bits_value(big, fmt) - xd)
    pick = {
        "RINT": rne, "TRUNC": small,
        "FLOOR": np.where(neg, big, small), "CEIL": np.where(neg, small, big),
        "ROUND": np.where(db <= ds, big, small), "ODD": np.where(small & 1, small, big),
    }[mode]
    return np.where(exact, rne, pick).astype(np.uint16)


def cast_inputs() -> np.ndarray:
    one = np.float32(1.0)
    ties_h = [1 + 2.0**-11, 1 + 3 * 2.0**-11, -(1 + 2.0**-11), 2049.0, 65520.0, -65520.0, 2.0**-25, 3 * 2.0**-25]
    ties_b = [1 + 2.0**-8, 1 + 3 * 2.0**-8, -(1 + 2.0**-8), 257.0, -259.0]
    specials = [0.0, -0.0, np.inf, -np.inf, 65504.0, 70000.0, -70000.0, 1e-8, -1e-8, 3.0e38, 1.5]
    rng = np.random.default_rng(7)
    vals = np.concatenate([ties_h, ties_b, specials, rng.standard_normal(64) * 100,
                           np.float32(one) + rng.integers(1, 2**13, 64) * 2.0**-23])
    return np.resize(vals.astype(np.float32), 256)


def test_cast_round_modes_match_reference(libs):
    x = cast_inputs()
    status, msg, out = run_case(libs, "CAST_MODES", 1, x=x)
    assert status == 0, msg
    got = out.view(np.uint16)[: 12 * 256].reshape(12, 256)
    half_modes = ["RINT", "RINT", "FLOOR", "CEIL", "ROUND", "TRUNC", "ODD"]  # CAST_NONE is RINT
    for row, mode in enumerate(half_modes):
        np.testing.assert_array_equal(got[row], reference_cast(x, np.float16, mode), err_msg=f"half {mode}")
    for row, mode in enumerate(["RINT", "FLOOR", "CEIL", "ROUND", "TRUNC"], start=7):
        np.testing.assert_array_equal(got[row], reference_cast(x, ml_dtypes.bfloat16, mode), err_msg=f"bf16 {mode}")
    # Spot checks that do not depend on the reference: ties to even vs away, overflow.
    h = got[:7].view(np.float16)
    assert h[1, 0] == 1.0 and h[4, 0] == 1 + 2.0**-10           # 1 + 2^-11: RINT even, ROUND away
    assert h[1, 1] == 1 + 2 * 2.0**-10                           # 1 + 3*2^-11: RINT to even (up)
    assert np.isinf(h[1, 4]) and h[5, 4] == 65504.0              # 65520: RINT inf, TRUNC max
    b = got[7:].view(ml_dtypes.bfloat16)
    assert float(b[0, 8]) == 1.0 and float(b[3, 8]) == 1 + 2.0**-7


def test_datacopypad_bursts_pad_and_ragged_rows(libs, rng):
    x = rng.standard_normal(256).astype(np.float32)
    status, msg, out = run_case(libs, "PAD_BURSTS", 1, x=x)
    assert status == 0, msg
    np.testing.assert_array_equal(out[:65], 2 * x[:65])  # 5 rows of 13, UB rows of 16
    assert np.all(out[65:80] == 0)                       # DataCopyPad wrote 65 elements only
    np.testing.assert_allclose(out[80], x[:65].astype(np.float64).sum(), rtol=1e-6)  # pads were 0


def test_ordered_vector_and_scalar_reads_pass(libs):
    """Positive controls for the two issue-36 rules: the PIPE_V barrier, rows of one buffer
    Muls did not write, and the MTE2_S event each make the same code run clean and right."""
    x = np.arange(256, dtype=np.float32)
    for mode, want in (("VECTOR_RAW_BARRIER", 2 * x[:64] + 1), ("VECTOR_ROWS", x[64:128] + 1)):
        status, msg, out = run_case(libs, mode)
        assert status == 0, (mode, msg)
        np.testing.assert_array_equal(out[64:128], want)
    status, msg, out = run_case(libs, "QUEUE_GETVALUE_SYNCED")
    assert status == 0, msg
    assert out[0] == 2 * x[3]


def test_explicit_flags_synchronise(libs, rng):
    x = rng.standard_normal(256).astype(np.float32)
    status, msg, out = run_case(libs, "SETFLAG_SYNC", 1, x=x)
    assert status == 0, msg
    np.testing.assert_array_equal(out[:256], 2 * x)
    np.testing.assert_allclose(out[256], 2 * x.astype(np.float64).sum(), rtol=1e-6)


def test_init_global_memory_then_atomics(libs):
    status, msg, out = run_case(libs, "INIT_ATOMIC", 4)
    assert status == 0, msg
    np.testing.assert_array_equal(out[:8], np.full(8, 10.5, np.float32))


def test_reduce_max_with_index_and_axpy(libs, rng):
    x = rng.standard_normal(256).astype(np.float32)
    status, msg, out = run_case(libs, "REDUCE_MAX_AXPY", 1, x=x)
    assert status == 0, msg
    assert out[0] == x.max() and out[1:2].view(np.int32)[0] == int(np.argmax(x))
    np.testing.assert_array_equal(out[8:264], (x.astype(np.float64) * 1.5).astype(np.float32))


def test_half_repeat_forms_bitmask_and_whole_reduce(libs, rng):
    x = np.resize(rng.integers(-64, 64, 128).astype(np.float32), 256)  # exact in half, sums too
    status, msg, out = run_case(libs, "HALF_FORMS", 1, x=x)
    assert status == 0, msg
    h = out.view(np.float16)[:256].astype(np.float32)
    np.testing.assert_array_equal(h[0:128:2], 2 * x[0:128:2])  # bit-mask lanes computed
    np.testing.assert_array_equal(h[1:128:2], 7)                # other lanes untouched
    np.testing.assert_array_equal(h[128:130], x[:128].reshape(2, 64).sum(1))


def test_bf16_arithmetic_does_not_compile_without_opgen_vec_bf16(tmp_path):
    src = tmp_path / "bf16_add.cpp"
    src.write_text('#include "kernel_operator.h"\nusing namespace AscendC;\n'
                   "void f(LocalTensor<bfloat16_t>& a) { Add(a, a, a, 64); }\n")
    done = subprocess.run([CXX, "-std=c++17", "-fsyntax-only", f"-I{EMU}", str(src)], capture_output=True, text=True)
    assert done.returncode != 0
    assert "Add: supported for half, float, int16_t, int32_t (bfloat16_t only with OPGEN_VEC_BF16" in done.stderr


def test_pipe_reset_gives_the_ub_a_new_layout(libs):
    status, msg, out = run_case(libs, "RESET_REUSE", 1)
    assert status == 0, msg
    np.testing.assert_array_equal(out[:256], 2 * np.arange(256, dtype=np.float32))


def test_datacopy_params_bursts_and_gaps(libs):
    status, msg, out = run_case(libs, "DATACOPY_PARAMS", 1)
    assert status == 0, msg
    x = np.arange(256, dtype=np.float32)
    for r in range(4):
        np.testing.assert_array_equal(out[16 * r:16 * r + 8], x[16 * r:16 * r + 8])
        assert np.all(out[16 * r + 8:16 * r + 16] == 0)  # the gaps are not written


def test_tiling_read_is_bounds_checked(libs):
    x, out, ws = np.zeros(256, np.float32), np.zeros(256, np.float32), np.zeros(256, np.float32)
    status, msg = libs["cases"].launch("emu_case", 1, [x, out, ws, np.array([MODES["COPY_TWICE"]], np.int32)])
    assert status == 1
    assert "GET_TILING_DATA: GM access of 8 B at offset 0 of argument 3 overruns its 4 B" in msg


def test_concurrent_launches_from_python_threads(libs, rng):
    """ctypes releases the GIL: launches from several threads overlap; each sees its own result
    and its own opgen_emu_last_error()."""
    from concurrent.futures import ThreadPoolExecutor

    x = rng.standard_normal(256).astype(np.float32)

    def one(i: int):
        if i % 2:
            return run_case(libs, "GM_RACE", 3)[:2]
        status, msg, out = run_case(libs, "SYNCALL_ORDER", 4, x=x)
        return status, msg, bool(np.array_equal(out[:256], 4 * x))

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(16)))
    for i, r in enumerate(results):
        if i % 2:
            assert r[0] == 1 and "GM race" in r[1]
        else:
            assert r == (0, "", True)


@pytest.mark.parametrize("mode", ["FAIL_WHILE_OTHERS_WAIT", "FAIL_WHILE_OTHERS_WORK"])
def test_a_failing_core_stops_the_others(libs, mode):
    """Cores waiting in SyncAll are released and busy cores stop at their next API call; a hang
    shows as a launch still running after 60 s."""
    import threading

    result = {}
    worker = threading.Thread(target=lambda: result.update(r=run_case(libs, mode, 4)), daemon=True)
    worker.start()
    worker.join(60)
    assert "r" in result, "the launch did not return: cores were not released"
    status, msg, out = result["r"]
    assert status == 1 and msg.startswith("emu_case: core 0: DeQue on an empty queue"), msg
    assert np.all(out[:4] == 0)  # no other core reached its end


def test_write_after_read_with_a_flag_is_accepted(libs, rng):
    x = rng.standard_normal(256).astype(np.float32)
    status, msg, out = run_case(libs, "WAR_SYNCED", 1, x=x)
    assert status == 0, msg
    np.testing.assert_array_equal(out[:256], 2 * x)


def test_empty_datacopypad_is_a_no_op(libs):
    status, msg, out = run_case(libs, "DATACOPYPAD_ZERO", 1)
    assert status == 0, msg
    assert np.all(out == 0)


def test_launch_stats_count_gm_traffic_ub_footprint_and_vector_work(libs, rng):
    total, tile = 1000, 256
    status, msg, *_ = run_ew(libs["ew"], "float", total, tile, 3, rng)
    assert status == 0, msg
    stats = (ctypes.c_uint64 * 4)()
    libs["ew"].lib.opgen_emu_last_stats(stats)
    gm_read, gm_written, ub_peak, vector_elems = list(stats)
    tiles = -(-total // tile)
    assert gm_read == 2 * total * 4                      # x and y, once
    assert gm_written == total * 4 + tiles * 8 * 4       # z and one 32-byte block of sums per tile
    # 3 queues x 2 x 1 KB, sums 2 x 32 B, two 1 KB float scratch, 32 B ReduceSum work
    assert ub_peak == 3 * 2 * 1024 + 2 * 32 + 2 * 1024 + 32
    lens = [min(tile, total - i * tile) for i in range(tiles)]
    # per tile: 2 conversions, Muls, Add, conversion out over the padded length; Duplicate 8;
    # ReduceSum: one partial per 64 floats, then the total
    assert vector_elems == sum(5 * (-(-n // 64) * 64) + 8 + -(-n // 64) + 1 for n in lens)


SANITIZERS = {"address,undefined": ("ERROR: AddressSanitizer", "runtime error:"), "thread": ("WARNING: ThreadSanitizer",)}


@pytest.mark.skipif(os.environ.get("OPGEN_EMU_SANITIZE") != "1",
                    reason="opt-in (OPGEN_EMU_SANITIZE=1): two sanitizer builds take ~1 min of CPU")
@pytest.mark.parametrize("sanitizer", list(SANITIZERS))
def test_emulation_is_clean_under_sanitizers(tmp_path, sanitizer):
    exe = tmp_path / "driver"
    cmd = [CXX, "-std=c++17", "-O1", "-g", "-pthread", f"-fsanitize={sanitizer}", "-DOPGEN_VECTOR_CORES=8",
           "-DOPGEN_EMU_CHECK_WAR", f"-I{EMU}", str(CASES / "cases.cpp"), str(CASES / "sanitize_driver.cpp"), "-o", str(exe)]
    built = subprocess.run(cmd, capture_output=True, text=True)
    if built.returncode and "sanitize" in built.stderr:
        pytest.skip(f"this g++ cannot build with -fsanitize={sanitizer}: {built.stderr[-300:]}")
    assert built.returncode == 0, built.stderr[-4000:]
    done = subprocess.run([str(exe)], capture_output=True, text=True, timeout=600)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    for marker in SANITIZERS[sanitizer]:
        assert marker not in log, log[-4000:]
    statuses = dict(re.findall(r"mode (\d+) rc (\d+)", done.stdout))
    assert statuses["99"] == "0" and statuses["13"] == "0" and statuses["11"] == "1" and statuses["41"] == "1"


def test_setvalue_flushed_before_syncall_is_visible_to_other_cores(libs):
    status, msg, out = run_case(libs, "SETVALUE_FLUSHED", 2)
    assert status == 0, msg
    np.testing.assert_array_equal(out[:8], np.arange(8, dtype=np.float32))


def test_overlapping_copy_in_after_a_pipe_barrier(libs):
    status, msg, out = run_case(libs, "MTE2_OVERLAP_BARRIER", 1)
    assert status == 0, msg
    x = np.arange(256, dtype=np.float32)
    np.testing.assert_array_equal(out[:96], np.concatenate([x[:32], x[:64]]))


def test_cast_round_modes_on_random_bit_patterns(libs, rng):
    """Every float32 class (normal, subnormal, zero, inf, nan, values beyond half's range)."""
    half_modes = ["RINT", "RINT", "FLOOR", "CEIL", "ROUND", "TRUNC", "ODD"]
    for _ in range(8):
        x = rng.integers(0, 2**32, 256, dtype=np.uint64).astype(np.uint32).view(np.float32)
        status, msg, out = run_case(libs, "CAST_MODES", 1, x=x)
        assert status == 0, msg
        got = out.view(np.uint16)[: 12 * 256].reshape(12, 256)
        nan = np.isnan(x)
        modes = [(row, m, np.float16) for row, m in enumerate(half_modes)]
        modes += [(7 + i, m, ml_dtypes.bfloat16) for i, m in enumerate(["RINT", "FLOOR", "CEIL", "ROUND", "TRUNC"])]
        for row, mode, fmt in modes:
            assert np.all(np.isnan(got[row][nan].view(fmt).astype(np.float32))), f"{fmt} {mode}: nan"
            np.testing.assert_array_equal(got[row][~nan], reference_cast(x[~nan], fmt, mode), err_msg=f"{fmt} {mode}")


def test_an_emitted_projects_kernel_starts_compiling_first(tmp_path, monkeypatch):
    """The kernel takes most of a project's g++ time; sorted by path (op_host/ before
    op_kernel/) it started only after a host file had finished. The host files are one
    translation unit that includes them in their order, headers are not compiled, and the
    pool starts the jobs in the order given."""
    from opgen.targets.ascend import build

    files = {"op_host/x_def.cpp": "", "op_host/x_tiling.cpp": "", "op_host/x_tiling.h": "",
             "op_kernel/x.cpp": "", "op_kernel/x_tiling_data.h": ""}
    sources = build.project_sources(files, tmp_path)
    assert sources == [tmp_path / "op_kernel/x.cpp", tmp_path / "opgen_op_host_unit.cpp"]
    assert sources[1].read_text() == '#include "op_host/x_def.cpp"\n#include "op_host/x_tiling.cpp"\n'
    started = []
    monkeypatch.setattr(build, "_gxx", lambda args, what: started.append(args[args.index("-c") + 1]))
    monkeypatch.setattr(build, "usable_cpus", lambda: 1)                # one at a time: the pool's order
    objects = build._compile_each(["-O1"], sources, tmp_path, "x")
    assert started == [str(s) for s in sources]
    assert objects == [tmp_path / f"{i}.o" for i in range(2)]          # linked in the sources' order
