// Waiting duplicates (SPEC §10) and Age (R6), driven in-process (tests/unit/exchange_fakes.h):
// the real Exchange and WaitRegistry with the real claim rules, timers on a FakeClock, and
// several fake loops sharing one registry — no processes, no sleeps.
#include <gtest/gtest.h>

#include "conf/config.h"
#include "proxy/exchange/exchange.h"
#include "proxy/exchange/wait_registry.h"
#include "tests/unit/exchange/exchange_fakes.h"

namespace idemgate {
namespace {

using test::FakeEnv;
using test::QueuedStore;
using test::RecordingSink;

Request Post(std::string key, std::string prefer = "") {
  Request r;
  r.method = "POST";
  r.target = "/v1/payment_intents";
  r.headers = {{"Host", "api"}, {"Authorization", "Bearer merchant-1"}};
  r.headers.push_back({"Idempotency-Key", key});
  if (!prefer.empty()) r.headers.push_back({"Prefer", prefer});
  r.body = R"({"amount":100})";
  return r;
}

UpstreamResult Answer(int status, std::string body) {
  UpstreamResult r;
  r.response.status = status;
  r.response.reason = "Created";
  r.response.body = std::move(body);
  return r;
}

bool Has(const test::SentAnswer& a, const std::string& line) {
  return a.extra_headers.find(line + "\r\n") != std::string::npos;
}

class ExchangeWaitTest : public test::ExchangeFixture {
 protected:
  ExchangeWaitTest() {
    envs_.push_back(&other_);
    other_.waits_ = &env_.own_waits_;  // a second loop of the same process
  }
  ~ExchangeWaitTest() override { FreeAll(); }  // before other_ goes
  uint64_t Waiters() { return env_.own_waits_.size(); }
  void SetConfig(const std::function<void(Config&)>& change) {
    auto config = std::make_shared<Config>(*config_);
    change(*config);
    config_ = config;
  }

