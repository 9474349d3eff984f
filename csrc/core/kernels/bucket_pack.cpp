#include "bucket_pack.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "../errors.h"
#include "half_convert.h"

// The vector path needs AVX2 (integer lanes for bfloat16) and F16C (float16).
// Without them the scalar loop below computes the very same values.
#if defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>
#define PYCOMM_BUCKET_AVX2 1
#else
#define PYCOMM_BUCKET_AVX2 0
#endif

namespace pycomm::core {
namespace {

template <class S, class D>
using ComputeOf =
    std::conditional_t<std::is_same_v<S, double> || std::is_same_v<D, double>, double, float>;

template <class C, class S>
inline C widen_one(S x) {
  if constexpr (std::is_same_v<S, Half> || std::is_same_v<S, BFloat16>) {
    return C(to_float(x));
  } else {
    return C(x);
  }
}

// double -> half types goes through float, as c10::Half(double) and
// c10::BFloat16(double) do; the two roundings are part of matching torch.
template <class D, class C>
inline D narrow_one(C v) {
  if constexpr (std::is_same_v<D, Half>) {
    return to_half(float(v));
  } else if constexpr (std::is_same_v<D, BFloat16>) {
    return to_bfloat16(float(v));
  } else {
    return D(v);
  }
}

template <class S, class D, bool kScaled>
inline void convert_scalar(const S* __restrict src, D* __restrict dst, size_t n,
                           ComputeOf<S, D> scale) {
  using C = ComputeOf<S, D>;
  for (size_t i = 0; i < n; ++i) {
    C v = widen_one<C>(src[i]);
    if constexpr (kScaled) v = v * scale;
    dst[i] = narrow_one<D>(v);
  }
}

#if PYCOMM_BUCKET_AVX2
// Eight lanes of float32 compute.
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const Half* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m256 load8(const BFloat16* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

inline void store8(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
inline void store8(Half* p, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}
// bfloat16 bits (round to nearest even, NaN kept quiet with its sign), one per
// 32-bit lane: the same arithmetic as half_convert.h's to_bfloat16.
inline __m256i bf16_bits8(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i quiet_nan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  const __m256 is_nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  return _mm256_blendv_epi8(rounded, quiet_nan, _mm256_castps_si256(is_nan));
}
inline void store8(BFloat16* p, __m256 v) {
  const __m256i bits = bf16_bits8(v);
  // Every lane is <= 0xffff, so the saturating pack is a plain narrowing.
  const __m128i packed =
      _mm_packus_epi32(_mm256_castsi256_si128(bits), _mm256_extracti128_si256(bits, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
}

// Four lanes of float64 compute.
inline __m256d load4(const double* p) { return _mm256_loadu_pd(p); }
inline __m256d load4(const float* p) { return _mm256_cvtps_pd(_mm_loadu_ps(p)); }
inline __m256d load4(const Half* p) {
  return _mm256_cvtps_pd(_mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline __m256d load4(const BFloat16* p) {
  const __m128i w = _mm_cvtepu16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm256_cvtps_pd(_mm_castsi128_ps(_mm_slli_epi32(w, 16)));
}

inline void store4(double* p, __m256d v) { _mm256_storeu_pd(p, v); }
inline void store4(float* p, __m256d v) { _mm_storeu_ps(p, _mm256_cvtpd_ps(v)); }
inline void store4(Half* p, __m256d v) {
  const __m128i h = _mm_cvtps_ph(_mm256_cvtpd_ps(v), _MM_FROUND_TO_NEAREST_INT);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(p), h);
}
inline void store4(BFloat16* p, __m256d v) {
  const __m128 f = _mm256_cvtpd_ps(v);
  const __m128i u = _mm_castps_si128(f);
  const __m128i lsb = _mm_and_si128(_mm_srli_epi32(u, 16), _mm_set1_epi32(1));
  const __m128i rounded =
      _mm_srli_epi32(_mm_add_epi32(_mm_add_epi32(u, _mm_set1_epi32(0x7fff)), lsb), 16);
  const __m128i quiet_nan = _mm_or_si128(_mm_srli_epi32(u, 16), _mm_set1_epi32(0x40));
  const __m128i bits = _mm_blendv_epi8(rounded, quiet_nan, _mm_castps_si128(_mm_cmpunord_ps(f, f)));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_packus_epi32(bits, bits));
}
#endif  // PYCOMM_BUCKET_AVX2

// One slice: dst[j] = narrow(widen(src[j]) * scale).
template <class S, class D, bool kScaled>
void convert_slice(const void* src_v, void* dst_v, size_t n, double scale_d) {
  const S* src = static_cast<const S*>(src_v);
  D* dst = static_cast<D*>(dst_v);
  if constexpr (std::is_same_v<S, D> && !kScaled) {
    // A plain copy: libc's memcpy is the fastest one there is (it switches to
    // non-temporal stores for copies larger than the cache).
    std::memcpy(dst, src, n * sizeof(S));
  } else {
    using C = ComputeOf<S, D>;
    const C scale = C(scale_d);
    size_t i = 0;
#if PYCOMM_BUCKET_AVX2
    // Two vectors an iteration keep two independent chains in flight.
    if constexpr (std::is_same_v<C, float>) {
      const __m256 s = _mm256_set1_ps(scale);
      for (; i + 16 <= n; i += 16) {
        __m256 a = load8(src + i);
        __m256 b = load8(src + i + 8);
        if constexpr (kScaled) {
          a = _mm256_mul_ps(a, s);
          b = _mm256_mul_ps(b, s);
        }
        store8(dst + i, a);
        store8(dst + i + 8, b);
      }
    } else {
      const __m256d s = _mm256_set1_pd(scale);
      for (; i + 8 <= n; i += 8) {
        __m256d a = load4(src + i);
        __m256d b = load4(src + i + 4);
        if constexpr (kScaled) {
          a = _mm256_mul_pd(a, s);
          b = _mm256_mul_pd(b, s);
        }
        store4(dst + i, a);
        store4(dst + i + 4, b);
      }
    }
#endif
    convert_scalar<S, D, kScaled>(src + i, dst + i, n - i, scale);
  }
}

using SliceFn = void (*)(const void*, void*, size_t, double);

template <class S, class D>
SliceFn pick(bool scaled) {
  return scaled ? &convert_slice<S, D, true> : &convert_slice<S, D, false>;
}

// The single place where the two dtypes become template arguments.
template <class S>
SliceFn select_dst(DType dst, bool scaled) {
  switch (dst) {
    case DType::kFloat32: return pick<S, float>(scaled);
    case DType::kFloat64: return pick<S, double>(scaled);
    case DType::kFloat16: return pick<S, Half>(scaled);
    case DType::kBFloat16: return pick<S, BFloat16>(scaled);
    default: return nullptr;
  }
}

SliceFn select(DType src, DType dst, bool scaled) {
  switch (src) {
    case DType::kFloat32: return select_dst<float>(dst, scaled);
    case DType::kFloat64: return select_dst<double>(dst, scaled);
    case DType::kFloat16: return select_dst<Half>(dst, scaled);
    case DType::kBFloat16: return select_dst<BFloat16>(dst, scaled);
    default: return nullptr;
  }
}

}  // namespace

bool bucket_dtype_supported(DType t) { return is_floating(t); }

void copy_slices(DType src_dtype, DType dst_dtype, const BucketSlice* slices, size_t count,
                 double scale) {
  // Scale 1 is an exact copy or cast: no multiply at all.
  const SliceFn fn = select(src_dtype, dst_dtype, scale != 1.0);
  if (fn == nullptr) {
    throw InvalidArgument(std::string("bucket: unsupported dtype pair ") + dtype_name(src_dtype) +
                          " -> " + dtype_name(dst_dtype) +
                          "; supported: float32, float64, float16, bfloat16");
  }
  for (size_t k = 0; k < count; ++k) {
    if (slices[k].numel != 0) fn(slices[k].src, slices[k].dst, slices[k].numel, scale);
  }
}

}  // namespace pycomm::core
