// SPDX-License-Identifier: Apache-2.0
// Plain TCP sockets on 127.0.0.1, for tests that need what TestClient and FakeUpstream do not
// give: a raw connection (a reset, half-sent bytes, a small window, a filled backlog) or a port
// the test owns (one that refuses, listens and never answers, or is served by hand).
#pragma once

#include <cstdint>

#include "tests/support/ev_util.h"

namespace idemgate::test {

// A TCP socket (SOCK_CLOEXEC | `flags`, e.g. SOCK_NONBLOCK) connected to 127.0.0.1:`port`;
// `rcvbuf` > 0 sets SO_RCVBUF before the connect (so the window is small from the handshake on).
// Invalid when the connect fails (errno then says why); a non-blocking connect still in progress
// counts as made.
UniqueFd ConnectLoopback(uint16_t port, int flags = 0, int rcvbuf = 0);

// A TCP socket bound to 127.0.0.1 on a port the kernel picks (written to `*port`), not yet
// listening: bound but never listening, connections to it are refused. `reuse_address` sets
// SO_REUSEADDR first (for a port another socket binds again later). Invalid on failure.
UniqueFd BindLoopback(uint16_t* port, bool reuse_address = false);

}  // namespace idemgate::test
