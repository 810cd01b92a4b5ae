// Small AscendC kernels, one per mode (tiling.mode), compiled once: each negative mode commits
// exactly one violation the emulation must report; the positive modes check API semantics
// (repeat forms, reductions, Cast round modes, multi-core atomics and SyncAll).
// Arguments: in (float[n]), out (float[...]), ws (float[...]), tiling.
#include "kernel_operator.h"

using namespace AscendC;

struct CaseTiling {
    int32_t mode;
    uint32_t n;  // elements of `in` (a multiple of 64)
};

enum Mode {
    OVER_UB = 1, MISALIGNED_UB, RAGGED_DATACOPY, GM_OVERRUN, SETGLOBAL_OVERRUN, REPEAT_OVER_255,
    DEQUE_EMPTY, ENQUE_FULL, USE_AFTER_FREE, POISON_READ, GM_RACE, GM_ATOMIC, SYNCALL_ORDER,
    SYNCALL_MISSING, MISSING_PIPE_SYNC, SYNCALL_MISMATCH, TOO_MANY_BUFFERS, GETVALUE_POISON,
    REPEAT_FORMS, CAST_MODES, LEAK, PAD_BURSTS, SETFLAG_SYNC, VS_MISSING, SETVALUE_DMA, INIT_ATOMIC,
    REDUCE_MAX_AXPY, WS_UNINIT_ATOMIC, WS_UNINIT_READ, ATOMIC_LEFT_ON, GM_GETVALUE_AFTER_MTE3,
    REPEAT_STRIDE_OVERRUN, PARTIAL_OVERLAP, DOUBLE_WRITE, MASK_RANGE, CAST_BAD_MODE, HALF_FORMS,
    RESET_REUSE, STALE_AFTER_RESET, DATACOPY_PARAMS, FAIL_WHILE_OTHERS_WAIT, FAIL_WHILE_OTHERS_WORK,
    WAR_MTE3_V, WAR_SYNCED, DATACOPY_ZERO, DATACOPYPAD_ZERO, ALLOC_ALL_IN_USE, DOUBLE_FREE,
    FOREIGN_FREE, TBUF_GET_OVER, TBUF_OFFSET_MISALIGNED, SUBTENSOR_OVER, SETVALUE_UNFLUSHED,
    SETVALUE_FLUSHED, MTE2_OVERLAP, MTE2_OVERLAP_BARRIER, MTE3_OVERLAP, RAW_WORKSPACE,
    WRONG_EVENT, WRONG_EVENT_WAR, MTE3_V_THEN_MTE2_GM, VECTOR_RAW, VECTOR_RAW_BARRIER, VECTOR_ROWS,
    QUEUE_GETVALUE, QUEUE_GETVALUE_SYNCED, DANGLING_SETFLAG,
};

struct Ctx {
    GlobalTensor<float> in, out, ws;
    uint32_t n;
};

// in -> UB (through a VECIN queue), returned dequeued.
static LocalTensor<float> load(TQue<TPosition::VECIN, 1>& q, const GlobalTensor<float>& g, uint32_t n) {
    LocalTensor<float> t = q.AllocTensor<float>();
    DataCopy(t, g, n);
    q.EnQue(t);
    return q.DeQue<float>();
}

static void store(TQue<TPosition::VECOUT, 1>& q, LocalTensor<float>& t, const GlobalTensor<float>& g, uint32_t n) {
    q.EnQue(t);
    LocalTensor<float> o = q.DeQue<float>();
    DataCopy(g, o, n);
    q.FreeTensor(o);
}

// out = in + in, computed on whichever core calls it.
static void copy_twice(TPipe& pipe, Ctx& c) {
    TQue<TPosition::VECIN, 1> qi;
    TQue<TPosition::VECOUT, 1> qo;
    pipe.InitBuffer(qi, 1, c.n * sizeof(float));
    pipe.InitBuffer(qo, 1, c.n * sizeof(float));
    LocalTensor<float> x = load(qi, c.in, c.n);
    LocalTensor<float> y = qo.AllocTensor<float>();
    Add(y, x, x, c.n);
    qi.FreeTensor(x);
    store(qo, y, c.out, c.n);
}

