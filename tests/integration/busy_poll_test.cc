// SPDX-License-Identifier: Apache-2.0
// server.busy_poll through the real binary: with its workers polling instead of sleeping between
// events, the gateway answers as it does without (fresh keys executed once, replays byte for
// byte, a duplicate sent while its first attempt runs waits for its answer, passthrough), drains
// and exits on SIGTERM, and goes back to sleep once its clients stop: an idle gateway's CPU time
// stops growing. Requests closer together than the window keep a worker polling (the key
// reaches the workers), and a polling worker on every CPU is warned about at start-up.
#include <sched.h>

#include <atomic>
#include <thread>

#include "tests/integration/gateway_fixture.h"

namespace idemgate::test {
namespace {

using namespace std::chrono_literals;

class BusyPollTest : public GatewayTest {
 protected:
  void SetUp() override {
    GatewayTest::SetUp();
    Set("server", "busy_poll", "\"2ms\"");
    StartGateway();
  }
};

TEST_F(BusyPollTest, AnswersAndReplaysAsWithoutIt) {
  TestClient client(port_);
  HeaderList headers = kMerchant;
  headers.emplace_back("Idempotency-Key", "");
  std::vector<HttpResponse> first;
  for (int i = 0; i < 20; ++i) {
    headers.back().second = "bp-" + std::to_string(i);
    first.push_back(client.Request("POST", "/v1/payment_intents", headers, "{}"));
    ASSERT_EQ(first.back().status, 201) << first.back().raw;
  }
  for (int i = 0; i < 20; ++i) {
    headers.back().second = "bp-" + std::to_string(i);
    HttpResponse again = client.Request("POST", "/v1/payment_intents", headers, "{}");
    ASSERT_EQ(again.Header("Idempotent-Replayed"), "true") << again.raw;
    EXPECT_EQ(WithoutReplayedHeader(again.raw), WithoutRequestId(first[i].raw));
  }
  EXPECT_EQ(upstream_.requests(), 20);
  EXPECT_EQ(client.Request("GET", "/v1/payment_intents/pi_1", kMerchant).status, 201);
  EXPECT_EQ(upstream_.requests(), 21);
}

TEST_F(BusyPollTest, ADuplicateWaitsForTheFirstAttempt) {
  upstream_.SetBehavior(UpstreamBehavior::Respond(201, "once").WithDelay(300));
  HttpResponse a;
  std::thread first([&] { a = Post("bp-dup", "{}"); });
  ASSERT_TRUE(upstream_.WaitForRequests(1));
  HeaderList waiting = kMerchant;
  waiting.emplace_back("Prefer", "wait=5");
  HttpResponse b = Post("bp-dup", "{}", "/v1/payment_intents", waiting);
  first.join();
  EXPECT_EQ(a.status, 201);
  EXPECT_EQ(b.status, 201) << b.raw;
  EXPECT_EQ(b.body, "once");
  EXPECT_EQ(upstream_.requests(), 1);
}

TEST_F(BusyPollTest, AnIdleGatewaySleeps) {
  for (int i = 0; i < 50; ++i) ASSERT_EQ(Post("bp-idle-" + std::to_string(i), "{}").status, 201);
  std::this_thread::sleep_for(200ms);  // far past the 2 ms window
  const int64_t before = CpuMs(gateway_.pid());
  std::this_thread::sleep_for(1s);
  // Two workers polling without end would take one to two CPU seconds; asleep, close to none.
  EXPECT_LT(CpuMs(gateway_.pid()) - before, 250) << "the workers kept polling while idle";
}

// Requests 3 ms apart on one connection for 0.6 s, each well inside the 10 ms window: the worker
// that serves them never sleeps. The same stream with the key off is the baseline (about 15 ms of
// CPU in a release build, more under the sanitizers); polling through the whole stream, the
// worker takes most of a CPU, and even on a machine busy enough to leave it a tenth of one, 60 ms
// more than the baseline.
TEST_F(BusyPollTest, AWorkerPollsThroughTheGapsBetweenRequests) {
  auto stream_cpu = [&](const char* busy_poll) {
    Set("server", "busy_poll", busy_poll);
    RestartGateway();
    TestClient client(port_);
    const int64_t before = CpuMs(gateway_.pid());
    const auto end = std::chrono::steady_clock::now() + 600ms;
    while (std::chrono::steady_clock::now() < end) {
      EXPECT_EQ(client.Request("GET", "/v1/payment_intents/pi_1", kMerchant).status, 201);
      std::this_thread::sleep_for(3ms);
    }
    return CpuMs(gateway_.pid()) - before;
  };
  const int64_t sleeping = stream_cpu("\"0s\"");
  const int64_t polling = stream_cpu("\"10ms\"");
  EXPECT_GT(polling, sleeping + 60) << "busy_poll did not reach the workers (" << polling
                                    << " ms of CPU polling, " << sleeping << " without)";
}

// SIGTERM while a worker polls between a client's requests: it drains and exits cleanly.
TEST_F(BusyPollTest, DrainsAndExitsOnSigtermWhilePolling) {
  Set("server", "busy_poll", "\"10ms\"");
  RestartGateway();
  std::atomic<bool> stop{false};
  std::atomic<int> answered{0};
  std::thread traffic([&] {
    TestClient client(port_);
    while (!stop && client.Request("GET", "/v1/payment_intents/pi_1", kMerchant).status == 201) {
      ++answered;
      std::this_thread::sleep_for(1ms);
    }
  });
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (answered < 20 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_GE(answered.load(), 20);
  gateway_.Kill(SIGTERM);
  std::optional<ExitStatus> status = gateway_.Wait();
  stop = true;
  traffic.join();
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(status->exited() && status->code() == 0) << status->ToString() << gateway_.log();
}

// With a polling worker on every CPU nothing is left for the store thread, the upstream or the
// clients: the gateway says so at start-up, and not with fewer workers than CPUs.
TEST_F(BusyPollTest, StartUpWarnsWhenEveryCpuHasAPollingWorker) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  const int cpus = CPU_COUNT(&set);
  if (cpus > 64) GTEST_SKIP() << "server.workers is at most 64";
  const std::string warning = "server.busy_poll (2ms) with " + std::to_string(cpus) +
                              " workers on " + std::to_string(cpus) + " CPUs";
  Set("server", "workers", std::to_string(cpus));
  RestartGateway();
  ASSERT_EQ(Post("bp-warn", "{}").status, 201);
  EXPECT_NE(gateway_.log().find(warning), std::string::npos) << gateway_.log();
  if (cpus < 2) return;
  Set("server", "workers", std::to_string(cpus - 1));
  RestartGateway();
  ASSERT_EQ(Post("bp-nowarn", "{}").status, 201);
  EXPECT_EQ(gateway_.log().find("server.busy_poll ("), std::string::npos) << gateway_.log();
}

}  // namespace
}  // namespace idemgate::test
