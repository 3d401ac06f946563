// SPDX-License-Identifier: Apache-2.0
// A real PostgreSQL cluster for tests.
#include "tests/support/pg_cluster.h"

#include <arpa/inet.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "tests/support/loopback.h"

namespace idemgate::test {
namespace {

namespace fs = std::filesystem;

int FreePort() {
  uint16_t port = 0;
  BindLoopback(&port);  // closed at once: the port is free until something else takes it
  return port;
}

bool RunningAsRoot() { return geteuid() == 0; }

std::string Quote(const std::string& s) { return "'" + s + "'"; }

// Server settings for tests: quick, replication-ready.
constexpr const char* kSettings =
    " -c listen_addresses=127.0.0.1 -c shared_buffers=128MB"
    " -c max_connections=300 -c wal_level=replica -c max_wal_senders=5 -c hot_standby=on"
    " -c log_min_messages=warning";

}  // namespace

std::string PgCluster::BinDir() {
  const char* env = std::getenv("IDEMGATE_PG_BIN");
  if (env != nullptr && *env != '\0') return env;
  std::error_code ec;
  std::string best;
  for (const auto& e : fs::directory_iterator("/usr/lib/postgresql", ec)) {
    if (fs::exists(e.path() / "bin" / "postgres") && e.path().string() > best) best = e.path();
  }
  return best.empty() ? "" : best + "/bin";
}

PgCluster::~PgCluster() {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    std::string ignored;
    Run(bin_ + "/pg_ctl -D " + Quote(nodes_[i].dir) + " -m immediate -w stop", &ignored);
    Kill9(static_cast<int>(i));
  }
  std::error_code ec;
  if (!root_.empty()) fs::remove_all(root_, ec);
}

bool PgCluster::Run(const std::string& command, std::string* error) const {
  std::string log = root_ + "/cmd.log";
  std::string line = RunningAsRoot() ? "runuser -u postgres -- " + command : command;
  int rc = std::system((line + " >" + Quote(log) + " 2>&1").c_str());
  if (rc == 0) return true;
  std::ifstream in(log);
  std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  *error = "`" + command + "` failed (" + std::to_string(rc) + "): " + out;
  return false;
}

bool PgCluster::StartPrimary(std::string* error) {
  bin_ = BinDir();
  if (bin_.empty()) {
    *error =
        "no PostgreSQL server binaries under /usr/lib/postgresql (apt-get install "
        "postgresql; scripts/test installs it)";
    return false;
  }
  std::string tmpl = (fs::temp_directory_path() / "idemgate-pg-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) {
    *error = "mkdtemp failed";
    return false;
  }
  root_ = tmpl;
  if (RunningAsRoot()) {
    passwd* pw = getpwnam("postgres");
    if (pw == nullptr || chown(root_.c_str(), pw->pw_uid, pw->pw_gid) != 0) {
      *error = "running as root needs the `postgres` user (from the postgresql package)";
      return false;
    }
  }
  nodes_.push_back(Node{root_ + "/n0", FreePort()});
  std::string copy = Template(error);
  if (copy.empty()) return false;
  if (!Run("cp -a " + Quote(copy) + " " + Quote(nodes_[0].dir), error)) return false;
  // The port FreePort found can be taken by another test before the server binds it: then the
  // server exits saying so, and starts again on another.
  for (int attempt = 0;; ++attempt) {
    if (StartNode(0, error)) return true;
    std::ifstream log(nodes_[0].dir + ".log");
    const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    if (attempt == 2 || text.find("Address already in use") == std::string::npos) return false;
    nodes_[0].port = FreePort();
  }
}

// initdb takes seconds; every cluster starts from a copy of one made once per machine and user.
std::string PgCluster::Template(std::string* error) const {
  const std::string path =
      (fs::temp_directory_path() / ("idemgate-pg-template-" + std::to_string(geteuid()) + "-" +
                                    fs::path(bin_).parent_path().filename().string()))
          .string();
  if (fs::exists(path + "/PG_VERSION")) return path;
  std::string fresh = root_ + "/template";
  if (!Run(bin_ + "/initdb -D " + Quote(fresh) + " -U idemgate --auth=trust -N", error)) return "";
  std::error_code ec;
  fs::rename(fresh, path, ec);  // another process may have won the race: its copy is as good
  return fs::exists(path + "/PG_VERSION") ? path : "";
}

bool PgCluster::StartNode(int node, std::string* error) {
  const Node& n = nodes_.at(node);
  std::string opts = "-p " + std::to_string(n.port) + " -k " + root_ + kSettings +
                     (fsync_ ? "" : " -c fsync=off -c full_page_writes=off");
  return Run(bin_ + "/pg_ctl -D " + Quote(n.dir) + " -l " + Quote(n.dir + ".log") +
                 " -w -t 60 -o " + Quote(opts) + " start",
             error);
}

bool PgCluster::Start(int node, std::string* error) { return StartNode(node, error); }