static void queue_violations(TPipe& pipe, Ctx& c, int mode) {
    TQue<TPosition::VECIN, 1> qi;
    TQue<TPosition::VECOUT, 1> qo;
    pipe.InitBuffer(qi, 2, c.n * sizeof(float));
    pipe.InitBuffer(qo, 1, c.n * sizeof(float));
    if (mode == DEQUE_EMPTY) {
        LocalTensor<float> x = qi.DeQue<float>();
        qi.FreeTensor(x);
    } else if (mode == ENQUE_FULL) {
        LocalTensor<float> a = qi.AllocTensor<float>();
        LocalTensor<float> b = qi.AllocTensor<float>();
        DataCopy(a, c.in, c.n);
        DataCopy(b, c.in, c.n);
        qi.EnQue(a);
        qi.EnQue(b);  // depth 1
    } else if (mode == USE_AFTER_FREE) {
        LocalTensor<float> x = load(qi, c.in, c.n);
        LocalTensor<float> stale = x;
        qi.FreeTensor(x);
        LocalTensor<float> y = qo.AllocTensor<float>();
        Add(y, stale, stale, c.n);
        store(qo, y, c.out, c.n);
    } else if (mode == POISON_READ) {
        LocalTensor<float> y = qo.AllocTensor<float>();
        Duplicate(y, 1.0f, c.n - 8);  // the last 8 elements are never written
        store(qo, y, c.out, c.n);
    } else if (mode == GETVALUE_POISON) {
        LocalTensor<float> x = qi.AllocTensor<float>();
        DataCopy(x, c.in, 8);
        qi.EnQue(x);
        x = qi.DeQue<float>();
        SetFlag<HardEvent::MTE2_S>(EVENT_ID0);  // the queue orders V, not S, after the copy
        WaitFlag<HardEvent::MTE2_S>(EVENT_ID0);
        c.out.SetValue(0, x.GetValue(8));
        qi.FreeTensor(x);
    }
}

static void handle_violations(TPipe& pipe, Ctx& c, int mode) {
    TQue<TPosition::VECIN, 1> qa, qb;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(qa, 1, 64);
    pipe.InitBuffer(qb, 1, 64);
    pipe.InitBuffer(buf, 256);
    LocalTensor<float> a = qa.AllocTensor<float>();
    if (mode == ALLOC_ALL_IN_USE) qa.AllocTensor<float>();
    if (mode == DOUBLE_FREE) { LocalTensor<float> copy = a; qa.FreeTensor(a); qa.FreeTensor(copy); }
    if (mode == FOREIGN_FREE) qb.FreeTensor(a);
    if (mode == TBUF_GET_OVER) buf.Get<float>(65);
    if (mode == TBUF_OFFSET_MISALIGNED) buf.GetWithOffset<float>(8, 16);
    if (mode == SUBTENSOR_OVER) Duplicate(a[8], 0.0f, 16);
    (void)c;
}

static void copy_violations(TPipe& pipe, Ctx& c, int mode) {
    TQue<TPosition::VECIN, 1> qi;
    pipe.InitBuffer(qi, 1, (c.n + 64) * sizeof(float));
    LocalTensor<float> x = qi.AllocTensor<float>();
    if (mode == MISALIGNED_UB) DataCopy(x[3], c.in, 8);
    if (mode == RAGGED_DATACOPY) DataCopy(x, c.in, 10);
    if (mode == GM_OVERRUN) DataCopy(x, c.in, c.n + 8);
    if (mode == SETGLOBAL_OVERRUN) c.in.SetGlobalBuffer(c.in.GetPhyAddr(), c.n + 8);
    if (mode == DATACOPY_ZERO) DataCopy(x, c.in, 0);
    if (mode == DATACOPYPAD_ZERO) {  // an empty copy is a no-op, as in CANN
        DataCopyPad(x, c.in, DataCopyExtParams(1, 0, 0, 0, 0), DataCopyPadExtParams<float>(false, 0, 0, 0.0f));
        DataCopyPad(c.out, x, DataCopyExtParams(0, 32, 0, 0, 0));
    }
    qi.FreeTensor(x);
}

