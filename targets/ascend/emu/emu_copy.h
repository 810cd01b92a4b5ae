// opgen AscendC emulation: DataCopy and DataCopyPad between GM and UB.
//
// Every transfer is split into bursts; each burst is bounds-checked on both sides (the
// GlobalTensor's SetGlobalBuffer size and the kernel argument's size, the LocalTensor's size),
// recorded in the GM race shadow, and marks the UB bytes it writes as defined. A UB->GM copy of
// never-written (poisoned) UB bytes is an error.
#ifndef OPGEN_EMU_COPY_H
#define OPGEN_EMU_COPY_H

#include "emu_pipe.h"

namespace AscendC {

struct DataCopyParams {
    DataCopyParams() {}
    DataCopyParams(uint16_t count, uint16_t len, uint16_t srcStrideIn, uint16_t dstStrideIn)
        : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn) {}
    uint16_t blockCount = 1;
    uint16_t blockLen = 0;   // 32-byte blocks
    uint16_t srcStride = 0;  // 32-byte blocks between bursts
    uint16_t dstStride = 0;
};

struct DataCopyExtParams {
    DataCopyExtParams() {}
    DataCopyExtParams(uint16_t count, uint32_t len, uint32_t srcStrideIn, uint32_t dstStrideIn,
                      uint32_t rsvIn)
        : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn), rsv(rsvIn) {}
    uint16_t blockCount = 1;
    uint32_t blockLen = 0;   // bytes
    uint32_t srcStride = 0;  // GM side: bytes; UB side: 32-byte blocks
    uint32_t dstStride = 0;
    uint32_t rsv = 0;
};

template <typename T>
struct DataCopyPadExtParams {
    DataCopyPadExtParams() {}
    DataCopyPadExtParams(bool isPadValue, uint8_t leftPadValue, uint8_t rightPadValue, T padValue)
        : isPad(isPadValue), leftPadding(leftPadValue), rightPadding(rightPadValue), paddingValue(padValue) {}
    bool isPad = false;
    uint8_t leftPadding = 0;   // elements
    uint8_t rightPadding = 0;  // elements
    T paddingValue = 0;
};

}  // namespace AscendC

