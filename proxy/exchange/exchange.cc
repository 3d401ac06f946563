// SPDX-License-Identifier: Apache-2.0
// The life of one request (see exchange.h and README "Life of a request").
#include "proxy/exchange/exchange.h"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cstdio>

#include "common/log.h"
#include "conf/config.h"
#include "proxy/exchange/answer_estimate.h"
#include "proxy/exchange/replay_cache.h"
#include "proxy/exchange/report.h"
#include "proxy/exchange/wait_registry.h"
#include "proxy/http/request_id.h"
#include "proxy/policy/record_id.h"
#include "proxy/policy/routes.h"
#include "store/claim_rules.h"

namespace idemgate {

namespace {
// An attempt's upstream call ends this long before its lease (less when the lease leaves less
// room over connect + response timeouts), so its completion lands while it owns the key.
constexpr int64_t kLeaseMarginMs = 1'000;

// Which phase may follow which: every other change is a bug.
bool Allowed(Phase from, Phase to) {
  switch (from) {
    case Phase::kNew:
      return to == Phase::kClaiming || to == Phase::kForwarding || to == Phase::kWaiting ||
             to == Phase::kDone;
    case Phase::kClaiming:
      return to == Phase::kForwarding || to == Phase::kCompleting || to == Phase::kReleasing ||
             to == Phase::kWaiting || to == Phase::kDone;
    case Phase::kForwarding:
      return to == Phase::kCompleting || to == Phase::kReleasing || to == Phase::kDone;
    case Phase::kCompleting:
      return to == Phase::kBackoff || to == Phase::kDone;
    case Phase::kBackoff:
      return to == Phase::kCompleting || to == Phase::kDone;
    case Phase::kReleasing:
      return to == Phase::kDone;
    case Phase::kWaiting:  // looks again: a replay (Done), or a claim
      return to == Phase::kClaiming || to == Phase::kDone;
    case Phase::kDone:
      return false;
  }
  return false;
}
}  // namespace

const char* OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kPassthrough:
      return "passthrough";
    case Outcome::kFresh:
      return "fresh";
    case Outcome::kTakeover:
      return "takeover";
    case Outcome::kReplay:
      return "replay";
    case Outcome::kInFlight:
      return "in_flight";
    case Outcome::kMismatch:
      return "mismatch";
    case Outcome::kLostAttempt:
      return "lost_attempt";
    case Outcome::kRejected:
      return "rejected";
  }
  return "unknown";
}

const char* PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kNew:
      return "new";
    case Phase::kClaiming:
      return "claiming";
    case Phase::kForwarding:
      return "forwarding";
    case Phase::kCompleting:
      return "completing";
    case Phase::kBackoff:
      return "backoff";
    case Phase::kReleasing:
      return "releasing";
    case Phase::kWaiting:
      return "waiting";
    case Phase::kDone:
      return "done";
  }
  return "unknown";
}

Exchange::Exchange(ExchangeEnv* env, ResponseSink* sink, std::shared_ptr<const Config> config,
                   Request request, std::string client_ip, bool tls)
    : env_(env),
      sink_(sink),
      config_(std::move(config)),
      request_(std::move(request)),
      client_ip_(std::move(client_ip)),
      proto_(tls ? "https" : "http"),
      started_us_(env->MonoUs()) {}

Exchange::~Exchange() = default;

void Exchange::SetPhase(Phase next) {
  if (!Allowed(phase_, next)) {
    LogF(LogLevel::kError, "exchange", "illegal phase change %s -> %s", PhaseName(phase_),
         PhaseName(next));
    assert(false && "illegal exchange phase change");
  }
  phase_ = next;
  if (next != Phase::kDone) return;
  assert(answered_ && "an exchange ended without an answer");
  env_->Finished(this);
}