static void vector_violations(TPipe& pipe, Ctx& c, int mode) {
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, c.n * sizeof(float));
    LocalTensor<float> t = buf.Get<float>();
    if (mode == REPEAT_OVER_255) {
        Duplicate(t, 0.0f, c.n);
        Add(t, t, t, 64, 300, BinaryRepeatParams(1, 1, 1, 8, 8, 8));
    } else if (mode == REPEAT_STRIDE_OVERRUN) {
        Duplicate(t, 0.0f, c.n);
        Add(t, t, t, 64, 4, BinaryRepeatParams(1, 1, 1, 16, 8, 8));  // dst reaches element 447
    } else if (mode == PARTIAL_OVERLAP) {
        Duplicate(t, 0.0f, c.n);
        PipeBarrier<PIPE_V>();
        Add(t[8], t, t, 64);
    } else if (mode == DOUBLE_WRITE) {
        Duplicate(t, 0.0f, c.n);
        Add(t, t, t, 64, 2, BinaryRepeatParams(1, 1, 1, 0, 8, 8));
    } else if (mode == MASK_RANGE) {
        Duplicate(t, 0.0f, c.n);
        Add(t, t, t, 65, 1, BinaryRepeatParams());
    } else if (mode == CAST_BAD_MODE) {
        Duplicate(t, 0.0f, c.n);
        LocalTensor<bfloat16_t> b = t.ReinterpretCast<bfloat16_t>();
        Cast(b, t[c.n / 2], RoundMode::CAST_NONE, 64);
    } else if (mode == MISSING_PIPE_SYNC) {
        DataCopy(t, c.in, c.n);  // MTE2 writes, V reads: needs SetFlag/WaitFlag<MTE2_V>
        Muls(t, t, 2.0f, c.n);
    } else if (mode == WRONG_EVENT) {
        DataCopy(t, c.in, c.n);  // MTE2 writes; the event orders MTE3, not V, after it
        SetFlag<HardEvent::MTE2_MTE3>(0);
        WaitFlag<HardEvent::MTE2_MTE3>(0);
        Muls(t, t, 2.0f, c.n);
    } else if (mode == WRONG_EVENT_WAR) {
        SetFlag<HardEvent::MTE2_V>(0);
        WaitFlag<HardEvent::MTE2_V>(0);
        Muls(t, t, 2.0f, c.n);   // V reads t; the event orders MTE3 (not MTE2) after the read
        SetFlag<HardEvent::V_MTE3>(0);
        WaitFlag<HardEvent::V_MTE3>(0);
        DataCopy(t, c.in, c.n);
    } else if (mode == VECTOR_RAW || mode == VECTOR_RAW_BARRIER || mode == VECTOR_ROWS) {
        // out = in, except out[64..128) = 2 * in[0..64) + 1 (VECTOR_ROWS: in[64..128) + 1)
        DataCopy(t, c.in, c.n);
        SetFlag<HardEvent::MTE2_V>(0);
        WaitFlag<HardEvent::MTE2_V>(0);
        Muls(t, t, 2.0f, 64);                                  // row 0
        if (mode == VECTOR_RAW_BARRIER) PipeBarrier<PIPE_V>();
        if (mode == VECTOR_ROWS) Adds(t[64], t[64], 1.0f, 64);  // row 1: Muls did not write it
        else Adds(t[64], t, 1.0f, 64);                        // reads Muls' result
        SetFlag<HardEvent::V_MTE3>(0);
        WaitFlag<HardEvent::V_MTE3>(0);
        DataCopy(c.out[64], t[64], 64);
    } else if (mode == DANGLING_SETFLAG) {
        SetFlag<HardEvent::MTE2_V>(3);  // never waited for
    }
}

// The queue hands a copied-in tensor to V (MTE2_V): the scalar unit reading it needs MTE2_S.
// out[0] = 2 * in[3].
static void scalar_after_queue(TPipe& pipe, Ctx& c, bool synced) {
    TQue<TPosition::VECIN, 1> qi;
    pipe.InitBuffer(qi, 1, 32 * sizeof(float));
    LocalTensor<float> x = qi.AllocTensor<float>();
    DataCopy(x, c.in, 32);
    qi.EnQue(x);
    x = qi.DeQue<float>();
    if (synced) {
        SetFlag<HardEvent::MTE2_S>(0);
        WaitFlag<HardEvent::MTE2_S>(0);
    }
    c.out.SetValue(0, x.GetValue(3) * 2.0f);
    qi.FreeTensor(x);
}

// MTE3 writes GM, then MTE2 reads it back into another buffer after a WaitFlag<MTE3_V>: the
// event orders V, not MTE2, after the write (the read-back needs MTE3_MTE2).
static void gm_readback_wrong_event(TPipe& pipe, Ctx& c) {
    TBuf<TPosition::VECCALC> a, b;
    pipe.InitBuffer(a, c.n * sizeof(float));
    pipe.InitBuffer(b, c.n * sizeof(float));
    LocalTensor<float> ta = a.Get<float>(), tb = b.Get<float>();
    DataCopy(ta, c.in, c.n);
    SetFlag<HardEvent::MTE2_MTE3>(0);
    WaitFlag<HardEvent::MTE2_MTE3>(0);
    DataCopy(c.out, ta, c.n);
    SetFlag<HardEvent::MTE3_V>(0);
    WaitFlag<HardEvent::MTE3_V>(0);
    DataCopy(tb, c.out, c.n);
}

