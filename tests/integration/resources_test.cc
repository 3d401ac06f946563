// Through the real binary: the gateway's share of the host's resources. A second instance on
// the same address refuses to start; the descriptor limit, max_connections and the budget of
// unsent answers keep it up and cheap; a paused process still reads answers that arrived.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>

#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "tests/integration/gateway_fixture.h"

namespace idemgate::test {
namespace {

using namespace std::chrono_literals;

class ResourcesTest : public GatewayTest {};

// A second gateway on a listen address already served exits non-zero with a message naming
// listen.address, and the first keeps serving (SO_REUSEPORT would have split the traffic).
TEST_F(ResourcesTest, SecondInstanceOnTheSameAddressRefusesToStart) {
  StartGateway();
  Set("listen", "address", "\"127.0.0.1:" + std::to_string(port_) + "\"");
  Set("store", "path", "\"" + dir_.Path("data2") + "\"");
  std::string path = dir_.WriteFile("second.toml", ConfigText());
  GatewayProcess second;
  ASSERT_TRUE(second.Start(IDEMGATE_BIN, {"--config", path})) << second.error();
  std::optional<ExitStatus> status = second.Wait();
  ASSERT_TRUE(status.has_value()) << "the second instance is still running:\n" << second.log();
  EXPECT_TRUE(status->exited() && status->code() != 0) << status->ToString();
  EXPECT_NE(second.log().find("listen.address 127.0.0.1:" + std::to_string(port_) +
                              " is already in use"),
            std::string::npos)
      << second.log();
  for (int i = 0; i < 8; ++i) {  // every connection still reaches the first instance
    HttpResponse r = Post("k-first-" + std::to_string(i), "{}");
    EXPECT_EQ(r.status, 201) << r.error;
  }
  EXPECT_EQ(upstream_.requests(), 8);
}

// A pause longer than upstream.response_timeout (SIGSTOP, a stalled VM) while the upstream
// answers: on resume the answer is already in the socket, and the timer is due too. The answer
// wins: it is what the client gets and what is stored, not 504 upstream_timeout.
TEST_F(ResourcesTest, AnswerThatArrivedDuringAPauseIsNotATimeout) {
  Set("upstream", "connect_timeout", "\"1s\"");
  Set("upstream", "response_timeout", "\"1s\"");
  Set("idempotency", "lease", "\"5s\"");
  upstream_.SetBehavior(UpstreamBehavior::Respond(201, R"({"id":"pi_paused"})").WithDelay(200));
  StartGateway();
  HttpResponse first;
  std::thread client([&] { first = Post("k-paused", "{}"); });
  ASSERT_TRUE(upstream_.WaitForRequests(1));
  ASSERT_EQ(kill(gateway_.pid(), SIGSTOP), 0);
  // The pause itself is the fault: it must outlast response_timeout (the upstream answers
  // 200 ms into it).
  std::this_thread::sleep_for(1500ms);
  ASSERT_EQ(kill(gateway_.pid(), SIGCONT), 0);
  client.join();
  EXPECT_EQ(first.status, 201) << first.body;
  EXPECT_EQ(first.body, R"({"id":"pi_paused"})");
  HttpResponse retry = Post("k-paused", "{}");
  EXPECT_EQ(retry.status, 201) << retry.body;
  EXPECT_EQ(retry.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(upstream_.requests(), 1);
}

}  // namespace
}  // namespace idemgate::test
