// opgen AscendC emulation: Cast (with RoundMode) and the sum reductions.
//
// Cast accepts the (source, destination, RoundMode) combinations AscendC documents for the
// vector unit; anything else is an error, e.g. float -> bfloat16_t needs an explicit mode
// (CAST_RINT is round-to-nearest-even), and widening casts take CAST_NONE.
// Reductions sum in the device's documented order and precision (AscendC ReduceSum /
// WholeReduceSum docs): within a repeat a binary tree over the lanes (lane 0 + lane 1, lane 2 +
// lane 3, ..., then those sums pairwise), every add rounded to T (RNE; half saturates at
// +-65504, the docs' [60000, 60000, -30000, 100] -> 35604 example); masked-off lanes count as 0.
// Across repeats, "method 1" is a binary tree again (per-repeat trees over the partials until
// one is left) and "method 2" a sequential sum of the partials: the docs give method 2 to the
// count form of ReduceSum on Atlas A2/A3 (and opgen assumes it for Ascend 950, which the docs
// list without a method), method 1 to its mask/repeat form, and method 1 to every form on Atlas
// training, Atlas inference and 200I/500 A2: build with OPGEN_REDUCE_ACROSS_TREE for those.
// BlockReduceSum is the same tree over each 32-byte block. With OPGEN_EMU_EXACT the old exact
// mode returns: sums in double, rounded once per stage.
#ifndef OPGEN_EMU_REDUCE_CAST_H
#define OPGEN_EMU_REDUCE_CAST_H

#include "emu_vector.h"