static void ub_violations(TPipe& pipe, int mode) {
    TQue<TPosition::VECIN, 2> qa, qb;
    TBuf<TPosition::VECCALC> tmpBuf;
    if (mode == OVER_UB) {
        pipe.InitBuffer(qa, 2, 32768);
        pipe.InitBuffer(qb, 2, 32768);
        pipe.InitBuffer(tmpBuf, OPGEN_UB_BYTES - 4 * 32768 + 32);
    } else {
        TBuf<TPosition::VECCALC> many[65];
        for (auto& b : many) pipe.InitBuffer(b, 32);
    }
}

// Every core writes out[0..8): a race unless SetAtomicAdd accumulates.
static void all_cores_write(TPipe& pipe, Ctx& c, bool atomic) {
    TQue<TPosition::VECOUT, 1> qo;
    pipe.InitBuffer(qo, 1, 8 * sizeof(float));
    LocalTensor<float> y = qo.AllocTensor<float>();
    Duplicate(y, static_cast<float>(GetBlockIdx() + 1), 8);
    if (atomic) SetAtomicAdd<float>();
    store(qo, y, c.out, 8);
    if (atomic) SetAtomicNone();
}

// Core 0 writes ws = 2*in; after SyncAll the last core reads ws and writes out = ws + ws.
static void cross_core(TPipe& pipe, Ctx& c, int mode) {
    TQue<TPosition::VECIN, 1> qi;
    TQue<TPosition::VECOUT, 1> qo;
    pipe.InitBuffer(qi, 1, c.n * sizeof(float));
    pipe.InitBuffer(qo, 1, c.n * sizeof(float));
    if (GetBlockIdx() == 0) {
        LocalTensor<float> x = load(qi, c.in, c.n);
        LocalTensor<float> y = qo.AllocTensor<float>();
        Add(y, x, x, c.n);
        qi.FreeTensor(x);
        store(qo, y, c.ws, c.n);
    }
    if (mode == SYNCALL_ORDER) SyncAll();
    if (GetBlockIdx() == GetBlockNum() - 1) {
        LocalTensor<float> w = load(qi, c.ws, c.n);
        LocalTensor<float> y = qo.AllocTensor<float>();
        Add(y, w, w, c.n);
        qi.FreeTensor(w);
        store(qo, y, c.out, c.n);
    }
}

// out[0..n) = in + in by 64-lane repeats with strides; out[n + r] = WholeReduceSum of repeat r;
// out[2n + 8r + b] = BlockReduceSum of block b of repeat r.
static void repeat_forms(TPipe& pipe, Ctx& c) {
    TQue<TPosition::VECIN, 1> qi;
    TQue<TPosition::VECOUT, 1> qo;
    pipe.InitBuffer(qi, 1, c.n * sizeof(float));
    pipe.InitBuffer(qo, 1, 3 * c.n * sizeof(float));
    LocalTensor<float> x = load(qi, c.in, c.n);
    LocalTensor<float> y = qo.AllocTensor<float>();
    Duplicate(y, 0.0f, 3 * c.n);
    int32_t reps = static_cast<int32_t>(c.n / 64);
    Add(y, x, x, 64, reps, BinaryRepeatParams(1, 1, 1, 8, 8, 8));
    WholeReduceSum(y[c.n], x, 64, reps, 1, 1, 8);
    BlockReduceSum(y[2 * c.n], x, reps, 64, 1, 1, 8);
    qi.FreeTensor(x);
    store(qo, y, c.out, 3 * c.n);
}

// out halves: [mode][n] for the 7 round modes of float -> half, then bf16 for RINT, ROUND,
// FLOOR, CEIL, TRUNC; out is viewed as uint16 by the test.
static void cast_modes(TPipe& pipe, Ctx& c) {
    TQue<TPosition::VECIN, 1> qi;
    TQue<TPosition::VECOUT, 1> qo;
    pipe.InitBuffer(qi, 1, c.n * sizeof(float));
    pipe.InitBuffer(qo, 1, 12 * c.n * sizeof(half));
    LocalTensor<float> x = load(qi, c.in, c.n);
    LocalTensor<half> h = qo.AllocTensor<half>();
    const RoundMode hm[] = {RoundMode::CAST_NONE, RoundMode::CAST_RINT, RoundMode::CAST_FLOOR, RoundMode::CAST_CEIL,
                            RoundMode::CAST_ROUND, RoundMode::CAST_TRUNC, RoundMode::CAST_ODD};
    for (uint32_t m = 0; m < 7; ++m) Cast(h[m * c.n], x, hm[m], c.n);
    LocalTensor<bfloat16_t> b = h.ReinterpretCast<bfloat16_t>();
    for (uint32_t m = 0; m < 5; ++m) Cast(b[(7 + m) * c.n], x, hm[m + 1], c.n);
    qi.FreeTensor(x);
    qo.EnQue(h);
    LocalTensor<half> o = qo.DeQue<half>();
    GlobalTensor<half> og;
    og.SetGlobalBuffer((__gm__ half*)c.out.GetPhyAddr(), 12 * c.n);
    DataCopy(og, o, 12 * c.n);
    qo.FreeTensor(o);
}

