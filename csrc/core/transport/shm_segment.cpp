#include "shm_segment.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstddef>
#include <cstring>
#include <random>
#include <sstream>

#include "../errors.h"

namespace pycomm::core {
namespace {

constexpr const char* kPrefix = "pycomm-";

std::string path_of(const std::string& name) { return shm_dir() + "/" + name; }

std::string sys_error(const std::string& what, int err) {
  return what + ": " + std::strerror(err);
}

void* map_fd(int fd, size_t bytes, const std::string& path) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) throw CommError(sys_error("mmap of " + path + " failed", errno));
  return p;
}

// The seals of an anonymous segment. Not F_SEAL_WRITE: every rank writes it.
// F_SEAL_SEAL: no peer can add F_SEAL_WRITE later either.
constexpr int kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

// The memfd's name: the tag, with what could confuse a reader of
// /proc/PID/maps made '_' (the kernel takes anything but '/' and NUL).
std::string memfd_name(const std::string& tag) {
  std::string name = kPrefix;
  for (char c : tag.substr(0, 200)) {  // the kernel refuses names over 249 bytes
    const bool plain = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
    name += plain ? c : '_';
  }
  return name;
}

// A memfd for shared data, never for code. MFD_NOEXEC_SEAL (Linux 6.3 on)
// says so: without it, a host with vm.memfd_noexec=2 refuses the call, and
// others log a warning. Older kernels do not know the flag (EINVAL), and
// their memfds are what we want anyway.
#ifndef MFD_NOEXEC_SEAL
#define MFD_NOEXEC_SEAL 0x0008U
#endif
int new_memfd(const std::string& name) {
  int fd = memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_NOEXEC_SEAL);
  if (fd < 0 && errno == EINVAL) fd = memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  return fd;
}

// Reserves every page of fd's first `bytes`. shmem's fallocate gives up with
// EINTR when a signal arrives during a large reservation; the pages it did
// reserve stay, so asking again finishes the job.
int reserve(int fd, size_t bytes) {
  while (fallocate(fd, 0, 0, off_t(bytes)) != 0) {
    if (errno != EINTR) return errno;
  }
  return 0;
}

}  // namespace

std::string shm_dir() {
  const char* dir = std::getenv("PYCOMM_SHM_DIR");
  return (dir && *dir) ? std::string(dir) : std::string("/dev/shm");
}

void check_segment_name(const std::string& name, const char* what) {
  const bool plain = !name.empty() && name.size() <= 200 && name[0] != '.' &&
                     std::all_of(name.begin(), name.end(), [](char c) {
                       return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
                     });
  if (!plain) {
    throw InvalidArgument(std::string(what) +
                          ": a segment name is 1 to 200 letters, digits, '.', '_' or '-', not starting "
                          "with '.'; got '" + name.substr(0, 80) + "'");
  }
}

uint64_t pid_namespace() {
  struct stat st;
  return stat("/proc/self/ns/pid", &st) == 0 ? uint64_t(st.st_ino) : 0;
}

std::string segment_name_prefix(long pid, uint64_t pid_ns) {
  return kPrefix + std::to_string(pid) + "-n" + std::to_string(pid_ns) + "-";
}

std::string new_segment_name(const std::string& tag) {
  std::random_device rd;
  std::ostringstream os;
  os << segment_name_prefix(getpid(), pid_namespace());
  for (char c : tag) os << (std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  if (!tag.empty()) os << "-";
  os << std::hex << rd() << rd();
  return os.str();
}

ShmSegment ShmSegment::create(const std::string& name, size_t bytes) {
  check_segment_name(name, "shared memory");
  const std::string path = path_of(name);
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) throw CommError(sys_error("cannot create shared memory " + path, errno));
  ShmSegment seg;
  seg.name_ = name;
  // posix_fallocate reserves every page now; tmpfs answers ENOSPC here instead
  // of killing the process with SIGBUS when a page is first touched. Ask
  // first whether it can fit: tmpfs fills the machine's memory page by page
  // before it gives up, and the OOM killer may strike first.
  struct statvfs room;
  int err = statvfs(shm_dir().c_str(), &room) == 0 &&
                    (unsigned long long)room.f_bavail * room.f_frsize < bytes
                ? ENOSPC
                : 0;
  if (err == 0) err = ftruncate(fd, off_t(bytes)) == 0 ? posix_fallocate(fd, 0, off_t(bytes)) : errno;
  if (err != 0) {
    ::close(fd);
    ::unlink(path.c_str());
    std::ostringstream os;
    os << "cannot reserve " << bytes << " bytes of shared memory in " << shm_dir()
       << " (" << std::strerror(err) << ")";
    struct statvfs vfs;
    if (statvfs(shm_dir().c_str(), &vfs) == 0) {
      os << "; it has " << (unsigned long long)vfs.f_bavail * vfs.f_frsize << " bytes free";
    }
    os << ". Enlarge it (docker: --shm-size), set PYCOMM_SHM_DIR to a larger tmpfs, "
          "or lower PYCOMM_DIRECT_KB / PYCOMM_RING_BUFFER_KB.";
    throw CommError(os.str());
  }
  try {
    seg.data_ = map_fd(fd, bytes, path);
  } catch (...) {
    ::close(fd);
    ::unlink(path.c_str());
    throw;
  }
  ::close(fd);
  seg.size_ = bytes;
  return seg;
}

