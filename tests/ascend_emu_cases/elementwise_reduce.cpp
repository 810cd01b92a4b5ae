// A correct AscendC kernel in the usual style: z = T(2*x + y) computed in float, and the float
// sum of every tile's 2*x + y. Double-buffered queues, work split over cores by tile,
// DataCopyPad for a ragged last tile (DataCopy when the tail is whole 32-byte blocks).
// One kernel per dtype: ew_reduce_float, ew_reduce_half, ew_reduce_bf16.
#include "kernel_operator.h"

using namespace AscendC;

struct EwTiling {
    uint32_t total;  // elements
    uint32_t tile;   // elements per UB pass, a multiple of 64
};

constexpr int32_t BUFFER_NUM = 2;

template <typename T>
class EwReduce {
public:
    __aicore__ inline void Init(GM_ADDR x, GM_ADDR y, GM_ADDR z, GM_ADDR sums, const EwTiling& t) {
        total_ = t.total;
        tile_ = t.tile;
        tiles_ = (total_ + tile_ - 1) / tile_;
        xGm.SetGlobalBuffer((__gm__ T*)x, total_);
        yGm.SetGlobalBuffer((__gm__ T*)y, total_);
        zGm.SetGlobalBuffer((__gm__ T*)z, total_);
        sumGm.SetGlobalBuffer((__gm__ float*)sums, tiles_ * 8);
        pipe.InitBuffer(inQueueX, BUFFER_NUM, tile_ * sizeof(T));
        pipe.InitBuffer(inQueueY, BUFFER_NUM, tile_ * sizeof(T));
        pipe.InitBuffer(outQueueZ, BUFFER_NUM, tile_ * sizeof(T));
        pipe.InitBuffer(outQueueSum, BUFFER_NUM, 8 * sizeof(float));
        pipe.InitBuffer(xfBuf, tile_ * sizeof(float));
        pipe.InitBuffer(yfBuf, tile_ * sizeof(float));
        pipe.InitBuffer(workBuf, (tile_ / 64 + 7) / 8 * 8 * sizeof(float));  // one per repeat
    }
    __aicore__ inline void Process() {
        for (uint32_t i = GetBlockIdx(); i < tiles_; i += GetBlockNum()) {
            uint32_t len = (i + 1) * tile_ <= total_ ? tile_ : total_ - i * tile_;
            CopyIn(i, len);
            Compute(len);
            CopyOut(i, len);
        }
    }

private:
    __aicore__ inline void CopyIn(uint32_t i, uint32_t len) {
        LocalTensor<T> x = inQueueX.AllocTensor<T>();
        LocalTensor<T> y = inQueueY.AllocTensor<T>();
        if (len * sizeof(T) % 32 == 0) {
            DataCopy(x, xGm[i * tile_], len);
            DataCopy(y, yGm[i * tile_], len);
        } else {
            DataCopyExtParams p{1, static_cast<uint32_t>(len * sizeof(T)), 0, 0, 0};
            DataCopyPadExtParams<T> pad{false, 0, 0, 0};
            DataCopyPad(x, xGm[i * tile_], p, pad);
            DataCopyPad(y, yGm[i * tile_], p, pad);
        }
        inQueueX.EnQue(x);
        inQueueY.EnQue(y);
    }
    // Vector work runs over the padded length; the pad lanes stay poisoned and are never stored.
    __aicore__ inline void Compute(uint32_t len) {
        uint32_t alen = (len + 63) / 64 * 64;
        LocalTensor<T> x = inQueueX.DeQue<T>();
        LocalTensor<T> y = inQueueY.DeQue<T>();
        LocalTensor<float> xf = xfBuf.Get<float>();
        LocalTensor<float> yf = yfBuf.Get<float>();
        ToFloat(xf, x, alen);
        ToFloat(yf, y, alen);
        PipeBarrier<PIPE_V>();  // each step below reads the one before (asc-devkit PipeBarrier docs)
        Muls(xf, xf, 2.0f, alen);
        PipeBarrier<PIPE_V>();
        Add(xf, xf, yf, alen);
        LocalTensor<T> z = outQueueZ.AllocTensor<T>();
        PipeBarrier<PIPE_V>();
        FromFloat(z, xf, alen);
        outQueueZ.EnQue(z);
        LocalTensor<float> s = outQueueSum.AllocTensor<float>();
        Duplicate(s, 0.0f, 8);
        LocalTensor<float> work = workBuf.Get<float>();
        ReduceSum(s, xf, work, len);
        outQueueSum.EnQue(s);
        inQueueX.FreeTensor(x);
        inQueueY.FreeTensor(y);
    }
    __aicore__ inline void ToFloat(const LocalTensor<float>& dst, const LocalTensor<T>& src, uint32_t n) {
        if constexpr (std::is_same<T, float>::value) Adds(dst, src, 0.0f, n);
        else Cast(dst, src, RoundMode::CAST_NONE, n);
    }
    __aicore__ inline void FromFloat(const LocalTensor<T>& dst, const LocalTensor<float>& src, uint32_t n) {
        if constexpr (std::is_same<T, float>::value) Adds(dst, src, 0.0f, n);
        else Cast(dst, src, RoundMode::CAST_RINT, n);
    }
    __aicore__ inline void CopyOut(uint32_t i, uint32_t len) {
        LocalTensor<T> z = outQueueZ.DeQue<T>();
        if (len * sizeof(T) % 32 == 0) {
            DataCopy(zGm[i * tile_], z, len);
        } else {
            DataCopyExtParams p{1, static_cast<uint32_t>(len * sizeof(T)), 0, 0, 0};
            DataCopyPad(zGm[i * tile_], z, p);
        }
        outQueueZ.FreeTensor(z);
        LocalTensor<float> s = outQueueSum.DeQue<float>();
        DataCopy(sumGm[i * 8], s, 8);
        outQueueSum.FreeTensor(s);
    }

