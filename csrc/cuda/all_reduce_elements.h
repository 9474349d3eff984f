// Element types, reduction operators and the element loops of the CUDA
// all-reduce kernels, for the device and the host alike.
//
// float16 and bfloat16 are stored as core::Half / core::BFloat16 (16-bit
// patterns) and accumulated in float32; the device converts with cuda_fp16 /
// cuda_bf16 intrinsics, the host with core's half_convert.h. Both round to
// nearest even. Integer sums and products wrap, as torch's and the CPU core's
// do (reduce_kernels.cpp); max and min keep the left operand on ties.
//
// Loops: each thread of a block takes every threads-th 16-byte vector of a
// range (coalesced on the GPU), then the scalar tail. A loop takes the vector
// path when all of its pointers are 16-byte aligned at the range's start (the
// caller's `vector`; whole-vector accesses are checked on the host). The
// staging side always is (regions, slots, pieces and chunks start on 16
// bytes, and every split is in 16-byte units), so a caller passes the
// alignment of the tensor its loop touches: a misaligned output leaves the
// loops that read only the input vectorised, and the other way round.
// Peeling a head would not bring a loop between a tensor and the staging into
// step: a rank's tensor meets the staging at a shift of the rank's own, while
// the staging is laid out alike on every rank (its peers read it), so where
// the tensor reaches 16 bytes the staging does not. Only the loop with no
// staging pointer (copy_alone, one rank) peels a head, when its input and
// output share a shift (common_head). Vectors on the staging side with
// elements on the tensor side, within one loop, were tried: the extra loop
// variant cost the tightest kernels more than the 64-register cap left them
// (ptxas spilled in the one-shot and the ring; nvcc 13.0, sm_90). The path
// never changes what is computed: each element is combined in the same order
// either way, on every rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "../core/kernels/half_convert.h"
#include "../core/kernels/wrapping_arithmetic.h"
#include "all_reduce_layout.h"
#include "block_lanes.h"
#include "host_device.h"
#include "peer_memory.h"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace pycomm::cuda {

template <class T>
struct AccumOf { using type = T; };
template <>
struct AccumOf<core::Half> { using type = float; };
template <>
struct AccumOf<core::BFloat16> { using type = float; };
template <class T>
using Accum = typename AccumOf<T>::type;

template <class T>
PYCOMM_HD T widen(T x) { return x; }

PYCOMM_HD float widen(core::Half x) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(x.bits));
#else
  return core::to_float(x);
#endif
}

PYCOMM_HD float widen(core::BFloat16 x) {
#if defined(__CUDA_ARCH__)
  return __bfloat162float(__ushort_as_bfloat16(x.bits));
#else
  return core::to_float(x);
#endif
}

template <class T>
PYCOMM_HD T narrow(Accum<T> a) {
  if constexpr (std::is_same_v<T, core::Half>) {
#if defined(__CUDA_ARCH__)
    return core::Half{__half_as_ushort(__float2half_rn(a))};
#else
    return core::to_half(a);
#endif
  } else if constexpr (std::is_same_v<T, core::BFloat16>) {
#if defined(__CUDA_ARCH__)
    return core::BFloat16{__bfloat16_as_ushort(__float2bfloat16_rn(a))};
#else
    return core::to_bfloat16(a);
#endif
  } else {
    return a;
  }
}

// Integers wrap (core's wrapping_arithmetic.h, as on the CPU).
struct SumOp {
  template <class A>
  PYCOMM_HD static A apply(A a, A b) { return core::wrap_add(a, b); }
};
struct ProductOp {
  template <class A>
  PYCOMM_HD static A apply(A a, A b) { return core::wrap_mul(a, b); }
};
struct MaxOp {
  template <class A>
  PYCOMM_HD static A apply(A a, A b) { return b > a ? b : a; }
};
struct MinOp {
  template <class A>
  PYCOMM_HD static A apply(A a, A b) { return b < a ? b : a; }
};

// An operator and what ends a reduction: avg is a sum divided by the world
// size once, in the accumulation type, then rounded to the element type.
template <class Op, bool kAvg>
struct Reduction {
  using Operator = Op;
  template <class A>
  PYCOMM_HD static A combine(A a, A b) { return Op::apply(a, b); }
  template <class T>
  PYCOMM_HD static T finish(Accum<T> acc, int world) {
    if constexpr (kAvg) acc = acc / Accum<T>(world);
    return narrow<T>(acc);
  }
};

