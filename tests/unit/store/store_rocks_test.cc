// RocksStore-only cases against a real RocksDB: compaction, the block-cache tier, undecodable
// values, physical deletion, open failures. The behaviour every backend shares is in
// store_contract_test.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <future>

#include "store/rocks_store.h"
#include "store/rocks_store_internal.h"
#include "tests/unit/store/store_test_util.h"

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

TEST_F(RocksStoreTest, ReleaseOfFirstAttemptLeavesNothingOnDisk) {
  ClaimToken token = FreshClaim(Req("k"));
  ASSERT_TRUE(ReleaseNow(*store_, token).ok());
  EXPECT_FALSE(RawExists("k"));
  EXPECT_EQ(store_->Lookup(Scope(7), "k").outcome, LookupOutcome::kMiss);
  EXPECT_EQ(ClaimNow(*store_, Req("k", 3)).outcome, ClaimOutcome::kFresh);
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

TEST_F(RocksStoreTest, DeleteLeavesNothingOnDisk) {
  FreshClaim(Req("k"));
  ASSERT_TRUE(DeleteNow(*store_, Scope(7), "k").ok());
  EXPECT_FALSE(RawExists("k"));
  EXPECT_EQ(ClaimNow(*store_, Req("k", 2)).outcome, ClaimOutcome::kFresh);
  EXPECT_TRUE(DeleteNow(*store_, Scope(7), "never-existed").ok());
}

TEST_F(RocksStoreTest, ApproximateRecordsCountsRecords) {
  EXPECT_EQ(store_->ApproximateRecords(), 0u);
  for (int i = 0; i < 10; ++i) FreshClaim(Req("k" + std::to_string(i)));
  EXPECT_EQ(store_->ApproximateRecords(), 10u);
}

// Stores `n` completed records k0..k(n-1) and compacts them into SST files.
void FillAndCompact(Store& store, int n) {
  for (int i = 0; i < n; ++i) {
    ClaimResult r = ClaimNow(store, Req("k" + std::to_string(i)));
    ASSERT_EQ(r.outcome, ClaimOutcome::kFresh);
    ASSERT_TRUE(CompleteNow(store, r.token, Resp(201, "{\"n\":" + std::to_string(i) + "}")).ok());
  }
  ASSERT_TRUE(CompactRocksStore(&store).ok());
}

TEST_F(RocksStoreTest, NewStoreSizesLevelsDynamicallyAndKeepsItsRecordsOnReopen) {
  EXPECT_TRUE(RocksStoreDb(store_.get())->GetOptions().level_compaction_dynamic_level_bytes);
  FillAndCompact(*store_, 50);
  Reopen();
  EXPECT_TRUE(RocksStoreDb(store_.get())->GetOptions().level_compaction_dynamic_level_bytes);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(MustFind("k" + std::to_string(i)).response.body, "{\"n\":" + std::to_string(i) + "}");
  }
}

// A store created by an earlier version has no layout file: it keeps RocksDB's static level
// sizes (no migration in RocksDB 7.x), every record, and takes new ones.
TEST_F(RocksStoreTest, StoreFromBeforeLayoutsKeepsStaticLevelsAndEveryRecord) {
  FillAndCompact(*store_, 50);
  store_->Close();
  store_.reset();
  const std::string meta = dir_.path() + "/db/IDEMGATE-META-layout";
  ASSERT_TRUE(std::filesystem::remove(meta));
  for (int round = 0; round < 2; ++round) {
    Open();
    EXPECT_FALSE(RocksStoreDb(store_.get())->GetOptions().level_compaction_dynamic_level_bytes);
    EXPECT_FALSE(std::filesystem::exists(meta));
    for (int i = 0; i < 50; ++i) {
      EXPECT_EQ(MustFind("k" + std::to_string(i)).response.body,
                "{\"n\":" + std::to_string(i) + "}");
    }
    FreshClaim(Req("new" + std::to_string(round)));
    ASSERT_TRUE(CompactRocksStore(store_.get()).ok());
    store_->Close();
    store_.reset();
  }
  Open();
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