    TPipe pipe;
    TQue<QuePosition::VECIN, BUFFER_NUM> inQueueX, inQueueY;
    TQue<QuePosition::VECOUT, BUFFER_NUM> outQueueZ, outQueueSum;
    TBuf<TPosition::VECCALC> xfBuf, yfBuf, workBuf;
    GlobalTensor<T> xGm, yGm, zGm;
    GlobalTensor<float> sumGm;
    uint32_t total_ = 0, tile_ = 0, tiles_ = 0;
};

template <typename T>
__aicore__ inline void run(GM_ADDR x, GM_ADDR y, GM_ADDR z, GM_ADDR sums, GM_ADDR tiling) {
    GET_TILING_DATA_WITH_STRUCT(EwTiling, t, tiling);
    EwReduce<T> op;
    op.Init(x, y, z, sums, t);
    op.Process();
}

extern "C" __global__ __aicore__ void ew_reduce_float(GM_ADDR x, GM_ADDR y, GM_ADDR z, GM_ADDR sums,
                                                      GM_ADDR workspace, GM_ADDR tiling) {
    run<float>(x, y, z, sums, tiling);
}
extern "C" __global__ __aicore__ void ew_reduce_half(GM_ADDR x, GM_ADDR y, GM_ADDR z, GM_ADDR sums,
                                                     GM_ADDR workspace, GM_ADDR tiling) {
    run<half>(x, y, z, sums, tiling);
}
extern "C" __global__ __aicore__ void ew_reduce_bf16(GM_ADDR x, GM_ADDR y, GM_ADDR z, GM_ADDR sums,
                                                     GM_ADDR workspace, GM_ADDR tiling) {
    run<bfloat16_t>(x, y, z, sums, tiling);
}

OPGEN_EMU_EXPORT(ew_reduce_float, 6)
OPGEN_EMU_EXPORT(ew_reduce_half, 6)
OPGEN_EMU_EXPORT(ew_reduce_bf16, 6)
