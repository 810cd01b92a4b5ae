// opgen's strict CPU emulation of the AscendC vector-core API subset.
//
// An AscendC kernel written for CANN includes "kernel_operator.h"; built with g++ against this
// directory instead, it runs on the CPU, one thread per core, with checks at least as strict as
// CANN's CPU debug mode (ASCENDC_CPU_DEBUG) and stricter where that mode is blind.
//
// ============================================================================ building
//   g++ -std=c++17 -O1 -pthread -shared -fPIC -I<this dir> [macros] kernel.cpp -o kernel.so
// Macros (set from the product's hardware description):
//   OPGEN_UB_BYTES=<n>      UB capacity per core in bytes (default 196608, Atlas A2/A3)
//   OPGEN_MAX_BUFFERS=<n>   most TQue/TBuf buffers per TPipe (default 64)
//   OPGEN_NO_DATACOPYPAD    the product has no DataCopyPad (Atlas training / Atlas inference):
//                           calling it is an error
//   OPGEN_VECTOR_CORES=<n> the product's vector cores: SyncAll with block_dim > n is an error
//                           (cores would not all be resident; the hardware would hang)
//   OPGEN_EMU_CHECK_WAR     also report write-after-read hazards: a UB buffer overwritten on one
//                           pipe while V or MTE3 may still be reading it (no sync in between)
//   OPGEN_EMU_AUTO_SCALAR_SYNC  trust the compiler's auto-sync for the S pipe: GetValue/SetValue
//                           next to vector or copy work need no explicit flags, and dependent
//                           vector instructions no PipeBarrier<PIPE_V>
//   OPGEN_REDUCE_ACROSS_TREE   ReduceSum's count form sums its repeats' partials by a binary
//                           tree (Atlas training / inference, 200I/500 A2) instead of in
//                           sequence (Atlas A2/A3)
//   OPGEN_EMU_EXACT         the old exact numerics, for debugging: reductions sum in double and
//                           round once per stage
//   OPGEN_VEC_BF16          the vector unit computes in bfloat16_t (otherwise arithmetic on
//                           bfloat16_t tensors does not compile: Cast to float first)
//
// ============================================================================ the kernel
//   extern "C" __global__ __aicore__ void my_kernel(GM_ADDR x, GM_ADDR y, GM_ADDR workspace,
//                                                   GM_ADDR tiling) { ... }
//   OPGEN_EMU_EXPORT(my_kernel, 4)     // after the kernel, once per kernel: the C launcher
//
// Tiling: the tiling argument points at a plain struct (POD) written by the host. Read it with
//   GET_TILING_DATA_WITH_STRUCT(MyTilingData, t, tiling);  // MyTilingData t = copy from GM
// or #define OPGEN_TILING_TYPE MyTilingData and GET_TILING_DATA(t, tiling). The copy is
// bounds-checked against the tiling argument's size. The kernel's workspace argument is CANN's
// system workspace (16 MB, reserved: any access is an error); GetUserWorkspace(workspace)
// returns the user workspace behind it (the launcher's args[nargs-2]).
//
// ============================================================================ the launcher ABI
//   extern "C" int opgen_emu_launch_<kernel>(uint32_t block_dim, void* const* args,
//                                            const uint64_t* sizes, uint32_t nargs);
//     args[i]:  the i-th GM_ADDR argument (host memory; may be NULL when sizes[i] == 0)
//     sizes[i]: its size in bytes; every GM access is checked against it
//     args[nargs-2] is the workspace (CANN's order: ..., workspace, tiling): the launcher fills
//     it with 0xFF (NaN) bytes, as device workspace holds garbage, and tracks which bytes the
//     kernel writes; data read from never-written workspace counts as never written.
//     Runs the kernel on block_dim cores (threads, GetBlockIdx() = 0..block_dim-1) and returns
//     0 on success, nonzero on a violation (1), bad launch arguments (2) or an internal failure of
//     the emulation (3, e.g. out of memory). The host process is
//     never aborted: a violation throws inside its core, all cores stop (cores waiting in SyncAll
//     are released) and the launcher returns.
//   extern "C" const char* opgen_emu_last_error(void);
//     The message of the last failed launch on the calling thread ("" after a success).
//   extern "C" void opgen_emu_last_stats(uint64_t out[4]);  of the last launch on this thread:
//     GM bytes read into UB, GM bytes written from UB, peak UB bytes allocated by one core's
//     TPipe, vector element operations (to check a tiling's predicted traffic and footprint)
//   extern "C" uint64_t opgen_emu_ub_bytes(void);       the OPGEN_UB_BYTES built in
//   extern "C" void opgen_emu_set_tiling_key(uint64_t); the key TILING_KEY_IS(k) compares with
//   The host side (emu/host/: gert::TilingContext, PlatformAscendC, OpDef/OP_ADD) adds
//   opgen_emu_tiling(...) and opgen_emu_infer(...): see emu/host/register/op_def_registry.h.
//   extern "C" int opgen_emu_has_datacopypad(void);     0 when built with OPGEN_NO_DATACOPYPAD
// From Python (ctypes):
//   lib.opgen_emu_launch_my_kernel.argtypes = [c_uint32, POINTER(c_void_p), POINTER(c_uint64), c_uint32]
//   lib.opgen_emu_last_error.restype = c_char_p
//
// ============================================================================ the API subset
// Types: half, bfloat16_t (16-bit storage, RNE from float). GM_ADDR, __gm__, __aicore__, __global__.
// GlobalTensor<T>: SetGlobalBuffer(ptr, size) / (ptr), GetValue, SetValue, operator[], GetSize,
//   GetPhyAddr. LocalTensor<T>: GetValue, SetValue, operator[], GetSize, GetLength,
//   ReinterpretCast<U>. TPipe: InitBuffer(TQue&, num, bytes), InitBuffer(TBuf&, bytes), Reset,
//   FetchEventID. TQue<pos, depth>: AllocTensor<T>, EnQue, DeQue<T>, FreeTensor, HasTensorInQue.
//   TBuf<pos>: Get<T>(), Get<T>(len), GetWithOffset<T>(len, byteOffset). GetTPipePtr().
// Copies: DataCopy (count; DataCopyParams; UB->UB), DataCopyPad (DataCopyExtParams +
//   DataCopyPadExtParams<T>; DataCopyParams + DataCopyPadParams), InitGlobalMemory,
//   DataCacheCleanAndInvalid.
// Vector (count form, and repeat form: mask or mask[2], repeatTimes, Binary/UnaryRepeatParams):
//   Add Sub Mul Div Max Min; Adds Muls Maxs Mins; Exp Ln Sqrt Rsqrt Abs Reciprocal Relu;
//   Duplicate; Cast with RoundMode; Axpy (count). Reductions: ReduceSum (count; mask+repeat),
//   WholeReduceSum, BlockReduceSum, ReduceMax/ReduceMin (count, calIndex).
// Sync and cores: PipeBarrier<pipe_t>, pipe_barrier, SetFlag/WaitFlag<HardEvent>, GetBlockIdx,
//   GetBlockNum, SyncAll, SetAtomicAdd<T>, SetAtomicNone, GetUserWorkspace.
// Semantics chosen where the docs leave room (documented, checked by tests/test_ascend_emu.py):
//   repeatTimes is int32_t (values > 255 are reported, not wrapped); WholeReduceSum's
//   dstRepStride counts elements, BlockReduceSum's counts one repeat's 8 results; DataCopyPad
//   GM->UB without isPad leaves the pad bytes poisoned; the sum reductions add in T in the
//   documented order (a binary tree per repeat; across repeats sequential for ReduceSum's count
//   form on A2/A3, a tree otherwise: emu_reduce_cast.h); single vector ops are correctly rounded
//   to T (RNE), which is T arithmetic (emu_vector_core.h).
//
// ============================================================================ what is checked
// - UB: InitBuffer sizes (rounded to 32 B) against OPGEN_UB_BYTES, listing every buffer by the
//   variable name at its InitBuffer call; at most OPGEN_MAX_BUFFERS buffers; one TPipe.
// - Queues: EnQue on a full queue (depth), DeQue on an empty one, AllocTensor with every buffer
//   in use, FreeTensor twice or of a queued tensor, any use of a tensor after FreeTensor /
//   TPipe::Reset or while it sits in a queue; at kernel end, tensors left queued or unfreed.
// - UB poison: buffers are filled with 0xFF (NaN) on AllocTensor / InitBuffer(TBuf) and every
//   byte's "written" state is tracked through copies and vector ops; copying never-written bytes
//   to GM, or GetValue of one, is an error naming the buffer.
// - Copies: 32-byte UB alignment; DataCopy lengths in whole 32-byte blocks; DataCopyPad and
//   burst parameter ranges; every element inside the LocalTensor, the GlobalTensor
//   (SetGlobalBuffer size) and the kernel argument.
// - Vector ops: 32-byte aligned operands, bounds of every touched element (count and repeat
//   forms with block/repeat strides), repeatTimes <= 255, mask ranges, partial dst/src overlap,
//   an element written twice by one instruction, the dtypes each API supports, Cast round modes.
// - Pipe sync: reading a UB buffer on one pipe (MTE2 copy-in, V vector, MTE3 copy-out, S scalar)
//   right after another pipe wrote it, without EnQue/DeQue, SetFlag/WaitFlag or
//   PipeBarrier<PIPE_ALL>; with OPGEN_EMU_CHECK_WAR, overwriting a buffer V or MTE3 read without
//   sync; reading GM back on MTE2 that this core wrote on MTE3 without sync; two copies on one
//   DMA pipe to overlapping UB (MTE2) or GM (MTE3) bytes without PipeBarrier<PIPE_MTE2/3>, a
//   flag or a queue hand-over in between (the DMA engines may reorder them). A queue hand-over
//   orders only its two pipes (VECIN: MTE2 -> V, VECOUT: V -> MTE3): GetValue of copied-in data
//   needs MTE2_S. A vector instruction reading bytes an earlier vector instruction wrote needs
//   PipeBarrier<PIPE_V> (or PIPE_ALL, or a WaitFlag<V_S>) in between (asc-devkit PipeBarrier
//   docs); OPGEN_EMU_AUTO_SCALAR_SYNC leaves it to the compiler's auto-sync. A SetFlag never
//   waited for is reported at kernel end. Messages name the kernel line of the faulting call
//   where the API takes it (GetValue, vector count forms, reductions, Cast, DataCopy/Pad).
//   Events are checked per destination: WaitFlag<HardEvent::A_B> orders pipe B (only) after
//   pipe A's earlier work, so a WaitFlag<MTE2_MTE3> does not let V read what MTE2 wrote, and
//   GM written on MTE3 is released for MTE2/GetValue only by MTE3_MTE2 / MTE3_S (or PIPE_ALL,
//   SyncAll).
// - Workspace: the kernel's workspace argument is a reserved 16 MB system workspace (any
//   access is an error): take the user part with GetUserWorkspace(workspace).
//   SetAtomicAdd into never-written workspace; never-written workspace reaching an
//   output (through UB) or GlobalTensor::GetValue. SetAtomicAdd still on at kernel end.
// - GM data cache: DataCopy of GM bytes written with GlobalTensor::SetValue and not flushed with
//   DataCacheCleanAndInvalid (by this core, or by another core before a SyncAll).
// - Cores: GM bytes written by two cores (or written by one and read by another) between the
//   same two SyncAll calls, unless both writes are SetAtomicAdd accumulations; SyncAll is a
//   real barrier and a core returning while others wait in SyncAll is reported (a hang).
#ifndef OPGEN_EMU_KERNEL_OPERATOR_H
#define OPGEN_EMU_KERNEL_OPERATOR_H

