// SPDX-License-Identifier: Apache-2.0
// PgCluster: a real PostgreSQL for tests, in a temp dir, on free loopback ports: a primary and
// optionally a standby (synchronous or not); kill -9, stop, start, promote, and SQL through
// libpq. The server refuses to run as root, so as root it runs as the `postgres` user.
// No server binaries -> every call fails loudly (tests never skip).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace idemgate::test {

// "host=127.0.0.1 port=P user=idemgate dbname=postgres" + `extra` (" connect_timeout=3").
std::string LoopbackDsn(int port, const std::string& extra = "");
// Every port's host in one libpq DSN with target_session_attrs=read-write (libpq finds the
// primary), + `extra`.
std::string LoopbackMultiHostDsn(const std::vector<int>& ports, const std::string& extra = "");
// Runs `sql` on a new connection to `dsn`; the first column of the first row into *out (when
// not null); false with the server's or libpq's message in *error.
bool ExecSql(const std::string& dsn, const std::string& sql, std::string* out, std::string* error);

class PgCluster {
 public:
  PgCluster() = default;
  ~PgCluster();  // stops every node (immediate) and removes the directory
  PgCluster(const PgCluster&) = delete;
  PgCluster& operator=(const PgCluster&) = delete;

  // Before StartPrimary: fsync on (benchmarks); tests run with fsync off (they kill processes,
  // never the machine).
  void set_fsync(bool on) { fsync_ = on; }
  // initdb + start node 0. False with *error (e.g. "no PostgreSQL server binaries ...").
  bool StartPrimary(std::string* error);
  // pg_basebackup from node 0 into a new node, started; returns its index or -1. With
  // `synchronous`, node 0 then waits for it on every commit (FIRST 1).
  int AddStandby(bool synchronous, std::string* error);

  int port(int node) const { return nodes_.at(node).port; }
  // "host=127.0.0.1 port=P user=idemgate dbname=postgres" for one node...
  std::string Dsn(int node) const;
  // ...or every node, with target_session_attrs=read-write (libpq finds the primary).
  std::string MultiHostDsn() const;

  bool Kill9(int node);                        // the postmaster and all its children
  bool Stop(int node);                         // pg_ctl -m fast stop
  bool Start(int node, std::string* error);    // pg_ctl start (after Stop or Kill9)
  bool Promote(int node, std::string* error);  // pg_ctl promote, waits until it accepts writes
  pid_t WalReceiverPid(int node) const;        // the standby's walreceiver, 0 if none

  // Runs `sql` on `node`; the first column of the first row into *out (when not null).
  bool Exec(int node, const std::string& sql, std::string* out, std::string* error) const;

  static std::string BinDir();  // empty when the server is not installed

 private:
  struct Node {
    std::string dir;
    int port = 0;
  };
  bool Run(const std::string& command, std::string* error) const;  // as the server's user
  pid_t PostmasterPid(int node) const;
  bool StartNode(int node, std::string* error);
  std::string Template(std::string* error) const;  // a fresh initdb's directory, made once

  std::string root_;  // the temp dir (owned by the server's user)
  std::string bin_;
  std::vector<Node> nodes_;
  bool fsync_ = false;
};

}  // namespace idemgate::test
