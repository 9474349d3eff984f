// float16 / bfloat16 <-> float32 conversions of one value, torch-free.
//
// The *_reference functions are the definition, in integer arithmetic that any
// C++ compiler runs the same: round to nearest even, and a NaN stays a NaN of
// the same sign, made quiet, with the high bits of its payload. That is what the
// hardware conversions do on both architectures (x86 F16C, Arm FCVT with the
// default FPCR): to_float / to_half use them where the build has them, and
// tests/test_vector_kernels.cpp checks every path against the reference bit
// for bit. (Under nvcc the reference serves the host side.)
// bfloat16 has no conversion instruction in the base ISAs; its
// integer arithmetic is the same on the vector paths (float_lanes.h).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__F16C__)
#include <immintrin.h>
#endif
// Arm's __fp16 converts in hardware (FCVT); nvcc's front end need not know it.
#if defined(__aarch64__) && !defined(__CUDACC__)
#define PYCOMM_ARM_FP16 1
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

inline float half_to_float_reference(uint16_t bits) {
  uint32_t sign = uint32_t(bits & 0x8000u) << 16;
  uint32_t exp = (bits >> 10) & 0x1fu;
  uint32_t mant = bits & 0x3ffu;
  if (exp == 0x1f) {
    const uint32_t quiet = mant ? 0x00400000u : 0u;  // infinity has no payload
    return bits_to_float(sign | 0x7f800000u | quiet | (mant << 13));
  }
  if (exp == 0) {
    if (mant == 0) return bits_to_float(sign);
    // Subnormal: value is mant * 2^-24 (exact in float32).
    float v = float(mant) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return bits_to_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline uint16_t float_to_half_reference(float f) {
  uint32_t u = float_to_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {
    // Subnormal half (or zero): let the float adder do the rounding.
    float v = bits_to_float(abs) + 0.5f;
    return uint16_t(sign | (float_to_bits(v) - 0x3f000000u));
  }
  uint32_t mant_odd = (abs >> 13) & 1u;
  abs += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round to nearest even
  return uint16_t(sign | (abs >> 13));
}

// float64 -> float16 rounds as torch's .to() does on each architecture: twice
// (to float32, then to float16) on x86, where c10::Half(double) takes the
// float path, and once on aarch64, where it converts directly (measured with
// torch 2.14.1 on both: 55 of 2^20 random values differ between the two).
#if defined(PYCOMM_ARM_FP16)
inline constexpr bool kHalfFromDoubleRoundsOnce = true;
#else
inline constexpr bool kHalfFromDoubleRoundsOnce = false;
#endif

// float32 nearest to d, rounded to odd (toward zero, then the last bit set when
// inexact): rounding that to float16 is a single rounding of d, since float32
// carries more than two bits beyond float16's.
inline float round_to_odd_float(double d) {
  float f = float(d);
  if (d != d || double(f) == d) return f;  // NaN, or exact
  uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) != 0 && (f < 0 ? double(f) < d : double(f) > d)) --u;  // toward zero
  return bits_to_float(u | 1u);
}

inline uint16_t double_to_half_reference(double d) {
  return float_to_half_reference(kHalfFromDoubleRoundsOnce ? round_to_odd_float(d) : float(d));
}

inline float to_float(Half h) {
#if defined(__F16C__)
  return _cvtsh_ss(h.bits);
#elif defined(PYCOMM_ARM_FP16)
  __fp16 v;
  std::memcpy(&v, &h.bits, 2);
  return float(v);
#else
  return half_to_float_reference(h.bits);
#endif
}

inline Half to_half(float f) {
#if defined(__F16C__)
  return Half{uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT))};
#elif defined(PYCOMM_ARM_FP16)
  const __fp16 v = __fp16(f);
  Half h;
  std::memcpy(&h.bits, &v, 2);
  return h;
#else
  return Half{float_to_half_reference(f)};
#endif
}

inline Half to_half(double d) {
#if defined(PYCOMM_ARM_FP16)
  const __fp16 v = __fp16(d);  // FCVT from double: one rounding (kHalfFromDoubleRoundsOnce)
  Half h;
  std::memcpy(&h.bits, &v, 2);
  return h;
#else
  return to_half(float(d));
#endif
}

}  // namespace pycomm::core
