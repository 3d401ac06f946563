// SPDX-License-Identifier: Apache-2.0
// A Patroni-managed PostgreSQL cluster with one etcd, for tests.
#include "tests/support/patroni_cluster.h"

#include <fcntl.h>
#include <grp.h>
#include <libpq-fe.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/support/http_client.h"
#include "tests/support/loopback.h"
#include "tests/support/pg_cluster.h"

extern char** environ;

namespace idemgate::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

int FreePort() {
  uint16_t port = 0;
  BindLoopback(&port);  // closed at once: the port is free until something else takes it
  return port;
}

std::string Quote(const std::string& s) { return "'" + s + "'"; }

// The children of `pid` (by /proc/*/stat's ppid).
std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    pid_t pid = atoi(e.path().filename().c_str());
    if (pid <= 0) continue;
    std::ifstream stat(e.path() / "stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    size_t close = text.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    pid_t ppid = 0;
    if (sscanf(text.c_str() + close + 1, " %c %d", &state, &ppid) == 2 && ppid == parent) {
      out.push_back(pid);
    }
  }
  return out;
}

bool Running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  size_t close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() && text[close + 2] != 'Z';
}

// SIGKILL to our child `pid`, reaped.
void KillChild(pid_t* pid) {
  if (*pid <= 0) return;
  kill(*pid, SIGKILL);
  waitpid(*pid, nullptr, 0);
  *pid = -1;
}

// The YAML for bootstrap.dcs and the node settings every node shares.
constexpr const char* kPgParameters = R"(      parameters:
        synchronous_commit: "on"
        fsync: "off"
        full_page_writes: "off"
        wal_log_hints: "on"
        max_connections: 300
        max_wal_senders: 10
        max_replication_slots: 10
        shared_buffers: 128MB
        log_min_messages: warning
)";

}  // namespace

pid_t SpawnLogged(const std::vector<std::string>& argv, const std::string& log, bool as_postgres) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  uid_t uid = 0;
  gid_t gid = 0;
  bool drop = as_postgres && geteuid() == 0;
  if (drop) {
    passwd* pw = getpwnam("postgres");
    if (pw == nullptr) return -1;
    uid = pw->pw_uid;
    gid = pw->pw_gid;
  }
  int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  if (drop && fchown(fd, uid, gid) != 0) {
    close(fd);
    return -1;
  }
  pid_t pid = fork();
  if (pid == 0) {  // only async-signal-safe calls from here
    if (drop && (setgroups(0, nullptr) != 0 || setgid(gid) != 0 || setuid(uid) != 0)) _exit(126);
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // after setuid, which clears it
    int null = open("/dev/null", O_RDONLY);
    dup2(null, 0);
    dup2(fd, 1);
    dup2(fd, 2);
    execve(args[0], args.data(), environ);
    _exit(127);
  }
  close(fd);
  return pid;
}

std::string PatroniCluster::PgBinDir() { return PgCluster::BinDir(); }

PatroniCluster::~PatroniCluster() {
  for (int i = 0; i < nodes(); ++i) KillNode(i);
  KillChild(&etcd_);
  std::error_code ec;
  if (!root_.empty() && std::getenv("IDEMGATE_KEEP_TEMP") == nullptr) fs::remove_all(root_, ec);
}

std::string PatroniCluster::DcsYaml() const {
  std::string sync = options_.synchronous ? "true" : "false";
  return "bootstrap:\n  dcs:\n    ttl: " + std::to_string(options_.ttl) +
         "\n    loop_wait: " + std::to_string(options_.loop_wait) +
         "\n    retry_timeout: " + std::to_string(options_.retry_timeout) +
         "\n    primary_start_timeout: 0\n    synchronous_mode: " + sync +
         "\n    synchronous_mode_strict: " + sync +
         "\n    postgresql:\n      use_pg_rewind: true\n      use_slots: true\n" + kPgParameters +
         "  initdb:\n    - auth: trust\n    - username: idemgate\n";
}

std::string PatroniCluster::NodeYaml(int node) const {
  const Node& n = nodes_.at(node);
  std::string me = name(node), rest = "127.0.0.1:" + std::to_string(n.rest_port),
              pg = "127.0.0.1:" + std::to_string(n.pg_port);
  return "scope: idemgate-test\nname: " + me + "\nrestapi:\n  listen: " + rest +
         "\n  connect_address: " + rest +
         "\netcd3:\n  hosts: 127.0.0.1:" + std::to_string(etcd_port_) + "\n" + DcsYaml() +
         "postgresql:\n  listen: " + pg + "\n  connect_address: " + pg + "\n  data_dir: " + root_ +
         "/" + me + "\n  bin_dir: " + bin_ + "\n  pgpass: " + root_ + "/" + me +
         ".pgpass\n  use_pg_rewind: true\n  remove_data_directory_on_rewind_failure: true\n"
         "  remove_data_directory_on_diverged_timelines: true\n"
         "  authentication:\n    superuser:\n      username: idemgate\n"
         "    replication:\n      username: idemgate\n    rewind:\n      username: idemgate\n"
         "  parameters:\n    unix_socket_directories: " +
         root_ +
         "\n  pg_hba:\n    - local all all trust\n    - host all all 127.0.0.1/32 trust\n"
         "    - host replication all 127.0.0.1/32 trust\n";
}

