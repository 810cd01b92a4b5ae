// opgen AscendC emulation: the APIs CANN's own hand-written kernels (hicann/ops-nn) use beyond
// what opgen emits, so those kernels compile and run here unchanged (`opgen compare --against
// cann-src DIR`). Semantics follow asc-devkit (cannmirror/asc-devkit: include/basic_api, the
// dav_c220 implementation for Atlas A2/A3, docs/zh/api); where the public sources do not fix
// what an API computes, it fails at run time with a message saying so instead of guessing.
//
//   likely / unlikely, assert          compiler hints the kernels use
//   g_coreType, AIV / AIC, ASCEND_IS_AIV / ASCEND_IS_AIC / ASCEND_IS_NOT_AIC
//                                      every emulated core is a vector core (AIV)
//   MASK_PLACEHOLDER, FULL_MASK        the mask argument of an isSetMask = false call
//   SetVectorMask<T>(len) / (hi, lo), AscendCUtils::SetMask<T>(len) / (hi, lo), ResetMask()
//                                      the vector mask register (Normal mode), read by repeat
//                                      forms called with isSetMask = false (emu_vector_core.h)
//   InitOutput<T>(gm, size, value)     deprecated name of a GM fill (asc-devkit
//                                      kernel_operator_common_intf_impl.h: Duplicate into a
//                                      stack buffer, V->MTE3, DataCopyPad to GM): InitGlobalMemory
//   BroadCast<T, dim, axis>(dst, src, dstShape, srcShape[, tmp])  (= Broadcast, include/adv_api/
//                                      pad/broadcast.h): dim 1 or 2, axis 0 or 1; the timing model
//                                      charges the documented steps (Brcb of the column for
//                                      axis 1, then one copy pass over dst) as vector repeats
//   ASSERT(x)                          asc-devkit impl/basic_api/kernel_macros.h: assert(x) in CPU
//                                      debug builds (the emulation is one)
//   IsSameType<T, U>::value            impl/basic_api/utils: true for the same type
//   ToFloat(bfloat16_t)                impl/basic_api/kernel_scalar_convert.h: the exact widening
//   CopyRepeatParams, Copy<T, isSetMask>(dst, src, mask | mask[2], repeatTime, params)
//                                      UB -> UB masked copy (docs/zh/api .../UBToUB掩码式高维数据
//                                      搬运(Copy).md): per repeat the mask's lanes, block strides
//                                      dst/srcStride, repeat strides dst/srcRepeatSize (32 B
//                                      blocks); a vector instruction, timed as one repeat each
//   ReduceSum count form (emu_reduce_cast.h, with __CCE_AICORE__ == 220): dst[0] stored by the
//                                      scalar unit between V_S and S_V / S_MTE3 flags (dav_c220)
//   kernel_tiling/kernel_tiling.h, kernel_type.h   include shims (nothing of them is used)
//   GetAccVal()                        declared; fails if called (which ReduceSum forms leave
//                                      their sum in the ACC_VAL register is not documented)
#ifndef OPGEN_EMU_CANN_H
#define OPGEN_EMU_CANN_H

#include <cassert>

#include "emu_extra.h"

#ifndef ASSERT
#define ASSERT(x) assert(x)
#endif

#ifndef likely
#define likely(x) __builtin_expect(!!(x), 1)
#endif
#ifndef unlikely
#define unlikely(x) __builtin_expect(!!(x), 0)
#endif

namespace AscendC {

enum CoreType : int32_t { AIC = 1, AIV = 2 };
constexpr int32_t MASK_PLACEHOLDER = 0;
constexpr uint64_t FULL_MASK = ~uint64_t(0);

}  // namespace AscendC

// Kernels compare g_coreType unqualified, and test ASCEND_IS_AIV as `if ASCEND_IS_AIV { ... }`.
constexpr int32_t g_coreType = AscendC::AIV;
#define ASCEND_IS_AIV (g_coreType == AscendC::AIV)
#define ASCEND_IS_AIC (g_coreType == AscendC::AIC)
#define ASCEND_IS_NOT_AIV (g_coreType != AscendC::AIV)
#define ASCEND_IS_NOT_AIC (g_coreType != AscendC::AIC)