// Load each kernel library with RTLD_LOCAL (ctypes' default): the emulation's inline functions
// have default visibility, and libraries built with other macros or another header version
// must not bind to each other's copies (a kernel TU may hold user types that embed
// emulation types, so the header cannot hide them).
#include <type_traits>
#include <utility>

#include "emu_cann.h"

#define KERNEL_TASK_TYPE_DEFAULT(x)
#define KERNEL_TYPE_AIV_ONLY 0

namespace opgen_emu {

inline void copy_tiling(void* dst, uint64_t bytes, const void* tiling) {
    if (!tiling) fail("GET_TILING_DATA: tiling argument is NULL");
    std::lock_guard<std::mutex> lk(current_core()->launch->gm_mutex);
    gm_check(tiling, bytes, "GET_TILING_DATA");
    std::memcpy(dst, tiling, bytes);
}

template <typename... P>
constexpr size_t kernel_arity(void (*)(P...)) { return sizeof...(P); }

template <typename K, size_t... I>
void call_kernel(K kernel, void* const* args, std::index_sequence<I...>) {
    kernel(static_cast<GM_ADDR>(args[I])...);
}

inline void check_tiling_for_key(const char* cond, const char* type) {
    static const char prefix[] = "TILING_KEY_VAR == ";
    const std::string text(cond);
    if (text.rfind(prefix, 0) != 0 || text.size() == sizeof prefix - 1 ||
        text.find_first_not_of("0123456789", sizeof prefix - 1) != std::string::npos) {
        fail(std::string("REGISTER_TILING_FOR_TILINGKEY(\"") + cond + "\", " + type +
             "): the emulation reads only \"TILING_KEY_VAR == <key>\"");
    }
    const uint64_t key = std::stoull(text.substr(sizeof prefix - 1));
    if (key != tiling_key()) {
        fail(std::string("REGISTER_TILING_FOR_TILINGKEY(\"") + cond + "\", " + type + ") in the branch of tiling key " +
             std::to_string(tiling_key()));
    }
}

}  // namespace opgen_emu