namespace opgen_emu {

inline const char* mode_name(AscendC::RoundMode m) {
    static const char* names[] = {"CAST_NONE", "CAST_RINT", "CAST_FLOOR", "CAST_CEIL",
                                  "CAST_ROUND", "CAST_TRUNC", "CAST_ODD"};
    return names[static_cast<int>(m)];
}

inline Rounding to_rounding(AscendC::RoundMode m) {
    using AscendC::RoundMode;
    switch (m) {
        case RoundMode::CAST_FLOOR: return Rounding::FLOOR;
        case RoundMode::CAST_CEIL: return Rounding::CEIL;
        case RoundMode::CAST_ROUND: return Rounding::ROUND;
        case RoundMode::CAST_TRUNC: return Rounding::TRUNC;
        case RoundMode::CAST_ODD: return Rounding::ODD;
        default: return Rounding::RINT;  // CAST_RINT, and CAST_NONE where it means RINT
    }
}

inline double round_integral(double v, Rounding r) {
    switch (r) {
        case Rounding::FLOOR: return std::floor(v);
        case Rounding::CEIL: return std::ceil(v);
        case Rounding::ROUND: return std::round(v);
        case Rounding::TRUNC: return std::trunc(v);
        default: return std::nearbyint(v);
    }
}

template <typename T> constexpr bool is16f = std::is_same<T, half>::value || std::is_same<T, bfloat16_t>::value;

// Which RoundModes a (TS -> TD) cast accepts; "" when the pair is not supported at all.
template <typename TD, typename TS>
const char* cast_modes() {
    if (is16f<TS> && std::is_same<TD, float>::value) return "N";          // exact widening
    if (std::is_same<TS, float>::value && std::is_same<TD, half>::value) return "NRFCATO";
    if (std::is_same<TS, float>::value && std::is_same<TD, bfloat16_t>::value) return "RFCAT";
    if (std::is_same<TS, float>::value && std::is_same<TD, float>::value) return "RFCAT";
    if (std::is_same<TS, int32_t>::value && std::is_same<TD, float>::value) return "N";
    if ((std::is_same<TS, float>::value || std::is_same<TS, half>::value) && std::is_same<TD, int32_t>::value)
        return "RFCAT";
    // half -> int8_t: the only vector Cast into int8_t on Atlas A2 (asc-devkit docs/api/context/Cast.md,
    // table 4: float has no int8_t row, so float data reaches int8_t through half).
    if (std::is_same<TS, half>::value && std::is_same<TD, int8_t>::value) return "NRFCAT";
    return "";
}

inline char mode_letter(AscendC::RoundMode m) { return "NRFCATO"[static_cast<int>(m)]; }

// The converted value as a double (exactly representable in TD).
template <typename TD, typename TS>
double cast_value(double a, Rounding r) {
    if constexpr (std::is_same<TD, half>::value)
        return half_to_float(round_to16<HalfFormat>(static_cast<float>(a), r));
    else if constexpr (std::is_same<TD, bfloat16_t>::value)
        return bf16_to_float(round_to16<Bf16Format>(static_cast<float>(a), r));
    else if constexpr (std::is_same<TD, int32_t>::value) {
        if (std::isnan(a)) return 0;
        return std::min(2147483647.0, std::max(-2147483648.0, round_integral(a, r)));
    } else if constexpr (std::is_same<TD, int8_t>::value) {
        // Cast.md table 1, half -> int8_t: rounded by roundMode, saturating on overflow (its
        // example: 2^7 - 0.5 -> 2^7 - 1 under CAST_RINT); NaN -> 0 as for int32_t.
        if (std::isnan(a)) return 0;
        return std::min(127.0, std::max(-128.0, round_integral(a, r)));
    } else if constexpr (std::is_same<TD, float>::value && std::is_same<TS, float>::value)
        return round_integral(a, r);
    else
        return a;
}

template <typename TD, typename TS>
Rounding check_cast(AscendC::RoundMode m, const char* api) {
    const char* ok = cast_modes<TD, TS>();
    if (!*ok) fail(cat(api, ": no vector Cast from ", type_name<TS>(), " to ", type_name<TD>()));
    if (!std::strchr(ok, mode_letter(m)))
        fail(cat(api, ": ", mode_name(m), " is not a valid RoundMode for ", type_name<TS>(), " -> ",
                 type_name<TD>(), *ok == 'N' && !ok[1] ? " (use CAST_NONE)" :
                 " (use CAST_RINT for round-to-nearest-even)"));
    return to_rounding(m);
}

// ---------------------------------------------------------------- the device's sum order
constexpr uint64_t kNoLane = ~uint64_t(0);  // a masked-off lane of a group: adds 0

// a + b as the vector unit adds two T values: rounded to T (RNE), half saturating at 65504.
template <typename T>
double add_in(double a, double b) {
#ifdef OPGEN_EMU_EXACT
    return a + b;
#else
    double r = to_double(from_double<T>(a + b));  // a + b is exact in double for two T values
    if constexpr (std::is_same<T, half>::value) {
        if (std::isinf(r) && !std::isinf(a) && !std::isinf(b)) r = std::copysign(65504.0, r);
    }
    return r;
#endif
}

// Binary-tree sum of v (adjacent pairs, then pairs of pairs), padded with zeros to a power of two.
template <typename T>
double tree_sum(std::vector<double> v) {
    if (v.empty()) return 0;
    size_t n = 1;
    while (n < v.size()) n *= 2;
    v.resize(n, 0.0);
    for (; n > 1; n /= 2)
        for (size_t i = 0; i < n / 2; ++i) v[i] = add_in<T>(v[2 * i], v[2 * i + 1]);
    return v[0];
}

enum class Across { SEQUENTIAL, TREE };  // the docs' method 2 / method 1 across repeats

// Sum of per-repeat partials: sequentially, or by trees of `width` lanes until one is left.
template <typename T>
double sum_partials(std::vector<double> p, Across how, size_t width) {
#ifdef OPGEN_EMU_EXACT
    how = Across::SEQUENTIAL;
#endif
    if (p.empty()) return 0;
    if (how == Across::SEQUENTIAL) {
        double acc = p[0];
        for (size_t i = 1; i < p.size(); ++i) acc = add_in<T>(acc, p[i]);
        return acc;
    }
    while (p.size() > 1) {
        std::vector<double> next;
        for (size_t i = 0; i < p.size(); i += width)
            next.push_back(tree_sum<T>(std::vector<double>(p.begin() + i, p.begin() + std::min(p.size(), i + width))));
        p.swap(next);
    }
    return p[0];
}

#ifdef OPGEN_REDUCE_ACROSS_TREE
constexpr Across kCountAcross = Across::TREE;
#else
constexpr Across kCountAcross = Across::SEQUENTIAL;
#endif

// Sum each group of src elements into dst[di[g]]: a group lists one repeat's (or block's) lanes
// in lane order, kNoLane for masked-off ones; `across` >= 0 sums all groups into dst[di[0]]
// instead (the second stage of ReduceSum), sequentially or by trees of that many lanes.
// `repeats`: the instruction's repeat count for the timing model (0: its source bytes / 256).
template <typename T>
void reduce_groups(const char* api, const LocalTensor<T>& dst, const std::vector<uint64_t>& di,
                   const LocalTensor<T>& src, const std::vector<std::vector<uint64_t>>& groups,
                   uint64_t repeats = 0) {
    poll_abort();
    std::vector<uint64_t> all;
    for (const auto& g : groups)
        for (uint64_t i : g)
            if (i != kNoLane) all.push_back(i);
    Span s = check_operand(src, all, api, true);
    Span d = check_operand(dst, di, api, false);
    check_overlap(d, dst.ub_offset(), s, src.ub_offset(), api);
    check_unique_writes(di, api);
    CoreState& c = core();
    std::vector<double> out(groups.size());
    std::vector<uint8_t> def(groups.size());
    for (size_t g = 0; g < groups.size(); ++g) {
        bool ok = true;
        std::vector<double> lanes;
        for (uint64_t i : groups[g]) lanes.push_back(i == kNoLane ? 0.0 : load(c, src, i, ok));
#ifdef OPGEN_EMU_EXACT
        double acc = 0;
        for (double v : lanes) acc += v;
        out[g] = acc;
#else
        out[g] = tree_sum<T>(lanes);
#endif
        def[g] = ok;
    }
    for (size_t g = 0; g < groups.size(); ++g) store(c, dst, di[g], out[g], def[g] != 0);
    core().launch->vector_elems += groups.size();
    mark_write(dst.slot(), Pipe::V, api);
    c.clock.vector(api, sizeof(T), repeats ? repeats : std::max<uint64_t>(1, (all.size() * sizeof(T) + kRepeatBytes - 1) / kRepeatBytes));
}

// Groups: the active lanes of each repeat, split per 32-byte block when per_block.
template <typename T>
std::vector<std::vector<uint64_t>> repeat_groups(const Lanes& l, uint64_t blk, uint64_t rep, bool per_block) {
    std::vector<uint64_t> idx = lane_indices(l, sizeof(T), blk, rep);
    std::vector<std::vector<uint64_t>> groups;
    const uint32_t epb = kBlockBytes / sizeof(T);
    size_t k = 0;
    const uint32_t width = per_block ? epb : kRepeatBytes / sizeof(T);
    for (uint32_t r = 0; r < l.repeats; ++r) {
        if (!per_block) groups.emplace_back(width, kNoLane);
        uint32_t last_block = ~0u;
        for (uint32_t lane : l.active) {
            if (per_block && lane / epb != last_block) { groups.emplace_back(width, kNoLane); last_block = lane / epb; }
            groups.back()[lane % width] = idx[k++];
        }
    }
    return groups;
}

// dst[0] = the sum of work[0..n), the per-repeat partials, in the given order across repeats.
template <typename T>
void reduce_across(const char* api, const LocalTensor<T>& dst, const LocalTensor<T>& work, uint64_t n, Across how) {
    std::vector<uint64_t> wi(n);
    for (uint64_t r = 0; r < n; ++r) wi[r] = r;
    Span s = check_operand(work, wi, api, true);
    Span d = check_operand(dst, {0}, api, false);
    check_overlap(d, dst.ub_offset(), s, work.ub_offset(), api);
    CoreState& c = core();
    bool ok = true;
    std::vector<double> p;
    for (uint64_t r = 0; r < n; ++r) p.push_back(load(c, work, r, ok));
    store(c, dst, 0, sum_partials<T>(p, how, kRepeatBytes / sizeof(T)), ok);
    core().launch->vector_elems += 1;
    mark_write(dst.slot(), Pipe::V, api);
    c.clock.vector(api, sizeof(T), std::max<uint64_t>(1, (n * sizeof(T) + kRepeatBytes - 1) / kRepeatBytes));
}

// WholeReduceSum for either mask form: dst[r * dstRepStride] = sum of repeat r's active lanes.
template <typename T>
void whole_reduce_sum(const LocalTensor<T>& dst, const LocalTensor<T>& src, const Lanes& l,
                      int32_t dstRepStride, int32_t srcBlkStride, int32_t srcRepStride) {
    auto groups = repeat_groups<T>(l, srcBlkStride, srcRepStride, false);
    std::vector<uint64_t> di(groups.size());
    for (size_t r = 0; r < di.size(); ++r) di[r] = r * uint64_t(dstRepStride);
    reduce_groups("WholeReduceSum", dst, di, src, groups, l.repeats);
}

// CANN's in-place widening idiom (ops-nn's Cast2FloatIf: 16-bit data copied into the upper
// half of a float buffer, then Cast into the whole buffer), accepted only in builds of CANN's
// kernels (OPGEN_EMU_CANN_IDIOMS): asc-devkit's general overlap rule forbids a partial overlap
// within one 256-byte iteration, which this has in its last iteration, and Cast's page says a
// narrow-to-wide overlap "may give wrong results". Accepted when no iteration's dst overlaps a
// later iteration's src (the rule across iterations), computed as read-before-write per
// instruction; every use is counted (opgen_emu_cann_idioms) so the report can say so.
inline std::atomic<uint64_t> widening_overlaps{0};  // over all cores and launches of this library

template <typename TD, typename TS>
bool widening_overlap_ok(const LocalTensor<TD>& dst, const LocalTensor<TS>& src, uint64_t count) {
#ifdef OPGEN_EMU_CANN_IDIOMS
    if constexpr (sizeof(TD) > sizeof(TS)) {
        const uint64_t d0 = dst.ub_offset(), s0 = src.ub_offset(), per = kRepeatBytes / sizeof(TD);
        if (d0 == s0 || s0 + count * sizeof(TS) <= d0 || d0 + count * sizeof(TD) <= s0) return false;
        const uint64_t iters = (count + per - 1) / per;
        for (uint64_t r = 0; r < iters; ++r)            // iteration r's dst against later srcs
            for (uint64_t q = r + 1; q < iters; ++q) {
                const uint64_t dl = d0 + r * per * sizeof(TD), sl = s0 + q * per * sizeof(TS);
                if (dl < sl + per * sizeof(TS) && sl < dl + per * sizeof(TD)) return false;
            }
        ++widening_overlaps;
        return true;
    }
#endif
    (void)dst, (void)src, (void)count;
    return false;
}

}  // namespace opgen_emu

