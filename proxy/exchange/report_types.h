// SPDX-License-Identifier: Apache-2.0
// What a finished request reports, and the metrics and the access log count and write: its
// outcome, how a wait ended, its sample and its access-log entry. Types only, shared by the
// exchange, the relay (conn/) and ops/, so no operations header includes the request path.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "proxy/policy/errors.h"
#include "proxy/upstream/upstream_types.h"

namespace idemgate {

// How an exchange ended, for the access log and metrics.
enum class Outcome {
  kPassthrough,  // not guarded, proxied straight through
  kFresh,        // first execution of a key
  kTakeover,     // re-execution after an expired lease
  kReplay,       // the stored response, replayed
  kInFlight,     // 409: another attempt owns the key
  kMismatch,     // 422: the key was used for a different request
  kLostAttempt,  // C5 (takeover = false): an earlier attempt was lost; answered a stored 502
  kRejected,     // the gateway answered an error before anything went upstream
};
const char* OutcomeName(Outcome outcome);

// The protocol a client's request came in (SPEC §14), for the access log and metrics.
enum class Protocol { kHttp10, kHttp11, kHttp2 };
inline constexpr size_t kProtocolCount = static_cast<size_t>(Protocol::kHttp2) + 1;
const char* ProtocolName(Protocol protocol);  // "HTTP/1.0", "HTTP/1.1", "HTTP/2"
// From a request's version (an HTTP/2 stream's request is 2.0).
Protocol ProtocolOf(int http_major, int http_minor);

// How a duplicate's wait for the first answer ended (SPEC §10), for metrics.
enum class WaitEnd {
  kNone,        // did not wait
  kReplayed,    // the owner's answer came: replayed
  kClaimed,     // the key was released or its lease ran out: claimed again (ran, or was judged)
  kTimedOut,    // the wait ran out: 409
  kClientGone,  // the client went away while waiting
  kShutdown,    // the gateway shut down: 409
};
inline constexpr size_t kWaitEndCount = static_cast<size_t>(WaitEnd::kShutdown) + 1;
const char* WaitEndName(WaitEnd end);

// A store operation, for its latency histogram.
enum class StoreOp { kClaim, kComplete, kRelease };
inline constexpr size_t kStoreOpCount = 3;

// What one finished exchange contributes.
struct ExchangeSample {
  Outcome outcome = Outcome::kPassthrough;
  Protocol protocol = Protocol::kHttp11;
  std::optional<ErrorCode> error;  // the gateway's own error answer, if any
  int upstream_status = 0;         // 0: no upstream response
  std::optional<UpstreamError> upstream_error;
  int64_t total_us = 0;
  int64_t upstream_us = -1;           // -1: nothing went upstream
  WaitEnd wait_end = WaitEnd::kNone;  // a duplicate that waited for a first answer (§10)
  int64_t wait_us = -1;               // -1: did not wait
};

// What one access-log line says. Never the credential, never the raw key.
struct AccessEntry {
  std::chrono::system_clock::time_point time;
  std::string_view method;
  std::string_view path;      // without the query string
  const char* protocol = "";  // "HTTP/1.1", "HTTP/2"; empty = omitted
  std::string_view client_ip;
  std::string_view request_id;  // X-Request-Id; empty = omitted
  int status = 0;
  const char* outcome = "";
  std::optional<ErrorCode> error;
  std::string_view error_detail;  // why (the upstream's or the store's message); empty = omitted
  uint32_t attempt = 0;           // fresh and takeover only; 0 = omitted
  int64_t total_us = 0;
  int64_t upstream_us = -1;  // -1 = nothing went upstream
  int64_t wait_us = -1;      // a duplicate's wait for a first answer (§10); -1 = did not wait
  uint64_t bytes_out = 0;
  std::string key_hash;  // empty = unguarded
  // The client went away before its answer (as nginx: logged as status 499, with the answer it
  // would have had, which a guarded request's retry replays, as answer_status).
  bool client_closed = false;
};

}  // namespace idemgate
