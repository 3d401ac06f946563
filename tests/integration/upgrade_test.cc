// SPDX-License-Identifier: Apache-2.0
// Upgrades and restarts that refuse nobody (docs/operations-upgrade.md): under a load of
// guarded and passthrough requests on keep-alive connections, `idemgate --take-over` takes the
// listeners from the running gateway, which drains and exits; no connection is refused, every
// request gets its answer, every key executes once and its retry replays. The pause is logged.
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "tests/integration/gateway_fixture.h"
#include "tests/support/loopback.h"
#include "tests/support/pg_cluster.h"

namespace idemgate::test {
namespace {

using Clock = std::chrono::steady_clock;

// What the load saw; every counter but `stale` must stay 0.
struct LoadCounts {
  int refused = 0;      // a connect that failed
  int fresh_reset = 0;  // a new connection closed or reset before its first answer
  int lost = 0;         // a request that got no answer (timeout, a malformed one)
  int stale = 0;        // a reused keep-alive connection closed before the request's answer
                        // began: the client resends on a new connection (RFC 9112 §9.3.1)
  int bad_status = 0;
  int not_replayed = 0;  // a retry of a key that was not a replay of its first answer
  int answers = 0;
  int guarded = 0;
  int retries = 0;
  int passthrough = 0;
  std::vector<std::string> samples;  // the first few failures, for the message
};

// ~`connections` threads, each on its own keep-alive connection: guarded POSTs with fresh keys
// (every third retried once at once), and passthrough GETs between them.
class Load {
 public:
  Load(uint16_t port, int connections) : port_(port) {
    for (int i = 0; i < connections; ++i) threads_.emplace_back([this, i] { Run(i); });
  }
  ~Load() { Stop(); }

  void Stop() {
    stop_ = true;
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  int answers() const { return answers_.load(); }
  LoadCounts counts() const {
    std::lock_guard<std::mutex> lock(mu_);
    return counts_;
  }
  std::set<std::string> keys() const {
    std::lock_guard<std::mutex> lock(mu_);
    return keys_;
  }
  // When each answer arrived, in order.
  std::vector<Clock::time_point> times() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Clock::time_point> t = times_;
    std::sort(t.begin(), t.end());
    return t;
  }

 private:
  // Sends `spec` until it is answered: on a reused connection that closes before the answer
  // begins, once more on a new one; anything else is counted as a failure.
  HttpResponse Send(TestClient& client, bool& reused, const RequestSpec& spec) {
    for (int attempt = 0; attempt < 3; ++attempt) {
      if (!client.connected()) {
        reused = false;
        if (!client.Connect(port_)) {
          Count(&LoadCounts::refused, "connect failed");
          return {};
        }
      }
      HttpResponse r = client.Request(spec, std::chrono::seconds(15));
      if (r.ok()) {
        if (r.Header("Connection") == "close") client.Close();
        reused = client.connected();
        Arrived();
        return r;
      }
      client.Close();
      if (r.error == "timeout" || !r.raw.empty() || (r.error != "eof" && r.error != "reset")) {
        Count(&LoadCounts::lost, spec.target + ": " + r.error);
        return r;
      }
      if (!reused) {
        Count(&LoadCounts::fresh_reset, spec.target + ": " + r.error + " on a new connection");
        return r;
      }
      Count(&LoadCounts::stale, "");
    }
    return {};
  }

  void Run(int index) {
    TestClient client;
    bool reused = false;
    for (int n = 0; !stop_; ++n) {
      std::string key = "up-" + std::to_string(index) + "-" + std::to_string(n);
      RequestSpec post{"POST", "/v1/payment_intents", kMerchant, "{\"key\":\"" + key + "\"}"};
      post.headers.emplace_back("Idempotency-Key", key);
      HttpResponse first = Send(client, reused, post);
      if (first.status == 0) continue;
      Record(key, first.status == 201, &LoadCounts::guarded);
      if (n % 3 == 0) {
        HttpResponse again = Send(client, reused, post);
        if (again.status == 0) continue;
        bool replayed = again.Header("Idempotent-Replayed") == "true" && again.body == first.body;
        Record("", replayed, &LoadCounts::retries, &LoadCounts::not_replayed);
      }
      HttpResponse get = Send(client, reused, {"GET", "/v1/payment_intents/pi_1", kMerchant, ""});
      if (get.status != 0) Record("", get.status == 201, &LoadCounts::passthrough);
    }
  }

  void Arrived() {
    answers_++;
    std::lock_guard<std::mutex> lock(mu_);
    times_.push_back(Clock::now());
  }
  void Count(int LoadCounts::*field, const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    counts_.*field += 1;
    if (!what.empty() && counts_.samples.size() < 5) counts_.samples.push_back(what);
  }
  void Record(const std::string& key, bool good, int LoadCounts::*kind,
              int LoadCounts::*bad = &LoadCounts::bad_status) {
    std::lock_guard<std::mutex> lock(mu_);
    counts_.answers++;
    counts_.*kind += 1;
    if (!good) counts_.*bad += 1;
    if (!key.empty()) keys_.insert(key);
  }

