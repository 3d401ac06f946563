// SPDX-License-Identifier: Apache-2.0
// Filling a test's own small file system (a tmpfs or a loop-mounted image) to the last block.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <string>

namespace idemgate::test {

// Writes zeros into `path` until the file system says ENOSPC; false on any other error.
inline bool FillUntilFull(const std::string& path) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  std::string block(64 << 10, '\0');
  for (;;) {
    ssize_t n = write(fd, block.data(), block.size());
    if (n < 0) {
      bool full = errno == ENOSPC;
      close(fd);
      return full;
    }
    if (n < static_cast<ssize_t>(block.size())) block.resize(512);  // the last few blocks
  }
}

}  // namespace idemgate::test
