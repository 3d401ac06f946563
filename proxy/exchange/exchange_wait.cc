// SPDX-License-Identifier: Apache-2.0
// Exchange, continued: a duplicate that finds its key in flight may wait for the first answer
// instead of taking a 409 at once (SPEC §10, W1-W4). Waiting holds no thread: the exchange is
// parked in the process's WaitRegistry with a timer; a completion or release of the key wakes
// it (on its own loop), the lease's end or (on a shared store) a poll re-checks, and the wait's
// end answers 409. Also shutdown (a waiter answers at once; the rest at the grace's end) and
// the answer's own headers: Age (R6) and Preference-Applied.
#include <algorithm>
#include <string_view>

#include "common/log.h"
#include "conf/config.h"
#include "proxy/exchange/answer_estimate.h"
#include "proxy/exchange/exchange.h"
#include "proxy/exchange/wait_registry.h"
#include "store/claim_rules.h"

namespace idemgate {

namespace {
constexpr int64_t kMaxPollMs = 1'000;  // a shared store: polls back off from 50 ms to this
constexpr int64_t kLeaseSlackMs = 10;  // look again this long after the owner's lease ends
}  // namespace

const char* WaitEndName(WaitEnd end) {
  switch (end) {
    case WaitEnd::kNone:
      return "none";
    case WaitEnd::kReplayed:
      return "replayed";
    case WaitEnd::kClaimed:
      return "claimed";
    case WaitEnd::kTimedOut:
      return "timed_out";
    case WaitEnd::kClientGone:
      return "client_gone";
    case WaitEnd::kShutdown:
      return "shutdown";
  }
  return "unknown";
}

// Prefer: wait=N (seconds; RFC 7240), possibly among other preferences, in any Prefer header.
// A malformed value is ignored, as an unknown preference is.
int64_t ParsePreferWait(const Headers& headers) {
  int64_t found = -1;
  for (const Header& h : headers) {
    if (!HeaderNameEquals(h.name, "Prefer")) continue;
    std::string_view rest = h.value;
    while (!rest.empty()) {
      size_t comma = rest.find(',');
      std::string_view pref = rest.substr(0, comma);
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      pref = TrimOws(pref.substr(0, pref.find(';')));
      size_t eq = pref.find('=');
      if (eq == std::string_view::npos ||
          !HeaderNameEquals(TrimOws(pref.substr(0, eq)), "wait")) {
        continue;
      }
      std::string_view value = TrimOws(pref.substr(eq + 1));
      if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
        value = value.substr(1, value.size() - 2);
      }
      if (value.empty() || value.size() > 9 ||
          !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        continue;
      }
      found = std::stoll(std::string(value));
    }
  }
  return found;
}

// W1: the client's Prefer: wait capped at max_wait (0 = preferences ignored), else
// idempotency.wait. Decided once, from the request's arrival: a waiter that looks again keeps
// the same end.
void Exchange::PlanWait() {
  if (wait_planned_) return;
  wait_planned_ = true;
  const auto& idem = config_->idempotency;
  const int64_t prefer_s = ParsePreferWait(request_.headers);
  int64_t budget_ms = idem.wait_ms;
  if (prefer_s >= 0 && idem.max_wait_ms > 0) {
    budget_ms = std::min(prefer_s * 1000, idem.max_wait_ms);
    preference_applied_s_ = budget_ms / 1000;
  }
  wait_deadline_us_ = started_us_ + budget_ms * 1000;
}

