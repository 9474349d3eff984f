// The vector registers the conversion loops use, one set per architecture,
// chosen at compile time (the build's -march / -mcpu):
//   x86 with AVX2 and F16C   8 float32 lanes, 4 float64 lanes
//   aarch64 (NEON)           4 float32 lanes, 2 float64 lanes
//   anything else            none: the callers' scalar loops do all the work
// Each path loads float32/float16/bfloat16 into float32 lanes (or float64
// lanes), multiplies, and stores back with the same rounding as half_convert.h's
// scalar functions, bit for bit (tests/test_vector_kernels.cpp, which CI also
// runs for aarch64 under emulation). NEON is part of every AArch64 CPU, so the
// Arm path needs no flag beyond the base -march=armv8-a.
//
// Callers (reduce_kernels.cpp, bucket_pack.cpp) write a vector loop over
// kLanes32 / kLanes64 elements inside `#if PYCOMM_HAVE_LANES` and finish with
// the scalar loop, which does all the work on a build without lanes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "half_convert.h"

#if defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>
#define PYCOMM_LANES_AVX2 1
#define PYCOMM_HAVE_LANES 1
#elif defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#define PYCOMM_LANES_NEON 1
#define PYCOMM_HAVE_LANES 1
#else
#define PYCOMM_HAVE_LANES 0
#endif