void Exchange::Start() {
  request_id_ = AssignRequestId(&request_);  // forwarded with the request, and logged
  std::shared_ptr<const Config> route = SelectRoute(config_, request_);
  if (route == nullptr) {  // the client connection refused it already, unless a reload came
    outcome_ = Outcome::kRejected;
    return RespondError(ErrorCode::kBadRequest, AmbiguousRouteDetail(request_));
  }
  config_ = std::move(route);  // from here on, the route's policy
  if (request_.body.size() > config_->limits.max_request_body) {  // a route's own limit
    outcome_ = Outcome::kRejected;
    return RespondError(ErrorCode::kRequestTooLarge, BodyLimitDetail(*config_));
  }
  guard_ = EvaluateGuard(*config_, request_);
  switch (guard_.kind) {
    case GuardKind::kPassthrough:
      outcome_ = Outcome::kPassthrough;
      return Forward();
    case GuardKind::kReject:
      outcome_ = Outcome::kRejected;
      return RespondError(guard_.error, guard_.detail);
    case GuardKind::kGuarded:
      wait_key_ = MakeRecordKey(guard_.scope, guard_.key);
      if (!FastPath()) Claim();
      return;
  }
}

// A read that never waits for the writer: the outcomes that write nothing (replay, in flight,
// mismatch) are judged by the same table the store's claim uses (JudgeRecord).
bool Exchange::FastPath() {
  // Before any read: a completion or release from now on is seen by a wait that starts later.
  wait_epoch_ = env_->waits().Epoch(wait_key_);
  if (ReplayCache* cache = env_->replay_cache()) {
    std::optional<CachedReplay> hit = cache->Find(guard_.scope, guard_.key, env_->clock().NowMs());
    if (hit && !MatchesCached(*hit)) {
      outcome_ = Outcome::kMismatch;
      RespondMismatch(hit->fingerprint);
      return true;
    }
    if (hit) {
      outcome_ = Outcome::kReplay;
      replay_stored_ms_ = hit->stored_ms;
      RespondShared(std::move(hit->response), true);
      return true;
    }
    cache_generation_ = cache->generation();  // before the store is read (here or in Claim)
  }
  LookupResult found = env_->store().Lookup(guard_.scope, guard_.key, LookupMode::kNoWait);
  if (found.outcome != LookupOutcome::kFound) return false;
  return AnswerFromRecord(std::move(found.record), env_->clock().NowMs());
}

// A record read without a claim (the fast path, a waiter's poll), judged as the store's claim
// would judge it at `now_ms`: a replay, a mismatch, or in flight (wait, or 409). False when only
// a claim can decide (fresh, takeover: writes, which the store's Claim decides atomically).
bool Exchange::AnswerFromRecord(Record record, TimeMs now_ms) {
  KeyFingerprint(*config_, &guard_);
  RecordVerdict verdict =
      JudgeRecord(record, FingerprintAsStored(guard_, record.fingerprint), now_ms);
  switch (verdict.outcome) {
    case ClaimOutcome::kMismatch:
      outcome_ = Outcome::kMismatch;
      RespondMismatch(record.fingerprint);
      return true;
    case ClaimOutcome::kReplay:
      RespondReplay(std::move(record));
      return true;
    case ClaimOutcome::kInFlight:
      OnInFlight(verdict.retry_after_s, record.lease_until_ms);
      return true;
    case ClaimOutcome::kFresh:
    case ClaimOutcome::kTakeover:
      return false;
  }
  return false;
}

void Exchange::RespondReplay(Record record) {
  outcome_ = Outcome::kReplay;
  replay_stored_ms_ = StoredAtMs(record);
  RespondShared(ShareReplay(std::move(record)), true);
}

// E3: a cached replay holds the plain digest of a request that matched it; the same plain
// digest is the same request, with no HMAC. Without one, the keyed fingerprint decides.
bool Exchange::MatchesCached(const CachedReplay& hit) {
  if (hit.plain && guard_.legacy_fingerprint) return *hit.plain == *guard_.legacy_fingerprint;
  KeyFingerprint(*config_, &guard_);
  return hit.fingerprint == FingerprintAsStored(guard_, hit.fingerprint);
}