// The key is in flight with a live lease (`retry_after_s` left, until `lease_until_ms`): wait,
// or 409 (§5).
void Exchange::OnInFlight(int64_t retry_after_s, TimeMs lease_until_ms) {
  outcome_ = Outcome::kInFlight;
  // Retry-After: when the first attempt's answer is likely there, within the lease left.
  const int64_t ran_ms =
      env_->clock().NowMs() - (lease_until_ms - config_->idempotency.lease_ms);
  retry_after_s = EstimateRetryAfterSeconds(config_, ran_ms, retry_after_s);
  last_retry_after_s_ = retry_after_s;
  PlanWait();
  const int64_t now = env_->MonoUs();
  const int64_t left_ms = (wait_deadline_us_ - now) / 1000;
  if (env_->draining() && waited_us_ >= 0) wait_end_ = WaitEnd::kShutdown;
  if (left_ms <= 0 || env_->draining()) return RespondInUse(retry_after_s);
  if (!self_) self_ = std::make_shared<Exchange*>(this);
  std::weak_ptr<Exchange*> self = self_;
  ExchangeEnv* env = env_;
  auto wake = [env, self] {
    env->Post([self] {
      if (auto alive = self.lock()) (*alive)->OnWaitOver(/*woken=*/true);
    });
  };
  auto added = env_->waits().Add(wait_key_, wait_epoch_, wake,
                                 static_cast<uint64_t>(config_->limits.max_waiters), &wait_id_);
  if (added == WaitRegistry::AddResult::kFull) return RespondInUse(retry_after_s);  // W3
  if (phase_ != Phase::kWaiting) SetPhase(Phase::kWaiting);
  wait_started_us_ = now;
  if (waited_us_ < 0) waited_us_ = 0;
  // Completed or released between the read and Add: look again (on the next loop turn).
  if (added == WaitRegistry::AddResult::kChanged) return wake();
  // Wake at the wait's end, at the lease's end (the owner may be gone), or to poll a store other
  // instances write to (W4), whichever comes first.
  // The lease's end by this gateway's clock, just after it; when that clock says it is over
  // already (the store's clock differs, or this process still runs the attempt), Retry-After.
  const int64_t lease_left_ms = lease_until_ms - env_->clock().NowMs();
  const int64_t lease_ms = lease_left_ms > 0 ? lease_left_ms + kLeaseSlackMs
                                             : std::max<int64_t>(1, retry_after_s) * 1000;
  int64_t next_ms = std::min(left_ms, lease_ms);
  if (env_->store().Shared()) {
    next_ms = std::min(next_ms, poll_ms_);
    poll_ms_ = std::min(poll_ms_ * 2, kMaxPollMs);
  }
  if (!wait_timer_) wait_timer_ = env_->NewTimer([this] { OnWaitOver(/*woken=*/false); });
  wait_timer_->Arm(std::max<int64_t>(1, next_ms));
}

// Woken (the key's record changed) or timed (the lease's end, a poll, the wait's end): look
// again. At the wait's end that last look answers what a new request would get now: the replay,
// a takeover of an expired lease, or (still in flight) 409 with the lease left (OnInFlight).
void Exchange::OnWaitOver(bool woken) {
  if (phase_ != Phase::kWaiting) return;  // a stale wake: already moved on
  StopWaiting();
  if (!env_->store().Shared()) {
    if (!FastPath()) Claim();
    return;
  }
  // W4: a shared store is read (on the store's thread), not claimed: a poll writes nothing.
  // Still Waiting meanwhile; a client gone or a drain may end the exchange first.
  wait_epoch_ = env_->waits().Epoch(wait_key_);
  std::weak_ptr<Exchange*> self = self_;
  ExchangeEnv* env = env_;
  env_->store().LookupAsync(guard_.scope, guard_.key, [env, self](LookupResult found) {
    env->Post([self, found = std::move(found)]() mutable {
      if (auto alive = self.lock()) (*alive)->OnPolled(std::move(found));
    });
  });
}

// A poll's read: replay, 422, or wait again; a record gone or past its lease goes to Claim.
void Exchange::OnPolled(LookupResult found) {
  if (phase_ != Phase::kWaiting) return;
  if (found.outcome == LookupOutcome::kFound &&
      AnswerFromRecord(std::move(found.record), found.now_ms)) {
    return;
  }
  Claim();
}

void Exchange::StopWaiting() {
  if (wait_id_ != 0) env_->waits().Remove(wait_key_, wait_id_);
  wait_id_ = 0;
  if (wait_timer_) wait_timer_->Cancel();
  if (wait_started_us_ != 0) waited_us_ += env_->MonoUs() - wait_started_us_;
  wait_started_us_ = 0;
}