// The type the element loops combine T in, in registers: Accum<T>, except
// that 1-byte integers under a max, min or product combine as int. Narrowed
// back to Accum<T> (T itself) that gives the same bits (max and min never
// leave T's range; products wrap alike mod 256), but the compiler no longer
// keeps four bytes a register, unpacked and repacked around every operation:
// fewer instructions, and no register spills in the two-shot's and the ring's
// loops under the 64-register cap (measured: nvcc 13.0, sm_90). Sums stay
// packed: bytes add four a register without unpacking.
template <class T, class R>
using CombineType = std::conditional_t<std::is_integral_v<T> && sizeof(T) == 1 &&
                                           !std::is_same_v<typename R::Operator, SumOp>,
                                       int, Accum<T>>;

// W elements moved as one access: 16 bytes for the vector body (two accesses
// for 8 float partials of half types), one element for the tail.
template <class T, int W>
struct alignas(sizeof(T) * W < kVectorBytes ? sizeof(T) * W : kVectorBytes) Pack {
  T v[W];
};

// On the host (the protocol test), a whole-pack access off a 16-byte boundary
// stops the test: x86 would take it silently, a GPU faults on it.
template <int W, class T>
PYCOMM_HD void check_pack_aligned(const T* p) {
#if !defined(__CUDA_ARCH__)
  if (W > 1 && reinterpret_cast<uintptr_t>(p) % kVectorBytes != 0) std::abort();
#endif
}

template <int W, class T>
PYCOMM_HD Pack<T, W> load_pack(const T* p) {
  check_pack_aligned<W>(p);
  return *reinterpret_cast<const Pack<T, W>*>(p);
}
template <int W, class T>
PYCOMM_HD void store_pack(T* p, const Pack<T, W>& x) {
  check_pack_aligned<W>(p);
  *reinterpret_cast<Pack<T, W>*>(p) = x;
}

template <int W>
struct Width { static constexpr int value = W; };

template <class T>
constexpr int kVectorWidth = int(kVectorBytes / sizeof(T));

PYCOMM_HD bool is_vector_aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % kVectorBytes == 0;
}

// Elements of T from p to the next 16-byte boundary (0 on one); p is aligned
// to sizeof(T) (check_args).
template <class T>
PYCOMM_HD size_t elems_to_boundary(const T* p) {
  return (kVectorBytes - reinterpret_cast<uintptr_t>(p) % kVectorBytes) % kVectorBytes / sizeof(T);
}

// The head to move element by element so that both `dst` and `src` are on
// 16 bytes after it: when they are misaligned alike, the elements to the next
// boundary, at most n; else 0 (no head brings both into step).
template <class T>
PYCOMM_HD size_t common_head(const T* dst, const T* src, size_t n) {
  const bool alike = (reinterpret_cast<uintptr_t>(dst) - reinterpret_cast<uintptr_t>(src)) % kVectorBytes == 0;
  return alike ? min_size(elems_to_boundary(dst), n) : 0;
}

// f(Width<W>, i) for the W elements from i on, over [0, n), split across the
// block: W = V (one 16-byte vector) from element 0 when `vector`, and W = 1
// for the rest. n <= kMaxLoopElems (all_reduce_layout.h), so the indices are
// 32-bit: 64-bit ones cost the loops registers that, at the kernels'
// 64-register cap, were spilled to a stack frame. (A body that starts after a
// scalar head, here, cost the two-shot registers too: copy_alone peels its
// head itself.)
template <int V, class F>
PYCOMM_HD void for_each_pack(const Lanes& l, size_t n, bool vector, F&& f) {
  const uint32_t m = uint32_t(n);
  const uint32_t packs = vector ? m / V : 0;
  for (uint32_t p = l.thread; p < packs; p += l.threads) f(Width<V>{}, size_t(p * V));
  for (uint32_t i = packs * V + l.thread; i < m; i += l.threads) f(Width<1>{}, size_t(i));
}

