// opgen AscendC emulation: scalar types (half, bfloat16_t) and rounding.
//
// Both types are 16-bit storage structs with IEEE semantics. Conversion from float is
// round-to-nearest-even (as on the hardware and in numpy / ml_dtypes); arithmetic goes
// through float and rounds once, which is what the vector unit does for one operation.
// Directed rounding (floor, ceil, trunc, away-from-zero, odd) is derived from the RNE
// result and its neighbour, so every format shares one implementation.
#ifndef OPGEN_EMU_TYPES_H
#define OPGEN_EMU_TYPES_H

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace opgen_emu {

inline uint32_t float_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// float -> IEEE binary16, round to nearest even (handles subnormals, inf, nan).
inline uint16_t float_to_half_rne(float f) {
    uint32_t x = float_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t absx = x & 0x7FFFFFFFu;
    if (absx > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);   // nan (quiet)
    if (absx >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to inf
    if (absx < 0x38800000u) {  // result is subnormal or zero: scale into the 2^-24 grid
        float a = bits_float(absx);
        float scaled = a * 16777216.0f;  // exact: power of two; value in units of 2^-24
        float r = std::nearbyint(scaled);  // default FP env rounds to nearest even
        return static_cast<uint16_t>(sign | static_cast<uint32_t>(r));
    }
    uint32_t mant_odd = (absx >> 13) & 1u;
    absx += 0xC8000FFFu + mant_odd;  // rebias exponent (-112 << 23) and round to 10 bits
    return static_cast<uint16_t>(sign | (absx >> 13));
}

inline float half_to_float(uint16_t h) {
    uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t mant = h & 0x3FFu;
    if (exp == 0x1F) return bits_float(sign | 0x7F800000u | (mant << 13));
    if (exp == 0) {
        float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline uint16_t float_to_bf16_rne(float f) {
    uint32_t x = float_bits(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
    x += 0x7FFFu + ((x >> 16) & 1u);
    return static_cast<uint16_t>(x >> 16);
}

inline float bf16_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

struct HalfFormat {
    static uint16_t rne(float f) { return float_to_half_rne(f); }
    static float value(uint16_t b) { return half_to_float(b); }
};
struct Bf16Format {
    static uint16_t rne(float f) { return float_to_bf16_rne(f); }
    static float value(uint16_t b) { return bf16_to_float(b); }
};

// Next representable 16-bit pattern away from zero / towards zero (sign-magnitude order).
inline uint16_t away16(uint16_t b) { return static_cast<uint16_t>(b + 1); }
inline uint16_t toward16(uint16_t b) {
    return (b & 0x7FFFu) == 0 ? b : static_cast<uint16_t>(b - 1);
}

enum class Rounding { RINT, ROUND, FLOOR, CEIL, TRUNC, ODD };

// Round a float into a 16-bit float format with the given rounding.
template <typename Fmt>
uint16_t round_to16(float f, Rounding mode) {
    uint16_t n = Fmt::rne(f);
    if (std::isnan(f) || mode == Rounding::RINT) return n;
    float nv = Fmt::value(n);
    if (nv == f) return n;  // exact (including infinities)
    bool neg = std::signbit(f);
    // lo/hi: neighbours bracketing f by magnitude (|lo| < |f| < |hi|).
    bool n_above = std::fabs(nv) > std::fabs(f);
    uint16_t small = n_above ? toward16(n) : n;
    uint16_t big = n_above ? n : away16(n);
    switch (mode) {
        case Rounding::TRUNC: return small;
        case Rounding::FLOOR: return neg ? big : small;
        case Rounding::CEIL: return neg ? small : big;
        case Rounding::ODD: return (small & 1u) ? small : big;
        case Rounding::ROUND: {
            double ds = std::fabs(double(f) - double(Fmt::value(small)));
            double db = std::fabs(double(Fmt::value(big)) - double(f));
            return db <= ds ? big : small;  // ties away from zero
        }
        default: return n;
    }
}

}  // namespace opgen_emu

// IEEE binary16, as AscendC's `half`.
struct half {
    uint16_t bits = 0;
    half() = default;
    template <typename U, typename = std::enable_if_t<std::is_arithmetic<U>::value>>
    half(U v) : bits(opgen_emu::float_to_half_rne(static_cast<float>(v))) {}
    static half from_bits(uint16_t b) { half h; h.bits = b; return h; }
    operator float() const { return opgen_emu::half_to_float(bits); }
    half& operator+=(float v) { return *this = half(float(*this) + v); }
    half& operator-=(float v) { return *this = half(float(*this) - v); }
    half& operator*=(float v) { return *this = half(float(*this) * v); }
    half& operator/=(float v) { return *this = half(float(*this) / v); }
};

// bfloat16, as AscendC's `bfloat16_t`.
struct bfloat16_t {
    uint16_t bits = 0;
    bfloat16_t() = default;
    template <typename U, typename = std::enable_if_t<std::is_arithmetic<U>::value>>
    bfloat16_t(U v) : bits(opgen_emu::float_to_bf16_rne(static_cast<float>(v))) {}
    static bfloat16_t from_bits(uint16_t b) { bfloat16_t h; h.bits = b; return h; }
    operator float() const { return opgen_emu::bf16_to_float(bits); }
    bfloat16_t& operator+=(float v) { return *this = bfloat16_t(float(*this) + v); }
    bfloat16_t& operator-=(float v) { return *this = bfloat16_t(float(*this) - v); }
    bfloat16_t& operator*=(float v) { return *this = bfloat16_t(float(*this) * v); }
    bfloat16_t& operator/=(float v) { return *this = bfloat16_t(float(*this) / v); }
};

static_assert(sizeof(half) == 2 && sizeof(bfloat16_t) == 2, "16-bit storage");

namespace opgen_emu {
template <typename T> struct TypeName { static const char* get() { return "?"; } };
template <> struct TypeName<float> { static const char* get() { return "float"; } };
template <> struct TypeName<half> { static const char* get() { return "half"; } };
template <> struct TypeName<bfloat16_t> { static const char* get() { return "bfloat16_t"; } };
template <> struct TypeName<int32_t> { static const char* get() { return "int32_t"; } };
template <> struct TypeName<int16_t> { static const char* get() { return "int16_t"; } };
template <> struct TypeName<uint8_t> { static const char* get() { return "uint8_t"; } };
template <> struct TypeName<int8_t> { static const char* get() { return "int8_t"; } };
template <typename T> const char* type_name() { return TypeName<T>::get(); }

// A value of T computed in float then rounded once (what one vector instruction does).
template <typename T> inline T from_float(float v) { return static_cast<T>(v); }
template <typename T> inline float to_float(T v) { return static_cast<float>(v); }
}  // namespace opgen_emu

#endif  // OPGEN_EMU_TYPES_H