#define GET_TILING_DATA_WITH_STRUCT(type, var, tiling) \
    type var;                                          \
    opgen_emu::copy_tiling(&var, sizeof(type), tiling)
// REGISTER_TILING_DEFAULT(T) names the kernel's default tiling struct (a standard C++ struct the
// host's TilingContext::GetTilingData<T>() fills); GET_TILING_DATA then reads it.
#define REGISTER_TILING_DEFAULT(type)                                                              \
    static_assert(std::is_trivially_copyable<type>::value, #type " must be a plain struct");      \
    using OpgenDefaultTiling = type;                                                               \
    static_assert(sizeof(OpgenDefaultTiling) > 0, "")
// REGISTER_TILING_FOR_TILINGKEY(cond, T): the tiling struct of the launches whose tiling key
// satisfies cond, an expression over TILING_KEY_VAR (the form ops-nn's kernels use:
// experimental/norm/sync_batch_norm_gather_stats/op_kernel/common/
// sync_batch_norm_gather_stats_kernel_base.h, "TILING_KEY_VAR == 10001"), placed in the branch
// that key takes. The emulation reads the form "TILING_KEY_VAR == <key>" and stops a launch whose
// key is another: the branch registered a struct for a key it does not run.
#define REGISTER_TILING_FOR_TILINGKEY(cond, type)                                                  \
    static_assert(std::is_trivially_copyable<type>::value, #type " must be a plain struct");      \
    opgen_emu::check_tiling_for_key(cond, #type)
#ifdef OPGEN_TILING_TYPE
#define GET_TILING_DATA(var, tiling) GET_TILING_DATA_WITH_STRUCT(OPGEN_TILING_TYPE, var, tiling)
#else
#define GET_TILING_DATA(var, tiling) GET_TILING_DATA_WITH_STRUCT(OpgenDefaultTiling, var, tiling)
#endif

// TILING_KEY_IS(k): the launch's tiling key (set by the caller with opgen_emu_set_tiling_key, from
// what the host's TilingFunc set through TilingContext::SetTilingKey) equals k.
#define TILING_KEY_IS(k) (opgen_emu::tiling_key() == static_cast<uint64_t>(k))

#define OPGEN_EMU_EXPORT(kernel, nargs)                                                            \
    static_assert(opgen_emu::kernel_arity(kernel) == (nargs), #kernel " does not take " #nargs     \
                                                                      " GM_ADDR arguments");        \
    static void opgen_emu_thunk_##kernel(void* const* args) {                                      \
        opgen_emu::call_kernel(kernel, args, std::make_index_sequence<(nargs)>{});                 \
    }                                                                                              \
    extern "C" __attribute__((visibility("default"))) int opgen_emu_launch_##kernel(              \
        uint32_t block_dim, void* const* args, const uint64_t* sizes, uint32_t n) {                \
        return opgen_emu::launch(#kernel, (nargs), opgen_emu_thunk_##kernel, block_dim, args,      \
                                 sizes, n);                                                        \
    }

// Name UB buffers in messages by their variable: pipe.InitBuffer(inQueueX, 2, len) becomes
// pipe.InitBufferNamed("inQueueX, 2, len", inQueueX, 2, len). Defined last, after every use of
// the real member names inside the emulation.
#define InitBuffer(...) InitBufferNamed(#__VA_ARGS__, __VA_ARGS__)

// Weak: several translation units of one library may include this header.
extern "C" __attribute__((weak, visibility("default"))) const char* opgen_emu_last_error(void) {
    return opgen_emu::tls_last_error.c_str();
}
// out[0..4) = GM bytes read into UB, GM bytes written from UB, peak UB bytes of one core's
// TPipe, vector element operations: of the last launch on the calling thread.
extern "C" __attribute__((weak, visibility("default"))) void opgen_emu_last_stats(uint64_t* out) {
    for (int i = 0; i < 4; ++i) out[i] = opgen_emu::tls_last_stats[i];
}
// The timing model's parameters for launches from the calling thread (emu_timing.h's
// TimingParams, in field order; n may be less than all of them), and the last launch's result:
// out[0..10) = cycles, seconds, busy fraction of MTE2, V, MTE3, S, GM bytes, GM-bound seconds,
// bound / time, block_dim.
extern "C" __attribute__((weak, visibility("default"))) void opgen_emu_set_timing(const double* p, int n) {
    opgen_emu::tls_timing_params = opgen_emu::TimingParams();
    opgen_emu::tls_timing_params.set(p, n);
}
extern "C" __attribute__((weak, visibility("default"))) void opgen_emu_last_timing(double* out) {
    for (int i = 0; i < opgen_emu::kTimingOut; ++i) out[i] = opgen_emu::tls_last_timing[i];
}
// The tiling key TILING_KEY_IS sees in the next launch on the calling thread.
extern "C" __attribute__((weak, visibility("default"))) void opgen_emu_set_tiling_key(uint64_t key) {
    opgen_emu::tls_tiling_key = key;
}
extern "C" __attribute__((weak, visibility("default"))) uint64_t opgen_emu_ub_bytes(void) {
    return opgen_emu::kUbBytes;
}
extern "C" __attribute__((weak, visibility("default"))) int opgen_emu_has_datacopypad(void) {
#ifdef OPGEN_NO_DATACOPYPAD
    return 0;
#else
    return 1;
#endif
}

#endif  // OPGEN_EMU_KERNEL_OPERATOR_H
