// SPDX-License-Identifier: Apache-2.0
#include "tests/support/loopback.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>

namespace idemgate::test {
namespace {

sockaddr_in LoopbackAddress(uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  return addr;
}

}  // namespace

UniqueFd ConnectLoopback(uint16_t port, int flags, int rcvbuf) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | flags, 0));
  if (!fd.valid()) return fd;
  if (rcvbuf > 0) setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  sockaddr_in addr = LoopbackAddress(port);
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 &&
      errno != EINPROGRESS) {
    const int err = errno;
    fd.Reset();
    errno = err;  // the caller's reason, whatever close() did
  }
  return fd;
}

UniqueFd BindLoopback(uint16_t* port, bool reuse_address) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr = LoopbackAddress(0);
  socklen_t len = sizeof(addr);
  const int one = 1;
  if (fd.valid() && reuse_address)
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (!fd.valid() || bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return UniqueFd();
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

}  // namespace idemgate::test