namespace opgen_emu {

using AscendC::GlobalTensor;
using AscendC::LocalTensor;

template <typename T>
void check_ub_aligned(const LocalTensor<T>& t, const char* api) {
    check_slot(t.slot_, t.gen_, api);
    if (t.ub_offset() % kBlockBytes != 0)
        fail(cat(api, ": UB address ", t.ub_offset(), " of ", t.slot()->owner,
                 " is not 32-byte aligned"));
}

inline bool overlaps(const uint8_t* a0, const uint8_t* a1, const uint8_t* b0, const uint8_t* b1) {
    return a0 < b1 && b0 < a1;
}

// A DMA copy of GM bytes this core wrote with GlobalTensor::SetValue would bypass the scalar
// data cache that still holds them.
// Also: GM another core wrote with SetValue and never flushed before SyncAll (its cache, not
// GM, holds the data).
inline void check_not_dirty(const uint8_t* p, uint64_t bytes, const char* api) {
    CoreState& c = core();
    for (auto& r : c.gm_dirty)
        if (overlaps(p, p + bytes, r.first, r.second))
            fail(cat(api, ": copies GM bytes this core wrote with GlobalTensor::SetValue that are still in ",
                     "the scalar data cache (call DataCacheCleanAndInvalid first)"));
    std::lock_guard<std::mutex> lk(c.launch->gm_mutex);
    for (auto& [owner, lo, hi] : c.launch->unflushed)
        if (owner != c.idx && overlaps(p, p + bytes, lo, hi))
            fail(cat(api, ": reads GM that core ", owner, " wrote with GlobalTensor::SetValue and did not flush ",
                     "(DataCacheCleanAndInvalid) before SyncAll: the data is still in that core's cache"));
}

// Record a DMA write range; an overlap with an unordered earlier write on the same pipe is an
// error (asc-devkit: overlapping MTE2/MTE3 copies need PipeBarrier<PIPE_MTE2/3>).
template <typename P>
void note_dma_write(std::vector<std::pair<P, P>>& done, P lo, P hi, const char* api, const char* barrier) {
    for (auto& r : done)
        if (lo < r.second && r.first < hi)
            fail(cat(api, ": writes ", barrier == std::string("PIPE_MTE2") ? "UB" : "GM", " bytes an earlier copy on ",
                     "the same pipe also wrote, with no PipeBarrier<", barrier, "> (or flag) in between: ",
                     "the DMA engine may reorder the two copies"));
    if (!done.empty() && done.back().second == lo) done.back().second = hi;
    else done.emplace_back(lo, hi);
}

// One copy API call is one DMA instruction for the timing model, however many bursts it has:
// its bytes are charged on its pipe when the call returns (emu_timing.h).
struct DmaInstr {
    explicit DmaInstr(int pipe) { core().clock.dma_open(pipe); }
    ~DmaInstr() {
        if (std::uncaught_exceptions() == 0) core().clock.dma_close();
    }
    DmaInstr(const DmaInstr&) = delete;
    DmaInstr& operator=(const DmaInstr&) = delete;
};

// One burst GM -> UB (MTE2).
template <typename T>
void burst_in(const char* api, const LocalTensor<T>& dst, uint64_t ub_i, const GlobalTensor<T>& src,
              uint64_t gm_i, uint64_t n) {
    poll_abort();
    if (n == 0) return;
    src.check_range(gm_i, n, api);
    uint64_t off = dst.elem_off(ub_i, n, api);
    const uint8_t* p = reinterpret_cast<const uint8_t*>(src.GetPhyAddr() + gm_i);
    CoreState& c = core();
    for (auto& r : c.gm_pending)
        if (overlaps(p, p + n * sizeof(T), r.first, r.second))
            fail(cat(api, ": reads GM this core wrote by a UB->GM copy (MTE3) with no ",
                     "synchronisation in between (SetFlag/WaitFlag<MTE3_MTE2> or PipeBarrier<PIPE_ALL>)"));
    check_not_dirty(p, n * sizeof(T), api);
    note_dma_write(c.mte2_ub, off, off + n * sizeof(T), api, "PIPE_MTE2");
    std::lock_guard<std::mutex> lk(c.launch->gm_mutex);
    GmBuffer& g = gm_check(p, n * sizeof(T), api);
    gm_note_read(g, static_cast<uint64_t>(p - g.base), n * sizeof(T), api);
    std::memcpy(c.ub.data() + off, p, n * sizeof(T));
    c.launch->gm_read += n * sizeof(T);
    c.clock.dma_bytes += n * sizeof(T);
    if (g.def.empty()) set_defined(off, n * sizeof(T), true);
    else std::copy(g.def.begin() + (p - g.base), g.def.begin() + (p - g.base) + n * sizeof(T), c.ub_def.begin() + off);
    mark_write(dst.slot(), Pipe::MTE2, api);
}

// One burst UB -> GM (MTE3); an atomic add when SetAtomicAdd<T> is on.
template <typename T>
void burst_out(const char* api, const GlobalTensor<T>& dst, uint64_t gm_i, const LocalTensor<T>& src,
               uint64_t ub_i, uint64_t n) {
    poll_abort();
    if (n == 0) return;
    dst.check_range(gm_i, n, api);
    uint64_t off = src.elem_off(ub_i, n, api);
    check_sync_read(src.slot(), Pipe::MTE3, api);
    CoreState& c = core();
    if (!defined(off, n * sizeof(T))) {
        uint64_t k = 0;
        while (defined(off + k * sizeof(T), sizeof(T))) ++k;
        fail(cat(api, ": copies never-written UB data to GM: element ", ub_i + k, " of ", src.slot()->owner,
                 " (UB byte ", off + k * sizeof(T), ") derives from the poison of its allocation or from ",
                 "never-written workspace"));
    }
    bool atomic = c.atomic_type[0] != '\0';
    if (atomic && std::string(c.atomic_type) != type_name<T>())
        fail(cat(api, ": SetAtomicAdd<", c.atomic_type, "> is on but the copy moves ", type_name<T>()));
    uint8_t* p = reinterpret_cast<uint8_t*>(dst.GetPhyAddr() + gm_i);
    check_not_dirty(p, n * sizeof(T), api);
    if (!atomic) note_dma_write<const uint8_t*>(c.mte3_gm, p, p + n * sizeof(T), api, "PIPE_MTE3");
    std::lock_guard<std::mutex> lk(c.launch->gm_mutex);
    GmBuffer& g = gm_check(p, n * sizeof(T), api);
    gm_note_write(g, static_cast<uint64_t>(p - g.base), n * sizeof(T), atomic, api);
    if (atomic && !g.defined(static_cast<uint64_t>(p - g.base), n * sizeof(T)))
        fail(cat(api, ": SetAtomicAdd accumulates into workspace bytes never written in this launch (device ",
                 "workspace is not zeroed: InitGlobalMemory or copy zeros first)"));
    g.set_defined(static_cast<uint64_t>(p - g.base), n * sizeof(T));
    c.launch->gm_written += n * sizeof(T);
    c.clock.dma_bytes += n * sizeof(T);
    const T* s = reinterpret_cast<const T*>(c.ub.data() + off);
    T* d = reinterpret_cast<T*>(p);
    for (uint64_t i = 0; i < n; ++i) {
        T v = s[i];
        if (atomic) {
            if constexpr (std::is_integral<T>::value) v = static_cast<T>(d[i] + v);
            else v = static_cast<T>(static_cast<float>(d[i]) + static_cast<float>(v));
        }
        d[i] = v;
    }
    if (!c.gm_pending.empty() && c.gm_pending.back().second == p)
        c.gm_pending.back().second = p + n * sizeof(T);  // merge a contiguous run
    else
        c.gm_pending.emplace_back(p, p + n * sizeof(T));
}

template <typename T>
void check_whole_blocks(uint64_t count, const char* api) {
    if (count == 0) fail(cat(api, ": 0 elements (the copy becomes blockLen 0, outside [1, 65535])"));
    if (count * sizeof(T) % kBlockBytes != 0)
        fail(cat(api, ": ", count, " elements of ", type_name<T>(), " = ", count * sizeof(T),
                 " B is not a multiple of 32 B (the hardware moves whole 32-byte blocks and would ",
                 "drop the tail); use DataCopyPad or pad the length"));
}

// DataCopy takes [1, 4095] bursts of [1, 65535] blocks; DataCopyPad accepts 0 (a no-op) for
// both, as CANN's CPU debug checks them.
inline void check_burst_params(uint32_t blockCount, uint64_t blockLen, uint64_t maxLen, const char* api,
                               uint64_t min = 1) {
    if (blockCount < min || blockCount > 4095)
        fail(cat(api, ": blockCount ", blockCount, " outside [", min, ", 4095]"));
    if (blockLen < min || blockLen > maxLen)
        fail(cat(api, ": blockLen ", blockLen, " outside [", min, ", ", maxLen, "]"));
}

inline void require_datacopypad(const char* api) {
#ifdef OPGEN_NO_DATACOPYPAD
    fail(cat(api, ": DataCopyPad is not available on this product (Atlas training / Atlas inference ",
             "AI cores; built with OPGEN_NO_DATACOPYPAD): copy whole 32-byte blocks with DataCopy"));
#else
    (void)api;
#endif
}

}  // namespace opgen_emu

