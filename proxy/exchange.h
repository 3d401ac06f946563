// The life of one request, as named phases: Route -> Guard -> FastReplay -> Claim -> Forward ->
// Complete -> Respond (count, log, answer, free). An exchange outlives its client connection: once
// a request went upstream its result is stored even if the client has gone.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "proxy/event_util.h"
#include "proxy/guard.h"
#include "proxy/http_message.h"
#include "proxy/upstream.h"
#include "store/store.h"

namespace idemgate {

class ClientConn;
class Worker;

// How an exchange ended, for the access log and metrics.
enum class Outcome {
  kPassthrough,  // not guarded, proxied straight through
  kFresh,        // first execution of a key
  kTakeover,     // re-execution after an expired lease
  kReplay,       // the stored response, replayed
  kInFlight,     // 409: another attempt owns the key
  kMismatch,     // 422: the key was used for a different request
  kRejected,     // the gateway answered an error before anything went upstream
};
const char* OutcomeName(Outcome outcome);

class Exchange {
 public:
  Exchange(Worker* worker, ClientConn* conn, Request request, std::string client_ip);
  ~Exchange();
  void Start();
  // The client connection is gone; the exchange still runs to its end, storing its result.
  void DetachClient() { conn_ = nullptr; }

 private:
  void Guard();
  bool FastPath();
  void Claim();
  void OnClaim(ClaimResult result);
  void Forward();
  int64_t LeaseMarginMs() const;
  // This exchange won the claim (fresh or takeover): it owns the key and runs the attempt.
  bool OwnsClaim() const { return outcome_ == Outcome::kFresh || outcome_ == Outcome::kTakeover; }
  void OnUpstream(UpstreamResult result);
  void CompleteWith(StoredResponse response);
  void SendComplete();
  void OnComplete(const StoreStatus& status);
  void Release(ErrorCode code);
  void RespondInUse(int64_t retry_after_s);
  void RespondMismatch(const Fingerprint& stored);
  void RespondError(ErrorCode code, const std::string& detail = {});
  void Respond(StoredResponse response, bool replayed);
  void RespondShared(std::shared_ptr<const StoredResponse> response, bool replayed);
  std::shared_ptr<const StoredResponse> ShareReplay(Record record);  // [replay cache]
  void RecordFinished();  // metrics and the access log, once per exchange

  // Posts a store result back onto this exchange's loop.
  template <typename Fn>
  void OnLoop(Fn fn);

  Worker* worker_;
  ClientConn* conn_;
  std::shared_ptr<const Config> config_;
  Request request_;
  std::string client_ip_;
  GuardDecision guard_;
  ClaimToken token_;
  StoredResponse pending_;  // the result being made durable by Complete
  // Before the lease ends: the upstream call and the retries of Complete stop here.
  std::chrono::steady_clock::time_point complete_deadline_;
  int64_t complete_backoff_ms_ = 50;
  uint64_t cache_generation_ = 0;  // [replay cache] read before the store was
  Timer retry_timer_;
  const char* proto_;  // "http" or "https": the client connection's, for X-Forwarded-Proto
  Outcome outcome_ = Outcome::kPassthrough;
  int status_ = 0;
  std::optional<ErrorCode> error_;  // the gateway's own error answer, if any
  int upstream_status_ = 0;         // the upstream's status, when it answered
  std::optional<UpstreamError> upstream_error_kind_;
  std::chrono::steady_clock::time_point started_;
  std::chrono::steady_clock::time_point upstream_started_;
  int64_t upstream_us_ = -1;
  size_t bytes_out_ = 0;
};

}  // namespace idemgate
