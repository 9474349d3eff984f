#include "reduce_kernels.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "../errors.h"
#include "float_lanes.h"
#include "half_convert.h"
#include "wrapping_arithmetic.h"

#if defined(__AVX__)
#include <immintrin.h>  // copy_streaming's non-temporal stores
#endif

namespace pycomm::core {
namespace {

// Work in blocks small enough that the widened copies stay in L1.
constexpr size_t kBlock = 1024;

template <class T> struct AccOf { using type = T; };
template <> struct AccOf<Half> { using type = float; };
template <> struct AccOf<BFloat16> { using type = float; };

template <class T> constexpr bool kWidened = !std::is_same_v<T, typename AccOf<T>::type>;

// float16/bfloat16 <-> float32 through the build's vector lanes, then the
// scalar conversions for the tail: the same values either way.
template <class T, class A>
inline void widen(const T* __restrict in, A* __restrict out, size_t n) {
  if constexpr (kWidened<T>) {
    for (size_t i = lanes::convert32(in, out, n); i < n; ++i) out[i] = to_float(in[i]);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = in[i];
  }
}

template <class T, class A>
inline void narrow(const A* __restrict in, T* __restrict out, size_t n) {
  if constexpr (std::is_same_v<T, Half>) {
    for (size_t i = lanes::convert32(in, out, n); i < n; ++i) out[i] = to_half(in[i]);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    for (size_t i = lanes::convert32(in, out, n); i < n; ++i) out[i] = to_bfloat16(in[i]);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = in[i];
  }
}

struct SumOp { template <class A> static A apply(A a, A b) { return wrap_add(a, b); } };
struct ProdOp { template <class A> static A apply(A a, A b) { return wrap_mul(a, b); } };
struct MaxOp { template <class A> static A apply(A a, A b) { return b > a ? b : a; } };
struct MinOp { template <class A> static A apply(A a, A b) { return b < a ? b : a; } };
// Integers and bool only (dispatch below).
struct BandOp { template <class A> static A apply(A a, A b) { return A(a & b); } };
struct BorOp { template <class A> static A apply(A a, A b) { return A(a | b); } };
struct BxorOp { template <class A> static A apply(A a, A b) { return A(a ^ b); } };

template <class Op, class A>
inline void combine(A* __restrict acc, const A* __restrict x, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] = Op::apply(acc[i], x[i]);
}
// acc[i] = x[i] (op) acc[i]: the earlier-ranked operand stays on the left.
template <class Op, class A>
inline void combine_into(const A* __restrict x, A* __restrict acc, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] = Op::apply(x[i], acc[i]);
}
template <class Op, class A>
inline void combine3(A* __restrict out, const A* __restrict a, const A* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Op::apply(a[i], b[i]);
}

// Avg divides once, at the end, with a true division so that the result equals
// torch's `sum / world_size` bit for bit.
template <class A>
inline void finish_avg(A* __restrict acc, size_t n, int divisor) {
  if constexpr (std::is_floating_point_v<A>) {
    const A d = A(divisor);
    for (size_t i = 0; i < n; ++i) acc[i] = acc[i] / d;
  }
}

template <class T, class Op, bool kAvg>
struct Kernels {
  using A = typename AccOf<T>::type;

