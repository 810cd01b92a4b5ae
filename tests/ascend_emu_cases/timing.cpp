// Hand-computable kernels for the emulation's pipe-level timing model (emu_timing.h); the
// tests (tests/test_ascend_timing.py) predict each one's modelled time by hand.
#include "kernel_operator.h"

using namespace AscendC;

struct TimingTiling {
    uint32_t n;          // float elements per core (copy, chain) or per tile (pipeline)
    uint32_t tiles;      // pipeline: tiles per core
    uint32_t bufs;       // pipeline: buffers per queue (1: no double buffering)
    uint32_t pipe_all;   // pipeline: 1 = a needless PipeBarrier<PIPE_ALL> after every tile
};

// GM -> UB -> GM of n floats per core, ordered by one MTE2 -> MTE3 flag.
extern "C" __global__ __aicore__ void timing_copy(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, GM_ADDR tiling) {
    GET_TILING_DATA_WITH_STRUCT(TimingTiling, t, tiling);
    GlobalTensor<float> xGm, yGm;
    xGm.SetGlobalBuffer((__gm__ float*)x + GetBlockIdx() * t.n, t.n);
    yGm.SetGlobalBuffer((__gm__ float*)y + GetBlockIdx() * t.n, t.n);
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, t.n * sizeof(float));
    LocalTensor<float> b = buf.Get<float>();
    DataCopy(b, xGm, t.n);
    SetFlag<HardEvent::MTE2_MTE3>(EVENT_ID0);
    WaitFlag<HardEvent::MTE2_MTE3>(EVENT_ID0);
    DataCopy(yGm, b, t.n);
}
OPGEN_EMU_EXPORT(timing_copy, 4)

// A chain of vector instructions on n floats: Duplicate, Add, Mul, Exp, Cast to half, ReduceSum,
// with a PipeBarrier<PIPE_V> before each one that reads its predecessor's result.
extern "C" __global__ __aicore__ void timing_chain(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, GM_ADDR tiling) {
    GET_TILING_DATA_WITH_STRUCT(TimingTiling, t, tiling);
    TPipe pipe;
    TBuf<TPosition::VECCALC> a, b, h, w;
    pipe.InitBuffer(a, t.n * sizeof(float));
    pipe.InitBuffer(b, t.n * sizeof(float));
    pipe.InitBuffer(h, t.n * sizeof(half));
    pipe.InitBuffer(w, 256);
    LocalTensor<float> av = a.Get<float>(), bv = b.Get<float>(), wv = w.Get<float>();
    LocalTensor<half> hv = h.Get<half>();
    Duplicate(av, 0.5f, t.n);
    PipeBarrier<PIPE_V>();  // each instruction reads the one before (asc-devkit PipeBarrier docs)
    Add(bv, av, av, t.n);
    PipeBarrier<PIPE_V>();
    Mul(bv, bv, av, t.n);
    PipeBarrier<PIPE_V>();
    Exp(bv, bv, t.n);
    PipeBarrier<PIPE_V>();
    Cast(hv, bv, RoundMode::CAST_RINT, t.n);
    ReduceSum(av, bv, wv, t.n);  // reads bv, which the Exp before the last barrier wrote
}
OPGEN_EMU_EXPORT(timing_chain, 4)

// y = 2x over `tiles` tiles of n floats per core, CopyIn / Compute / CopyOut through queues of
// `bufs` buffers, as AscendC's samples write it; optionally a PIPE_ALL after every tile.
extern "C" __global__ __aicore__ void timing_pipeline(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, GM_ADDR tiling) {
    GET_TILING_DATA_WITH_STRUCT(TimingTiling, t, tiling);
    const uint64_t base = uint64_t(GetBlockIdx()) * t.tiles * t.n;
    GlobalTensor<float> xGm, yGm;
    xGm.SetGlobalBuffer((__gm__ float*)x + base, uint64_t(t.tiles) * t.n);
    yGm.SetGlobalBuffer((__gm__ float*)y + base, uint64_t(t.tiles) * t.n);
    TPipe pipe;
    TQue<TPosition::VECIN, 2> inQ;
    TQue<TPosition::VECOUT, 2> outQ;
    pipe.InitBuffer(inQ, t.bufs, t.n * sizeof(float));
    pipe.InitBuffer(outQ, t.bufs, t.n * sizeof(float));
    for (uint32_t i = 0; i < t.tiles; ++i) {
        LocalTensor<float> in = inQ.AllocTensor<float>();
        DataCopy(in, xGm[uint64_t(i) * t.n], t.n);
        inQ.EnQue(in);
        LocalTensor<float> xv = inQ.DeQue<float>();
        LocalTensor<float> out = outQ.AllocTensor<float>();
        Muls(out, xv, 2.0f, t.n);
        outQ.EnQue(out);
        inQ.FreeTensor(xv);
        LocalTensor<float> yv = outQ.DeQue<float>();
        DataCopy(yGm[uint64_t(i) * t.n], yv, t.n);
        outQ.FreeTensor(yv);
        if (t.pipe_all) PipeBarrier<PIPE_ALL>();
    }
}
OPGEN_EMU_EXPORT(timing_pipeline, 4)

// Core 0 does `tiles` extra Muls before a SyncAll; every core then copies n floats.
extern "C" __global__ __aicore__ void timing_syncall(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, GM_ADDR tiling) {
    GET_TILING_DATA_WITH_STRUCT(TimingTiling, t, tiling);
    TPipe pipe;
    TBuf<TPosition::VECCALC> a;
    pipe.InitBuffer(a, t.n * sizeof(float));
    LocalTensor<float> av = a.Get<float>();
    Duplicate(av, 1.0f, t.n);
    if (GetBlockIdx() == 0)
        for (uint32_t i = 0; i < t.tiles; ++i) { PipeBarrier<PIPE_V>(); Muls(av, av, 2.0f, t.n); }
    SyncAll();
    GlobalTensor<float> yGm;
    yGm.SetGlobalBuffer((__gm__ float*)y + GetBlockIdx() * t.n, t.n);
    DataCopy(yGm, av, t.n);
}
OPGEN_EMU_EXPORT(timing_syncall, 4)