bool PatroniCluster::StartEtcd(std::string* error) {
  std::string client = "http://127.0.0.1:" + std::to_string(etcd_port_);
  std::string peer = "http://127.0.0.1:" + std::to_string(etcd_peer_port_);
  etcd_ = SpawnLogged(
      {"/usr/bin/etcd", "--name", "etcd0", "--data-dir", root_ + "/etcd", "--listen-client-urls",
       client, "--advertise-client-urls", client, "--listen-peer-urls", peer,
       "--initial-advertise-peer-urls", peer, "--initial-cluster", "etcd0=" + peer,
       "--heartbeat-interval", "250", "--election-timeout", "2500"},
      root_ + "/etcd.log", true);
  for (auto deadline = std::chrono::steady_clock::now() + 30s;
       std::chrono::steady_clock::now() < deadline;) {
    TestClient c(static_cast<uint16_t>(etcd_port_));
    if (c.connected() && c.Request("GET", "/health", {}, {}, 2s).status == 200) return true;
    if (waitpid(etcd_, nullptr, WNOHANG) == etcd_) break;
    std::this_thread::sleep_for(100ms);  // a server starting: polled
  }
  *error = "etcd did not become healthy (apt-get install etcd-server); see " + root_ + "/etcd.log";
  return false;
}

bool PatroniCluster::Start(std::string* error) {
  bin_ = PgBinDir();
  if (bin_.empty() || !fs::exists("/usr/bin/patroni") || !fs::exists("/usr/bin/etcd")) {
    *error =
        "needs PostgreSQL, /usr/bin/patroni and /usr/bin/etcd (apt-get install postgresql "
        "patroni etcd-server; scripts/test installs them)";
    return false;
  }
  std::error_code ec;
  fs::path base = access("/dev/shm", W_OK) == 0 ? fs::path("/dev/shm") : fs::temp_directory_path();
  std::string tmpl = (base / "idemgate-patroni-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) {
    *error = "mkdtemp failed";
    return false;
  }
  root_ = tmpl;
  if (geteuid() == 0) {
    passwd* pw = getpwnam("postgres");
    if (pw == nullptr || chown(root_.c_str(), pw->pw_uid, pw->pw_gid) != 0) {
      *error = "running as root needs the `postgres` user (from the postgresql package)";
      return false;
    }
  }
  etcd_port_ = FreePort();
  etcd_peer_port_ = FreePort();
  for (int i = 0; i < options_.nodes; ++i) nodes_.push_back(Node{FreePort(), FreePort(), -1});
  if (!StartEtcd(error)) return false;
  for (int i = 0; i < nodes(); ++i) {
    std::ofstream(root_ + "/" + name(i) + ".yml") << NodeYaml(i);
    if (!StartNode(i, error)) return false;
    if (i == 0 && WaitForLeader(60s) != 0) {  // node0 bootstraps; the others copy it
      *error = "node0 did not bootstrap; see " + root_ + "/node0.log";
      return false;
    }
  }
  return WaitHealthy(90s, error);
}

bool PatroniCluster::StartNode(int node, std::string* error) {
  Node& n = nodes_.at(node);
  if (n.patroni > 0) KillChild(&n.patroni);
  n.patroni = SpawnLogged({"/usr/bin/patroni", root_ + "/" + name(node) + ".yml"},
                          root_ + "/" + name(node) + ".log", true);
  if (n.patroni > 0) return true;
  *error = "could not start Patroni for " + name(node);
  return false;
}

int PatroniCluster::RestStatus(int node, const std::string& method, const std::string& path) const {
  TestClient c(static_cast<uint16_t>(nodes_.at(node).rest_port));
  return c.connected() ? c.Request(method, path, {}, {}, 3s).status : 0;
}

int PatroniCluster::Leader() const {
  for (int i = 0; i < nodes(); ++i) {
    if (RestStatus(i, "OPTIONS", "/primary") == 200) return i;
  }
  return -1;
}

int PatroniCluster::SyncStandby() const {
  for (int i = 0; i < nodes(); ++i) {
    if (RestStatus(i, "GET", "/sync") == 200) return i;
  }
  return -1;
}

int PatroniCluster::WaitForLeader(Seconds timeout, int not_this) const {
  for (auto deadline = std::chrono::steady_clock::now() + timeout;
       std::chrono::steady_clock::now() < deadline;) {
    int leader = Leader();
    std::string in_recovery, error;
    if (leader >= 0 && leader != not_this &&
        Exec(leader, "SELECT pg_is_in_recovery()::text", &in_recovery, &error) &&
        in_recovery == "false") {
      return leader;
    }
    std::this_thread::sleep_for(200ms);  // Patroni's state: polled
  }
  return -1;
}