  static void reduce_sources(void* out_v, const void* const* srcs_v, int nsrc, size_t n,
                             int divisor) {
    T* out = static_cast<T*>(out_v);
    const T* const* srcs = reinterpret_cast<const T* const*>(srcs_v);
    if (nsrc == 1) {
      if (out != srcs[0]) std::memmove(out, srcs[0], n * sizeof(T));
      if constexpr (kAvg && !kWidened<T>) finish_avg(out, n, divisor);
      return;
    }
    bool aliased = false;
    for (int s = 0; s < nsrc; ++s) aliased = aliased || srcs[s] == out;
    for (size_t base = 0; base < n; base += kBlock) {
      const size_t m = n - base < kBlock ? n - base : kBlock;
      if constexpr (kWidened<T>) {
        alignas(64) A acc[kBlock];
        alignas(64) A x[kBlock];
        widen(srcs[0] + base, acc, m);
        for (int s = 1; s < nsrc; ++s) {
          widen(srcs[s] + base, x, m);
          combine<Op>(acc, x, m);
        }
        if constexpr (kAvg) finish_avg(acc, m, divisor);
        narrow(acc, out + base, m);
      } else if (aliased) {
        // `out` is one of the sources: every source's block is read into the
        // accumulator before the block is written back.
        alignas(64) T acc[kBlock];
        combine3<Op>(acc, srcs[0] + base, srcs[1] + base, m);
        for (int s = 2; s < nsrc; ++s) combine<Op>(acc, srcs[s] + base, m);
        if constexpr (kAvg) finish_avg(acc, m, divisor);
        std::memcpy(out + base, acc, m * sizeof(T));
      } else {
        T* o = out + base;
        combine3<Op>(o, srcs[0] + base, srcs[1] + base, m);
        for (int s = 2; s < nsrc; ++s) combine<Op>(o, srcs[s] + base, m);
        if constexpr (kAvg) finish_avg(o, m, divisor);
      }
    }
  }

  static void ring_middle(const void* partial_v, const void* local_v, void* out_v, size_t n) {
    const A* partial = static_cast<const A*>(partial_v);
    const T* local = static_cast<const T*>(local_v);
    A* out = static_cast<A*>(out_v);
    if constexpr (kWidened<T>) {
      for (size_t base = 0; base < n; base += kBlock) {
        const size_t m = n - base < kBlock ? n - base : kBlock;
        alignas(64) A x[kBlock];
        widen(local + base, x, m);
        combine3<Op>(out + base, partial + base, x, m);
      }
    } else {
      combine3<Op>(out, partial, local, n);
    }
  }

  static void ring_last(const void* partial_v, const void* local_v, void* out_v, void* out2_v,
                        size_t n, int divisor) {
    const A* partial = static_cast<const A*>(partial_v);
    const T* local = static_cast<const T*>(local_v);
    T* out = static_cast<T*>(out_v);
    T* out2 = static_cast<T*>(out2_v);
    for (size_t base = 0; base < n; base += kBlock) {
      const size_t m = n - base < kBlock ? n - base : kBlock;
      if constexpr (kWidened<T>) {
        alignas(64) A acc[kBlock];
        widen(local + base, acc, m);
        combine_into<Op>(partial + base, acc, m);
        if constexpr (kAvg) finish_avg(acc, m, divisor);
        narrow(acc, out + base, m);
      } else {
        // `out` may be the very buffer `local` points into (in place): each
        // element is read before it is written.
        T* o = out + base;
        const T* l = local + base;
        const A* p = partial + base;
        for (size_t i = 0; i < m; ++i) o[i] = Op::apply(p[i], l[i]);
        if constexpr (kAvg) finish_avg(o, m, divisor);
      }
      if (out2) std::memcpy(out2 + base, out + base, m * sizeof(T));
    }
  }
};

template <class T>
void ring_first_typed(const void* local, void* acc_out, size_t n) {
  using A = typename AccOf<T>::type;
  if constexpr (kWidened<T>) {
    widen(static_cast<const T*>(local), static_cast<A*>(acc_out), n);
  } else {
    std::memcpy(acc_out, local, n * sizeof(T));
  }
}