void Exchange::Claim() {
  KeyFingerprint(*config_, &guard_);
  SetPhase(Phase::kClaiming);
  ClaimRequest claim;
  claim.scope = guard_.scope;
  claim.key = guard_.key;
  claim.fingerprint = guard_.fingerprint;
  claim.legacy_fingerprint = guard_.legacy_fingerprint;
  claim.lease_ms = config_->idempotency.lease_ms;
  claim.ttl_ms = config_->idempotency.ttl_ms;
  int64_t start = env_->MonoUs();
  claim_sent_us_ = start;
  if (!claim_timer_) claim_timer_ = env_->NewTimer([this] { OnClaimTimeout(); });
  claim_timer_->Arm(config_->store.confirm_timeout_ms);
  env_->store().Claim(std::move(claim), [this, start](ClaimResult result) {
    OnLoop([this, start, result = std::move(result)]() mutable {
      env_->RecordStoreOp(StoreOp::kClaim, env_->MonoUs() - start);
      OnClaim(std::move(result));
    });
  });
}

void Exchange::OnClaim(ClaimResult result) {
  claim_timer_->Cancel();
  if (!result.status.ok()) {
    outcome_ = Outcome::kRejected;
    error_detail_ = result.status.message;
    // A sealed answer that does not open: the detail names its key (SPEC §13 E5).
    const bool sealed = result.status.code == StoreCode::kSealed;
    return RespondError(ErrorCode::kStoreUnavailable, sealed ? result.status.message : "");
  }
  switch (result.outcome) {
    case ClaimOutcome::kFresh:
    case ClaimOutcome::kTakeover: {
      outcome_ = result.outcome == ClaimOutcome::kFresh ? Outcome::kFresh : Outcome::kTakeover;
      token_ = std::move(result.token);
      // Answered already (a hard stop while the claim was pending): the client was told nothing
      // went upstream, so nothing may. Give the key back.
      if (answered_) return Release(ErrorCode::kStoreUnavailable);
      // SPEC §12 A3: a backend's committed fence says the lost attempt executed: never again.
      if (outcome_ == Outcome::kTakeover && result.fenced_attempt > 0) {
        return RefuseTakeover(result.fenced_attempt);
      }
      if (outcome_ == Outcome::kTakeover && !config_->idempotency.takeover) return RefuseTakeover();
      // Past the lease a retry may take over: the upstream's answer and its completion must
      // land before that, with a margin for the completion's own synced write.
      // The lease was stamped after the claim was sent: counting from the send is conservative,
      // and a result that reached the loop late (a paused process) leaves less time, not more.
      complete_deadline_us_ = claim_sent_us_ + (token_.lease_left_ms - LeaseMarginMs()) * 1000;
      return Forward();
    }
    case ClaimOutcome::kReplay:
      return RespondReplay(std::move(result.record));
    case ClaimOutcome::kInFlight:
      return OnInFlight(result.retry_after_s, result.record.lease_until_ms);
    case ClaimOutcome::kMismatch:
      outcome_ = Outcome::kMismatch;
      return RespondMismatch(result.record.fingerprint);
  }
}

// What the lease leaves over the upstream timeouts (C4 makes it positive), up to a second.
int64_t Exchange::LeaseMarginMs() const {
  int64_t room = config_->idempotency.lease_ms - config_->upstream.connect_timeout_ms -
                 config_->upstream.response_timeout_ms;
  return std::clamp<int64_t>(room, 0, kLeaseMarginMs);
}

