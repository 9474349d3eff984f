#include "bucket_pack.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "../errors.h"
#include "float_lanes.h"
#include "half_convert.h"

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

// double -> bfloat16 goes through float, as c10::BFloat16(double) does; double
// -> float16 rounds as c10::Half(double) does on this architecture
// (half_convert.h's to_half(double)). Both are part of matching torch.
template <class D, class C>
inline D narrow_one(C v) {
  if constexpr (std::is_same_v<D, Half>) {
    return to_half(v);
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
    // The build's vector lanes (float_lanes.h), two vectors an iteration to
    // keep two independent chains in flight; the scalar loop computes the very
    // same values for the tail, or for all of it on a build without lanes.
#if PYCOMM_HAVE_LANES
    if constexpr (std::is_same_v<C, float>) {
      constexpr size_t w = lanes::kLanes32;
      const auto s = lanes::splat32(scale);
      for (; i + 2 * w <= n; i += 2 * w) {
        auto a = lanes::load32(src + i);
        auto b = lanes::load32(src + i + w);
        if constexpr (kScaled) {
          a = lanes::mul(a, s);
          b = lanes::mul(b, s);
        }
        lanes::store32(dst + i, a);
        lanes::store32(dst + i + w, b);
      }
    } else {
      constexpr size_t w = lanes::kLanes64;
      const auto s = lanes::splat64(scale);
      for (; i + 2 * w <= n; i += 2 * w) {
        auto a = lanes::load64(src + i);
        auto b = lanes::load64(src + i + w);
        if constexpr (kScaled) {
          a = lanes::mul(a, s);
          b = lanes::mul(b, s);
        }
        lanes::store64(dst + i, a);
        lanes::store64(dst + i + w, b);
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