// The single place where (dtype, op) become template arguments. bool reduces
// as its byte, uint8, with kernel_op's or and and for sum and product
// (dtypes.h).
template <class F>
void dispatch(DType dtype, ReduceOp requested, F&& f) {
  const ReduceOp op = kernel_op(dtype, requested);
  auto with_op = [&](auto type_tag) {
    using T = decltype(type_tag);
    switch (op) {
      case ReduceOp::kSum: return f(Kernels<T, SumOp, false>{});
      case ReduceOp::kAvg:
        if constexpr (std::is_integral_v<T>) {
          throw InvalidArgument("op: 'avg' is not defined for integer tensors; use 'sum'");
        } else {
          return f(Kernels<T, SumOp, true>{});
        }
      case ReduceOp::kMax: return f(Kernels<T, MaxOp, false>{});
      case ReduceOp::kMin: return f(Kernels<T, MinOp, false>{});
      case ReduceOp::kProduct: return f(Kernels<T, ProdOp, false>{});
      case ReduceOp::kBand:
      case ReduceOp::kBor:
      case ReduceOp::kBxor:
        if constexpr (!std::is_integral_v<T>) {
          throw InvalidArgument(std::string("op: '") + op_name(op) +
                                "' is defined for integer and bool tensors only");
        } else if (op == ReduceOp::kBand) {
          return f(Kernels<T, BandOp, false>{});
        } else if (op == ReduceOp::kBor) {
          return f(Kernels<T, BorOp, false>{});
        } else {
          return f(Kernels<T, BxorOp, false>{});
        }
    }
    throw InvalidArgument("op: unknown reduction operator");
  };
  switch (dtype) {
    case DType::kFloat32: return with_op(float{});
    case DType::kFloat64: return with_op(double{});
    case DType::kFloat16: return with_op(Half{});
    case DType::kBFloat16: return with_op(BFloat16{});
    case DType::kInt8: return with_op(int8_t{});
    case DType::kUInt8:
    case DType::kBool: return with_op(uint8_t{});
    case DType::kInt16: return with_op(int16_t{});
    case DType::kUInt16: return with_op(uint16_t{});
    case DType::kInt32: return with_op(int32_t{});
    case DType::kUInt32: return with_op(uint32_t{});
    case DType::kInt64: return with_op(int64_t{});
    case DType::kUInt64: return with_op(uint64_t{});
  }
  throw InvalidArgument("tensor: dtype " + dtype_label(dtype) + " has no reduction in pycomm");
}

}  // namespace

void reduce_sources(DType dtype, ReduceOp op, void* out, const void* const* srcs, int nsrc,
                    size_t n, int divisor) {
  if (n == 0) return;
  dispatch(dtype, op, [&](auto k) { k.reduce_sources(out, srcs, nsrc, n, divisor); });
}

void ring_first(DType dtype, const void* local, void* acc_out, size_t n) {
  if (n == 0) return;
  if (dtype == DType::kFloat16) return ring_first_typed<Half>(local, acc_out, n);
  if (dtype == DType::kBFloat16) return ring_first_typed<BFloat16>(local, acc_out, n);
  std::memcpy(acc_out, local, n * dtype_size(dtype));
}

void ring_middle(DType dtype, ReduceOp op, const void* partial, const void* local, void* acc_out,
                 size_t n) {
  if (n == 0) return;
  dispatch(dtype, op, [&](auto k) { k.ring_middle(partial, local, acc_out, n); });
}

void ring_last(DType dtype, ReduceOp op, const void* partial, const void* local, void* out,
               void* out2, size_t n, int divisor) {
  if (n == 0) return;
  dispatch(dtype, op, [&](auto k) { k.ring_last(partial, local, out, out2, n, divisor); });
}

const char* cpu_vector_path() { return lanes::kVectorPath; }

void copy_streaming(void* dst, const void* src, size_t n) {
#if defined(__AVX__)
  if (n >= 4096) {
    // The destination aligned (streaming stores need it), the source as it lies.
    const size_t head = (32 - reinterpret_cast<uintptr_t>(dst) % 32) % 32;
    std::memcpy(dst, src, head);
    char* dp = static_cast<char*>(dst) + head;
    const char* sp = static_cast<const char*>(src) + head;
    const size_t body = (n - head) & ~size_t(31);
    for (size_t i = 0; i < body; i += 32) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sp + i));
      _mm256_stream_si256(reinterpret_cast<__m256i*>(dp + i), v);
    }
    _mm_sfence();
    std::memcpy(dp + body, sp + body, n - head - body);
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

}  // namespace pycomm::core
