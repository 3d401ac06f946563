// SPDX-License-Identifier: Apache-2.0
// Shutdown (issue: exactly-once holes, item 3): an attempt still upstream when the grace period
// ends leaves a stored indeterminate answer, synced before exit, so a retry after the restart
// replays it instead of executing again; and the listener closes as soon as the drain starts.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "tests/integration/gateway_fixture.h"
#include "tests/support/loopback.h"

namespace idemgate::test {
namespace {

// True when a TCP connect to 127.0.0.1:port is refused (nobody listens).
bool ConnectRefused(uint16_t port) {
  errno = 0;
  return !ConnectLoopback(port).valid() && errno == ECONNREFUSED;
}

TEST_F(GatewayTest, AttemptCutByShutdownIsStoredAsIndeterminateAndReplayedAfterRestart) {
  upstream_.SetBehavior(UpstreamBehavior::Respond(201, "too late").WithDelay(6'000));
  Set("server", "shutdown_grace", "\"1s\"");
  StartGateway();
  HttpResponse answer;
  std::thread client([&] { answer = Post("k-cut", "{}"); });
  ASSERT_TRUE(upstream_.WaitForRequests(1));
  gateway_.Kill(SIGTERM);
  client.join();
  EXPECT_EQ(answer.status, 502) << answer.raw;
  EXPECT_EQ(ErrorCodeOf(answer), "upstream_failed");
  std::optional<ExitStatus> status = gateway_.Wait();
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(status->exited() && status->code() == 0) << status->ToString() << gateway_.log();
  // After the restart the retry replays the stored answer: the key never executes twice.
  upstream_.SetBehavior(UpstreamBehavior::Respond(201, "second execution"));
  StartGateway();
  HttpResponse retry = Post("k-cut", "{}");
  EXPECT_EQ(retry.status, 502);
  EXPECT_EQ(retry.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(upstream_.requests(), 1);
}

TEST_F(GatewayTest, ListenerClosesWhenTheDrainStarts) {
  upstream_.SetBehavior(UpstreamBehavior::Respond(201, "slow").WithDelay(1'500));
  Set("server", "shutdown_grace", "\"5s\"");
  StartGateway();
  HttpResponse answer;
  std::thread client([&] { answer = Post("k-drain", "{}"); });
  ASSERT_TRUE(upstream_.WaitForRequests(1));
  gateway_.Kill(SIGTERM);
  // While the in-flight request drains, a new client is refused at once instead of hanging in
  // a backlog nobody accepts from.
  bool refused = false;
  for (int i = 0; i < 100 && !refused; ++i) {
    refused = ConnectRefused(port_);
    if (!refused) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(refused);
  client.join();
  EXPECT_EQ(answer.status, 201);  // the request in progress still finished
  gateway_.Wait();
}

}  // namespace
}  // namespace idemgate::test