ShmSegment ShmSegment::open(const std::string& name) {
  check_segment_name(name, "shared memory");
  const std::string path = path_of(name);
  // O_NONBLOCK: a FIFO planted under the name must not block the open.
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) throw CommError(sys_error("cannot open shared memory " + path, errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw CommError(sys_error("cannot size shared memory " + path, err));
  }
  // What this user's pycomm makes: a regular file, its own, 0600. Anything
  // else someone else made (or could change under us) and is not mapped.
  std::string foreign;
  if (!S_ISREG(st.st_mode)) {
    foreign = "it is not a regular file";
  } else if (st.st_uid != geteuid()) {
    foreign = "it belongs to uid " + std::to_string(st.st_uid) + ", not to this process's " + std::to_string(geteuid());
  } else if (st.st_mode & 077) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", unsigned(st.st_mode & 07777));
    foreign = std::string("its mode is ") + mode + ": others may open it";
  } else if (st.st_size <= 0) {
    foreign = "it is empty";
  }
  if (!foreign.empty()) {
    ::close(fd);
    throw CommError("refusing shared memory " + path + ": " + foreign + " (pycomm makes its segments 0600, "
                    "owned by the user that runs the group)");
  }
  const size_t bytes = size_t(st.st_size);
  ShmSegment seg;
  seg.name_ = name;
  try {
    seg.data_ = map_fd(fd, bytes, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  seg.size_ = bytes;
  return seg;
}

uint64_t memory_available() {
  uint64_t room = UINT64_MAX;
  if (FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    unsigned long long kb = 0;
    while (std::fgets(line, sizeof(line), f)) {
      if (std::sscanf(line, "MemAvailable: %llu kB", &kb) == 1) room = uint64_t(kb) * 1024;
    }
    std::fclose(f);
  }
  // cgroup v2: this process's group's limit less what it uses ("max": none).
  auto read_number = [](const char* path, uint64_t* v) {
    FILE* f = std::fopen(path, "r");
    if (!f) return false;
    unsigned long long x = 0;
    const bool ok = std::fscanf(f, "%llu", &x) == 1;
    std::fclose(f);
    *v = x;
    return ok;
  };
  uint64_t limit = 0, used = 0;
  if (read_number("/sys/fs/cgroup/memory.max", &limit) &&
      read_number("/sys/fs/cgroup/memory.current", &used)) {
    room = std::min(room, limit > used ? limit - used : 0);
  }
  return room;
}

ShmSegment ShmSegment::create_anonymous(const std::string& tag, size_t bytes) {
  const std::string name = memfd_name(tag);
  if (bytes == 0) throw InvalidArgument("create_anonymous(" + name + "): bytes must be positive, got 0");
  ShmSegment seg;
  // Owned by seg from here on: every throw below closes it.
  seg.fd_ = new_memfd(name);
  if (seg.fd_ < 0) throw CommError(sys_error("memfd_create(" + name + ") failed", errno));
  // Ask first whether it can fit: memfd pages come out of the machine's (or
  // the cgroup's) memory page by page, and the OOM killer strikes before the
  // reservation fails.
  const uint64_t room = memory_available();
  int err = bytes > room ? ENOMEM : 0;
  if (err == 0) err = ftruncate(seg.fd_, off_t(bytes)) == 0 ? 0 : errno;
  // memfd pages are charged to this process's memory cgroup as they are
  // reserved: a full one answers ENOMEM here rather than SIGBUS later.
  if (err == 0) err = reserve(seg.fd_, bytes);
  if (err != 0) {
    std::ostringstream os;
    os << "cannot reserve " << bytes << " bytes of anonymous shared memory (memfd " << name << "): "
       << std::strerror(err);
    if (room != UINT64_MAX) os << "; this process has " << room << " bytes free (MemAvailable, cgroup limit)";
    os << ". Raise the memory limit (docker --memory, a Kubernetes limit), or lower "
          "PYCOMM_DIRECT_KB / PYCOMM_RING_BUFFER_KB.";
    throw CommError(os.str());
  }
  if (fcntl(seg.fd_, F_ADD_SEALS, kSeals) != 0) {
    throw CommError(sys_error("cannot seal memfd " + name, errno));
  }
  seg.data_ = map_fd(seg.fd_, bytes, "memfd " + name);
  seg.size_ = bytes;
  return seg;
}

ShmSegment ShmSegment::from_fd(int fd, const std::string& what) {
  if (fd < 0) throw InvalidArgument(what + ": from_fd got no file descriptor (" + std::to_string(fd) + ")");
  ShmSegment seg;
  seg.fd_ = fd;  // owned from here on: closed if anything below throws
  // Close-on-exec, whatever way it came: a child we exec must not hold it.
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0) {
    throw CommError(sys_error(what + ": the file descriptor received is not a memfd (F_GET_SEALS)", errno));
  }
  if (!(seals & F_SEAL_SHRINK)) {
    // Unsealed, its owner could truncate it while we map it: a read then dies of SIGBUS.
    throw CommError(what + ": the memfd received is not sealed against shrinking (seals " +
                    std::to_string(seals) + ")");
  }
  struct stat st;
  if (fstat(fd, &st) != 0) throw CommError(sys_error(what + ": cannot size the memfd received", errno));
  if (st.st_size <= 0) throw CommError(what + ": the memfd received has size 0");
  const size_t bytes = size_t(st.st_size);
  seg.data_ = map_fd(fd, bytes, what);
  seg.size_ = bytes;
  return seg;
}

