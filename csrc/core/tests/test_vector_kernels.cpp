// The vector paths of the kernels (float_lanes.h: AVX2+F16C on x86, NEON on
// Arm) against a scalar reference written here, bit for bit: conversions for
// every float16 value and for the rounding ties of every float16 and bfloat16
// value, packing for every dtype pair, and the reductions for every dtype and
// op. CI runs this for x86 natively and for aarch64 under qemu
// (scripts/cross_aarch64.sh).
//
// The reference combines element by element in the kernels' order (sources
// left to right, the earlier operand on the left), widens and narrows with
// half_convert.h's *_reference functions and to_bfloat16, and wraps integers.
// Results must match bit for bit, NaN payloads included, with one exception:
// the NaN an addition or a product returns is the hardware's choice of
// operand (and the compiler may swap a commutative pair), so there a NaN only
// has to meet a NaN. Pointers are offset by 0-3 elements and lengths are not
// multiples of any vector width, so the scalar tails run too.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "../kernels/bucket_pack.h"
#include "../kernels/float_lanes.h"
#include "../kernels/half_convert.h"
#include "../kernels/reduce_kernels.h"
#include "../errors.h"
#include "check.h"

using namespace pycomm::core;

namespace {

template <class T> struct AccOf { using type = T; };
template <> struct AccOf<Half> { using type = float; };
template <> struct AccOf<BFloat16> { using type = float; };
template <class T> using Acc = typename AccOf<T>::type;

template <class T> constexpr DType kDType = DType::kFloat32;
template <> constexpr DType kDType<double> = DType::kFloat64;
template <> constexpr DType kDType<Half> = DType::kFloat16;
template <> constexpr DType kDType<BFloat16> = DType::kBFloat16;
template <> constexpr DType kDType<int8_t> = DType::kInt8;
template <> constexpr DType kDType<uint8_t> = DType::kUInt8;
template <> constexpr DType kDType<int32_t> = DType::kInt32;
template <> constexpr DType kDType<int64_t> = DType::kInt64;
template <> constexpr DType kDType<int16_t> = DType::kInt16;
template <> constexpr DType kDType<uint16_t> = DType::kUInt16;
template <> constexpr DType kDType<uint32_t> = DType::kUInt32;
template <> constexpr DType kDType<uint64_t> = DType::kUInt64;

template <class T> constexpr bool kFloating = std::is_floating_point_v<Acc<T>>;

float bf16_to_float_reference(uint16_t bits) { return bits_to_float(uint32_t(bits) << 16); }

// Widens to the accumulation type (exact), or to float64 for packing.
template <class A, class T>
A ref_widen(T x) {
  if constexpr (std::is_same_v<T, Half>) {
    return A(half_to_float_reference(x.bits));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return A(bf16_to_float_reference(x.bits));
  } else {
    return A(x);
  }
}

// Narrows; a float64 bound for bfloat16 rounds to float32 first, one bound for
// float16 as torch does on this architecture (double_to_half_reference).
template <class T, class A>
T ref_narrow(A v) {
  if constexpr (std::is_same_v<T, Half> && std::is_same_v<A, double>) {
    return Half{double_to_half_reference(v)};
  } else if constexpr (std::is_same_v<T, Half>) {
    return Half{float_to_half_reference(v)};
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return to_bfloat16(float(v));
  } else {
    return T(v);
  }
}

template <class A>
A ref_apply(ReduceOp op, A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    using P = std::conditional_t<(sizeof(A) < sizeof(unsigned)), unsigned, U>;
    if (op == ReduceOp::kSum) return A(U(U(a) + U(b)));
    if (op == ReduceOp::kProduct) return A(U(P(U(a)) * P(U(b))));
    if (op == ReduceOp::kBand) return A(U(a) & U(b));
    if (op == ReduceOp::kBor) return A(U(a) | U(b));
    if (op == ReduceOp::kBxor) return A(U(a) ^ U(b));
  } else {
    if (op == ReduceOp::kSum || op == ReduceOp::kAvg) return a + b;
    if (op == ReduceOp::kProduct) return a * b;
  }
  if (op == ReduceOp::kMax) return b > a ? b : a;  // a NaN on the left stays
  return b < a ? b : a;
}

