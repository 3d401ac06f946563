// SPDX-License-Identifier: Apache-2.0
// sd_notify's datagram (without libsystemd) and posix_spawn of the successor; see the header.
#include "proxy/service_manager.h"

#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <vector>

extern char** environ;

namespace idemgate {

bool NotifyServiceManager(const std::string& state) {
  const char* name = getenv("NOTIFY_SOCKET");
  if (name == nullptr || *name == '\0') return true;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  size_t len = strlen(name);
  if ((name[0] != '/' && name[0] != '@') || len >= sizeof(addr.sun_path)) return false;
  memcpy(addr.sun_path, name, len);
  if (name[0] == '@') addr.sun_path[0] = '\0';  // an abstract socket
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  socklen_t addr_len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len);
  bool ok = sendto(fd, state.data(), state.size(), MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&addr),
                   addr_len) == static_cast<ssize_t>(state.size());
  close(fd);
  return ok;
}

std::string StartedBinaryPath() {
  static const std::string path = [] {
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    return n > 0 ? std::string(buf, n) : std::string();
  }();
  return path;
}

pid_t SpawnSuccessor(const std::string& binary, const std::string& config_path,
                     std::string* error) {
  std::vector<std::string> args = {binary, "--take-over", "--config", config_path};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGCHLD, SIGPIPE}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, binary.c_str(), nullptr, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    *error = "cannot start " + binary + ": " + strerror(rc);
    return -1;
  }
  return pid;
}

}  // namespace idemgate
