// Names the calling thread (as `top -H`, `ps -L`, gdb and /proc/PID/task/TID/comm show it).
#pragma once

#include <pthread.h>

#include <string>

namespace idemgate {

// Linux keeps 15 bytes of a thread's name; longer names are cut there.
inline void NameThisThread(const std::string& name) {
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

}  // namespace idemgate