void Exchange::Forward() {
  upstream_started_us_ = env_->MonoUs();
  const bool guarded = OwnsClaim();
  // The claim itself took (nearly) the whole lease (a paused process, an overloaded loop): too
  // late to run the attempt safely. Nothing went upstream; the key is given back.
  if (guarded && upstream_started_us_ >= complete_deadline_us_) {
    error_detail_ = "the claim's lease ran out before the request could be forwarded";
    return Release(ErrorCode::kNotForwarded);
  }
  SetPhase(Phase::kForwarding);
  UpstreamLimits limits;
  limits.connect_timeout_ms = config_->upstream.connect_timeout_ms;
  limits.response_timeout_ms = config_->upstream.response_timeout_ms;
  limits.max_response_body = config_->limits.max_response_body;
  limits.idle_timeout_ms = config_->upstream.idle_timeout_ms;
  limits.group = config_->upstream_group;  // a route's group ("" = [upstream])
  if (guarded) {
    limits.deadline = std::chrono::steady_clock::time_point(
        std::chrono::microseconds(complete_deadline_us_));
  }
  std::string bytes = SerializeUpstreamRequest(
      request_, client_ip_, proto_, UpstreamHost(config_->upstream), config_->upstream.host,
      guarded ? FenceHeaderLines(guard_.scope, guard_.key, token_.attempt) : std::string());
  env_->SendUpstream(std::move(bytes), request_.method == "HEAD", limits,
                     [this](UpstreamResult&& result) { OnUpstream(std::move(result)); });
}

void Exchange::OnUpstream(UpstreamResult&& result) {
  upstream_us_ = env_->MonoUs() - upstream_started_us_;
  upstream_error_kind_ = result.error;
  if (result.error == UpstreamError::kNone) upstream_status_ = result.response.status;
  if (result.error != UpstreamError::kNone) error_detail_ = result.detail;
  bool guarded = OwnsClaim();
  if (guarded && result.error == UpstreamError::kNone) {
    RecordGuardedUpstreamTime(config_, upstream_us_);  // for a retry's Retry-After
  }
  StoredResponse response;
  switch (result.error) {
    case UpstreamError::kNone:
      response = ToStoredResponse(std::move(result.response), request_.method == "HEAD");
      break;
    case UpstreamError::kUnavailable:  // nothing went upstream: nothing to store (R3)
      // Say why (refused, DNS, TLS verification, timeout): the client only sees a 502.
      IDEMGATE_LOG_LIMITED(LogLevel::kWarn, "upstream", "upstream unavailable: %s",
                           result.detail.c_str());
      if (guarded) return Release(ErrorCode::kUpstreamUnavailable);
      return RespondError(ErrorCode::kUpstreamUnavailable);
    case UpstreamError::kFailed:  // indeterminate: stored as the result (R4)
      error_ = ErrorCode::kUpstreamFailed;
      response = MakeErrorResponse(ErrorCode::kUpstreamFailed);
      break;
    case UpstreamError::kTooLarge:  // indeterminate too, but say what happened
      error_ = ErrorCode::kUpstreamFailed;
      response = MakeErrorResponse(
          ErrorCode::kUpstreamFailed,
          "The upstream's response was larger than this gateway's limits.max_response_body, so "
          "it could not be relayed or stored; the request may or may not have been executed.");
      break;
    case UpstreamError::kTimeout:
      error_ = ErrorCode::kUpstreamTimeout;
      response = MakeErrorResponse(ErrorCode::kUpstreamTimeout);
      break;
  }
  if (guarded && result.error == UpstreamError::kNone && NotStored(*config_, response.status)) {
    error_detail_ = "not stored: the route's no_store_statuses lists this status";
    pending_ = std::move(response);  // answered once the claim is given back: a retry executes
    answer_pending_ = true;
    return Release(ErrorCode::kUpstreamUnavailable);
  }
  if (guarded) return CompleteWith(std::move(response));
  Respond(std::move(response), false);
}

