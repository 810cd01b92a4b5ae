// opgen AscendC emulation: vector APIs (elementwise, scalar, unary, Duplicate, Cast).
//
// Each API has AscendC's count form and, where AscendC has it, the repeat form (mask,
// repeatTimes, repeat params). repeatTimes is taken as int32_t rather than uint8_t so that a
// value above 255 is reported instead of silently wrapping.
#ifndef OPGEN_EMU_VECTOR_H
#define OPGEN_EMU_VECTOR_H

#include "emu_vector_core.h"

namespace AscendC {

enum class RoundMode { CAST_NONE = 0, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD };

template <typename T> struct Identity { using type = T; };

// ---------------------------------------------------------------- binary: dst = f(src0, src1)
#define OPGEN_EMU_BINARY(NAME, TYPES_OK, TYPES_MSG, EXPR)                                           \
    template <typename T, bool isSetMask = true>                                                    \
    void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,    \
              const int32_t& calCount, const char* opgen_file = __builtin_FILE(),                 \
              int opgen_line = __builtin_LINE()) {                                                  \
        static_assert(TYPES_OK, #NAME ": " TYPES_MSG);                                              \
        using namespace opgen_emu;                                                                  \
        SiteScope opgen_site(opgen_file, opgen_line);                                               \
        elementwise(#NAME, count_lanes(calCount, #NAME), dst, Strides{},                            \
                    [](double a, double b) { return EXPR; }, std::make_pair(&src0, Strides{}),       \
                    std::make_pair(&src1, Strides{}));                                              \
    }                                                                                               \
    template <typename T, bool isSetMask = true>                                                    \
    void NAME##_repeat(const LocalTensor<T>& dst, const LocalTensor<T>& src0,                       \
                       const LocalTensor<T>& src1, const opgen_emu::Lanes& lanes,                   \
                       const BinaryRepeatParams& p) {                                               \
        static_assert(TYPES_OK, #NAME ": " TYPES_MSG);                                              \
        using namespace opgen_emu;                                                                  \
        elementwise(#NAME, lanes, dst, Strides{p.dstBlkStride, p.dstRepStride},                     \
                    [](double a, double b) { return EXPR; },                                        \
                    std::make_pair(&src0, Strides{p.src0BlkStride, p.src0RepStride}),              \
                    std::make_pair(&src1, Strides{p.src1BlkStride, p.src1RepStride}));             \
    }                                                                                               \
    template <typename T, bool isSetMask = true>                                                    \
    void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,    \
              uint64_t mask, int32_t repeatTimes, const BinaryRepeatParams& p) {                   \
        NAME##_repeat(dst, src0, src1,                                                             \
                      opgen_emu::repeat_lanes<isSetMask>(mask, repeatTimes, opgen_emu::max_lanes<T>(), #NAME), p); \
    }                                                                                               \
    template <typename T, bool isSetMask = true>                                                    \
    void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,    \
              const uint64_t mask[], int32_t repeatTimes, const BinaryRepeatParams& p) {           \
        NAME##_repeat(dst, src0, src1,                                                             \
                      opgen_emu::repeat_lanes<isSetMask>(mask, repeatTimes, opgen_emu::max_lanes<T>(), #NAME), p); \
    }

#define OPGEN_ARITH opgen_emu::vec_arith<T>
#define OPGEN_FLOAT opgen_emu::vec_float<T>
#define OPGEN_ARITH_MSG "supported for half, float, int16_t, int32_t (bfloat16_t only with OPGEN_VEC_BF16: Cast to float first)"
#define OPGEN_FLOAT_MSG "supported for half and float (bfloat16_t only with OPGEN_VEC_BF16: Cast to float first)"

OPGEN_EMU_BINARY(Add, OPGEN_ARITH, OPGEN_ARITH_MSG, a + b)
OPGEN_EMU_BINARY(Sub, OPGEN_ARITH, OPGEN_ARITH_MSG, a - b)
OPGEN_EMU_BINARY(Mul, OPGEN_ARITH, OPGEN_ARITH_MSG, a * b)
OPGEN_EMU_BINARY(Div, OPGEN_FLOAT, OPGEN_FLOAT_MSG, a / b)
OPGEN_EMU_BINARY(Max, OPGEN_ARITH, OPGEN_ARITH_MSG, (std::isnan(a) || std::isnan(b)) ? NAN : (a > b ? a : b))
OPGEN_EMU_BINARY(Min, OPGEN_ARITH, OPGEN_ARITH_MSG, (std::isnan(a) || std::isnan(b)) ? NAN : (a < b ? a : b))

// ---------------------------------------------------------------- scalar: dst = f(src, s)
#define OPGEN_EMU_SCALAR(NAME, TYPES_OK, TYPES_MSG, EXPR)                                           \
    template <typename T, bool isSetMask = true>                                                    \
    void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src,                                 \
              const typename Identity<T>::type& scalar, const int32_t& calCount,                    \
              const char* opgen_file = __builtin_FILE(), int opgen_line = __builtin_LINE()) {       \
        static_assert(TYPES_OK, #NAME ": " TYPES_MSG);                                              \
        using namespace opgen_emu;                                                                  \
        SiteScope opgen_site(opgen_file, opgen_line);                                               \
        const double b = to_double<T>(scalar);                                                      \
        elementwise(#NAME, count_lanes(calCount, #NAME), dst, Strides{},                            \
                    [b](double a) { return EXPR; }, std::make_pair(&src, Strides{}));               \
    }                                                                                               \
    template <typename T, bool isSetMask = true>                                                    \
    void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src,                                 \
              const typename Identity<T>::type& scalar, uint64_t mask, int32_t repeatTimes,         \
              const UnaryRepeatParams& p) {                                                         \
        static_assert(TYPES_OK, #NAME ": " TYPES_MSG);                                              \
        using namespace opgen_emu;                                                                  \
        const double b = to_double<T>(scalar);                                                      \
        elementwise(#NAME, repeat_lanes<isSetMask>(mask, repeatTimes, max_lanes<T>(), #NAME), dst,               \
                    Strides{p.dstBlkStride, p.dstRepStride}, [b](double a) { return EXPR; },        \
                    std::make_pair(&src, Strides{p.srcBlkStride, p.srcRepStride}));                 \
    }

OPGEN_EMU_SCALAR(Adds, OPGEN_ARITH, OPGEN_ARITH_MSG, a + b)
OPGEN_EMU_SCALAR(Muls, OPGEN_ARITH, OPGEN_ARITH_MSG, a * b)
OPGEN_EMU_SCALAR(Maxs, OPGEN_ARITH, OPGEN_ARITH_MSG, std::isnan(a) ? NAN : (a > b ? a : b))
OPGEN_EMU_SCALAR(Mins, OPGEN_ARITH, OPGEN_ARITH_MSG, std::isnan(a) ? NAN : (a < b ? a : b))

// ---------------------------------------------------------------- unary: dst = f(src)
#define OPGEN_EMU_UNARY(NAME, TYPES_OK, TYPES_MSG, EXPR)                                            \
    template <typename T, bool isSetMask = true>                                                    \
    void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t& calCount,        \
              const char* opgen_file = __builtin_FILE(), int opgen_line = __builtin_LINE()) {       \
        static_assert(TYPES_OK, #NAME ": " TYPES_MSG);                                              \
        using namespace opgen_emu;                                                                  \
        SiteScope opgen_site(opgen_file, opgen_line);                                               \
        elementwise(#NAME, count_lanes(calCount, #NAME), dst, Strides{},                            \
                    [](double a) { return EXPR; }, std::make_pair(&src, Strides{}));                \
    }                                                                                               \
    template <typename T, bool isSetMask = true>                                                    \
    void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, uint64_t mask,                  \
              int32_t repeatTimes, const UnaryRepeatParams& p) {                                    \
        static_assert(TYPES_OK, #NAME ": " TYPES_MSG);                                              \
        using namespace opgen_emu;                                                                  \
        elementwise(#NAME, repeat_lanes<isSetMask>(mask, repeatTimes, max_lanes<T>(), #NAME), dst,               \
                    Strides{p.dstBlkStride, p.dstRepStride}, [](double a) { return EXPR; },         \
                    std::make_pair(&src, Strides{p.srcBlkStride, p.srcRepStride}));                 \
    }

OPGEN_EMU_UNARY(Exp, OPGEN_FLOAT, OPGEN_FLOAT_MSG, std::exp(a))
OPGEN_EMU_UNARY(Ln, OPGEN_FLOAT, OPGEN_FLOAT_MSG, std::log(a))
OPGEN_EMU_UNARY(Sqrt, OPGEN_FLOAT, OPGEN_FLOAT_MSG, std::sqrt(a))
OPGEN_EMU_UNARY(Rsqrt, OPGEN_FLOAT, OPGEN_FLOAT_MSG, 1.0 / std::sqrt(a))
OPGEN_EMU_UNARY(Abs, OPGEN_FLOAT, OPGEN_FLOAT_MSG, std::fabs(a))
OPGEN_EMU_UNARY(Reciprocal, OPGEN_FLOAT, OPGEN_FLOAT_MSG, 1.0 / a)
OPGEN_EMU_UNARY(Relu, OPGEN_ARITH, OPGEN_ARITH_MSG, std::isnan(a) ? a : (a > 0 ? a : 0.0))

// ---------------------------------------------------------------- Duplicate: dst = scalar
template <typename T>
constexpr bool dup_ok = opgen_emu::vec_arith<T> || std::is_same<T, bfloat16_t>::value;

template <typename T, bool isSetMask = true>
void Duplicate(const LocalTensor<T>& dst, const typename Identity<T>::type& scalar, const int32_t& calCount,
               const char* opgen_file = __builtin_FILE(), int opgen_line = __builtin_LINE()) {
    static_assert(dup_ok<T>, "Duplicate: supported for half, bfloat16_t, float, int16_t, int32_t");
    using namespace opgen_emu;
    SiteScope opgen_site(opgen_file, opgen_line);
    const double v = to_double<T>(scalar);
    elementwise("Duplicate", count_lanes(calCount, "Duplicate"), dst, Strides{}, [v]() { return v; });
}

template <typename T, bool isSetMask = true>
void Duplicate(const LocalTensor<T>& dst, const typename Identity<T>::type& scalar, uint64_t mask,
               int32_t repeatTimes, uint16_t dstBlockStride, uint8_t dstRepeatStride) {
    static_assert(dup_ok<T>, "Duplicate: supported for half, bfloat16_t, float, int16_t, int32_t");
    using namespace opgen_emu;
    const double v = to_double<T>(scalar);
    elementwise("Duplicate", repeat_lanes<isSetMask>(mask, repeatTimes, max_lanes<T>(), "Duplicate"), dst,
                Strides{dstBlockStride, dstRepeatStride}, [v]() { return v; });
}

}  // namespace AscendC

#endif  // OPGEN_EMU_VECTOR_H