std::string PatroniCluster::Missing() const {
  int leader = Leader();
  if (leader < 0) return "no leader";
  std::string streaming, sync, error;
  if (!Exec(leader,
            "SELECT count(*) FILTER (WHERE state = 'streaming') || ' ' || count(*) FILTER "
            "(WHERE state = 'streaming' AND sync_state = 'sync') FROM pg_stat_replication",
            &streaming, &error)) {
    return "the leader does not answer: " + error;
  }
  std::string want = std::to_string(nodes() - 1) + (options_.synchronous ? " 1" : " 0");
  if (streaming != want) return "streaming / sync standbys: " + streaming + ", want " + want;
  if (options_.synchronous && SyncStandby() < 0) return "no node answers /sync";
  return "";
}

bool PatroniCluster::WaitHealthy(Seconds timeout, std::string* error) {
  std::string missing;
  for (auto deadline = std::chrono::steady_clock::now() + timeout;
       std::chrono::steady_clock::now() < deadline;) {
    missing = Missing();
    if (missing.empty()) return true;
    std::this_thread::sleep_for(250ms);  // Patroni's state: polled
  }
  *error = "the cluster is not healthy: " + missing + " (logs in " + root_ + ")";
  return false;
}

pid_t PatroniCluster::PostmasterPid(int node) const {
  std::ifstream in(root_ + "/" + name(node) + "/postmaster.pid");
  pid_t pid = 0;
  in >> pid;
  return pid > 0 && Running(pid) ? pid : 0;
}

bool PatroniCluster::KillPostgres(int node) {
  pid_t pm = PostmasterPid(node);
  if (pm <= 0) return false;
  std::vector<pid_t> children = ChildrenOf(pm);
  kill(pm, SIGKILL);
  for (pid_t c : children) kill(c, SIGKILL);
  for (int i = 0; i < 500 && Running(pm); ++i) {
    std::this_thread::sleep_for(10ms);  // reaped by Patroni or init: polled
  }
  return true;
}

bool PatroniCluster::KillPatroni(int node) {
  Node& n = nodes_.at(node);
  if (n.patroni <= 0) return false;
  KillChild(&n.patroni);
  return true;
}

bool PatroniCluster::KillNode(int node) {
  pid_t pm = PostmasterPid(node);
  std::vector<pid_t> children = pm > 0 ? ChildrenOf(pm) : std::vector<pid_t>{};
  bool killed = KillPatroni(node);
  if (pm > 0) {
    kill(pm, SIGKILL);
    for (pid_t c : children) kill(c, SIGKILL);
    for (int i = 0; i < 500 && Running(pm); ++i) std::this_thread::sleep_for(10ms);
  }
  return killed || pm > 0;
}

bool PatroniCluster::Pause(int node, bool paused) {
  int sig = paused ? SIGSTOP : SIGCONT;
  pid_t pm = PostmasterPid(node);
  if (nodes_.at(node).patroni > 0) kill(nodes_[node].patroni, sig);
  if (pm <= 0) return false;
  for (pid_t c : ChildrenOf(pm)) kill(c, sig);
  return kill(pm, sig) == 0;
}

bool PatroniCluster::Switchover(int candidate, std::string* error) {
  int leader = Leader();
  if (leader < 0) {
    *error = "no leader to switch over from";
    return false;
  }
  std::string cmd = "/usr/bin/patronictl -c " + Quote(root_ + "/" + name(0) + ".yml") +
                    " switchover --force --leader " + name(leader) +
                    (candidate >= 0 ? " --candidate " + name(candidate) : "");
  if (geteuid() == 0) cmd = "runuser -u postgres -- " + cmd;
  std::string log = root_ + "/switchover.log";
  int rc = std::system((cmd + " >>" + Quote(log) + " 2>&1").c_str());
  if (rc == 0) return true;
  *error = "`" + cmd + "` failed; see " + log;
  return false;
}

bool PatroniCluster::RestartEtcd(std::string* error) {
  KillChild(&etcd_);
  return StartEtcd(error);
}

std::string PatroniCluster::Dsn(int node) const {
  return LoopbackDsn(nodes_.at(node).pg_port, " connect_timeout=3");
}

std::string PatroniCluster::MultiHostDsn() const {
  std::vector<int> ports;
  for (const Node& n : nodes_) ports.push_back(n.pg_port);
  return LoopbackMultiHostDsn(ports, " connect_timeout=10");
}

bool PatroniCluster::Exec(int node, const std::string& sql, std::string* out,
                          std::string* error) const {
  return ExecSql(Dsn(node), sql, out, error);
}

}  // namespace idemgate::test
