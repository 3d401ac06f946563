// The store's decision rules as pure functions, and the writer's bookkeeping (writer_ledger).
#include <gtest/gtest.h>

#include "store/claim_rules.h"
#include "store/writer_ledger.h"
#include "tests/unit/store/store_test_util.h"

namespace idemgate {
namespace {

using namespace idemgate::testing;

constexpr TimeMs kNow = 1'700'000'000'000;

Record InFlight(uint64_t owner, uint32_t attempt, TimeMs lease_until) {
  Record r;
  r.state = RecordState::kInFlight;
  r.owner = owner;
  r.attempt = attempt;
  r.fingerprint = Fp(1);
  r.created_ms = kNow - 1'000;
  r.expires_ms = kNow + 3'600'000;
  r.lease_until_ms = lease_until;
  return r;
}

ClaimToken Token(uint64_t owner, uint32_t attempt) {
  ClaimToken t;
  t.record_key = "k";
  t.owner = owner;
  t.attempt = attempt;
  return t;
}

TEST(ClaimRules, CompleteIsIdempotentForTheSameOwnerAndResponse) {
  Record done = InFlight(42, 1, kNow + 5'000);
  CasDecision first = DecideComplete(done, Token(42, 1), Resp(201, "paid"));
  ASSERT_TRUE(first.status.ok());
  ASSERT_EQ(first.action, WriteAction::kPut);
  // The same Complete again (its synced write was reported failed, yet it landed): ok, no write.
  CasDecision again = DecideComplete(first.record, Token(42, 1), Resp(201, "paid"));
  EXPECT_TRUE(again.status.ok());
  EXPECT_EQ(again.action, WriteAction::kNone);
  // Another response, another owner or another attempt: stale, nothing written.
  EXPECT_EQ(DecideComplete(first.record, Token(42, 1), Resp(201, "other")).status.code,
            StoreCode::kStaleClaim);
  EXPECT_EQ(DecideComplete(first.record, Token(43, 1), Resp(201, "paid")).status.code,
            StoreCode::kStaleClaim);
  EXPECT_EQ(DecideComplete(first.record, Token(42, 2), Resp(201, "paid")).status.code,
            StoreCode::kStaleClaim);
  EXPECT_EQ(DecideComplete(first.record, Token(0, 1), Resp(201, "paid")).status.code,
            StoreCode::kStaleClaim);
}

TEST(ClaimRules, LocalAttemptKeepsAnExpiredWallClockLease) {
  Record r = InFlight(42, 1, kNow - 1);  // the wall clock says the lease is over
  ClaimDecision local = DecideClaim(r, Req("k"), "k", ClaimTime{kNow, kNow, 2'001}, 7);
  EXPECT_EQ(local.result.outcome, ClaimOutcome::kInFlight);
  EXPECT_EQ(local.action, WriteAction::kNone);
  EXPECT_EQ(local.result.retry_after_s, 3);
  ClaimDecision remote = DecideClaim(r, Req("k"), "k", ClaimTime{kNow, kNow, 0}, 7);
  EXPECT_EQ(remote.result.outcome, ClaimOutcome::kTakeover);
}

// Judged as of arrival (inside the lease: in flight, whenever it is decided); a lease it starts
// counts from the decision.
TEST(ClaimRules, RecordJudgedAsOfArrivalNewLeaseFromTheDecision) {
  Record r = InFlight(42, 1, kNow + 1'000);
  ClaimDecision late = DecideClaim(r, Req("k"), "k", ClaimTime{kNow, kNow + 5'000}, 7);
  EXPECT_EQ(late.result.outcome, ClaimOutcome::kInFlight);
  EXPECT_EQ(late.result.retry_after_s, 1);
  ClaimDecision after =
      DecideClaim(r, Req("k", 1, 6'000), "k", ClaimTime{kNow + 1'000, kNow + 5'000}, 7);
  EXPECT_EQ(after.result.outcome, ClaimOutcome::kTakeover);
  EXPECT_EQ(after.result.token.lease_left_ms, 6'000);  // counted from the decision
  EXPECT_EQ(after.record.lease_until_ms, kNow + 11'000);
  ClaimDecision fresh =
      DecideClaim(std::nullopt, Req("n", 1, 6'000), "n", ClaimTime{kNow, kNow + 5'000}, 7);
  EXPECT_EQ(fresh.result.token.lease_left_ms, 6'000);
  EXPECT_EQ(fresh.record.lease_until_ms, kNow + 11'000);
}

TEST(LocalAttempts, LeftOnlyForTheSameLiveAttempt) {
  LocalAttempts local;
  local.Start("k", 42, 1, /*mono_end=*/10'000);
  std::optional<Record> r = InFlight(42, 1, kNow);
  EXPECT_EQ(local.LeftMs("k", r, 4'000), 6'000);
  EXPECT_EQ(local.LeftMs("other", r, 4'000), 0);
  std::optional<Record> taken = InFlight(43, 2, kNow);
  EXPECT_EQ(local.LeftMs("k", taken, 4'000), 0);  // not ours any more: forgotten
  EXPECT_EQ(local.size(), 0u);
  local.Start("k", 42, 1, 10'000);
  EXPECT_EQ(local.LeftMs("k", r, 10'000), 0);  // passed
  local.Start("a", 1, 1, 5'000);
  local.Start("b", 2, 1, 50'000);
  local.Prune(6'000);
  EXPECT_EQ(local.size(), 1u);
  local.End("b");
  EXPECT_EQ(local.size(), 0u);
}

TEST(LocalAttempts, StagedChangesTakeEffectOnlyOnCommit) {
  LocalAttempts local;
  std::optional<Record> r = InFlight(42, 1, kNow);
  local.StageStart("k", 42, 1, 10'000);
  EXPECT_EQ(local.LeftMs("k", r, 0), 0);
  local.Drop();  // the batch's write failed
  local.Commit(0);
  EXPECT_EQ(local.LeftMs("k", r, 0), 0);
  local.StageStart("k", 42, 1, 10'000);
  local.Commit(0);
  EXPECT_EQ(local.LeftMs("k", r, 0), 10'000);
  local.StageEnd("k");
  local.Commit(0);
  EXPECT_EQ(local.LeftMs("k", r, 0), 0);
}

TEST(BatchUndo, FailedClaimsAreUndoneFailedReleasesCarriedOutCompletesLeft) {
  BatchUndo undo;
  Record taken = InFlight(42, 1, kNow - 1);
  Record mine = InFlight(7, 2, kNow + 5'000);
  undo.Note(BatchUndo::Kind::kClaim, "fresh", std::nullopt, WriteAction::kPut, mine, kNow);
  undo.Note(BatchUndo::Kind::kClaim, "takeover", taken, WriteAction::kPut, mine, kNow);
  undo.Note(BatchUndo::Kind::kReleaseOrDelete, "released", mine, WriteAction::kDelete, {}, kNow);
  undo.Note(BatchUndo::Kind::kComplete, "completed", mine, WriteAction::kPut, mine, kNow);
  undo.Note(BatchUndo::Kind::kClaim, "replayed", std::nullopt, WriteAction::kNone, {}, kNow);
  // Released, then claimed afresh in the same batch: the release stands, the claim does not.
  undo.Note(BatchUndo::Kind::kReleaseOrDelete, "both", mine, WriteAction::kDelete, {}, kNow);
  undo.Note(BatchUndo::Kind::kClaim, "both", std::nullopt, WriteAction::kPut, mine, kNow);
  std::map<std::string, ReconcileWrite> by_key;
  for (ReconcileWrite& w : undo.Reconcile()) by_key[w.key] = w;
  ASSERT_EQ(by_key.size(), 4u);
  EXPECT_EQ(by_key["fresh"].action, WriteAction::kDelete);
  EXPECT_EQ(by_key["takeover"].action, WriteAction::kPut);
  EXPECT_EQ(by_key["takeover"].record, taken);
  EXPECT_EQ(by_key["released"].action, WriteAction::kDelete);
  EXPECT_EQ(by_key["both"].action, WriteAction::kDelete);
  EXPECT_EQ(by_key.count("completed"), 0u);
}

}  // namespace
}  // namespace idemgate
