// The Exchange under [[routes]], in-process (tests/unit/exchange_fakes.h): the matching route's
// group, timeouts and limits reach the upstream call, its lease and ttl the claim, and a status in
// its no_store_statuses is answered with the claim released, even when the release fails.
#include <gtest/gtest.h>

#include <map>

#include "conf/config.h"
#include "proxy/exchange/exchange.h"
#include "tests/unit/exchange/exchange_fakes.h"

namespace idemgate {
namespace {

Request Post(const std::string& target, const std::string& key, std::string body = "{}") {
  Request r;
  r.method = "POST";
  r.target = target;
  r.headers = {{"Host", "api"}, {"Authorization", "Bearer merchant-1"}};
  if (!key.empty()) r.headers.push_back({"Idempotency-Key", key});
  r.body = std::move(body);
  return r;
}

UpstreamResult Answer(int status) {
  UpstreamResult r;
  r.response.status = status;
  r.response.reason = "Too Many Requests";
  r.response.body = R"({"error":"slow down"})";
  return r;
}

class ExchangeRoutesTest : public test::ExchangeFixture {
 protected:
  ExchangeRoutesTest() {
    ConfigResult r = ParseConfig(R"(
[upstreams.reports]
url = "http://reports:8000"
response_timeout = "2m"
[[routes]]
prefix = "/v1/payments"
no_store_statuses = [429]
[[routes]]
prefix = "/v1/reports"
upstream = "reports"
idempotency = { lease = "3m", ttl = "7d" }
limits = { max_response_body = "64MiB", max_request_body = 10 }
)",
                                 "routes.toml");
    EXPECT_TRUE(r.ok()) << r.error;
    config_ = r.config;
  }
};

TEST_F(ExchangeRoutesTest, TheRoutesGroupLimitsAndLeaseReachTheCallAndTheClaim) {
  Begin(Post("/v1/reports/monthly", "k1"));
  Settle();
  ASSERT_EQ(env_.upstream.size(), 1u);
  const UpstreamLimits& limits = env_.upstream[0].limits;
  EXPECT_EQ(limits.group, "reports");
  EXPECT_EQ(limits.response_timeout_ms, 120'000);
  EXPECT_EQ(limits.max_response_body, 64u << 20);
  ASSERT_EQ(store_.records.size(), 1u);
  const Record& record = store_.records.begin()->second;
  EXPECT_EQ(record.lease_until_ms - clock_.NowMs(), 180'000);
  EXPECT_EQ(record.expires_ms - clock_.NowMs(), 7 * 86'400'000LL);

  Begin(Post("/v1/other", "k2"));  // no route: the top level
  Settle();
  ASSERT_EQ(env_.upstream.size(), 2u);
  EXPECT_EQ(env_.upstream[1].limits.group, "");
  EXPECT_EQ(env_.upstream[1].limits.max_response_body, 8u << 20);
}

TEST_F(ExchangeRoutesTest, BodyOverTheRoutesLimitIs413AndNothingIsClaimed) {
  size_t id = Begin(Post("/v1/reports/monthly", "k1", std::string(11, 'x')));
  ASSERT_EQ(sinks_[id]->answers.size(), 1u);
  EXPECT_EQ(sinks_[id]->answers[0].response.status, 413);
  EXPECT_EQ(store_.claims, 0);
  EXPECT_TRUE(env_.upstream.empty());
}

TEST_F(ExchangeRoutesTest, NoStoreStatusIsAnsweredAndTheKeyIsFreeAgain) {
  size_t first = Begin(Post("/v1/payments", "k1"));
  Settle();
  AnswerUpstream(0, Answer(429));
  EXPECT_TRUE(sinks_[first]->answers.empty());  // after the release
  Settle();
  ASSERT_EQ(sinks_[first]->answers.size(), 1u);
  EXPECT_EQ(sinks_[first]->answers[0].response.status, 429);
  EXPECT_EQ(sinks_[first]->answers[0].response.body, R"({"error":"slow down"})");
  EXPECT_EQ(store_.releases, 1);
  EXPECT_TRUE(store_.records.empty());
  Begin(Post("/v1/payments", "k1"));  // the retry executes again
  Settle();
  EXPECT_EQ(env_.upstream.size(), 2u);
}

TEST_F(ExchangeRoutesTest, NoStoreStatusIsAnsweredEvenWhenTheReleaseFails) {
  size_t first = Begin(Post("/v1/payments", "k1"));
  Settle();
  store_.FailNext(StoreCode::kIoError);
  AnswerUpstream(0, Answer(429));
  Settle();
  ASSERT_EQ(sinks_[first]->answers.size(), 1u);
  EXPECT_EQ(sinks_[first]->answers[0].response.status, 429);
  // The record stays in flight: a retry gets 409 until the lease ends, then takes over.
  ASSERT_EQ(store_.records.size(), 1u);
  EXPECT_EQ(store_.records.begin()->second.state, RecordState::kInFlight);
  size_t retry = Begin(Post("/v1/payments", "k1"));
  Settle();
  EXPECT_EQ(sinks_[retry]->answers.at(0).response.status, 409);
}

TEST_F(ExchangeRoutesTest, AStatusNotListedIsStoredAsAlways) {
  Begin(Post("/v1/other", "k1"));
  Settle();
  AnswerUpstream(0, Answer(429));
  Settle();
  EXPECT_EQ(store_.releases, 0);
  ASSERT_EQ(store_.records.size(), 1u);
  EXPECT_EQ(store_.records.begin()->second.state, RecordState::kCompleted);
}

}  // namespace
}  // namespace idemgate
