// SPDX-License-Identifier: Apache-2.0
// The Exchange driven in-process (tests/unit/exchange_fakes.h): every SPEC §5 row, C3, R3a, R4,
// the completion retry and its backoff, the lease deadline, takeover, the client gone in each
// phase, and late callbacks after an early answer — with no processes and no sleeps.
#include "proxy/exchange/exchange.h"

#include <gtest/gtest.h>

#include "conf/config.h"
#include "tests/unit/exchange/exchange_fakes.h"

namespace idemgate {
namespace {

using test::FakeEnv;
using test::QueuedStore;
using test::RecordingSink;

Request Post(std::string key, std::string body = R"({"amount":100})") {
  Request r;
  r.method = "POST";
  r.target = "/v1/payment_intents";
  r.headers = {{"Host", "api"}, {"Authorization", "Bearer merchant-1"}};
  if (!key.empty()) r.headers.push_back({"Idempotency-Key", key});
  r.body = std::move(body);
  return r;
}

UpstreamResult Answer(int status, std::string body) {
  UpstreamResult r;
  r.response.status = status;
  r.response.reason = "Created";
  r.response.headers = {{"Location", "/v1/payment_intents/pi_1"}};
  r.response.body = std::move(body);
  return r;
}

UpstreamResult Failure(UpstreamError error, std::string detail) {
  UpstreamResult r;
  r.error = error;
  r.detail = std::move(detail);
  return r;
}

class ExchangeTest : public test::ExchangeFixture {
 protected:
  std::string Header(const StoredResponse& r, const std::string& name) {
    for (auto& [n, v] : r.headers) {
      if (n == name) return v;
    }
    return "";
  }
  // A fresh request for `key` run to its end with the upstream answering `body`.
  int RunFresh(const std::string& key, const std::string& body = "pi_1") {
    int id = Begin(Post(key));
    Settle();
    AnswerUpstream(env_.upstream.size() - 1, Answer(201, body));
    Settle();
    return id;
  }
};

TEST_F(ExchangeTest, FreshForwardsOnceThenStoresAndAnswersTheUpstreamResponse) {
  int id = Begin(Post("k1"));
  EXPECT_EQ(Get(id)->phase(), Phase::kClaiming);
  Settle();
  ASSERT_EQ(env_.upstream.size(), 1u);
  EXPECT_EQ(Get(id)->phase(), Phase::kForwarding);
  EXPECT_NE(env_.upstream[0].request.find("Idempotency-Key: k1"), std::string::npos);  // G3
  AnswerUpstream(0, Answer(201, "pi_1"));
  EXPECT_EQ(Get(id)->phase(), Phase::kCompleting);
  EXPECT_TRUE(sinks_[id]->answers.empty());  // C2: not before the completion is durable
  Settle();
  EXPECT_EQ(Only(id).response.status, 201);
  EXPECT_FALSE(Only(id).replayed);
  EXPECT_EQ(Get(id), nullptr);  // freed
  EXPECT_EQ(env_.samples.back().outcome, Outcome::kFresh);
}

TEST_F(ExchangeTest, ReplayIsTheStoredResponseFromTheFastPathWithoutTheWriter) {
  RunFresh("k1");
  int claims = store_.claims;
  int id = Begin(Post("k1"));  // answered synchronously: no store op queued
  EXPECT_EQ(store_.queued(), 0u);
  EXPECT_EQ(store_.claims, claims);
  EXPECT_TRUE(Only(id).replayed);
  EXPECT_EQ(Only(id).response.body, "pi_1");
  EXPECT_EQ(env_.upstream.size(), 1u);
}

TEST_F(ExchangeTest, InFlightWithLiveLeaseIs409WithRetryAfterOnBothPaths) {
  Begin(Post("k1"));
  Settle();  // forwarding, lease 30 s
  clock_.Advance(10'500);
  int fast = Begin(Post("k1"));
  EXPECT_EQ(Only(fast).response.status, 409);
  EXPECT_EQ(Header(Only(fast).response, "Retry-After"), "20");
  // The same answer from the writer's decision (one table: JudgeRecord).
  ClaimRequest claim;
  std::optional<Record> rec = store_.records.begin()->second;
  claim.fingerprint = rec->fingerprint;
  ClaimDecision d = DecideClaim(rec, claim, "k", ClaimTime{clock_.NowMs(), clock_.NowMs()}, 7);
  EXPECT_EQ(d.result.outcome, ClaimOutcome::kInFlight);
  EXPECT_EQ(d.result.retry_after_s, 20);
}

TEST_F(ExchangeTest, DifferentBodyIs422NamingBothFingerprints) {
  RunFresh("k1");
  int id = Begin(Post("k1", R"({"amount":999})"));
  EXPECT_EQ(Only(id).response.status, 422);
  EXPECT_NE(Only(id).response.body.find("was already used for a different request"),
            std::string::npos);
  EXPECT_EQ(env_.upstream.size(), 1u);
}

TEST_F(ExchangeTest, ExpiredLeaseIsTakenOverAndTheOldAttemptsResultIsRefusedC3) {
  int a = Begin(Post("k1"));
  Settle();
  clock_.Advance(30'000);  // A's lease is over
  int b = Begin(Post("k1"));
  Settle();
  ASSERT_EQ(env_.upstream.size(), 2u);
  EXPECT_EQ(env_.samples.size(), 0u);
  AnswerUpstream(0, Answer(201, "from-a"));  // the superseded attempt finishes
  Settle();
  EXPECT_EQ(Only(a).response.status, 409);  // C3: not its result
  AnswerUpstream(1, Answer(201, "from-b"));
  Settle();
  EXPECT_EQ(Only(b).response.body, "from-b");
  EXPECT_EQ(store_.records.begin()->second.attempt, 2u);
  EXPECT_EQ(Only(Begin(Post("k1"))).response.body, "from-b");  // the one result
}

// An attempt that went upstream and then lost its key says so, with where its time went: the
// operator's evidence that the request may have executed twice (a stalled process or disk).
TEST_F(ExchangeTest, AnAttemptTakenOverAfterItWentUpstreamSaysWhereItsTimeWent) {
  int a = Begin(Post("k1"));
  Settle();
  env_.Advance(31'000);  // A's upstream call outlives the 30 s lease (a stalled process)
  int b = Begin(Post("k1"));
  Settle();
  ASSERT_EQ(env_.upstream.size(), 2u);  // B took over: the upstream runs the request again
  env_.Advance(2'000);
  AnswerUpstream(0, Answer(201, "from-a"));
  Settle();
  EXPECT_EQ(Only(a).response.status, 409);
  ASSERT_EQ(env_.log_lines.size(), 1u);
  EXPECT_NE(env_.log_lines[0].find("\"error_detail\":\"attempt 1 was taken over: 33000 ms after "
                                   "its claim (lease 30000 ms); upstream started after 0 ms and "
                                   "took 33000 ms, completion sent 0 ms after\""),
            std::string::npos)
      << env_.log_lines[0];
  AnswerUpstream(1, Answer(201, "from-b"));
  Settle();
  EXPECT_EQ(Only(b).response.body, "from-b");
}

TEST_F(ExchangeTest, UnreachableUpstreamReleasesTheFirstAttemptsRecordR3a) {
  int id = Begin(Post("k1"));
  Settle();
  AnswerUpstream(0, Failure(UpstreamError::kUnavailable, "connect failed: refused"));
  EXPECT_EQ(Get(id)->phase(), Phase::kReleasing);
  Settle();
  EXPECT_EQ(Only(id).response.status, 502);
  EXPECT_TRUE(store_.records.empty());  // the key may be retried
  EXPECT_NE(env_.log_lines.back().find("\"error_detail\":\"connect failed: refused\""),
            std::string::npos);
}

TEST_F(ExchangeTest, ReleasedTakeoverKeepsItsAttemptWithAnExpiredLease) {
  Begin(Post("k1"));
  Settle();
  clock_.Advance(31'000);
  int b = Begin(Post("k1"));
  Settle();
  AnswerUpstream(1, Failure(UpstreamError::kUnavailable, "refused"));
  Settle();
  EXPECT_EQ(Only(b).response.status, 502);
  ASSERT_EQ(store_.records.size(), 1u);
  const Record& r = store_.records.begin()->second;
  EXPECT_EQ(r.attempt, 2u);
  EXPECT_EQ(r.state, RecordState::kInFlight);
  EXPECT_LE(r.lease_until_ms, clock_.NowMs());
}

TEST_F(ExchangeTest, ResetAfterSendIsStoredAs502AndTimeoutAs504R4) {
  int a = Begin(Post("k1"));
  Settle();
  AnswerUpstream(0, Failure(UpstreamError::kFailed, "upstream closed the connection"));
  Settle();
  EXPECT_EQ(Only(a).response.status, 502);
  EXPECT_EQ(Only(Begin(Post("k1"))).response.status, 502);  // replayed
  int b = Begin(Post("k2"));
  Settle();
  AnswerUpstream(1, Failure(UpstreamError::kTimeout, "no complete response"));
  Settle();
  EXPECT_EQ(Only(b).response.status, 504);
  EXPECT_TRUE(Only(Begin(Post("k2"))).replayed);
}

TEST_F(ExchangeTest, FailedCompleteIsRetriedWithBackoffUntilStored) {
  int id = Begin(Post("k1"));
  Settle();
  store_.FailNext(StoreCode::kNoSpace, 2);
  AnswerUpstream(0, Answer(201, "pi_1"));
  Settle();
  EXPECT_EQ(Get(id)->phase(), Phase::kBackoff);
  EXPECT_EQ(store_.completes, 1);
  env_.Advance(49);
  EXPECT_EQ(store_.queued(), 0u);  // not before 50 ms
  env_.Advance(1);
  Settle();
  EXPECT_EQ(store_.completes, 2);  // failed again: next wait is 100 ms
  env_.Advance(99);
  EXPECT_EQ(store_.queued(), 0u);
  env_.Advance(1);
  Settle();
  EXPECT_EQ(store_.completes, 3);
  EXPECT_EQ(Only(id).response.status, 201);
  EXPECT_EQ(Get(id), nullptr);
}

TEST_F(ExchangeTest, CompleteThatNeverSucceedsWithinTheLeaseAnswers502OutcomeUnknown) {
  int id = Begin(Post("k1"));
  Settle();
  store_.FailNext(StoreCode::kIoError, 1'000);
  AnswerUpstream(0, Answer(201, "pi_1"));
  Settle();
  env_.Advance(40'000);
  Settle();
  EXPECT_EQ(Only(id).response.status, 502);
  EXPECT_NE(Only(id).response.body.find("outcome is unknown"), std::string::npos);
  // Retries stopped before the lease (less the margin) ended, so a takeover cannot race them.
  EXPECT_LE(store_.completes, 20);
}

TEST_F(ExchangeTest, UpstreamDeadlineEndsBeforeTheLeaseLessTheMargin) {
  clock_.Advance(0);
  Begin(Post("k1"));
  int64_t claimed_at = env_.MonoUs();
  Settle();
  ASSERT_EQ(env_.upstream.size(), 1u);
  auto deadline_us = std::chrono::duration_cast<std::chrono::microseconds>(
                         env_.upstream[0].limits.deadline.time_since_epoch())
                         .count();
  EXPECT_EQ(deadline_us - claimed_at, (30'000 - 1'000) * 1000LL);  // lease - margin
}

TEST_F(ExchangeTest, ClaimThatTookTheWholeLeaseIsReleasedAndNotForwarded) {
  // The store decided in time; only its result is late: with the claim timeout out of the way,
  // the lease check is what answers.
  auto config = std::make_shared<Config>(*config_);
  config->store.confirm_timeout_ms = 60'000;
  config_ = config;
  int id = Begin(Post("k1"));
  store_.Step();           // decided at t=0 with a 30 s lease
  env_.Advance(29'500);    // the result reaches the loop late (a paused process)
  env_.RunPosted();
  Settle();
  EXPECT_TRUE(env_.upstream.empty());
  EXPECT_EQ(Only(id).response.status, 503);
  EXPECT_NE(Only(id).response.body.find("\"not_forwarded\""), std::string::npos);  // not the store
  EXPECT_TRUE(store_.records.empty());
}

TEST_F(ExchangeTest, TakeoverOffNeverReexecutesALostAttemptC5) {
  auto config = std::make_shared<Config>(*config_);
  config->idempotency.takeover = false;
  config_ = config;
  int a = Begin(Post("k1"));
  Settle();
  Get(a)->DetachClient();  // the attempt is lost (as after a crash)
  clock_.Advance(31'000);
  int b = Begin(Post("k1"));
  Settle();
  EXPECT_EQ(env_.upstream.size(), 1u);  // only the first attempt ever went upstream
  EXPECT_EQ(Only(b).response.status, 502);
  EXPECT_NE(Only(b).response.body.find("outcome is unknown"), std::string::npos);
  int c = Begin(Post("k1"));
  EXPECT_TRUE(Only(c).replayed);
  EXPECT_EQ(Only(c).response, Only(b).response);
  AnswerUpstream(0, Answer(201, "late"));  // the lost attempt's own result is refused (C3)
  Settle();
  EXPECT_EQ(Only(Begin(Post("k1"))).response.status, 502);
}

// SPEC §12 A1: every guarded request upstream carries its attempt and record id; a takeover
// carries the next attempt and the same id, and a client's own copies never go upstream.
TEST_F(ExchangeTest, GuardedRequestsCarryTheirAttemptAndRecordId) {
  Request forged = Post("k1");
  forged.headers.push_back({"Idempotency-Attempt", "9"});
  forged.headers.push_back({"Idempotency-Record", "00000000000000000000000000000000"});
  int a = Begin(forged);
  Settle();
  ASSERT_EQ(env_.upstream.size(), 1u);
  const std::string& first = env_.upstream[0].request;
  EXPECT_NE(first.find("\r\nIdempotency-Attempt: 1\r\n"), std::string::npos) << first;
  size_t at = first.find("\r\nIdempotency-Record: ");
  ASSERT_NE(at, std::string::npos) << first;
  std::string id = first.substr(at + 22, 32);
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
  EXPECT_EQ(first.find("Idempotency-Attempt: 9"), std::string::npos) << first;
  EXPECT_EQ(first.find("00000000000000000000000000000000"), std::string::npos) << first;
  Get(a)->DetachClient();
  clock_.Advance(31'000);
  Begin(Post("k1"));
  Settle();
  ASSERT_EQ(env_.upstream.size(), 2u);
  EXPECT_NE(env_.upstream[1].request.find(
                "\r\nIdempotency-Attempt: 2\r\nIdempotency-Record: " + id + "\r\n"),
            std::string::npos)
      << env_.upstream[1].request;
  int pass = Begin(Post(""));  // passthrough: no token
  EXPECT_EQ(env_.upstream.at(2).request.find("Idempotency-"), std::string::npos);
  AnswerUpstream(2, Answer(200, "ok"));
  (void)pass;
}

// SPEC §12 A3: a takeover of an attempt that a backend fenced stores and answers the 502 "attempt
// N executed; its answer was lost", with takeover on, and never goes upstream again.
TEST_F(ExchangeTest, TakeoverOfAFencedAttemptStoresTheLostAnswer) {
  int a = Begin(Post("k1"));
  Settle();
  Get(a)->DetachClient();                            // the gateway running it is gone
  store_.fenced[store_.records.begin()->first] = 1;  // the backend committed attempt 1
  clock_.Advance(31'000);
  int b = Begin(Post("k1"));
  Settle();
  EXPECT_EQ(env_.upstream.size(), 1u);
  EXPECT_EQ(Only(b).response.status, 502);
  EXPECT_NE(Only(b).response.body.find("Attempt 1 of this request executed; its answer was lost"),
            std::string::npos)
      << Only(b).response.body;
  EXPECT_EQ(Get(b), nullptr);
  int c = Begin(Post("k1"));
  EXPECT_TRUE(Only(c).replayed);
  EXPECT_EQ(Only(c).response, Only(b).response);
}

TEST_F(ExchangeTest, StoreFailureOnClaimIs503AndNothingGoesUpstreamR3b) {
  store_.FailNext(StoreCode::kIoError);
  int id = Begin(Post("k1"));
  Settle();
  EXPECT_EQ(Only(id).response.status, 503);
  EXPECT_TRUE(env_.upstream.empty());
  EXPECT_NE(env_.log_lines.back().find("injected store failure"), std::string::npos);
}

TEST_F(ExchangeTest, RejectionsAndPassthroughNeverTouchTheStore) {
  Request no_credential = Post("k1");
  no_credential.headers.erase(no_credential.headers.begin() + 1);
  EXPECT_EQ(Only(Begin(no_credential)).response.status, 401);
  EXPECT_EQ(Only(Begin(Post("\x01"))).response.status, 400);
  int pass = Begin(Post(""));  // no key: passthrough
  EXPECT_EQ(Get(pass)->phase(), Phase::kForwarding);
  AnswerUpstream(0, Answer(200, "ok"));
  EXPECT_EQ(Only(pass).response.body, "ok");
  EXPECT_EQ(store_.claims + store_.lookups, 0);
}

// The client goes away in each phase: the exchange still runs to its end and stores its result;
// nothing is sent to the gone client and nothing is freed early (ASan would see it).
TEST_F(ExchangeTest, ClientGoneWhileClaimingStillRunsAndStoresTheAttempt) {
  int id = Begin(Post("k1"));
  Get(id)->DetachClient();
  Settle();
  AnswerUpstream(0, Answer(201, "pi_1"));
  Settle();
  EXPECT_TRUE(sinks_[id]->answers.empty());
  EXPECT_EQ(Get(id), nullptr);
  EXPECT_EQ(Only(Begin(Post("k1"))).response.body, "pi_1");
}

TEST_F(ExchangeTest, ClientGoneWhileForwardingOrCompletingOrBackingOffStillStores) {
  for (Phase when : {Phase::kForwarding, Phase::kCompleting, Phase::kBackoff}) {
    std::string key = std::string("k-") + PhaseName(when);
    int id = Begin(Post(key));
    Settle();
    if (when == Phase::kForwarding) Get(id)->DetachClient();
    if (when == Phase::kBackoff) store_.FailNext(StoreCode::kNoSpace);
    AnswerUpstream(env_.upstream.size() - 1, Answer(201, key));
    if (when == Phase::kCompleting) Get(id)->DetachClient();
    Settle();
    if (when == Phase::kBackoff) {
      ASSERT_EQ(Get(id)->phase(), Phase::kBackoff);
      Get(id)->DetachClient();
      env_.Advance(50);
      Settle();
    }
    EXPECT_TRUE(sinks_[id]->answers.empty()) << key;
    EXPECT_EQ(Get(id), nullptr) << key;
    EXPECT_EQ(Only(Begin(Post(key))).response.body, key);
  }
}

// An early answer (the hard stop at shutdown) while the claim is outstanding: the late claim
// result finds the exchange alive, gives the key back (the client was told nothing went
// upstream), and only then is the exchange freed.
TEST_F(ExchangeTest, LateClaimAfterAnEarlyAnswerReleasesAndNeverForwards) {
  int id = Begin(Post("k1"));
  Get(id)->AnswerNow();
  EXPECT_EQ(Only(id).response.status, 503);
  ASSERT_NE(Get(id), nullptr);  // still waiting for its claim
  Settle();
  EXPECT_TRUE(env_.upstream.empty());
  EXPECT_EQ(store_.releases, 1);
  EXPECT_TRUE(store_.records.empty());
  EXPECT_EQ(Get(id), nullptr);
  EXPECT_EQ(sinks_[id]->answers.size(), 1u);  // answered once
}

// store.confirm_timeout (10 s by default): a claim the store has not confirmed by then (a
// PostgreSQL primary waiting for a synchronous standby that is gone) is answered 503 at once;
// when it lands after all, the key is given back and nothing goes upstream.
TEST_F(ExchangeTest, ClaimUnconfirmedPastTheConfirmTimeoutIs503AndTheLateClaimIsGivenBack) {
  int id = Begin(Post("k1"));
  env_.Advance(9'999);
  EXPECT_TRUE(sinks_[id]->answers.empty());
  env_.Advance(1);
  EXPECT_EQ(Only(id).response.status, 503);
  EXPECT_NE(Only(id).response.body.find("has not confirmed the claim"), std::string::npos);
  ASSERT_NE(Get(id), nullptr);  // still waiting for its claim
  Settle();                     // the claim lands: released, never forwarded
  EXPECT_TRUE(env_.upstream.empty());
  EXPECT_EQ(store_.releases, 1);
  EXPECT_TRUE(store_.records.empty());
  EXPECT_EQ(Get(id), nullptr);
  // A claim confirmed in time is not cut by the timeout, however long the upstream takes.
  int next = Begin(Post("k2"));
  Settle();
  env_.Advance(15'000);
  AnswerUpstream(0, Answer(201, "pi_2"));
  Settle();
  EXPECT_EQ(Only(next).response.status, 201);
}

// A completion the store neither confirms nor fails: store.confirm_timeout (10 s) after the
// lease's end the client is told the outcome is unknown (502) instead of waiting on; when the
// completion lands, a retry replays it.
TEST_F(ExchangeTest, CompletionUnconfirmedPastTheLeaseIs502AndALateOneIsReplayed) {
  int id = Begin(Post("k1"));
  Settle();
  AnswerUpstream(0, Answer(201, "pi_1"));
  env_.RunPosted();          // the completion is queued; the store does not answer
  env_.Advance(39'999);      // the lease (30 s from the claim) and 10 s more
  EXPECT_TRUE(sinks_[id]->answers.empty());
  env_.Advance(1);
  EXPECT_EQ(Only(id).response.status, 502);
  EXPECT_NE(Only(id).response.body.find("could not be recorded"), std::string::npos);
  ASSERT_NE(Get(id), nullptr);  // still waiting for its completion
  Settle();
  EXPECT_EQ(Get(id), nullptr);
  EXPECT_EQ(sinks_[id]->answers.size(), 1u);
  EXPECT_EQ(Only(Begin(Post("k1"))).response.body, "pi_1");
}

TEST_F(ExchangeTest, LateUpstreamAnswerAfterAnEarlyAnswerIsStillStored) {
  int id = Begin(Post("k1"));
  Settle();
  Get(id)->AnswerNow();
  AnswerUpstream(0, Answer(201, "pi_1"));
  Settle();
  EXPECT_EQ(Get(id), nullptr);
  EXPECT_EQ(sinks_[id]->answers.size(), 1u);
  EXPECT_EQ(Only(Begin(Post("k1"))).response.body, "pi_1");
}

TEST_F(ExchangeTest, ShutdownDuringBackoffGivesUpWith502) {
  int id = Begin(Post("k1"));
  Settle();
  store_.FailNext(StoreCode::kIoError);
  AnswerUpstream(0, Answer(201, "pi_1"));
  Settle();
  ASSERT_EQ(Get(id)->phase(), Phase::kBackoff);
  Get(id)->OnShutdown();
  Reap();
  EXPECT_EQ(Only(id).response.status, 502);
  EXPECT_EQ(Get(id), nullptr);
  env_.Advance(1'000);  // the cancelled retry never fires
  EXPECT_EQ(store_.completes, 1);
}

}  // namespace
}  // namespace idemgate
