// SPDX-License-Identifier: Apache-2.0
// An in-memory HTTP/2 client (h2_test_client.h) on a real socket to the gateway.
#pragma once

#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <functional>
#include <string>

#include "tests/support/h2_test_client.h"

namespace idemgate::test {

// Moves bytes between an in-memory HTTP/2 client and its socket to the gateway until `done()`
// or the timeout; false on timeout.
inline bool PumpSocket(h2test::TestClient& client, int fd, const std::function<bool()>& done,
                       std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string out = client.TakeOutput();
    for (size_t sent = 0; sent < out.size();) {
      const ssize_t n = send(fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return done();
      sent += static_cast<size_t>(n);
    }
    if (done()) return true;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 20) <= 0) continue;
    char buf[16384];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return done();
    client.Feed(std::string(buf, static_cast<size_t>(n)));
  }
  return false;
}

}  // namespace idemgate::test
