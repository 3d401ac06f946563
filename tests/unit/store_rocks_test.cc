// RocksStore against a real RocksDB: every SPEC §5 outcome, CAS, release, expiry, reopen, close.
#include <gtest/gtest.h>

#include <atomic>
#include <future>

#include "store/rocks_store.h"
#include "store/rocks_store_internal.h"
#include "tests/unit/store_test_util.h"

namespace idemgate {
namespace {

using namespace idemgate::testing;

class RocksStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(); }
  void Open() {
    RocksStoreOptions o;
    o.path = dir_.path() + "/db";
    o.clock = &clock_;
    o.sync = true;
    std::string error;
    store_ = OpenRocksStore(o, &error);
    ASSERT_NE(store_, nullptr) << error;
  }
  void Reopen() {
    store_->Close();
    store_.reset();
    Open();
  }
  Record MustFind(const std::string& key) {
    LookupResult r = store_->Lookup(Scope(7), key);
    EXPECT_EQ(r.outcome, LookupOutcome::kFound);
    return r.record;
  }
  ClaimToken FreshClaim(ClaimRequest req) {
    ClaimResult r = ClaimNow(*store_, std::move(req));
    EXPECT_TRUE(r.status.ok()) << r.status.message;
    EXPECT_EQ(r.outcome, ClaimOutcome::kFresh);
    return r.token;
  }
  void RawPut(const std::string& key, const std::string& value) {
    rocksdb::WriteOptions w;
    w.sync = true;
    ASSERT_TRUE(RocksStoreDb(store_.get())->Put(w, MakeRecordKey(Scope(7), key), value).ok());
  }
  bool RawExists(const std::string& key) {
    std::string v;
    return RocksStoreDb(store_.get())
        ->Get(rocksdb::ReadOptions(), MakeRecordKey(Scope(7), key), &v)
        .ok();
  }

  TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<Store> store_;
};