bool is_arithmetic(ReduceOp op) { return op == ReduceOp::kSum || op == ReduceOp::kAvg || op == ReduceOp::kProduct; }

template <class T>
bool is_nan(T x) {
  if constexpr (std::is_same_v<T, Half>) return (x.bits & 0x7fff) > 0x7c00;
  else if constexpr (std::is_same_v<T, BFloat16>) return (x.bits & 0x7fff) > 0x7f80;
  else if constexpr (std::is_floating_point_v<T>) return std::isnan(x);
  else return false;
}

// Compares n elements; prints the first few differences.
template <class T>
bool same(const T* got, const T* want, size_t n, bool nan_meets_nan, const char* what) {
  int shown = 0;
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) == 0) continue;
    if (nan_meets_nan && is_nan(got[i]) && is_nan(want[i])) continue;
    if (shown++ < 4) {
      uint64_t g = 0, w = 0;
      std::memcpy(&g, &got[i], sizeof(T));
      std::memcpy(&w, &want[i], sizeof(T));
      std::fprintf(stderr, "  %s (%s): element %zu is 0x%llx, want 0x%llx\n", what,
                   dtype_name(kDType<T>), i, (unsigned long long)g, (unsigned long long)w);
    }
  }
  return shown == 0;
}

std::mt19937_64& rng() {
  static std::mt19937_64 r(20261202);
  return r;
}

// Inputs that reach every branch: specials (signed zeros, infinities, quiet and
// signalling NaNs with payloads, subnormals, the largest finite values), raw
// random bit patterns, and ordinary values whose sums and narrowings round.
template <class T>
T random_value() {
  auto& r = rng();
  const int kind = int(r() % 8);
  if constexpr (std::is_integral_v<T>) {
    return T(r());
  } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    static const uint16_t half_specials[] = {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x7d01, 0xfe3f,
                                             0x0001, 0x83ff, 0x7bff, 0xfbff, 0x0400, 0x3c00};
    static const uint16_t bf16_specials[] = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffa5,
                                             0x0001, 0x807f, 0x7f7f, 0xff7f, 0x0080, 0x3f80};
    if (kind == 0) {
      const uint16_t* s = std::is_same_v<T, Half> ? half_specials : bf16_specials;
      return T{s[r() % 13]};
    }
    if (kind == 1) return T{uint16_t(r())};
    const float v = float(int(r() % 20001) - 10000) / float(1 + r() % 64);
    return std::is_same_v<T, Half> ? T{float_to_half_reference(v)} : T{to_bfloat16(v).bits};
  } else {
    using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
    static const uint64_t specials64[] = {0x0ull, 0x8000000000000000ull, 0x7ff0000000000000ull,
                                          0xfff8000000000000ull, 0x7ff4000000000001ull,
                                          0x0000000000000001ull, 0x7fefffffffffffffull};
    static const uint32_t specials32[] = {0x0u, 0x80000000u, 0x7f800000u, 0xffc00000u,
                                          0x7fa00001u, 0x00000001u, 0x7f7fffffu};
    T v;
    if (kind == 0) {
      Bits b = sizeof(T) == 4 ? Bits(specials32[r() % 7]) : Bits(specials64[r() % 7]);
      std::memcpy(&v, &b, sizeof(T));
    } else if (kind == 1) {
      Bits b = Bits(r());
      std::memcpy(&v, &b, sizeof(T));
    } else {
      v = T(std::ldexp(double(int64_t(r() % 2000001) - 1000000), int(r() % 40) - 30));
    }
    return v;
  }
}

template <class T>
std::vector<T> random_values(size_t n) {
  std::vector<T> v(n);
  for (T& x : v) x = random_value<T>();
  return v;
}

constexpr size_t kCount = 1031;  // no multiple of any lane count

