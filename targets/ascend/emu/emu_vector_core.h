// opgen AscendC emulation: the vector instruction engine shared by all vector APIs.
//
// An instruction is a list of element indices per operand, built either from a count
// (elements 0..count-1) or from the repeat form (mask, repeatTimes, block and repeat strides
// in 32-byte blocks, 256 bytes per repeat). The engine checks 32-byte alignment, bounds,
// repeat and mask limits, partial dst/src overlap and pipe sync, computes in double (one
// rounding to the destination type, round-to-nearest-even), and propagates definedness:
// a result is defined only if all its inputs were written (poisoned data stays poisoned).
// Why double is device-faithful here: one IEEE add, sub, mul, div or sqrt of two T values done
// in double and rounded once to T (float: RNE; half/bfloat16: through round-to-odd float) gives
// the bits T arithmetic with RNE gives, since double carries more than 2p+2 bits of T's p. So
// every single-instruction op computes "in the operand dtype" as the vector unit does.
// Exp/Ln/Rsqrt/Reciprocal/Axpy are correctly rounded here; the device's internal precision for
// them is not documented, so for them a pass is an optimistic bound. Reductions, which are many
// roundings, follow the device's order (emu_reduce_cast.h).
#ifndef OPGEN_EMU_VECTOR_CORE_H
#define OPGEN_EMU_VECTOR_CORE_H

#include <cmath>

#include "emu_copy.h"

namespace AscendC {

struct BinaryRepeatParams {
    BinaryRepeatParams() {}
    BinaryRepeatParams(uint8_t dstBlk, uint8_t src0Blk, uint8_t src1Blk, uint8_t dstRep, uint8_t src0Rep,
                       uint8_t src1Rep)
        : dstBlkStride(dstBlk), src0BlkStride(src0Blk), src1BlkStride(src1Blk), dstRepStride(dstRep),
          src0RepStride(src0Rep), src1RepStride(src1Rep) {}
    uint32_t blockNumber = DEFAULT_BLK_NUM;
    uint8_t dstBlkStride = DEFAULT_BLK_STRIDE;
    uint8_t src0BlkStride = DEFAULT_BLK_STRIDE;
    uint8_t src1BlkStride = DEFAULT_BLK_STRIDE;
    uint8_t dstRepStride = DEFAULT_REPEAT_STRIDE;
    uint8_t src0RepStride = DEFAULT_REPEAT_STRIDE;
    uint8_t src1RepStride = DEFAULT_REPEAT_STRIDE;
    bool repeatStrideMode = false;
    bool strideSizeMode = false;
};

struct UnaryRepeatParams {
    UnaryRepeatParams() {}
    UnaryRepeatParams(uint16_t dstBlk, uint16_t srcBlk, uint8_t dstRep, uint8_t srcRep)
        : dstBlkStride(dstBlk), srcBlkStride(srcBlk), dstRepStride(dstRep), srcRepStride(srcRep) {}
    uint32_t blockNumber = DEFAULT_BLK_NUM;
    uint16_t dstBlkStride = DEFAULT_BLK_STRIDE;
    uint16_t srcBlkStride = DEFAULT_BLK_STRIDE;
    uint8_t dstRepStride = DEFAULT_REPEAT_STRIDE;
    uint8_t srcRepStride = DEFAULT_REPEAT_STRIDE;
    bool repeatStrideMode = false;
    bool strideSizeMode = false;
    bool halfBlock = false;
};

}  // namespace AscendC

