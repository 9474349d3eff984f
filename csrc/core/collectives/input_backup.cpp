#include "input_backup.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "../call_profile.h"
#include "../kernels/reduce_kernels.h"

namespace pycomm::core {

void InputBackup::FreeDeleter::operator()(char* p) const { std::free(p); }

void InputBackup::begin(void* data, size_t bytes, bool enabled) {
  data_ = static_cast<char*>(data);
  enabled_ = enabled && bytes > 0;
  // A backup larger than the caches is never read back in time to profit from
  // them; stream it past them so it evicts nothing the collective needs.
  streaming_ = bytes > kStreamingThreshold;
  saved_.clear();
  if (!enabled_ || bytes <= capacity_) return;
  // Same alignment as the tensor's allocator, so streaming stores line up.
  void* p = nullptr;
  if (posix_memalign(&p, 64, bytes) != 0) throw std::bad_alloc();
  buffer_.reset(static_cast<char*>(p));
  capacity_ = bytes;
}

void InputBackup::save(size_t offset, size_t len) {
  if (!enabled_ || len == 0) return;
  PartTimer timer(CallPart::kBackup);
  if (streaming_) {
    copy_streaming(buffer_.get() + offset, data_ + offset, len);
  } else {
    std::memcpy(buffer_.get() + offset, data_ + offset, len);
  }
  saved_.push_back(Range{offset, offset + len});
}

void InputBackup::restore() {
  if (!enabled_) return;
  PartTimer timer(CallPart::kBackup);
  for (const Range& r : saved_) std::memcpy(data_ + r.begin, buffer_.get() + r.begin, r.size());
  saved_.clear();
}

void InputBackup::release() {
  buffer_.reset();
  capacity_ = 0;
  enabled_ = false;
  saved_.clear();
}

}  // namespace pycomm::core