TEST_F(RocksStoreTest, NoRecordGivesFreshFirstAttempt) {
  TimeMs t0 = clock_.NowMs();
  ClaimToken token = FreshClaim(Req("k", 1, 30'000, 86'400'000));
  EXPECT_EQ(token.attempt, 1u);
  EXPECT_NE(token.owner, 0u);
  EXPECT_EQ(token.record_key, MakeRecordKey(Scope(7), "k"));
  Record r = MustFind("k");
  EXPECT_EQ(r.state, RecordState::kInFlight);
  EXPECT_EQ(r.attempt, 1u);
  EXPECT_EQ(r.owner, token.owner);
  EXPECT_EQ(r.fingerprint, Fp(1));
  EXPECT_EQ(r.created_ms, t0);
  EXPECT_EQ(r.expires_ms, t0 + 86'400'000);
  EXPECT_EQ(r.lease_until_ms, t0 + 30'000);
}

TEST_F(RocksStoreTest, CompletedSameFingerprintReplays) {
  ClaimToken token = FreshClaim(Req("k"));
  ASSERT_TRUE(CompleteNow(*store_, token, Resp(201, "{\"id\":1}")).ok());
  ClaimResult r = ClaimNow(*store_, Req("k"));
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.outcome, ClaimOutcome::kReplay);
  EXPECT_EQ(r.record.state, RecordState::kCompleted);
  EXPECT_EQ(r.record.response, Resp(201, "{\"id\":1}"));
}

TEST_F(RocksStoreTest, InFlightLiveLeaseGivesSecondsLeftRoundedUp) {
  FreshClaim(Req("k", 1, 30'000));
  clock_.Advance(10'500);
  ClaimResult r = ClaimNow(*store_, Req("k", 1, 30'000));
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.outcome, ClaimOutcome::kInFlight);
  EXPECT_EQ(r.retry_after_s, 20);
  clock_.Advance(19'499);  // 1 ms left
  r = ClaimNow(*store_, Req("k", 1, 30'000));
  EXPECT_EQ(r.outcome, ClaimOutcome::kInFlight);
  EXPECT_EQ(r.retry_after_s, 1);
}

TEST_F(RocksStoreTest, InFlightExpiredLeaseIsTakenOver) {
  TimeMs t0 = clock_.NowMs();
  ClaimToken first = FreshClaim(Req("k", 1, 30'000, 40'000));
  clock_.Advance(30'000);
  ClaimResult r = ClaimNow(*store_, Req("k", 1, 30'000, 40'000));
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.outcome, ClaimOutcome::kTakeover);
  EXPECT_EQ(r.token.attempt, 2u);
  EXPECT_NE(r.token.owner, first.owner);
  EXPECT_NE(r.token.owner, 0u);
  Record rec = MustFind("k");
  EXPECT_EQ(rec.attempt, 2u);
  EXPECT_EQ(rec.owner, r.token.owner);
  EXPECT_EQ(rec.created_ms, t0);
  EXPECT_EQ(rec.lease_until_ms, t0 + 60'000);
  EXPECT_EQ(rec.expires_ms, t0 + 70'000);  // max(old expiry, now + ttl): never expires in flight
}

TEST_F(RocksStoreTest, DifferentFingerprintMismatchesInAnyState) {
  ClaimToken token = FreshClaim(Req("k", 1));
  ClaimResult r = ClaimNow(*store_, Req("k", 2));  // in flight, live lease
  EXPECT_EQ(r.outcome, ClaimOutcome::kMismatch);
  EXPECT_EQ(r.record.fingerprint, Fp(1));
  clock_.Advance(31'000);  // in flight, expired lease: mismatch wins over takeover
  r = ClaimNow(*store_, Req("k", 2));
  EXPECT_EQ(r.outcome, ClaimOutcome::kMismatch);
  EXPECT_EQ(MustFind("k").attempt, 1u);
  ASSERT_TRUE(CompleteNow(*store_, token, Resp(200, "x")).ok());
  r = ClaimNow(*store_, Req("k", 2));  // completed
  EXPECT_EQ(r.outcome, ClaimOutcome::kMismatch);
  EXPECT_EQ(r.record.fingerprint, Fp(1));
}

TEST_F(RocksStoreTest, ExpiredRecordIsFreshForAnyFingerprint) {
  ClaimToken token = FreshClaim(Req("k", 1, 1'000, 60'000));
  ASSERT_TRUE(CompleteNow(*store_, token, Resp(200, "old")).ok());
  clock_.Advance(60'000);
  ClaimResult r = ClaimNow(*store_, Req("k", 2, 1'000, 60'000));
  EXPECT_EQ(r.outcome, ClaimOutcome::kFresh);
  EXPECT_EQ(r.token.attempt, 1u);
  EXPECT_EQ(MustFind("k").fingerprint, Fp(2));
}

TEST_F(RocksStoreTest, StaleCompleteAfterTakeoverIsRefusedAndWritesNothing) {
  ClaimToken old_token = FreshClaim(Req("k"));
  clock_.Advance(30'000);
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

TEST_F(RocksStoreTest, CompleteNeedsMatchingOwnerAndAttempt) {
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
  EXPECT_FALSE(RawExists("nope"));
  clock_.Advance(120'000);  // lease long gone but nobody took over: still completes
  EXPECT_TRUE(CompleteNow(*store_, token, Resp(200, "late")).ok());
}

TEST_F(RocksStoreTest, ReleaseOfFirstAttemptDeletesTheRecord) {
  ClaimToken token = FreshClaim(Req("k"));
  ASSERT_TRUE(ReleaseNow(*store_, token).ok());
  EXPECT_FALSE(RawExists("k"));
  EXPECT_EQ(store_->Lookup(Scope(7), "k").outcome, LookupOutcome::kMiss);
  EXPECT_EQ(ClaimNow(*store_, Req("k", 3)).outcome, ClaimOutcome::kFresh);
}

TEST_F(RocksStoreTest, ReleaseOfTakeoverKeepsAttemptWithExpiredLease) {
  FreshClaim(Req("k"));
  clock_.Advance(30'000);
  ClaimResult take = ClaimNow(*store_, Req("k"));
  ASSERT_EQ(take.outcome, ClaimOutcome::kTakeover);
  clock_.Advance(5);
  ASSERT_TRUE(ReleaseNow(*store_, take.token).ok());
  Record rec = MustFind("k");
  EXPECT_EQ(rec.state, RecordState::kInFlight);
  EXPECT_EQ(rec.attempt, 2u);
  EXPECT_EQ(rec.owner, 0u);
  EXPECT_EQ(rec.lease_until_ms, clock_.NowMs());
  ClaimToken zero{take.token.record_key, 2, 0};
  EXPECT_EQ(CompleteNow(*store_, zero, Resp(200, "")).code, StoreCode::kStaleClaim);
  EXPECT_EQ(CompleteNow(*store_, take.token, Resp(200, "")).code, StoreCode::kStaleClaim);
  ClaimResult next = ClaimNow(*store_, Req("k"));  // immediately claimable again
  EXPECT_EQ(next.outcome, ClaimOutcome::kTakeover);
  EXPECT_EQ(next.token.attempt, 3u);
}

TEST_F(RocksStoreTest, ExpiredRecordIsAbsentOnLookup) {
  ClaimToken token = FreshClaim(Req("k", 1, 1'000, 10'000));
  ASSERT_TRUE(CompleteNow(*store_, token, Resp(200, "x")).ok());
  clock_.Advance(9'999);
  EXPECT_EQ(store_->Lookup(Scope(7), "k").outcome, LookupOutcome::kFound);
  clock_.Advance(1);
  EXPECT_EQ(store_->Lookup(Scope(7), "k").outcome, LookupOutcome::kMiss);
  EXPECT_EQ(store_->Lookup(Scope(7), "other").outcome, LookupOutcome::kMiss);
  EXPECT_EQ(store_->Lookup(Scope(8), "k").outcome, LookupOutcome::kMiss);
}

TEST_F(RocksStoreTest, CompactionDropsExpiredAndKeepsLiveAndUnreadable) {
  for (auto [key, ttl] : {std::pair{"short", 10'000}, std::pair{"long", 1'000'000}}) {
    ClaimToken t = FreshClaim(Req(key, 1, 1'000, ttl));
    ASSERT_TRUE(CompleteNow(*store_, t, Resp(200, key)).ok());
  }
  FreshClaim(Req("inflight", 1, 1'000, 10'000));
  RawPut("garbage", "not a record");
  ASSERT_TRUE(CompactRocksStore(store_.get()).ok());
  EXPECT_TRUE(RawExists("short"));  // nothing expired yet
  clock_.Advance(10'000);
  ASSERT_TRUE(CompactRocksStore(store_.get()).ok());
  EXPECT_FALSE(RawExists("short"));
  EXPECT_FALSE(RawExists("inflight"));
  EXPECT_TRUE(RawExists("long"));
  EXPECT_TRUE(RawExists("garbage"));
  EXPECT_EQ(MustFind("long").response.body, "long");
}

TEST_F(RocksStoreTest, ReopenKeepsCompletedAndInFlightRecords) {
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

// The event loops' lookup never reads the disk: a record only on disk is kNotCached (the caller
// goes through Claim, which reads it on the writer thread); a plain lookup or a claim reads it,
// and once its block is cached the memory-only lookup finds it too.
TEST_F(RocksStoreTest, MemoryOnlyLookupLeavesDiskReadsToTheWriter) {
  ClaimToken t = FreshClaim(Req("cold"));
  ASSERT_TRUE(CompleteNow(*store_, t, Resp(200, "from disk")).ok());
  ASSERT_TRUE(RocksStoreDb(store_.get())->Flush(rocksdb::FlushOptions()).ok());
  Reopen();  // a new, empty block cache; the record is only in a table file
  EXPECT_EQ(store_->Lookup(Scope(7), "cold", LookupMode::kNoWait).outcome,
            LookupOutcome::kNotCached);
  EXPECT_EQ(store_->Lookup(Scope(7), "absent", LookupMode::kNoWait).outcome,
            LookupOutcome::kMiss);  // the table's bloom filter answers without I/O
  ClaimResult r = ClaimNow(*store_, Req("cold"));
  EXPECT_EQ(r.outcome, ClaimOutcome::kReplay);
  EXPECT_EQ(r.record.response.body, "from disk");
  LookupResult cached = store_->Lookup(Scope(7), "cold", LookupMode::kNoWait);
  EXPECT_EQ(cached.outcome, LookupOutcome::kFound);
  EXPECT_EQ(cached.record.response.body, "from disk");
}

TEST_F(RocksStoreTest, UndecodableValuesAreErrorsNotCrashes) {
  std::string good = EncodeRecord(Record{RecordState::kCompleted, 1, 5, Fp(1), 0,
                                         clock_.NowMs() + 100'000, 0, Resp(200, "x")});
  std::string unknown_version = good;
  unknown_version[0] = 9;
  for (const std::string& bad :
       {std::string("junk"), good.substr(0, good.size() - 1), good.substr(0, 40),
        unknown_version, good + "trailing", std::string()}) {
    RawPut("bad", bad);
    EXPECT_EQ(store_->Lookup(Scope(7), "bad").outcome, LookupOutcome::kError);
    ClaimResult r = ClaimNow(*store_, Req("bad"));
    EXPECT_EQ(r.status.code, StoreCode::kCorruption);
    ClaimToken t{MakeRecordKey(Scope(7), "bad"), 1, 5};
    EXPECT_EQ(CompleteNow(*store_, t, Resp(200, "")).code, StoreCode::kCorruption);
    EXPECT_EQ(ReleaseNow(*store_, t).code, StoreCode::kCorruption);
  }
  ASSERT_TRUE(DeleteNow(*store_, Scope(7), "bad").ok());  // the admin way out
  EXPECT_EQ(ClaimNow(*store_, Req("bad")).outcome, ClaimOutcome::kFresh);
}

TEST_F(RocksStoreTest, DeleteRemovesAnyRecord) {
  FreshClaim(Req("k"));
  ASSERT_TRUE(DeleteNow(*store_, Scope(7), "k").ok());
  EXPECT_FALSE(RawExists("k"));
  EXPECT_EQ(ClaimNow(*store_, Req("k", 2)).outcome, ClaimOutcome::kFresh);
  EXPECT_TRUE(DeleteNow(*store_, Scope(7), "never-existed").ok());
}

TEST_F(RocksStoreTest, ClaimsInOneBatchSeeEachOther) {
  // Queue many claims at once so they share group commits: exactly one wins.
  constexpr int kN = 200;
  std::vector<std::future<ClaimResult>> results;
  std::vector<std::promise<ClaimResult>> promises(kN);
  for (int i = 0; i < kN; ++i) {
    results.push_back(promises[i].get_future());
    store_->Claim(Req("same"), [&promises, i](ClaimResult r) { promises[i].set_value(r); });
  }
  int fresh = 0, in_flight = 0;
  for (auto& f : results) {
    ClaimResult r = f.get();
    fresh += r.outcome == ClaimOutcome::kFresh;
    in_flight += r.outcome == ClaimOutcome::kInFlight;
  }
  EXPECT_EQ(fresh, 1);
  EXPECT_EQ(in_flight, kN - 1);
}

TEST_F(RocksStoreTest, CallbacksMayCallTheStoreAgain) {
  std::promise<StoreStatus> done;
  Store* store = store_.get();
  store_->Claim(Req("k"), [store, &done](ClaimResult r) {
    store->Complete(r.token, Resp(200, "chained"), [&done](StoreStatus s) { done.set_value(s); });
  });
  EXPECT_TRUE(done.get_future().get().ok());
  EXPECT_EQ(MustFind("k").response.body, "chained");
}

TEST_F(RocksStoreTest, CloseFinishesQueuedOpsThenRefusesNewOnes) {
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
  EXPECT_EQ(store_->Lookup(Scope(7), "k1").outcome, LookupOutcome::kError);
  store_->Close();  // idempotent
  Open();
  EXPECT_EQ(ClaimNow(*store_, Req("k1")).outcome, ClaimOutcome::kInFlight);
}

TEST_F(RocksStoreTest, ApproximateRecordsCountsRecords) {
  EXPECT_EQ(store_->ApproximateRecords(), 0u);
  for (int i = 0; i < 10; ++i) FreshClaim(Req("k" + std::to_string(i)));
  EXPECT_EQ(store_->ApproximateRecords(), 10u);
}

TEST(RocksStoreOpen, FailsCleanlyWithoutClockOrOnBadPath) {
  std::string error;
  RocksStoreOptions o;
  o.path = "/tmp/whatever";
  EXPECT_EQ(OpenRocksStore(o, &error), nullptr);
  EXPECT_FALSE(error.empty());
  FakeClock clock;
  o.clock = &clock;
  o.path = "/proc/self/idemgate-cannot-create-here";
  error.clear();
  EXPECT_EQ(OpenRocksStore(o, &error), nullptr);
  EXPECT_FALSE(error.empty());
}

}  // namespace
}  // namespace idemgate
