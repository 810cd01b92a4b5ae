// The CANN-facing emulation APIs (targets/ascend/emu/emu_cann.h): built by tests/test_cann_src.py.
#include "kernel_operator.h"
using namespace AscendC;

extern "C" __global__ __aicore__ void cann_apis(GM_ADDR src, GM_ADDR out, GM_ADDR workspace, GM_ADDR tiling) {
    int32_t mode = *reinterpret_cast<const int32_t*>(tiling);
    TPipe pipe;
    TBuf<TPosition::VECCALC> a, b;
    pipe.InitBuffer(a, 1024);
    pipe.InitBuffer(b, 1024);
    GlobalTensor<float> s, o;
    s.SetGlobalBuffer((__gm__ float*)src, 64);
    o.SetGlobalBuffer((__gm__ float*)out, 64);
    LocalTensor<float> x = a.Get<float>(), y = b.Get<float>();
    if (mode == 1) {            // nothing set the mask register yet
        WholeReduceSum<float, false>(y, x, MASK_PLACEHOLDER, 1, 0, 1, 0);
        return;
    }
    static_assert(IsSameType<float, float>::value && !IsSameType<float, half>::value, "IsSameType");
    if (mode == 4 || mode == 5) {   // flags chain: S -> MTE3, then MTE3 -> V orders S's write before V
        x.SetValue(0, 2.0f);
        SetFlag<HardEvent::S_MTE3>(EVENT_ID1);
        WaitFlag<HardEvent::S_MTE3>(EVENT_ID1);
        if (mode == 4) {
            SetFlag<HardEvent::MTE3_V>(EVENT_ID1);
            WaitFlag<HardEvent::MTE3_V>(EVENT_ID1);
        }
        Muls(y, x, 1.0f, 8);        // mode 5: S -> MTE3 alone does not order V
        return;
    }
    LocalTensor<half> h = x.ReinterpretCast<half>();
    if (mode == 2) {            // ops-nn's Cast2FloatIf: 16-bit data in the float buffer's upper half
        GlobalTensor<half> sh;
        sh.SetGlobalBuffer((__gm__ half*)src, 64);
        DataCopy(h[64], sh, 64);
    } else {
        DataCopy(x, s, 64);
    }
    SetFlag<HardEvent::MTE2_V>(EVENT_ID0);
    WaitFlag<HardEvent::MTE2_V>(EVENT_ID0);
    if (mode == 2) {
        Cast(x, h[64], RoundMode::CAST_NONE, 64);
        PipeBarrier<PIPE_V>();      // the copy reads what the Cast wrote on the same pipe
        DataCopy(y, x, 64);
    } else if (mode == 3) {         // Copy: per repeat the mask's 16 lanes, repeat strides 2 / 4 blocks
        Duplicate(y, 0.0f, 64);
        Copy(y, x, 16, 2, {1, 1, 2, 4});                                  // y[0, 16) = x[0, 16), y[16, 32) = x[32, 48)
        Duplicate(y[32], ToFloat(bfloat16_t(1.5f)), 8);
    } else {
        Duplicate(y, 0.0f, 64);
        AscendCUtils::SetMask<float>(10);
        WholeReduceSum<float, false>(y, x, MASK_PLACEHOLDER, 1, 0, 1, 0);   // y[0] = x[0] + ... + x[9]
        const uint32_t col[2] = {4, 1}, row[2] = {1, 8}, dst[2] = {4, 8};
        BroadCast<float, 2, 1>(y[8], x, dst, col);      // y[8 + 8i + j] = x[i]
        BroadCast<float, 2, 0>(y[40], x, dst, row);     // y[40 + 8i + j] = x[j], 24 of its 32
    }
    SetFlag<HardEvent::V_MTE3>(EVENT_ID0);
    WaitFlag<HardEvent::V_MTE3>(EVENT_ID0);
    DataCopy(o, y, 64);
    (void)workspace;
}
OPGEN_EMU_EXPORT(cann_apis, 4)
