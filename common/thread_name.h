// SPDX-License-Identifier: Apache-2.0
// Names a thread (as `top -H`, `ps -L`, gdb and /proc/PID/task/TID/comm show it). The creator
// names it right after starting it, so the name is there before the creator goes on.
#pragma once

#include <pthread.h>

#include <string>
#include <thread>

namespace idemgate {

// Linux keeps 15 bytes of a thread's name; longer names are cut there.
inline void NameThread(std::thread& thread, const std::string& name) {
  pthread_setname_np(thread.native_handle(), name.substr(0, 15).c_str());
}

}  // namespace idemgate