namespace AscendC {

template <typename T>
void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, uint32_t calCount,
              const char* opgen_file = __builtin_FILE(), int opgen_line = __builtin_LINE()) {
    opgen_emu::SiteScope opgen_site(opgen_file, opgen_line);
    opgen_emu::DmaInstr instr(opgen_emu::kTMte2);
    opgen_emu::check_ub_aligned(dst, "DataCopy GM->UB");
    opgen_emu::check_whole_blocks<T>(calCount, "DataCopy GM->UB");
    opgen_emu::burst_in("DataCopy GM->UB", dst, 0, src, 0, calCount);
}

template <typename T>
void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, uint32_t calCount,
              const char* opgen_file = __builtin_FILE(), int opgen_line = __builtin_LINE()) {
    opgen_emu::SiteScope opgen_site(opgen_file, opgen_line);
    opgen_emu::DmaInstr instr(opgen_emu::kTMte3);
    opgen_emu::check_ub_aligned(src, "DataCopy UB->GM");
    opgen_emu::check_whole_blocks<T>(calCount, "DataCopy UB->GM");
    opgen_emu::burst_out("DataCopy UB->GM", dst, 0, src, 0, calCount);
}

// Bursts of blockLen 32-byte blocks, strides counted in 32-byte blocks on both sides.
template <typename T>
void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyParams& p,
              const char* opgen_file = __builtin_FILE(), int opgen_line = __builtin_LINE()) {
    opgen_emu::SiteScope opgen_site(opgen_file, opgen_line);
    opgen_emu::DmaInstr instr(opgen_emu::kTMte2);
    const char* api = "DataCopy GM->UB (DataCopyParams)";
    opgen_emu::check_ub_aligned(dst, api);
    opgen_emu::check_burst_params(p.blockCount, p.blockLen, 65535, api);
    const uint64_t epb = ONE_BLK_SIZE / sizeof(T), len = uint64_t(p.blockLen) * epb;
    for (uint64_t i = 0; i < p.blockCount; ++i)
        opgen_emu::burst_in(api, dst, i * (p.blockLen + p.dstStride) * epb, src,
                            i * (p.blockLen + p.srcStride) * epb, len);
}

