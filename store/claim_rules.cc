// The store's decision rules: claim outcomes (SPEC §5), complete and release compare-and-set.
#include "store/claim_rules.h"

#include <algorithm>

namespace idemgate {
namespace {

bool CasMatches(const std::optional<Record>& existing, const ClaimToken& token) {
  return existing.has_value() && existing->state == RecordState::kInFlight &&
         token.owner != 0 && existing->attempt == token.attempt &&
         existing->owner == token.owner;
}

StoreStatus Stale() { return {StoreCode::kStaleClaim, "claim was taken over or is gone"}; }

}  // namespace

int64_t RetryAfterSeconds(TimeMs lease_until_ms, TimeMs now) {
  TimeMs left = lease_until_ms - now;
  if (left <= 0) return 1;
  return std::max<int64_t>(1, (left + 999) / 1000);
}

ClaimDecision DecideClaim(const std::optional<Record>& existing, const ClaimRequest& request,
                          std::string record_key, TimeMs now, uint64_t new_owner) {
  ClaimDecision d;
  if (existing.has_value() && !existing->ExpiredAt(now)) {
    const Record& old = *existing;
    if (old.fingerprint != request.fingerprint) {
      d.result.outcome = ClaimOutcome::kMismatch;
      d.result.record = old;
      return d;
    }
    if (old.state == RecordState::kCompleted) {
      d.result.outcome = ClaimOutcome::kReplay;
      d.result.record = old;
      return d;
    }
    if (now < old.lease_until_ms) {
      d.result.outcome = ClaimOutcome::kInFlight;
      d.result.record = old;
      d.result.retry_after_s = RetryAfterSeconds(old.lease_until_ms, now);
      return d;
    }
    // In flight, lease expired: take over. Never let the record expire while in flight.
    d.record = old;
    d.record.attempt = old.attempt + 1;
    d.record.owner = new_owner;
    d.record.lease_until_ms = now + request.lease_ms;
    d.record.expires_ms = std::max(old.expires_ms, now + request.ttl_ms);
    d.result.outcome = ClaimOutcome::kTakeover;
  } else {
    d.record.state = RecordState::kInFlight;
    d.record.attempt = 1;
    d.record.owner = new_owner;
    d.record.fingerprint = request.fingerprint;
    d.record.created_ms = now;
    d.record.expires_ms = now + request.ttl_ms;
    d.record.lease_until_ms = now + request.lease_ms;
    d.result.outcome = ClaimOutcome::kFresh;
  }
  d.action = WriteAction::kPut;
  d.result.token.record_key = std::move(record_key);
  d.result.token.attempt = d.record.attempt;
  d.result.token.owner = new_owner;
  d.result.token.lease_left_ms = d.record.lease_until_ms - now;
  return d;
}

CasDecision DecideComplete(const std::optional<Record>& existing, const ClaimToken& token,
                           StoredResponse response) {
  CasDecision d;
  if (!CasMatches(existing, token)) {
    d.status = Stale();
    return d;
  }
  d.record = *existing;
  d.record.state = RecordState::kCompleted;
  d.record.response = std::move(response);
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
