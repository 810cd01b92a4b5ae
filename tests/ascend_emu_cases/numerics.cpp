// Small kernels that pin the emulation's device numerics (tests/test_ascend_numerics.py):
// sum reductions in the documented order, half arithmetic rounding, Cast modes to int32 and int8.
#include "kernel_operator.h"

using namespace AscendC;

struct NumTiling {
    uint32_t n;     // input elements (a multiple of one repeat, at most 1024)
    uint32_t mode;  // reductions: 0 ReduceSum count form, 1 WholeReduceSum, 2 ReduceSum mask form
};

// y[0..256) = the reduction of x[0..n) (zeros where it writes nothing).
template <typename T>
__aicore__ inline void reduce(GM_ADDR x, GM_ADDR y, const NumTiling& t) {
    GlobalTensor<T> xGm, yGm;
    xGm.SetGlobalBuffer((__gm__ T*)x, t.n);
    yGm.SetGlobalBuffer((__gm__ T*)y, 256);
    TPipe pipe;
    TBuf<TPosition::VECCALC> in, work, out;
    pipe.InitBuffer(in, 1024 * sizeof(T));
    pipe.InitBuffer(work, 256 * sizeof(T));
    pipe.InitBuffer(out, 256 * sizeof(T));
    LocalTensor<T> iv = in.Get<T>(), wv = work.Get<T>(), ov = out.Get<T>();
    DataCopy(iv, xGm, t.n);
    SetFlag<HardEvent::MTE2_V>(EVENT_ID0);
    WaitFlag<HardEvent::MTE2_V>(EVENT_ID0);
    Duplicate(ov, T(0), 256);
    const int32_t lanes = 256 / sizeof(T), reps = t.n / lanes;
    if (t.mode == 0) ReduceSum(ov, iv, wv, t.n);
    if (t.mode == 1) WholeReduceSum(ov, iv, lanes, reps, 1, 1, 8);
    if (t.mode == 2) ReduceSum(ov, iv, wv, lanes, reps, 8);
    SetFlag<HardEvent::V_MTE3>(EVENT_ID0);
    WaitFlag<HardEvent::V_MTE3>(EVENT_ID0);
    DataCopy(yGm, ov, 256);
}

extern "C" __global__ __aicore__ void num_reduce_float(GM_ADDR x, GM_ADDR y, GM_ADDR ws, GM_ADDR tiling) {
    GET_TILING_DATA_WITH_STRUCT(NumTiling, t, tiling);
    reduce<float>(x, y, t);
}
OPGEN_EMU_EXPORT(num_reduce_float, 4)

extern "C" __global__ __aicore__ void num_reduce_half(GM_ADDR x, GM_ADDR y, GM_ADDR ws, GM_ADDR tiling) {
    GET_TILING_DATA_WITH_STRUCT(NumTiling, t, tiling);
    reduce<half>(x, y, t);
}
OPGEN_EMU_EXPORT(num_reduce_half, 4)

// y[0..n) = x[0..n) + x[n..2n) in half.
extern "C" __global__ __aicore__ void num_add_half(GM_ADDR x, GM_ADDR y, GM_ADDR ws, GM_ADDR tiling) {
    GET_TILING_DATA_WITH_STRUCT(NumTiling, t, tiling);
    GlobalTensor<half> xGm, yGm;
    xGm.SetGlobalBuffer((__gm__ half*)x, 2 * t.n);
    yGm.SetGlobalBuffer((__gm__ half*)y, t.n);
    TPipe pipe;
    TBuf<TPosition::VECCALC> a, b;
    pipe.InitBuffer(a, 2 * t.n * sizeof(half));
    pipe.InitBuffer(b, t.n * sizeof(half));
    LocalTensor<half> av = a.Get<half>(), bv = b.Get<half>();
    DataCopy(av, xGm, 2 * t.n);
    SetFlag<HardEvent::MTE2_V>(EVENT_ID0);
    WaitFlag<HardEvent::MTE2_V>(EVENT_ID0);
    Add(bv, av, av[t.n], t.n);
    SetFlag<HardEvent::V_MTE3>(EVENT_ID0);
    WaitFlag<HardEvent::V_MTE3>(EVENT_ID0);
    DataCopy(yGm, bv, t.n);
}
OPGEN_EMU_EXPORT(num_add_half, 4)

