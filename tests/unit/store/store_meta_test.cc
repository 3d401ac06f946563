// The store's meta values (the settings signature): durable, never expired by the TTL compaction
// filter, and never seen as a record.
#include <gtest/gtest.h>

#include <filesystem>

#include "store/clock.h"
#include "store/meta_file.h"
#include "store/record.h"
#include "store/rocks_store.h"
#include "store/rocks_store_internal.h"
#include "tests/unit/store/store_test_util.h"

namespace idemgate {
namespace {

using testing::OpenRocksAt;
using testing::TempDir;

TEST(StoreMeta, RoundTripSurvivesReopenAndCompactionPastEveryExpiry) {
  TempDir dir;
  FakeClock clock;
  {
    std::unique_ptr<Store> store = OpenRocksAt(dir.path(), &clock);
    std::optional<std::string> value = "stale";
    ASSERT_TRUE(store->GetMeta("signature", &value).ok());
    EXPECT_FALSE(value.has_value());  // never written
    ASSERT_TRUE(store->PutMeta("signature", std::string("v1\nx=\0y", 7)).ok());
    store->Close();
  }
  std::unique_ptr<Store> store = OpenRocksAt(dir.path(), &clock);
  clock.Advance(400LL * 86'400'000);  // past any record's ttl
  ASSERT_TRUE(CompactRocksStore(store.get()).ok());
  std::optional<std::string> value;
  ASSERT_TRUE(store->GetMeta("signature", &value).ok());
  EXPECT_EQ(value, std::string("v1\nx=\0y", 7));
  ASSERT_TRUE(store->PutMeta("signature", "v2").ok());
  ASSERT_TRUE(store->GetMeta("signature", &value).ok());
  EXPECT_EQ(value, "v2");
}

// Meta values are files beside the database: claims with any scope and key never touch them, and
// a bad name is refused.
TEST(StoreMeta, IsNotARecordAndRecordsAreNotMeta) {
  TempDir dir;
  FakeClock clock;
  std::unique_ptr<Store> store = OpenRocksAt(dir.path(), &clock);
  ASSERT_TRUE(store->PutMeta("signature", "v1").ok());
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/IDEMGATE-META-signature"));
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/IDEMGATE-META-signature.tmp"));
  ClaimRequest claim;
  claim.key = "signature";
  EXPECT_EQ(testing::ClaimNow(*store, claim).outcome, ClaimOutcome::kFresh);
  EXPECT_EQ(store->Lookup(ScopeId{}, "IDEMGATE-META-signature").outcome, LookupOutcome::kMiss);
  std::optional<std::string> value;
  ASSERT_TRUE(store->GetMeta("signature", &value).ok());
  EXPECT_EQ(value, "v1");
  EXPECT_FALSE(store->PutMeta("", "x").ok());
  EXPECT_FALSE(store->PutMeta("../escape", "x").ok());
  EXPECT_FALSE(store->PutMeta(std::string(Store::kMaxMetaName + 1, 'n'), "x").ok());
}

// A failed write leaves the previous value (written to a temporary file, then renamed).
TEST(StoreMeta, AFailedWriteKeepsThePreviousValue) {
  TempDir dir;
  ASSERT_TRUE(WriteMetaFile(dir.path(), "signature", "old").ok());
  std::filesystem::create_directory(dir.path() + "/IDEMGATE-META-signature.tmp");  // blocks it
  EXPECT_FALSE(WriteMetaFile(dir.path(), "signature", "new").ok());
  std::optional<std::string> value;
  ASSERT_TRUE(ReadMetaFile(dir.path(), "signature", &value).ok());
  EXPECT_EQ(value, "old");
}

}  // namespace
}  // namespace idemgate
