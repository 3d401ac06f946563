// SPDX-License-Identifier: Apache-2.0
// PatroniCluster: PostgreSQL the way production teams run it, for tests: one etcd and three
// PostgreSQL nodes, each under its own Patroni (Debian `patroni`, `etcd-server`), on free loopback
// ports in a temp dir (on tmpfs when /dev/shm is writable), as the `postgres` user when root.
// Patroni decides who is primary; the tests only kill, pause, restart and ask for switchovers.
// Missing binaries -> Start fails loudly (tests never skip).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace idemgate::test {

// fork/exec `argv` with stdout and stderr appended to `log`; as the `postgres` user when
// `as_postgres` and running as root. The child gets SIGKILL when the calling thread exits.
// Returns the child's pid, or -1.
pid_t SpawnLogged(const std::vector<std::string>& argv, const std::string& log, bool as_postgres);

struct PatroniOptions {
  int nodes = 3;
  // Patroni's synchronous_mode and synchronous_mode_strict (off: the known danger, an
  // asynchronous node may be promoted).
  bool synchronous = true;
  // DCS timings: a vanished leader is replaced after about ttl + loop_wait seconds.
  int ttl = 12;
  int loop_wait = 2;
  int retry_timeout = 5;
};

class PatroniCluster {
 public:
  using Seconds = std::chrono::seconds;

  explicit PatroniCluster(PatroniOptions options = {}) : options_(options) {}
  ~PatroniCluster();  // stops Patroni, PostgreSQL and etcd (SIGKILL) and removes the directory
  PatroniCluster(const PatroniCluster&) = delete;
  PatroniCluster& operator=(const PatroniCluster&) = delete;

  // etcd, then every node's Patroni; waits until Healthy(). False with *error.
  bool Start(std::string* error);
  // One leader taking writes, (synchronous mode) one synchronous standby streaming, every other
  // node a running replica. Waits up to `timeout`; *error says what was missing.
  bool WaitHealthy(Seconds timeout, std::string* error);

  int Leader() const;       // the node whose REST API answers 200 to /primary, or -1
  int SyncStandby() const;  // the node answering 200 to /sync, or -1
  // The leader, when it takes writes and is not `not_this` (-1: any). Waits up to `timeout`.
  int WaitForLeader(Seconds timeout, int not_this = -1) const;

  bool KillNode(int node);      // SIGKILL to Patroni and its PostgreSQL (postmaster + children)
  bool KillPatroni(int node);   // SIGKILL to Patroni alone (PostgreSQL runs on, unmanaged)
  bool KillPostgres(int node);  // SIGKILL to PostgreSQL alone (Patroni restarts or demotes it)
  bool Pause(int node, bool paused);             // SIGSTOP / SIGCONT to Patroni and its PostgreSQL
  bool StartNode(int node, std::string* error);  // Patroni again (after KillNode/KillPatroni)
  // `patronictl switchover --force` to `candidate` (-1: Patroni picks). Does not wait.
  bool Switchover(int candidate, std::string* error);
  bool RestartEtcd(std::string* error);  // SIGKILL etcd, start it again on the same data

  int nodes() const { return static_cast<int>(nodes_.size()); }
  int pg_port(int node) const { return nodes_.at(node).pg_port; }
  int rest_port(int node) const { return nodes_.at(node).rest_port; }
  std::string name(int node) const { return "node" + std::to_string(node); }
  const std::string& root() const { return root_; }
  // One node's DSN, and every node's with target_session_attrs=read-write (libpq finds the
  // primary) and connect_timeout=10.
  std::string Dsn(int node) const;
  std::string MultiHostDsn() const;
  // Runs `sql` on `node`; the first column of the first row into *out (when not null).
  bool Exec(int node, const std::string& sql, std::string* out, std::string* error) const;
  // The status code of `method path` on the node's REST API, 0 when it does not answer.
  int RestStatus(int node, const std::string& method, const std::string& path) const;

  static std::string PgBinDir();  // empty when PostgreSQL's server is not installed

 private:
  struct Node {
    int pg_port = 0;
    int rest_port = 0;
    pid_t patroni = -1;
  };
  std::string NodeYaml(int node) const;
  std::string DcsYaml() const;
  bool StartEtcd(std::string* error);
  pid_t PostmasterPid(int node) const;
  std::string Missing() const;  // what Healthy() lacks, "" when healthy

  PatroniOptions options_;
  std::string root_;
  std::string bin_;
  int etcd_port_ = 0;
  int etcd_peer_port_ = 0;
  pid_t etcd_ = -1;
  std::vector<Node> nodes_;
};

}  // namespace idemgate::test
