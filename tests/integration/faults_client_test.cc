// SPDX-License-Identifier: Apache-2.0
// Through the real binary: a client that leaves after its request went upstream (the exchange
// still completes and stores), and a crash mid-flight whose dead attempt never writes a result.
#include <netinet/in.h>
#include <sys/socket.h>

#include "tests/integration/gateway_fixture.h"
#include "tests/support/loopback.h"

namespace idemgate::test {
namespace {

using namespace std::chrono_literals;

// Retries `key` until it stops answering 409 (bounded); returns the last answer.
HttpResponse RetryUntilSettled(const std::function<HttpResponse()>& post) {
  HttpResponse r;
  auto deadline = std::chrono::steady_clock::now() + 10s;
  do {
    r = post();
    if (r.status != 409) break;
    std::this_thread::sleep_for(50ms);
  } while (std::chrono::steady_clock::now() < deadline);
  return r;
}

class FaultsClientTest : public GatewayTest,
                         public ::testing::WithParamInterface<bool /*reset*/> {};

TEST_P(FaultsClientTest, ClientGoneAfterForwardStillStores) {
  upstream_.SetBehavior(UpstreamBehavior::Respond(201, "paid once").WithDelay(600));
  StartGateway();
  RequestSpec spec{"POST", "/v1/payment_intents", kMerchant, R"({"amount":"5"})"};
  spec.headers.emplace_back("Idempotency-Key", "k-gone");
  std::string bytes = TestClient::BuildRequest(spec);
  if (GetParam()) {  // leaves with a TCP reset (SO_LINGER 0)
    UniqueFd fd = ConnectLoopback(port_);
    ASSERT_TRUE(fd.valid());
    ASSERT_EQ(send(fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
    ASSERT_TRUE(upstream_.WaitForRequests(1));
    linger lg{1, 0};
    setsockopt(fd.get(), SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  } else {  // leaves with a FIN
    TestClient client(port_);
    ASSERT_TRUE(client.SendRaw(bytes));
    ASSERT_TRUE(upstream_.WaitForRequests(1));
    client.Close();
  }
  HttpResponse r = RetryUntilSettled([&] { return Post("k-gone", R"({"amount":"5"})"); });
  EXPECT_EQ(r.status, 201) << r.raw;
  EXPECT_EQ(r.body, "paid once");
  EXPECT_EQ(r.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(upstream_.requests(), 1);
}

INSTANTIATE_TEST_SUITE_P(Faults, FaultsClientTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Reset" : "Fin"; });

// Complements TakeoverAfterCrashWhileInFlight: the upstream's late answer to the dead attempt
// is never what gets stored; the replay is the takeover's own result.
TEST_F(GatewayTest, FaultsCrashDeadAttemptNeverWritesItsResult) {
  Set("upstream", "connect_timeout", "\"100ms\"");
  Set("upstream", "response_timeout", "\"500ms\"");
  Set("idempotency", "lease", "\"1s\"");
  upstream_.EnqueueBehavior(UpstreamBehavior::Respond(201, "attempt 1").WithDelay(300));
  upstream_.SetBehavior(UpstreamBehavior::Respond(201, "attempt 2"));
  StartGateway();
  std::thread doomed([&] { Post("k-dead", "{}"); });
  ASSERT_TRUE(upstream_.WaitForRequests(1));
  RestartGateway();  // kill -9 while attempt 1 waits for its answer
  doomed.join();
  HttpResponse early = Post("k-dead", "{}");
  EXPECT_EQ(early.status, 409) << early.raw;
  EXPECT_NE(early.body.find("idempotency_key_in_use"), std::string::npos);
  HttpResponse later = RetryUntilSettled([&] { return Post("k-dead", "{}"); });
  EXPECT_EQ(later.status, 201) << later.raw;
  EXPECT_EQ(later.body, "attempt 2");
  EXPECT_EQ(upstream_.requests(), 2);
  HttpResponse replay = Post("k-dead", "{}");
  EXPECT_EQ(replay.body, "attempt 2");
  EXPECT_EQ(replay.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(upstream_.requests(), 2);
}

}  // namespace
}  // namespace idemgate::test
