#include "numa_place.h"

#include <linux/mempolicy.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

namespace pycomm::core {

int current_numa_node() {
  unsigned cpu = 0, node = 0;
  if (syscall(SYS_getcpu, &cpu, &node, nullptr) != 0) return -1;
  return int(node);
}

void place_on_node(void* addr, size_t bytes, int node, NumaPlacement& into) {
  if (node < 0 || node >= 1024) {
    into.why_not = "the rank's NUMA node is unknown";
    return;
  }
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t lo = (uintptr_t(addr) + page - 1) / page * page;
  const uintptr_t hi = (uintptr_t(addr) + bytes) / page * page;
  if (hi <= lo) return;
  const size_t n = size_t((hi - lo) / page);
  // mbind moves only pages this process has mapped: fault each one in (a read
  // maps the page the creator reserved, and allocates nothing).
  for (uintptr_t p = lo; p < hi; p += page) (void)*reinterpret_cast<volatile const char*>(p);
  unsigned long mask[1024 / (8 * sizeof(unsigned long))] = {};
  mask[size_t(node) / (8 * sizeof(unsigned long))] |= 1ul << (size_t(node) % (8 * sizeof(unsigned long)));
  if (syscall(SYS_mbind, lo, hi - lo, MPOL_PREFERRED, mask, 1024ul, MPOL_MF_MOVE) != 0) {
    into.why_not = "the kernel refused mbind (no NUMA support, or a seccomp profile)";
    return;
  }
  // Ask where each page is now: move_pages with no target nodes only reports.
  std::vector<void*> pages(n);
  std::vector<int> status(n, -1);
  for (size_t i = 0; i < n; ++i) pages[i] = reinterpret_cast<void*>(lo + i * page);
  into.pages += n;
  if (syscall(SYS_move_pages, 0, n, pages.data(), nullptr, status.data(), 0) != 0) return;
  for (int s : status) into.on_node += s == node ? 1 : 0;
}

}  // namespace pycomm::core
