// SPDX-License-Identifier: Apache-2.0
// HAProxy routing to the Patroni leader, for tests.
#include "tests/support/haproxy_front.h"

#include <libpq-fe.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/support/loopback.h"

namespace idemgate::test {

using namespace std::chrono_literals;

HaproxyFront::~HaproxyFront() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

std::string HaproxyFront::Config(const PatroniCluster& cluster, int port) {
  // inter 1s fall 2: a demoted or dead leader is out within ~2 s; shutdown-sessions closes the
  // gateways' connections to it, so they reconnect to the new leader instead of waiting.
  std::string text =
      "global\n  maxconn 1000\n"
      "defaults\n  mode tcp\n  timeout connect 3s\n  timeout client 30m\n  timeout server 30m\n"
      "  timeout check 2s\n"
      "listen postgres\n  bind 127.0.0.1:" +
      std::to_string(port) +
      "\n  option httpchk OPTIONS /primary\n  http-check expect status 200\n"
      "  default-server inter 1s fall 2 rise 2 on-marked-down shutdown-sessions\n";
  for (int i = 0; i < cluster.nodes(); ++i) {
    text += "  server " + cluster.name(i) + " 127.0.0.1:" + std::to_string(cluster.pg_port(i)) +
            " maxconn 300 check port " + std::to_string(cluster.rest_port(i)) + "\n";
  }
  return text;
}

std::string HaproxyFront::Dsn() const {
  return "host=127.0.0.1 port=" + std::to_string(port_) +
         " user=idemgate dbname=postgres connect_timeout=10";
}

bool HaproxyFront::Start(const PatroniCluster& cluster, std::string* error) {
  if (!std::filesystem::exists("/usr/sbin/haproxy")) {
    *error = "no /usr/sbin/haproxy (apt-get install haproxy; scripts/test installs it)";
    return false;
  }
  uint16_t port = 0;
  BindLoopback(&port);  // closed at once: free until something else takes it
  port_ = port;
  std::string cfg = cluster.root() + "/haproxy.cfg";
  std::ofstream(cfg) << Config(cluster, port_);
  // -db: stay in the foreground (our child), logs to stderr.
  pid_ =
      SpawnLogged({"/usr/sbin/haproxy", "-db", "-f", cfg}, cluster.root() + "/haproxy.log", false);
  // HAProxy counts every server up until its checks fail (`fall` of them): right after a start
  // it also routes to replicas. Ready once 6 connections in a row reach the primary.
  int in_a_row = 0;
  for (auto deadline = std::chrono::steady_clock::now() + 30s;
       std::chrono::steady_clock::now() < deadline;) {
    PGconn* c = PQconnectdb(Dsn().c_str());
    bool ok = PQstatus(c) == CONNECTION_OK;
    if (ok) {
      PGresult* r = PQexec(c, "SELECT pg_is_in_recovery()::text");
      ok = PQresultStatus(r) == PGRES_TUPLES_OK && std::string(PQgetvalue(r, 0, 0)) == "false";
      PQclear(r);
    }
    PQfinish(c);
    in_a_row = ok ? in_a_row + 1 : 0;
    if (in_a_row == 6) return true;
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) break;
    std::this_thread::sleep_for(200ms);  // the first health checks: polled
  }
  *error = "HAProxy did not route to the leader; see " + cluster.root() + "/haproxy.log";
  return false;
}

}  // namespace idemgate::test
