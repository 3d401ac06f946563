// SPDX-License-Identifier: Apache-2.0
// The listen/admin address checks of the preflight: overlaps, and addresses already in use.
#include "proxy/ops/preflight_addresses.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace idemgate {
namespace {

std::string Text(const HostPort& addr) {
  bool v6 = addr.host.find(':') != std::string::npos;
  return (v6 ? "[" + addr.host + "]" : addr.host) + ":" + std::to_string(addr.port);
}

// The numeric addresses `host` resolves to for a passive socket ("" is the wildcard).
std::vector<std::string> Resolve(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  std::vector<std::string> out;
  if (getaddrinfo(host.empty() ? nullptr : host.c_str(), "1", &hints, &res) != 0) return out;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    char name[NI_MAXHOST];
    if (getnameinfo(a->ai_addr, a->ai_addrlen, name, sizeof(name), nullptr, 0, NI_NUMERICHOST) ==
        0) {
      out.emplace_back(name);
    }
  }
  freeaddrinfo(res);
  return out;
}

bool IsWildcard(const std::string& numeric) { return numeric == "0.0.0.0" || numeric == "::"; }

// Whether two listeners on these hosts and one port would collide.
bool Overlap(const std::string& a, const std::string& b) {
  std::vector<std::string> as = Resolve(a), bs = Resolve(b);
  for (const std::string& x : as) {
    for (const std::string& y : bs) {
      if (x == y || IsWildcard(x) || IsWildcard(y)) return true;
    }
  }
  return false;
}

// errno of a test bind of `addr` (as the gateway binds it: SO_REUSEADDR), 0 when it binds.
int ProbeBind(const HostPort& addr) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string port = std::to_string(addr.port);
  if (getaddrinfo(addr.host.empty() ? nullptr : addr.host.c_str(), port.c_str(), &hints, &res) !=
      0) {
    return 0;  // not resolving is reported by the host check
  }
  int err = 0;
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      bind(fd, res->ai_addr, res->ai_addrlen) != 0) {
    err = errno;
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  return err;
}

// The socket inodes listening on TCP `port` (/proc/net/tcp and tcp6, state 0A).
std::vector<std::string> ListeningInodes(uint16_t port) {
  std::vector<std::string> inodes;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retr, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >>
          inode;
      size_t colon = local.rfind(':');
      if (state != "0A" || colon == std::string::npos) continue;
      if (std::strtoul(local.c_str() + colon + 1, nullptr, 16) == port) inodes.push_back(inode);
    }
  }
  return inodes;
}

// Whether an idemgate process (this user's: /proc/PID/fd is readable) listens on `port`: the
// running gateway of this config, whose addresses are in use by design (the packaged unit runs
// --check-config before every reload).
bool HeldByIdemgate(uint16_t port) {
  std::vector<std::string> inodes = ListeningInodes(port);
  if (inodes.empty()) return false;
  std::error_code ec;
  for (const auto& proc : std::filesystem::directory_iterator("/proc", ec)) {
    std::ifstream comm(proc.path() / "comm");
    std::string name;
    if (!std::getline(comm, name) || name != "idemgate") continue;
    std::error_code fd_ec;
    for (const auto& fd : std::filesystem::directory_iterator(proc.path() / "fd", fd_ec)) {
      std::error_code link_ec;
      std::string target = std::filesystem::read_symlink(fd.path(), link_ec).string();
      for (const std::string& inode : inodes) {
        if (target == "socket:[" + inode + "]") return true;
      }
    }
  }
  return false;
}

void CheckBound(const std::string& key, const HostPort& addr, std::vector<PreflightProblem>* out) {
  if (addr.port == 0) return;  // a port the kernel picks is free
  int err = ProbeBind(addr);
  if (err == 0 || (err == EADDRINUSE && HeldByIdemgate(addr.port))) return;
  std::string what = err == EADDRINUSE ? Text(addr) +
                                             " is already in use by another process (another "
                                             "idemgate?); stop it or choose another " +
                                             key
                                       : "cannot listen on " + Text(addr) + ": " + strerror(err);
  out->push_back({key, "key '" + key + "': " + what});
}

}  // namespace

void CheckListenAddresses(const Config& config, bool probe_bound,
                          std::vector<PreflightProblem>* out) {
  const HostPort& listen = config.listen.addr;
  const bool admin = !config.admin.address.empty();
  const HostPort& admin_addr = config.admin.addr;
  bool collide = admin && listen.port != 0 && listen.port == admin_addr.port &&
                 Overlap(listen.host, admin_addr.host);
  if (collide) {
    out->push_back({"admin.address", "key 'admin.address': " + Text(admin_addr) +
                                         " overlaps listen.address " + Text(listen) +
                                         " (the same port); the admin listener needs a port "
                                         "of its own"});
  }
  if (!probe_bound) return;
  CheckBound("listen.address", listen, out);
  if (admin && !collide) CheckBound("admin.address", admin_addr, out);
}

}  // namespace idemgate
