// The life of one request (see exchange.h and README "Life of a request").
#include "proxy/exchange.h"

#include <algorithm>
#include <cstdio>

#include "proxy/access_log.h"
#include "proxy/client_conn.h"
#include "proxy/metrics.h"
#include "proxy/worker.h"

namespace idemgate {

namespace {
// An attempt's upstream call ends this long before its lease (less when the lease leaves less
// room over connect + response timeouts), so its completion lands while it owns the key.
constexpr int64_t kLeaseMarginMs = 1'000;
using Steady = std::chrono::steady_clock;

int64_t MicrosSince(Steady::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(Steady::now() - start).count();
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
    case Outcome::kRejected:
      return "rejected";
  }
  return "unknown";
}

Exchange::Exchange(Worker* worker, ClientConn* conn, Request request, std::string client_ip)
    : worker_(worker),
      conn_(conn),
      config_(worker->gateway().Snapshot()),
      request_(std::move(request)),
      client_ip_(std::move(client_ip)),
      proto_(conn->tls() ? "https" : "http"),
      started_(Steady::now()) {}

Exchange::~Exchange() = default;

template <typename Fn>
void Exchange::OnLoop(Fn fn) {
  worker_->Post(std::move(fn));
}

void Exchange::Start() {
  guard_ = EvaluateGuard(*config_, request_);
  switch (guard_.kind) {
    case GuardKind::kPassthrough:
      outcome_ = Outcome::kPassthrough;
      return Forward();
    case GuardKind::kReject:
      outcome_ = Outcome::kRejected;
      return RespondError(guard_.error, guard_.detail);
    case GuardKind::kGuarded:
      if (!FastPath()) Claim();
      return;
  }
}

// A read that never waits for the writer: completed records never change until they expire,
// and a live lease or a different fingerprint is answered the same way Claim would.
bool Exchange::FastPath() {
  LookupResult found =
      worker_->gateway().store->Lookup(guard_.scope, guard_.key, LookupMode::kNoWait);
  if (found.outcome != LookupOutcome::kFound) return false;
  const Record& record = found.record;
  if (record.fingerprint != guard_.fingerprint) {
    outcome_ = Outcome::kMismatch;
    RespondMismatch(record.fingerprint);
    return true;
  }
  if (record.state == RecordState::kCompleted) {
    outcome_ = Outcome::kReplay;
    Respond(record.response, true);
    return true;
  }
  TimeMs now = worker_->gateway().clock->NowMs();
  if (now < record.lease_until_ms) {
    outcome_ = Outcome::kInFlight;
    RespondInUse((record.lease_until_ms - now + 999) / 1000);
    return true;
  }
  return false;  // an expired lease: Claim decides the takeover atomically
}

void Exchange::Claim() {
  ClaimRequest claim;
  claim.scope = guard_.scope;
  claim.key = guard_.key;
  claim.fingerprint = guard_.fingerprint;
  claim.lease_ms = config_->idempotency.lease_ms;
  claim.ttl_ms = config_->idempotency.ttl_ms;
  Steady::time_point start = Steady::now();
  worker_->gateway().store->Claim(std::move(claim), [this, start](ClaimResult result) {
    int64_t us = MicrosSince(start);
    OnLoop([this, us, result = std::move(result)]() mutable {
      worker_->RecordStoreOp(StoreOp::kClaim, us);
      OnClaim(std::move(result));
    });
  });
}

void Exchange::OnClaim(ClaimResult result) {
  if (!result.status.ok()) {
    outcome_ = Outcome::kRejected;
    return RespondError(ErrorCode::kStoreUnavailable);
  }
  switch (result.outcome) {
    case ClaimOutcome::kFresh:
    case ClaimOutcome::kTakeover:
      outcome_ = result.outcome == ClaimOutcome::kFresh ? Outcome::kFresh : Outcome::kTakeover;
      token_ = std::move(result.token);
      // Past the lease a retry may take over: the upstream's answer and its completion must
      // land before that, with a margin for the completion's own synced write.
      complete_deadline_ =
          Steady::now() + std::chrono::milliseconds(token_.lease_left_ms - LeaseMarginMs());
      return Forward();
    case ClaimOutcome::kReplay:
      outcome_ = Outcome::kReplay;
      return Respond(result.record.response, true);
    case ClaimOutcome::kInFlight:
      outcome_ = Outcome::kInFlight;
      return RespondInUse(result.retry_after_s);
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
  upstream_started_ = Steady::now();
  const bool guarded = OwnsClaim();
  // The claim itself took (nearly) the whole lease: too late to run the attempt safely.
  if (guarded && upstream_started_ >= complete_deadline_) {
    return Release(ErrorCode::kStoreUnavailable);
  }
  UpstreamLimits limits;
  limits.connect_timeout_ms = config_->upstream.connect_timeout_ms;
  limits.response_timeout_ms = config_->upstream.response_timeout_ms;
  limits.max_response_body = config_->limits.max_response_body;
  if (guarded) limits.deadline = complete_deadline_;
  std::string bytes = SerializeUpstreamRequest(request_, client_ip_, proto_);
  worker_->upstream().Send(std::move(bytes), request_.method == "HEAD", limits,
                           [this](UpstreamResult result) { OnUpstream(std::move(result)); });
}

void Exchange::OnUpstream(UpstreamResult result) {
  upstream_us_ = MicrosSince(upstream_started_);
  upstream_error_kind_ = result.error;
  if (result.error == UpstreamError::kNone) upstream_status_ = result.response.status;
  bool guarded = OwnsClaim();
  StoredResponse response;
  switch (result.error) {
    case UpstreamError::kNone:
      response = ToStoredResponse(result.response, request_.method == "HEAD");
      break;
    case UpstreamError::kUnavailable:  // nothing went upstream: nothing to store (R3)
      if (guarded) return Release(ErrorCode::kUpstreamUnavailable);
      return RespondError(ErrorCode::kUpstreamUnavailable);
    case UpstreamError::kFailed:
    case UpstreamError::kTooLarge:  // indeterminate: stored as the result (R4)
      error_ = ErrorCode::kUpstreamFailed;
      response = MakeErrorResponse(ErrorCode::kUpstreamFailed);
      break;
    case UpstreamError::kTimeout:
      error_ = ErrorCode::kUpstreamTimeout;
      response = MakeErrorResponse(ErrorCode::kUpstreamTimeout);
      break;
  }
  if (guarded) return CompleteWith(std::move(response));
  Respond(response, false);
}

void Exchange::CompleteWith(StoredResponse response) {
  pending_ = std::move(response);
  SendComplete();
}

void Exchange::SendComplete() {
  Steady::time_point start = Steady::now();
  worker_->gateway().store->Complete(token_, pending_, [this, start](StoreStatus status) {
    int64_t us = MicrosSince(start);
    OnLoop([this, us, status = std::move(status)]() {
      worker_->RecordStoreOp(StoreOp::kComplete, us);
      OnComplete(status);
    });
  });
}

void Exchange::OnComplete(const StoreStatus& status) {
  if (status.ok()) return Respond(pending_, false);
  error_.reset();  // the upstream's error (if any) is not what the client gets
  if (status.code == StoreCode::kStaleClaim) {
    // C3: this attempt was taken over; only the new owner's result may leave the gateway.
    outcome_ = Outcome::kInFlight;
    return RespondInUse(1);
  }
  // The upstream executed but its result is not durable yet. Retry while the lease holds, so a
  // store that recovers (disk space freed) still records it and no retry can execute twice.
  Steady::time_point next = Steady::now() + std::chrono::milliseconds(complete_backoff_ms_);
  if (status.code != StoreCode::kShutdown && next < complete_deadline_) {
    if (!retry_timer_.initialized()) {
      retry_timer_.Init<Exchange, &Exchange::SendComplete>(worker_->base(), this);
    }
    retry_timer_.Arm(complete_backoff_ms_);
    complete_backoff_ms_ = std::min<int64_t>(complete_backoff_ms_ * 2, 1'000);
    return;
  }
  // Not "nothing went upstream" (503): the outcome is unknown, as for an upstream failure.
  fprintf(stderr, "idemgate: result of an executed request could not be stored: %s\n",
          status.message.c_str());
  RespondError(ErrorCode::kUpstreamFailed,
               "The request was forwarded upstream, but its result could not be recorded; its "
               "outcome is unknown.");
}

void Exchange::Release(ErrorCode code) {
  Steady::time_point start = Steady::now();
  worker_->gateway().store->Release(token_, [this, code, start](StoreStatus status) {
    int64_t us = MicrosSince(start);
    OnLoop([this, code, us, status = std::move(status)]() {
      worker_->RecordStoreOp(StoreOp::kRelease, us);
      if (!status.ok()) {
        // The record stays in flight: retries get 409 until the lease ends, then take over.
        fprintf(stderr, "idemgate: releasing a claim failed: %s\n", status.message.c_str());
      }
      RespondError(code);
    });
  });
}

void Exchange::RespondInUse(int64_t retry_after_s) {
  error_ = ErrorCode::kIdempotencyKeyInUse;
  StoredResponse response = MakeErrorResponse(ErrorCode::kIdempotencyKeyInUse);
  response.headers.emplace_back("Retry-After", std::to_string(std::max<int64_t>(1, retry_after_s)));
  Respond(response, false);
}

void Exchange::RespondMismatch(const Fingerprint& stored) {
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

// Every exchange ends here, exactly once: counted and logged before the answer leaves (so a
// client that has its answer also sees it in /metrics), then freed on the next loop turn.
void Exchange::Respond(const StoredResponse& response, bool replayed) {
  status_ = response.status;
  bytes_out_ = response.body.size();
  RecordFinished();
  if (conn_) conn_->SendResponse(response, replayed);
  conn_ = nullptr;
  worker_->RemoveExchange(this);
}

void Exchange::RecordFinished() {
  int64_t total_us = MicrosSince(started_);
  ExchangeSample sample;
  sample.outcome = outcome_;
  sample.error = error_;
  sample.upstream_status = upstream_status_;
  sample.upstream_error = upstream_error_kind_;
  sample.total_us = total_us;
  sample.upstream_us = upstream_us_;
  worker_->RecordExchange(sample);
  AccessLog* log = worker_->gateway().access_log;
  if (!log) return;
  AccessEntry entry;
  entry.time = std::chrono::system_clock::now();
  entry.method = request_.method;
  entry.path = request_.Path();
  entry.client_ip = client_ip_;
  entry.status = status_;
  entry.outcome = OutcomeName(outcome_);
  entry.error = error_;
  entry.attempt = OwnsClaim() ? token_.attempt : 0;
  entry.total_us = total_us;
  entry.upstream_us = upstream_us_;
  entry.bytes_out = bytes_out_;
  if (guard_.kind == GuardKind::kGuarded) entry.key_hash = KeyHash(guard_.scope, guard_.key);
  log->Write(FormatAccessLine(entry));
}

}  // namespace idemgate