// dst[i] = src[i] (and dst2[i], unless null).
template <class T>
PYCOMM_HD void copy_elements(const Lanes& l, T* dst, T* dst2, const T* src, size_t n, bool vector) {
  for_each_pack<kVectorWidth<T>>(l, n, vector, [&](auto w, size_t i) {
    constexpr int W = decltype(w)::value;
    const Pack<T, W> x = load_pack<W>(src + i);
    store_pack<W>(dst + i, x);
    if (dst2 != nullptr) store_pack<W>(dst2 + i, x);
  });
}

// out[i] = finish(srcs[0][i] op srcs[1][i] op ... op srcs[nsrc-1][i]), left to
// right (and out2[i], unless null). The sources are ranks' staging regions,
// addressed through PeerRegions so that no pointer array is indexed here.
template <class T, class R>
PYCOMM_HD void reduce_sources(const Lanes& l, T* out, T* out2, PeerRegions<T> srcs, int nsrc, size_t n,
                              int world, bool vector) {
  using A = CombineType<T, R>;
  for_each_pack<kVectorWidth<T>>(l, n, vector, [&](auto w, size_t i) {
    constexpr int W = decltype(w)::value;
    A acc[W];
    Pack<T, W> x = load_pack<W>(srcs[0] + i);
    for (int k = 0; k < W; ++k) acc[k] = widen(x.v[k]);
    for (int s = 1; s < nsrc; ++s) {
      x = load_pack<W>(srcs[s] + i);
      for (int k = 0; k < W; ++k) acc[k] = R::combine(acc[k], A(widen(x.v[k])));
    }
    Pack<T, W> y;
    for (int k = 0; k < W; ++k) y.v[k] = R::template finish<T>(Accum<T>(acc[k]), world);
    store_pack<W>(out + i, y);
    if (out2 != nullptr) store_pack<W>(out2 + i, y);
  });
}

// Ring, first send of a sub-chunk: partial[i] = widen(local[i]).
template <class T>
PYCOMM_HD void widen_elements(const Lanes& l, Accum<T>* partial, const T* local, size_t n, bool vector) {
  using A = Accum<T>;
  for_each_pack<kVectorWidth<T>>(l, n, vector, [&](auto w, size_t i) {
    constexpr int W = decltype(w)::value;
    const Pack<T, W> x = load_pack<W>(local + i);
    Pack<A, W> y;
    for (int k = 0; k < W; ++k) y.v[k] = widen(x.v[k]);
    store_pack<W>(partial + i, y);
  });
}

// Ring, reduce-scatter: out[i] = received[i] op widen(local[i]); the partial
// that arrived stays on the left, so chunk c is combined in the order c+1, c+2, ..., c.
template <class T, class R>
PYCOMM_HD void combine_elements(const Lanes& l, Accum<T>* out, const Accum<T>* received, const T* local,
                                size_t n, bool vector) {
  using A = Accum<T>;
  for_each_pack<kVectorWidth<T>>(l, n, vector, [&](auto w, size_t i) {
    constexpr int W = decltype(w)::value;
    const Pack<A, W> p = load_pack<W>(received + i);
    const Pack<T, W> x = load_pack<W>(local + i);
    Pack<A, W> y;
    using C = CombineType<T, R>;
    for (int k = 0; k < W; ++k) y.v[k] = A(R::combine(C(p.v[k]), C(widen(x.v[k]))));
    store_pack<W>(out + i, y);
  });
}

// Ring, the owner's last step: out[i] = out2[i] = finish(received[i] op widen(local[i])).
// `out` may be `local` (in place): each element is read before it is written.
template <class T, class R>
PYCOMM_HD void finish_elements(const Lanes& l, T* out, T* out2, const Accum<T>* received, const T* local,
                               size_t n, int world, bool vector) {
  using A = Accum<T>;
  for_each_pack<kVectorWidth<T>>(l, n, vector, [&](auto w, size_t i) {
    constexpr int W = decltype(w)::value;
    const Pack<A, W> p = load_pack<W>(received + i);
    const Pack<T, W> x = load_pack<W>(local + i);
    Pack<T, W> y;
    using C = CombineType<T, R>;
    for (int k = 0; k < W; ++k) y.v[k] = R::template finish<T>(A(R::combine(C(p.v[k]), C(widen(x.v[k])))), world);
    store_pack<W>(out + i, y);
    store_pack<W>(out2 + i, y);
  });
}

}  // namespace pycomm::cuda
