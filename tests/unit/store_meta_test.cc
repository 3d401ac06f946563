// The store's meta values (the settings signature): durable, never expired by the TTL compaction
// filter, and never seen as a record.
#include <gtest/gtest.h>

#include "store/clock.h"
#include "store/meta_key.h"
#include "store/record.h"
#include "store/rocks_store.h"
#include "store/rocks_store_internal.h"
#include "tests/unit/store_test_util.h"

namespace idemgate {
namespace {

using testing::TempDir;

std::unique_ptr<Store> Open(const std::string& path, const Clock* clock) {
  RocksStoreOptions options;
  options.path = path;
  options.clock = clock;
  std::string error;
  std::unique_ptr<Store> store = OpenRocksStore(options, &error);
  EXPECT_NE(store, nullptr) << error;
  return store;
}

TEST(StoreMeta, RoundTripSurvivesReopenAndCompactionPastEveryExpiry) {
  TempDir dir;
  FakeClock clock;
  {
    std::unique_ptr<Store> store = Open(dir.path(), &clock);
    std::optional<std::string> value = "stale";
    ASSERT_TRUE(store->GetMeta("signature", &value).ok());
    EXPECT_FALSE(value.has_value());  // never written
    ASSERT_TRUE(store->PutMeta("signature", std::string("v1\nx=\0y", 7)).ok());
    store->Close();
  }
  std::unique_ptr<Store> store = Open(dir.path(), &clock);
  clock.Advance(400LL * 86'400'000);  // past any record's ttl
  ASSERT_TRUE(CompactRocksStore(store.get()).ok());
  std::optional<std::string> value;
  ASSERT_TRUE(store->GetMeta("signature", &value).ok());
  EXPECT_EQ(value, std::string("v1\nx=\0y", 7));
  ASSERT_TRUE(store->PutMeta("signature", "v2").ok());
  ASSERT_TRUE(store->GetMeta("signature", &value).ok());
  EXPECT_EQ(value, "v2");
}

// No record key (a 32-byte scope id plus the key) can reach a meta value, whatever the scope.
TEST(StoreMeta, IsNotARecordAndRecordsAreNotMeta) {
  TempDir dir;
  FakeClock clock;
  std::unique_ptr<Store> store = Open(dir.path(), &clock);
  ASSERT_TRUE(store->PutMeta("signature", "v1").ok());
  ScopeId scope{};
  const std::string prefix("\0idemgate-meta:", 15);
  for (size_t i = 0; i < prefix.size(); ++i) scope[i] = static_cast<uint8_t>(prefix[i]);
  std::string rest = "signature";
  for (size_t i = prefix.size(); i < scope.size() && !rest.empty(); ++i) {
    scope[i] = static_cast<uint8_t>(rest.front());
    rest.erase(0, 1);
  }
  EXPECT_EQ(store->Lookup(scope, rest.empty() ? "x" : rest).outcome, LookupOutcome::kMiss);
  ClaimRequest claim;
  claim.scope = scope;
  claim.key = "signature";
  EXPECT_EQ(testing::ClaimNow(*store, claim).outcome, ClaimOutcome::kFresh);
  std::optional<std::string> value;
  ASSERT_TRUE(store->GetMeta("signature", &value).ok());
  EXPECT_EQ(value, "v1");
  EXPECT_FALSE(store->PutMeta("", "x").ok());
  EXPECT_FALSE(store->PutMeta(std::string(Store::kMaxMetaName + 1, 'n'), "x").ok());
}

// Whatever its value (even an encoded, expired record), a meta value never decodes as a record
// header (the TTL filter would drop it), and a meta key is never the length of a record key.
TEST(StoreMeta, EncodingCannotPassForARecord) {
  Record expired;
  expired.state = RecordState::kCompleted;
  expired.expires_ms = 1;
  const std::string record_bytes = EncodeRecord(expired);
  ASSERT_TRUE(DecodeRecordHeader(record_bytes).has_value());
  EXPECT_FALSE(DecodeRecordHeader(EncodeMetaValue(record_bytes)).has_value());
  EXPECT_EQ(DecodeMetaValue(EncodeMetaValue(record_bytes)), record_bytes);
  EXPECT_FALSE(DecodeMetaValue(record_bytes).has_value());
  std::optional<std::string> key = MetaKey(std::string(Store::kMaxMetaName, 'n'));
  ASSERT_TRUE(key.has_value());
  EXPECT_LT(key->size(), MakeRecordKey(ScopeId{}, "").size());
}

}  // namespace
}  // namespace idemgate
