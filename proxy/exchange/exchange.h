// SPDX-License-Identifier: Apache-2.0
// The life of one request as an explicit state machine: Start (route, guard, fast replay) ->
// Claiming -> Forwarding -> Completing (-> Backoff -> Completing) or Releasing -> Done. A
// duplicate that finds its key in flight may wait (Waiting) and then look again (SPEC §10).
// An exchange outlives its client connection: once a request went upstream its result is stored
// even if the client has gone. It is freed only in Done, when nothing of it is outstanding, so a
// late store or upstream callback never reaches a freed object (README "Life of a request").
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "proxy/exchange/exchange_env.h"
#include "proxy/exchange/report_types.h"
#include "proxy/http/http_message.h"
#include "proxy/policy/errors.h"
#include "proxy/policy/guard.h"
#include "store/store.h"

namespace idemgate {

struct CachedReplay;

struct Config;

// What an exchange is doing, and so what it waits for.
enum class Phase {
  kNew,         // constructed, Start() not yet called
  kClaiming,    // waiting for the store's Claim
  kForwarding,  // waiting for the upstream's answer
  kCompleting,  // waiting for the store's Complete (the result being made durable)
  kBackoff,     // waiting for the timer that retries a failed Complete
  kReleasing,   // waiting for the store's Release (nothing went upstream)
  kWaiting,     // a duplicate waiting for the owner's answer, a release or the lease's end (§10)
  kDone,        // answered, nothing outstanding: handed back to be freed
};
const char* PhaseName(Phase phase);

// RFC 7240: the seconds of a `Prefer: wait=N` among the request's headers; -1 when absent.
int64_t ParsePreferWait(const Headers& headers);

// The 502's detail when an executed request's result could not be made durable (R4).
inline constexpr std::string_view kNotRecordedDetail =
    "The request was forwarded upstream, but its result could not be recorded; its outcome is "
    "unknown.";

class Exchange {
 public:
  // `config`: the top level (Start selects the request's route) or a route's own, already
  // selected (a route's config has no routes: it selects itself).
  Exchange(ExchangeEnv* env, ResponseSink* sink, std::shared_ptr<const Config> config,
           Request request, std::string client_ip, bool tls);
  ~Exchange();
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  void Start();
  // The client connection is gone; the exchange still runs to its end, storing its result. A
  // waiting duplicate ends here (nothing of it remains).
  void DetachClient();
  // The client closed its side (EOF) before the answer: logged as 499 (the answer is still
  // written, for a client that only half-closed, and stored for a guarded request's retry).
  void ClientClosed() { client_closed_ = true; }
  // Shutdown: an attempt waiting to retry its Complete gives up (the store is failing); every
  // other phase finishes (the worker cuts upstream calls, and store operations are short).
  void OnShutdown();
  // Shutdown begins: a waiting duplicate gets its 409 now (W3), and no new wait starts.
  void OnDrain();
  // The last resort at a hard stop: answer now (503) if not answered yet, and detach. What is
  // outstanding still finishes into this object if the loop runs again; nothing is freed here.
  void AnswerNow();

  Phase phase() const { return phase_; }
  bool answered() const { return answered_; }
  Outcome outcome() const { return outcome_; }
  // X-Request-Id: the client's, or made at Start (empty before it).
  const std::string& request_id() const { return request_id_; }

 private:
  // The one place the phase changes: checks the transition (debug builds) and, entering Done,
  // that the exchange has answered; then hands it back to be freed.
  void SetPhase(Phase next);
  bool FastPath();
  bool AnswerFromRecord(Record record, TimeMs now_ms);
  bool MatchesCached(const CachedReplay& hit);
  void Claim();
  void OnClaim(ClaimResult result);
  // store.confirm_timeout passed with the claim unconfirmed: 503 now (R3b); the claim lands later.
  void OnClaimTimeout();
  // store.confirm_timeout past the lease with the completion unconfirmed: 502, outcome unknown.
  void OnCompleteOverdue();
  // Answers before the exchange's end (AnswerNow, the two above): what is outstanding still
  // finishes into this object, and nothing goes upstream after it.
  void AnswerEarly(ErrorCode code, std::string detail, std::string_view body_detail);
  void Forward();
  bool OwnsClaim() const {
    return outcome_ == Outcome::kFresh || outcome_ == Outcome::kTakeover ||
           outcome_ == Outcome::kLostAttempt;
  }
  void OnUpstream(UpstreamResult&& result);
  void RefuseTakeover(uint32_t fenced_attempt = 0);
  void CompleteWith(StoredResponse response);
  void SendComplete();
  void OnComplete(const StoreStatus& status);
  void OnTakenOver();
  void Release(ErrorCode code, std::string detail = {});
  void OnReleased(const StoreStatus& status);
  int64_t LeaseMarginMs() const;

