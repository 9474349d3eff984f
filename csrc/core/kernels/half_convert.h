// float16 / bfloat16 <-> float32 conversions, torch-free. Written as plain
// integer arithmetic so GCC vectorises the loops that call them; with F16C the
// float16 path uses the hardware conversion instead.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace pycomm::core {

struct Half { uint16_t bits; };
struct BFloat16 { uint16_t bits; };

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float to_float(BFloat16 v) { return bits_to_float(uint32_t(v.bits) << 16); }

// Round to nearest even, as torch does; NaN stays a (quiet) NaN.
inline BFloat16 to_bfloat16(float f) {
  uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return BFloat16{uint16_t((u >> 16) | 0x40u)};
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return BFloat16{uint16_t((u + rounding) >> 16)};
}

inline float to_float(Half h) {
#if defined(__F16C__)
  return _cvtsh_ss(h.bits);
#else
  uint32_t sign = uint32_t(h.bits & 0x8000u) << 16;
  uint32_t exp = (h.bits >> 10) & 0x1fu;
  uint32_t mant = h.bits & 0x3ffu;
  if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return bits_to_float(sign);
    // Subnormal: value is mant * 2^-24.
    float v = float(mant) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return bits_to_float(sign | ((exp + 112u) << 23) | (mant << 13));
#endif
}

inline Half to_half(float f) {
#if defined(__F16C__)
  return Half{uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT))};
#else
  uint32_t u = float_to_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return Half{uint16_t(sign | 0x7e00u)};
  if (abs >= 0x477ff000u) return Half{uint16_t(sign | 0x7c00u)};  // rounds to inf
  if (abs < 0x38800000u) {
    // Subnormal half (or zero): let the float adder do the rounding.
    float v = bits_to_float(abs) + 0.5f;
    return Half{uint16_t(sign | (float_to_bits(v) - 0x3f000000u))};
  }
  uint32_t mant_odd = (abs >> 13) & 1u;
  abs += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round to nearest even
  return Half{uint16_t(sign | (abs >> 13))};
#endif
}

}  // namespace pycomm::core
