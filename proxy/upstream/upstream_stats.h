// SPDX-License-Identifier: Apache-2.0
// Per-server counters and state of the upstream groups, for /metrics and /readyz. Every worker
// loop has its own copy of each group, so each (loop, server) has an entry written by that loop
// alone (relaxed atomics, no lock on the data plane); the admin thread sums them by server.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "proxy/upstream/upstream_types.h"

namespace idemgate {

class UpstreamStats {
 public:
  // One loop's view of one server. The counters and flags are written by that loop only.
  struct Entry {
    std::string group;                  // "default" or the [upstreams.NAME] name
    std::string server;                 // "host:port" as configured
    std::string address;                // the numeric address it resolved to
    std::atomic<uint64_t> requests{0};  // calls sent to it (a retry on another server counts there)
    std::array<std::atomic<uint64_t>, kUpstreamErrorKinds> errors{};  // by UpstreamError
    std::atomic<uint64_t> taken_out{0};      // times taken out (connect failed, nothing sent)
    std::atomic<uint64_t> health_failed{0};  // times taken out by a failed health check
    std::atomic<int64_t> out_until_ms{0};    // steady-clock ms; passive take-out, 0: none
    std::atomic<bool> health_down{false};
    std::atomic<bool> gone{false};  // its name no longer resolves to this address

    void SetReason(std::string why);  // why it was last taken out
    std::string Reason() const;

   private:
    mutable std::mutex mu_;
    std::string reason_;
  };

  // A new entry (any thread); the pointer stays valid for the life of this object.
  Entry* Add(std::string group, std::string server, std::string address);

  // The entries of every loop summed by (group, server, address), in the order first added.
  struct Server {
    std::string group, server, address;
    uint64_t requests = 0, taken_out = 0, health_failed = 0;
    std::array<uint64_t, kUpstreamErrorKinds> errors{};
    int loops_up = 0, loops_out = 0, loops_health_down = 0;  // loops that see it so now
    std::string reason;                                      // of a loop that has it out
  };
  std::vector<Server> Snapshot() const;

  // Named groups ("default" excluded) whose every server is out in some loop, each with why:
  // "payments: every server is out: a:1 (127.0.0.1) taken out: Connection refused; ...".
  std::vector<std::string> GroupsDown() const;

 private:
  mutable std::mutex mu_;
  std::deque<Entry> entries_;  // a deque: Entry does not move
};

}  // namespace idemgate