namespace opgen_emu {

using AscendC::LocalTensor;

// ---------------------------------------------------------------- scalar conversions
template <typename T> inline double to_double(T v) { return static_cast<double>(static_cast<float>(v)); }
template <> inline double to_double<int32_t>(int32_t v) { return v; }
template <> inline double to_double<int16_t>(int16_t v) { return v; }

// double -> float rounding to odd, so a second rounding to 16 bits is not a double rounding.
inline float to_float_odd(double d) {
    float f = static_cast<float>(d);
    if (std::isfinite(d) && static_cast<double>(f) != d && !(float_bits(f) & 1u))
        f = std::nextafter(f, d > f ? INFINITY : -INFINITY);
    return f;
}
template <typename T> inline T from_double(double v) { return static_cast<T>(v); }
template <> inline float from_double<float>(double v) { return static_cast<float>(v); }
template <> inline half from_double<half>(double v) { return half(to_float_odd(v)); }
template <> inline bfloat16_t from_double<bfloat16_t>(double v) { return bfloat16_t(to_float_odd(v)); }

// ---------------------------------------------------------------- dtype support
#ifdef OPGEN_VEC_BF16
constexpr bool kVecBf16 = true;
#else
constexpr bool kVecBf16 = false;
#endif
template <typename T>
constexpr bool vec_float = std::is_same<T, float>::value || std::is_same<T, half>::value ||
                           (kVecBf16 && std::is_same<T, bfloat16_t>::value);
template <typename T>
constexpr bool vec_arith = vec_float<T> || std::is_same<T, int32_t>::value || std::is_same<T, int16_t>::value;

// ---------------------------------------------------------------- lanes and indices
// Active lanes of one repeat, the number of repeats, or a plain count.
struct Lanes {
    bool count_mode = true;
    uint64_t count = 0;
    uint32_t repeats = 0;
    std::vector<uint32_t> active;  // lane numbers within a repeat
};

inline Lanes count_lanes(int64_t count, const char* api) {
    if (count < 0) fail(cat(api, ": negative count ", count));
    Lanes l;
    l.count = static_cast<uint64_t>(count);
    if (tls_core) {  // a count-form API leaves the mask register all ones (Normal mode)
        tls_core->vector_mask[0] = tls_core->vector_mask[1] = ~uint64_t(0);
        tls_core->vector_mask_known = true;
    }
    return l;
}

// The mask register after a repeat form with isSetMask = true set it to these lanes.
inline void set_mask_register(const std::vector<uint32_t>& active) {
    if (!tls_core) return;
    uint64_t m[2] = {0, 0};
    for (uint32_t lane : active) m[lane / 64] |= uint64_t(1) << (lane % 64);
    tls_core->vector_mask[0] = m[0];
    tls_core->vector_mask[1] = m[1];
    tls_core->vector_mask_known = true;
}

inline void check_repeat(int64_t repeat, const char* api) {
    if (repeat < 0 || repeat > kMaxRepeat)
        fail(cat(api, ": repeatTimes ", repeat, " outside [0, ", kMaxRepeat, "] (split the call)"));
}

// Continuous mask: the first `mask` lanes; at most 256 / elem_bytes lanes.
inline Lanes mask_lanes(uint64_t mask, int64_t repeat, uint32_t max_lanes, const char* api) {
    check_repeat(repeat, api);
    if (mask < 1 || mask > max_lanes) fail(cat(api, ": mask ", mask, " outside [1, ", max_lanes, "]"));
    Lanes l;
    l.count_mode = false;
    l.repeats = static_cast<uint32_t>(repeat);
    for (uint32_t i = 0; i < mask; ++i) l.active.push_back(i);
    set_mask_register(l.active);
    return l;
}

// Bit mask: mask[0] lanes 0..63, mask[1] lanes 64..127.
inline Lanes bitmask_lanes(const uint64_t mask[], int64_t repeat, uint32_t max_lanes, const char* api) {
    check_repeat(repeat, api);
    Lanes l;
    l.count_mode = false;
    l.repeats = static_cast<uint32_t>(repeat);
    for (uint32_t i = 0; i < 128; ++i) {
        if (!((mask[i / 64] >> (i % 64)) & 1u)) continue;
        if (i >= max_lanes) fail(cat(api, ": mask bit ", i, " set but only ", max_lanes, " lanes exist"));
        l.active.push_back(i);
    }
    if (l.active.empty()) fail(cat(api, ": mask selects no lanes"));
    set_mask_register(l.active);
    return l;
}

// The lanes of the mask register (an API called with isSetMask = false ignores its mask
// argument and uses what SetVectorMask, AscendCUtils::SetMask or the last API left there);
// lanes beyond the type's 256-byte repeat are ignored (a count-form API sets all 128 bits).
inline Lanes register_lanes(int64_t repeat, uint32_t max_lanes, const char* api) {
    check_repeat(repeat, api);
    CoreState& c = *current_core();
    if (!c.vector_mask_known)
        fail(cat(api, ": isSetMask = false but nothing set the vector mask yet (SetVectorMask, ",
                 "AscendCUtils::SetMask or a vector API first)"));
    Lanes l;
    l.count_mode = false;
    l.repeats = static_cast<uint32_t>(repeat);
    for (uint32_t i = 0; i < std::min<uint32_t>(128, max_lanes); ++i)
        if ((c.vector_mask[i / 64] >> (i % 64)) & 1u) l.active.push_back(i);
    if (l.active.empty()) fail(cat(api, ": the vector mask register selects no lanes"));
    return l;
}

// A repeat form's lanes: its mask argument (which it also leaves in the register) when
// isSetMask, else the register's.
template <bool isSetMask>
Lanes repeat_lanes(uint64_t mask, int64_t repeat, uint32_t max_lanes, const char* api) {
    return isSetMask ? mask_lanes(mask, repeat, max_lanes, api) : register_lanes(repeat, max_lanes, api);
}
template <bool isSetMask>
Lanes repeat_lanes(const uint64_t mask[], int64_t repeat, uint32_t max_lanes, const char* api) {
    return isSetMask ? bitmask_lanes(mask, repeat, max_lanes, api) : register_lanes(repeat, max_lanes, api);
}

// Element indices (in units of the operand's type) of every active lane, repeat-major.
inline std::vector<uint64_t> lane_indices(const Lanes& l, uint32_t esize, uint64_t blk, uint64_t rep) {
    std::vector<uint64_t> idx;
    if (l.count_mode) {
        idx.resize(l.count);
        for (uint64_t i = 0; i < l.count; ++i) idx[i] = i;
        return idx;
    }
    const uint64_t epb = kBlockBytes / esize;
    idx.reserve(uint64_t(l.repeats) * l.active.size());
    for (uint64_t r = 0; r < l.repeats; ++r)
        for (uint32_t lane : l.active) idx.push_back(r * rep * epb + (lane / epb) * blk * epb + lane % epb);
    return idx;
}

// ---------------------------------------------------------------- operand checks
struct Span { uint64_t lo, hi; };  // UB byte range touched

template <typename T>
Span check_operand(const LocalTensor<T>& t, const std::vector<uint64_t>& idx, const char* api, bool is_src) {
    check_slot(t.slot_, t.gen_, api);
    if (t.ub_offset() % kBlockBytes != 0)
        fail(cat(api, ": UB address ", t.ub_offset(), " of ", t.slot()->owner, " is not 32-byte aligned"));
    if (is_src) check_sync_read(t.slot(), Pipe::V, api);
    if (idx.empty()) return {t.ub_offset(), t.ub_offset()};
    auto [lo_it, hi_it] = std::minmax_element(idx.begin(), idx.end());
    uint64_t lo = *lo_it, hi = *hi_it;
    t.elem_off(lo, hi - lo + 1, api);  // bounds of everything the instruction touches
    Span span{t.ub_offset() + lo * sizeof(T), t.ub_offset() + (hi + 1) * sizeof(T)};
    if (is_src) check_vector_raw(t.slot(), span.lo, span.hi, api);
    else tls_vector_dst = {t.slot(), span.lo, span.hi};  // recorded by the instruction's mark_write
    return span;
}

// Set while an instruction whose caller already checked its dst/src overlap runs (see
// widening_overlap_ok in emu_reduce_cast.h).
inline thread_local bool tls_overlap_checked = false;

inline void check_overlap(Span d, uint64_t d_start, Span s, uint64_t s_start, const char* api) {
    if (tls_overlap_checked) return;
    if (d_start != s_start && d.lo < s.hi && s.lo < d.hi)
        fail(cat(api, ": dst UB [", d.lo, ", ", d.hi, ") partially overlaps src UB [", s.lo, ", ", s.hi,
                 ") (only identical addresses may be used in place)"));
}

inline void check_unique_writes(std::vector<uint64_t> idx, const char* api) {
    std::sort(idx.begin(), idx.end());
    auto dup = std::adjacent_find(idx.begin(), idx.end());
    if (dup != idx.end())
        fail(cat(api, ": writes dst element ", *dup, " twice in one instruction (check the dst strides)"));
}

// Whether all sizeof(T) "written" flags at ub_def[off] are set (one load for 2- and 4-byte T).
template <typename T>
bool elem_defined(const CoreState& c, uint64_t off) {
    const uint8_t* d = c.ub_def.data() + off;
    if constexpr (sizeof(T) == 4) {
        uint32_t w;
        std::memcpy(&w, d, 4);
        return w == 0x01010101u;
    } else if constexpr (sizeof(T) == 2) {
        uint16_t w;
        std::memcpy(&w, d, 2);
        return w == 0x0101u;
    } else {
        return std::all_of(d, d + sizeof(T), [](uint8_t v) { return v != 0; });
    }
}

// Read element i of t as double, and whether its bytes were written.
template <typename T>
double load(const CoreState& c, const LocalTensor<T>& t, uint64_t i, bool& def) {
    uint64_t off = t.ub_offset() + i * sizeof(T);
    def = def && elem_defined<T>(c, off);
    T v;
    std::memcpy(&v, c.ub.data() + off, sizeof(T));
    return to_double(v);
}

template <typename T>
void store(CoreState& c, const LocalTensor<T>& t, uint64_t i, double v, bool def) {
    uint64_t off = t.ub_offset() + i * sizeof(T);
    T x = from_double<T>(v);
    std::memcpy(c.ub.data() + off, &x, sizeof(T));
    std::memset(c.ub_def.data() + off, def ? 1 : 0, sizeof(T));
}

// ---------------------------------------------------------------- elementwise engine
struct Strides { uint64_t blk = 1, rep = 8; };

template <typename TD, typename F, typename... TS>
void elementwise(const char* api, const Lanes& lanes, const LocalTensor<TD>& dst, Strides ds, F f,
                 const std::pair<const LocalTensor<TS>*, Strides>&... srcs) {
    poll_abort();
    std::vector<uint64_t> di = lane_indices(lanes, sizeof(TD), ds.blk, ds.rep);
    Span dspan = check_operand(dst, di, api, false);
    if (!lanes.count_mode) check_unique_writes(di, api);  // a count is 0..n-1: unique
    auto src_idx = std::make_tuple(lane_indices(lanes, sizeof(TS), srcs.second.blk, srcs.second.rep)...);
    std::apply([&](const auto&... ix) {
        (check_overlap(dspan, dst.ub_offset(), check_operand(*srcs.first, ix, api, true),
                       srcs.first->ub_offset(), api), ...);
    }, src_idx);
    // Gather first, then write: in-place operation is allowed.
    CoreState& c = core();
    std::vector<double> out(di.size());
    std::vector<uint8_t> def(di.size());
    for (size_t k = 0; k < di.size(); ++k) {
        bool d = true;
        out[k] = std::apply([&](const auto&... ix) { return f(load(c, *srcs.first, ix[k], d)...); }, src_idx);
        def[k] = d;
    }
    for (size_t k = 0; k < di.size(); ++k) store(c, dst, di[k], out[k], def[k] != 0);
    core().launch->vector_elems += di.size();
    mark_write(dst.slot(), Pipe::V, api);
    const uint32_t esize = std::max<uint32_t>({uint32_t(sizeof(TD)), uint32_t(sizeof(TS))...});
    c.clock.vector(api, esize, lanes.count_mode ? (lanes.count * esize + kRepeatBytes - 1) / kRepeatBytes
                                               : lanes.repeats);
}

template <typename T>
uint32_t max_lanes() { return kRepeatBytes / sizeof(T); }

}  // namespace opgen_emu

#endif  // OPGEN_EMU_VECTOR_CORE_H
