// SPDX-License-Identifier: Apache-2.0
// When a claim is decided: against the time it reached the store, not the time
// a stalled writer got to it; and, while this process runs the attempt that owns a record, not
// before that attempt's monotonic deadline, whatever the wall clock does.
#include <gtest/gtest.h>

#include <future>

#include "store/rocks_store.h"
#include "store/rocks_store_internal.h"
#include "tests/unit/store/store_fault_fs.h"
#include "tests/unit/store/store_test_util.h"

namespace idemgate {
namespace {

using namespace idemgate::testing;

constexpr TimeMs kLease = 6'000;

class StoreTimingTest : public FaultyStoreTest {
 protected:
  std::future<ClaimResult> ClaimLater(ClaimRequest r) {
    auto p = std::make_shared<std::promise<ClaimResult>>();
    store_->Claim(std::move(r), [p](ClaimResult res) { p->set_value(std::move(res)); });
    return p->get_future();
  }
  std::future<StoreStatus> CompleteLater(ClaimToken t, StoredResponse resp) {
    auto p = std::make_shared<std::promise<StoreStatus>>();
    store_->Complete(std::move(t), std::move(resp),
                     [p](StoreStatus s) { p->set_value(std::move(s)); });
    return p->get_future();
  }
};

// The timeline: A claims with a 6 s lease; a sync of another key stalls the writer; a
// retry B arrives at +2.35 s and A's answer at +3 s; the stall ends at +7 s. B is in flight (it
// came inside A's lease) and A's Complete is stored.
TEST_F(StoreTimingTest, StalledWriterDecidesAClaimAsOfItsArrival) {
  ClaimResult a = ClaimNow(*store_, Req("k", 1, kLease));
  ASSERT_EQ(a.outcome, ClaimOutcome::kFresh);
  faults_.ArmStall();
  auto other = ClaimLater(Req("other", 2, kLease));
  ASSERT_TRUE(faults_.WaitStalled());  // the writer is inside the sync of `other`'s batch
  clock_.Advance(2'350);
  auto b = ClaimLater(Req("k", 1, kLease));
  clock_.Advance(650);
  auto complete = CompleteLater(a.token, Resp(201, "paid once"));
  clock_.Advance(4'000);  // the stall ends after A's lease
  faults_.ReleaseStall();

  ASSERT_TRUE(other.get().status.ok());
  ClaimResult retry = b.get();
  ASSERT_TRUE(retry.status.ok()) << retry.status.message;
  EXPECT_EQ(retry.outcome, ClaimOutcome::kInFlight) << "a retry inside the lease took over";
  StoreStatus completed = complete.get();
  EXPECT_TRUE(completed.ok()) << completed.message;
  ClaimResult after = ClaimNow(*store_, Req("k", 1, kLease));
  EXPECT_EQ(after.outcome, ClaimOutcome::kReplay);
  EXPECT_EQ(after.record.response.body, "paid once");
}

// The same with a record this process does not run (written before a restart): the stored
// lease alone decides, as of the retry's arrival.
TEST_F(StoreTimingTest, StalledWriterDecidesAsOfArrivalForARecordFromBeforeARestart) {
  ASSERT_EQ(ClaimNow(*store_, Req("k", 1, kLease)).outcome, ClaimOutcome::kFresh);
  Reopen();
  faults_.ArmStall();
  auto other = ClaimLater(Req("other", 2, kLease));
  ASSERT_TRUE(faults_.WaitStalled());
  clock_.Advance(kLease - 1);
  auto b = ClaimLater(Req("k", 1, kLease));
  clock_.Advance(2);
  faults_.ReleaseStall();
  ASSERT_TRUE(other.get().status.ok());
  ClaimResult retry = b.get();
  EXPECT_EQ(retry.outcome, ClaimOutcome::kInFlight);
  EXPECT_EQ(retry.retry_after_s, 1);
}

// A claim queued behind a stalled sync gets its whole lease, counted from when it is decided.
TEST_F(StoreTimingTest, ClaimQueuedBehindAStallGetsItsWholeLease) {
  faults_.ArmStall();
  auto other = ClaimLater(Req("other", 2, kLease));
  ASSERT_TRUE(faults_.WaitStalled());
  auto queued = ClaimLater(Req("k", 1, kLease));
  clock_.Advance(5'000);
  faults_.ReleaseStall();
  ASSERT_TRUE(other.get().status.ok());
  ClaimResult r = queued.get();
  ASSERT_EQ(r.outcome, ClaimOutcome::kFresh);
  EXPECT_EQ(r.token.lease_left_ms, kLease);
}

// A retry that arrives after the lease still takes over, even when A's Complete was queued
// behind it: the Complete is refused as stale (C3).
TEST_F(StoreTimingTest, ClaimArrivingAfterTheLeaseTakesOver) {
  ClaimResult a = ClaimNow(*store_, Req("k", 1, kLease));
  faults_.ArmStall();
  auto other = ClaimLater(Req("other", 2, kLease));
  ASSERT_TRUE(faults_.WaitStalled());
  clock_.Advance(kLease);
  auto b = ClaimLater(Req("k", 1, kLease));
  auto complete = CompleteLater(a.token, Resp(201, "late"));
  faults_.ReleaseStall();
  EXPECT_EQ(b.get().outcome, ClaimOutcome::kTakeover);
  EXPECT_EQ(complete.get().code, StoreCode::kStaleClaim);
}

// A forward wall-clock step of 10 s at +0.5 s: the attempt this process runs keeps its key until
// its monotonic deadline; Retry-After counts from that deadline.
TEST_F(StoreTimingTest, WallClockStepDoesNotEndALocalAttemptsLease) {
  ClaimResult a = ClaimNow(*store_, Req("k", 1, kLease));
  ASSERT_EQ(a.outcome, ClaimOutcome::kFresh);
  clock_.Advance(500);
  clock_.Step(10'000);
  ClaimResult b = ClaimNow(*store_, Req("k", 1, kLease));
  ASSERT_TRUE(b.status.ok());
  EXPECT_EQ(b.outcome, ClaimOutcome::kInFlight) << "the wall clock step let a retry take over";
  EXPECT_EQ(b.retry_after_s, 6);  // 5.5 s left on the monotonic clock, rounded up
  EXPECT_TRUE(CompleteNow(*store_, a.token, Resp(201, "once")).ok());
  EXPECT_EQ(ClaimNow(*store_, Req("k", 1, kLease)).outcome, ClaimOutcome::kReplay);
}

// Past the attempt's monotonic deadline the takeover happens as usual.
TEST_F(StoreTimingTest, LocalAttemptPastItsMonotonicDeadlineIsTakenOver) {
  ClaimResult a = ClaimNow(*store_, Req("k", 1, kLease));
  clock_.Step(10'000);
  ASSERT_EQ(ClaimNow(*store_, Req("k", 1, kLease)).outcome, ClaimOutcome::kInFlight);
  clock_.Advance(kLease);
  ClaimResult b = ClaimNow(*store_, Req("k", 1, kLease));
  EXPECT_EQ(b.outcome, ClaimOutcome::kTakeover);
  EXPECT_EQ(CompleteNow(*store_, a.token, Resp(201, "late")).code, StoreCode::kStaleClaim);
}

// A released attempt is no longer local: its record (a takeover's, back in flight with an expired
// lease) is taken over at once.
TEST_F(StoreTimingTest, ReleasedAttemptIsNoLongerLocal) {
  ClaimResult a = ClaimNow(*store_, Req("k", 1, kLease));
  clock_.Advance(kLease);
  ClaimResult b = ClaimNow(*store_, Req("k", 1, kLease));
  ASSERT_EQ(b.outcome, ClaimOutcome::kTakeover);
  ASSERT_TRUE(ReleaseNow(*store_, b.token).ok());
  clock_.Step(1);
  EXPECT_EQ(ClaimNow(*store_, Req("k", 1, kLease)).outcome, ClaimOutcome::kTakeover);
}

// After a restart no attempt is local: the stored wall-clock lease is all there is.
TEST_F(StoreTimingTest, AfterARestartTheStoredLeaseIsAllThereIs) {
  ASSERT_EQ(ClaimNow(*store_, Req("k", 1, kLease)).outcome, ClaimOutcome::kFresh);
  Reopen();
  clock_.Step(10'000);
  EXPECT_EQ(ClaimNow(*store_, Req("k", 1, kLease)).outcome, ClaimOutcome::kTakeover);
}

}  // namespace
}  // namespace idemgate
