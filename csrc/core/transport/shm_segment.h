// A shared-memory segment, of one of two kinds:
//  - named: a POSIX file in shm_dir(), created by one rank with O_EXCL, opened
//    by the others, and unlinked as soon as all ranks map it;
//  - anonymous: a sealed memfd with no name in any file system, handed to the
//    other ranks as a file descriptor (segment_exchange.h).
// Either is fully reserved up front.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace pycomm::core {

class ShmSegment {
 public:
  // Creates `name` exclusively and reserves `bytes` of backing store, so that a
  // full /dev/shm fails here with a clear CommError rather than with SIGBUS on
  // first touch.
  static ShmSegment create(const std::string& name, size_t bytes);
  // Opens and maps a segment another rank created, at its full size. Refuses
  // (CommError) what is not a regular file of this user that nobody else may
  // read or write: another user's file is never mapped as a group's memory.
  static ShmSegment open(const std::string& name);

  // Anonymous memory: a memfd, sized, every page reserved (so that a full
  // memory cgroup fails here with a CommError naming `bytes`, not with SIGBUS on
  // first touch), then sealed against shrinking, growing and further seals, so
  // that no peer can change its size under a mapping. `tag` goes into the
  // memfd's name, as /proc/PID/maps shows it: "/memfd:pycomm-<tag> (deleted)".
  static ShmSegment create_anonymous(const std::string& tag, size_t bytes);
  // Maps a segment received from a peer, and owns `fd` from the call on (closed
  // on failure too). Refuses, with a CommError naming `what`, an fd that is not
  // a memfd sealed against shrinking (a peer could otherwise truncate it and
  // turn our reads into SIGBUS), or one of size 0.
  static ShmSegment from_fd(int fd, const std::string& what);

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
  const std::string& name() const { return name_; }  // "" for an anonymous one
  // The memfd, kept open so that the segment can be offered to peers; -1 for a
  // named segment (its name is how peers find it).
  int fd() const { return fd_; }
  // Closes the memfd once nobody needs to offer it again (the mapping stays):
  // a rank's channels would otherwise hold a descriptor each, on both sides.
  void close_fd();

 private:
  void release();

  std::string name_;
  void* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;
};

// "" when this host can take the memfd path (memfd_create with sealing and
// fallocate works, and a Unix socket can be bound in the abstract namespace);
// otherwise one line saying what fails ("memfd_create: Function not
// implemented", "abstract Unix sockets: Permission denied"), which pycomm
// doctor prints. Both halves are asked here, in one place, because the memfd
// path needs both: memory without a socket to hand it over is of no use.
std::string memfd_unavailable_reason();

// Bytes of memory this process can still take: MemAvailable, less where its
// cgroup (v2, as a container sees it) is nearer its limit. UINT64_MAX if unknown.
uint64_t memory_available();

// The directory segments live in: $PYCOMM_SHM_DIR, or /dev/shm.
std::string shm_dir();

// A segment's name is a plain file name in shm_dir(): 1 to 200 letters,
// digits, '.', '_' or '-', not starting with '.'. Anything else (a '/', "..")
// is an InvalidArgument naming `what`: a name from the store never leads
// out of shm_dir().
void check_segment_name(const std::string& name, const char* what);

// This process's PID namespace: the inode of /proc/self/ns/pid (0 if unreadable).
uint64_t pid_namespace();

// How every segment name starts: pycomm-<maker's pid>-n<its PID namespace>-.
// The namespace says where the pid means that process (remove_stale_segments).
std::string segment_name_prefix(long pid, uint64_t pid_ns);

// A fresh segment name: the prefix, <tag>-<random>. The tag (a process
// group's name) says whose segment it is; characters other than letters and
// digits become '_'.
std::string new_segment_name(const std::string& tag = "");

// Unlinks pycomm segments whose maker no longer runs: what a rank killed
// between creating a segment and the unlink leaves behind. Only this user's
// regular files, and only those made in this PID namespace (a pid elsewhere
// names another process here, or none). Returns the count.
int remove_stale_segments();

}  // namespace pycomm::core