template <typename T>
void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& p,
              const char* opgen_file = __builtin_FILE(), int opgen_line = __builtin_LINE()) {
    opgen_emu::SiteScope opgen_site(opgen_file, opgen_line);
    opgen_emu::DmaInstr instr(opgen_emu::kTMte3);
    const char* api = "DataCopy UB->GM (DataCopyParams)";
    opgen_emu::check_ub_aligned(src, api);
    opgen_emu::check_burst_params(p.blockCount, p.blockLen, 65535, api);
    const uint64_t epb = ONE_BLK_SIZE / sizeof(T), len = uint64_t(p.blockLen) * epb;
    for (uint64_t i = 0; i < p.blockCount; ++i)
        opgen_emu::burst_out(api, dst, i * (p.blockLen + p.dstStride) * epb, src,
                             i * (p.blockLen + p.srcStride) * epb, len);
}

// UB -> UB copy on the vector pipe.
template <typename T>
void DataCopy(const LocalTensor<T>& dst, const LocalTensor<T>& src, uint32_t calCount,
              const char* opgen_file = __builtin_FILE(), int opgen_line = __builtin_LINE()) {
    opgen_emu::SiteScope opgen_site(opgen_file, opgen_line);
    using namespace opgen_emu;
    const char* api = "DataCopy UB->UB";
    check_ub_aligned(dst, api);
    check_ub_aligned(src, api);
    check_whole_blocks<T>(calCount, api);
    uint64_t so = src.elem_off(0, calCount, api), d = dst.elem_off(0, calCount, api);
    check_sync_read(src.slot(), Pipe::V, api);
    check_vector_raw(src.slot(), so, so + uint64_t(calCount) * sizeof(T), api);
    tls_vector_dst = {dst.slot(), d, d + uint64_t(calCount) * sizeof(T)};
    CoreState& c = core();
    std::memmove(c.ub.data() + d, c.ub.data() + so, uint64_t(calCount) * sizeof(T));
    std::memmove(c.ub_def.data() + d, c.ub_def.data() + so, uint64_t(calCount) * sizeof(T));
    mark_write(dst.slot(), Pipe::V, api);
    c.clock.vector(api, sizeof(T), (uint64_t(calCount) * sizeof(T) + kRepeatBytes - 1) / kRepeatBytes);
}

