// A POSIX shared-memory segment: created by one rank with O_EXCL, opened by the
// others, fully reserved up front, and unlinked as soon as all ranks map it.
#pragma once

#include <cstddef>
#include <string>

namespace pycomm::core {

class ShmSegment {
 public:
  // Creates `name` exclusively and reserves `bytes` of backing store, so that a
  // full /dev/shm fails here with a clear CommError rather than with SIGBUS on
  // first touch.
  static ShmSegment create(const std::string& name, size_t bytes);
  // Opens and maps a segment another rank created, at its full size.
  static ShmSegment open(const std::string& name);

  ShmSegment() = default;
  ShmSegment(ShmSegment&& o) noexcept;
  ShmSegment& operator=(ShmSegment&& o) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();

  // Removes the name; the mapping stays valid. Safe to call from every rank.
  void unlink();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  void release();

  std::string name_;
  void* data_ = nullptr;
  size_t size_ = 0;
};

// The directory segments live in: $PYCOMM_SHM_DIR, or /dev/shm.
std::string shm_dir();

// A fresh segment name: pycomm-<creator pid>-<tag>-<random>. The tag (a
// process group's name) says whose segment it is; characters other than
// letters and digits become '_'.
std::string new_segment_name(const std::string& tag = "");

// Unlinks pycomm segments whose creator pid no longer runs: what a rank killed
// between creating a segment and the unlink leaves behind. Returns the count.
int remove_stale_segments();

}  // namespace pycomm::core