// A 5 x 13 float matrix (in[0..65)) through DataCopyPad bursts: UB rows padded to 16 floats
// (right pad 3 zeros), out[0..65) = 2 * in, out[80] = sum of the padded UB block.
static void pad_bursts(TPipe& pipe, Ctx& c) {
    TQue<TPosition::VECIN, 1> qi;
    TQue<TPosition::VECOUT, 1> qo;
    TBuf<TPosition::VECCALC> work;
    pipe.InitBuffer(qi, 1, 80 * sizeof(float));
    pipe.InitBuffer(qo, 1, 80 * sizeof(float));
    pipe.InitBuffer(work, 32);
    LocalTensor<float> x = qi.AllocTensor<float>();
    DataCopyPad(x, c.in, DataCopyExtParams(5, 13 * sizeof(float), 0, 0, 0),
                DataCopyPadExtParams<float>(true, 0, 3, 0.0f));
    qi.EnQue(x);
    x = qi.DeQue<float>();
    LocalTensor<float> y = qo.AllocTensor<float>();
    Muls(y, x, 2.0f, 80);
    qo.EnQue(y);
    y = qo.DeQue<float>();
    DataCopyPad(c.out, y, DataCopyExtParams(5, 13 * sizeof(float), 0, 0, 0));
    qo.FreeTensor(y);
    LocalTensor<float> s = qo.AllocTensor<float>();
    Duplicate(s, 0.0f, 8);
    ReduceSum(s, x, work.Get<float>(), 80);
    qi.FreeTensor(x);
    store(qo, s, c.out[80], 8);
}

// Explicit flags instead of queues: TBuf in, vector, TBuf out; a V->S flag before GetValue.
static void setflag_sync(TPipe& pipe, Ctx& c, bool with_flags) {
    TBuf<TPosition::VECCALC> buf, work, sum;
    pipe.InitBuffer(buf, c.n * sizeof(float));
    pipe.InitBuffer(work, c.n * sizeof(float));
    pipe.InitBuffer(sum, 32);
    LocalTensor<float> t = buf.Get<float>();
    DataCopy(t, c.in, c.n);
    SetFlag<HardEvent::MTE2_V>(EVENT_ID0);
    WaitFlag<HardEvent::MTE2_V>(EVENT_ID0);
    Muls(t, t, 2.0f, c.n);
    LocalTensor<float> s = sum.Get<float>();
    PipeBarrier<PIPE_V>();  // ReduceSum reads what Muls wrote
    ReduceSum(s, t, work.Get<float>(), c.n);
    if (with_flags) {
        event_t e = static_cast<event_t>(GetTPipePtr()->FetchEventID(HardEvent::V_S));
        SetFlag<HardEvent::V_S>(e);
        WaitFlag<HardEvent::V_S>(e);
    }
    float total = s.GetValue(0);
    SetFlag<HardEvent::V_MTE3>(EVENT_ID1);
    WaitFlag<HardEvent::V_MTE3>(EVENT_ID1);
    DataCopy(c.out, t, c.n);
    c.out.SetValue(c.n, total);
}

static void setvalue_dma(TPipe& pipe, Ctx& c) {
    TQue<TPosition::VECIN, 1> qi;
    pipe.InitBuffer(qi, 1, 32);
    c.out.SetValue(0, 1.0f);
    LocalTensor<float> x = load(qi, c.out, 8);  // DMA of a line still in the data cache
    qi.FreeTensor(x);
}

// out[0..8) = 0.5 by core 0, then every core atomically adds its index + 1.
static void init_atomic(TPipe& pipe, Ctx& c) {
    if (GetBlockIdx() == 0) InitGlobalMemory(c.out, 8, 0.5f);
    SyncAll();
    all_cores_write(pipe, c, true);
}

