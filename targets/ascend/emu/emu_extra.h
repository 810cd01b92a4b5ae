// opgen AscendC emulation: less central APIs (GM init and cache, Axpy, ReduceMax/ReduceMin,
// the DataCopyParams forms of DataCopyPad).
#ifndef OPGEN_EMU_EXTRA_H
#define OPGEN_EMU_EXTRA_H

#include "emu_reduce_cast.h"

namespace AscendC {

enum class CacheLine { SINGLE_CACHE_LINE = 0, ENTIRE_DATA_CACHE };
enum class DcciDst { CACHELINE_ALL = 0, CACHELINE_UB, CACHELINE_OUT, CACHELINE_ATOMIC };

// Write back the scalar data cache: the 64-byte line holding the tensor's address, or all.
// Whatever stays dirty is what other cores may not read after a SyncAll.
template <typename T, CacheLine entireType, DcciDst dcciDst = DcciDst::CACHELINE_ALL>
void DataCacheCleanAndInvalid(const GlobalTensor<T>& t) {
    opgen_emu::CoreState& c = opgen_emu::core();
    auto& dirty = c.gm_dirty;
    if (entireType == CacheLine::ENTIRE_DATA_CACHE) {
        dirty.clear();
    } else {
        auto line = reinterpret_cast<uintptr_t>(t.GetPhyAddr()) & ~uintptr_t(63);
        auto* lo = reinterpret_cast<const uint8_t*>(line);
        dirty.erase(std::remove_if(dirty.begin(), dirty.end(), [&](const auto& r) {
                        return r.first >= lo && r.second <= lo + 64;
                    }), dirty.end());
        for (auto& r : dirty)
            if (opgen_emu::overlaps(r.first, r.second, lo, lo + 64))
                opgen_emu::fail("DataCacheCleanAndInvalid<SINGLE_CACHE_LINE>: SetValue data spans more than "
                                "this cache line; use ENTIRE_DATA_CACHE");
    }
    std::lock_guard<std::mutex> lk(c.launch->gm_mutex);
    opgen_emu::forget_unflushed(*c.launch, c.idx);
    for (auto& r : dirty) c.launch->unflushed.emplace_back(c.idx, r.first, r.second);
}

// gm[0..size) = value (a UB->GM fill: MTE3 writes, visible to other cores after SyncAll).
template <typename T>
void InitGlobalMemory(GlobalTensor<T>& gm, const uint64_t size, const T value) {
    using namespace opgen_emu;
    const char* api = "InitGlobalMemory";
    gm.check_range(0, size, api);
    if (size == 0) return;
    uint8_t* p = reinterpret_cast<uint8_t*>(gm.GetPhyAddr());
    check_not_dirty(p, size * sizeof(T), api);
    CoreState& c = core();
    DmaInstr instr(kTMte3);
    c.clock.dma_bytes += size * sizeof(T);
    note_dma_write<const uint8_t*>(c.mte3_gm, p, p + size * sizeof(T), api, "PIPE_MTE3");
    std::lock_guard<std::mutex> lk(c.launch->gm_mutex);
    GmBuffer& g = gm_check(p, size * sizeof(T), api);
    gm_note_write(g, static_cast<uint64_t>(p - g.base), size * sizeof(T), false, api);
    g.set_defined(static_cast<uint64_t>(p - g.base), size * sizeof(T));
    for (uint64_t i = 0; i < size; ++i) std::memcpy(p + i * sizeof(T), &value, sizeof(T));
    c.launch->gm_written += size * sizeof(T);
    c.gm_pending.emplace_back(p, p + size * sizeof(T));
}

// dst = dst + src * scalar.
template <typename T, typename U, bool isSetMask = true>
void Axpy(const LocalTensor<T>& dst, const LocalTensor<U>& src, const typename Identity<U>::type scalar,
          const int32_t& calCount) {
    static_assert(opgen_emu::vec_float<T> && opgen_emu::vec_float<U> && sizeof(T) >= sizeof(U),
                  "Axpy: half/float (float dst with half src allowed)");
    using namespace opgen_emu;
    const double s = to_double<U>(scalar);
    elementwise("Axpy", count_lanes(calCount, "Axpy"), dst, Strides{},
                [s](double d, double a) { return d + a * s; }, std::make_pair(&dst, Strides{}),
                std::make_pair(&src, Strides{}));
}

namespace detail {
// dst[0] = max or min of src[0..count); dst[1] = its first index (as integer bits) if calIndex.
template <typename T>
void reduce_extreme(const char* api, bool is_max, const LocalTensor<T>& dst, const LocalTensor<T>& src,
                    const LocalTensor<T>& work, int32_t count, bool calIndex) {
    static_assert(opgen_emu::vec_float<T>, "ReduceMax/ReduceMin: supported for half and float");
    using namespace opgen_emu;
    if (count < 1) fail(cat(api, ": count ", count, " must be at least 1"));
    const uint64_t reps = (count + max_lanes<T>() - 1) / max_lanes<T>();
    const uint64_t need = round_up(2 * reps, kBlockBytes / sizeof(T));
    if (work.GetSize() < need)
        fail(cat(api, ": workLocal has ", work.GetSize(), " elements, needs ", need, " for ", count, " elements"));
    std::vector<uint64_t> si(count);
    for (int32_t i = 0; i < count; ++i) si[i] = i;
    check_operand(src, si, api, true);
    check_operand(work, {0}, api, false);
    check_operand(dst, {uint64_t(calIndex ? 1 : 0)}, api, false);
    CoreState& c = core();
    bool def = true;
    double best = load(c, src, 0, def);
    uint64_t at = 0;
    for (int32_t i = 1; i < count; ++i) {
        double v = load(c, src, i, def);
        if (std::isnan(best)) break;
        if (std::isnan(v) || (is_max ? v > best : v < best)) { best = v; at = i; }
    }
    store(c, dst, 0, best, def);
    if (calIndex) {
        using Bits = typename std::conditional<sizeof(T) == 4, uint32_t, uint16_t>::type;
        Bits b = static_cast<Bits>(at);
        std::memcpy(core().ub.data() + dst.ub_offset() + sizeof(T), &b, sizeof(T));
        set_defined(dst.ub_offset() + sizeof(T), sizeof(T), def);
    }
    mark_write(dst.slot(), Pipe::V, api);
    c.clock.vector(api, sizeof(T), reps);
}
}  // namespace detail

template <typename T>
void ReduceMax(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<T>& work,
               const int32_t count, bool calIndex = false) {
    detail::reduce_extreme("ReduceMax", true, dst, src, work, count, calIndex);
}
template <typename T>
void ReduceMin(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<T>& work,
               const int32_t count, bool calIndex = false) {
    detail::reduce_extreme("ReduceMin", false, dst, src, work, count, calIndex);
}

// The older DataCopyPad forms: DataCopyParams with blockLen in bytes.
struct DataCopyPadParams {
    DataCopyPadParams() {}
    DataCopyPadParams(bool isPadValue, uint8_t leftPadValue, uint8_t rightPadValue, uint64_t padValue)
        : isPad(isPadValue), leftPadding(leftPadValue), rightPadding(rightPadValue), paddingValue(padValue) {}
    bool isPad = false;
    uint8_t leftPadding = 0;
    uint8_t rightPadding = 0;
    uint64_t paddingValue = 0;
};

template <typename T>
void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyParams& p,
                 const DataCopyPadParams& pad) {
    T value;
    std::memset(&value, 0, sizeof(T));
    std::memcpy(&value, &pad.paddingValue, sizeof(T));  // the low bytes, as the hardware takes them
    DataCopyPad(dst, src, DataCopyExtParams(p.blockCount, p.blockLen, p.srcStride, p.dstStride, 0),
                DataCopyPadExtParams<T>(pad.isPad, pad.leftPadding, pad.rightPadding, value));
}

template <typename T>
void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& p) {
    DataCopyPad(dst, src, DataCopyExtParams(p.blockCount, p.blockLen, p.srcStride, p.dstStride, 0));
}

}  // namespace AscendC

#endif  // OPGEN_EMU_EXTRA_H
