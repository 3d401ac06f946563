// SPDX-License-Identifier: Apache-2.0
// Disk faults: a failing write reports an error for the whole batch, the store recovers without a
// restart, and what a failed write reported is what the store holds afterwards.
#include <gtest/gtest.h>

#include "store/rocks_store.h"
#include "store/rocks_store_internal.h"
#include "tests/unit/store/store_fault_fs.h"
#include "tests/unit/store/store_test_util.h"

namespace idemgate {
namespace {

using namespace idemgate::testing;

using StoreFaultTest = FaultyStoreTest;

class StoreWriteErrorTest : public StoreFaultTest, public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override {
    faults_.no_space = GetParam();
    StoreFaultTest::SetUp();
  }
};

TEST_P(StoreWriteErrorTest, WriteErrorIsReportedThenStoreRecovers) {
  ClaimResult first = ClaimNow(*store_, Req("a"));
  ASSERT_TRUE(first.status.ok()) << first.status.message;
  StoreCode expected = GetParam() ? StoreCode::kNoSpace : StoreCode::kIoError;

  faults_.failing = true;
  ClaimResult failed = ClaimNow(*store_, Req("b"));
  EXPECT_EQ(failed.status.code, expected) << failed.status.message;
  StoreStatus complete = CompleteNow(*store_, first.token, Resp(200, "x"));
  EXPECT_FALSE(complete.ok());
  EXPECT_NE(complete.code, StoreCode::kStaleClaim);
  // While the disk fails, a read may fail too (the DB may be closed for reopening), but it never
  // claims the record is absent.
  EXPECT_NE(store_->Lookup(Scope(7), "a").outcome, LookupOutcome::kMiss);

  faults_.failing = false;  // the disk is back: no restart needed
  ClaimResult again = ClaimNow(*store_, Req("b"));
  ASSERT_TRUE(again.status.ok()) << again.status.message;
  EXPECT_EQ(again.outcome, ClaimOutcome::kFresh);
  EXPECT_TRUE(CompleteNow(*store_, first.token, Resp(200, "x")).ok());
  EXPECT_EQ(store_->Lookup(Scope(7), "a").record.response.body, "x");
}

INSTANTIATE_TEST_SUITE_P(IoErrorAndNoSpace, StoreWriteErrorTest, ::testing::Bool());

// The WAL bytes of a claim were appended but their fdatasync failed: the claim was reported as
// failed (the client got 503, nothing went upstream), so the key must be free afterwards, both
// in the running store and after a restart replays the WAL.
TEST_F(StoreFaultTest, FailedWalSyncUnderClaimLeavesTheKeyFree) {
  ASSERT_TRUE(ClaimNow(*store_, Req("warm")).status.ok());
  faults_.wal_sync_failures = 1;
  ClaimResult failed = ClaimNow(*store_, Req("k"));
  ASSERT_EQ(failed.status.code, StoreCode::kIoError) << failed.status.message;

  ClaimResult retry = ClaimNow(*store_, Req("k"));
  ASSERT_TRUE(retry.status.ok()) << retry.status.message;
  EXPECT_EQ(retry.outcome, ClaimOutcome::kFresh);
  EXPECT_TRUE(ReleaseNow(*store_, retry.token).ok());

  Reopen();  // what the WAL holds must agree with what was reported
  ClaimResult after = ClaimNow(*store_, Req("k"));
  ASSERT_TRUE(after.status.ok()) << after.status.message;
  EXPECT_EQ(after.outcome, ClaimOutcome::kFresh);
}

// Same after a restart that comes before any other write.
TEST_F(StoreFaultTest, FailedWalSyncUnderClaimLeavesTheKeyFreeAfterRestart) {
  ASSERT_TRUE(ClaimNow(*store_, Req("warm")).status.ok());
  faults_.wal_sync_failures = 1;
  ASSERT_EQ(ClaimNow(*store_, Req("k")).status.code, StoreCode::kIoError);
  Reopen();
  ClaimResult after = ClaimNow(*store_, Req("k"));
  ASSERT_TRUE(after.status.ok()) << after.status.message;
  EXPECT_EQ(after.outcome, ClaimOutcome::kFresh);
}

// A takeover whose sync failed: the record is back to the expired in-flight record it took over
// (same attempt), so the next claim takes it over again.
TEST_F(StoreFaultTest, FailedWalSyncUnderTakeoverRestoresTheRecordItTookOver) {
  ClaimResult first = ClaimNow(*store_, Req("k", 1, 1'000));
  ASSERT_EQ(first.outcome, ClaimOutcome::kFresh);
  clock_.Advance(2'000);
  faults_.wal_sync_failures = 1;
  ASSERT_EQ(ClaimNow(*store_, Req("k", 1, 1'000)).status.code, StoreCode::kIoError);
  ClaimResult retry = ClaimNow(*store_, Req("k", 1, 1'000));
  ASSERT_TRUE(retry.status.ok()) << retry.status.message;
  EXPECT_EQ(retry.outcome, ClaimOutcome::kTakeover);
  EXPECT_EQ(retry.token.attempt, 2u);
}

// The completion's WAL bytes were appended but their sync failed: the owner was told "error",
// retries its Complete with the same response, and that must succeed (not "taken over").
TEST_F(StoreFaultTest, FailedWalSyncUnderCompleteThenTheSameCompleteSucceeds) {
  ClaimResult claim = ClaimNow(*store_, Req("k"));
  ASSERT_EQ(claim.outcome, ClaimOutcome::kFresh);
  faults_.wal_sync_failures = 1;
  StoreStatus failed = CompleteNow(*store_, claim.token, Resp(201, "paid"));
  ASSERT_EQ(failed.code, StoreCode::kIoError) << failed.message;
  StoreStatus retried = CompleteNow(*store_, claim.token, Resp(201, "paid"));
  EXPECT_TRUE(retried.ok()) << retried.message;
  ClaimResult replay = ClaimNow(*store_, Req("k"));
  EXPECT_EQ(replay.outcome, ClaimOutcome::kReplay);
  EXPECT_EQ(replay.record.response.body, "paid");
  Reopen();
  EXPECT_EQ(ClaimNow(*store_, Req("k")).record.response.body, "paid");
}

// A Release reported as failed still frees the key once the store recovers (the owner has given
// up on it and told its client nothing went upstream).
TEST_F(StoreFaultTest, FailedWalSyncUnderReleaseStillFreesTheKey) {
  ClaimResult claim = ClaimNow(*store_, Req("k"));
  ASSERT_EQ(claim.outcome, ClaimOutcome::kFresh);
  faults_.wal_sync_failures = 1;
  ASSERT_EQ(ReleaseNow(*store_, claim.token).code, StoreCode::kIoError);
  ClaimResult retry = ClaimNow(*store_, Req("k"));
  ASSERT_TRUE(retry.status.ok()) << retry.status.message;
  EXPECT_EQ(retry.outcome, ClaimOutcome::kFresh);
}

}  // namespace
}  // namespace idemgate