namespace AscendC {

// The mask register's two halves (lanes 64..127, lanes 0..63); a scalar instruction.
template <typename T, bool isSetMask = true>
void SetVectorMask(const uint64_t maskHigh, const uint64_t maskLow) {
    if constexpr (!isSetMask) return;
    opgen_emu::CoreState& c = opgen_emu::core();
    c.vector_mask[0] = maskLow;
    c.vector_mask[1] = maskHigh;
    c.vector_mask_known = true;
}

// The first len lanes, as asc-devkit's AscendCUtils::SetMask<T>(int32_t) sets them
// (impl/basic_api/kernel_utils_base.h): 64 -> (0, all ones); one repeat's lanes or >= 128 ->
// all ones in both halves; else the low len bits.
template <typename T, bool isSetMask = true>
void SetVectorMask(int32_t len) {
    if constexpr (!isSetMask) return;
    const int32_t per_repeat = static_cast<int32_t>(ONE_REPEAT_BYTE_SIZE / sizeof(T));
    if (len == 64) return SetVectorMask<T>(0, FULL_MASK);
    if (len == per_repeat || len >= 128) return SetVectorMask<T>(FULL_MASK, FULL_MASK);
    if (len <= 0) opgen_emu::fail(opgen_emu::cat("SetVectorMask: len ", len, " selects no lanes"));
    const uint64_t high = len > 64 ? (uint64_t(1) << (len - 64)) - 1 : 0;
    const uint64_t low = len > 64 ? FULL_MASK : (uint64_t(1) << len) - 1;
    SetVectorMask<T>(high, low);
}

inline void ResetMask() { SetVectorMask<half>(FULL_MASK, FULL_MASK); }

struct AscendCUtils {
    template <typename T, bool isSetMask = true>
    static void SetMask(const uint64_t& maskHigh, const uint64_t& maskLow) {
        SetVectorMask<T, isSetMask>(maskHigh, maskLow);
    }
    template <typename T, bool isSetMask = true>
    static void SetMask(int32_t len) {
        SetVectorMask<T, isSetMask>(len);
    }
};

// Deprecated in asc-devkit ("use Fill instead"); the same GM fill as InitGlobalMemory.
template <typename T>
void InitOutput(GlobalTensor<T> gm, uint32_t size, T value = 0) {
    InitGlobalMemory(gm, size, value);
}

namespace detail {
// Element (i, j) of a dim-D shape's flat index, i over the first axis (D = 2) or 0 (D = 1).
inline uint64_t flat(uint64_t i, uint64_t j, uint64_t cols) { return i * cols + j; }
}  // namespace detail

// dst = src repeated along `axis` (its size 1 in srcShape) up to dstShape; dst and src dense.
template <typename T, int32_t dim, int32_t axis, bool isReuseSource = false>
void BroadCast(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t dstShape[dim],
               const uint32_t srcShape[dim], const LocalTensor<uint8_t>& = LocalTensor<uint8_t>()) {
    static_assert(dim == 1 || dim == 2, "BroadCast: dim 1 or 2 (asc-devkit Broadcast)");
    static_assert(axis == 0 || axis == 1, "BroadCast: axis 0 or 1");
    static_assert(dim == 2 || axis == 0, "BroadCast: a 1-dim shape broadcasts axis 0");
    using namespace opgen_emu;
    const char* api = "BroadCast";
    poll_abort();
    const uint64_t rows = dim == 2 ? dstShape[0] : 1, cols = dstShape[dim - 1];
    for (int32_t d = 0; d < dim; ++d)
        if (d == axis ? srcShape[d] != 1 : srcShape[d] != dstShape[d])
            fail(cat(api, ": srcShape must equal dstShape except a 1 on axis ", axis));
    std::vector<uint64_t> di, si;
    for (uint64_t i = 0; i < rows; ++i)
        for (uint64_t j = 0; j < cols; ++j) {
            di.push_back(detail::flat(i, j, cols));
            si.push_back(dim == 1 ? 0 : axis == 0 ? j : i);
        }
    Span d = check_operand(dst, di, api, false);
    Span s = check_operand(src, si, api, true);
    if (d.lo < s.hi && s.lo < d.hi) fail(cat(api, ": dst and src overlap in UB"));
    CoreState& c = core();
    for (size_t k = 0; k < di.size(); ++k) {
        bool ok = true;
        double v = load(c, src, si[k], ok);
        store(c, dst, di[k], v, ok);
    }
    c.launch->vector_elems += di.size();
    mark_write(dst.slot(), Pipe::V, api);
    if (dim == 2 && axis == 1) c.clock.vector("BroadCast (Brcb)", sizeof(T), (rows + 7) / 8);
    c.clock.vector(api, sizeof(T), std::max<uint64_t>(1, (di.size() * sizeof(T) + kRepeatBytes - 1) / kRepeatBytes));
}

template <typename T, typename U>
struct IsSameType { static constexpr bool value = false; };
template <typename T>
struct IsSameType<T, T> { static constexpr bool value = true; };

inline float ToFloat(const bfloat16_t& v) { return static_cast<float>(v); }

struct CopyRepeatParams {
    CopyRepeatParams() {}
    CopyRepeatParams(uint16_t dstStrideIn, uint16_t srcStrideIn, uint16_t dstRepeatSizeIn, uint16_t srcRepeatSizeIn)
        : dstStride(dstStrideIn), srcStride(srcStrideIn), dstRepeatSize(dstRepeatSizeIn),
          srcRepeatSize(srcRepeatSizeIn) {}
    uint16_t dstStride = 1;
    uint16_t srcStride = 1;
    uint16_t dstRepeatSize = 8;
    uint16_t srcRepeatSize = 8;
};

namespace detail {
template <typename T>
constexpr bool copy_ok = std::is_same<T, half>::value || std::is_same<T, bfloat16_t>::value ||
                         std::is_same<T, float>::value || std::is_same<T, int16_t>::value ||
                         std::is_same<T, int32_t>::value;

// UB -> UB copy of `lanes` (the mask's lanes per repeat) with Copy's repeat strides.
template <typename T, typename Lanes>
void copy_repeats(const LocalTensor<T>& dst, const LocalTensor<T>& src, const Lanes& lanes,
                  const CopyRepeatParams& p) {
    static_assert(copy_ok<T>, "Copy: emulated for half, bfloat16_t, float, int16_t, int32_t");
    using namespace opgen_emu;
    if (p.dstRepeatSize > 4095 || p.srcRepeatSize > 4095) fail("Copy: dst/srcRepeatSize over 4095");
    elementwise("Copy", lanes, dst, Strides{p.dstStride, p.dstRepeatSize}, [](double a) { return a; },
                std::make_pair(&src, Strides{p.srcStride, p.srcRepeatSize}));
}
}  // namespace detail

// UB -> UB copy of the mask's lanes per repeat (isSetMask = false: the mask register's);
// the mask as a lane count or as two 64-bit words.
template <typename T, bool isSetMask = true>
void Copy(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint64_t mask, const uint8_t repeatTime,
          const CopyRepeatParams& p) {
    detail::copy_repeats(dst, src, opgen_emu::repeat_lanes<isSetMask>(mask, repeatTime, opgen_emu::max_lanes<T>(),
                                                                        "Copy"), p);
}

template <typename T, bool isSetMask = true>
void Copy(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint64_t mask[], const uint8_t repeatTime,
          const CopyRepeatParams& p) {
    detail::copy_repeats(dst, src, opgen_emu::repeat_lanes<isSetMask>(mask, repeatTime, opgen_emu::max_lanes<T>(),
                                                                        "Copy"), p);
}

inline uint64_t GetAccVal() {
    opgen_emu::fail("GetAccVal: not emulated (the public asc-devkit sources do not document which "
                    "ReduceSum forms leave their result in the ACC_VAL register)");
}

}  // namespace AscendC

// Widening Casts that used CANN's in-place idiom (emu_reduce_cast.h widening_overlap_ok) in
// every launch of this library so far.
extern "C" __attribute__((weak, visibility("default"))) uint64_t opgen_emu_cann_idioms(void) {
    return opgen_emu::widening_overlaps.load();
}

#endif  // OPGEN_EMU_CANN_H
