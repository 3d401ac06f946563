// The store contract: every SPEC §5 row, C3, R3a, expiry, close, and concurrent claims, run
// against every backend (RocksDB; PostgreSQL, a real server the test starts). Backend-specific
// cases live in store_rocks_test.cc and store_pg_test.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "tests/unit/store/store_backends.h"

namespace idemgate {
namespace {

using namespace idemgate::testing;

const auto* const kPgEnv = ::testing::AddGlobalTestEnvironment(new PgEnvironment);

enum class Kind { kRocks, kPostgres };

std::string KindName(const ::testing::TestParamInfo<Kind>& info) {
  return info.param == Kind::kRocks ? "Rocks" : "Postgres";
}

class StoreContract : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    if (GetParam() == Kind::kRocks) {
      backend_ = std::make_unique<RocksBackend>();
    } else {
      backend_ = std::make_unique<PgBackend>();
    }
    store_ = backend_->Open(/*fresh=*/true);
    ASSERT_NE(store_, nullptr);
  }
  void TearDown() override {
    if (store_) store_->Close();
  }
  void Reopen() {
    store_->Close();
    store_.reset();
    store_ = backend_->Open(/*fresh=*/false);
    ASSERT_NE(store_, nullptr);
  }
  Record MustFind(const std::string& key) {
    LookupResult r = store_->Lookup(Scope(7), key, LookupMode::kMayBlock);
    EXPECT_EQ(r.outcome, LookupOutcome::kFound);
    return r.record;
  }
  LookupOutcome Find(const std::string& key, uint8_t scope = 7) {
    return store_->Lookup(Scope(scope), key, LookupMode::kMayBlock).outcome;
  }
  ClaimToken FreshClaim(ClaimRequest req) {
    ClaimResult r = ClaimNow(*store_, std::move(req));
    EXPECT_TRUE(r.status.ok()) << r.status.message;
    EXPECT_EQ(r.outcome, ClaimOutcome::kFresh);
    return r.token;
  }
  void Advance(TimeMs ms) { backend_->Advance(ms); }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Store> store_;
};

INSTANTIATE_TEST_SUITE_P(Backends, StoreContract, ::testing::Values(Kind::kRocks, Kind::kPostgres),
                         KindName);

// The PostgreSQL clock keeps running during a test: time assertions allow this much of it.
constexpr TimeMs kSlack = 2'000;

