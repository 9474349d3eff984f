// Where a rank's part of a shared segment lives. The segment's creator
// reserves every page of it at set-up (fallocate), so without this all of them
// sit on the creator's NUMA node, and on a host of two sockets the ranks of the
// other socket read and write everything across the link between them. Each
// rank instead binds the memory it reads most (its own slots, which it writes
// and every rank reads, and its incoming ring link, which it alone reads) to
// the node it runs on and moves the pages there, before any peer maps them.
#pragma once

#include <cstddef>

namespace pycomm::core {

struct NumaPlacement {
  int node = -1;         // the node this rank ran on at set-up (-1: unknown)
  size_t pages = 0;      // whole pages asked to move there
  size_t on_node = 0;    // of those, pages the kernel reports on `node` afterwards
  const char* why_not = nullptr;  // set when nothing was placed, and why
};

// The NUMA node the calling thread runs on, or -1.
int current_numa_node();

// Faults in the whole pages of [addr, addr + bytes), binds them to `node`
// (preferred: another node's pages still serve when this one is full) and
// moves them there; `into` counts the pages asked and those that ended there.
// A kernel without NUMA support, or one that refuses the calls (seccomp),
// leaves the memory where it was and says why in into.why_not.
void place_on_node(void* addr, size_t bytes, int node, NumaPlacement& into);

}  // namespace pycomm::core