// y[k*n..(k+1)*n) = Cast<int32_t>(x[0..n)) with mode k of CAST_RINT, FLOOR, CEIL, ROUND, TRUNC.
extern "C" __global__ __aicore__ void num_cast_int(GM_ADDR x, GM_ADDR y, GM_ADDR ws, GM_ADDR tiling) {
    GET_TILING_DATA_WITH_STRUCT(NumTiling, t, tiling);
    GlobalTensor<float> xGm;
    GlobalTensor<int32_t> yGm;
    xGm.SetGlobalBuffer((__gm__ float*)x, t.n);
    yGm.SetGlobalBuffer((__gm__ int32_t*)y, 5 * t.n);
    TPipe pipe;
    TBuf<TPosition::VECCALC> a, b;
    pipe.InitBuffer(a, t.n * sizeof(float));
    pipe.InitBuffer(b, 5 * t.n * sizeof(int32_t));
    LocalTensor<float> av = a.Get<float>();
    LocalTensor<int32_t> bv = b.Get<int32_t>();
    DataCopy(av, xGm, t.n);
    SetFlag<HardEvent::MTE2_V>(EVENT_ID0);
    WaitFlag<HardEvent::MTE2_V>(EVENT_ID0);
    const RoundMode modes[] = {RoundMode::CAST_RINT, RoundMode::CAST_FLOOR, RoundMode::CAST_CEIL,
                               RoundMode::CAST_ROUND, RoundMode::CAST_TRUNC};
    for (uint32_t k = 0; k < 5; ++k) Cast(bv[k * t.n], av, modes[k], t.n);
    SetFlag<HardEvent::V_MTE3>(EVENT_ID0);
    WaitFlag<HardEvent::V_MTE3>(EVENT_ID0);
    DataCopy(yGm, bv, 5 * t.n);
}
OPGEN_EMU_EXPORT(num_cast_int, 4)

// y[k*n..(k+1)*n) = Cast<int8_t>(x[0..n)) (half) with mode k of CAST_NONE, RINT, FLOOR, CEIL, ROUND,
// TRUNC: Atlas A2's only vector Cast into int8_t (asc-devkit Cast.md table 4).
extern "C" __global__ __aicore__ void num_cast_int8(GM_ADDR x, GM_ADDR y, GM_ADDR ws, GM_ADDR tiling) {
    GET_TILING_DATA_WITH_STRUCT(NumTiling, t, tiling);
    GlobalTensor<half> xGm;
    GlobalTensor<int8_t> yGm;
    xGm.SetGlobalBuffer((__gm__ half*)x, t.n);
    yGm.SetGlobalBuffer((__gm__ int8_t*)y, 6 * t.n);
    TPipe pipe;
    TBuf<TPosition::VECCALC> a, b;
    pipe.InitBuffer(a, t.n * sizeof(half));
    pipe.InitBuffer(b, 6 * t.n * sizeof(int8_t));
    LocalTensor<half> av = a.Get<half>();
    LocalTensor<int8_t> bv = b.Get<int8_t>();
    DataCopy(av, xGm, t.n);
    SetFlag<HardEvent::MTE2_V>(EVENT_ID0);
    WaitFlag<HardEvent::MTE2_V>(EVENT_ID0);
    const RoundMode modes[] = {RoundMode::CAST_NONE, RoundMode::CAST_RINT, RoundMode::CAST_FLOOR,
                               RoundMode::CAST_CEIL, RoundMode::CAST_ROUND, RoundMode::CAST_TRUNC};
    for (uint32_t k = 0; k < 6; ++k) Cast(bv[k * t.n], av, modes[k], t.n);
    SetFlag<HardEvent::V_MTE3>(EVENT_ID0);
    WaitFlag<HardEvent::V_MTE3>(EVENT_ID0);
    DataCopy(yGm, bv, 6 * t.n);
}
OPGEN_EMU_EXPORT(num_cast_int8, 4)
