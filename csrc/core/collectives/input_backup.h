// Keeps the original values of the parts of a tensor that an in-place
// collective has started to overwrite, so that a collective that fails part
// way (a peer died or timed out) leaves the caller's tensor exactly as it was.
// Only the slices touched so far are copied, each just before its first use,
// while it is already in cache.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "../errors.h"
#include "../ring_schedule.h"

namespace pycomm::core {

class InputBackup {
 public:
  // Starts a collective over `bytes` bytes at `data`. When `enabled` is false
  // nothing is saved and restore() does nothing.
  void begin(void* data, size_t bytes, bool enabled);
  // Saves data[offset, offset + len) before the collective overwrites it.
  void save(size_t offset, size_t len);
  // Puts every saved byte back.
  void restore();
  // Frees the buffer (the next begin() that needs one allocates again).
  void release();

 private:
  struct FreeDeleter {
    void operator()(char* p) const;
  };
  std::unique_ptr<char, FreeDeleter> buffer_;
  size_t capacity_ = 0;
  char* data_ = nullptr;
  bool enabled_ = false;
  bool streaming_ = false;
  static constexpr size_t kStreamingThreshold = 8u << 20;
  std::vector<Range> saved_;
};

// Runs an in-place collective's body over `bytes` at `data` with `backup`
// begun (enabled or not): a CommError part way puts every saved byte back
// before it goes on up.
template <class Body>
void restoring_on_failure(InputBackup& backup, void* data, size_t bytes, bool enabled, Body&& body) {
  backup.begin(data, bytes, enabled);
  try {
    body();
  } catch (const CommError&) {
    backup.restore();
    throw;
  }
}

}  // namespace pycomm::core