  const uint16_t port_;
  std::atomic<bool> stop_{false};
  std::atomic<int> answers_{0};
  mutable std::mutex mu_;
  LoadCounts counts_;
  std::set<std::string> keys_;
  std::vector<Clock::time_point> times_;
  std::vector<std::thread> threads_;
};

bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  for (auto deadline = Clock::now() + timeout; Clock::now() < deadline;) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return done();
}

// A datagram socket standing in for systemd's $NOTIFY_SOCKET: what the gateways tell it.
class NotifySocket {
 public:
  explicit NotifySocket(std::string path) : path_(std::move(path)) {
    fd_.Reset(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path_.c_str());
    EXPECT_EQ(bind(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << path_;
  }
  const std::string& path() const { return path_; }
  // The next message; "" after `timeout`.
  std::string Receive(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    pollfd p{fd_.get(), POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return "";
    char buf[512];
    ssize_t n = recv(fd_.get(), buf, sizeof(buf), 0);
    return n > 0 ? std::string(buf, n) : "";
  }

 private:
  std::string path_;
  UniqueFd fd_;
};

// A gateway this test did not start (the running one's child): ended when the test ends.
struct Stranger {
  pid_t pid = -1;
  ~Stranger() {
    if (pid > 0) Stop(SIGKILL);
  }
  // Sends `sig` and waits until the process is gone (or a zombie of a parent that exited).
  bool Stop(int sig) {
    if (pid <= 0 || kill(pid, sig) != 0) return false;
    bool gone = WaitUntil(
        [&] {
          std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
          std::string line;
          if (!std::getline(stat, line)) return true;
          size_t at = line.rfind(')');
          return at != std::string::npos && line.size() > at + 2 && line[at + 2] == 'Z';
        },
        std::chrono::seconds(20));
    pid = -1;
    return gone;
  }
};

double Ms(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::microseconds>(d).count() / 1000.0;
}

class UpgradeTest : public GatewayTest {
 protected:
  void SetUp() override {
    GatewayTest::SetUp();
    // Every attempt takes a while upstream, so the handover always finds some in flight.
    upstream_.SetBehavior(UpstreamBehavior::Respond(201, R"({"id":"pi_1","state":"created"})",
                                                    {{"Content-Type", "application/json"}})
                              .WithDelay(20));
    Set("server", "shutdown_grace", "\"5s\"");
  }

  // Checks what the clients and the upstream saw; returns how many keys executed twice.
  int ExpectNothingLost(const Load& load) {
    const LoadCounts c = load.counts();
    std::string failures;
    for (const std::string& s : c.samples) failures += "\n  " + s;
    EXPECT_EQ(c.refused, 0) << failures;
    EXPECT_EQ(c.fresh_reset, 0) << failures;
    EXPECT_EQ(c.lost, 0) << failures;
    EXPECT_EQ(c.bad_status, 0) << failures;
    EXPECT_EQ(c.not_replayed, 0) << failures;
    // The upstream executed every answered key exactly once, retries and the handover included.
    std::map<std::string, int> executed;
    for (const RecordedRequest& r : upstream_.received()) {
      if (r.method == "POST") executed[r.body]++;
    }
    int twice = 0, missing = 0;
    for (const std::string& key : load.keys()) {
      int n = executed["{\"key\":\"" + key + "\"}"];
      twice += n > 1;
      missing += n == 0;
    }
    EXPECT_EQ(twice, 0);
    EXPECT_EQ(missing, 0);
    return twice;
  }

  // The load through a take-over by a second process started with `--take-over`; checks what
  // a client would notice and logs the pause.
  // `next_workers` > 0: the new process runs that many workers (the old one runs 2).
  void UpgradeUnderLoad(const char* label, int next_workers = 0) {
    StartWithAdmin();
    if (next_workers > 0) Set("server", "workers", std::to_string(next_workers));
    const std::string next_config = dir_.WriteFile("next.toml", ConfigText());
    Load load(port_, 16);
    ASSERT_TRUE(WaitUntil([&] { return load.answers() >= 300; }, std::chrono::seconds(20)));
    GatewayProcess next;
    const Clock::time_point start = Clock::now();
    ASSERT_TRUE(next.Start(IDEMGATE_BIN, {"--take-over", "--config", next_config})) << next.error();
    ASSERT_EQ(next.WaitForPort(), port_) << next.log();
    const Clock::time_point serving = Clock::now();
    std::optional<ExitStatus> old = gateway_.Wait(std::chrono::seconds(20));
    ASSERT_TRUE(old.has_value()) << gateway_.log();
    EXPECT_TRUE(old->exited() && old->code() == 0) << old->ToString() << gateway_.log();
    const Clock::time_point gone = Clock::now();
    const int before = load.answers();
    // After the old gateway is gone, the new one answers on the same port.
    EXPECT_TRUE(
        WaitUntil([&] { return load.answers() >= before + 300; }, std::chrono::seconds(20)));
    load.Stop();

    const LoadCounts c = load.counts();
    const int twice = ExpectNothingLost(load);
    // The admin listener came over too.
    uint16_t admin = next.WaitForPort("admin listening on ");
    EXPECT_EQ(admin, admin_port_) << next.log();
    TestClient probe(admin_port_);
    EXPECT_EQ(probe.Request("GET", "/readyz").status, 200);
    // The pause: the longest gap between two answers from the take-over's start until well
    // after the new gateway serves, and the time to the first answer after it listens.
    std::vector<Clock::time_point> t = load.times();
    double gap = 0, first_new = -1;
    for (size_t i = 1; i < t.size(); ++i) {
      if (t[i] < start || t[i - 1] > gone + std::chrono::milliseconds(500)) continue;
      gap = std::max(gap, Ms(t[i] - std::max(t[i - 1], start)));
      if (first_new < 0 && t[i] >= serving) first_new = Ms(t[i] - start);
    }
    printf(
        "[upgrade %s] answers %d (guarded %d, retries %d, passthrough %d); refused %d, lost %d, "
        "fresh resets %d, stale keep-alive resends %d, executed twice %d; take-over to new "
        "listening %.1f ms, to its first answer %.1f ms, old gone after %.1f ms, longest gap "
        "between answers %.1f ms\n",
        label, c.answers, c.guarded, c.retries, c.passthrough, c.refused, c.lost, c.fresh_reset,
        c.stale, twice, Ms(serving - start), first_new, Ms(gone - start), gap);
    fflush(stdout);
    next.Kill(SIGTERM);
    next.Wait();
  }
};

TEST_F(UpgradeTest, TakeOverUnderLoadRefusesNothingAndExecutesEachKeyOnce) {
  UpgradeUnderLoad("rocksdb");
}

// Every socket handed over is accepted from: with one worker it takes both (a socket nobody
// accepted from would hold the connections the kernel hashed to it); with three, the third
// binds its own into the same SO_REUSEPORT group.
TEST_F(UpgradeTest, TakeOverByFewerWorkersAcceptsFromEverySocket) {
  UpgradeUnderLoad("rocksdb, 2 -> 1 workers", 1);
}

TEST_F(UpgradeTest, TakeOverByMoreWorkersServesOnTheSamePort) {
  UpgradeUnderLoad("rocksdb, 2 -> 3 workers", 3);
}

// PostgreSQL: both gateways may serve at once, so the new one accepts before the old one drains.
class UpgradePgTest : public UpgradeTest {
 protected:
  void SetUp() override {
    UpgradeTest::SetUp();
    std::string error;
    ASSERT_TRUE(pg_.StartPrimary(&error)) << error;
    Set("store", "backend", "\"postgres\"");
    Set("store.postgres", "dsn", "\"" + pg_.Dsn(0) + "\"");
    Set("store.postgres", "connections", "4");
    Set("server", "handover_socket", "\"" + dir_.Path("handover") + "\"");
  }
  PgCluster pg_;
};

TEST_F(UpgradePgTest, TakeOverUnderLoadRefusesNothingAndExecutesEachKeyOnce) {
  UpgradeUnderLoad("postgres");
}

// `idemgate --upgrade`: the running gateway starts its successor itself (under systemd it is
// then in the service's cgroup), which tells $NOTIFY_SOCKET it is the main process now.
TEST_F(UpgradeTest, UpgradeCommandHandsOverToASuccessorThatBecomesTheMainProcess) {
  NotifySocket notify(dir_.Path("notify"));
  std::string path = dir_.WriteFile("idemgate.toml", ConfigText());
  ASSERT_TRUE(gateway_.Start(IDEMGATE_BIN, {"--config", path}, {"NOTIFY_SOCKET=" + notify.path()}))
      << gateway_.error();
  port_ = gateway_.WaitForPort();
  ASSERT_NE(port_, 0) << gateway_.log();
  EXPECT_EQ(notify.Receive(), "READY=1");
  Load load(port_, 8);
  ASSERT_TRUE(WaitUntil([&] { return load.answers() >= 200; }, std::chrono::seconds(20)));
  RunResult upgrade = RunGateway({"--upgrade", "--config", path});
  EXPECT_EQ(upgrade.code, 0) << upgrade.output << gateway_.log();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(upgrade.output, m, std::regex("new gateway \\(pid ([0-9]+)\\)")))
      << upgrade.output;
  Stranger successor{std::stoi(m[1].str())};  // ended with the test, whatever happens below
  EXPECT_NE(upgrade.output.find("upgrade: pid " + m[1].str() + " serves"), std::string::npos)
      << upgrade.output;
  EXPECT_NE(successor.pid, gateway_.pid());
  EXPECT_EQ(notify.Receive(), "MAINPID=" + m[1].str());  // before the old one exits
  EXPECT_EQ(notify.Receive(), "READY=1");
  std::optional<ExitStatus> old = gateway_.Wait(std::chrono::seconds(20));
  ASSERT_TRUE(old.has_value());
  EXPECT_TRUE(old->exited() && old->code() == 0) << old->ToString();
  const int before = load.answers();
  EXPECT_TRUE(WaitUntil([&] { return load.answers() >= before + 200; }, std::chrono::seconds(20)));
  load.Stop();
  ExpectNothingLost(load);
  EXPECT_TRUE(successor.Stop(SIGTERM));
}

// A successor that cannot start is reported by the running gateway, which serves on.
TEST_F(UpgradeTest, UpgradeWhoseSuccessorFailsLeavesTheRunningGatewayServing) {
  StartGateway();
  // --upgrade checks this copy; the successor reads the running gateway's own file, now broken.
  std::string copy = dir_.WriteFile("copy.toml", ConfigText());
  dir_.WriteFile("idemgate.toml", ConfigText() + "[listen]\nnope = 1\n");
  RunResult upgrade = RunGateway({"--upgrade", "--config", copy});
  EXPECT_EQ(upgrade.code, 1) << upgrade.output;
  EXPECT_NE(upgrade.output.find("exited with status 1 before taking over"), std::string::npos)
      << upgrade.output;
  HttpResponse r = Post("still-served", "{}");
  EXPECT_EQ(r.status, 201) << r.raw;
  EXPECT_TRUE(gateway_.running());
}

// A port nobody listens on right now.
uint16_t UnusedPort() {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len);
  return ntohs(addr.sin_port);
}

// A restart-only key applied by a take-over: a new listen.address is bound afresh, and the old
// one closes with the old gateway.
TEST_F(UpgradeTest, TakeOverWithANewListenAddressBindsIt) {
  StartGateway();
  const uint16_t old_port = port_;
  const uint16_t new_port = UnusedPort();
  Set("listen", "address", "\"127.0.0.1:" + std::to_string(new_port) + "\"");
  GatewayProcess next;
  ASSERT_TRUE(next.Start(IDEMGATE_BIN,
                         {"--take-over", "--config", dir_.WriteFile("next.toml", ConfigText())}))
      << next.error();
  EXPECT_EQ(next.WaitForPort(), new_port) << next.log();
  EXPECT_NE(next.log().find("binding it afresh"), std::string::npos) << next.log();
  EXPECT_TRUE(gateway_.Wait(std::chrono::seconds(10)).has_value());
  port_ = new_port;
  HttpResponse r = Post("on-the-new-port", "{}");
  EXPECT_EQ(r.status, 201) << r.raw;
  errno = 0;
  EXPECT_FALSE(ConnectLoopback(old_port).valid());
  EXPECT_EQ(errno, ECONNREFUSED);
  next.Kill(SIGTERM);
  next.Wait();
}

TEST_F(UpgradeTest, TakeOverWithNoRunningGatewayFailsClearly) {
  std::string path = dir_.WriteFile("idemgate.toml", ConfigText());
  auto started = Clock::now();
  RunResult r = RunGateway({"--take-over", "--config", path});
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("cannot take over: no running gateway"), std::string::npos) << r.output;
  EXPECT_LT(Clock::now() - started, std::chrono::seconds(5));
  // It created nothing: no store, no control socket of its own.
  EXPECT_FALSE(std::filesystem::exists(dir_.Path("data.handover")));
}

TEST_F(UpgradeTest, AStaleSocketFromAKilledGatewayIsReplacedAtStart) {
  StartGateway();
  ASSERT_TRUE(std::filesystem::exists(dir_.Path("data.handover")));
  RestartGateway();  // SIGKILL: the old socket file stays; the new start replaces it
  GatewayProcess next;
  ASSERT_TRUE(next.Start(IDEMGATE_BIN, {"--take-over", "--config", dir_.Path("idemgate.toml")}))
      << next.error();
  EXPECT_EQ(next.WaitForPort(), port_) << next.log();
  EXPECT_TRUE(gateway_.Wait(std::chrono::seconds(10)).has_value());
  HttpResponse r = Post("after-restart", "{}");
  EXPECT_EQ(r.status, 201) << r.raw;
  next.Kill(SIGTERM);
  next.Wait();
}

}  // namespace
}  // namespace idemgate::test