void Exchange::NotifyWaiters() {
  if (!wait_key_.empty()) env_->waits().Notify(wait_key_);
}

void Exchange::DetachClient() {
  sink_ = nullptr;
  if (phase_ != Phase::kWaiting) return;
  // W3: a waiter whose client went away is dropped; nothing of it remains.
  StopWaiting();
  wait_end_ = WaitEnd::kClientGone;
  answered_ = true;
  RecordFinished();
  SetPhase(Phase::kDone);
}

void Exchange::OnDrain() {
  if (phase_ != Phase::kWaiting) return;
  const int64_t read_us = wait_started_us_;
  StopWaiting();
  wait_end_ = WaitEnd::kShutdown;
  const int64_t since_s = (env_->MonoUs() - read_us) / 1'000'000;
  RespondInUse(std::max<int64_t>(1, last_retry_after_s_ - since_s));
}

void Exchange::OnShutdown() {
  shutting_down_ = true;
  if (phase_ != Phase::kBackoff) return;
  retry_timer_->Cancel();
  SetPhase(Phase::kCompleting);  // the retry that will not come: settle as a final failure
  OnComplete({StoreCode::kShutdown, "the gateway shut down while the store was failing"});
}

void Exchange::AnswerNow() {
  if (answered_) return;
  AnswerEarly(ErrorCode::kStoreUnavailable,
              std::string("the gateway stopped while ") + PhaseName(phase_), {});
}

// The claim is never cancelled (SPEC M5): if the store confirms it later, OnClaim sees the
// answer given and releases the key, so nothing goes upstream for a client told 503.
void Exchange::OnClaimTimeout() {
  if (phase_ != Phase::kClaiming || answered_) return;
  const int64_t waited_ms = (env_->MonoUs() - claim_sent_us_) / 1000;
  const std::string detail = "the store has not confirmed the claim after " +
                             std::to_string(waited_ms) + " ms; nothing went upstream";
  IDEMGATE_LOG_LIMITED(LogLevel::kWarn, "store", "claim unconfirmed after %lld ms: answered 503",
                       static_cast<long long>(waited_ms));
  AnswerEarly(ErrorCode::kStoreUnavailable, detail, detail);
}

// A store that neither confirms nor fails the completion (a primary waiting for a synchronous
// standby that is gone) would keep the client waiting as long: store.confirm_timeout past the
// lease's end (when a retry may already take the key over), the client is told the outcome is
// unknown. The completion is
// not cancelled (M5); if it lands, a retry replays it.
void Exchange::OnCompleteOverdue() {
  if (phase_ != Phase::kCompleting || answered_) return;
  IDEMGATE_LOG_LIMITED(LogLevel::kError, "exchange",
                       "result of an executed request still unconfirmed by the store after the "
                       "lease's end and store.confirm_timeout (request_id=%s)",
                       request_id_.c_str());
  AnswerEarly(ErrorCode::kUpstreamFailed, "the store has not confirmed the completion",
              kNotRecordedDetail);
}

void Exchange::AnswerEarly(ErrorCode code, std::string detail, std::string_view body_detail) {
  outcome_ = OwnsClaim() ? outcome_ : Outcome::kRejected;
  error_ = code;
  error_detail_ = std::move(detail);
  SendAnswer(std::make_shared<const StoredResponse>(MakeErrorResponse(code, body_detail)), false,
             {});
}

std::string Exchange::AnswerHeaders(bool replayed) const {
  std::string out;
  if (replayed && replay_stored_ms_ > 0) {
    const int64_t age_s = std::max<int64_t>(0, env_->clock().NowMs() - replay_stored_ms_) / 1000;
    out.append("Age: ").append(std::to_string(age_s)).append("\r\n");
  }
  if (preference_applied_s_ >= 0) {
    out.append("Preference-Applied: wait=")
        .append(std::to_string(preference_applied_s_))
        .append("\r\n");
  }
  return out;
}

}  // namespace idemgate