template <class T>
void check_reductions() {
  using A = Acc<T>;
  const ReduceOp ops[] = {ReduceOp::kSum,     ReduceOp::kAvg,  ReduceOp::kMax, ReduceOp::kMin,
                          ReduceOp::kProduct, ReduceOp::kBand, ReduceOp::kBor, ReduceOp::kBxor};
  for (ReduceOp op : ops) {
    if (op == ReduceOp::kAvg && !kFloating<T>) continue;
    if (is_bitwise(op) && kFloating<T>) continue;
    const bool nan_meets_nan = is_arithmetic(op);
    for (int nsrc : {2, 3, 5}) {
      for (size_t offset = 0; offset < 4; ++offset) {
        const size_t n = kCount - offset;
        std::vector<std::vector<T>> inputs;
        std::vector<const void*> srcs;
        for (int s = 0; s < nsrc; ++s) inputs.push_back(random_values<T>(kCount));
        for (auto& in : inputs) srcs.push_back(in.data() + offset);
        std::vector<T> want(n), got(n);
        for (size_t i = 0; i < n; ++i) {
          A acc = ref_widen<A>(inputs[0][offset + i]);
          for (int s = 1; s < nsrc; ++s) acc = ref_apply(op, acc, ref_widen<A>(inputs[s][offset + i]));
          if constexpr (kFloating<T>) {
            if (op == ReduceOp::kAvg) acc = acc / A(nsrc);
          }
          want[i] = ref_narrow<T>(acc);
        }
        reduce_sources(kDType<T>, op, got.data(), srcs.data(), nsrc, n, nsrc);
        CHECK(same(got.data(), want.data(), n, nan_meets_nan, "reduce_sources"));
      }
    }
    // The ring's steps: a partial in the accumulation type meets a local input.
    for (size_t offset = 0; offset < 4; ++offset) {
      const size_t n = kCount - offset;
      std::vector<T> local = random_values<T>(kCount);
      std::vector<A> partial(n);
      for (A& p : partial) p = ref_widen<A>(random_value<T>());
      std::vector<A> want_mid(n), got_mid(n);
      std::vector<T> want_last(n);
      for (size_t i = 0; i < n; ++i) {
        want_mid[i] = ref_apply(op, partial[i], ref_widen<A>(local[offset + i]));
        A last = want_mid[i];
        if constexpr (kFloating<T>) {
          if (op == ReduceOp::kAvg) last = last / A(3);
        }
        want_last[i] = ref_narrow<T>(last);
      }
      ring_middle(kDType<T>, op, partial.data(), local.data() + offset, got_mid.data(), n);
      CHECK(same(got_mid.data(), want_mid.data(), n, nan_meets_nan, "ring_middle"));
      std::vector<A> first(n), want_first(n);
      for (size_t i = 0; i < n; ++i) want_first[i] = ref_widen<A>(local[offset + i]);
      ring_first(kDType<T>, local.data() + offset, first.data(), n);
      CHECK(same(first.data(), want_first.data(), n, false, "ring_first"));
      // In place, as the ring's last step runs: out is the local buffer.
      std::vector<T> copy(n);
      ring_last(kDType<T>, op, partial.data(), local.data() + offset, local.data() + offset,
                copy.data(), n, 3);
      CHECK(same(local.data() + offset, want_last.data(), n, nan_meets_nan, "ring_last"));
      CHECK(same(copy.data(), local.data() + offset, n, false, "ring_last's second output"));
    }
  }
}

