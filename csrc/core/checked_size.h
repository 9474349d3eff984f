// Sizes derived from numbers that others chose: settings (a link's buffers
// times their size, times the ranks), a caller's arguments (all_to_all's split
// sizes) and what a peer recorded in the segment's header. A sum or product
// that wraps makes a small buffer look large enough, and what is written into
// it then lands past its end; so every step that derives such a size goes
// through these, and one that does not fit is an error before anything is
// mapped, sent or written.
#pragma once

#include <cstddef>
#include <string>
#include <type_traits>

#include "errors.h"

namespace pycomm::core {

namespace checked_detail {

template <typename T>
[[noreturn]] void overflow(const char* what, T a, const char* op, T b) {
  throw InvalidArgument(std::string(what) + ": " + std::to_string(a) + op + std::to_string(b) +
                        " does not fit in " + std::to_string(sizeof(T) * 8) + " bits");
}

}  // namespace checked_detail

// a + b, or InvalidArgument naming `what` (the setting or argument the sizes
// come from) where the sum does not fit in T.
template <typename T>
T checked_add(T a, T b, const char* what) {
  static_assert(std::is_integral_v<T>, "sizes are integers");
  T sum;
  if (__builtin_add_overflow(a, b, &sum)) checked_detail::overflow(what, a, " + ", b);
  return sum;
}

// a * b, or InvalidArgument naming `what` where the product does not fit in T.
template <typename T>
T checked_mul(T a, T b, const char* what) {
  static_assert(std::is_integral_v<T>, "sizes are integers");
  T product;
  if (__builtin_mul_overflow(a, b, &product)) checked_detail::overflow(what, a, " * ", b);
  return product;
}

// `v` rounded up to a multiple of `a`, checked as the two above.
inline size_t checked_align_up(size_t v, size_t a, const char* what) {
  return checked_add(v, a - 1, what) / a * a;
}

}  // namespace pycomm::core