namespace pycomm::core::lanes {

#if defined(PYCOMM_LANES_AVX2)
inline constexpr const char* kVectorPath = "avx2+f16c";
inline constexpr size_t kLanes32 = 8;
inline constexpr size_t kLanes64 = 4;
using V32 = __m256;
using V64 = __m256d;

inline V32 splat32(float x) { return _mm256_set1_ps(x); }
inline V32 mul(V32 a, V32 b) { return _mm256_mul_ps(a, b); }
inline V64 splat64(double x) { return _mm256_set1_pd(x); }
inline V64 mul(V64 a, V64 b) { return _mm256_mul_pd(a, b); }

inline V32 load32(const float* p) { return _mm256_loadu_ps(p); }
inline V32 load32(const Half* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline V32 load32(const BFloat16* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

inline void store32(float* p, V32 v) { _mm256_storeu_ps(p, v); }
inline void store32(Half* p, V32 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}
// to_bfloat16's arithmetic, one value per 32-bit lane.
inline __m256i bf16_bits(V32 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i quiet_nan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  const __m256 is_nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  return _mm256_blendv_epi8(rounded, quiet_nan, _mm256_castps_si256(is_nan));
}
inline void store32(BFloat16* p, V32 v) {
  const __m256i bits = bf16_bits(v);
  // Every lane is <= 0xffff, so the saturating pack is a plain narrowing.
  const __m128i packed =
      _mm_packus_epi32(_mm256_castsi256_si128(bits), _mm256_extracti128_si256(bits, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
}

inline V64 load64(const double* p) { return _mm256_loadu_pd(p); }
inline V64 load64(const float* p) { return _mm256_cvtps_pd(_mm_loadu_ps(p)); }
inline V64 load64(const Half* p) {
  return _mm256_cvtps_pd(_mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline V64 load64(const BFloat16* p) {
  const __m128i w = _mm_cvtepu16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm256_cvtps_pd(_mm_castsi128_ps(_mm_slli_epi32(w, 16)));
}

inline void store64(double* p, V64 v) { _mm256_storeu_pd(p, v); }
inline void store64(float* p, V64 v) { _mm_storeu_ps(p, _mm256_cvtpd_ps(v)); }
// double -> half types through float: two roundings, as torch's casts do on x86.
inline void store64(Half* p, V64 v) {
  const __m128i h = _mm_cvtps_ph(_mm256_cvtpd_ps(v), _MM_FROUND_TO_NEAREST_INT);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(p), h);
}
inline void store64(BFloat16* p, V64 v) {
  const __m128 f = _mm256_cvtpd_ps(v);
  const __m128i u = _mm_castps_si128(f);
  const __m128i lsb = _mm_and_si128(_mm_srli_epi32(u, 16), _mm_set1_epi32(1));
  const __m128i rounded =
      _mm_srli_epi32(_mm_add_epi32(_mm_add_epi32(u, _mm_set1_epi32(0x7fff)), lsb), 16);
  const __m128i quiet_nan = _mm_or_si128(_mm_srli_epi32(u, 16), _mm_set1_epi32(0x40));
  const __m128i bits = _mm_blendv_epi8(rounded, quiet_nan, _mm_castps_si128(_mm_cmpunord_ps(f, f)));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_packus_epi32(bits, bits));
}

#elif defined(PYCOMM_LANES_NEON)
inline constexpr const char* kVectorPath = "neon";
inline constexpr size_t kLanes32 = 4;
inline constexpr size_t kLanes64 = 2;
using V32 = float32x4_t;
using V64 = float64x2_t;

inline V32 splat32(float x) { return vdupq_n_f32(x); }
inline V32 mul(V32 a, V32 b) { return vmulq_f32(a, b); }
inline V64 splat64(double x) { return vdupq_n_f64(x); }
inline V64 mul(V64 a, V64 b) { return vmulq_f64(a, b); }

// 16-bit patterns in and out, through memcpy: the element types promise no
// more than 2-byte alignment.
inline uint16x4_t load_bits4(const void* p) {
  uint64_t w;
  std::memcpy(&w, p, 8);
  return vcreate_u16(w);
}
inline uint16x4_t load_bits2(const void* p) {
  uint32_t w;
  std::memcpy(&w, p, 4);
  return vcreate_u16(uint64_t(w));
}
inline void store_bits4(void* p, uint16x4_t v) {
  const uint64_t w = vget_lane_u64(vreinterpret_u64_u16(v), 0);
  std::memcpy(p, &w, 8);
}
inline void store_bits2(void* p, uint16x4_t v) {
  const uint32_t w = vget_lane_u32(vreinterpret_u32_u16(v), 0);
  std::memcpy(p, &w, 4);
}

inline V32 half_bits_to_f32(uint16x4_t h) { return vcvt_f32_f16(vreinterpret_f16_u16(h)); }
inline V32 bf16_bits_to_f32(uint16x4_t b) { return vreinterpretq_f32_u32(vshll_n_u16(b, 16)); }
inline uint16x4_t f32_to_half_bits(V32 v) { return vreinterpret_u16_f16(vcvt_f16_f32(v)); }
// to_bfloat16's arithmetic, one value per 32-bit lane, narrowed to 16 bits.
inline uint16x4_t f32_to_bf16_bits(V32 v) {
  const uint32x4_t u = vreinterpretq_u32_f32(v);
  const uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
  const uint32x4_t rounded = vshrq_n_u32(vaddq_u32(vaddq_u32(u, vdupq_n_u32(0x7fff)), lsb), 16);
  const uint32x4_t quiet_nan = vorrq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(0x40));
  const uint32x4_t is_number = vceqq_f32(v, v);  // false for NaN only
  return vmovn_u32(vbslq_u32(is_number, rounded, quiet_nan));
}

inline V32 load32(const float* p) { return vld1q_f32(p); }
inline V32 load32(const Half* p) { return half_bits_to_f32(load_bits4(p)); }
inline V32 load32(const BFloat16* p) { return bf16_bits_to_f32(load_bits4(p)); }

inline void store32(float* p, V32 v) { vst1q_f32(p, v); }
inline void store32(Half* p, V32 v) { store_bits4(p, f32_to_half_bits(v)); }
inline void store32(BFloat16* p, V32 v) { store_bits4(p, f32_to_bf16_bits(v)); }

inline V64 load64(const double* p) { return vld1q_f64(p); }
inline V64 load64(const float* p) { return vcvt_f64_f32(vld1_f32(p)); }
inline V64 load64(const Half* p) { return vcvt_f64_f32(vget_low_f32(half_bits_to_f32(load_bits2(p)))); }
inline V64 load64(const BFloat16* p) {
  return vcvt_f64_f32(vget_low_f32(bf16_bits_to_f32(load_bits2(p))));
}

inline void store64(double* p, V64 v) { vst1q_f64(p, v); }
inline void store64(float* p, V64 v) { vst1_f32(p, vcvt_f32_f64(v)); }
// double -> half types as torch's casts do on Arm: float16 rounds once (to
// float32 rounded to odd, FCVTXN, then to float16: one rounding of the double,
// see round_to_odd_float), bfloat16 twice (through float32). The upper two
// lanes are a copy, converted and dropped.
inline V32 both_halves(float32x2_t f) { return vcombine_f32(f, f); }
inline void store64(Half* p, V64 v) { store_bits2(p, f32_to_half_bits(both_halves(vcvtx_f32_f64(v)))); }
inline void store64(BFloat16* p, V64 v) {
  store_bits2(p, f32_to_bf16_bits(both_halves(vcvt_f32_f64(v))));
}

#else
inline constexpr const char* kVectorPath = "none (scalar loops)";
#endif

// dst[i] = src[i] converted through float32 lanes, for the leading multiple of
// kLanes32 elements; returns how many were done (the caller's scalar loop does
// the rest). One of S, D is float: a widening or a narrowing.
template <class S, class D>
inline size_t convert32(const S* __restrict src, D* __restrict dst, size_t n) {
  size_t i = 0;
#if PYCOMM_HAVE_LANES
  // Two vectors an iteration: two independent chains in flight (measured once
  // on x86 on 2026-12-02: 3-10% faster than one for bfloat16's integer rounding).
  for (; i + 2 * kLanes32 <= n; i += 2 * kLanes32) {
    const V32 a = load32(src + i);
    const V32 b = load32(src + i + kLanes32);
    store32(dst + i, a);
    store32(dst + i + kLanes32, b);
  }
  for (; i + kLanes32 <= n; i += kLanes32) store32(dst + i, load32(src + i));
#endif
  return i;
}

}  // namespace pycomm::core::lanes
