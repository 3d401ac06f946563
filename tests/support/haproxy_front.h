// SPDX-License-Identifier: Apache-2.0
// HaproxyFront: HAProxy (Debian `haproxy`) in front of a PatroniCluster, the way teams route to
// the primary: TCP to whichever node's Patroni REST API answers 200 to OPTIONS /primary, with
// the sessions to a node marked down shut at once. One free loopback port, a temp config, the
// process stopped at destruction.
#pragma once

#include <sys/types.h>

#include <string>

#include "tests/support/patroni_cluster.h"

namespace idemgate::test {

class HaproxyFront {
 public:
  HaproxyFront() = default;
  ~HaproxyFront();  // SIGKILL and reap
  HaproxyFront(const HaproxyFront&) = delete;
  HaproxyFront& operator=(const HaproxyFront&) = delete;

  // Writes the config into the cluster's directory and starts haproxy; waits until it routes
  // to the current leader (a query through it answers). False with *error.
  bool Start(const PatroniCluster& cluster, std::string* error);
  int port() const { return port_; }
  // The DSN through HAProxy (one host: HAProxy's port).
  std::string Dsn() const;

  // The config text for `cluster`, listening on `port`.
  static std::string Config(const PatroniCluster& cluster, int port);

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace idemgate::test
