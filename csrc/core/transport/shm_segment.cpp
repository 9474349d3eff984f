#include "shm_segment.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdlib>
#include <cctype>
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

}  // namespace

std::string shm_dir() {
  const char* dir = std::getenv("PYCOMM_SHM_DIR");
  return (dir && *dir) ? std::string(dir) : std::string("/dev/shm");
}

std::string new_segment_name(const std::string& tag) {
  std::random_device rd;
  std::ostringstream os;
  os << kPrefix << getpid() << "-";
  for (char c : tag) os << (std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  if (!tag.empty()) os << "-";
  os << std::hex << rd() << rd();
  return os.str();
}

ShmSegment ShmSegment::create(const std::string& name, size_t bytes) {
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
  const std::string path = path_of(name);
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) throw CommError(sys_error("cannot open shared memory " + path, errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size <= 0) {
    int err = errno;
    ::close(fd);
    throw CommError(sys_error("cannot size shared memory " + path, err));
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

ShmSegment::ShmSegment(ShmSegment&& o) noexcept { *this = std::move(o); }

ShmSegment& ShmSegment::operator=(ShmSegment&& o) noexcept {
  if (this != &o) {
    release();
    name_ = std::move(o.name_);
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

ShmSegment::~ShmSegment() { release(); }

void ShmSegment::release() {
  if (data_) munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

void ShmSegment::unlink() {
  if (!name_.empty()) ::unlink(path_of(name_).c_str());  // ENOENT: another rank did it
}

int remove_stale_segments() {
  DIR* dir = opendir(shm_dir().c_str());
  if (!dir) return 0;
  int removed = 0;
  const size_t prefix_len = std::strlen(kPrefix);
  while (struct dirent* e = readdir(dir)) {
    if (std::strncmp(e->d_name, kPrefix, prefix_len) != 0) continue;
    char* end = nullptr;
    long pid = std::strtol(e->d_name + prefix_len, &end, 10);
    if (pid <= 0 || end == nullptr || *end != '-') continue;
    if (kill(pid_t(pid), 0) == 0 || errno != ESRCH) continue;  // creator still runs
    if (::unlink(path_of(e->d_name).c_str()) == 0) ++removed;
  }
  closedir(dir);
  return removed;
}

}  // namespace pycomm::core