  FakeEnv other_{&store_, &clock_};
};

TEST(PreferWait, ParsesRfc7240) {
  auto parse = [](std::vector<std::string> values) {
    Headers h;
    for (auto& v : values) h.push_back({"Prefer", v});
    return ParsePreferWait(h);
  };
  EXPECT_EQ(parse({}), -1);
  EXPECT_EQ(parse({"wait=10"}), 10);
  EXPECT_EQ(parse({"respond-async, WAIT = 5"}), 5);
  EXPECT_EQ(parse({"wait=\"7\"; x=y"}), 7);
  EXPECT_EQ(parse({"handling=lenient", "wait=3"}), 3);
  EXPECT_EQ(parse({"wait=-1"}), -1);
  EXPECT_EQ(parse({"wait=abc"}), -1);
  EXPECT_EQ(parse({"wait=99999999999"}), -1);  // absurd: ignored
  EXPECT_EQ(parse({"waiting=4"}), -1);
}

TEST(WaitRegistryTest, AddRefusesWhenFullOrWhenTheKeyChangedSinceTheRead) {
  WaitRegistry waits;
  uint64_t id = 0;
  int woken = 0;
  uint64_t epoch = waits.Epoch("k");
  waits.Notify("k");  // a completion between the read and Add
  EXPECT_EQ(waits.Add(
                "k", epoch, [&] { ++woken; }, 10, &id),
            WaitRegistry::AddResult::kChanged);
  epoch = waits.Epoch("k");
  EXPECT_EQ(waits.Add(
                "k", epoch, [&] { ++woken; }, 1, &id),
            WaitRegistry::AddResult::kAdded);
  EXPECT_EQ(waits.Add(
                "j", waits.Epoch("j"), [&] { ++woken; }, 1, &id),
            WaitRegistry::AddResult::kFull);
  EXPECT_EQ(waits.size(), 1u);
  waits.Notify("k");
  EXPECT_EQ(woken, 1);
  EXPECT_EQ(waits.size(), 0u);
}

// W2: a release wakes the waiters; one becomes the next attempt and executes once, the others
// wait again and replay its answer.
TEST_F(ExchangeWaitTest, ReleasedKeyIsClaimedByOneWaiterAndTheOthersReplayIt) {
  int owner = Begin(Post("k"));
  Settle();
  ASSERT_EQ(env_.upstream.size(), 1u);
  int a = Begin(Post("k", "wait=10"));
  int b = Begin(Post("k", "wait=10"), &other_);
  int c = Begin(Post("k", "wait=10"));
  Settle();
  EXPECT_EQ(Waiters(), 3u);
  for (int w : {a, b, c}) EXPECT_EQ(Get(w)->phase(), Phase::kWaiting);
  UpstreamResult refused;
  refused.error = UpstreamError::kUnavailable;
  refused.detail = "refused";
  AnswerUpstream(env_, 0, refused);
  Settle();
  EXPECT_EQ(Only(owner).response.status, 502);
  ASSERT_EQ(env_.upstream.size() + other_.upstream.size(), 2u);  // one waiter runs it
  EXPECT_EQ(Waiters(), 2u);
  FakeEnv& runner = other_.upstream.empty() ? env_ : other_;
  AnswerUpstream(runner, runner.upstream.size() - 1, Answer(201, "pi_2"));
  Settle();
  int replays = 0;
  for (int w : {a, b, c}) {
    EXPECT_EQ(Only(w).response.status, 201);
    EXPECT_EQ(Only(w).response.body, "pi_2");
    EXPECT_TRUE(Has(Only(w), "Preference-Applied: wait=10"));
    replays += Only(w).replayed;
  }
  EXPECT_EQ(replays, 2);
  EXPECT_EQ(Waiters(), 0u);
  EXPECT_EQ(env_.upstream.size() + other_.upstream.size(), 2u);
  int claimed = 0, replayed = 0;
  for (FakeEnv* env : {&env_, &other_}) {
    for (auto& s : env->samples) {
      claimed += s.wait_end == WaitEnd::kClaimed;
      replayed += s.wait_end == WaitEnd::kReplayed;
    }
  }
  EXPECT_EQ(claimed, 1);
  EXPECT_EQ(replayed, 2);
}

// W2: the owner's lease ends (it hangs, as a paused or lost process would): a waiter takes over
// at the lease's end, executes, and the late owner's completion is refused (C3).
TEST_F(ExchangeWaitTest, WaiterTakesOverWhenTheOwnersLeaseEnds) {
  int owner = Begin(Post("k"));
  Settle();
  ASSERT_EQ(env_.upstream.size(), 1u);
  env_.Advance(1'000);
  int waiter = Begin(Post("k", "wait=30"));
  Settle();
  ASSERT_EQ(Get(waiter)->phase(), Phase::kWaiting);
  env_.Advance(28'900);  // not yet: the lease ends 30 s after the claim
  Settle();
  EXPECT_EQ(env_.upstream.size(), 1u);
  env_.Advance(200);
  Settle();
  ASSERT_EQ(env_.upstream.size(), 2u);
  EXPECT_EQ(Get(waiter)->phase(), Phase::kForwarding);
  AnswerUpstream(env_, 1, Answer(201, "pi_takeover"));
  Settle();
  EXPECT_EQ(Only(waiter).response.body, "pi_takeover");
  EXPECT_FALSE(Only(waiter).replayed);
  EXPECT_EQ(env_.samples.back().outcome, Outcome::kTakeover);
  EXPECT_EQ(env_.samples.back().wait_end, WaitEnd::kClaimed);
  AnswerUpstream(env_, 0, Answer(201, "pi_late"));
  Settle();
  EXPECT_EQ(Only(owner).response.status, 409);
}

// W1: the wait runs out: 409 with Retry-After (the lease left), after the time allowed.
TEST_F(ExchangeWaitTest, WaitRunsOutWith409) {
  Begin(Post("k"));
  Settle();
  int waiter = Begin(Post("k", "wait=2"));
  Settle();
  env_.Advance(1'999);
  EXPECT_TRUE(sinks_[waiter]->answers.empty());
  env_.Advance(1);
  Settle();
  const test::SentAnswer& a = Only(waiter);
  EXPECT_EQ(a.response.status, 409);
  bool retry_after = false;
  for (auto& [n, v] : a.response.headers) retry_after |= n == "Retry-After" && v == "28";
  EXPECT_TRUE(retry_after);
  EXPECT_TRUE(Has(a, "Preference-Applied: wait=2"));
  EXPECT_EQ(env_.samples.back().wait_end, WaitEnd::kTimedOut);
  EXPECT_EQ(env_.samples.back().wait_us, 2'000'000);
  EXPECT_EQ(Waiters(), 0u);
}

// W3: the client goes away while waiting: dropped at once, nothing left in the registry.
TEST_F(ExchangeWaitTest, ClientGoneWhileWaitingLeavesNothing) {
  Begin(Post("k"));
  Settle();
  int waiter = Begin(Post("k", "wait=10"));
  Settle();
  ASSERT_EQ(Waiters(), 1u);
  Get(waiter)->DetachClient();
  Reap();
  EXPECT_EQ(Get(waiter), nullptr);
  EXPECT_EQ(Waiters(), 0u);
  EXPECT_EQ(env_.samples.back().wait_end, WaitEnd::kClientGone);
  EXPECT_TRUE(sinks_[waiter]->answers.empty());
  env_.Advance(20'000);  // its timer is gone with it
}

// W3: shutdown: a waiter answers 409 now; a duplicate arriving while draining does not wait.
TEST_F(ExchangeWaitTest, DrainAnswersWaitersAndStartsNoNewWait) {
  Begin(Post("k"));
  Settle();
  int waiter = Begin(Post("k", "wait=10"));
  Settle();
  env_.draining_now = true;
  Get(waiter)->OnDrain();
  Reap();
  EXPECT_EQ(Only(waiter).response.status, 409);
  EXPECT_EQ(env_.samples.back().wait_end, WaitEnd::kShutdown);
  int late = Begin(Post("k", "wait=10"));
  Settle();
  EXPECT_EQ(Only(late).response.status, 409);
  EXPECT_EQ(Waiters(), 0u);
}

// W4: on a store other instances write, a waiter polls, backing off from 50 ms; it replays a
// completion made elsewhere at its next poll.
TEST_F(ExchangeWaitTest, SharedStoreIsPolledWithBackoff) {
  store_.shared = true;
  Begin(Post("k"));
  Settle();
  int waiter = Begin(Post("k", "wait=10"));
  Settle();
  int lookups = store_.lookups;
  const int claims = store_.claims;
  env_.Advance(49);
  Settle();
  EXPECT_EQ(store_.lookups, lookups);  // never more often than every 50 ms
  env_.Advance(1);
  Settle();
  EXPECT_EQ(store_.lookups, lookups + 1);
  env_.Advance(700);  // polls at +150 and +350 and +750 ms: backing off
  Settle();
  EXPECT_EQ(store_.lookups, lookups + 4);
  EXPECT_EQ(store_.claims, claims);  // a poll reads; it never claims (writes)
  // "Another instance" completes the key.
  Record& r = store_.records.begin()->second;
  r.state = RecordState::kCompleted;
  r.response.status = 201;
  r.response.body = "elsewhere";
  r.completed_ms = clock_.NowMs();
  env_.Advance(800);
  Settle();
  EXPECT_EQ(Only(waiter).response.body, "elsewhere");
  EXPECT_TRUE(Only(waiter).replayed);
}

// R6: Age counts whole seconds from when the response was stored.
TEST_F(ExchangeWaitTest, ReplayAgeCountsFromTheStoredTime) {
  int first = Begin(Post("k"));
  Settle();
  env_.Advance(5'000);  // the upstream takes 5 s: Age counts from the completion, not the claim
  AnswerUpstream(env_, 0, Answer(201, "pi_1"));
  Settle();
  EXPECT_EQ(Only(first).extra_headers, "");
  int now = Begin(Post("k"));
  Settle();
  EXPECT_TRUE(Has(Only(now), "Age: 0"));
  env_.Advance(2'000);
  int later = Begin(Post("k"));
  Settle();
  EXPECT_TRUE(Has(Only(later), "Age: 2"));
  EXPECT_EQ(Only(later).extra_headers.find("Preference-Applied"), std::string::npos);
}

}  // namespace
}  // namespace idemgate