bool PgCluster::Stop(int node) {
  std::string error;
  return Run(bin_ + "/pg_ctl -D " + Quote(nodes_.at(node).dir) + " -m fast -w stop", &error);
}

int PgCluster::AddStandby(bool synchronous, std::string* error) {
  int index = static_cast<int>(nodes_.size());
  std::string name = "standby" + std::to_string(index);
  nodes_.push_back(Node{root_ + "/n" + std::to_string(index), FreePort()});
  std::string conn = "application_name=" + name;
  if (!Run(bin_ + "/pg_basebackup -h 127.0.0.1 -p " + std::to_string(nodes_[0].port) +
               " -U idemgate -D " + Quote(nodes_[index].dir) + " -R -X stream -d " + Quote(conn),
           error) ||
      !StartNode(index, error)) {
    return -1;
  }
  if (synchronous) {
    std::string sql = "ALTER SYSTEM SET synchronous_standby_names = 'FIRST 1 (" + name + ")'";
    if (!Exec(0, sql, nullptr, error) || !Exec(0, "SELECT pg_reload_conf()", nullptr, error)) {
      return -1;
    }
  }
  // Wait until node 0 streams to it (and counts it as synchronous when asked).
  std::string want = synchronous ? "sync" : "async";
  for (int i = 0; i < 600; ++i) {
    std::string state;
    if (Exec(0,
             "SELECT sync_state FROM pg_stat_replication WHERE application_name = '" + name +
                 "' AND state = 'streaming'",
             &state, error) &&
        state == want) {
      return index;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a server-side state: polled
  }
  *error = "the standby never streamed as " + want;
  return -1;
}

bool PgCluster::Promote(int node, std::string* error) {
  if (!Run(bin_ + "/pg_ctl -D " + Quote(nodes_.at(node).dir) + " -w -t 60 promote", error)) {
    return false;
  }
  std::string in_recovery;
  return Exec(node, "SELECT pg_is_in_recovery()::text", &in_recovery, error) &&
         in_recovery == "false";
}

pid_t PgCluster::PostmasterPid(int node) const {
  std::ifstream in(nodes_.at(node).dir + "/postmaster.pid");
  pid_t pid = 0;
  in >> pid;
  return pid;
}

bool PgCluster::Kill9(int node) {
  pid_t pm = PostmasterPid(node);
  if (pm <= 0 || kill(pm, 0) != 0) return false;
  std::vector<pid_t> children;
  for (const auto& e : fs::directory_iterator("/proc")) {
    pid_t pid = atoi(e.path().filename().c_str());
    if (pid <= 0) continue;
    std::ifstream stat(e.path() / "stat");
    std::string comm, st;
    pid_t p = 0, ppid = 0;
    stat >> p >> comm >> st >> ppid;
    if (ppid == pm) children.push_back(pid);
  }
  kill(pm, SIGKILL);
  for (pid_t c : children) kill(c, SIGKILL);
  for (int i = 0; i < 500 && kill(pm, 0) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // reaped by init: polled
  }
  return true;
}

pid_t PgCluster::WalReceiverPid(int node) const {
  std::string pid, error;
  if (!Exec(node, "SELECT pid FROM pg_stat_wal_receiver", &pid, &error)) return 0;
  return atoi(pid.c_str());
}

std::string LoopbackDsn(int port, const std::string& extra) {
  return "host=127.0.0.1 port=" + std::to_string(port) + " user=idemgate dbname=postgres" + extra;
}

std::string LoopbackMultiHostDsn(const std::vector<int>& ports, const std::string& extra) {
  std::string hosts, list;
  for (int port : ports) {
    hosts += (hosts.empty() ? "" : ",") + std::string("127.0.0.1");
    list += (list.empty() ? "" : ",") + std::to_string(port);
  }
  return "host=" + hosts + " port=" + list +
         " user=idemgate dbname=postgres target_session_attrs=read-write" + extra;
}

bool ExecSql(const std::string& dsn, const std::string& sql, std::string* out, std::string* error) {
  PGconn* c = PQconnectdb(dsn.c_str());
  bool ok = PQstatus(c) == CONNECTION_OK;
  if (ok) {
    PGresult* r = PQexec(c, sql.c_str());
    ExecStatusType st = PQresultStatus(r);
    ok = st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK;
    if (ok && out != nullptr) *out = PQntuples(r) > 0 ? PQgetvalue(r, 0, 0) : "";
    if (!ok) *error = PQresultErrorMessage(r);
    PQclear(r);
  } else {
    *error = PQerrorMessage(c);
  }
  PQfinish(c);
  return ok;
}

std::string PgCluster::Dsn(int node) const { return LoopbackDsn(nodes_.at(node).port); }

std::string PgCluster::MultiHostDsn() const {
  std::vector<int> ports;
  for (const Node& n : nodes_) ports.push_back(n.port);
  return LoopbackMultiHostDsn(ports);
}

bool PgCluster::Exec(int node, const std::string& sql, std::string* out, std::string* error) const {
  return ExecSql(Dsn(node), sql, out, error);
}

}  // namespace idemgate::test