// out[0] = max(in), out[1] = its index (int bits), out[8..8+n) = in + 0.5 * in (Axpy).
static void reduce_max_axpy(TPipe& pipe, Ctx& c) {
    TQue<TPosition::VECIN, 1> qi;
    TQue<TPosition::VECOUT, 1> qo;
    TBuf<TPosition::VECCALC> work;
    pipe.InitBuffer(qi, 1, c.n * sizeof(float));
    pipe.InitBuffer(qo, 1, (c.n + 8) * sizeof(float));
    pipe.InitBuffer(work, c.n * sizeof(float));
    LocalTensor<float> x = load(qi, c.in, c.n);
    LocalTensor<float> y = qo.AllocTensor<float>();
    Duplicate(y, 0.0f, 8);
    ReduceMax(y, x, work.Get<float>(), c.n, true);
    LocalTensor<float> z = y[8];
    DataCopy(z, x, c.n);  // UB->UB on the vector pipe
    PipeBarrier<PIPE_V>();  // Axpy adds into what the copy wrote
    Axpy(z, x, 0.5f, c.n);
    qi.FreeTensor(x);
    store(qo, y, c.out, c.n + 8);
}

// half: in (float) -> half by the repeat-form Cast; out (as half) [0..128) = x + x for the lanes
// of a bit mask (even lanes; odd lanes keep the Duplicate'd 7 of the repeat-form Duplicate);
// [128..130) = WholeReduceSum of the two 64-lane halves.
static void half_forms(TPipe& pipe, Ctx& c) {
    TQue<TPosition::VECIN, 1> qi;
    TQue<TPosition::VECOUT, 1> qo;
    TBuf<TPosition::VECCALC> hb;
    pipe.InitBuffer(qi, 1, 128 * sizeof(float));
    pipe.InitBuffer(qo, 1, 256 * sizeof(half));
    pipe.InitBuffer(hb, 128 * sizeof(half));
    LocalTensor<float> x = load(qi, c.in, 128);
    LocalTensor<half> h = hb.Get<half>();
    Cast(h, x, RoundMode::CAST_NONE, 64, 2, UnaryRepeatParams(1, 1, 4, 8));  // 64 lanes: 4 half blocks
    qi.FreeTensor(x);
    LocalTensor<half> y = qo.AllocTensor<half>();
    Duplicate(y, half(7.0f), 128, 2, 1, 8);
    const uint64_t even[2] = {0x5555555555555555ull, 0x5555555555555555ull};
    PipeBarrier<PIPE_V>();  // Add reads the Cast's result
    Add(y, h, h, even, 1, BinaryRepeatParams());
    WholeReduceSum(y[128], h, 64, 2, 1, 1, 4);
    Duplicate(y[144], half(0.0f), 112);
    qo.EnQue(y);
    LocalTensor<half> o = qo.DeQue<half>();
    GlobalTensor<half> og;
    og.SetGlobalBuffer((__gm__ half*)c.out.GetPhyAddr(), 256);
    DataCopy(og, o, 256);
    qo.FreeTensor(o);
}

// Two phases with different UB layouts: copy_twice, Reset, copy_twice again (out = 2 * in).
// STALE_AFTER_RESET keeps a TBuf tensor across the Reset and uses it.
static void reset_reuse(TPipe& pipe, Ctx& c, bool stale) {
    TBuf<TPosition::VECCALC> big, many[62];  // 63 of the 64 buffers: Reset must free the count
    pipe.InitBuffer(big, OPGEN_UB_BYTES / 2);
    for (auto& b : many) pipe.InitBuffer(b, 32);
    LocalTensor<float> old = big.Get<float>();
    Duplicate(old, 1.0f, 64);
    pipe.Reset();
    if (stale) Duplicate(old, 2.0f, 64);
    copy_twice(pipe, c);
}

// Strided bursts: GM rows of 16 floats, 8 taken from each of 4 rows into 32 contiguous UB
// floats, written back with the same gaps: out[16r .. 16r+8) = in[16r .. 16r+8).
static void datacopy_params(TPipe& pipe, Ctx& c) {
    TQue<TPosition::VECIN, 1> qi;
    pipe.InitBuffer(qi, 1, 32 * sizeof(float));
    LocalTensor<float> x = qi.AllocTensor<float>();
    DataCopy(x, c.in, DataCopyParams(4, 1, 1, 0));
    qi.EnQue(x);
    x = qi.DeQue<float>();
    SetFlag<HardEvent::MTE2_MTE3>(EVENT_ID0);
    WaitFlag<HardEvent::MTE2_MTE3>(EVENT_ID0);
    DataCopy(c.out, x, DataCopyParams(4, 1, 0, 1));
    qi.FreeTensor(x);
}

