// SPDX-License-Identifier: Apache-2.0
// Handing the listening sockets from a running gateway to the process replacing it (an upgrade
// or a restart that refuses no connection, docs/operations-upgrade.md). The running gateway
// listens on a Unix control socket (server.handover_socket); `idemgate --take-over` connects,
// receives the listeners by SCM_RIGHTS, and answers "stop"; the old process drains, closes its
// store and says "closed"; the new one opens the store and accepts from the same sockets, whose
// backlog held every connection that came meanwhile.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "conf/config.h"

namespace idemgate {

// The control socket's path for `config`: server.handover_socket as given; when that is "",
// store.path + ".handover" for the embedded store, $RUNTIME_DIRECTORY/handover (or
// "idemgate.handover" in the working directory) for PostgreSQL; "" when it is "off".
std::string HandoverSocketPath(const Config& config);

// What the running gateway hands over: its listeners and what they listen on.
struct HandoverOffer {
  pid_t pid = 0;
  std::string listen_host;
  uint16_t listen_port = 0;  // the bound port
  std::string admin_host;    // "" = no admin listener
  uint16_t admin_port = 0;
  int64_t grace_ms = 0;         // its server.shutdown_grace: how long its drain may take
  std::vector<int> listen_fds;  // one per worker (SO_REUSEPORT)
  int admin_fd = -1;
};

// The running side: the control socket (0600, bound under a temporary name and renamed over
// the path, so a new gateway's socket replaces the old one's without a gap).
class HandoverListener {
 public:
  HandoverListener() = default;
  ~HandoverListener() { Close(); }
  HandoverListener(const HandoverListener&) = delete;
  HandoverListener& operator=(const HandoverListener&) = delete;

  bool Open(const std::string& path, std::string* error);
  int fd() const { return fd_; }
  // One pending connection (non-blocking), or -1 with *why: a peer of another user is refused.
  int Accept(std::string* why);
  // Closes the socket; the path is unlinked only while it is still this socket's.
  void Close();

 private:
  std::string path_;
  int fd_ = -1;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
};

// Sends `offer` with its fds in one message on `peer`.
bool SendOffer(int peer, const HandoverOffer& offer, std::string* error);

// The new side: connect, receive the offer, say "stop", wait for "closed".
class HandoverClient {
 public:
  HandoverClient() = default;
  ~HandoverClient();
  HandoverClient(const HandoverClient&) = delete;
  HandoverClient& operator=(const HandoverClient&) = delete;

  // Checks that `path` is a socket of this user, and connects.
  bool Connect(const std::string& path, std::string* error);
  bool Receive(HandoverOffer* offer, std::string* error);
  bool SendLine(std::string_view line, std::string* error);
  // One line (without its '\n') within `timeout_ms`: true with *line set, or with it empty at
  // EOF; false at the deadline.
  bool ReadLine(int64_t timeout_ms, std::string* line);
  // True once the old process says "closed" or is gone (EOF), within `timeout_ms`.
  bool WaitClosed(int64_t timeout_ms, std::string* error);
  void Close();

 private:
  int fd_ = -1;
};

// `idemgate --upgrade`: asks the running gateway to start its successor (`--take-over`, from
// the binary at the path it was started from) and waits until that one serves. The exit code.
int RunUpgrade(const Config& config);

}  // namespace idemgate