TEST_P(StoreContract, NoRecordGivesFreshFirstAttempt) {
  ClaimToken token = FreshClaim(Req("k", 1, 30'000, 86'400'000));
  EXPECT_EQ(token.attempt, 1u);
  EXPECT_NE(token.owner, 0u);
  EXPECT_EQ(token.record_key, MakeRecordKey(Scope(7), "k"));
  EXPECT_LE(token.lease_left_ms, 30'000);
  EXPECT_GT(token.lease_left_ms, 30'000 - kSlack);
  Record r = MustFind("k");
  EXPECT_EQ(r.state, RecordState::kInFlight);
  EXPECT_EQ(r.attempt, 1u);
  EXPECT_EQ(r.owner, token.owner);
  EXPECT_EQ(r.fingerprint, Fp(1));
  EXPECT_EQ(r.expires_ms, r.created_ms + 86'400'000);
  EXPECT_EQ(r.lease_until_ms, r.created_ms + 30'000);
}

TEST_P(StoreContract, CompletedSameFingerprintReplays) {
  ClaimToken token = FreshClaim(Req("k"));
  StoredResponse resp = Resp(201, "{\"id\":1}");
  resp.headers.push_back({"X-Empty", ""});
  resp.body += std::string("\0\xff binary", 9);
  ASSERT_TRUE(CompleteNow(*store_, token, resp).ok());
  ClaimResult r = ClaimNow(*store_, Req("k"));
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.outcome, ClaimOutcome::kReplay);
  EXPECT_EQ(r.record.state, RecordState::kCompleted);
  EXPECT_EQ(r.record.response, resp);
}

TEST_P(StoreContract, InFlightLiveLeaseGivesSecondsLeftRoundedUp) {
  FreshClaim(Req("k", 1, 30'000));
  Advance(10'500);
  ClaimResult r = ClaimNow(*store_, Req("k", 1, 30'000));
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.outcome, ClaimOutcome::kInFlight);
  EXPECT_EQ(r.retry_after_s, 20);
  Advance(19'000);  // 500 ms left
  r = ClaimNow(*store_, Req("k", 1, 30'000));
  EXPECT_EQ(r.outcome, ClaimOutcome::kInFlight);
  EXPECT_EQ(r.retry_after_s,
            1);  // A lookup's record times are on the store's clock, and so is its now_ms.
  LookupResult found = store_->Lookup(Scope(7), "k", LookupMode::kMayBlock);
  ASSERT_EQ(found.outcome, LookupOutcome::kFound);
  EXPECT_GT(found.record.lease_until_ms - found.now_ms, 0);
  EXPECT_LE(found.record.lease_until_ms - found.now_ms, 500);
}

TEST_P(StoreContract, InFlightExpiredLeaseIsTakenOver) {
  ClaimToken first = FreshClaim(Req("k", 1, 30'000, 40'000));
  TimeMs created = MustFind("k").created_ms;
  Advance(30'000);
  ClaimResult r = ClaimNow(*store_, Req("k", 1, 30'000, 40'000));
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.outcome, ClaimOutcome::kTakeover);
  EXPECT_EQ(r.token.attempt, 2u);
  EXPECT_NE(r.token.owner, first.owner);
  EXPECT_NE(r.token.owner, 0u);
  EXPECT_GT(r.token.lease_left_ms, 30'000 - kSlack);
  Record rec = MustFind("k");
  EXPECT_EQ(rec.attempt, 2u);
  EXPECT_EQ(rec.owner, r.token.owner);
  EXPECT_EQ(rec.created_ms, created);
  EXPECT_GE(rec.lease_until_ms, created + 60'000);
  EXPECT_LT(rec.lease_until_ms, created + 60'000 + kSlack);
  // max(old expiry, now + ttl): never expires in flight
  EXPECT_GE(rec.expires_ms, created + 70'000);
  EXPECT_LT(rec.expires_ms, created + 70'000 + kSlack);
}

TEST_P(StoreContract, DifferentFingerprintMismatchesInAnyState) {
  ClaimToken token = FreshClaim(Req("k", 1));
  ClaimResult r = ClaimNow(*store_, Req("k", 2));  // in flight, live lease
  EXPECT_EQ(r.outcome, ClaimOutcome::kMismatch);
  EXPECT_EQ(r.record.fingerprint, Fp(1));
  Advance(31'000);  // in flight, expired lease: mismatch wins over takeover
  r = ClaimNow(*store_, Req("k", 2));
  EXPECT_EQ(r.outcome, ClaimOutcome::kMismatch);
  EXPECT_EQ(MustFind("k").attempt, 1u);
  ASSERT_TRUE(CompleteNow(*store_, token, Resp(200, "x")).ok());
  r = ClaimNow(*store_, Req("k", 2));  // completed
  EXPECT_EQ(r.outcome, ClaimOutcome::kMismatch);
  EXPECT_EQ(r.record.fingerprint, Fp(1));
}

TEST_P(StoreContract, ExpiredRecordIsFreshForAnyFingerprint) {
  ClaimToken token = FreshClaim(Req("k", 1, 1'000, 60'000));
  ASSERT_TRUE(CompleteNow(*store_, token, Resp(200, "old")).ok());
  Advance(60'000);
  ClaimResult r = ClaimNow(*store_, Req("k", 2, 1'000, 60'000));
  EXPECT_EQ(r.outcome, ClaimOutcome::kFresh);
  EXPECT_EQ(r.token.attempt, 1u);
  Record rec = MustFind("k");
  EXPECT_EQ(rec.fingerprint, Fp(2));
  EXPECT_EQ(rec.state, RecordState::kInFlight);
  EXPECT_EQ(rec.response, StoredResponse{});
}

// A Complete whose write was reported failed yet landed is sent again by the exchange: the same
// token with the same response is ok on every store, a different response is not.
TEST_P(StoreContract, TheSameCompleteAgainIsOk) {
  ClaimToken token = FreshClaim(Req("k"));
  ASSERT_TRUE(CompleteNow(*store_, token, Resp(201, "first")).ok());
  EXPECT_TRUE(CompleteNow(*store_, token, Resp(201, "first")).ok());
  EXPECT_EQ(CompleteNow(*store_, token, Resp(201, "other")).code, StoreCode::kStaleClaim);
  EXPECT_EQ(MustFind("k").response.body, "first");
}

TEST_P(StoreContract, StaleCompleteAfterTakeoverIsRefusedAndWritesNothing) {
  ClaimToken old_token = FreshClaim(Req("k"));
  Advance(30'000);
  ClaimResult take = ClaimNow(*store_, Req("k"));
  ASSERT_EQ(take.outcome, ClaimOutcome::kTakeover);
  StoreStatus s = CompleteNow(*store_, old_token, Resp(200, "stale"));
  EXPECT_EQ(s.code, StoreCode::kStaleClaim);
  Record rec = MustFind("k");
  EXPECT_EQ(rec.state, RecordState::kInFlight);
  EXPECT_EQ(rec.attempt, 2u);
  EXPECT_EQ(ReleaseNow(*store_, old_token).code, StoreCode::kStaleClaim);
  ASSERT_TRUE(CompleteNow(*store_, take.token, Resp(200, "winner")).ok());
  EXPECT_EQ(MustFind("k").response.body, "winner");
  EXPECT_EQ(CompleteNow(*store_, take.token, Resp(200, "again")).code, StoreCode::kStaleClaim);
  EXPECT_EQ(MustFind("k").response.body, "winner");
}

TEST_P(StoreContract, CompleteNeedsMatchingOwnerAndAttempt) {
  ClaimToken token = FreshClaim(Req("k"));
  ClaimToken wrong_owner = token;
  wrong_owner.owner ^= 1;
  ClaimToken wrong_attempt = token;
  wrong_attempt.attempt = 2;
  EXPECT_EQ(CompleteNow(*store_, wrong_owner, Resp(200, "")).code, StoreCode::kStaleClaim);
  EXPECT_EQ(CompleteNow(*store_, wrong_attempt, Resp(200, "")).code, StoreCode::kStaleClaim);
  ClaimToken missing = token;
  missing.record_key = MakeRecordKey(Scope(7), "nope");
  EXPECT_EQ(CompleteNow(*store_, missing, Resp(200, "")).code, StoreCode::kStaleClaim);
  EXPECT_EQ(Find("nope"), LookupOutcome::kMiss);
  Advance(120'000);  // lease long gone but nobody took over: still completes
  EXPECT_TRUE(CompleteNow(*store_, token, Resp(200, "late")).ok());
}

TEST_P(StoreContract, ReleaseOfFirstAttemptDeletesTheRecord) {
  ClaimToken token = FreshClaim(Req("k"));
  ASSERT_TRUE(ReleaseNow(*store_, token).ok());
  EXPECT_EQ(Find("k"), LookupOutcome::kMiss);
  EXPECT_EQ(ClaimNow(*store_, Req("k", 3)).outcome, ClaimOutcome::kFresh);
}

TEST_P(StoreContract, ReleaseOfTakeoverKeepsAttemptWithExpiredLease) {
  FreshClaim(Req("k"));
  Advance(30'000);
  ClaimResult take = ClaimNow(*store_, Req("k"));
  ASSERT_EQ(take.outcome, ClaimOutcome::kTakeover);
  Advance(5);
  ASSERT_TRUE(ReleaseNow(*store_, take.token).ok());
  Record rec = MustFind("k");
  EXPECT_EQ(rec.state, RecordState::kInFlight);
  EXPECT_EQ(rec.attempt, 2u);
  EXPECT_EQ(rec.owner, 0u);
  EXPECT_LT(rec.lease_until_ms, rec.created_ms + 30'000 + 5 + kSlack);
  ClaimToken zero{take.token.record_key, 2, 0};
  EXPECT_EQ(CompleteNow(*store_, zero, Resp(200, "")).code, StoreCode::kStaleClaim);
  EXPECT_EQ(CompleteNow(*store_, take.token, Resp(200, "")).code, StoreCode::kStaleClaim);
  ClaimResult next = ClaimNow(*store_, Req("k"));  // immediately claimable again
  EXPECT_EQ(next.outcome, ClaimOutcome::kTakeover);
  EXPECT_EQ(next.token.attempt, 3u);
}

TEST_P(StoreContract, ExpiredRecordIsAbsentOnLookup) {
  ClaimToken token = FreshClaim(Req("k", 1, 1'000, 10'000));
  ASSERT_TRUE(CompleteNow(*store_, token, Resp(200, "x")).ok());
  Advance(9'000);
  EXPECT_EQ(Find("k"), LookupOutcome::kFound);
  Advance(1'000);
  EXPECT_EQ(Find("k"), LookupOutcome::kMiss);
  EXPECT_EQ(Find("other"), LookupOutcome::kMiss);
  EXPECT_EQ(Find("k", 8), LookupOutcome::kMiss);
}

TEST_P(StoreContract, DeleteRemovesAnyRecord) {
  FreshClaim(Req("k"));
  ASSERT_TRUE(DeleteNow(*store_, Scope(7), "k").ok());
  EXPECT_EQ(Find("k"), LookupOutcome::kMiss);
  EXPECT_EQ(ClaimNow(*store_, Req("k", 2)).outcome, ClaimOutcome::kFresh);
  EXPECT_TRUE(DeleteNow(*store_, Scope(7), "never-existed").ok());
}

TEST_P(StoreContract, ReopenKeepsCompletedAndInFlightRecords) {
  ClaimToken done = FreshClaim(Req("done"));
  ASSERT_TRUE(CompleteNow(*store_, done, Resp(200, "kept")).ok());
  ClaimToken pending = FreshClaim(Req("pending"));
  Reopen();
  ClaimResult r = ClaimNow(*store_, Req("done"));
  EXPECT_EQ(r.outcome, ClaimOutcome::kReplay);
  EXPECT_EQ(r.record.response.body, "kept");
  EXPECT_EQ(ClaimNow(*store_, Req("pending")).outcome, ClaimOutcome::kInFlight);
  EXPECT_TRUE(CompleteNow(*store_, pending, Resp(200, "later")).ok());
  EXPECT_EQ(MustFind("pending").response.body, "later");
}

TEST_P(StoreContract, ClaimsInFlightTogetherSeeEachOther) {
  constexpr int kN = 200;
  std::vector<std::promise<ClaimResult>> promises(kN);
  for (int i = 0; i < kN; ++i) {
    store_->Claim(Req("same"), [&promises, i](ClaimResult r) { promises[i].set_value(r); });
  }
  int fresh = 0, in_flight = 0;
  for (auto& p : promises) {
    ClaimResult r = p.get_future().get();
    fresh += r.outcome == ClaimOutcome::kFresh;
    in_flight += r.outcome == ClaimOutcome::kInFlight;
  }
  EXPECT_EQ(fresh, 1);
  EXPECT_EQ(in_flight, kN - 1);
}

TEST_P(StoreContract, CallbacksMayCallTheStoreAgain) {
  std::promise<StoreStatus> done;
  Store* store = store_.get();
  store_->Claim(Req("k"), [store, &done](ClaimResult r) {
    store->Complete(r.token, Resp(200, "chained"), [&done](StoreStatus s) { done.set_value(s); });
  });
  EXPECT_TRUE(done.get_future().get().ok());
  EXPECT_EQ(MustFind("k").response.body, "chained");
}

TEST_P(StoreContract, CloseFinishesQueuedOpsThenRefusesNewOnes) {
  constexpr int kN = 300;
  std::atomic<int> ok{0};
  for (int i = 0; i < kN; ++i) {
    store_->Claim(Req("k" + std::to_string(i)), [&ok](ClaimResult r) { ok += r.status.ok(); });
  }
  store_->Close();
  EXPECT_EQ(ok.load(), kN);
  EXPECT_EQ(ClaimNow(*store_, Req("late")).status.code, StoreCode::kShutdown);
  EXPECT_EQ(CompleteNow(*store_, ClaimToken{}, Resp(200, "")).code, StoreCode::kShutdown);
  EXPECT_EQ(ReleaseNow(*store_, ClaimToken{}).code, StoreCode::kShutdown);
  EXPECT_EQ(DeleteNow(*store_, Scope(7), "k").code, StoreCode::kShutdown);
  EXPECT_EQ(Find("k1"), LookupOutcome::kError);
  store_->Close();  // idempotent
  store_ = backend_->Open(/*fresh=*/false);
  ASSERT_NE(store_, nullptr);
  EXPECT_EQ(ClaimNow(*store_, Req("k1")).outcome, ClaimOutcome::kInFlight);
}

// Counts down to zero; Wait() returns once it got there.
class Latch {
 public:
  explicit Latch(int n) : n_(n) {}
  void CountDown() {
    std::lock_guard lock(mu_);
    if (--n_ == 0) cv_.notify_all();
  }
  void Wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return n_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_;
};

constexpr int kThreads = 8;
constexpr int kClaimsPerThread = 1000;
constexpr int kKeys = 100;

std::string KeyName(int i) { return "key-" + std::to_string(i % kKeys); }

// kThreads threads each issue kClaimsPerThread async claims over kKeys keys; on_result runs for
// every result (on the store's thread). Returns once every callback ran.
void ClaimStorm(Store& store, const std::function<void(int, ClaimResult)>& on_result) {
  Latch done(kThreads * kClaimsPerThread);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kClaimsPerThread; ++i) {
        int k = (i * 7 + t * 13) % kKeys;
        store.Claim(Req(KeyName(k)), [&, k](ClaimResult r) {
          on_result(k, std::move(r));
          done.CountDown();
        });
      }
    });
  }
  for (auto& th : threads) th.join();
  done.Wait();
}

TEST_P(StoreContract, ExactlyOneFreshPerKeyThenEveryoneReplays) {
  std::mutex mu;
  std::map<int, ClaimToken> winners;
  std::map<ClaimOutcome, int> outcomes;
  int fresh_dupes = 0, errors = 0;
  ClaimStorm(*store_, [&](int k, ClaimResult r) {
    std::lock_guard lock(mu);
    if (!r.status.ok()) return void(++errors);
    outcomes[r.outcome]++;
    if (r.outcome == ClaimOutcome::kFresh && !winners.emplace(k, r.token).second) ++fresh_dupes;
  });
  EXPECT_EQ(errors, 0);
  EXPECT_EQ(outcomes[ClaimOutcome::kFresh], kKeys);
  EXPECT_EQ(outcomes[ClaimOutcome::kInFlight], kThreads * kClaimsPerThread - kKeys);
  EXPECT_EQ(fresh_dupes, 0);
  ASSERT_EQ(winners.size(), static_cast<size_t>(kKeys));
  for (auto& [k, token] : winners) {
    ASSERT_TRUE(CompleteNow(*store_, token, Resp(200, "body of " + KeyName(k))).ok());
  }
  std::atomic<int> replays{0}, wrong{0};
  ClaimStorm(*store_, [&](int k, ClaimResult r) {
    bool right = r.status.ok() && r.outcome == ClaimOutcome::kReplay &&
                 r.record.response.body == "body of " + KeyName(k);
    ++(right ? replays : wrong);
  });
  EXPECT_EQ(replays.load(), kThreads * kClaimsPerThread);
  EXPECT_EQ(wrong.load(), 0);
  for (int k = 0; k < kKeys; ++k) {
    LookupResult l = store_->Lookup(Scope(7), KeyName(k), LookupMode::kMayBlock);
    ASSERT_EQ(l.outcome, LookupOutcome::kFound);
    EXPECT_EQ(l.record.response.body, "body of " + KeyName(k));
  }
}

// R6: a completion keeps when it was made (the store's clock), stored with the record: it reads
// back after a reopen.
TEST_P(StoreContract, CompletionTimeIsStored) {
  ClaimToken token = FreshClaim(Req("k"));
  const TimeMs created = MustFind("k").created_ms;
  Advance(5'000);
  ASSERT_TRUE(CompleteNow(*store_, token, Resp(201, "x")).ok());
  Record done = MustFind("k");
  EXPECT_GE(done.completed_ms - created, 5'000);
  EXPECT_LT(done.completed_ms - created, 60'000);
  Advance(5'000);
  Reopen();
  EXPECT_EQ(MustFind("k").completed_ms, done.completed_ms);
}

// An online backup: the embedded store writes a checkpoint; PostgreSQL makes none and says which
// tools back it up.
TEST_P(StoreContract, CheckpointOrWhichToolToUse) {
  ASSERT_TRUE(CompleteNow(*store_, FreshClaim(Req("k")), Resp(201, "x")).ok());
  TempDir dir;
  StoreStatus status = store_->Checkpoint(dir.path() + "/checkpoint");
  if (GetParam() == Kind::kRocks) {
    EXPECT_TRUE(status.ok()) << status.message;
  } else {
    EXPECT_FALSE(status.ok());
    EXPECT_NE(status.message.find("pg_dump"), std::string::npos) << status.message;
    EXPECT_FALSE(std::filesystem::exists(dir.path() + "/checkpoint"));
  }
}

}  // namespace
}  // namespace idemgate