ShmSegment::ShmSegment(ShmSegment&& o) noexcept { *this = std::move(o); }

ShmSegment& ShmSegment::operator=(ShmSegment&& o) noexcept {
  if (this != &o) {
    release();
    name_ = std::move(o.name_);
    data_ = o.data_;
    size_ = o.size_;
    fd_ = o.fd_;
    o.data_ = nullptr;
    o.size_ = 0;
    o.fd_ = -1;
  }
  return *this;
}

ShmSegment::~ShmSegment() { release(); }

void ShmSegment::close_fd() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void ShmSegment::release() {
  if (data_) munmap(data_, size_);
  if (fd_ >= 0) ::close(fd_);
  data_ = nullptr;
  size_ = 0;
  fd_ = -1;
}

void ShmSegment::unlink() {
  if (!name_.empty()) ::unlink(path_of(name_).c_str());  // ENOENT: another rank did it
}

std::string memfd_unavailable_reason() {
  int fd = new_memfd("pycomm-probe");
  if (fd < 0) return sys_error("memfd_create", errno);
  std::string reason;
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  if (ftruncate(fd, off_t(page)) != 0) {
    reason = sys_error("memfd ftruncate", errno);
  } else if (int err = reserve(fd, page); err != 0) {
    reason = sys_error("memfd fallocate", err);
  } else if (fcntl(fd, F_ADD_SEALS, kSeals) != 0) {
    reason = sys_error("memfd sealing", errno);
  }
  ::close(fd);
  if (!reason.empty()) return reason;

  // A name no one else binds: the address of a real server is random too.
  const int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (sock < 0) return sys_error("Unix sockets", errno);
  std::random_device rd;
  const std::string probe = "pycomm-probe-" + std::to_string(getpid()) + "-" + std::to_string(rd());
  struct sockaddr_un addr {};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, probe.data(), probe.size());  // sun_path[0] = 0: abstract
  const socklen_t len = socklen_t(offsetof(struct sockaddr_un, sun_path) + 1 + probe.size());
  if (bind(sock, reinterpret_cast<struct sockaddr*>(&addr), len) != 0) {
    reason = sys_error("abstract Unix sockets", errno);
  }
  ::close(sock);
  return reason;
}

int remove_stale_segments() {
  DIR* dir = opendir(shm_dir().c_str());
  if (!dir) return 0;
  int removed = 0;
  const uint64_t my_ns = pid_namespace();
  const size_t prefix_len = std::strlen(kPrefix);
  while (struct dirent* e = readdir(dir)) {
    if (std::strncmp(e->d_name, kPrefix, prefix_len) != 0) continue;
    // pycomm-<pid>-n<namespace>-...; older names carry no namespace and are
    // left alone, as are names made in another namespace.
    char* end = nullptr;
    const long pid = std::strtol(e->d_name + prefix_len, &end, 10);
    if (pid <= 0 || end == nullptr || std::strncmp(end, "-n", 2) != 0) continue;
    const unsigned long long ns = std::strtoull(end + 2, &end, 10);
    if (end == nullptr || *end != '-' || my_ns == 0 || ns != my_ns) continue;
    // This user's regular files only: root sweeping /dev/shm must not remove
    // another user's group's segment.
    struct stat st;
    const std::string path = path_of(e->d_name);
    if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) continue;
    if (kill(pid_t(pid), 0) == 0 || errno != ESRCH) continue;  // its maker still runs
    if (::unlink(path.c_str()) == 0) ++removed;
  }
  closedir(dir);
  return removed;
}

}  // namespace pycomm::core