// Narrows floats through every path the kernels have: the scalar conversion,
// packing (copy_slices) and the ring's last step. ring_last with max against
// -infinity returns the partial unchanged (max keeps its left operand, NaN
// included), so its output is the narrowing alone.
template <class T>
void check_narrowing(const std::vector<float>& values) {
  const size_t n = values.size();
  std::vector<T> want(n), scalar(n), packed(n), ring(n);
  for (size_t i = 0; i < n; ++i) {
    want[i] = ref_narrow<T>(values[i]);
    if constexpr (std::is_same_v<T, Half>) scalar[i] = to_half(values[i]);
    else scalar[i] = to_bfloat16(values[i]);
  }
  CHECK(same(scalar.data(), want.data(), n, false, "scalar narrowing"));
  BucketSlice slice{values.data(), packed.data(), n};
  copy_slices(DType::kFloat32, kDType<T>, &slice, 1, 1.0);
  CHECK(same(packed.data(), want.data(), n, false, "copy_slices narrowing"));
  const T minus_inf = ref_narrow<T>(-std::numeric_limits<float>::infinity());
  std::vector<T> local(n, minus_inf);
  ring_last(kDType<T>, ReduceOp::kMax, values.data(), local.data(), ring.data(), nullptr, n, 1);
  CHECK(same(ring.data(), want.data(), n, false, "ring_last narrowing"));
}

// Every value of a 16-bit type T as float, and around each: the midpoint to
// the next value up (a rounding tie) and the floats just below and above it.
template <class T>
std::vector<float> ties_of_every_value(float (*to_f)(uint16_t)) {
  std::vector<float> v;
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const uint16_t next = uint16_t(b + 1);
    if (b == 0x7fff || b == 0xffff) continue;
    const float lo = to_f(uint16_t(b)), hi = to_f(next);
    if (std::isnan(lo) || std::isnan(hi) || std::isinf(lo)) continue;
    v.push_back(lo);
    // For the largest finite value, the step up to infinity is the step below.
    const double step = std::isinf(hi) ? double(lo) - double(to_f(uint16_t(b - 1))) : double(hi) - double(lo);
    const float mid = float(double(lo) + step / 2);  // exact: the types hold 11 or 8 bits
    v.push_back(mid);
    v.push_back(std::nextafter(mid, -std::numeric_limits<float>::infinity()));
    v.push_back(std::nextafter(mid, std::numeric_limits<float>::infinity()));
  }
  return v;
}

// A sample of all 2^32 float bit patterns (NaNs with payloads, subnormals).
std::vector<float> float_pattern_sample() {
  std::vector<float> v;
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 4093) v.push_back(bits_to_float(uint32_t(u)));
  for (uint32_t u : {0x7f800001u, 0xff800001u, 0x7fbfffffu, 0x7fc00001u, 0x7fffe000u, 0x00000001u,
                     0x807fffffu, 0x477fefffu, 0x477ff000u, 0x387fc000u, 0x33000000u, 0x33000001u})
    v.push_back(bits_to_float(u));
  return v;
}

}  // namespace

TEST(vector_path_is_reported) {
  std::printf("  vector path: %s\n", lanes::kVectorPath);
#if defined(__aarch64__)
  CHECK(std::strcmp(lanes::kVectorPath, "neon") == 0);
#endif
}

TEST(every_float16_widens_as_the_reference) {
  std::vector<Half> all(0x10000);
  for (uint32_t b = 0; b < 0x10000; ++b) all[b] = Half{uint16_t(b)};
  std::vector<float> want(all.size()), scalar(all.size()), packed(all.size()), ring(all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    want[i] = half_to_float_reference(all[i].bits);
    scalar[i] = to_float(all[i]);
  }
  CHECK(same(scalar.data(), want.data(), all.size(), false, "scalar widening"));
  BucketSlice slice{all.data(), packed.data(), all.size()};
  copy_slices(DType::kFloat16, DType::kFloat32, &slice, 1, 1.0);
  CHECK(same(packed.data(), want.data(), all.size(), false, "copy_slices widening"));
  ring_first(DType::kFloat16, all.data(), ring.data(), all.size());
  CHECK(same(ring.data(), want.data(), all.size(), false, "ring_first widening"));
  // And back: every float16 that is not a NaN survives the round trip.
  std::vector<Half> back(all.size());
  BucketSlice slice_back{want.data(), back.data(), all.size()};
  copy_slices(DType::kFloat32, DType::kFloat16, &slice_back, 1, 1.0);
  size_t changed = 0;
  for (size_t i = 0; i < all.size(); ++i) changed += !is_nan(all[i]) && back[i].bits != all[i].bits;
  CHECK_EQ(changed, size_t(0));
}

