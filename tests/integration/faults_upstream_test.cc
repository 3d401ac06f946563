// SPDX-License-Identifier: Apache-2.0
// Through the real binary: SPEC R4 upstream faults after the request was sent (stored as the
// result, connection not reused), the same faults on passthrough (not stored), 1xx, chunked
// and close-delimited upstream responses replayed byte for byte.
#include <regex>

#include "tests/integration/gateway_fixture.h"

namespace idemgate::test {
namespace {

// The "error" member of a gateway JSON error body ("" when there is none).
struct FaultCase {
  const char* name;
  UpstreamBehavior behavior;
  int status;
  const char* code;
};
// gtest prints the case by name (not as a byte dump) in test lists and CI output.
void PrintTo(const FaultCase& c, std::ostream* os) { *os << c.name; }

std::vector<FaultCase> Cases() {
  return {
      {"ResetAfterRequest", UpstreamBehavior::Act(UpstreamAction::kResetAfterRequest), 502,
       "upstream_failed"},
      {"EofWithoutResponse", UpstreamBehavior::Act(UpstreamAction::kCloseAfterRequest), 502,
       "upstream_failed"},
      {"MalformedResponse", UpstreamBehavior::Act(UpstreamAction::kMalformed), 502,
       "upstream_failed"},
      {"PartialBodyThenClose", UpstreamBehavior::Act(UpstreamAction::kPartial), 502,
       "upstream_failed"},
      {"ResponseOverMaxBody", UpstreamBehavior::BigBody(64 << 10), 502, "upstream_failed"},
      {"NoResponseInTime", UpstreamBehavior::Act(UpstreamAction::kHang), 504,
       "upstream_timeout"},
  };
}

class FaultsUpstreamTest : public GatewayTest, public ::testing::WithParamInterface<FaultCase> {
 protected:
  void SetUp() override {
    GatewayTest::SetUp();
    Set("server", "workers", "1");  // one pool: a reused connection would be this one
    Set("upstream", "connect_timeout", "\"200ms\"");
    Set("upstream", "response_timeout", "\"600ms\"");
    Set("idempotency", "lease", "\"2s\"");
    Set("limits", "max_response_body", "\"16KiB\"");
  }
};

// R4: indeterminate outcomes are stored as the result; the retry replays them.
TEST_P(FaultsUpstreamTest, GuardedFaultIsStoredAndConnectionNotReused) {
  const FaultCase& c = GetParam();
  upstream_.EnqueueBehavior(c.behavior);
  StartGateway();
  HttpResponse first = Post("k-fault", R"({"amount":"1"})");
  ASSERT_EQ(first.status, c.status) << first.raw;
  EXPECT_EQ(ErrorCodeOf(first), c.code) << first.body;
  EXPECT_EQ(first.Header("Content-Type"), "application/json");
  EXPECT_FALSE(first.Header("Idempotent-Replayed").has_value());
  EXPECT_EQ(upstream_.requests(), 1);
  // Each answer says what happened: a too-large response is not called an incomplete one.
  bool too_large = std::string(c.name) == "ResponseOverMaxBody";
  EXPECT_EQ(first.body.find("max_response_body") != std::string::npos, too_large) << first.body;

  int accepted = upstream_.connections_accepted();
  HttpResponse replay = Post("k-fault", R"({"amount":"1"})");
  EXPECT_EQ(replay.status, c.status) << replay.raw;
  EXPECT_EQ(replay.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(WithoutReplayedHeader(replay.raw), WithoutRequestId(first.raw));
  EXPECT_EQ(upstream_.requests(), 1);  // the retry did not execute again

  // The next request needs a new upstream connection: the failed one was not pooled.
  HttpResponse next = Post("k-next", "{}");
  EXPECT_EQ(next.status, 201) << next.raw;
  EXPECT_EQ(upstream_.requests(), 2);
  EXPECT_EQ(upstream_.connections_accepted(), accepted + 1);
}

// The same faults on a passthrough request: answered, never stored (the retry executes). A
// passthrough answer is relayed as it arrives: one over max_response_body is relayed whole (that
// limit is for stored answers), and one cut after its head reaches the client cut (its
// Content-Length unmet, then the connection closed), as from the upstream itself.
TEST_P(FaultsUpstreamTest, PassthroughFaultIsNotStored) {
  const FaultCase& c = GetParam();
  const std::string name = c.name;
  upstream_.EnqueueBehavior(c.behavior);
  upstream_.EnqueueBehavior(c.behavior);
  StartGateway();
  for (int i = 1; i <= 2; ++i) {
    HttpResponse r = Post("", R"({"amount":"1"})");  // no key: not guarded
    EXPECT_FALSE(r.Header("Idempotent-Replayed").has_value());
    EXPECT_EQ(upstream_.requests(), i);
    if (name == "ResponseOverMaxBody") {
      EXPECT_EQ(r.status, 200) << r.raw;
      EXPECT_EQ(r.body.size(), size_t{64} << 10);
      continue;
    }
    if (name == "PartialBodyThenClose") {
      EXPECT_EQ(r.error, "eof") << r.raw;
      EXPECT_EQ(r.raw.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r.raw;
      EXPECT_NE(r.raw.find("Content-Length: 100\r\n"), std::string::npos) << r.raw;
      continue;
    }
    ASSERT_EQ(r.status, c.status) << r.raw;
    EXPECT_EQ(ErrorCodeOf(r), c.code) << r.body;
    EXPECT_FALSE(r.Header("Idempotent-Replayed").has_value());
    EXPECT_EQ(upstream_.requests(), i);
  }
  HttpResponse ok = Post("", "{}");
  EXPECT_EQ(ok.status, 201);
  EXPECT_EQ(upstream_.requests(), 3);
}

INSTANTIATE_TEST_SUITE_P(Faults, FaultsUpstreamTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return std::string(info.param.name); });

class FaultsFramingTest : public GatewayTest {
 protected:
  // First answer and replay for one upstream behaviour: both 201, byte-identical.
  void ExpectByteIdenticalReplay(UpstreamBehavior behavior, const std::string& key) {
    upstream_.EnqueueBehavior(std::move(behavior));
    HttpResponse first = Post(key, "{}");
    ASSERT_EQ(first.status, 201) << first.raw;
    EXPECT_EQ(first.body, "framed body: 0123456789");
    EXPECT_TRUE(first.interim_raw.empty()) << first.interim_raw;
    EXPECT_EQ(first.Header("Content-Length"), "23");
    EXPECT_FALSE(first.Header("Transfer-Encoding").has_value());
    int before = upstream_.requests();
    HttpResponse replay = Post(key, "{}");
    EXPECT_EQ(replay.Header("Idempotent-Replayed"), "true");
    EXPECT_EQ(WithoutReplayedHeader(replay.raw), WithoutRequestId(first.raw));
    EXPECT_EQ(upstream_.requests(), before);
  }
};

TEST_F(FaultsFramingTest, InterimChunkedAndCloseDelimitedAreReplayedByteForByte) {
  StartGateway();
  for (UpstreamAction action : {UpstreamAction::kInterim100, UpstreamAction::kChunked,
                                UpstreamAction::kCloseDelimited}) {
    UpstreamBehavior b = UpstreamBehavior::Respond(201, "framed body: 0123456789",
                                                   {{"X-Origin", "fake"}});
    b.action = action;
    SCOPED_TRACE(static_cast<int>(action));
    ExpectByteIdenticalReplay(b, "k-frame-" + std::to_string(static_cast<int>(action)));
  }
  EXPECT_EQ(upstream_.requests(), 3);
}

// A keep-alive connection is pooled and reused after a good response (the counterpart of the
// "not reused" checks above, so they can fail).
TEST_F(FaultsFramingTest, HealthyConnectionIsReused) {
  Set("server", "workers", "1");
  StartGateway();
  ASSERT_EQ(Post("k-a", "{}").status, 201);
  ASSERT_EQ(Post("k-b", "{}").status, 201);
  ASSERT_EQ(Post("", "{}").status, 201);
  EXPECT_EQ(upstream_.requests(), 3);
  EXPECT_EQ(upstream_.connections_accepted(), 1);
}

}  // namespace
}  // namespace idemgate::test