void Exchange::RespondInUse(int64_t retry_after_s) {
  error_ = ErrorCode::kIdempotencyKeyInUse;
  StoredResponse response = MakeErrorResponse(ErrorCode::kIdempotencyKeyInUse);
  response.headers.emplace_back("Retry-After", std::to_string(std::max<int64_t>(1, retry_after_s)));
  Respond(response, false);
}

void Exchange::RespondMismatch(const Fingerprint& stored) {
  KeyFingerprint(*config_, &guard_);
  std::string detail = config_->idempotency.header + " \"" + guard_.key +
                       "\" was already used for a different request (fingerprint " +
                       FingerprintPrefix(stored) + ", got " +
                       FingerprintPrefix(guard_.fingerprint) + ")";
  error_ = ErrorCode::kIdempotencyKeyReused;
  Respond(MakeErrorResponse(ErrorCode::kIdempotencyKeyReused, detail), false);
}

void Exchange::RespondError(ErrorCode code, const std::string& detail) {
  error_ = code;
  StoredResponse response = MakeErrorResponse(code, detail);
  if (code == ErrorCode::kMissingCredentials) {
    response.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"idemgate\"");
  }
  Respond(response, false);
}

// Every exchange ends here: counted and logged before the answer leaves (so a client that has
// its answer also sees it in /metrics), then Done. After an early answer (AnswerNow) only Done.
void Exchange::Respond(StoredResponse response, bool replayed) {
  RespondShared(std::make_shared<const StoredResponse>(std::move(response)), replayed);
}

void Exchange::RespondShared(std::shared_ptr<const StoredResponse> response, bool replayed) {
  if (!answered_) SendAnswer(std::move(response), replayed, AnswerHeaders(replayed));
  SetPhase(Phase::kDone);
}

// The exchange's one answer: counted and logged (RecordFinished), then handed to the client.
void Exchange::SendAnswer(std::shared_ptr<const StoredResponse> response, bool replayed,
                          std::string_view extra_headers) {
  answered_ = true;
  status_ = response->status;
  bytes_out_ = response->body.size();
  RecordFinished();
  if (sink_) sink_->SendResponse(std::move(response), replayed, extra_headers);
  sink_ = nullptr;
}

std::shared_ptr<const StoredResponse> Exchange::ShareReplay(Record record) {
  ReplayCache* cache = env_->replay_cache();
  if (!cache) return std::make_shared<const StoredResponse>(std::move(record.response));
  // The record matched this request (in the kind it was stored in), so this request's plain
  // digest is the record's.
  return cache->Keep(guard_.scope, guard_.key, std::move(record), cache_generation_,
                     guard_.legacy_fingerprint);
}

void Exchange::RecordFinished() {
  if (waited_us_ >= 0 && wait_end_ == WaitEnd::kNone) {
    wait_end_ = outcome_ == Outcome::kReplay     ? WaitEnd::kReplayed
                : outcome_ == Outcome::kInFlight ? WaitEnd::kTimedOut
                                                 : WaitEnd::kClaimed;
  }
  RequestReport report;
  report.outcome = outcome_;
  report.protocol = ProtocolOf(request_.http_major, request_.http_minor);
  report.error = error_;
  report.status = status_;
  report.upstream_status = upstream_status_;
  report.upstream_error = upstream_error_kind_;
  report.total_us = env_->MonoUs() - started_us_;
  report.upstream_us = upstream_us_;
  report.wait_end = wait_end_;
  report.wait_us = waited_us_;
  report.method = request_.method;
  report.path = request_.Path();
  report.client_ip = client_ip_;
  report.request_id = request_id_;
  report.error_detail = error_detail_;
  report.attempt = OwnsClaim() ? token_.attempt : 0;
  report.bytes_out = bytes_out_;
  report.client_closed = client_closed_ || sink_ == nullptr;  // the client went first
  if (guard_.kind == GuardKind::kGuarded) {
    report.scope = &guard_.scope;
    report.key = guard_.key;
  }
  RecordReport(*env_, report);
}

}  // namespace idemgate