TEST(float16_narrowing_rounds_every_tie_as_the_reference) {
  check_narrowing<Half>(ties_of_every_value<Half>(&half_to_float_reference));
  check_narrowing<Half>(float_pattern_sample());
}

TEST(bfloat16_narrowing_rounds_every_tie_as_the_reference) {
  check_narrowing<BFloat16>(ties_of_every_value<BFloat16>(&bf16_to_float_reference));
  check_narrowing<BFloat16>(float_pattern_sample());
}

template <class S, class D>
void check_pack_pair() {
  using C = std::conditional_t<std::is_same_v<S, double> || std::is_same_v<D, double>, double, float>;
  for (double scale : {1.0, 0.25, 1.0 / 3.0}) {
    for (size_t offset = 0; offset < 4; ++offset) {
      const size_t n = kCount - offset;
      std::vector<S> src = random_values<S>(kCount);
      std::vector<D> want(n), got(n);
      for (size_t i = 0; i < n; ++i) {
        if constexpr (std::is_same_v<S, D>) {
          if (scale == 1.0) {  // a copy, as torch's .to() of the same dtype: NaNs untouched
            want[i] = src[offset + i];
            continue;
          }
        }
        C v = ref_widen<C>(src[offset + i]);
        if (scale != 1.0) v = v * C(scale);
        want[i] = ref_narrow<D>(v);
      }
      BucketSlice slice{src.data() + offset, got.data(), n};
      copy_slices(kDType<S>, kDType<D>, &slice, 1, scale);
      // A scaled NaN is a product's NaN; an unscaled one is only converted.
      CHECK(same(got.data(), want.data(), n, scale != 1.0, "copy_slices"));
    }
  }
}

template <class S>
void check_pack_from() {
  check_pack_pair<S, float>();
  check_pack_pair<S, double>();
  check_pack_pair<S, Half>();
  check_pack_pair<S, BFloat16>();
}

TEST(packing_matches_the_reference_for_every_dtype_pair_and_scale) {
  check_pack_from<float>();
  check_pack_from<double>();
  check_pack_from<Half>();
  check_pack_from<BFloat16>();
}

// float64 -> float16 where one rounding and two differ: a float64 just above
// (below) a float16 tie rounds to the tie in float32, and from there to even;
// rounded once, it goes up (down). x86 rounds twice, aarch64 once, as torch
// does on each. Every path: the scalar to_half(double), packing's vector loop
// and its tail.
TEST(float64_to_float16_rounds_as_torch_does_on_this_architecture) {
  std::vector<double> src;
  for (uint32_t b = 0x3c00; b < 0x3c40; ++b) {
    const double lo = half_to_float_reference(uint16_t(b));
    const double hi = half_to_float_reference(uint16_t(b + 1));
    src.push_back((lo + hi) / 2 + std::ldexp(1.0, -40));
    src.push_back(-((lo + hi) / 2 - std::ldexp(1.0, -40)));
  }
  src.push_back(70000.0);   // above float16's largest: infinity
  src.push_back(1e-300);    // below float32's smallest: zero
  std::vector<Half> got(src.size()), want(src.size()), scalar(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    want[i] = Half{double_to_half_reference(src[i])};
    scalar[i] = to_half(src[i]);
  }
  BucketSlice slice{src.data(), got.data(), src.size()};
  copy_slices(DType::kFloat64, DType::kFloat16, &slice, 1, 1.0);
  CHECK(same(got.data(), want.data(), src.size(), false, "float64 -> float16, packed"));
  CHECK(same(scalar.data(), want.data(), src.size(), false, "float64 -> float16, scalar"));
  // The reference itself: the ties' neighbours land on even (twice) or away
  // from the tie (once), in both directions.
  size_t even = 0;
  for (size_t i = 0; i + 2 < src.size(); ++i) even += (want[i].bits & 1) == 0;
  CHECK_EQ(even, kHalfFromDoubleRoundsOnce ? size_t(64) : src.size() - 2);
  CHECK_EQ(want[src.size() - 2].bits, uint16_t(0x7c00));
  CHECK_EQ(want[src.size() - 1].bits, uint16_t(0x0000));
}

