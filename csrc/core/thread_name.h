// Names the calling thread, so that top -H, /proc/<pid>/task/*/comm and a
// debugger tell pycomm's threads from the rank's compute threads (the DDP
// bench reads each one's CPU time by its name). Linux keeps 15 characters.
#pragma once

#include <pthread.h>

namespace pycomm::core {

inline void name_this_thread(const char* name) {
#if defined(__linux__)
  pthread_setname_np(pthread_self(), name);
#else
  (void)name;
#endif
}

}  // namespace pycomm::core