namespace AscendC {

template <typename TD, typename TS>
void Cast(const LocalTensor<TD>& dst, const LocalTensor<TS>& src, const RoundMode& mode, const uint32_t calCount,
          const char* opgen_file = __builtin_FILE(), int opgen_line = __builtin_LINE()) {
    using namespace opgen_emu;
    SiteScope opgen_site(opgen_file, opgen_line);
    Rounding r = check_cast<TD, TS>(mode, "Cast");
    struct Guard {
        explicit Guard(bool on) { tls_overlap_checked = on; }
        ~Guard() { tls_overlap_checked = false; }
    } guard(widening_overlap_ok<TD, TS>(dst, src, calCount));
    elementwise("Cast", count_lanes(calCount, "Cast"), dst, Strides{},
                [r](double a) { return cast_value<TD, TS>(a, r); }, std::make_pair(&src, Strides{}));
}

template <typename TD, typename TS, bool isSetMask = true>
void Cast(const LocalTensor<TD>& dst, const LocalTensor<TS>& src, const RoundMode& mode, uint64_t mask,
          int32_t repeatTimes, const UnaryRepeatParams& p) {
    using namespace opgen_emu;
    Rounding r = check_cast<TD, TS>(mode, "Cast");
    uint32_t lanes = kRepeatBytes / std::max(sizeof(TD), sizeof(TS));
    elementwise("Cast", repeat_lanes<isSetMask>(mask, repeatTimes, lanes, "Cast"), dst,
                Strides{p.dstBlkStride, p.dstRepStride}, [r](double a) { return cast_value<TD, TS>(a, r); },
                std::make_pair(&src, Strides{p.srcBlkStride, p.srcRepStride}));
}

#define OPGEN_REDUCE_TYPES(T) \
    static_assert(opgen_emu::vec_float<T>, "sum reductions: supported for half and float")

// dst[0] = sum(src[0..count)); workLocal receives the per-repeat partial sums.
template <typename T, bool isSetMask = true>
void ReduceSum(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<T>& work,
               const int32_t count, const char* opgen_file = __builtin_FILE(), int opgen_line = __builtin_LINE()) {
    OPGEN_REDUCE_TYPES(T);
    using namespace opgen_emu;
    SiteScope opgen_site(opgen_file, opgen_line);
    const char* api = "ReduceSum";
    if (count < 1) fail(cat(api, ": count ", count, " must be at least 1"));
    count_lanes(count, api);  // a count form: leaves the mask register all ones
    const uint64_t epr = kRepeatBytes / sizeof(T), reps = (count + epr - 1) / epr;
    const uint64_t need = round_up(reps, kBlockBytes / sizeof(T));
    if (work.GetSize() < need)
        fail(cat(api, ": workLocal has ", work.GetSize(), " elements, needs ", need, " for ", count,
                 " elements (one per 256-byte repeat, rounded up to 32 bytes)"));
    std::vector<std::vector<uint64_t>> groups(reps, std::vector<uint64_t>(epr, kNoLane));
    std::vector<uint64_t> wi(reps);
    for (uint64_t i = 0; i < uint64_t(count); ++i) groups[i / epr][i % epr] = i;
    for (uint64_t r = 0; r < reps; ++r) wi[r] = r;
    reduce_groups(api, work, wi, src, groups);
    reduce_across(api, dst, work, reps, kCountAcross);
#if defined(__CCE_AICORE__) && __CCE_AICORE__ == 220
    // Atlas A2/A3 (asc-devkit impl/basic_api/dav_c220 ReduceSumImpl, the count form): vcadd leaves
    // the sum in ACC_VAL, which the scalar unit stores to dst[0] between SetFlag/WaitFlag<V_S>
    // and SetFlag/WaitFlag<S_V>, <S_MTE3>: dst is then readable by GetValue, vector ops and
    // DataCopy without a further sync (CANN's kernels rely on it). Built so only for CANN's
    // kernels (cann_src passes __CCE_AICORE__=220); opgen's keep their explicit syncs checked.
    constexpr int32_t kAccEvent = -1;  // the flags ReduceSumImpl fetches; no kernel event id
    SetFlag<HardEvent::V_S>(kAccEvent);
    WaitFlag<HardEvent::V_S>(kAccEvent);
    mark_write(dst.slot(), Pipe::S, api);
    SetFlag<HardEvent::S_V>(kAccEvent);
    WaitFlag<HardEvent::S_V>(kAccEvent);
    SetFlag<HardEvent::S_MTE3>(kAccEvent);
    WaitFlag<HardEvent::S_MTE3>(kAccEvent);
#endif
}

// dst[0] = sum over all repeats of the masked lanes.
template <typename T>
void ReduceSum(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<T>& work,
               const int32_t mask, const int32_t repeatTimes, const int32_t srcRepStride,
               const char* opgen_file = __builtin_FILE(), int opgen_line = __builtin_LINE()) {
    OPGEN_REDUCE_TYPES(T);
    using namespace opgen_emu;
    SiteScope opgen_site(opgen_file, opgen_line);
    Lanes l = mask_lanes(mask, repeatTimes, max_lanes<T>(), "ReduceSum");
    auto groups = repeat_groups<T>(l, 1, srcRepStride, false);
    const uint64_t need = round_up(l.repeats, kBlockBytes / sizeof(T));
    if (work.GetSize() < need) fail(cat("ReduceSum: workLocal has ", work.GetSize(), " elements, needs ", need));
    std::vector<uint64_t> wi(groups.size());
    for (size_t g = 0; g < wi.size(); ++g) wi[g] = g;
    reduce_groups("ReduceSum", work, wi, src, groups, l.repeats);
    reduce_across("ReduceSum", dst, work, groups.size(), Across::TREE);  // the docs' method 1
}

// dst[r * dstRepStride] = sum of the masked lanes of repeat r (dstRepStride in elements).
template <typename T, bool isSetMask = true>
void WholeReduceSum(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t mask,
                    const int32_t repeatTimes, const int32_t dstRepStride, const int32_t srcBlkStride,
                    const int32_t srcRepStride, const char* opgen_file = __builtin_FILE(),
                    int opgen_line = __builtin_LINE()) {
    OPGEN_REDUCE_TYPES(T);
    using namespace opgen_emu;
    SiteScope opgen_site(opgen_file, opgen_line);
    Lanes l = repeat_lanes<isSetMask>(uint64_t(mask), repeatTimes, max_lanes<T>(), "WholeReduceSum");
    whole_reduce_sum(dst, src, l, dstRepStride, srcBlkStride, srcRepStride);
}

template <typename T, bool isSetMask = true>
void WholeReduceSum(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint64_t mask[],
                    const int32_t repeatTimes, const int32_t dstRepStride, const int32_t srcBlkStride,
                    const int32_t srcRepStride) {
    OPGEN_REDUCE_TYPES(T);
    using namespace opgen_emu;
    Lanes l = repeat_lanes<isSetMask>(mask, repeatTimes, max_lanes<T>(), "WholeReduceSum");
    whole_reduce_sum(dst, src, l, dstRepStride, srcBlkStride, srcRepStride);
}

// Per repeat, one sum per 32-byte block with active lanes, written to
// dst[r * dstRepStride * 8 + block] (dstRepStride in units of one repeat's 8 results).
template <typename T, bool isSetMask = true>
void BlockReduceSum(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t repeat,
                    const int32_t mask, const int32_t dstRepStride, const int32_t srcBlkStride,
                    const int32_t srcRepStride) {
    OPGEN_REDUCE_TYPES(T);
    using namespace opgen_emu;
    Lanes l = repeat_lanes<isSetMask>(uint64_t(mask), repeat, max_lanes<T>(), "BlockReduceSum");
    auto groups = repeat_groups<T>(l, srcBlkStride, srcRepStride, true);
    const uint32_t epb = kBlockBytes / sizeof(T);
    std::vector<uint64_t> di;
    for (uint32_t r = 0; r < l.repeats; ++r) {
        uint32_t last = ~0u;
        for (uint32_t lane : l.active)
            if (lane / epb != last) { last = lane / epb; di.push_back(uint64_t(r) * dstRepStride * 8 + last); }
    }
    reduce_groups("BlockReduceSum", dst, di, src, groups, l.repeats);
}

}  // namespace AscendC

#endif  // OPGEN_EMU_REDUCE_CAST_H
