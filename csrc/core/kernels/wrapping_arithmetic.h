// Integer sums and products wrap, as torch's do. They are computed in the
// unsigned type because signed overflow is undefined in C++. One definition
// for the CPU kernels (reduce_kernels.cpp) and the CUDA ones
// (csrc/cuda/all_reduce_elements.h), so both wrap alike.
#pragma once

#include <type_traits>

#include "../host_device.h"

namespace pycomm::core {

template <class A>
PYCOMM_HD A wrap_add(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return A(U(U(a) + U(b)));
  } else {
    return a + b;
  }
}

template <class A>
PYCOMM_HD A wrap_mul(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    // Types narrower than int promote to (signed) int; multiply them as
    // unsigned int instead, so no product overflows a signed type.
    using P = std::conditional_t<(sizeof(A) < sizeof(unsigned)), unsigned, U>;
    return A(U(P(U(a)) * P(U(b))));
  } else {
    return a * b;
  }
}

}  // namespace pycomm::core