// Core 0 fails at once; the others wait in SyncAll, or compute for a long time and then mark
// out[core] = 1 (they must be stopped before: the mark stays 0).
static void fail_while_others(TPipe& pipe, Ctx& c, bool wait) {
    TQue<TPosition::VECIN, 1> q;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(q, 1, 32);
    pipe.InitBuffer(buf, 256);
    if (GetBlockIdx() == 0) {
        LocalTensor<float> never = q.DeQue<float>();
        q.FreeTensor(never);
    } else if (wait) {
        SyncAll();
    } else {
        LocalTensor<float> t = buf.Get<float>();
        Duplicate(t, 0.0f, 64);
        for (int i = 0; i < 1000000; ++i) { PipeBarrier<PIPE_V>(); Adds(t, t, 1.0f, 64); }
        c.out.SetValue(GetBlockIdx(), 1.0f);
    }
}

// A TBuf copied out (MTE3 reads it) then overwritten by a vector op: with WAR_SYNCED a
// SetFlag/WaitFlag<MTE3_V> sits in between; out = 2 * in either way.
static void war_mte3_v(TPipe& pipe, Ctx& c, bool synced) {
    TQue<TPosition::VECIN, 1> qi;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(qi, 1, c.n * sizeof(float));
    pipe.InitBuffer(buf, c.n * sizeof(float));
    LocalTensor<float> x = load(qi, c.in, c.n);
    LocalTensor<float> t = buf.Get<float>();
    Add(t, x, x, c.n);
    SetFlag<HardEvent::V_MTE3>(EVENT_ID0);
    WaitFlag<HardEvent::V_MTE3>(EVENT_ID0);
    DataCopy(c.out, t, c.n);
    if (synced) {
        SetFlag<HardEvent::MTE3_V>(EVENT_ID1);
        WaitFlag<HardEvent::MTE3_V>(EVENT_ID1);
    }
    Duplicate(t, 0.0f, c.n);  // reuse the scratch
    qi.FreeTensor(x);
}

// Core 0 writes ws[0..8) with SetValue, SyncAll, the last core copies ws[0..8) to out; with
// SETVALUE_FLUSHED core 0 calls DataCacheCleanAndInvalid first.
static void setvalue_cross_core(TPipe& pipe, Ctx& c, bool flush) {
    TQue<TPosition::VECIN, 1> qi;
    TQue<TPosition::VECOUT, 1> qo;
    pipe.InitBuffer(qi, 1, 32);
    pipe.InitBuffer(qo, 1, 32);
    if (GetBlockIdx() == 0) {
        for (uint32_t i = 0; i < 8; ++i) c.ws.SetValue(i, static_cast<float>(i));
        if (flush) DataCacheCleanAndInvalid<float, CacheLine::ENTIRE_DATA_CACHE>(c.ws);
    }
    SyncAll();
    if (GetBlockIdx() == GetBlockNum() - 1) {
        LocalTensor<float> w = load(qi, c.ws, 8);
        LocalTensor<float> y = qo.AllocTensor<float>();
        Adds(y, w, 0.0f, 8);
        qi.FreeTensor(w);
        store(qo, y, c.out, 8);
    }
}

// Two copies into overlapping UB (or GM) bytes on the same DMA pipe: the second must come
// after a PipeBarrier of that pipe. out[0..96) = in[0..32) ++ in[0..64) when it runs.
static void dma_overlap(TPipe& pipe, Ctx& c, int mode) {
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 96 * sizeof(float));
    LocalTensor<float> t = buf.Get<float>();
    if (mode == MTE3_OVERLAP) {
        DataCopy(t, c.in, 96);
        PipeBarrier<PIPE_ALL>();
        DataCopy(c.out, t, 64);
        DataCopy(c.out[32], t[32], 64);
        return;
    }
    DataCopy(t, c.in, 64);
    if (mode == MTE2_OVERLAP_BARRIER) PipeBarrier<PIPE_MTE2>();
    DataCopy(t[32], c.in, 64);
    PipeBarrier<PIPE_ALL>();
    DataCopy(c.out, t, 96);
}