  // Waiting (exchange_wait.cc). The key is in flight with a live lease: wait, or 409.
  void OnInFlight(int64_t retry_after_s, TimeMs lease_until_ms);
  void PlanWait();
  void OnWaitOver(bool woken);
  void OnPolled(LookupResult found);
  void StopWaiting();
  // This attempt's key was completed or released: wake its waiters in this process.
  void NotifyWaiters();
  // The answer's own header lines: Age on a replay (R6), Preference-Applied (§10).
  std::string AnswerHeaders(bool replayed) const;
  // The answer: sent once, counted and logged before it leaves. It ends the exchange unless an
  // operation is still outstanding (then Done comes when it finishes).
  void RespondInUse(int64_t retry_after_s);
  void RespondMismatch(const Fingerprint& stored);
  void RespondError(ErrorCode code, const std::string& detail = {});
  void Respond(StoredResponse response, bool replayed);
  void RespondShared(std::shared_ptr<const StoredResponse> response, bool replayed);
  void SendAnswer(std::shared_ptr<const StoredResponse> response, bool replayed,
                  std::string_view extra_headers);
  void RespondReplay(Record record);  // a completed record's response, with its Age (R6)
  // A completed record read from the store, as the response every replay of it shares.
  std::shared_ptr<const StoredResponse> ShareReplay(Record record);
  void RecordFinished();

  // Runs a store callback's work back on this exchange's loop.
  template <typename Fn>
  void OnLoop(Fn fn) {
    env_->Post(std::move(fn));
  }

  ExchangeEnv* env_;
  ResponseSink* sink_;
  bool client_closed_ = false;
  std::string request_id_;  // X-Request-Id: the client's, or made here (proxy/request_id.h)
  std::shared_ptr<const Config> config_;
  Request request_;
  std::string client_ip_;
  const char* proto_;  // "http" or "https": the client connection's, for X-Forwarded-Proto
  Phase phase_ = Phase::kNew;
  bool answered_ = false;
  uint64_t cache_generation_ = 0;  // the replay cache's, read before the store was read
  GuardDecision guard_;
  ClaimToken token_;
  StoredResponse pending_;       // the result being made durable by Complete
  bool answer_pending_ = false;  // pending_ is answered after a Release (no_store_statuses)
  ErrorCode release_code_ = ErrorCode::kUpstreamUnavailable;  // the answer after a Release
  std::string release_detail_;
  // Monotonic: before the lease ends, the upstream call and the retries of Complete stop here.
  int64_t complete_deadline_us_ = 0;
  int64_t claim_sent_us_ = 0;
  int64_t complete_sent_us_ = 0;  // the first Complete of this attempt
  int64_t complete_backoff_ms_ = 50;
  std::unique_ptr<LoopTimer> retry_timer_;
  std::unique_ptr<LoopTimer> claim_timer_;     // store.confirm_timeout, armed while kClaiming
  std::unique_ptr<LoopTimer> complete_timer_;  // the lease + confirm_timeout, while kCompleting
  bool shutting_down_ = false;
  Outcome outcome_ = Outcome::kPassthrough;
  int status_ = 0;
  std::optional<ErrorCode> error_;  // the gateway's own error answer, if any
  std::string error_detail_;        // why: the upstream's or the store's message, for the log
  int upstream_status_ = 0;         // the upstream's status, when it answered
  std::optional<UpstreamError> upstream_error_kind_;
  int64_t started_us_ = 0;
  int64_t upstream_started_us_ = 0;
  int64_t upstream_us_ = -1;
  size_t bytes_out_ = 0;

  TimeMs replay_stored_ms_ = 0;  // a replay: when its response was stored (R6: Age)
  // Waiting (SPEC §10): decided once, from the request's arrival (PlanWait).
  std::shared_ptr<Exchange*> self_;  // wakes posted to the loop check it is still alive
  bool wait_planned_ = false;
  int64_t wait_deadline_us_ = 0;
  int64_t preference_applied_s_ = -1;  // Preference-Applied: wait=N; -1 = not used
  int64_t last_retry_after_s_ = 1;
  int64_t wait_started_us_ = 0;  // 0: not waiting now
  int64_t waited_us_ = -1;       // -1: never waited
  int64_t poll_ms_ = 50;         // a shared store: the next poll, doubling (W4)
  uint64_t wait_epoch_ = 0;      // the registry's epoch for the key, read before the last read
  uint64_t wait_id_ = 0;
  std::string wait_key_;
  std::unique_ptr<LoopTimer> wait_timer_;
  WaitEnd wait_end_ = WaitEnd::kNone;
};

}  // namespace idemgate
