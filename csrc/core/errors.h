// Error types raised by the torch-free core. The Python binding maps each to a
// Python exception class of the same name (pycomm.CommError and subclasses).
#pragma once

#include <stdexcept>
#include <string>

namespace pycomm::core {

// Any failure of a collective that is not the caller's bad argument.
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A peer did not arrive (stalled or died) before the deadline, or the
// communicator was aborted by a rank that saw such a failure.
class CommTimeout : public CommError {
 public:
  using CommError::CommError;
};

// The ranks entered collectives that do not match (count, dtype, op, kind).
class CollectiveMismatch : public CommError {
 public:
  using CommError::CommError;
};

// A caller's argument is wrong; raised before anything is sent.
class InvalidArgument : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

}  // namespace pycomm::core