TEST(reductions_match_the_reference_for_every_dtype_and_op) {
  check_reductions<float>();
  check_reductions<double>();
  check_reductions<Half>();
  check_reductions<BFloat16>();
  check_reductions<int8_t>();
  check_reductions<uint8_t>();
  check_reductions<int32_t>();
  check_reductions<int64_t>();
  check_reductions<int16_t>();
  check_reductions<uint16_t>();
  check_reductions<uint32_t>();
  check_reductions<uint64_t>();
}

// bool reduces as its byte with sum as or (max) and product as and (min), so a
// result is 0 or 1 whatever the number of ranks: bit for bit what uint8 gives
// with those ops.
TEST(bool_reduces_to_bools) {
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProduct,
                          ReduceOp::kBand, ReduceOp::kBor, ReduceOp::kBxor};
  for (ReduceOp op : ops) {
    std::vector<std::vector<uint8_t>> inputs;
    std::vector<const void*> srcs;
    for (int s = 0; s < 5; ++s) {
      std::vector<uint8_t> v(kCount);
      for (size_t i = 0; i < kCount; ++i) v[i] = uint8_t(rng()() % 2);
      inputs.push_back(std::move(v));
    }
    for (auto& in : inputs) srcs.push_back(in.data());
    std::vector<uint8_t> as_bool(kCount), as_uint8(kCount);
    reduce_sources(DType::kBool, op, as_bool.data(), srcs.data(), 5, kCount, 5);
    reduce_sources(DType::kUInt8, kernel_op(DType::kBool, op), as_uint8.data(), srcs.data(), 5,
                   kCount, 5);
    CHECK(same(as_bool.data(), as_uint8.data(), kCount, false, "bool as uint8"));
    for (uint8_t b : as_bool) CHECK(b <= 1);
    // All five True: or, and, and the parity of five.
    std::vector<uint8_t> ones(kCount, 1), out(kCount);
    const void* all[] = {ones.data(), ones.data(), ones.data(), ones.data(), ones.data()};
    reduce_sources(DType::kBool, op, out.data(), all, 5, kCount, 5);
    CHECK_EQ(out[kCount - 1], uint8_t(1));
  }
  CHECK(kernel_op(DType::kBool, ReduceOp::kSum) == ReduceOp::kMax);
  CHECK(kernel_op(DType::kBool, ReduceOp::kProduct) == ReduceOp::kMin);
  CHECK(kernel_op(DType::kUInt8, ReduceOp::kSum) == ReduceOp::kSum);
}

// No arithmetic on opaque types, on floats no bitwise ops, on integers no avg:
// an InvalidArgument naming the op or the dtype, never a silent result.
TEST(reductions_refuse_what_a_dtype_cannot_take) {
  float f[4] = {1, 2, 3, 4}, out[4];
  const void* fs[] = {f, f};
  bool threw = false;
  try {
    reduce_sources(DType::kFloat32, ReduceOp::kBand, out, fs, 2, 4, 2);
  } catch (const InvalidArgument& e) {
    threw = std::strstr(e.what(), "band") != nullptr;
  }
  CHECK(threw);
  threw = false;
  try {
    reduce_sources(opaque_dtype(23, 1), ReduceOp::kSum, out, fs, 2, 4, 2);
  } catch (const InvalidArgument& e) {
    threw = std::strstr(e.what(), "opaque#23/1B") != nullptr;
  }
  CHECK(threw);
  CHECK_EQ(dtype_size(opaque_dtype(23, 16)), size_t(16));
  CHECK(!is_reducible(opaque_dtype(5, 2)) && is_reducible(DType::kBool));
}

TEST_MAIN
