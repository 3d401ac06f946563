// SPDX-License-Identifier: Apache-2.0
// Exchange, continued: an attempt's result made durable (Complete, retried while its lease
// holds), the key given back (Release), and what a lost lease leaves: a takeover refused (C5,
// SPEC §12 A3), or this attempt taken over by another (C3).
#include <algorithm>
#include <string>

#include "common/log.h"
#include "conf/config.h"
#include "proxy/exchange/exchange.h"

namespace idemgate {

// C5: with takeover off, the attempt that lost its lease is never re-run. This claim now owns the
// key and stores the indeterminate answer (R4) in its place, so every retry replays it; a crash
// before that store leaves the record in flight, and the next claim lands here again.
// With `fenced_attempt` (SPEC §12 A3), whatever takeover says: that attempt executed (its
// backend's fence committed) and only its answer was lost.
void Exchange::RefuseTakeover(uint32_t fenced_attempt) {
  outcome_ = Outcome::kLostAttempt;
  error_ = ErrorCode::kUpstreamFailed;
  if (fenced_attempt > 0) {
    std::string n = std::to_string(fenced_attempt);
    error_detail_ = "attempt " + n + " executed (fenced); its answer was lost";
    return CompleteWith(MakeErrorResponse(
        ErrorCode::kUpstreamFailed, "Attempt " + n +
                                        " of this request executed; its answer was lost. It is "
                                        "not executed again."));
  }
  error_detail_ = "an earlier attempt lost its lease; takeover is off";
  CompleteWith(MakeErrorResponse(
      ErrorCode::kUpstreamFailed,
      "An earlier attempt of this request was interrupted and its outcome is unknown; it is not "
      "executed again (idempotency.takeover = false)."));
}

void Exchange::CompleteWith(StoredResponse response) {
  pending_ = std::move(response);
  SendComplete();
}

void Exchange::SendComplete() {
  SetPhase(Phase::kCompleting);
  int64_t start = env_->MonoUs();
  if (complete_sent_us_ == 0) complete_sent_us_ = start;
  if (complete_deadline_us_ > 0 && !answered_) {  // an attempt's own result (not RefuseTakeover's)
    // The lease's end (the deadline plus its margin), then store.confirm_timeout more: a store
    // that is only slow (a stalled disk) still confirms, and its answer is the one sent.
    const int64_t overdue_us = complete_deadline_us_ + LeaseMarginMs() * 1000 +
                               config_->store.confirm_timeout_ms * 1000;
    if (!complete_timer_) complete_timer_ = env_->NewTimer([this] { OnCompleteOverdue(); });
    complete_timer_->Arm(std::max<int64_t>(0, (overdue_us - start) / 1000));
  }
  env_->store().Complete(token_, pending_, [this, start](StoreStatus status) {
    OnLoop([this, start, status = std::move(status)]() {
      env_->RecordStoreOp(StoreOp::kComplete, env_->MonoUs() - start);
      OnComplete(status);
    });
  });
}

void Exchange::OnComplete(const StoreStatus& status) {
  if (complete_timer_) complete_timer_->Cancel();
  if (status.ok()) {
    NotifyWaiters();  // W2: durable now; every waiter replays it
    return Respond(std::move(pending_), false);
  }
  error_.reset();  // the upstream's error (if any) is not what the client gets
  if (status.code == StoreCode::kStaleClaim) return OnTakenOver();
  error_detail_ = status.message;
  // The upstream executed but its result is not durable yet. Retry while the lease holds, so a
  // store that recovers (disk space freed) still records it and no retry can execute twice.
  int64_t next_us = env_->MonoUs() + complete_backoff_ms_ * 1000;
  if (status.code != StoreCode::kShutdown && !shutting_down_ && next_us < complete_deadline_us_) {
    if (!retry_timer_) retry_timer_ = env_->NewTimer([this] { SendComplete(); });
    SetPhase(Phase::kBackoff);
    retry_timer_->Arm(complete_backoff_ms_);
    complete_backoff_ms_ = std::min<int64_t>(complete_backoff_ms_ * 2, 1'000);
    return;
  }
  // Not "nothing went upstream" (503): the outcome is unknown, as for an upstream failure.
  IDEMGATE_LOG_LIMITED(LogLevel::kError, "exchange",
                       "result of an executed request could not be stored: %s (request_id=%s)",
                       status.message.c_str(), request_id_.c_str());
  RespondError(ErrorCode::kUpstreamFailed, std::string(kNotRecordedDetail));
}

// C3: this attempt was taken over (its lease ended before its result reached the store); only
// the new owner's result may leave the gateway. If this attempt went upstream, the request may
// have executed twice: said loudly, with how long the attempt took against its lease (a stalled
// process or disk, or a lease too short for this upstream).
void Exchange::OnTakenOver() {
  outcome_ = Outcome::kInFlight;
  const auto ms = [](int64_t us) { return std::to_string(us / 1000); };
  const int64_t now = env_->MonoUs();
  error_detail_ = "attempt " + std::to_string(token_.attempt) + " was taken over: " +
                  ms(now - claim_sent_us_) + " ms after its claim (lease " +
                  std::to_string(config_->idempotency.lease_ms) + " ms)";
  if (upstream_us_ >= 0) {  // where the time went: was this process or its store stalled?
    const int64_t upstream_end_us = upstream_started_us_ + upstream_us_;
    error_detail_ += "; upstream started after " + ms(upstream_started_us_ - claim_sent_us_) +
                     " ms and took " + ms(upstream_us_) + " ms, completion sent " +
                     ms(complete_sent_us_ - upstream_end_us) + " ms after";
    IDEMGATE_LOG_LIMITED(LogLevel::kError, "exchange",
                         "%s, before its result was stored: the upstream may have executed this "
                         "request twice (request_id=%s)",
                         error_detail_.c_str(), request_id_.c_str());
  }
  RespondInUse(1);
}

void Exchange::Release(ErrorCode code, std::string detail) {
  SetPhase(Phase::kReleasing);
  release_code_ = code;
  release_detail_ = std::move(detail);
  int64_t start = env_->MonoUs();
  env_->store().Release(token_, [this, start](StoreStatus status) {
    OnLoop([this, start, status = std::move(status)]() {
      env_->RecordStoreOp(StoreOp::kRelease, env_->MonoUs() - start);
      OnReleased(status);
    });
  });
}

void Exchange::OnReleased(const StoreStatus& status) {
  if (!status.ok()) {
    // The record stays in flight: retries get 409 until the lease ends, then take over.
    IDEMGATE_LOG_LIMITED(LogLevel::kError, "exchange",
                         "releasing a claim failed: %s (request_id=%s)", status.message.c_str(),
                         request_id_.c_str());
    if (error_detail_.empty()) error_detail_ = status.message;
  } else {
    NotifyWaiters();  // W2: a waiter claims again, and may become the next attempt
  }
  if (answer_pending_) return Respond(std::move(pending_), false);
  RespondError(release_code_, release_detail_);
}

}  // namespace idemgate
