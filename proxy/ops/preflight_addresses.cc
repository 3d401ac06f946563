// The listen/admin address checks of the preflight: overlaps, and addresses already in use.
#include "proxy/ops/preflight_addresses.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
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

void CheckBound(const std::string& key, const HostPort& addr, std::vector<PreflightProblem>* out) {
  if (addr.port == 0) return;  // a port the kernel picks is free
  int err = ProbeBind(addr);
  if (err == 0) return;
  std::string what = err == EADDRINUSE
                         ? Text(addr) + " is already in use by another process (another "
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