// GM -> UB with ragged bursts: blockLen bytes per burst, GM gaps in bytes, UB gaps in 32-byte
// blocks; each UB burst starts 32-byte aligned as [left pad][data][right pad].
template <typename T>
void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyExtParams& p,
                 const DataCopyPadExtParams<T>& pad,
                 const char* opgen_file = __builtin_FILE(), int opgen_line = __builtin_LINE()) {
    opgen_emu::SiteScope opgen_site(opgen_file, opgen_line);
    using namespace opgen_emu;
    DmaInstr instr(kTMte2);
    const char* api = "DataCopyPad GM->UB";
    require_datacopypad(api);
    check_ub_aligned(dst, api);
    check_burst_params(p.blockCount, p.blockLen, 2097151, api, 0);
    if (p.blockLen % sizeof(T) != 0 || p.srcStride % sizeof(T) != 0)
        fail(cat(api, ": blockLen ", p.blockLen, " B or srcStride ", p.srcStride,
                 " B is not a multiple of sizeof(", type_name<T>(), ")"));
    if ((pad.leftPadding + pad.rightPadding) * sizeof(T) > ONE_BLK_SIZE)
        fail(cat(api, ": leftPadding + rightPadding exceed 32 bytes"));
    const uint64_t n = p.blockLen / sizeof(T), lp = pad.leftPadding, rp = pad.rightPadding;
    const uint64_t ub_burst = round_up((n + lp + rp) * sizeof(T), ONE_BLK_SIZE) + uint64_t(p.dstStride) * ONE_BLK_SIZE;
    for (uint64_t i = 0; i < p.blockCount; ++i) {
        uint64_t ub_i = i * ub_burst / sizeof(T);
        burst_in(api, dst, ub_i + lp, src, i * (p.blockLen + p.srcStride) / sizeof(T), n);
        if (!pad.isPad) continue;
        for (uint64_t k = 0; k < lp; ++k) dst.SetValue(ub_i + k, pad.paddingValue);
        for (uint64_t k = 0; k < rp; ++k) dst.SetValue(ub_i + lp + n + k, pad.paddingValue);
        mark_write(dst.slot(), Pipe::MTE2, api);
    }
}

// UB -> GM with ragged bursts: UB gaps in 32-byte blocks, GM gaps in bytes.
template <typename T>
void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyExtParams& p,
                 const char* opgen_file = __builtin_FILE(), int opgen_line = __builtin_LINE()) {
    opgen_emu::SiteScope opgen_site(opgen_file, opgen_line);
    using namespace opgen_emu;
    DmaInstr instr(kTMte3);
    const char* api = "DataCopyPad UB->GM";
    require_datacopypad(api);
    check_ub_aligned(src, api);
    check_burst_params(p.blockCount, p.blockLen, 2097151, api, 0);
    if (p.blockLen % sizeof(T) != 0 || p.dstStride % sizeof(T) != 0)
        fail(cat(api, ": blockLen ", p.blockLen, " B or dstStride ", p.dstStride,
                 " B is not a multiple of sizeof(", type_name<T>(), ")"));
    const uint64_t n = p.blockLen / sizeof(T);
    const uint64_t ub_burst = round_up(p.blockLen, ONE_BLK_SIZE) + uint64_t(p.srcStride) * ONE_BLK_SIZE;
    for (uint64_t i = 0; i < p.blockCount; ++i)
        burst_out(api, dst, i * (p.blockLen + p.dstStride) / sizeof(T), src, i * ub_burst / sizeof(T), n);
}

}  // namespace AscendC

#endif  // OPGEN_EMU_COPY_H
