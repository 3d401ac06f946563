// SPDX-License-Identifier: Apache-2.0
// The store's decision rules: claim outcomes (SPEC §5), complete and release compare-and-set.
#include "store/claim_rules.h"

#include <algorithm>

namespace idemgate {
namespace {

bool CasMatches(const std::optional<Record>& existing, const ClaimToken& token) {
  return existing.has_value() && existing->state == RecordState::kInFlight && token.owner != 0 &&
         existing->attempt == token.attempt && existing->owner == token.owner;
}

// This very Complete already landed (its write was reported as failed, yet it is stored).
bool CompletedBy(const std::optional<Record>& existing, const ClaimToken& token,
                 const StoredResponse& response) {
  return existing.has_value() && existing->state == RecordState::kCompleted && token.owner != 0 &&
         existing->attempt == token.attempt && existing->owner == token.owner &&
         existing->response == response;
}

StoreStatus Stale() { return {StoreCode::kStaleClaim, "claim was taken over or is gone"}; }

}  // namespace

int64_t RetryAfterSeconds(TimeMs lease_until_ms, TimeMs now) {
  TimeMs left = lease_until_ms - now;
  if (left <= 0) return 1;
  return std::max<int64_t>(1, (left + 999) / 1000);
}

RecordVerdict JudgeRecord(const std::optional<Record>& existing, const Fingerprint& fingerprint,
                          TimeMs now) {
  RecordVerdict v;
  if (!existing.has_value() || existing->ExpiredAt(now)) return v;  // kFresh
  const Record& old = *existing;
  if (old.fingerprint != fingerprint) {
    v.outcome = ClaimOutcome::kMismatch;
  } else if (old.state == RecordState::kCompleted) {
    v.outcome = ClaimOutcome::kReplay;
  } else if (now < old.lease_until_ms) {
    v.outcome = ClaimOutcome::kInFlight;
    v.retry_after_s = RetryAfterSeconds(old.lease_until_ms, now);
  } else {
    v.outcome = ClaimOutcome::kTakeover;
  }
  return v;
}

ClaimDecision DecideClaim(const std::optional<Record>& existing, const ClaimRequest& request,
                          std::string record_key, ClaimTime time, uint64_t new_owner) {
  ClaimDecision d;
  const TimeMs now = time.now;
  // The stored record is judged as of the claim's arrival (a stalled writer must not turn a retry
  // that came inside a lease into a takeover); Retry-After and a new lease count from now.
  RecordVerdict verdict = JudgeRecord(existing, request.fingerprint, time.arrived);
  if (verdict.outcome == ClaimOutcome::kInFlight) {
    verdict.retry_after_s = RetryAfterSeconds(existing->lease_until_ms, now);
  }
  if (verdict.outcome == ClaimOutcome::kTakeover && time.local_left_ms > 0) {
    // The wall clock stepped past a lease this process still runs: it stays in flight.
    verdict.outcome = ClaimOutcome::kInFlight;
    verdict.retry_after_s = RetryAfterSeconds(time.local_left_ms, 0);
  }
  d.result.outcome = verdict.outcome;
  switch (verdict.outcome) {
    case ClaimOutcome::kReplay:
    case ClaimOutcome::kMismatch:
    case ClaimOutcome::kInFlight:
      d.result.record = *existing;
      d.result.retry_after_s = verdict.retry_after_s;
      return d;
    case ClaimOutcome::kTakeover:
      // Never let the record expire while in flight.
      d.record = *existing;
      d.record.attempt = existing->attempt + 1;
      d.record.expires_ms = std::max(existing->expires_ms, now + request.ttl_ms);
      break;
    case ClaimOutcome::kFresh:
      d.record.state = RecordState::kInFlight;
      d.record.attempt = 1;
      d.record.fingerprint = request.fingerprint;
      d.record.created_ms = now;
      d.record.expires_ms = now + request.ttl_ms;
      break;
  }
  d.record.owner = new_owner;
  d.record.lease_until_ms = now + request.lease_ms;
  d.action = WriteAction::kPut;
  d.result.token.record_key = std::move(record_key);
  d.result.token.attempt = d.record.attempt;
  d.result.token.owner = new_owner;
  d.result.token.lease_left_ms = d.record.lease_until_ms - now;
  return d;
}

CasDecision DecideComplete(const std::optional<Record>& existing, const ClaimToken& token,
                           StoredResponse response, TimeMs now) {
  CasDecision d;
  if (!CasMatches(existing, token)) {
    if (!CompletedBy(existing, token, response)) d.status = Stale();
    return d;
  }
  d.record = *existing;
  d.record.state = RecordState::kCompleted;
  d.record.response = std::move(response);
  d.record.completed_ms = now;
  d.action = WriteAction::kPut;
  return d;
}

CasDecision DecideRelease(const std::optional<Record>& existing, const ClaimToken& token,
                          TimeMs now) {
  CasDecision d;
  if (!CasMatches(existing, token)) {
    d.status = Stale();
    return d;
  }
  if (existing->attempt <= 1) {
    d.action = WriteAction::kDelete;
    return d;
  }
  d.record = *existing;
  d.record.lease_until_ms = now;
  d.record.owner = 0;
  d.action = WriteAction::kPut;
  return d;
}

}  // namespace idemgate