extern "C" __global__ __aicore__ void emu_case(GM_ADDR in, GM_ADDR out, GM_ADDR ws, GM_ADDR tiling) {
    GET_TILING_DATA_WITH_STRUCT(CaseTiling, t, tiling);
    Ctx c;
    c.n = t.n;
    c.in.SetGlobalBuffer((__gm__ float*)in, t.n);
    c.out.SetGlobalBuffer((__gm__ float*)out);
    // CANN's workspace argument starts with the system workspace: the user part comes from
    // GetUserWorkspace (RAW_WORKSPACE binds the raw argument, as a kernel that forgets it would).
    GM_ADDR user_ws = t.mode == RAW_WORKSPACE ? ws : GetUserWorkspace(ws);
    if (user_ws) c.ws.SetGlobalBuffer((__gm__ float*)user_ws);
    TPipe pipe;
    switch (t.mode) {
        case OVER_UB: case TOO_MANY_BUFFERS: ub_violations(pipe, t.mode); break;
        case MISALIGNED_UB: case RAGGED_DATACOPY: case GM_OVERRUN: case SETGLOBAL_OVERRUN: case DATACOPY_ZERO:
        case DATACOPYPAD_ZERO:
            copy_violations(pipe, c, t.mode); break;
        case MTE3_V_THEN_MTE2_GM: gm_readback_wrong_event(pipe, c); break;
        case WRONG_EVENT: case WRONG_EVENT_WAR: case VECTOR_RAW: case VECTOR_RAW_BARRIER: case VECTOR_ROWS:
        case DANGLING_SETFLAG:
        case REPEAT_OVER_255: case MISSING_PIPE_SYNC: case REPEAT_STRIDE_OVERRUN: case PARTIAL_OVERLAP:
        case DOUBLE_WRITE: case MASK_RANGE: case CAST_BAD_MODE: vector_violations(pipe, c, t.mode); break;
        case HALF_FORMS: half_forms(pipe, c); break;
        case QUEUE_GETVALUE: case QUEUE_GETVALUE_SYNCED: scalar_after_queue(pipe, c, t.mode == QUEUE_GETVALUE_SYNCED); break;
        case RESET_REUSE: case STALE_AFTER_RESET: reset_reuse(pipe, c, t.mode == STALE_AFTER_RESET); break;
        case DATACOPY_PARAMS: datacopy_params(pipe, c); break;
        case ALLOC_ALL_IN_USE: case DOUBLE_FREE: case FOREIGN_FREE: case TBUF_GET_OVER:
        case TBUF_OFFSET_MISALIGNED: case SUBTENSOR_OVER: handle_violations(pipe, c, t.mode); break;
        case SETVALUE_UNFLUSHED: case SETVALUE_FLUSHED:
            setvalue_cross_core(pipe, c, t.mode == SETVALUE_FLUSHED); break;
        case MTE2_OVERLAP: case MTE2_OVERLAP_BARRIER: case MTE3_OVERLAP: dma_overlap(pipe, c, t.mode); break;
        case WAR_MTE3_V: case WAR_SYNCED: war_mte3_v(pipe, c, t.mode == WAR_SYNCED); break;
        case FAIL_WHILE_OTHERS_WAIT: case FAIL_WHILE_OTHERS_WORK:
            fail_while_others(pipe, c, t.mode == FAIL_WHILE_OTHERS_WAIT); break;
        case DEQUE_EMPTY: case ENQUE_FULL: case USE_AFTER_FREE: case POISON_READ: case GETVALUE_POISON:
            queue_violations(pipe, c, t.mode); break;
        case GM_RACE: all_cores_write(pipe, c, false); break;
        case GM_ATOMIC: all_cores_write(pipe, c, true); break;
        case SYNCALL_ORDER: case SYNCALL_MISSING: cross_core(pipe, c, t.mode); break;
        case SYNCALL_MISMATCH: if (GetBlockIdx() == 0) SyncAll(); break;  // the others never arrive
        case REPEAT_FORMS: repeat_forms(pipe, c); break;
        case CAST_MODES: cast_modes(pipe, c); break;
        case LEAK: { TQue<TPosition::VECIN, 1> q; pipe.InitBuffer(q, 1, 32); q.AllocTensor<float>(); break; }
        case PAD_BURSTS: pad_bursts(pipe, c); break;
        case SETFLAG_SYNC: case VS_MISSING: setflag_sync(pipe, c, t.mode == SETFLAG_SYNC); break;
        case SETVALUE_DMA: setvalue_dma(pipe, c); break;
        case INIT_ATOMIC: init_atomic(pipe, c); break;
        case REDUCE_MAX_AXPY: reduce_max_axpy(pipe, c); break;
        case WS_UNINIT_ATOMIC: { Ctx w = c; w.out = c.ws; all_cores_write(pipe, w, true); break; }
        case WS_UNINIT_READ: { Ctx w = c; w.in = c.ws; copy_twice(pipe, w); break; }
        case ATOMIC_LEFT_ON: SetAtomicAdd<float>(); break;
        case GM_GETVALUE_AFTER_MTE3: copy_twice(pipe, c); c.ws.SetValue(0, c.out.GetValue(1)); break;
        default: copy_twice(pipe, c); break;
    }
}

OPGEN_EMU_EXPORT(emu_case, 4)
