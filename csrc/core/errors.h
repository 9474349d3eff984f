// Error types raised by the torch-free core. The Python binding maps each to a
// Python exception class of the same name (pycomm.CommError and subclasses).
#pragma once

#include <exception>
#include <stdexcept>
#include <string>

namespace pycomm::core {

// Any failure of a collective that is not the caller's bad argument.
//
// Every message begins with the Python class's name ("pycomm.CommTimeout: rank 2
// ..."): DDP and torch.distributed re-raise a backend's or a hook's error as a
// plain RuntimeError carrying only the text, and the name is what lets a user
// (and pycomm.CommError.matches) tell pycomm's errors apart there. Throw sites
// give the rest of the message, which names the rank.
class CommError : public std::runtime_error {
 public:
  explicit CommError(const std::string& message) : CommError("pycomm.CommError: ", message) {}

 protected:
  CommError(const char* class_prefix, const std::string& message)
      : std::runtime_error(class_prefix + message) {}
};

// A peer did not arrive (stalled or died) before the deadline, or the
// communicator was aborted by a rank that saw such a failure.
class CommTimeout : public CommError {
 public:
  explicit CommTimeout(const std::string& message) : CommError("pycomm.CommTimeout: ", message) {}

 protected:
  using CommError::CommError;
};

// A peer's process exited (killed, crashed or ended) while this rank waited
// for it, or the communicator was aborted by a rank that saw it exit. Seen at
// once, not at a deadline; a CommTimeout still, so code that catches those
// (written before this class) keeps working.
class PeerDied : public CommTimeout {
 public:
  explicit PeerDied(const std::string& message) : CommTimeout("pycomm.PeerDied: ", message) {}
};

// The ranks entered collectives that do not match (count, dtype, op, kind).
class CollectiveMismatch : public CommError {
 public:
  explicit CollectiveMismatch(const std::string& message)
      : CommError("pycomm.CollectiveMismatch: ", message) {}
};

// An error's text without the class name its message begins with, to quote
// inside another error's message.
inline std::string message_of(const std::exception& e) {
  const std::string what = e.what();
  const std::string prefix = "pycomm.";
  if (what.compare(0, prefix.size(), prefix) != 0) return what;
  const size_t colon = what.find(": ");
  return colon == std::string::npos ? what : what.substr(colon + 2);
}

// A caller's argument is wrong; raised before anything is sent.
class InvalidArgument : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

}  // namespace pycomm::core
