// SPDX-License-Identifier: Apache-2.0
// The store's decision rules (SPEC §5, R3a) as pure functions of the stored record and the time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "store/record.h"
#include "store/store.h"

namespace idemgate {

// What a decision asks the writer to do to the record.
enum class WriteAction {
  kNone,    // nothing to write
  kPut,     // write `record`
  kDelete,  // delete the record
};

// SPEC §5 read against a stored record, for the outcomes that write nothing. Shared by the
// writer's DecideClaim and the event loops' read-only fast path, so the table exists once.
struct RecordVerdict {
  // kFresh: no live record; kTakeover: in flight with an expired lease (both need the writer);
  // kReplay, kInFlight (retry_after_s set), kMismatch: answered from the record as it is.
  ClaimOutcome outcome = ClaimOutcome::kFresh;
  int64_t retry_after_s = 0;
};
RecordVerdict JudgeRecord(const std::optional<Record>& existing, const Fingerprint& fingerprint,
                          TimeMs now);

struct ClaimDecision {
  ClaimResult result;
  WriteAction action = WriteAction::kNone;
  Record record;  // kPut: the record to write
};

// When a claim is decided. A writer stalled on the disk must not turn a retry that came inside
// a lease into a takeover, so the stored record is judged as of the claim's arrival; a lease it
// starts, and Retry-After, count from the decision.
struct ClaimTime {
  TimeMs arrived = 0;  // when the claim reached the store: is the record expired, its lease over?
  TimeMs now = 0;      // when the writer decides it: a new lease starts here
  // > 0: the existing in-flight record's owner is an attempt this process is running, whose own
  // (monotonic) lease has that long left; it stays in flight whatever the wall clock says.
  TimeMs local_left_ms = 0;
};

// `existing` is the decoded stored record (nullopt when there is none); an expired one counts
// as absent. `new_owner` is the random token for a fresh or takeover attempt (never 0).
ClaimDecision DecideClaim(const std::optional<Record>& existing, const ClaimRequest& request,
                          std::string record_key, ClaimTime time, uint64_t new_owner);

struct CasDecision {
  StoreStatus status;
  WriteAction action = WriteAction::kNone;
  Record record;  // kPut: the record to write
};

// Compare-and-set on (in flight, attempt, owner): stores the response as completed. Idempotent:
// a record already completed by this owner and attempt with this same response is ok, and
// nothing is written (the owner retries a Complete whose synced write failed after it landed).
// `now` (the store's clock) is kept as the record's completed_ms (R6: Age).
CasDecision DecideComplete(const std::optional<Record>& existing, const ClaimToken& token,
                           StoredResponse response, TimeMs now = 0);

// Same compare-and-set; a first attempt is deleted, a takeover returns to in flight with an
// expired lease (lease_until = now) and no owner.
CasDecision DecideRelease(const std::optional<Record>& existing, const ClaimToken& token,
                          TimeMs now);

// Seconds left on a lease, rounded up, at least 1.
int64_t RetryAfterSeconds(TimeMs lease_until_ms, TimeMs now);

}  // namespace idemgate
